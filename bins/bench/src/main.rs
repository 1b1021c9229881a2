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

mod direct;
mod history;
mod http;
mod load;
mod metering;
mod pgbench;
mod procs;
mod reads;
mod report;
mod scale;
mod setup;
#[cfg(test)]
mod statements;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use diesel::sql_types::Text;
use diesel_async::RunQueryDsl;
use serde_json::json;

use crate::direct::{GrantCtx, GrantSql, GrantStorage, InstanceCtx, InstanceSql, InstanceStorage};
use crate::http::{BodyFn, FixedServer, HttpOp};
use crate::load::{Outcome, Stop};
use crate::procs::{ApiServer, Database};
use crate::reads::ReadSql;
use crate::report::{Machine, Measured, ReadFigure, Report, Rss};
use crate::setup::{Api, INST_HISTORY_RESERVATIONS, TENANT};

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

fn show(label: &str, o: &Outcome) {
    say(&format!(
        "  {label}: {} ops in {:.2} s = {:.0}/s, p50 {:.2} ms, p99 {:.2} ms",
        o.ops,
        o.elapsed.as_secs_f64(),
        o.throughput(),
        o.p50().as_secs_f64() * 1e3,
        o.p99().as_secs_f64() * 1e3
    ));
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

/// The api-server's memory over one figure: the peak reset at its start.
struct RssWatch {
    fig: &'static str,
    reset: bool,
    before: Option<u64>,
}

impl RssWatch {
    fn start(server: &ApiServer, fig: &'static str) -> RssWatch {
        let reset = server.reset_peak_rss();
        RssWatch {
            fig,
            reset,
            before: server.rss().ok(),
        }
    }

    fn done(self, server: &ApiServer) -> anyhow::Result<Rss> {
        Ok(Rss {
            fig: self.fig,
            before: self.before,
            reset: self.reset,
            peak: Some(server.peak_rss()?),
        })
    }
}

/// The creates of `path` over HTTP for `dur` by 16 clients with `token`,
/// operation `i` sending `body(i)`.
async fn create_http(
    server: &ApiServer,
    path: &str,
    token: &str,
    body: BodyFn,
    dur: Duration,
) -> anyhow::Result<Outcome> {
    let workers = HttpOp::many(CLIENTS, server.addr, path, token, body).await?;
    load::run(workers, Stop::After(dur)).await
}

/// `reservationGrants.create` over HTTP for `dur` with `ctx`'s bodies.
async fn grants_http(server: &ApiServer, ctx: GrantCtx, dur: Duration) -> anyhow::Result<Outcome> {
    let ctx = Arc::new(ctx);
    let body: BodyFn = Arc::new(move |i| ctx.body(i).to_string());
    let path = "/api/compute/reservationGrants/create";
    create_http(server, path, procs::ROOT_TOKEN, body, dur).await
}

/// The grants figure: HTTP for `dur` on an empty hot reservation, then
/// (1h) HTTP for `dur` on one carrying earlier grants, then the storage call
/// and the SQL for the same number of operations as the first, each on its
/// own hot reservation, then pgbench's row lock and insert for `dur`.
async fn figure_grants(
    db: &Database,
    server: &ApiServer,
    p: &setup::Platform,
    dur: Duration,
    report: &mut Report,
) -> anyhow::Result<()> {
    let ctx = |tag: &'static str| GrantCtx::new(tag, p, &p.hot[tag]);
    say(&format!(
        "figure 1h: {} earlier grants on the history reservation (SQL)",
        history::GRANTS
    ));
    history::seed_grants(db, p, &p.hot["history"]).await?;
    say("figure 1: reservationGrants.create, one hot reservation, 16 clients");
    let rss = RssWatch::start(server, "1");
    let api = grants_http(server, ctx("http"), dur).await?;
    show("HTTP API", &api);
    report.rss.push(rss.done(server)?);
    let n = api.ops;

    let rss = RssWatch::start(server, "1h");
    let hist = grants_http(server, ctx("history"), dur).await?;
    show("1h: HTTP API, 10,000 earlier grants", &hist);
    report.rss.push(rss.done(server)?);
    report.grants_history = Some(hist);

    let ctx_storage = Arc::new(ctx("storage"));
    let storage = on_connections(db, n, |conn| GrantStorage {
        conn,
        ctx: ctx_storage.clone(),
    })
    .await?;
    show("storage call", &storage);

    let ctx_sql = Arc::new(ctx("sql"));
    let sql = on_connections(db, n, |conn| GrantSql {
        conn,
        ctx: ctx_sql.clone(),
    })
    .await?;
    show("direct SQL", &sql);
    report.grants = Some(Measured { api, storage, sql });

    let b = pgbench::run(db, &ctx("http"), &p.hot_pool, CLIENTS, dur).await?;
    say(&format!(
        "  pgbench row lock + insert: {} transactions, tps {:.0}, latency average {:.2} ms",
        b.transactions,
        b.tps,
        b.latency_avg.as_secs_f64() * 1e3
    ));
    report.pgbench = Some(b);
    Ok(())
}

/// `instances.create` over HTTP for `dur` with `ctx`'s bodies.
async fn instances_http(
    server: &ApiServer,
    p: &setup::Platform,
    ctx: InstanceCtx,
    dur: Duration,
) -> anyhow::Result<Outcome> {
    let ctx = Arc::new(ctx);
    let body: BodyFn = Arc::new(move |i| ctx.body(i).to_string());
    let path = "/api/compute/instances/create";
    create_http(server, path, &p.tenant_token, body, dur).await
}

/// Figure 2h: the deleted instances inserted, then the API for `dur` on
/// the layout without them and for `dur` on the one with them.
async fn figure_instances_history(
    db: &Database,
    server: &ApiServer,
    p: &setup::Platform,
    dur: Duration,
    report: &mut Report,
) -> anyhow::Result<()> {
    say(&format!(
        "figure 2h: instances.create over {INST_HISTORY_RESERVATIONS} reservations, without and \
         with {} deleted instances on each (SQL)",
        history::INSTANCES
    ));
    history::seed_instances(db, p, &p.inst["hist-with"]).await?;
    let rss = RssWatch::start(server, "2h");
    let without = instances_http(server, p, InstanceCtx::new("hist-without", p), dur).await?;
    show("HTTP API, no deleted instances", &without);
    let with = instances_http(server, p, InstanceCtx::new("hist-with", p), dur).await?;
    show("HTTP API, 10,000 deleted instances per reservation", &with);
    report.rss.push(rss.done(server)?);
    report.instances_history = Some((without, with));
    Ok(())
}

/// The instances figure, like the grants figure over 100 pools per side.
async fn figure_instances(
    db: &Database,
    server: &ApiServer,
    p: &setup::Platform,
    dur: Duration,
    report: &mut Report,
) -> anyhow::Result<()> {
    let ctx = |tag: &'static str| InstanceCtx::new(tag, p);
    say("figure 2: instances.create over 100 reservations with grants, 16 clients");
    let rss = RssWatch::start(server, "2");
    let api = instances_http(server, p, ctx("http"), dur).await?;
    show("HTTP API", &api);
    report.rss.push(rss.done(server)?);
    let n = api.ops;

    let ctx_storage = Arc::new(ctx("storage"));
    let storage = on_connections(db, n, |conn| InstanceStorage {
        conn,
        ctx: ctx_storage.clone(),
    })
    .await?;
    show("storage call", &storage);

    let ctx_sql = Arc::new(ctx("sql"));
    let sql = on_connections(db, n, |conn| InstanceSql {
        conn,
        ctx: ctx_sql.clone(),
    })
    .await?;
    show("direct SQL", &sql);
    report.instances = Some(Measured { api, storage, sql });
    Ok(())
}

/// Runs `workers` for a 1 s warm-up (discarded), then for `dur`.
async fn warm_run<W: load::Op, F, Fut>(make: F, dur: Duration) -> anyhow::Result<Outcome>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Vec<W>>>,
{
    load::run(make().await?, Stop::After(Duration::from_secs(1))).await?;
    load::run(make().await?, Stop::After(dur)).await
}

/// One read: the API (and, for `get`, a second api-server with the system
/// clock), the trivial handler answering the same bytes to the same client
/// with the same requests, and the request's statements run directly.
#[expect(clippy::too_many_arguments, reason = "one call site, named arguments")]
async fn read_figure(
    db: &Database,
    server: &ApiServer,
    system: Option<&ApiServer>,
    path: &str,
    token: &str,
    body: BodyFn,
    fixed: Bytes,
    sql: (Arc<Vec<String>>, bool),
    dur: Duration,
) -> anyhow::Result<ReadFigure> {
    let http = |addr| {
        let body = body.clone();
        move || HttpOp::many(CLIENTS, addr, path, token, body.clone())
    };
    let api = warm_run(http(server.addr), dur).await?;
    show("HTTP API", &api);
    let api_system_clock = match system {
        Some(s) => {
            let o = warm_run(http(s.addr), dur).await?;
            show("HTTP API, BC_CLOCK=system", &o);
            Some(o)
        }
        None => None,
    };
    let trivial = {
        let fixed = FixedServer::start(fixed)?;
        warm_run(http(fixed.addr), dur).await?
    };
    show("trivial hyper", &trivial);
    let sql_run = |full: bool| {
        let (ids, list) = sql.clone();
        let secret: Arc<str> = token.into();
        move || {
            let ids = ids.clone();
            let secret = secret.clone();
            async move {
                Ok(db
                    .connections(CLIENTS)
                    .await?
                    .into_iter()
                    .map(|conn| ReadSql {
                        conn,
                        secret: secret.clone(),
                        ids: ids.clone(),
                        list,
                        full,
                    })
                    .collect::<Vec<_>>())
            }
        }
    };
    let sql_full = warm_run(sql_run(true), dur).await?;
    show("direct SQL: authenticate, clock, query", &sql_full);
    let sql_query = warm_run(sql_run(false), dur).await?;
    show("direct SQL: the query alone", &sql_query);
    Ok(ReadFigure {
        api,
        api_system_clock,
        trivial,
        sql_full,
        sql_query,
    })
}

async fn figure_reads(
    db: &Database,
    server: &ApiServer,
    p: &setup::Platform,
    dur: Duration,
    report: &mut Report,
) -> anyhow::Result<()> {
    say(
        "figure 3: reservationGrants.get and list (1000 items), 16 clients, next to a trivial \
         hyper handler",
    );
    let ids: Vec<String> = {
        #[derive(diesel::QueryableByName)]
        struct Id {
            #[diesel(sql_type = Text)]
            grant_id: String,
        }
        let mut conn = db.connect().await?;
        diesel::sql_query(
            "SELECT grant_id FROM grants WHERE tenant_id = 'acme' ORDER BY grant_id LIMIT 1000",
        )
        .load::<Id>(&mut conn)
        .await?
        .into_iter()
        .map(|r| r.grant_id)
        .collect()
    };
    anyhow::ensure!(!ids.is_empty(), "no grants to read");
    let ids = Arc::new(ids);
    let api = Api::new(&server.url());
    let log = procs::workspace_root().join("target/bench/api-server-system-clock.log");
    let system = ApiServer::start(db, "system", &report.log_filter, &log).await?;

    let rss = RssWatch::start(server, "3");
    let result = async {
        say(" get:");
        let get_body: BodyFn = {
            let ids = ids.clone();
            Arc::new(move |i| {
                json!({ "tenantId": TENANT, "grantId": ids[(i as usize) % ids.len()] }).to_string()
            })
        };
        let sample = api
            .raw(
                &p.tenant_token,
                "reservationGrants/get",
                &json!({ "tenantId": TENANT, "grantId": ids[0] }),
            )
            .await?;
        report.get_bytes = sample.len();
        report.get = Some(
            read_figure(
                db,
                server,
                Some(&system),
                "/api/compute/reservationGrants/get",
                &p.tenant_token,
                get_body,
                Bytes::from(sample),
                (ids.clone(), false),
                dur,
            )
            .await?,
        );

        say(" list:");
        let list_req = json!({ "tenantId": TENANT });
        let sample = api
            .raw(&p.tenant_token, "reservationGrants/list", &list_req)
            .await?;
        report.list_items = serde_json::from_slice::<serde_json::Value>(&sample)?["items"]
            .as_array()
            .map_or(0, Vec::len);
        report.list_bytes = sample.len();
        let list_body: BodyFn = {
            let s = list_req.to_string();
            Arc::new(move |_| s.clone())
        };
        report.list = Some(
            read_figure(
                db,
                server,
                None,
                "/api/compute/reservationGrants/list",
                &p.tenant_token,
                list_body,
                Bytes::from(sample),
                (ids.clone(), true),
                dur,
            )
            .await?,
        );
        report.rss.push(rss.done(server)?);
        let mut conn = db.connect().await?;
        let cost = reads::list_cost(&mut conn, p.now).await?;
        say(&format!(
            "  one list answer: storage call {:.1} ms, JSON via Value {:.1} ms, \
             JSON direct {:.1} ms",
            cost.storage.as_secs_f64() * 1e3,
            cost.via_value.as_secs_f64() * 1e3,
            cost.direct.as_secs_f64() * 1e3
        ));
        report.list_cost = Some(cost);
        anyhow::Ok(())
    }
    .await;
    system.stop().await?;
    result
}

/// Whether figure `name` runs (`BENCH_FIGURES`: a comma-separated subset of
/// grants, instances, reads, metering; default all).
fn wanted(name: &str) -> bool {
    std::env::var("BENCH_FIGURES").map_or(true, |v| v.split(',').any(|f| f.trim() == name))
}

/// 1,200 grants on the hot SQL reservation, for the reads when figure 1 is skipped.
async fn fill_grants(db: &Database, p: &setup::Platform) -> anyhow::Result<()> {
    let ctx = Arc::new(GrantCtx::new("fill", p, &p.hot["sql"]));
    let workers = db
        .connections(CLIENTS)
        .await?
        .into_iter()
        .map(|conn| GrantSql {
            conn,
            ctx: ctx.clone(),
        })
        .collect();
    load::run(workers, Stop::Count(1200)).await?;
    Ok(())
}

async fn run(server_url: &str) -> anyhow::Result<Report> {
    let write_dur = seconds("BENCH_WRITE_SECONDS", 8);
    let read_dur = seconds("BENCH_READ_SECONDS", 5);
    let log_filter = std::env::var("BENCH_SERVER_LOG").unwrap_or_else(|_| "info".into());
    let root = procs::workspace_root();
    let log_dir = root.join("target/bench");
    std::fs::create_dir_all(&log_dir)?;
    let log = log_dir.join("api-server.log");

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
        if wanted("grants") {
            figure_grants(&db, &server, &p, write_dur, &mut report).await?;
        } else if wanted("reads") {
            // The reads need the grants figure 1 leaves behind.
            fill_grants(&db, &p).await?;
        }
        if wanted("instances") {
            figure_instances(&db, &server, &p, write_dur, &mut report).await?;
            figure_instances_history(&db, &server, &p, write_dur, &mut report).await?;
        }
        if wanted("reads") {
            figure_reads(&db, &server, &p, read_dur, &mut report).await?;
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
    Ok(report)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let server_url = std::env::var("DATABASE_URL")
        .context("DATABASE_URL must name a PostgreSQL server (`just bench` provides one)")?;
    if std::env::args().nth(1).as_deref() == Some("scale") {
        let text = scale::run(&server_url).await?;
        println!("{text}");
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

/// Runs exactly `n` operations over `CLIENTS` direct connections to `db`,
/// one worker per connection, each made by `make`.
async fn on_connections<W: load::Op>(
    db: &Database,
    n: u64,
    make: impl Fn(diesel_async::AsyncPgConnection) -> W,
) -> anyhow::Result<load::Outcome> {
    let workers = db
        .connections(CLIENTS)
        .await?
        .into_iter()
        .map(make)
        .collect();
    load::run(workers, Stop::Count(n)).await
}
