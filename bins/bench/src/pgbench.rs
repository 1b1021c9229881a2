//! Figure 1's second ceiling: PostgreSQL's own ceiling for the create's lock
//! pattern, measured with the real `pgbench` against the figure's database.
//! Each transaction locks one row of a copy of `reservations` (`SELECT ...
//! FOR UPDATE`) and inserts one grant, with a fresh id from a sequence and
//! the values of a grant the figure creates, into a scratch copy of
//! `grants` (`CREATE TABLE ... (LIKE grants INCLUDING ALL)`: the same
//! columns, checks and indexes, no foreign keys).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use diesel_async::RunQueryDsl;

use crate::direct::GrantCtx;
use crate::procs::{self, Database};
use crate::setup::TENANT;

/// What one pgbench run reported.
#[derive(Debug, Clone, PartialEq)]
pub struct Pgbench {
    /// `number of transactions actually processed`.
    pub transactions: u64,
    /// `number of failed transactions`.
    pub failed: u64,
    /// `latency average`.
    pub latency_avg: Duration,
    /// `tps = N (without initial connection time)`.
    pub tps: f64,
    /// `duration`.
    pub duration: Duration,
    /// The machine's CPU while it ran.
    pub cpu: Option<crate::busy::CpuUse>,
}

/// The value after `prefix` on the line starting with it, up to `until`.
fn field<'a>(out: &'a str, prefix: &str, until: char) -> anyhow::Result<&'a str> {
    out.lines()
        .find_map(|l| l.trim().strip_prefix(prefix))
        .map(|v| v.trim().split(until).next().unwrap_or_default().trim())
        .with_context(|| format!("no `{prefix}` in pgbench's output"))
}

/// Parses pgbench's summary (its standard output).
pub fn parse(out: &str) -> anyhow::Result<Pgbench> {
    let tps: f64 = field(out, "tps = ", ' ')?.parse().context("tps")?;
    anyhow::ensure!(
        out.lines()
            .any(|l| l.starts_with("tps = ") && l.contains("(without initial connection time)")),
        "no tps without initial connection time in pgbench's output"
    );
    let latency = field(out, "latency average = ", ' ')?;
    let latency_ms: f64 = latency.parse().context("latency average")?;
    let transactions = field(out, "number of transactions actually processed:", '/')?
        .parse()
        .context("transactions")?;
    let failed = match field(out, "number of failed transactions:", ' ') {
        Ok(v) => v.parse().context("failed transactions")?,
        Err(_) => 0,
    };
    let secs: u64 = field(out, "duration:", ' ')?.parse().context("duration")?;
    Ok(Pgbench {
        transactions,
        failed,
        latency_avg: Duration::from_secs_f64(latency_ms / 1e3),
        tps,
        duration: Duration::from_secs(secs),
        cpu: None,
    })
}

/// `pgbench` on `PATH`, else the newest `/usr/lib/postgresql/*/bin/pgbench`.
pub fn binary() -> anyhow::Result<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|d| d.join("pgbench"))
        .find(|p| p.is_file());
    if let Some(p) = on_path {
        return Ok(p);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let p = e.path().join("bin/pgbench");
            p.is_file().then_some((version, p))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, p)| p)
        .context("pgbench not found on PATH nor in /usr/lib/postgresql/*/bin")
}

/// The script: one transaction as the create takes its lock and inserts.
fn script(c: &GrantCtx, pool_id: &str) -> String {
    format!(
        "BEGIN;\n\
         SELECT * FROM bench_pgb_reservations \
         WHERE account_id = '{account}' AND reservation_id = '{reservation}' FOR UPDATE;\n\
         INSERT INTO bench_pgb_grants (grant_id, account_id, reservation_id, pool_id, \
         tenant_id, project_id, slots, starts_at, ends_at, settled_state, reason, created_at, \
         ended_at, metered_through) VALUES ('rgrant_' || \
         lpad(nextval('bench_pgb_grant_ids')::text, 26, '0'), '{account}', '{reservation}', \
         '{pool_id}', '{TENANT}', NULL, 1, {starts}, {ends}, 'scheduled', NULL, {now}, NULL, \
         {starts});\n\
         END;\n",
        account = c.account_id,
        reservation = c.reservation_id,
        starts = c.starts_at,
        ends = c.ends_at,
        now = c.now,
    )
}

/// Runs `pgbench -n -c clients -j 2 -M prepared -T dur` with the script of
/// `ctx` (whose reservation is bound to `pool_id`) on `db`; its copies are
/// made first and dropped after.
pub async fn run(
    db: &Database,
    ctx: &GrantCtx,
    pool_id: &str,
    clients: usize,
    dur: Duration,
) -> anyhow::Result<Pgbench> {
    let bin = binary()?;
    let dir = procs::workspace_root().join("target/bench");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("pgbench-grant.sql");
    std::fs::write(&path, script(ctx, pool_id))
        .with_context(|| format!("writing {}", path.display()))?;
    let mut conn = db.connect().await?;
    for s in [
        "DROP TABLE IF EXISTS bench_pgb_grants, bench_pgb_reservations",
        "DROP SEQUENCE IF EXISTS bench_pgb_grant_ids",
        "CREATE TABLE bench_pgb_reservations (LIKE reservations INCLUDING ALL)",
        "INSERT INTO bench_pgb_reservations SELECT * FROM reservations",
        "CREATE TABLE bench_pgb_grants (LIKE grants INCLUDING ALL)",
        "CREATE SEQUENCE bench_pgb_grant_ids",
        "ANALYZE bench_pgb_reservations",
    ] {
        diesel::sql_query(s).execute(&mut conn).await?;
    }
    let span = crate::busy::CpuSpan::start();
    let out = tokio::process::Command::new(&bin)
        .args(["-n", "-j", "2", "-M", "prepared", "-c"])
        .arg(clients.to_string())
        .arg("-T")
        .arg(dur.as_secs().max(1).to_string())
        .arg("-f")
        .arg(&path)
        .arg(&db.url)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| format!("running {}", bin.display()))?;
    // pgbench and its backends have exited: the machine's figure only.
    let cpu = span.finish();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}{}",
            bin.display(),
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut result = parse(&stdout).with_context(|| format!("pgbench's output: {stdout}"))?;
    result.cpu = Some(cpu);
    anyhow::ensure!(
        result.failed == 0,
        "pgbench: {} failed transactions",
        result.failed
    );
    for s in [
        "DROP TABLE bench_pgb_grants, bench_pgb_reservations",
        "DROP SEQUENCE bench_pgb_grant_ids",
    ] {
        diesel::sql_query(s).execute(&mut conn).await?;
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// pgbench 15's summary for a 2 s run of a custom script.
    const SAMPLE: &str = "pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: /tmp/pgb_sample.sql
scaling factor: 1
query mode: prepared
number of clients: 16
number of threads: 2
maximum number of tries: 1
duration: 2 s
number of transactions actually processed: 1858
number of failed transactions: 0 (0.000%)
latency average = 16.403 ms
initial connection time = 156.725 ms
tps = 975.423834 (without initial connection time)
";

    #[test]
    fn parses_a_real_summary() {
        let p = parse(SAMPLE).expect("parse");
        assert_eq!(p.transactions, 1858);
        assert_eq!(p.failed, 0);
        assert_eq!(p.duration, Duration::from_secs(2));
        assert!((p.tps - 975.423_834).abs() < 1e-9);
        assert!((p.latency_avg.as_secs_f64() - 0.016_403).abs() < 1e-9);
    }

    #[test]
    fn refuses_output_without_the_summary() {
        assert!(parse("pgbench: error: connection to server failed\n").is_err());
        let without_tps: String = SAMPLE
            .lines()
            .filter(|l| !l.starts_with("tps"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(parse(&without_tps).is_err());
    }
}
