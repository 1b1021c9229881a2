//! Figure 7: a burst against a provider like the real one (contract 3.12
//! r4). Compute Engine's pace on fake-gce: every operation takes 10 to 40 s
//! (drawn per operation), and a project takes 1,200 mutating calls a
//! minute. One tenant creates 1,000 managed instances, then a second tenant
//! creates 10; the real `reconciler-worker --only vps.instances` creates
//! their VMs with its defaults.
//!
//! Measured against what the provider allows: the makespan (first create
//! answered to last VM recorded `RUNNING`) next to the provider's bound (the
//! minutes its quota needs to accept every call, plus the slowest
//! operation); the second tenant's time from its API answer to `RUNNING`;
//! failed instances, rate refusals, peak operations in flight (fake-gce's
//! `/fake/stats`), the worker's CPU and the database connections in use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diesel::sql_types::{BigInt, Text};
use diesel_async::RunQueryDsl;
use serde_json::{Value, json};

use crate::busy::{CpuSpan, CpuUse};
use crate::http::{BodyFn, HttpOp};
use crate::load::{self, Op, Outcome, Stop};
use crate::procs::{ApiServer, Database, spawn_worker};
use crate::setup::{Api, FLAVOR, Gce, PROJECT, TENANT, str_at};

/// The first tenant's creates.
pub const FIRST: u64 = 1_000;
/// The second tenant's creates, sent once the first tenant's are answered.
pub const SECOND: u64 = 10;
/// Each operation's latency, drawn per operation (ms).
pub const LATENCY_MS: (u64, u64) = (10_000, 40_000);
/// The project's mutating calls per minute.
pub const WRITES_PER_MIN: u32 = 1_200;
/// The second tenant's name.
const OTHER: &str = "globex";

/// What figure 7 measured.
#[derive(Debug, Clone)]
pub struct Pace {
    /// The first tenant's creates over HTTP.
    pub api: Outcome,
    /// From the first create's answer to the last VM recorded `RUNNING`.
    pub makespan: Duration,
    /// The provider's bound: its quota's minutes for every call, plus the
    /// slowest operation.
    pub bound: Duration,
    /// Per instance of the first tenant, API answer to `RUNNING`, sorted.
    pub first: Vec<Duration>,
    /// Per instance of the second tenant, API answer to `RUNNING`, sorted.
    pub second: Vec<Duration>,
    /// Instances `failed`.
    pub failed: u64,
    /// Instances neither `running` nor `failed` when the wait gave up.
    pub unsettled: u64,
    /// fake-gce's counts for the project.
    pub mutating_calls: u64,
    /// Calls refused for the per-minute quota.
    pub rate_refusals: u64,
    /// Calls refused for the concurrent operations.
    pub concurrent_refusals: u64,
    /// The most operations in flight at once.
    pub peak_in_flight: u64,
    /// The machine's and each part's CPU over the run.
    pub cpu: CpuUse,
    /// The most connections to the bench's database at once.
    pub peak_connections: u64,
}

impl Pace {
    /// The `q` quantile of the second tenant's times (nearest rank).
    pub fn second_quantile(&self, q: f64) -> Duration {
        load::nearest_rank(&self.second, q)
    }

    /// The `q` quantile of the first tenant's times (nearest rank).
    pub fn first_quantile(&self, q: f64) -> Duration {
        load::nearest_rank(&self.first, q)
    }

    /// The worker's cores over the run.
    pub fn worker_cores(&self) -> f64 {
        self.cpu
            .parts
            .iter()
            .find(|(p, _)| *p == "worker")
            .map_or(0.0, |(_, c)| *c)
    }
}

/// An HTTP create that notes when its answer arrived.
struct Timed {
    op: HttpOp,
    answered: Arc<Mutex<HashMap<u64, Instant>>>,
    offset: u64,
}

impl Op for Timed {
    async fn run(&mut self, i: u64) -> anyhow::Result<()> {
        self.op.run(i).await?;
        if let Ok(mut a) = self.answered.lock() {
            a.insert(self.offset + i, Instant::now());
        }
        Ok(())
    }
}

/// A fake Compute Engine at the real one's pace.
async fn slow_gce() -> anyhow::Result<Gce> {
    let fake = fake_gce::FakeGce::new(fake_gce::FakeGceConfig::default())
        .with_operation_latency(LATENCY_MS.0, LATENCY_MS.1)
        .with_writes_per_min(WRITES_PER_MIN);
    Gce::start_fake(fake).await
}

/// Sets up a managed pool offered to two tenants, starts the worker, sends
/// the two bursts and waits for every VM.
pub async fn run(
    db: &Database,
    server: &ApiServer,
    tenant_token: &str,
    clients: usize,
) -> anyhow::Result<Pace> {
    let api = Api::new(&server.url());
    let gce = slow_gce().await?;
    let http = reqwest::Client::new();
    let slots = i64::try_from(FIRST + SECOND)?;
    let (_, pool_id) = crate::setup::managed_pool(&api, &gce, "pace", slots).await?;
    let other = api.root("tenants/create", json!({ "name": OTHER })).await?;
    let other_token = str_at(&other, "/adminKey/secret")?;
    for tenant in [TENANT, OTHER] {
        api.root(
            "pools/offer",
            json!({
                "poolId": pool_id,
                "offerTenantId": tenant,
                "quotas": { "instances": 1_000_000, "vcpus": 4_000_000,
                            "memoryGib": 16_000_000 },
            }),
        )
        .await?;
    }
    let mut worker = spawn_worker(
        db,
        "vps.instances",
        &[("BC_INTERVAL_MS", "10000"), ("BC_VM_LIST_INTERVAL", "30s")],
    )?;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let cpu = CpuSpan::start();
    let connections = Connections::watch(db).await?;
    let answered = Arc::new(Mutex::new(HashMap::new()));
    let burst = |tenant: &'static str, offset: u64| {
        let pool = pool_id.clone();
        let body: BodyFn = Arc::new(move |i| {
            json!({
                "tenantId": tenant,
                "poolId": pool,
                "flavor": FLAVOR,
                "name": format!("pace-{}", offset + i),
                "idempotencyKey": format!("pace-{}", offset + i),
            })
            .to_string()
        });
        body
    };
    let started = Instant::now();
    let ops = HttpOp::many(
        clients,
        server.addr,
        "/api/compute/instances/create",
        tenant_token,
        burst(TENANT, 0),
    )
    .await?;
    let timed = |ops: Vec<HttpOp>, offset| {
        ops.into_iter()
            .map(|op| Timed {
                op,
                answered: answered.clone(),
                offset,
            })
            .collect::<Vec<_>>()
    };
    let api_run = load::run(timed(ops, 0), Stop::Count(FIRST)).await?;
    let ops = HttpOp::many(
        1,
        server.addr,
        "/api/compute/instances/create",
        &other_token,
        burst(OTHER, FIRST),
    )
    .await?;
    load::run(timed(ops, FIRST), Stop::Count(SECOND)).await?;

    // Every VM recorded RUNNING (or failed), at most 10 minutes.
    let settled = wait_settled(db, &pool_id, FIRST + SECOND, started).await?;
    let cpu = cpu.finish();
    let peak_connections = connections.stop().await;
    let _ = worker.kill().await;
    let stats: Value = http
        .get(format!("{}/fake/stats", gce.url))
        .send()
        .await?
        .json()
        .await?;
    let stats = stats.pointer(&format!("/projects/{PROJECT}"));
    let count = |k: &str| {
        stats
            .and_then(|s| s.get(k))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    let answered = answered.lock().map(|a| a.clone()).unwrap_or_default();
    let to_running = |range: std::ops::Range<u64>| {
        let mut out: Vec<Duration> = settled
            .running
            .iter()
            .filter(|(i, _)| range.contains(i))
            .filter_map(|(i, at)| Some(at.saturating_duration_since(*answered.get(i)?)))
            .collect();
        out.sort_unstable();
        out
    };
    let calls = FIRST + SECOND;
    let quota_minutes = calls.saturating_sub(1) / u64::from(WRITES_PER_MIN);
    Ok(Pace {
        api: api_run,
        makespan: settled.last.saturating_duration_since(started),
        bound: Duration::from_secs(60 * quota_minutes) + Duration::from_millis(LATENCY_MS.1),
        first: to_running(0..FIRST),
        second: to_running(FIRST..FIRST + SECOND),
        failed: settled.failed,
        unsettled: settled.unsettled,
        mutating_calls: count("mutatingCalls"),
        rate_refusals: count("rateRefusals"),
        concurrent_refusals: count("concurrentRefusals"),
        peak_in_flight: count("peakOperationsInFlight"),
        cpu,
        peak_connections,
    })
}

/// What the wait for the VMs saw.
struct Settled {
    /// Per instance number, when it was first seen `running`.
    running: HashMap<u64, Instant>,
    failed: u64,
    unsettled: u64,
    /// When the last one settled.
    last: Instant,
}

async fn wait_settled(
    db: &Database,
    pool_id: &str,
    n: u64,
    started: Instant,
) -> anyhow::Result<Settled> {
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = Text)]
        name: String,
        #[diesel(sql_type = Text)]
        state: String,
    }
    let mut conn = db.connect().await?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut running = HashMap::new();
    let mut last = started;
    loop {
        let rows: Vec<Row> =
            diesel::sql_query("SELECT name, state FROM instances WHERE pool_id = $1")
                .bind::<Text, _>(pool_id)
                .load(&mut conn)
                .await?;
        let now = Instant::now();
        let mut failed = 0;
        for r in &rows {
            let Some(i) = r
                .name
                .strip_prefix("pace-")
                .and_then(|i| i.parse::<u64>().ok())
            else {
                continue;
            };
            match r.state.as_str() {
                "running" => {
                    running.entry(i).or_insert_with(|| {
                        last = now;
                        now
                    });
                }
                "failed" => failed += 1,
                _ => {}
            }
        }
        let settled = running.len() as u64 + failed;
        if settled >= n || now > deadline {
            return Ok(Settled {
                running,
                failed,
                unsettled: n.saturating_sub(settled),
                last,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The database's connections in use, sampled every 250 ms.
struct Connections {
    stop: tokio::sync::oneshot::Sender<()>,
    peak: tokio::task::JoinHandle<u64>,
}

impl Connections {
    async fn watch(db: &Database) -> anyhow::Result<Connections> {
        #[derive(diesel::QueryableByName)]
        struct N {
            #[diesel(sql_type = BigInt)]
            n: i64,
        }
        let mut conn = db.connect().await?;
        let name = db.name.clone();
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let peak = tokio::spawn(async move {
            let mut peak = 0;
            loop {
                let n: Option<N> = diesel::sql_query(
                    "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = $1",
                )
                .bind::<Text, _>(&name)
                .get_result(&mut conn)
                .await
                .ok();
                // The sampling connection itself is not counted.
                let n = n.map_or(0, |n| u64::try_from(n.n - 1).unwrap_or(0));
                peak = peak.max(n);
                tokio::select! {
                    _ = &mut stopped => return peak,
                    () = tokio::time::sleep(Duration::from_millis(250)) => {}
                }
            }
        });
        Ok(Connections { stop, peak })
    }

    async fn stop(self) -> u64 {
        let _ = self.stop.send(());
        self.peak.await.unwrap_or(0)
    }
}
