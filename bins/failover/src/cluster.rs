//! A primary and a streaming standby on loopback, as the `postgres` user when
//! run as root: initdb, `pg_basebackup -R`, synchronous replication, SIGKILL
//! of the primary, promotion of the standby.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// The primary's port. Both ports are below Linux's ephemeral range
/// (32768-60999), so no client connection of an earlier step (a pooler's
/// server connections, say) can hold them as its local port.
pub const PRIMARY_PORT: u16 = 29350;
/// The standby's port.
pub const STANDBY_PORT: u16 = 29351;
/// The standby's `application_name`, the one `synchronous_standby_names`
/// waits for.
pub const STANDBY_NAME: &str = "standby1";
/// The database the product runs on.
pub const DATABASE: &str = "failover";

/// The two servers' directories under one temporary root.
pub struct Cluster {
    /// The temporary root (removed by the guard).
    pub root: PathBuf,
    bin: PathBuf,
    as_postgres: bool,
}

/// One server of the pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Node {
    /// Started first; killed.
    Primary,
    /// Streams from the primary; promoted.
    Standby,
}

impl Node {
    fn dir(self) -> &'static str {
        match self {
            Node::Primary => "primary",
            Node::Standby => "standby",
        }
    }

    /// Its port.
    pub fn port(self) -> u16 {
        match self {
            Node::Primary => PRIMARY_PORT,
            Node::Standby => STANDBY_PORT,
        }
    }
}

/// The directory of the PostgreSQL server binaries: `PG_BIN`, else the
/// newest `/usr/lib/postgresql/*/bin` holding `pg_basebackup`.
fn find_bin() -> anyhow::Result<PathBuf> {
    if let Ok(dir) = std::env::var("PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .context("PostgreSQL server binaries: /usr/lib/postgresql (or set PG_BIN)")?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|d| d.join("pg_basebackup").is_file() && d.join("initdb").is_file())
        .collect();
    found.sort();
    found
        .pop()
        .context("no /usr/lib/postgresql/*/bin with initdb and pg_basebackup (or set PG_BIN)")
}

fn is_root() -> bool {
    // /proc/self/status: "Uid:\treal\teffective\t...".
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|u| u.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

impl Cluster {
    /// A fresh root `/tmp/bc-failover-PID` (nothing started yet).
    pub fn new() -> anyhow::Result<Cluster> {
        let root = PathBuf::from(format!("/tmp/bc-failover-{}", std::process::id()));
        if root.exists() {
            std::fs::remove_dir_all(&root).with_context(|| format!("removing {root:?}"))?;
        }
        std::fs::create_dir_all(root.join("logs"))?;
        let cluster = Cluster {
            root,
            bin: find_bin()?,
            as_postgres: is_root(),
        };
        if cluster.as_postgres {
            // PostgreSQL refuses to run as root: the servers run as `postgres`
            // on directories it owns.
            cluster.run(
                Command::new("chown")
                    .args(["postgres:postgres"])
                    .arg(&cluster.root),
            )?;
        }
        Ok(cluster)
    }

    /// Where logs go.
    pub fn logs(&self) -> PathBuf {
        self.root.join("logs")
    }

    fn data(&self, node: Node) -> PathBuf {
        self.root.join(node.dir())
    }

    fn log(&self, node: Node) -> PathBuf {
        self.root.join(format!("{}.log", node.dir()))
    }

    /// The server log of `node` (readable after the run).
    pub fn server_log(&self, node: Node) -> PathBuf {
        self.log(node)
    }

    /// A PostgreSQL program as the cluster's owner.
    fn pg(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    fn run(&self, cmd: &mut Command) -> anyhow::Result<()> {
        let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
        if !out.status.success() {
            bail!(
                "{cmd:?} failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// Appends settings to a server's `postgresql.conf` (the last one wins).
    fn configure(&self, node: Node, settings: &str) -> anyhow::Result<()> {
        use std::io::Write;
        let path = self.data(node).join("postgresql.conf");
        let mut f = std::fs::OpenOptions::new().append(true).open(&path)?;
        writeln!(f, "\n# bins/failover\n{settings}")?;
        Ok(())
    }

    /// Initialises and starts the primary and creates the database; then
    /// copies it with `pg_basebackup -R`, starts the standby and waits until
    /// the primary reports it as its synchronous standby.
    pub async fn start(&self) -> anyhow::Result<()> {
        let primary = self.data(Node::Primary);
        self.run(self.pg("initdb").arg("-D").arg(&primary).args([
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
        ]))?;
        // In postgresql.conf, so the standby's copy has them too: after its
        // promotion it waits for a `standby1` that no longer exists until
        // an operator clears the setting (see `promote`).
        self.configure(
            Node::Primary,
            &format!(
                "listen_addresses = '127.0.0.1'\n\
                 port = {PRIMARY_PORT}\n\
                 unix_socket_directories = '{}'\n\
                 max_connections = 100\n\
                 shared_buffers = 64MB\n\
                 wal_level = replica\n\
                 max_wal_senders = 5\n\
                 hot_standby = on\n\
                 synchronous_commit = on\n\
                 synchronous_standby_names = '{STANDBY_NAME}'\n\
                 lc_messages = 'C'",
                self.root.display()
            ),
        )?;
        self.pg_start(Node::Primary)?;
        let client = connect(Node::Primary, "postgres").await?;
        // No standby yet: this session's commits wait for none.
        client
            .batch_execute("SET synchronous_commit = local")
            .await?;
        client
            .batch_execute(&format!("CREATE DATABASE {DATABASE}"))
            .await
            .context("creating the database")?;
        let standby = self.data(Node::Standby);
        self.run(
            self.pg("pg_basebackup")
                .arg("-D")
                .arg(&standby)
                .args([
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &PRIMARY_PORT.to_string(),
                    "-U",
                    "postgres",
                ])
                .args(["-R", "-X", "stream", "-c", "fast"]),
        )?;
        // pg_basebackup -R wrote standby.signal and a primary_conninfo into
        // postgresql.auto.conf; this one names the standby (read after it).
        self.configure(
            Node::Standby,
            &format!(
                "port = {STANDBY_PORT}\n\
                 primary_conninfo = 'host=127.0.0.1 port={PRIMARY_PORT} user=postgres \
                 application_name={STANDBY_NAME}'"
            ),
        )?;
        // postgresql.auto.conf is read after postgresql.conf: drop its copy.
        let auto = standby.join("postgresql.auto.conf");
        let kept: String = std::fs::read_to_string(&auto)?
            .lines()
            .filter(|l| !l.starts_with("primary_conninfo"))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&auto, kept)?;
        self.pg_start(Node::Standby)?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let rows = client
                .query(
                    "SELECT sync_state FROM pg_stat_replication WHERE application_name = $1",
                    &[&STANDBY_NAME],
                )
                .await?;
            if rows.iter().any(|r| r.get::<_, String>(0) == "sync") {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the standby is not the primary's synchronous standby after 30 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn pg_start(&self, node: Node) -> anyhow::Result<()> {
        self.run(
            self.pg("pg_ctl")
                .arg("-D")
                .arg(self.data(node))
                .arg("-l")
                .arg(self.log(node))
                .args(["-w", "-t", "60", "start"]),
        )
        .with_context(|| format!("starting the {node:?} (log: {})", self.log(node).display()))
    }

    /// The postmaster's pid of `node`, from its `postmaster.pid`.
    fn postmaster(&self, node: Node) -> anyhow::Result<u32> {
        let text = std::fs::read_to_string(self.data(node).join("postmaster.pid"))?;
        Ok(text.lines().next().unwrap_or_default().trim().parse()?)
    }

    /// SIGKILLs the primary's postmaster, as a crash of its host would end
    /// it, and waits until every process it had started has exited too (a
    /// backend notices the postmaster's death and exits; one that has not
    /// after 10 s is an error). Returns how many children there were.
    pub async fn kill_primary(&self) -> anyhow::Result<usize> {
        let pid = self.postmaster(Node::Primary)?;
        let children = children_of(pid);
        signal("-KILL", pid)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let alive: Vec<u32> = std::iter::once(pid)
                .chain(children.iter().copied())
                .filter(|p| is_alive(*p))
                .collect();
            if alive.is_empty() {
                return Ok(children.len());
            }
            if Instant::now() > deadline {
                for p in &alive {
                    let _ = signal("-KILL", *p);
                }
                bail!("processes of the killed primary still run after 10 s: {alive:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Promotes the standby (`pg_ctl promote -w`), then clears
    /// `synchronous_standby_names` on it: it has no standby of its own, and
    /// with the setting it inherited every commit would wait forever.
    pub async fn promote_standby(&self) -> anyhow::Result<()> {
        self.run(
            self.pg("pg_ctl")
                .arg("-D")
                .arg(self.data(Node::Standby))
                .args(["-w", "-t", "60", "promote"]),
        )?;
        let client = connect(Node::Standby, "postgres").await?;
        for statement in [
            "ALTER SYSTEM SET synchronous_standby_names = ''",
            "SELECT pg_reload_conf()",
        ] {
            client
                .batch_execute(statement)
                .await
                .context("clearing synchronous_standby_names on the promoted standby")?;
        }
        Ok(())
    }

    /// Stops whatever still runs (immediate mode).
    fn stop_all(&self) {
        for node in [Node::Primary, Node::Standby] {
            if self.data(node).join("postmaster.pid").exists() {
                let _ = self
                    .pg("pg_ctl")
                    .arg("-D")
                    .arg(self.data(node))
                    .args(["-m", "immediate", "-w", "stop"])
                    .output();
            }
        }
    }
}

impl Drop for Cluster {
    /// The guard: the servers are stopped and the temporary root removed,
    /// on success and on failure alike.
    fn drop(&mut self) {
        self.stop_all();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// A client of `database` on `node` (trust authentication on loopback).
pub async fn connect(node: Node, database: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::Config::new()
        .host("127.0.0.1")
        .port(node.port())
        .user("postgres")
        .dbname(database)
        .connect_timeout(Duration::from_secs(5))
        .connect(tokio_postgres::NoTls)
        .await
        .with_context(|| format!("connecting to the {node:?} on port {}", node.port()))?;
    tokio::spawn(connection);
    Ok(client)
}

/// The multi-host URL the product's processes get.
pub fn database_url() -> String {
    format!(
        "postgres://postgres@127.0.0.1:{PRIMARY_PORT},127.0.0.1:{STANDBY_PORT}/{DATABASE}\
         ?target_session_attrs=read-write"
    )
}

/// The pids whose parent is `pid` (from /proc).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| parent_of(*p) == Some(pid))
        .collect()
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may hold spaces, so after the ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Whether `pid` runs (a zombie counts as gone).
pub fn is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Sends a signal with kill(1).
pub fn signal(sig: &str, pid: u32) -> anyhow::Result<()> {
    let status = Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .status()?;
    if !status.success() {
        bail!("kill {sig} {pid} failed");
    }
    Ok(())
}

/// The last `n` lines of a file, for failure messages.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let last = lines
        .get(lines.len().saturating_sub(n)..)
        .unwrap_or_default();
    last.join("\n")
}
