//! Managed instances against a provider at the real one's pace (contract
//! 3.12 r4): operations that take seconds, a concurrent-operations quota and
//! a per-minute write quota per project, answered as Compute Engine answers
//! them. A burst of one tenant waits on the provider's quota, never another
//! tenant's step behind it; no step fails for a quota; the worker does not
//! send a refused call again inside its window. Orders and counts are
//! asserted, not durations: a loaded machine only makes everything slower.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use diesel::QueryableByName;
use diesel::sql_types::Text;
use diesel_async::RunQueryDsl;
use serde_json::Value;

use crate::support::builders::{InstanceBuilder, PlatformBuilder};
use crate::support::db::db;
use crate::support::fixtures::{Platform, id, set_quota, tenant_with_pool};
use crate::support::gce::{Gce, PROJECT};
use crate::support::server::Server;
use crate::support::worker::{self, Running};

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = Text)]
    instance_id: String,
    #[diesel(sql_type = Text)]
    tenant_id: String,
    #[diesel(sql_type = Text)]
    state: String,
}

/// Every instance's `(tenant, state)`.
async fn states(conn: &mut diesel_async::AsyncPgConnection) -> BTreeMap<String, (String, String)> {
    let rows: Vec<Row> = diesel::sql_query("SELECT instance_id, tenant_id, state FROM instances")
        .load(conn)
        .await
        .expect("instances");
    rows.into_iter()
        .map(|r| (r.instance_id, (r.tenant_id, r.state)))
        .collect()
}

/// One `vps.instances` replica with the test's pacing.
fn replica(s: &Server, env: &[(&str, &str)]) -> Running {
    let mut cmd = worker::command(s);
    cmd.args(["--only", "vps.instances"])
        .env("BC_INTERVAL_MS", "200")
        .env("BC_VM_MAX_BACKOFF", "5s")
        .env("BC_VM_STEP_TIMEOUT", "120");
    for (k, v) in env {
        cmd.env(k, v);
    }
    Running::spawn(cmd)
}

/// Creates `n` managed instances of `tenant`; their ids.
async fn create_many(s: &Server, token: &str, tenant: &str, pool: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for k in 0..n {
        let a = InstanceBuilder::on(pool, tenant, token)
            .key(&format!("{tenant}-{k}"))
            .send(s)
            .await;
        assert_eq!(a.status, 200, "{:?}", a.body);
        ids.push(id(&a.body["instance"]));
    }
    ids
}

/// What the run looked like, read every 100 ms until every instance is
/// `running` (or `failed`): for each instance of `second`, how many of
/// `first`'s were running when it was first seen running.
struct Run {
    first_running_when_second_ran: Vec<usize>,
    failed: Vec<String>,
}

async fn watch(s: &Server, first: &str, second: &str, patience: Duration) -> Run {
    let mut conn = db(s).await;
    let deadline = Instant::now() + patience;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    loop {
        let now = states(&mut conn).await;
        let running_of = |t: &str| {
            now.values()
                .filter(|(tenant, state)| tenant == t && state == "running")
                .count()
        };
        let first_running = running_of(first);
        for (inst, (tenant, state)) in &now {
            if tenant == second && state == "running" {
                seen.entry(inst.clone()).or_insert(first_running);
            }
        }
        let unsettled = now
            .values()
            .filter(|(_, state)| !matches!(state.as_str(), "running" | "failed"))
            .count();
        if unsettled == 0 {
            return Run {
                first_running_when_second_ran: seen.into_values().collect(),
                failed: now
                    .into_iter()
                    .filter(|(_, (_, state))| state == "failed")
                    .map(|(i, _)| i)
                    .collect(),
            };
        }
        assert!(
            Instant::now() < deadline,
            "instances still between states after {patience:?}: {unsettled} of {}",
            now.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A fake Compute Engine whose operations take `min_ms` to `max_ms`.
fn slow(min_ms: u64, max_ms: u64) -> fake_gce::FakeGce {
    fake_gce::FakeGce::new(fake_gce::FakeGceConfig::default())
        .with_operation_latency(min_ms, max_ms)
}

/// A managed platform on `fake` whose reservation and acme's quotas take
/// `n` instances.
async fn paced_platform(s: &Server, fake: fake_gce::FakeGce, n: i64) -> Platform {
    let p = PlatformBuilder::new()
        .slots(n)
        .managed()
        .gce(Gce::start_fake(fake).await)
        .build(s)
        .await;
    set_quota(s, "acme", &p.pool, "instances", n).await;
    set_quota(s, "acme", &p.pool, "vcpus", 4 * n).await;
    set_quota(s, "acme", &p.pool, "memoryGib", 16 * n).await;
    p
}

/// The fake's counts for the test project.
async fn stats(gce: &Gce) -> Value {
    gce.get("stats").await["projects"][PROJECT].clone()
}

fn count(v: &Value, what: &str) -> u64 {
    v[what].as_u64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_burst_waits_on_the_providers_quota_not_another_tenants_steps_behind_it() {
    let s = Server::start().await;
    // Operations of 1 to 2 s, at most 8 in flight per project.
    let p = paced_platform(&s, slow(1000, 2000).with_concurrent_operations(8), 80).await;
    let globex = tenant_with_pool(&s, "globex", &p.pool).await;
    // The backlog is there before the worker starts: acme's 60, then
    // globex's 3, all due at once.
    create_many(&s, &p.tenant_token, "acme", &p.pool, 60).await;
    create_many(&s, &globex, "globex", &p.pool, 3).await;
    let w = replica(&s, &[]);
    let run = watch(&s, "acme", "globex", Duration::from_secs(240)).await;
    let err = w.terminate_clean().await;
    assert!(run.failed.is_empty(), "failed: {:?}\n{err}", run.failed);
    // Round-robin claims: globex's steps are sent with acme's first ones or
    // as soon as the provider frees a place, not after acme's 60.
    assert_eq!(run.first_running_when_second_ran.len(), 3);
    for acme_running in &run.first_running_when_second_ran {
        assert!(
            *acme_running < 54,
            "a globex instance ran only after {acme_running} of acme's 60 \
             (in order: {:?})",
            run.first_running_when_second_ran
        );
    }
    // The provider's quota was met, not hammered: after the first burst
    // taught the worker the limit, a freed place takes one call.
    let st = stats(&p.gce).await;
    let refusals = count(&st, "concurrentRefusals");
    assert!(count(&st, "peakOperationsInFlight") <= 8, "{st}");
    assert!(
        refusals <= 63 + 16,
        "{refusals} concurrent-operations refusals for 63 creates: {st}"
    );
    assert!(!err.contains("timeout"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rate_quota_refusal_pauses_the_account_to_the_next_minute_and_fails_nothing() {
    let s = Server::start().await;
    // 12 writes a minute for the project: 20 creates need two windows.
    let p = paced_platform(&s, slow(200, 500).with_writes_per_min(12), 40).await;
    create_many(&s, &p.tenant_token, "acme", &p.pool, 20).await;
    let w = replica(&s, &[]);
    let run = watch(&s, "acme", "nobody", Duration::from_secs(240)).await;
    let err = w.terminate_clean().await;
    assert!(run.failed.is_empty(), "failed: {:?}\n{err}", run.failed);
    // Each refusal paused the account to the next minute: no refused call
    // was sent again inside its window. 20 creates over 12 a minute: at
    // most 8 refused in the first window, and as many in each later one
    // that the first window's refusals spilled over into (none, here).
    let st = stats(&p.gce).await;
    let refusals = count(&st, "rateRefusals");
    assert!(
        refusals <= 8,
        "{refusals} rate refusals for 20 creates: {st}"
    );
    assert!(
        err.contains("the provider refused a call for its quota"),
        "the pause is logged: {err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_workers_write_budget_keeps_the_provider_from_refusing_at_all() {
    let s = Server::start().await;
    let p = paced_platform(&s, slow(200, 500).with_writes_per_min(12), 40).await;
    // 13 creates over a budget of 6 a minute: three of the worker's minutes.
    // Half the project's quota, so that a burst the two clocks cut at
    // different instants still fits one window of the provider.
    create_many(&s, &p.tenant_token, "acme", &p.pool, 13).await;
    let w = replica(&s, &[("BC_VM_WRITES_PER_MIN", "6")]);
    let run = watch(&s, "acme", "nobody", Duration::from_secs(240)).await;
    let err = w.terminate_clean().await;
    assert!(run.failed.is_empty(), "failed: {:?}\n{err}", run.failed);
    let st = stats(&p.gce).await;
    assert_eq!(count(&st, "rateRefusals"), 0, "{st}");
    assert_eq!(count(&st, "mutatingCalls"), 13, "one call per create: {st}");
}

/// Round-robin claims: with the account's budget spent on five calls a
/// minute, the second tenant's only create is among the first five sent,
/// not behind the first tenant's twenty (a first-come queue would send it
/// last, minutes later).
#[tokio::test(flavor = "multi_thread")]
async fn one_tenants_backlog_does_not_hold_back_another_tenants_first_step() {
    let s = Server::start().await;
    let p = paced_platform(&s, slow(300, 800), 40).await;
    let globex = tenant_with_pool(&s, "globex", &p.pool).await;
    create_many(&s, &p.tenant_token, "acme", &p.pool, 20).await;
    let other = create_many(&s, &globex, "globex", &p.pool, 1).await;
    let w = replica(&s, &[("BC_VM_WRITES_PER_MIN", "5")]);
    let mut conn = db(&s).await;
    let deadline = Instant::now() + Duration::from_secs(150);
    let acme_running = loop {
        let now = states(&mut conn).await;
        if now
            .get(&other[0])
            .is_some_and(|(_, state)| state == "running")
        {
            break now
                .values()
                .filter(|(tenant, state)| tenant == "acme" && state == "running")
                .count();
        }
        assert!(Instant::now() < deadline, "globex's instance never ran");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    w.kill().await;
    // At most two of the worker's minutes (five calls each) went by.
    assert!(
        acme_running <= 10,
        "globex's instance ran after {acme_running} of acme's"
    );
}

#[derive(QueryableByName)]
struct StepCounts {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    open: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    leased: i64,
}

/// A thousand creates through a pipeline of 16 slots (so that far more
/// steps are claimed than can call at once, and the claim waits while
/// running steps take places): every instance runs, each VM is inserted
/// once, no step is left open or leased, and no pass panicked.
#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_creates_through_a_narrow_pipeline_all_run_once() {
    let s = Server::start().await;
    let p = paced_platform(&s, slow(50, 400), 1000).await;
    create_many(&s, &p.tenant_token, "acme", &p.pool, 1000).await;
    let w = replica(&s, &[("BC_VM_CONCURRENCY", "16")]);
    let run = watch(&s, "acme", "nobody", Duration::from_secs(420)).await;
    let err = w.terminate_clean().await;
    assert!(run.failed.is_empty(), "failed: {:?}\n{err}", run.failed);
    assert!(!err.contains("panicked"), "{err}");
    let st = stats(&p.gce).await;
    assert_eq!(
        count(&st, "mutatingCalls"),
        1000,
        "one insert per create: {st}"
    );
    let mut conn = db(&s).await;
    let left: StepCounts = diesel::sql_query(
        "SELECT count(*) FILTER (WHERE state = 'open') AS open, \
         count(*) FILTER (WHERE lease_until IS NOT NULL) AS leased FROM vm_steps",
    )
    .get_result(&mut conn)
    .await
    .expect("step counts");
    assert_eq!((left.open, left.leased), (0, 0));
}

/// Counts of `vm_steps` with an operation and with a live lease.
async fn sent_and_leased(conn: &mut diesel_async::AsyncPgConnection) -> (i64, i64) {
    #[derive(QueryableByName)]
    struct Counts {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        sent: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        leased: i64,
    }
    let c: Counts = diesel::sql_query(
        "SELECT count(*) FILTER (WHERE operation IS NOT NULL) AS sent, \
         count(*) FILTER (WHERE state = 'open' AND lease_until IS NOT NULL) AS leased \
         FROM vm_steps",
    )
    .get_result(conn)
    .await
    .expect("step counts");
    (c.sent, c.leased)
}

/// A worker stopped with SIGTERM gives back the leases of its steps in
/// flight: the next worker takes them at once, not when their ten-minute
/// leases lapse, and no VM is made twice.
#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_worker_hands_its_steps_in_flight_to_the_next() {
    let s = Server::start().await;
    let p = paced_platform(&s, slow(4000, 6000), 10).await;
    create_many(&s, &p.tenant_token, "acme", &p.pool, 5).await;
    let lease = [
        ("BC_VM_LEASE", "600"),
        ("RUST_LOG", "info"),
        ("NO_COLOR", "1"),
    ];
    let w = replica(&s, &lease);
    let mut conn = db(&s).await;
    let deadline = Instant::now() + Duration::from_secs(90);
    while sent_and_leased(&mut conn).await != (5, 5) {
        assert!(Instant::now() < deadline, "the creates were never all sent");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let err = w.terminate_clean().await;
    assert!(err.contains("gave back the leases"), "{err}");
    assert_eq!(sent_and_leased(&mut conn).await, (5, 0));
    let next = replica(&s, &lease);
    // Far less than the leases' ten minutes.
    let run = watch(&s, "acme", "nobody", Duration::from_secs(120)).await;
    let err = next.terminate_clean().await;
    assert!(run.failed.is_empty(), "failed: {:?}\n{err}", run.failed);
    let st = stats(&p.gce).await;
    assert_eq!(
        count(&st, "mutatingCalls"),
        5,
        "one insert per create: {st}"
    );
}
