//! What the architecture guards share: storage's sources, read as text.

use std::path::{Path, PathBuf};

/// Storage's `src` folder.
pub fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn walk(dir: &Path, extensions: &[&str], out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .path();
        if path.is_dir() {
            walk(&path, extensions, out);
        } else if path
            .extension()
            .is_some_and(|x| extensions.iter().any(|e| x == *e))
        {
            out.push(path);
        }
    }
}

/// The files under `src` with one of `extensions` whose code (Rust and SQL
/// comments aside) has a line for which `hit` is true, as `a/b.rs`, sorted.
pub fn files_where(extensions: &[&str], hit: impl Fn(&str) -> bool) -> Vec<String> {
    let src = src();
    let mut all = Vec::new();
    walk(&src, extensions, &mut all);
    let mut found = Vec::new();
    for file in all {
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let hits = text.lines().any(|line| {
            let code = line.trim_start();
            !code.starts_with("//") && !code.starts_with("--") && hit(code)
        });
        if hits {
            let shown = file.strip_prefix(&src).unwrap_or(&file);
            found.push(shown.display().to_string());
        }
    }
    found.sort();
    found
}
