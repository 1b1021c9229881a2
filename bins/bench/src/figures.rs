//! The API's figures (1 to 3), each next to its ceilings: the writes over
//! HTTP, through the storage call and as SQL, and the reads next to a
//! trivial handler and their statements.

use std::sync::Arc;
use std::time::Duration;

use crate::direct::{Direct, GrantCtx, InstanceCtx};
use crate::http::{BodyFn, HttpOp};
use crate::load::{self, Outcome, Stop};
use crate::procs::{self, ApiServer, Database};
use crate::report::{Measured, Report, Rss};
use crate::setup::{self, INST_HISTORY_RESERVATIONS};
use crate::{CLIENTS, history, pgbench, say};

mod read_figures;

pub(crate) use read_figures::{figure_reads, fill_grants};

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
