//! The demo world of `just run` (`demo-seed`, `bins/demo`), seeded into a
//! test server the way `scripts/run.sh` does it: the fresh database's manual
//! clock set back three days, the seeder run against the API and the fake,
//! then one worker round to meter the history it played.

use std::path::PathBuf;

use diesel_async::RunQueryDsl;
use serde_json::Value;

use super::db::db;
use super::gce::Gce;
use super::server::{ROOT_TOKEN, Server, sibling_binary};
use super::worker;

/// The `demo-seed` executable beside the api-server binary under test
/// (built by `cargo test --workspace`, as the worker is).
pub fn path() -> PathBuf {
    sibling_binary("demo-seed", "cargo build --workspace --bins")
}

/// Runs `demo-seed` against `s` and `gce` and answers its JSON summary.
pub async fn run_seeder(s: &Server, gce: &Gce) -> Value {
    run_seeder_at(&s.url, &gce.url).await
}

/// Runs `demo-seed` against the api-server at `api` and fake-gce at `fake`
/// and answers its JSON summary.
pub async fn run_seeder_at(api: &str, fake: &str) -> Value {
    let out = tokio::process::Command::new(path())
        .env("BC_API", api)
        .env("BC_TOKEN", ROOT_TOKEN)
        .env("BC_FAKE_GCE", fake)
        .output()
        .await
        .expect("run demo-seed");
    assert!(
        out.status.success(),
        "demo-seed failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("demo-seed prints JSON")
}

/// Seeds the demo world with its three days of history and meters them, as
/// `just run` does on a fresh database; answers the seeder's summary.
pub async fn seed(s: &Server, gce: &Gce) -> Value {
    let mut conn = db(s).await;
    diesel::sql_query(
        "UPDATE manual_clock SET now_ms = \
         (floor(extract(epoch FROM now()) / 3600) * 3600 - 3 * 86400)::bigint * 1000",
    )
    .execute(&mut conn)
    .await
    .expect("set the manual clock back");
    let summary = run_seeder(s, gce).await;
    worker::once(s, &[]).await;
    summary
}
