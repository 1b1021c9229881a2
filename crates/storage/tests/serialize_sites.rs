//! **Architecture Invariant** (docs/ARCHITECTURE.md): storage knows neither
//! the wire nor the providers, so its rows and answers do not implement
//! `Serialize`; the exceptions are what it stores as JSON and answers as
//! stored, whose serde names are the record's format, defined once. This
//! test reads storage's sources and fails on `Serialize` (derived or
//! implemented, comments aside) in any file not listed below, and on a
//! listed file that no longer needs its place.

mod sources;

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

/// The files under `src` (as `a/b.rs`) whose code, comments aside, names
/// `Serialize` (a derive, an impl or a bound).
fn serializing_files() -> Vec<String> {
    sources::files_where(&["rs"], |code| {
        code.split(|c: char| !c.is_alphanumeric() && c != '_')
            .any(|word| word == "Serialize")
    })
}

#[test]
fn only_stored_formats_implement_serialize() {
    let unlisted: Vec<String> = serializing_files()
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
    let found = serializing_files();
    for (listed, what) in STORED_FORMATS {
        assert!(
            found.iter().any(|f| f == listed),
            "{listed} ({what}) no longer implements Serialize: drop it from the list"
        );
    }
}
