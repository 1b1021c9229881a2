//! `just bench`: the control plane's figures, each next to its ceiling on
//! the same machine in the same run (see `docs/benchmarks.md`).
//!
//! It creates databases of its own on the server named by `DATABASE_URL`,
//! starts the release `api-server` (manual clock, ephemeral port) and the
//! fake GCE in-process, sets the platform up through the HTTP API, then:
//!
//! 1. `reservationGrants.create` on one hot reservation, 16 clients over
//!    HTTP, next to the storage call and the same SQL transaction with 16
//!    connections (the same number of operations, on a hot reservation of
//!    their own, so each starts from the same state), and next to the real
//!    `pgbench` running the create's lock pattern (a row lock, an insert);
//!    1h. right after its HTTP run, the same on a hot reservation carrying
//!    10,000 earlier grants;
//! 2. `instances.create` over 100 reservations with grants, likewise;
//!    2h. then over 10 reservations, without and with 10,000 deleted
//!    instances on each;
//! 3. `reservationGrants.get` and `list` (1000 items), next to a trivial
//!    hyper handler answering the same bytes;
//! 4. `vps.grants` metering 10,000 grants × 24 ended hours with the real
//!    `reconciler-worker`, next to one bulk `INSERT ... SELECT` and one
//!    binary `COPY`;
//! 5. the api-server's peak RSS during each figure it serves.
//!
//! It prints the tables and rewrites the generated part of
//! `docs/benchmarks.md` (between its marker lines; the text around them is
//! written by hand).

mod burst;
mod busy;
mod direct;
mod figures;
mod history;
mod hooks;
mod http;
mod load;
mod metering;
mod pace;
mod pgbench;
mod procs;
mod reads;
mod report;
mod scale;
mod setup;
#[cfg(test)]
mod statements;

use std::time::Duration;

use anyhow::Context;
use diesel::sql_types::Text;
use diesel_async::RunQueryDsl;

use crate::figures::{
    Bench, figure_burst, figure_grants, figure_instances, figure_instances_history, figure_pace,
    figure_reads, figure_webhooks, fill_grants,
};
use crate::procs::{ApiServer, Database};
use crate::report::{Machine, Report};
use crate::setup::{Api, INST_HISTORY_RESERVATIONS};

/// Concurrent clients (and direct connections) of every figure.
const CLIENTS: usize = 16;

fn seconds(var: &str, default: u64) -> Duration {
    Duration::from_secs(
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
    )
}

#[derive(diesel::QueryableByName)]
struct Setting {
    #[diesel(sql_type = Text)]
    v: String,
}

async fn setting(db: &Database, sql: &str) -> anyhow::Result<String> {
    let mut conn = db.connect().await?;
    Ok(diesel::sql_query(sql)
        .get_result::<Setting>(&mut conn)
        .await?
        .v)
}

async fn machine(db: &Database) -> anyhow::Result<Machine> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_else(|| "unknown".into());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    Ok(Machine {
        nproc: std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
        cpu,
        mem_gib: mem_kib as f64 / 1024.0 / 1024.0,
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_owned(),
        postgres: setting(db, "SELECT version() AS v").await?,
        pg_settings: setting(
            db,
            "SELECT string_agg(name || '=' || setting || coalesce(unit, ''), ', ' ORDER BY name) \
             AS v FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', \
             'full_page_writes', 'shared_buffers', 'max_connections')",
        )
        .await?,
        loadavg_start: loadavg(),
        loadavg_end: String::new(),
        others: busy::Others::default(),
    })
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn say(msg: &str) {
    eprintln!("bench: {msg}");
}

async fn manual_now(db: &Database) -> anyhow::Result<i64> {
    #[derive(diesel::QueryableByName)]
    struct Now {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        now_ms: i64,
    }
    let mut conn = db.connect().await?;
    Ok(diesel::sql_query("SELECT now_ms FROM manual_clock")
        .get_result::<Now>(&mut conn)
        .await?
        .now_ms)
}

/// Whether figure `name` runs (`BENCH_FIGURES`: a comma-separated subset of
/// grants, instances, reads, metering; default all).
fn wanted(name: &str) -> bool {
    std::env::var("BENCH_FIGURES").map_or(true, |v| v.split(',').any(|f| f.trim() == name))
}

async fn run(server_url: &str) -> anyhow::Result<Report> {
    let write_dur = seconds("BENCH_WRITE_SECONDS", 8);
    let read_dur = seconds("BENCH_READ_SECONDS", 5);
    let log_filter = std::env::var("BENCH_SERVER_LOG").unwrap_or_else(|_| "info".into());
    let root = procs::workspace_root();
    let log_dir = root.join("target/bench");
    std::fs::create_dir_all(&log_dir)?;
    let log = log_dir.join("api-server.log");

    // Others' CPU: over two seconds before anything starts, then sampled
    // every second until the end (`busy`).
    let at_start = busy::busy_cores(Duration::from_secs(2));
    if at_start > busy::BUSY_CORES {
        say(&format!(
            "the machine is busy before the run: {at_start:.2} cores in use by others"
        ));
    }
    let watcher = busy::Watcher::start();
    let db = Database::create(server_url, "api").await?;
    say(&format!("database {} on {server_url}", db.name));
    let server = ApiServer::start(&db, "manual", &log_filter, &log).await?;
    say(&format!(
        "api-server pid {} on {} (log: {})",
        server.pid,
        server.url(),
        log.display()
    ));
    let mut report = Report::new(
        machine(&db).await?,
        CLIENTS,
        write_dur,
        read_dur,
        &log_filter,
    );

    let result = async {
        let now = manual_now(&db).await?;
        say(
            "setting up: account, tenant, 4 hot reservations, 320 pools with a reservation and \
             a grant each",
        );
        let api = Api::new(&server.url());
        let extra = setup::Extra {
            hot: vec!["history"],
            inst: vec![
                ("hist-without", INST_HISTORY_RESERVATIONS),
                ("hist-with", INST_HISTORY_RESERVATIONS),
            ],
        };
        let p = setup::platform_with(&api, now, setup::INST_RESERVATIONS, &extra)
            .await
            .context("setup")?;
        report.rss_after_setup = Some(server.rss()?);
        let bench = Bench {
            db: &db,
            server: &server,
            p: &p,
        };
        if wanted("grants") {
            figure_grants(bench, write_dur, &mut report).await?;
        } else if wanted("reads") {
            // The reads need the grants figure 1 leaves behind.
            fill_grants(&db, &p).await?;
        }
        if wanted("instances") {
            figure_instances(bench, write_dur, &mut report).await?;
            figure_instances_history(bench, write_dur, &mut report).await?;
        }
        if wanted("burst") {
            figure_burst(bench, &mut report).await?;
        }
        if wanted("reads") {
            figure_reads(bench, read_dur, &mut report).await?;
        }
        if wanted("webhooks") {
            figure_webhooks(bench, &mut report).await?;
        }
        if wanted("pace") {
            figure_pace(bench, &mut report).await?;
        }
        drop(p);
        anyhow::Ok(())
    }
    .await;
    server.stop().await?;
    db.drop_now().await?;
    result?;

    if !wanted("metering") {
        report.machine.loadavg_end = loadavg();
        report.machine.others = watcher.finish(at_start);
        return Ok(report);
    }
    say(
        "figure 4: vps.grants metering 10,000 grants x 24 ended hours, next to one bulk \
         INSERT ... SELECT and one COPY ... FROM STDIN (FORMAT binary)",
    );
    let m = metering::run(server_url).await?;
    say(&format!(
        "  worker: exit ok {}, pass {:.2} s, process {:.2} s, records {} ({})",
        m.worker.ok,
        m.worker.pass.as_secs_f64(),
        m.worker.wall.as_secs_f64(),
        m.records_written,
        m.worker.line
    ));
    say(&format!(
        "  bulk insert: {} rows in {:.2} s",
        m.bulk_rows,
        m.bulk.as_secs_f64()
    ));
    say(&format!(
        "  COPY binary: {} rows in {:.2} s",
        m.copy_rows,
        m.copy.as_secs_f64()
    ));
    report.metering = Some(m);
    report.machine.loadavg_end = loadavg();
    report.machine.others = watcher.finish(at_start);
    Ok(report)
}

#[tokio::main]
#[expect(
    clippy::print_stdout,
    reason = "the figures' summary is the bench's output"
)]
async fn main() -> anyhow::Result<()> {
    let server_url = std::env::var("DATABASE_URL")
        .context("DATABASE_URL must name a PostgreSQL server (`just bench` provides one)")?;
    if std::env::args().nth(1).as_deref() == Some("scale") {
        let text = scale::run(&server_url).await?;
        println!("{text}");
        if std::env::var("SCALE_DIVISOR").is_ok_and(|d| d != "1") {
            say("SCALE_DIVISOR is set: a reduced run, docs/benchmarks.md left as it is");
            return Ok(());
        }
        return write_part(scale::BEGIN, scale::END, &text);
    }
    let report = run(&server_url).await?;
    println!("{}", report.terminal());
    if std::env::var_os("BENCH_FIGURES").is_some() {
        say("BENCH_FIGURES is set: a partial run, docs/benchmarks.md left as it is");
        return Ok(());
    }
    write_doc(&report.generated())
}

/// Rewrites the part of `docs/benchmarks.md` between `begin` and `end`,
/// which must be there.
fn write_part(begin: &str, end: &str, text: &str) -> anyhow::Result<()> {
    let path = procs::workspace_root().join("docs/benchmarks.md");
    let doc =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let out = report::splice_between(&doc, begin, end, text)
        .with_context(|| format!("{} needs the lines {begin} and {end}", path.display()))?;
    std::fs::write(&path, out).with_context(|| format!("writing {}", path.display()))?;
    say(&format!("wrote the scale part of {}", path.display()));
    Ok(())
}

/// Rewrites the generated part of `docs/benchmarks.md` (a new file if there
/// is none), leaving the hand-written text around it as it is. Without its
/// markers the file is left alone and the part goes to `target/bench`.
fn write_doc(generated: &str) -> anyhow::Result<()> {
    let path = procs::workspace_root().join("docs/benchmarks.md");
    let doc = match std::fs::read_to_string(&path) {
        Ok(doc) => doc,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => report::skeleton(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let text = match report::splice(&doc, generated) {
        Ok(text) => text,
        Err(e) => {
            let dir = procs::workspace_root().join("target/bench");
            std::fs::create_dir_all(&dir)?;
            let saved = dir.join("benchmarks-generated.md");
            std::fs::write(&saved, generated)
                .with_context(|| format!("writing {}", saved.display()))?;
            anyhow::bail!(
                "{}: {e}; left as it is, this run's part is in {}",
                path.display(),
                saved.display()
            );
        }
    };
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    say(&format!("wrote the generated part of {}", path.display()));
    Ok(())
}
