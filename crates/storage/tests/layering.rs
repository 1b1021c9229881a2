//! **Architecture Invariant** (docs/ARCHITECTURE.md): storage never calls a
//! provider and never builds an HTTP client. This test reads storage's
//! manifest and fails when it depends on `providers`, `control` or an HTTP
//! stack, so the layering cannot be crossed by a new dependency.

/// What storage may not depend on, with why.
const FORBIDDEN: &[(&str, &str)] = &[
    (
        "providers",
        "the provider adapters: storage never calls a provider",
    ),
    ("control", "control uses storage, not the other way round"),
    ("reqwest", "an HTTP client"),
    ("hyper", "an HTTP stack"),
    ("hyper-util", "an HTTP stack"),
];

/// The dependency names of every `[*dependencies]` table of the manifest.
fn dependencies(manifest: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line.trim_matches(['[', ']']).ends_with("dependencies");
            continue;
        }
        if in_deps && let Some((name, _)) = line.split_once('=') {
            names.push(name.trim().trim_matches('"').to_owned());
        }
    }
    names
}

#[test]
fn storage_depends_on_no_provider_and_no_http_stack() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let manifest = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let deps = dependencies(&manifest);
    assert!(
        deps.iter().any(|d| d == "diesel"),
        "the manifest's dependencies: {deps:?}"
    );
    let crossed: Vec<&str> = FORBIDDEN
        .iter()
        .filter(|(name, _)| deps.iter().any(|d| d == name))
        .map(|(name, _)| *name)
        .collect();
    assert!(
        crossed.is_empty(),
        "storage depends on {crossed:?}: {FORBIDDEN:?}"
    );
}
