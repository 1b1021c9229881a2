//! **Architecture Invariant** (docs/ARCHITECTURE.md): storage knows neither
//! the wire nor the providers, so its rows and answers do not implement
//! `Serialize`; the exceptions are what it stores as JSON and answers as
//! stored, whose serde names are the record's format, defined once. This
//! test reads storage's sources and fails on `Serialize` (derived or
//! implemented, comments aside) in any file not listed below, and on a
//! listed file that no longer needs its place.

use std::path::{Path, PathBuf};

/// The stored formats, each with what it is. A new entry is a new stored
/// format: name it in docs/ARCHITECTURE.md's invariant too.
const STORED_FORMATS: &[(&str, &str)] = &[
    (
        "model/event_data.rs",
        "an event's payload, the `data` column",
    ),
    (
        "model/pool_vm.rs",
        "a managed pool's VM settings, the `vm` column",
    ),
    ("ops/pools.rs", "a pool's flavors, the `flavors` column"),
    (
        "ops/metering.rs",
        "a usage record's tags, the `tags` column",
    ),
    ("ids/typed.rs", "the typed ids, a string each"),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The files under `src` (as `a/b.rs`) whose code, comments aside, names
/// `Serialize` (a derive, an impl or a bound).
fn serializing_files(src: &Path) -> Vec<String> {
    let mut all = Vec::new();
    rust_files(src, &mut all);
    let mut found = Vec::new();
    for file in all {
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let serializes = text.lines().any(|line| {
            let code = line.trim_start();
            !code.starts_with("//")
                && code
                    .split(|c: char| !c.is_alphanumeric() && c != '_')
                    .any(|word| word == "Serialize")
        });
        if serializes {
            let shown = file.strip_prefix(src).unwrap_or(&file);
            found.push(shown.display().to_string());
        }
    }
    found.sort();
    found
}

#[test]
fn only_stored_formats_implement_serialize() {
    let unlisted: Vec<String> = serializing_files(&src())
        .into_iter()
        .filter(|f| STORED_FORMATS.iter().all(|(listed, _)| listed != f))
        .collect();
    assert!(
        unlisted.is_empty(),
        "storage types that implement Serialize without being a stored format \
         (shape the wire in api-server, or list the stored format here): {unlisted:?}"
    );
}

/// Every listed file still serializes: a stale entry would let a new wire
/// type in unseen.
#[test]
fn every_listed_format_is_found() {
    let found = serializing_files(&src());
    for (listed, what) in STORED_FORMATS {
        assert!(
            found.iter().any(|f| f == listed),
            "{listed} ({what}) no longer implements Serialize: drop it from the list"
        );
    }
}
