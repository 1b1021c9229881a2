//! The real reconciler-worker binary: --once, --only, bad arguments, SIGTERM.

use std::process::Stdio;
use std::time::Duration;

use storage::test_db::TestDatabase;
use tokio::process::Command;

fn worker(db: &TestDatabase) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_reconciler-worker"));
    cmd.env("DATABASE_URL", db.url())
        .env("BC_CLOCK", "manual")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

async fn migrated() -> TestDatabase {
    // The template is already migrated; cloning gives a ready database.
    TestDatabase::new().await
}

#[tokio::test(flavor = "multi_thread")]
async fn once_runs_a_round_and_exits_zero() {
    let db = migrated().await;
    let out = worker(&db).arg("--once").output().await.expect("run");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("reconciler-worker started"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_pass_or_argument_is_a_usage_error() {
    let db = migrated().await;
    let out = worker(&db)
        .args(["--once", "--only", "no.such.pass"])
        .output()
        .await
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("no.such.pass"));
    let out = worker(&db).arg("--bogus").output().await.expect("run");
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread")]
async fn stops_cleanly_on_sigterm() {
    let db = migrated().await;
    let mut child = worker(&db)
        .env("BC_INTERVAL_MS", "100")
        .spawn()
        .expect("spawn");
    tokio::time::sleep(Duration::from_millis(700)).await;
    let pid = child.id().expect("pid");
    std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()
        .expect("kill");
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("stops")
        .expect("wait");
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_database_url_is_a_configuration_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_reconciler-worker"))
        .env_remove("DATABASE_URL")
        .arg("--once")
        .output()
        .await
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
}
