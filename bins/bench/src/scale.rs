//! `just scale` (`bench scale`): list pages at a year of data.
//!
//! One database: 1,000 tenants, 50 reservations, then two stages generated
//! in SQL in time order, as a platform would accumulate them over a year:
//!
//! 1. 100,000 grants, 1,000,000 usage records and 1,000,000 events (the
//!    first five weeks);
//! 2. 100,000 grants, 10,000,000 usage records and 10,000,000 events (the
//!    whole year, 13 monthly partitions of each log).
//!
//! After each stage the reconciler's upkeep of the logs runs as it would have
//! over that time: every month closed by the time of the stage's newest row
//! (ended a day or more before it) is rewritten sorted by tenant
//! (`storage::ops::partitions::compact_next`), then the logs are vacuumed and
//! analysed. It then times `usage.list` (a tenant's and root's `all`
//! pages), `events.list` and `reservationGrants.list` pages of 100 through
//! the release api-server, one request at a time from random cursors, and
//! reports p50 and p99 per stage and their ratio (target: at most 1.25).
//! It also reads PostgreSQL's scan counters around each stage's requests: a
//! sequential scan of `grants` or of any partition of the two
//! logs holding [`SMALL_TABLE`] rows or more fails the run (the plans must
//! use their indexes), it explains one tenant's page of each log and counts
//! the heap pages a tenant's page reads, and it records the CPU other
//! processes used while it timed.
//!
//! The figures go to the part of `docs/benchmarks.md` between the scale
//! markers.

use std::time::{Duration, Instant};
use storage::cursor::{CursorSealer, Reader};

use anyhow::Context;
use bytes::Bytes;
use diesel::sql_types::{BigInt, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::{Value, json};

use crate::http::HttpConn;
use crate::procs::{self, ApiServer, Database, ROOT_TOKEN};
use crate::setup::{Api, HOUR_MS, TENANT};

mod data;
mod plans;
mod report;

use data::{generate, world};
use plans::{SMALL_TABLE, explain, heap_pages, scans, scans_between};
use report::report;

/// Tenants, `acme` (the one measured) included.
const TENANTS: i64 = 1_000;
/// Reservations the grants are spread over.
const RESERVATIONS: i64 = 50;
/// Grants, usage records and events at the end of each stage: the grants
/// are all there from the first stage (they do not grow with the logs), so
/// the grant pages compare like with like.
const STAGES: [(&str, i64, i64); 2] = [("1M", 100_000, 1_000_000), ("10M", 100_000, 10_000_000)];
/// Rows per generating statement.
const CHUNK: i64 = 1_000_000;
/// A year of hours: the last stage's records fill it.
const YEAR_HOURS: i64 = 365 * 24;
/// Records per hour, so that 10,000,000 take a year.
const PER_HOUR: i64 = 10_000_000 / YEAR_HOURS + 1;
/// Page size of every timed request.
const PAGE: i64 = 100;
/// The ratio target of the issue.
const TARGET: f64 = 1.25;

/// The generated part's markers in `docs/benchmarks.md`.
pub const BEGIN: &str = "<!-- scale: begin -->";
/// The line after it.
pub const END: &str = "<!-- scale: end -->";

fn say(msg: &str) {
    eprintln!("scale: {msg}");
}

/// One timed page kind.
#[derive(Clone, Copy)]
enum Kind {
    UsageTenant,
    UsageAll,
    Events,
    Grants,
}

impl Kind {
    const ALL: [Kind; 4] = [
        Kind::UsageTenant,
        Kind::UsageAll,
        Kind::Events,
        Kind::Grants,
    ];

    fn label(self) -> &'static str {
        match self {
            Kind::UsageTenant => "`usage.list`, one tenant",
            Kind::UsageAll => "`usage.list`, root `all`",
            Kind::Events => "`events.list`, one tenant",
            Kind::Grants => "`reservationGrants.list`, one tenant",
        }
    }
}

/// p50 and p99 of one kind at one stage.
#[derive(Clone, Copy, Debug)]
struct Latency {
    p50: Duration,
    p99: Duration,
}

/// Scans of the big tables during a stage's timed requests.
#[derive(Debug, Clone, Default, PartialEq)]
struct Scans {
    /// Sequential scans of tables of at least [`SMALL_TABLE`] rows.
    seq: i64,
    /// Which, and how many each.
    big: Vec<String>,
    /// Sequential scans of smaller tables.
    small: i64,
    /// Index scans.
    idx: i64,
}

/// What a stage measured.
struct Stage {
    name: &'static str,
    grants: i64,
    rows: i64,
    generate: Duration,
    /// Closed months rewritten sorted by tenant, and how long that took.
    compacted: usize,
    compact: Duration,
    vacuum: Duration,
    /// Mean heap pages one tenant's page reads: usage, events.
    heap: (f64, f64),
    /// What other processes used while the requests were timed.
    others: crate::busy::Others,
    latency: Vec<Latency>,
    scans: Scans,
    plans: Vec<String>,
    size: String,
}

/// A deterministic generator for the cursors.
struct Draws(rand::rngs::StdRng);

impl Draws {
    fn seeded(seed: u64) -> Draws {
        Draws(rand::SeedableRng::seed_from_u64(seed))
    }

    fn below(&mut self, n: i64) -> i64 {
        rand::Rng::random_range(&mut self.0, 0..n.max(1))
    }
}

#[derive(diesel::QueryableByName)]
struct Num {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(diesel::QueryableByName)]
struct Txt {
    #[diesel(sql_type = Text)]
    t: String,
}

async fn num(conn: &mut AsyncPgConnection, sql: &str) -> anyhow::Result<i64> {
    Ok(diesel::sql_query(sql)
        .get_result::<Num>(conn)
        .await
        .with_context(|| sql.to_owned())?
        .n)
}

async fn exec(conn: &mut AsyncPgConnection, sql: &str) -> anyhow::Result<()> {
    diesel::sql_query(sql)
        .execute(conn)
        .await
        .with_context(|| sql.chars().take(120).collect::<String>())?;
    Ok(())
}

/// Times `n` pages of `kind`, one at a time, from random cursors.
async fn time_pages(
    http: &mut HttpConn,
    cursors: &CursorSealer,
    kind: Kind,
    secret: &str,
    rows: i64,
    rng: &mut Draws,
    n: usize,
) -> anyhow::Result<Latency> {
    let mut took = Vec::with_capacity(n);
    for _ in 0..n {
        let (path, token, body) = match kind {
            Kind::UsageTenant => (
                "usage/list",
                secret,
                json!({ "tenantId": TENANT, "limit": PAGE,
                        "after": cursors.seal(Reader::Tenant(TENANT), rng.below(rows)) }),
            ),
            Kind::UsageAll => (
                "usage/list",
                ROOT_TOKEN,
                json!({ "tenantId": "root", "all": true, "limit": PAGE,
                        "after": cursors.seal(Reader::AllTenants, rng.below(rows)) }),
            ),
            Kind::Events => (
                "events/list",
                secret,
                json!({ "tenantId": TENANT, "limit": PAGE,
                        "after": storage::model::events::encode_cursor(
                            rng.below(rows / TENANTS)) }),
            ),
            Kind::Grants => (
                "reservationGrants/list",
                secret,
                json!({ "tenantId": TENANT, "limit": PAGE }),
            ),
        };
        let body = Bytes::from(body.to_string());
        let started = Instant::now();
        let (status, answer) = http
            .post(&format!("/api/compute/{path}"), token, body)
            .await?;
        took.push(started.elapsed());
        anyhow::ensure!(
            status == 200,
            "{path} answered {status}: {}",
            String::from_utf8_lossy(&answer)
        );
        let v: Value = serde_json::from_slice(&answer)?;
        let items = v.get("items").and_then(Value::as_array).map_or(0, Vec::len);
        anyhow::ensure!(
            matches!(kind, Kind::Grants) || items > 0 || v.get("hasMore") == Some(&json!(false)),
            "{path} answered an empty page with more to come"
        );
    }
    took.sort();
    let pick = |q: f64| {
        let index = ((took.len() as f64 * q) as usize).min(took.len().saturating_sub(1));
        took.get(index).copied().unwrap_or_default()
    };
    Ok(Latency {
        p50: pick(0.50),
        p99: pick(0.99),
    })
}

/// Runs both stages; the report's text.
pub async fn run(server_url: &str) -> anyhow::Result<String> {
    let requests: usize = std::env::var("SCALE_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let root = procs::workspace_root();
    let log_dir = root.join("target/bench");
    std::fs::create_dir_all(&log_dir)?;
    let log = log_dir.join("api-server-scale.log");
    let db = Database::create(server_url, "scale").await?;
    say(&format!("database {} on {server_url}", db.name));
    let server = ApiServer::start(&db, "manual", "warn", &log).await?;
    let result = async {
        let mut conn = db.connect().await?;
        let now = num(&mut conn, "SELECT now_ms AS n FROM manual_clock").await?;
        // The year before now, from a month's start.
        let y0 = num(
            &mut conn,
            &format!(
                "SELECT bc_month_start({now} - {}::bigint) AS n",
                YEAR_HOURS * HOUR_MS
            ),
        )
        .await?;
        let api = Api::new(&server.url());
        let (secret, account, pool) = world(&api, &mut conn).await?;
        // Random positions of the usage log, sealed as the server seals them.
        let cursors = CursorSealer::load(&mut conn).await?;
        for table in ["usage_records", "events"] {
            exec(
                &mut conn,
                &format!("SELECT bc_ensure_month_partitions('{table}', {y0}, {now})"),
            )
            .await?;
        }
        let mut rng = Draws::seeded(0x5ca1_ab1e_d00d_f00d);
        let mut stages = Vec::new();
        let (mut grants_done, mut rows_done) = (0, 0);
        // SCALE_DIVISOR (default 1) shrinks both stages for a quick try.
        let divisor: i64 = std::env::var("SCALE_DIVISOR")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|d| *d >= 1)
            .unwrap_or(1);
        for (name, grants, rows) in STAGES {
            let (grants, rows) = (grants / divisor, rows / divisor);
            say(&format!(
                "stage {name}: generating up to {grants} grants, {rows} rows"
            ));
            let started = Instant::now();
            generate(
                &mut conn,
                y0,
                &account,
                &pool,
                (grants_done, grants),
                (rows_done, rows),
            )
            .await?;
            let generate_took = started.elapsed();
            // The reconciler's upkeep as it would have run while these rows
            // were written: every month closed by the time of the newest row
            // sorted by tenant (not by the clock's now, a year on, which
            // would sort a month the next stage still writes).
            let frontier = y0 + rows / PER_HOUR * HOUR_MS;
            let started = Instant::now();
            let mut compacted = 0;
            while let Some(month) = storage::ops::partitions::compact_next(&mut conn, frontier)
                .await
                .context("rewriting a closed month")?
            {
                say(&format!("stage {name}: rewrote {month:?}"));
                compacted += 1;
            }
            let compact = started.elapsed();
            let started = Instant::now();
            exec(&mut conn, "VACUUM (ANALYZE) usage_records, events, grants").await?;
            let vacuum = started.elapsed();
            (grants_done, rows_done) = (grants, rows);
            // A connection for the warm-up and another for the timed
            // requests: the server closes one left idle for its header timeout
            // (10 s), and the counters' flush waits longer.
            let mut http = HttpConn::connect(server.addr).await?;
            // Warm up, then count scans around the timed requests only.
            for kind in Kind::ALL {
                time_pages(&mut http, &cursors, kind, &secret, rows, &mut rng, 20).await?;
            }
            // The server's backends report their counters when idle for a
            // while (PostgreSQL 15 flushes at most every 10 s when idle).
            tokio::time::sleep(Duration::from_secs(11)).await;
            let before = scans(&mut conn).await?;
            let mut http = HttpConn::connect(server.addr).await?;
            let at_start = crate::busy::busy_cores(Duration::from_secs(2));
            let watcher = crate::busy::Watcher::start();
            let mut latency = Vec::new();
            for kind in Kind::ALL {
                latency.push(
                    time_pages(&mut http, &cursors, kind, &secret, rows, &mut rng, requests)
                        .await?,
                );
            }
            let others = watcher.finish(at_start);
            tokio::time::sleep(Duration::from_secs(11)).await;
            let after = scans(&mut conn).await?;
            let plans = explain(&mut conn, rows).await?;
            let heap = heap_pages(&mut conn, rows, &mut rng).await?;
            let size = diesel::sql_query(
                "SELECT pg_size_pretty(sum(pg_total_relation_size(c.oid))) AS t \
                 FROM pg_class c JOIN pg_inherits i ON i.inhrelid = c.oid \
                 WHERE i.inhparent IN ('usage_records'::regclass, 'events'::regclass)",
            )
            .get_result::<Txt>(&mut conn)
            .await?
            .t;
            let stage = Stage {
                name,
                grants,
                rows,
                generate: generate_took,
                compacted,
                compact,
                vacuum,
                heap,
                others,
                latency,
                scans: scans_between(&before, &after),
                plans,
                size,
            };
            say(&format!(
                "stage {name}: generated in {:.0} s, {} months sorted in {:.0} s, vacuumed in \
                 {:.0} s, {:?}, scans {:?}, heap pages {:?}, others {:?}",
                stage.generate.as_secs_f64(),
                stage.compacted,
                stage.compact.as_secs_f64(),
                stage.vacuum.as_secs_f64(),
                stage.latency,
                stage.scans,
                stage.heap,
                stage.others
            ));
            stages.push(stage);
        }
        anyhow::Ok(stages)
    }
    .await;
    server.stop().await?;
    let stages = result?;
    let text = report(&stages, requests);
    let big: Vec<String> = stages.iter().flat_map(|s| s.scans.big.clone()).collect();
    if !big.is_empty() {
        anyhow::bail!(
            "sequential scans of tables of {SMALL_TABLE} rows or more during the timed \
             requests: {}; database {} kept to look at the plans\n{text}",
            big.join(", "),
            db.name
        );
    }
    db.drop_now().await?;
    Ok(text)
}
