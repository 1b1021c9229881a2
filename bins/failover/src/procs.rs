//! The product's real binaries (fake-gce, api-server, reconciler-worker),
//! found beside this one, each logging to a file.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The bootstrap token of the api-server.
pub const ROOT_TOKEN: &str = "bck_failoverrootbootstraptoken00000000000000000000";

/// A binary of the workspace beside this one (`cargo build --workspace
/// --bins` puts them all in one directory).
pub fn binary(name: &str) -> anyhow::Result<PathBuf> {
    let path = std::env::current_exe()?.with_file_name(name);
    if !path.is_file() {
        bail!(
            "{} not found; build the binaries first (`cargo build --workspace --bins`)",
            path.display()
        );
    }
    Ok(path)
}

/// A child process killed when dropped.
pub struct Proc {
    /// What it is, for messages.
    pub name: String,
    /// Its stderr log.
    pub log: PathBuf,
    child: Child,
}

impl Proc {
    /// Whether it still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, then waits (SIGKILL after 20 s).
    pub async fn terminate(mut self) -> anyhow::Result<ExitStatus> {
        if let Some(pid) = self.child.id() {
            crate::cluster::signal("-TERM", pid)?;
        }
        match tokio::time::timeout(Duration::from_secs(20), self.child.wait()).await {
            Ok(status) => Ok(status?),
            Err(_) => {
                self.child.kill().await?;
                bail!("{} did not stop within 20 s of SIGTERM", self.name)
            }
        }
    }
}

fn log_file(dir: &Path, name: &str) -> anyhow::Result<(PathBuf, std::fs::File)> {
    let path = dir.join(format!("{name}.log"));
    let file = std::fs::File::create(&path)?;
    Ok((path, file))
}

/// Spawns `cmd` with stderr to `logs/{name}.log`; when `ready_prefix` is
/// given, waits for the stdout line starting with it and returns its rest.
async fn spawn(
    mut cmd: Command,
    logs: &Path,
    name: &str,
    ready_prefix: Option<&str>,
) -> anyhow::Result<(Proc, String)> {
    let (log, file) = log_file(logs, name)?;
    cmd.stderr(Stdio::from(file)).kill_on_drop(true);
    cmd.stdout(if ready_prefix.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = cmd.spawn().with_context(|| format!("spawning {name}"))?;
    let mut rest = String::new();
    if let Some(prefix) = ready_prefix {
        let stdout = child.stdout.take().context("stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .with_context(|| format!("{name} did not start within 60 s"))??
            .with_context(|| format!("{name} exited before it was ready (see {log:?})"))?;
        rest = line
            .strip_prefix(prefix)
            .with_context(|| format!("{name}'s ready line: {line:?}"))?
            .to_owned();
        // Keep reading stdout so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    }
    let proc = Proc {
        name: name.to_owned(),
        log,
        child,
    };
    Ok((proc, rest))
}

/// Starts fake-gce on a free port; returns it and its URL.
pub async fn fake_gce(logs: &Path) -> anyhow::Result<(Proc, String)> {
    let mut cmd = Command::new(binary("fake-gce")?);
    cmd.env("BC_FAKE_GCE_LISTEN", "127.0.0.1:0")
        .env("RUST_LOG", "warn");
    spawn(cmd, logs, "fake-gce", Some("fake-gce listening on ")).await
}

/// The environment the api-server and the workers share.
fn product_env(cmd: &mut Command, database_url: &str) {
    cmd.env("DATABASE_URL", database_url)
        .env("BC_CLOCK", "manual")
        .env("BC_PROVIDER_ENDPOINTS", "http://127.0.0.1:*")
        .env("BC_PROVIDER_RETRY_DELAY_MS", "10")
        .env("NO_COLOR", "1")
        .env(
            "RUST_LOG",
            std::env::var("FAILOVER_LOG").unwrap_or_else(|_| "warn".into()),
        );
}

/// Starts the api-server on a free port; returns it and its URL.
pub async fn api_server(logs: &Path, database_url: &str) -> anyhow::Result<(Proc, String)> {
    let mut cmd = Command::new(binary("api-server")?);
    product_env(&mut cmd, database_url);
    cmd.env("BC_LISTEN", "127.0.0.1:0")
        .env("BC_BOOTSTRAP_TOKEN", ROOT_TOKEN)
        .env("BC_DB_POOL_SIZE", "8");
    spawn(cmd, logs, "api-server", Some("api-server listening on ")).await
}

/// Starts a long-running reconciler-worker (a pass every `interval_ms`).
pub async fn worker(
    logs: &Path,
    database_url: &str,
    name: &str,
    interval_ms: u64,
) -> anyhow::Result<Proc> {
    let mut cmd = Command::new(binary("reconciler-worker")?);
    product_env(&mut cmd, database_url);
    cmd.env("BC_INTERVAL_MS", interval_ms.to_string());
    Ok(spawn(cmd, logs, name, None).await?.0)
}

/// Runs `reconciler-worker --once`; fails unless every pass succeeded.
pub async fn worker_once(logs: &Path, database_url: &str) -> anyhow::Result<()> {
    let mut cmd = Command::new(binary("reconciler-worker")?);
    product_env(&mut cmd, database_url);
    let (log, file) = log_file(logs, "worker-once")?;
    let status = cmd
        .arg("--once")
        .stdout(Stdio::null())
        .stderr(Stdio::from(file))
        .status()
        .await?;
    if !status.success() {
        bail!(
            "reconciler-worker --once failed ({status}):\n{}",
            crate::cluster::tail(&log, 20)
        );
    }
    Ok(())
}
