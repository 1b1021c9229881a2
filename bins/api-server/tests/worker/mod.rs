//! The real `reconciler-worker` binary, run against a test server's database.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Output;
use std::sync::OnceLock;

use tokio::process::Command;

use crate::common::Server;

/// The worker binary beside the api-server binary, built once per test
/// process so a single-package test run never uses a stale one.
pub fn binary() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let status = std::process::Command::new(option_env!("CARGO").unwrap_or("cargo"))
                .args([
                    "build",
                    "--quiet",
                    "-p",
                    "reconciler-worker",
                    "--bin",
                    "reconciler-worker",
                ])
                .status()
                .expect("run cargo build");
            assert!(status.success(), "building reconciler-worker failed");
            let api = PathBuf::from(env!("CARGO_BIN_EXE_api-server"));
            api.with_file_name("reconciler-worker")
        })
        .clone()
}

/// A worker command for the server's database and manual clock.
pub fn command(s: &Server) -> Command {
    let mut cmd = Command::new(binary());
    cmd.env("DATABASE_URL", s.db.url())
        .env("BC_CLOCK", "manual")
        .env("BC_INTERVAL_MS", "50")
        .env(
            "BC_PROVIDER_ENDPOINTS",
            crate::common::TEST_PROVIDER_ENDPOINTS,
        )
        .env("BC_CREDENTIAL_ENV", "GCE_TOKEN")
        .env(
            "RUST_LOG",
            std::env::var("TEST_WORKER_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .kill_on_drop(true);
    cmd
}

/// Runs `reconciler-worker --once` (optionally `--only` some passes) and
/// asserts it exits 0.
pub async fn once(s: &Server, only: &[&str]) -> Output {
    let mut cmd = command(s);
    cmd.arg("--once");
    for p in only {
        cmd.args(["--only", p]);
    }
    let out = cmd.output().await.expect("run reconciler-worker");
    assert!(
        out.status.success(),
        "worker failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
