//! Figure 2b: a burst of instances on one reservation of a managed pool.
//!
//! One tenant's grant of 1,000 slots on one reservation of a pool with `vm`:
//! 16 clients create instances in it until the grant is full, every create
//! taking the same reservation's row lock, while the real
//! `reconciler-worker --only vps.instances` creates their VMs on the fake
//! (its own, answering every operation on its first read). Measured: the
//! creates' throughput (next to pgbench's hot-row ceiling of figure 1), and
//! for every instance the time from the API's answer to the database
//! recording its VM `RUNNING` (both on this machine's clock).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use diesel::sql_types::{BigInt, Text};
use diesel_async::RunQueryDsl;
use serde_json::json;

use crate::http::{BodyFn, HttpOp};
use crate::load::{self, Op, Outcome, Stop};
use crate::procs::{ApiServer, Database, spawn_worker};
use crate::setup::{Api, FLAVOR, Gce, HOUR_MS, TENANT};

/// The grant's slots, and the instances created.
pub const SLOTS: i64 = 1_000;

/// What figure 2b measured.
#[derive(Debug, Clone)]
pub struct Burst {
    /// The creates over HTTP.
    pub api: Outcome,
    /// Per instance, from the API's answer to `RUNNING`, sorted.
    pub to_running: Vec<Duration>,
    /// Instances not `RUNNING` when the wait gave up.
    pub not_running: u64,
}

impl Burst {
    /// The `q` quantile of [`Burst::to_running`] (nearest rank).
    pub fn running_quantile(&self, q: f64) -> Duration {
        crate::load::nearest_rank(&self.to_running, q)
    }
}

/// An HTTP create that notes when its answer arrived (epoch ms).
struct Timed {
    op: HttpOp,
    answered: Arc<Mutex<HashMap<u64, i64>>>,
}

impl Op for Timed {
    async fn run(&mut self, i: u64) -> anyhow::Result<()> {
        self.op.run(i).await?;
        if let Ok(mut a) = self.answered.lock() {
            a.insert(i, wall_ms());
        }
        Ok(())
    }
}

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(0))
}

/// Sets up the managed pool, starts the worker, runs the burst and waits
/// for the VMs.
pub async fn run(
    db: &Database,
    server: &ApiServer,
    tenant_token: &str,
    now: i64,
    clients: usize,
) -> anyhow::Result<Burst> {
    let api = Api::new(&server.url());
    let gce = Gce::start().await?;
    let (account_id, pool_id) = crate::setup::managed_pool(&api, &gce, "burst", SLOTS).await?;
    let reservation_id = Gce::reservation_id("burst");
    api.root(
        "pools/offer",
        json!({
            "poolId": pool_id,
            "offerTenantId": TENANT,
            "quotas": { "instances": 1_000_000, "vcpus": 4_000_000, "memoryGib": 16_000_000 },
        }),
    )
    .await?;
    api.root(
        "reservationGrants/create",
        json!({
            "accountId": account_id,
            "reservationId": reservation_id,
            "grantTenantId": TENANT,
            "slots": SLOTS,
            "startsAt": now,
            "endsAt": now + 30 * 24 * HOUR_MS,
            "idempotencyKey": "grant-burst",
        }),
    )
    .await?;

    // The worker drives the VM steps, woken by NOTIFY (an interval of a
    // minute: only NOTIFY starts a step sooner).
    let mut worker = spawn_worker(
        db,
        "vps.instances",
        &[("BC_INTERVAL_MS", "60000"), ("BC_VM_LIST_INTERVAL", "600")],
    )?;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let answered = Arc::new(Mutex::new(HashMap::new()));
    let pool_for_body = pool_id.clone();
    let body: BodyFn = Arc::new(move |i| {
        json!({
            "tenantId": TENANT,
            "poolId": pool_for_body,
            "flavor": FLAVOR,
            "name": format!("burst-{i}"),
            "idempotencyKey": format!("burst-{i}"),
        })
        .to_string()
    });
    let workers: Vec<Timed> = HttpOp::many(
        clients,
        server.addr,
        "/api/compute/instances/create",
        tenant_token,
        body,
    )
    .await?
    .into_iter()
    .map(|op| Timed {
        op,
        answered: answered.clone(),
    })
    .collect();
    let api_run = load::run(workers, Stop::Count(SLOTS.unsigned_abs())).await?;

    // Wait (at most a minute) for every VM to be recorded RUNNING.
    #[derive(diesel::QueryableByName)]
    struct Running {
        #[diesel(sql_type = Text)]
        name: String,
        #[diesel(sql_type = BigInt)]
        at: i64,
    }
    let mut conn = db.connect().await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let rows = loop {
        let rows: Vec<Running> = diesel::sql_query(
            "SELECT name, vm_changed_wall AS at FROM instances \
              WHERE pool_id = $1 AND state = 'running' AND vm_changed_wall IS NOT NULL",
        )
        .bind::<Text, _>(&pool_id)
        .load(&mut conn)
        .await?;
        if rows.len() as u64 >= api_run.ops || Instant::now() > deadline {
            break rows;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let _ = worker.kill().await;
    let answered = answered.lock().map(|a| a.clone()).unwrap_or_default();
    let mut to_running: Vec<Duration> = rows
        .iter()
        .filter_map(|r| {
            let i: u64 = r.name.strip_prefix("burst-")?.parse().ok()?;
            let at = answered.get(&i)?;
            Some(Duration::from_millis(u64::try_from(r.at - at).unwrap_or(0)))
        })
        .collect();
    to_running.sort_unstable();
    let not_running = api_run.ops.saturating_sub(to_running.len() as u64);
    drop(gce);
    Ok(Burst {
        api: api_run,
        to_running,
        not_running,
    })
}
