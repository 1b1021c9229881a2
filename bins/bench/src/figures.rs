//! The API's figures (1 to 3), each next to its ceilings: the writes over
//! HTTP, through the storage call and as SQL, and the reads next to a
//! trivial handler and their statements.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use diesel::sql_types::Text;
use diesel_async::RunQueryDsl;
use serde_json::json;

use crate::direct::{Direct, GrantCtx, GrantSql, InstanceCtx};
use crate::http::{BodyFn, FixedServer, HttpOp};
use crate::load::{self, Outcome, Stop};
use crate::procs::{self, ApiServer, Database};
use crate::reads::{self, ReadSql};
use crate::report::{Measured, ReadFigure, Report, Rss};
use crate::setup::{self, Api, INST_HISTORY_RESERVATIONS, TENANT};
use crate::{CLIENTS, history, pgbench, say};

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

/// What the figures run against: the database, the api-server under test
/// and the platform set up through it.
#[derive(Clone, Copy)]
pub(crate) struct Bench<'a> {
    /// The database.
    pub(crate) db: &'a Database,
    /// The api-server under test.
    pub(crate) server: &'a ApiServer,
    /// The platform.
    pub(crate) p: &'a setup::Platform,
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
pub(crate) async fn figure_grants(
    Bench { db, server, p }: Bench<'_>,
    dur: Duration,
    report: &mut Report,
) -> anyhow::Result<()> {
    let ctx = |tag: &'static str| GrantCtx::new(tag, p, p.hot_reservation(tag));
    say(&format!(
        "figure 1h: {} earlier grants on the history reservation (SQL)",
        history::GRANTS
    ));
    history::seed_grants(db, p, p.hot_reservation("history")).await?;
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

    let (storage, sql) = ceilings(db, n, ctx).await?;
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
pub(crate) async fn figure_instances_history(
    Bench { db, server, p }: Bench<'_>,
    dur: Duration,
    report: &mut Report,
) -> anyhow::Result<()> {
    say(&format!(
        "figure 2h: instances.create over {INST_HISTORY_RESERVATIONS} reservations, without and \
         with {} deleted instances on each (SQL)",
        history::INSTANCES
    ));
    history::seed_instances(db, p, p.instance_targets("hist-with")).await?;
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
pub(crate) async fn figure_instances(
    Bench { db, server, p }: Bench<'_>,
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

    let (storage, sql) = ceilings(db, n, ctx).await?;
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

pub(crate) async fn figure_reads(
    Bench { db, server, p }: Bench<'_>,
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
                json!({ "tenantId": TENANT, "grantId": load::round_robin(&ids, i) }).to_string()
            })
        };
        let sample = api
            .raw(
                &p.tenant_token,
                "reservationGrants/get",
                &json!({ "tenantId": TENANT, "grantId": <[String]>::first(&ids) }),
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
        report.list_items = serde_json::from_slice::<serde_json::Value>(&sample)?
            .get("items")
            .and_then(serde_json::Value::as_array)
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

/// 1,200 grants on the hot SQL reservation, for the reads when figure 1 is skipped.
pub(crate) async fn fill_grants(db: &Database, p: &setup::Platform) -> anyhow::Result<()> {
    let ctx = GrantCtx::new("fill", p, p.hot_reservation("sql"));
    let workers = db
        .connections(CLIENTS)
        .await?
        .into_iter()
        .map(GrantSql::on(ctx))
        .collect();
    load::run(workers, Stop::Count(1200)).await?;
    Ok(())
}

/// A write figure's ceilings: `n` operations through the storage call, then
/// `n` as direct SQL, each side on its own operations (`ctx` of its tag).
async fn ceilings<C>(
    db: &Database,
    n: u64,
    ctx: impl Fn(&'static str) -> C,
) -> anyhow::Result<(Outcome, Outcome)>
where
    Direct<C, false>: load::Op,
    Direct<C, true>: load::Op,
{
    let storage = on_connections(db, n, Direct::<C, false>::on(ctx("storage"))).await?;
    show("storage call", &storage);
    let sql = on_connections(db, n, Direct::<C, true>::on(ctx("sql"))).await?;
    show("direct SQL", &sql);
    Ok((storage, sql))
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

/// Figure 2b: a burst of creates on one reservation of a managed pool, the
/// worker creating their VMs (`burst`).
pub(crate) async fn figure_burst(
    Bench { db, server, p }: Bench<'_>,
    report: &mut Report,
) -> anyhow::Result<()> {
    say(&format!(
        "figure 2b: a burst of {} instances.create on one reservation of a managed pool, \
         {CLIENTS} clients, the worker creating their VMs on fake-gce",
        crate::burst::SLOTS
    ));
    let rss = RssWatch::start(server, "2b");
    let b = crate::burst::run(db, server, &p.tenant_token, p.now, CLIENTS).await?;
    report.rss.push(rss.done(server)?);
    say(&format!(
        "  HTTP API: {} ops in {:.2} s = {:.0}/s; answer to RUNNING p50 {:.1} ms, p99 {:.1} ms \
         ({} not running)",
        b.api.ops,
        b.api.elapsed.as_secs_f64(),
        b.api.throughput(),
        b.running_quantile(0.5).as_secs_f64() * 1e3,
        b.running_quantile(0.99).as_secs_f64() * 1e3,
        b.not_running
    ));
    report.burst = Some(b);
    Ok(())
}

/// Figure 7: a burst against a provider like the real one, two tenants
/// (`pace`).
pub(crate) async fn figure_pace(
    Bench { db, server, p }: Bench<'_>,
    report: &mut Report,
) -> anyhow::Result<()> {
    say(&format!(
        "figure 7: {} managed creates of one tenant, then {} of another, against fake-gce \
         with operations of {}-{} s and {} writes a minute",
        crate::pace::FIRST,
        crate::pace::SECOND,
        crate::pace::LATENCY_MS.0 / 1000,
        crate::pace::LATENCY_MS.1 / 1000,
        crate::pace::WRITES_PER_MIN
    ));
    let f = crate::pace::run(db, server, &p.tenant_token, CLIENTS).await?;
    say(&format!(
        "  makespan {:.1} s (bound {:.1} s); second tenant p50 {:.1} s, p99 {:.1} s; \
         {} failed, {} unsettled, {} calls, {} rate refusals, peak {} in flight; \
         worker {:.2} cores, {} connections at most",
        f.makespan.as_secs_f64(),
        f.bound.as_secs_f64(),
        f.second_quantile(0.5).as_secs_f64(),
        f.second_quantile(0.99).as_secs_f64(),
        f.failed,
        f.unsettled,
        f.mutating_calls,
        f.rate_refusals,
        f.peak_in_flight,
        f.worker_cores(),
        f.peak_connections
    ));
    report.pace = Some(f);
    Ok(())
}

/// Figure 6: webhook delivery of 1,000 events, one at a time (`hooks`).
pub(crate) async fn figure_webhooks(
    Bench { db, server, .. }: Bench<'_>,
    report: &mut Report,
) -> anyhow::Result<()> {
    say(&format!(
        "figure 6: webhook delivery of {} events, one at a time, to a local receiver",
        crate::hooks::EVENTS
    ));
    let rss = RssWatch::start(server, "6");
    let d = crate::hooks::run(db, server).await?;
    say(&format!(
        "  request to arrival: p50 {:.1} ms, p99 {:.1} ms, {:.1} s in all",
        d.quantile(0.5).as_secs_f64() * 1e3,
        d.quantile(0.99).as_secs_f64() * 1e3,
        d.elapsed.as_secs_f64()
    ));
    report.webhooks = Some(d);
    say(&format!(
        "figure 6, again: {} events while another tenant's {} webhooks point at an endpoint \
         that never answers, {} deliveries due",
        crate::hooks::HOSTILE_EVENTS,
        crate::hooks::HOSTILE_WEBHOOKS,
        crate::hooks::HOSTILE_WEBHOOKS * crate::hooks::HOSTILE_DUE_EACH
    ));
    let d = crate::hooks::run_hostile(db, server).await?;
    report.rss.push(rss.done(server)?);
    say(&format!(
        "  request to arrival: p50 {:.1} ms, p99 {:.1} ms (target p99 < 1 s)",
        d.quantile(0.5).as_secs_f64() * 1e3,
        d.quantile(0.99).as_secs_f64() * 1e3,
    ));
    report.webhooks_hostile = Some(d);
    Ok(())
}
