//! **Architecture Invariant** (docs/ARCHITECTURE.md): every row lock is a
//! function of `storage::locks`, or taken in a file its documentation
//! names. This test reads storage's sources (Rust and SQL) and fails on a
//! file that takes a lock (`FOR UPDATE`, `FOR SHARE`, their diesel forms,
//! an advisory lock) without being `locks.rs` or named in its documentation,
//! so a new lock cannot appear out of sight of the lock order.

mod sources;

use std::path::Path;

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

/// The files under `src` (as `a/b.rs`) whose code, comments aside, locks.
fn locking_files() -> Vec<String> {
    sources::files_where(&["rs", "sql"], |code| {
        LOCKING.iter().any(|l| code.contains(l))
    })
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
    let src = sources::src();
    let doc = lock_doc(&src);
    let unnamed: Vec<String> = locking_files()
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
    let found = locking_files();
    for known in ["locks.rs", "ops/sql/vms_claim_steps.sql", "ops/webhooks.rs"] {
        assert!(
            found.iter().any(|f| f == known),
            "{known} not found in {found:?}"
        );
    }
}
