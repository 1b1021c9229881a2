//! Rebuilds when a migration changes (they are embedded) and records a digest
//! of their SQL, which names the test template database.

use std::path::Path;

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            println!("cargo:rerun-if-changed={}", path.display());
            for f in ["up.sql", "down.sql"] {
                files.push(path.join(f));
            }
        }
    }
    files.sort();
    // FNV-1a over every migration file: stable and dependency-free.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for f in files {
        for b in f
            .to_string_lossy()
            .bytes()
            .chain(std::fs::read(&f).unwrap_or_default())
        {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    println!("cargo:rustc-env=BC_MIGRATIONS_DIGEST={hash:016x}");
}
