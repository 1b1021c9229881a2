//! The real processes: private databases on the server, the release
//! `api-server` on an ephemeral port, `reconciler-worker --once`, and their
//! memory as the kernel reports it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The bootstrap token of the benchmark's api-server.
pub const ROOT_TOKEN: &str = "bck_benchrootbootstraptoken00000000000000000000000";

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")))
}

/// A release binary of the workspace (built by `just bench`).
pub fn release_binary(name: &str) -> anyhow::Result<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from);
    let path = target.join("release").join(name);
    if !path.is_file() {
        bail!(
            "{} not found: build it with \
             `cargo build --release -p api-server -p reconciler-worker` (`just bench` does)",
            path.display()
        );
    }
    Ok(path)
}

/// A database of the benchmark's own on the server, dropped at the end.
pub struct Database {
    /// Its name.
    pub name: String,
    /// Its URL.
    pub url: String,
    server_url: String,
}

impl Database {
    /// Creates an empty database `bench_{tag}_{pid}` (dropping a leftover).
    pub async fn create(server_url: &str, tag: &str) -> anyhow::Result<Database> {
        let name = format!("bench_{tag}_{}", std::process::id());
        let mut conn = storage::db::establish(server_url)
            .await
            .with_context(|| format!("connecting to {server_url}"))?;
        diesel::sql_query(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut conn)
            .await?;
        diesel::sql_query(format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await?;
        Ok(Database {
            url: storage::db::with_database(server_url, &name),
            name,
            server_url: server_url.to_owned(),
        })
    }

    /// A new connection to it.
    pub async fn connect(&self) -> anyhow::Result<AsyncPgConnection> {
        Ok(storage::db::establish(&self.url).await?)
    }

    /// `n` new connections.
    pub async fn connections(&self, n: usize) -> anyhow::Result<Vec<AsyncPgConnection>> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.connect().await?);
        }
        Ok(out)
    }

    /// Drops it.
    pub async fn drop_now(self) -> anyhow::Result<()> {
        let mut conn = storage::db::establish(&self.server_url).await?;
        diesel::sql_query(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ))
        .execute(&mut conn)
        .await?;
        Ok(())
    }
}

/// The running api-server.
pub struct ApiServer {
    /// `127.0.0.1:PORT`
    pub addr: std::net::SocketAddr,
    /// Its process id.
    pub pid: u32,
    child: Child,
}

impl ApiServer {
    /// Starts the release binary with `BC_CLOCK={clock}` on `db`; its log
    /// (stderr, filter `log_filter`) goes to `log`.
    pub async fn start(
        db: &Database,
        clock: &str,
        log_filter: &str,
        log: &Path,
    ) -> anyhow::Result<ApiServer> {
        let bin = release_binary("api-server")?;
        let log_file =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let mut child = Command::new(&bin)
            .env("DATABASE_URL", &db.url)
            .env("BC_LISTEN", "127.0.0.1:0")
            .env("BC_CLOCK", clock)
            .env("BC_BOOTSTRAP_TOKEN", ROOT_TOKEN)
            .env("BC_DB_POOL_SIZE", "16")
            // The figures measure the server at its ceiling, far above any
            // one tenant's request rate: the rates are off.
            .env("BC_TENANT_RATE", "0")
            .env("BC_ANON_RATE", "0")
            .env("BC_SECRETS_KEY", secrets_key())
            // Figure 6's hostile tenant points its webhooks there.
            .env(
                "BC_WEBHOOK_ENDPOINTS",
                format!("http://{}", crate::hooks::BLACKHOLE),
            )
            .env("RUST_LOG", log_filter)
            .env_remove("RUST_LOG_FORMAT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let pid = child.id().context("api-server pid")?;
        let stdout = child.stdout.take().context("api-server stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .context("api-server did not start within 60 s")??
            .with_context(|| {
                format!(
                    "api-server exited before listening (log: {})",
                    log.display()
                )
            })?;
        let addr = line
            .strip_prefix("api-server listening on http://")
            .with_context(|| format!("unexpected ready line {line:?}"))?
            .parse()?;
        Ok(ApiServer { addr, pid, child })
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Peak resident set size so far (VmHWM), in bytes.
    pub fn peak_rss(&self) -> anyhow::Result<u64> {
        status_kib(self.pid, "VmHWM:").map(|k| k * 1024)
    }

    /// Current resident set size (VmRSS), in bytes.
    pub fn rss(&self) -> anyhow::Result<u64> {
        status_kib(self.pid, "VmRSS:").map(|k| k * 1024)
    }

    /// Resets the peak (VmHWM) to the current RSS (`clear_refs` 5). Returns
    /// false when the kernel refuses.
    pub fn reset_peak_rss(&self) -> bool {
        std::fs::write(format!("/proc/{}/clear_refs", self.pid), "5").is_ok()
    }

    /// SIGTERM, then wait (kill after 30 s).
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.pid.to_string())
            .status();
        if tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .is_err()
        {
            self.child.kill().await?;
        }
        Ok(())
    }
}

fn status_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .with_context(|| format!("no {field} in /proc/{pid}/status"))?;
    Ok(line
        .trim_start_matches(field)
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()?)
}

/// What one `reconciler-worker --once` run reported.
#[derive(Debug, Clone)]
pub struct WorkerRun {
    /// Wall time of the process, start to exit.
    pub wall: Duration,
    /// The pass's own `elapsed_ms`.
    pub pass: Duration,
    /// The pass's `records` count.
    pub records: u64,
    /// Whether it exited 0.
    pub ok: bool,
    /// The pass's log line (or the error).
    pub line: String,
}

/// Runs `reconciler-worker --once --only {pass}` with the manual clock.
pub async fn run_worker_once(db_url: &str, pass: &str) -> anyhow::Result<WorkerRun> {
    let bin = release_binary("reconciler-worker")?;
    let start = Instant::now();
    let out = Command::new(&bin)
        .args(["--once", "--only", pass])
        .env("DATABASE_URL", db_url)
        .env("BC_CLOCK", "manual")
        .env("RUST_LOG", "info")
        .env("RUST_LOG_FORMAT", "json")
        .stdin(Stdio::null())
        .output()
        .await
        .with_context(|| format!("running {}", bin.display()))?;
    let wall = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut run = WorkerRun {
        wall,
        pass: Duration::ZERO,
        records: 0,
        ok: out.status.success(),
        line: String::new(),
    };
    let mut cause = None;
    for line in stderr.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let text = |key: &str| v.get(key).and_then(serde_json::Value::as_str);
        if text("target") == Some("storage::error") {
            // The storage layer logs the cause an INTERNAL error hides.
            cause = text("error").map(str::to_owned);
        }
        if text("pass") != Some(pass) {
            continue;
        }
        let elapsed_ms = v.get("elapsed_ms").and_then(serde_json::Value::as_u64);
        run.pass = Duration::from_millis(elapsed_ms.unwrap_or(0));
        let report = text("report").unwrap_or_default();
        run.records = report
            .split(", ")
            .find_map(|kv| kv.strip_prefix("records="))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        run.line = text("error").map_or_else(|| report.to_owned(), |e| format!("error: {e}"));
    }
    if let Some(c) = cause {
        run.line = format!("{}: {c}", run.line);
    }
    if run.line.is_empty() {
        run.line = stderr.lines().last().unwrap_or_default().to_owned();
    }
    Ok(run)
}

/// A secret store key made for this run (32 random bytes, base64): the
/// webhooks' signing secrets need one, in the api-server and the worker.
pub fn secrets_key() -> &'static str {
    static KEY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        use std::io::Read;
        let mut bytes = [0u8; 32];
        if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
            let _ = f.read_exact(&mut bytes);
        }
        data_encoding::BASE64.encode(&bytes)
    })
}

/// Starts the release `reconciler-worker --only {pass}` on `db` with the
/// manual clock, the run's secrets key, `env` and its output discarded; it
/// is killed when dropped.
pub fn spawn_worker(
    db: &Database,
    pass: &str,
    env: &[(&str, &str)],
) -> anyhow::Result<tokio::process::Child> {
    let bin = release_binary("reconciler-worker")?;
    let mut cmd = Command::new(&bin);
    cmd.args(["--only", pass])
        .env("DATABASE_URL", &db.url)
        .env("BC_CLOCK", "manual")
        .env("BC_SECRETS_KEY", secrets_key())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn()
        .with_context(|| format!("starting {}", bin.display()))
}
