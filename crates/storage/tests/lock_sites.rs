//! **Architecture Invariant** (docs/ARCHITECTURE.md): every row lock is a
//! function of `storage::locks`, or taken in a file its documentation
//! names. This test reads storage's sources (Rust and SQL) and fails on a
//! file that takes a lock (`FOR UPDATE`, `FOR SHARE`, their diesel forms,
//! an advisory lock) without being `locks.rs` or named in its documentation,
//! so a new lock cannot appear out of sight of the lock order.

use std::path::{Path, PathBuf};

/// What takes a lock, as written in SQL or with diesel.
const LOCKING: &[&str] = &[
    "FOR UPDATE",
    "FOR NO KEY UPDATE",
    "FOR SHARE",
    "FOR KEY SHARE",
    ".for_update()",
    ".for_no_key_update()",
    ".for_share()",
    ".for_key_share()",
    "pg_advisory",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs" || x == "sql") {
            out.push(path);
        }
    }
}

/// The files under `src` (as `a/b.rs`) whose code, comments aside, locks.
fn locking_files(src: &Path) -> Vec<String> {
    let mut all = Vec::new();
    files(src, &mut all);
    let mut found = Vec::new();
    for file in all {
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let locks = text.lines().any(|line| {
            let code = line.trim_start();
            !code.starts_with("//")
                && !code.starts_with("--")
                && LOCKING.iter().any(|l| code.contains(l))
        });
        if locks {
            let shown = file.strip_prefix(src).unwrap_or(&file);
            found.push(shown.display().to_string());
        }
    }
    found.sort();
    found
}

/// `locks.rs`'s module documentation.
fn lock_doc(src: &Path) -> String {
    let text =
        std::fs::read_to_string(src.join("locks.rs")).unwrap_or_else(|e| panic!("locks.rs: {e}"));
    text.lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_file_that_locks_is_the_lock_module_or_named_in_it() {
    let src = src();
    let doc = lock_doc(&src);
    let unnamed: Vec<String> = locking_files(&src)
        .into_iter()
        .filter(|f| f != "locks.rs" && !doc.contains(&format!("`{f}`")))
        .collect();
    assert!(
        unnamed.is_empty(),
        "files that take locks without a place in storage::locks' order \
         (move the lock into locks.rs, or name the file there with its place): {unnamed:?}"
    );
}

/// The check sees the locks it looks for: `locks.rs` itself and the claims
/// it names are found.
#[test]
fn the_check_finds_the_known_sites() {
    let found = locking_files(&src());
    for known in ["locks.rs", "ops/sql/vms_claim_steps.sql", "ops/webhooks.rs"] {
        assert!(
            found.iter().any(|f| f == known),
            "{known} not found in {found:?}"
        );
    }
}
