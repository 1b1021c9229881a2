//! The real `reconciler-worker` binary, run against a test server's
//! database: one pass at a time (`--once`) or as a long-running process.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use super::server::{Server, TEST_PROVIDER_ENDPOINTS, sibling_binary};

/// The `reconciler-worker` executable beside the api-server binary under
/// test. The tests never build it: `cargo test --workspace` (and `just
/// test`) build it for the reconciler-worker package's own tests.
pub fn path() -> PathBuf {
    sibling_binary("reconciler-worker", "cargo build -p reconciler-worker")
}

/// A worker command for the server's database and manual clock.
pub fn command(s: &Server) -> Command {
    command_for(s.db.product_url())
}

/// A worker command for `database_url` and the manual clock.
pub fn command_for(database_url: &str) -> Command {
    let mut cmd = Command::new(path());
    cmd.env("DATABASE_URL", database_url)
        .env("BC_CLOCK", "manual")
        .env("BC_INTERVAL_MS", "50")
        .env("BC_PROVIDER_ENDPOINTS", TEST_PROVIDER_ENDPOINTS)
        .env("BC_CREDENTIAL_ENV", "GCE_TOKEN")
        // Provider retries wait 10 ms, not 500 ms, between tries.
        .env("BC_PROVIDER_RETRY_DELAY_MS", "10")
        .env(
            "RUST_LOG",
            std::env::var("TEST_WORKER_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .kill_on_drop(true);
    cmd
}

/// Runs `reconciler-worker --once` (optionally `--only` some passes) with
/// extra env, returning its exit status and stderr (it is not asserted to
/// succeed).
pub async fn once_with(s: &Server, only: &[&str], env: &[(&str, &str)]) -> (ExitStatus, String) {
    let mut cmd = command(s);
    cmd.arg("--once");
    for p in only {
        cmd.args(["--only", p]);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().await.expect("run reconciler-worker");
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// As [`once_with`], asserting the worker exits 0; returns its stderr.
async fn once_ok(s: &Server, only: &[&str], env: &[(&str, &str)]) -> String {
    let (status, err) = once_with(s, only, env).await;
    assert!(status.success(), "worker failed: {err}");
    err
}

/// Runs `reconciler-worker --once` (optionally `--only` some passes) and
/// asserts it exits 0.
pub async fn once(s: &Server, only: &[&str]) {
    once_ok(s, only, &[]).await;
}

/// As [`once`] with plain-text info logs; returns its stderr.
pub async fn once_logged(s: &Server, only: &[&str]) -> String {
    once_logged_with(s, only, &[]).await
}

/// As [`once_logged`] with extra env.
pub async fn once_logged_with(s: &Server, only: &[&str], env: &[(&str, &str)]) -> String {
    let mut all = vec![("RUST_LOG", "info"), ("NO_COLOR", "1")];
    all.extend_from_slice(env);
    once_ok(s, only, &all).await
}

/// A long-running worker process whose stderr is collected.
pub struct Running {
    child: Child,
    stderr: JoinHandle<String>,
}

impl Running {
    /// Spawns `cmd` (from [`command`]) with stderr captured.
    pub fn spawn(mut cmd: Command) -> Running {
        cmd.stderr(Stdio::piped()).stdout(Stdio::null());
        let mut child = cmd.spawn().expect("spawn reconciler-worker");
        let mut err = child.stderr.take().expect("stderr");
        let stderr = tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = err.read_to_end(&mut buf).await;
            String::from_utf8_lossy(&buf).into_owned()
        });
        Running { child, stderr }
    }

    /// Stops it with SIGTERM; returns its exit status and stderr.
    pub async fn terminate(mut self) -> (ExitStatus, String) {
        let pid = self.child.id().expect("pid");
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status();
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("worker stops within 30 s of SIGTERM")
            .expect("wait");
        let err = self.stderr.await.expect("stderr task");
        (status, err)
    }

    /// Terminates a replica that must exit 0 with no failed pass; returns
    /// its stderr.
    pub async fn terminate_clean(self) -> String {
        let (status, err) = self.terminate().await;
        assert!(status.success(), "replica exit {status:?}: {err}");
        assert!(
            !err.contains("pass failed"),
            "a replica's pass failed: {err}"
        );
        err
    }

    /// Kills it with SIGKILL; returns its stderr so far.
    pub async fn kill(mut self) -> String {
        self.child.start_kill().expect("SIGKILL");
        let _ = self.child.wait().await.expect("wait");
        self.stderr.await.expect("stderr task")
    }
}

/// Whether a log line names `pass` as its `pass` field (`pass=x` or `pass="x"`).
pub fn names_pass(line: &str, pass: &str) -> bool {
    line.contains(&format!("pass={pass} ")) || line.contains(&format!("pass=\"{pass}\""))
}

/// The `key=value` counts of the last "pass done" line of `pass` in a
/// worker's plain-text log (`NO_COLOR=1`, `RUST_LOG=info`).
pub fn pass_counts(stderr: &str, pass: &str) -> Option<BTreeMap<String, u64>> {
    let line = stderr
        .lines()
        .rfind(|l| l.contains("pass done") && names_pass(l, pass))?;
    // `... pass done pass=vps.grants elapsed_ms=3 report=transitions=0, records=2`
    let mut out = BTreeMap::new();
    for word in line.split([' ', ',']) {
        let parts: Vec<&str> = word.split('=').collect();
        if let [.., k, v] = parts.as_slice()
            && let Ok(n) = v.parse::<u64>()
        {
            out.insert((*k).to_owned(), n);
        }
    }
    Some(out)
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}
