//! **Architecture Invariant:** the provider's vocabulary has one home. Its
//! statuses and error codes (`RUNNING`, `TERMINATED`,
//! `ZONE_RESOURCE_POOL_EXHAUSTED`, `notFound`, ...) are spelled only in
//! `providers` (which parses its wire) and in `grants_core::vm::status`
//! (the typed words every layer shares), and a step's failure codes
//! (`not-found`, `name-taken`, ...; `timeout` aside, a word too common to
//! police) only in the latter: `control`, `storage`
//! and the worker speak `VmStatus` and `StepFailure`. This test reads their
//! sources (comments and tests aside) and fails on any such literal.

use std::path::{Path, PathBuf};

/// The words, as they would appear quoted in Rust (`"X"`) or SQL (`'X'`).
const WORDS: &[&str] = &[
    // Compute Engine's VM statuses and operation statuses.
    "PROVISIONING",
    "STAGING",
    "RUNNING",
    "STOPPING",
    "STOPPED",
    "TERMINATED",
    "SUSPENDING",
    "SUSPENDED",
    "REPAIRING",
    "DEPROVISIONING",
    "PENDING",
    "DONE",
    // Its error codes and reasons.
    "ZONE_RESOURCE_POOL_EXHAUSTED",
    "CONDITION_NOT_MET",
    "RESOURCE_NOT_READY",
    "UNREACHABLE",
    "rateLimitExceeded",
    "resourceNotReady",
    "alreadyExists",
    "notFound",
    // A step's failure codes.
    "not-found",
    "name-taken",
    "no-account",
    "provider-error",
];

/// The layers that must speak the typed words only.
const LAYERS: &[&str] = &[
    "crates/control/src",
    "crates/storage/src",
    "bins/reconciler-worker/src",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap_or_else(|| panic!("no workspace root above {}", env!("CARGO_MANIFEST_DIR")))
        .to_path_buf()
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if path.is_dir() {
            if name != "tests" {
                sources(&path, out);
            }
        } else if name != "tests.rs" && (name.ends_with(".rs") || name.ends_with(".sql")) {
            out.push(path);
        }
    }
}

/// Every `file:line` of `layers` holding one of `words` as a literal.
fn offenders(root: &Path, layers: &[&str], words: &[&str]) -> Vec<String> {
    let mut files = Vec::new();
    for layer in layers {
        sources(&root.join(layer), &mut files);
    }
    let mut found = Vec::new();
    for file in files {
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("#[cfg(test)]") {
                break;
            }
            if code.starts_with("//") || code.starts_with("--") {
                continue;
            }
            for word in words {
                if code.contains(&format!("\"{word}\"")) || code.contains(&format!("'{word}'")) {
                    let shown = file
                        .strip_prefix(root)
                        .unwrap_or(&file)
                        .display()
                        .to_string();
                    found.push(format!("{shown}:{}: {word}", n + 1));
                }
            }
        }
    }
    found
}

#[test]
fn control_storage_and_the_worker_spell_no_provider_word() {
    let found = offenders(&workspace(), LAYERS, WORDS);
    assert!(
        found.is_empty(),
        "provider words outside providers and grants_core::vm::status \
         (use VmStatus, StepFailure or a providers function):\n{}",
        found.join("\n")
    );
}

/// The check finds what it looks for: the typed words' own home spells
/// them all.
#[test]
fn the_check_finds_the_words_where_they_live() {
    let found = offenders(
        &workspace(),
        &["crates/grants-core/src/vm"],
        &["RUNNING", "TERMINATED", "not-found", "name-taken"],
    );
    assert!(found.len() >= 4, "{found:?}");
}
