//! The world the load runs in (built through the API, as a client would),
//! and the steady load: grants created by root, instances created, stopped,
//! started and deleted by two tenants, the manual clock moving on. Every
//! mutation answered 200 is written down with what it returned.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::api::{Answer, Api, ROOT};
use crate::procs::ROOT_TOKEN;

/// One hour in milliseconds.
pub const HOUR: i64 = 3_600_000;
/// How far each tick moves the manual clock.
const TICK_MS: i64 = 10 * 60_000;
/// How often the clock ticks.
const TICK_EVERY: Duration = Duration::from_millis(200);
/// The fake's project, zone and flavor.
const PROJECT: &str = "platform-prod";
const ZONE: &str = "us-central1-a";
const FLAVOR: &str = "n2-standard-4";
/// Slots of the one reservation (room for every grant the load makes).
const SLOTS: i64 = 2_000;

/// What the seed built.
pub struct World {
    /// Root's provider account on the fake.
    pub account: String,
    /// The pool the reservation is bound to.
    pub pool: String,
    /// The bound reservation.
    pub reservation: String,
    /// The tenants `(name, admin secret)`.
    pub tenants: Vec<(String, String)>,
}

/// A grant whose create was answered 200.
#[derive(Debug, Clone)]
pub struct GrantAck {
    /// Its id.
    pub id: String,
    /// Slots, `startsAt`, `endsAt` as answered.
    pub term: (i64, i64, i64),
}

/// An instance's last mutation answered 200.
#[derive(Debug, Clone)]
pub struct InstanceAck {
    /// The tenant and its secret.
    pub tenant: (String, String),
    /// The state that answer returned.
    pub state: String,
}

/// What the load writes down.
#[derive(Default)]
pub struct Ledger {
    /// Grants answered 200.
    pub grants: Mutex<Vec<GrantAck>>,
    /// Instances by id, with their last answered state.
    pub instances: Mutex<BTreeMap<String, InstanceAck>>,
    /// Instance mutations answered 200 (creates included).
    pub instance_writes: AtomicI64,
    /// Clock ticks answered 200.
    pub ticks: AtomicI64,
}

/// State shared by the load's tasks.
pub struct Load {
    api: Api,
    world: World,
    stop: AtomicBool,
    clock: AtomicI64,
    /// What was acknowledged.
    pub ledger: Ledger,
}

/// A deterministic generator, one per task.
struct Rng(rand::rngs::StdRng);

impl Rng {
    fn seeded(seed: u64) -> Rng {
        Rng(rand::SeedableRng::seed_from_u64(seed))
    }

    fn below(&mut self, n: u64) -> u64 {
        rand::Rng::random_range(&mut self.0, 0..n.max(1))
    }
}

/// Builds the world: a reservation on the fake, root's account, a pool, the
/// reservation scanned and bound, two tenants offered the pool; sets the
/// manual clock to an hour boundary. Returns the world and the clock.
pub async fn seed(api: &Api, gce_url: &str) -> anyhow::Result<(World, i64)> {
    let http = reqwest::Client::new();
    let control = format!("{gce_url}/fake/projects/{PROJECT}/zones/{ZONE}/reservations/res-a");
    let resp = http
        .put(&control)
        .json(&json!({
            "count": SLOTS, "inUseCount": 0, "machineType": FLAVOR, "status": "READY",
        }))
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!(
            "fake-gce: putting the reservation answered {}",
            resp.status()
        );
    }
    let now = api
        .root("clock/get", json!({}))
        .await?
        .ok("clock.get")?
        .get("now")
        .and_then(Value::as_i64)
        .context("now")?;
    let clock = (now.div_euclid(HOUR) + 1) * HOUR;
    api.root("clock/set", json!({ "now": clock }))
        .await?
        .ok("clock.set")?;
    let account = api
        .root(
            "providerAccounts/create",
            json!({
                "name": "gce",
                "provider": "gce",
                "config": { "project": PROJECT, "credentials": "none", "endpoint": gce_url },
                "idempotencyKey": "failover-account",
            }),
        )
        .await?
        .ok("providerAccounts.create")?
        .pointer("/account/accountId")
        .and_then(Value::as_str)
        .context("accountId")?
        .to_owned();
    let pool = api
        .root(
            "pools/create",
            json!({
                "name": "gce us-central1",
                "region": "us-central1",
                "provider": "gce",
                "accountId": account,
                "flavors": [{ "name": FLAVOR, "vcpus": 4, "memoryGib": 16, "gpus": 0 }],
                "quotas": { "instances": 10_000, "vcpus": 40_000 },
                "idempotencyKey": "failover-pool",
            }),
        )
        .await?
        .ok("pools.create")?
        .pointer("/pool/poolId")
        .and_then(Value::as_str)
        .context("poolId")?
        .to_owned();
    api.root("providerAccounts/scan", json!({ "accountId": account }))
        .await?
        .ok("providerAccounts.scan")?;
    let reservation = format!("projects/{PROJECT}/zones/{ZONE}/reservations/res-a");
    api.root(
        "providerAccounts/bindReservation",
        json!({ "accountId": account, "reservationId": reservation, "poolId": pool }),
    )
    .await?
    .ok("providerAccounts.bindReservation")?;
    let mut tenants = Vec::new();
    for name in ["acme", "globex"] {
        let created = api
            .root("tenants/create", json!({ "name": name }))
            .await?
            .ok("tenants.create")?;
        let secret = created
            .pointer("/adminKey/secret")
            .and_then(Value::as_str)
            .context("adminKey.secret")?
            .to_owned();
        api.root(
            "pools/offer",
            json!({
                "poolId": pool,
                "offerTenantId": name,
                "quotas": { "instances": 10_000, "vcpus": 40_000, "memoryGib": 160_000 },
            }),
        )
        .await?
        .ok("pools.offer")?;
        tenants.push((name.to_owned(), secret));
    }
    let world = World {
        account,
        pool,
        reservation,
        tenants,
    };
    Ok((world, clock))
}

impl Load {
    /// A load on `world` from the clock `clock`.
    pub fn new(api: Api, world: World, clock: i64) -> Arc<Load> {
        Arc::new(Load {
            api,
            world,
            stop: AtomicBool::new(false),
            clock: AtomicI64::new(clock),
            ledger: Ledger::default(),
        })
    }

    /// Asks the tasks to stop after their current operation.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// The clock as last set.
    pub fn clock(&self) -> i64 {
        self.clock.load(Ordering::SeqCst)
    }

    /// Calls until the answer is not `503 UNAVAILABLE` (a client retrying
    /// with the same body and idempotency key, as the contract allows), for
    /// at most 90 s. A 500 or a 503 with another code is an error.
    async fn until_answered(
        &self,
        token: &str,
        path: &str,
        body: &Value,
    ) -> anyhow::Result<Answer> {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let answer = self.api.call(token, path, body.clone()).await?;
            match (answer.status, answer.code()) {
                (500, _) => bail!("{path} answered 500: {}", answer.body),
                (503, "UNAVAILABLE") => {}
                (503, _) => bail!("{path} answered 503 without UNAVAILABLE: {}", answer.body),
                _ => return Ok(answer),
            }
            if Instant::now() > deadline {
                bail!("{path} still answers 503 after 90 s: {}", answer.body);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Moves the manual clock on every tick (a tick answered 503 is tried
    /// again at the next one, from the same time).
    pub async fn clock_task(self: Arc<Self>) -> anyhow::Result<()> {
        while !self.stopping() {
            tokio::time::sleep(TICK_EVERY).await;
            let next = self.clock() + TICK_MS;
            let answer = self.api.root("clock/set", json!({ "now": next })).await?;
            match (answer.status, answer.code()) {
                (200, _) => {
                    self.clock.store(next, Ordering::SeqCst);
                    self.ledger.ticks.fetch_add(1, Ordering::SeqCst);
                }
                (503, "UNAVAILABLE") => {}
                _ => bail!("clock.set answered {} {}", answer.status, answer.body),
            }
        }
        Ok(())
    }

    /// Root creates one-slot grants for the tenants, starting in half an
    /// hour to an hour and a half, lasting one to four hours.
    pub async fn grants_task(self: Arc<Self>) -> anyhow::Result<()> {
        let mut rng = Rng::seeded(0x9e37_79b9_7f4a_7c15);
        let mut n = 0u64;
        while !self.stopping() {
            n += 1;
            let (tenant, _) = self
                .world
                .tenants
                .get(usize::from(n.is_multiple_of(2)))
                .context("two tenants")?;
            let minutes = 60_000;
            let starts = (self.clock() / minutes) * minutes
                + 30 * minutes
                + i64::try_from(rng.below(60))? * minutes;
            let ends = starts + HOUR * (1 + i64::try_from(rng.below(4))?);
            let body = json!({
                "tenantId": ROOT,
                "accountId": self.world.account,
                "reservationId": self.world.reservation,
                "grantTenantId": tenant,
                "slots": 1,
                "startsAt": starts,
                "endsAt": ends,
                "idempotencyKey": format!("failover-grant-{n}"),
            });
            let answer = self
                .until_answered(ROOT_TOKEN, "reservationGrants/create", &body)
                .await?;
            match (answer.status, answer.code()) {
                (200, _) => {
                    let g = answer.body.get("grant").unwrap_or(&Value::Null);
                    let ack = GrantAck {
                        id: g["grantId"].as_str().context("grantId")?.to_owned(),
                        term: (
                            g["slots"].as_i64().context("slots")?,
                            g["startsAt"].as_i64().context("startsAt")?,
                            g["endsAt"].as_i64().context("endsAt")?,
                        ),
                    };
                    lock(&self.ledger.grants)?.push(ack);
                }
                (409, "CAPACITY_UNAVAILABLE") => {}
                _ => bail!(
                    "reservationGrants.create answered {} {}",
                    answer.status,
                    answer.body
                ),
            }
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        Ok(())
    }

    /// One tenant creates, stops, starts and deletes its instances.
    pub async fn instances_task(self: Arc<Self>, which: usize) -> anyhow::Result<()> {
        let (tenant, token) = self.world.tenants.get(which).context("a tenant")?.clone();
        let mut rng = Rng::seeded(0x2545_f491_4f6c_dd1d + which as u64);
        // (id, state) of the instances not deleted.
        let mut live: Vec<(String, String)> = Vec::new();
        let mut n = 0u64;
        while !self.stopping() {
            n += 1;
            let create = live.len() < 4 || rng.below(4) == 0;
            let (path, body, at) = if create {
                let body = json!({
                    "tenantId": tenant,
                    "poolId": self.world.pool,
                    "flavor": FLAVOR,
                    "idempotencyKey": format!("failover-{tenant}-{n}"),
                });
                ("instances/create", body, None)
            } else {
                let i = usize::try_from(rng.below(live.len() as u64))?;
                let (id, state) = live.get(i).context("a live instance")?;
                let method = match (state.as_str(), rng.below(4)) {
                    (_, 0) => "instances/delete",
                    ("running", _) => "instances/stop",
                    _ => "instances/start",
                };
                let body = json!({ "tenantId": tenant, "instanceId": id });
                (method, body, Some(i))
            };
            let answer = self.until_answered(&token, path, &body).await?;
            if answer.status != 200 {
                bail!("{path} answered {} {}", answer.status, answer.body);
            }
            let inst = answer.body.get("instance").unwrap_or(&Value::Null);
            let id = inst["instanceId"]
                .as_str()
                .context("instanceId")?
                .to_owned();
            let state = inst["state"].as_str().context("state")?.to_owned();
            self.ledger.instance_writes.fetch_add(1, Ordering::SeqCst);
            {
                let mut acks = lock(&self.ledger.instances)?;
                let entry = acks.entry(id.clone()).or_insert_with(|| InstanceAck {
                    tenant: (tenant.clone(), token.clone()),
                    state: state.clone(),
                });
                entry.state = state.clone();
            }
            match at {
                None => live.push((id, state)),
                Some(i) if state == "deleted" => {
                    live.swap_remove(i);
                }
                Some(i) => {
                    if let Some((_, live_state)) = live.get_mut(i) {
                        *live_state = state;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }
}

/// Locks a mutex of the ledger.
pub fn lock<T>(m: &Mutex<T>) -> anyhow::Result<std::sync::MutexGuard<'_, T>> {
    m.lock()
        .map_err(|_| anyhow::anyhow!("the ledger's lock is poisoned"))
}
