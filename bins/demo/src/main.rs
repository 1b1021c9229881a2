//! `demo-seed`: the small world `just run` shows, made through the public API
//! and fake-gce's control endpoints only (no database access).
//!
//! - fake-gce: two reservations of `n2-standard-4` in `us-central1-a`
//!   (`demo-a` 8 slots, `demo-b` 4 slots) of project `platform-dev`.
//! - Root: a provider account on the fake, scanned; a pool `us-central1
//!   demo` offering `n2-standard-4` (on the reservations) and
//!   `n2-standard-8` (on none, so on-demand); both reservations bound.
//! - Tenants `acme` and `globex`, each with an admin key, offered the pool.
//! - Grants, relative to the seeding hour `T`:
//!   - acme on `demo-a`: 4 slots that ended yesterday (`T-3d .. T-1d`),
//!     4 slots active for 14 days (`T-2d .. T+12d`) and their renewal
//!     (`T+12d .. T+26d`);
//!   - globex on `demo-b`: 2 slots active (`T-1d .. T+6d`), and 2 slots on
//!     `demo-a` starting tomorrow (`T+1d .. T+8d`).
//! - Instances: acme's in its grants (taken in, handed over when the first
//!   grant ended, one of them stopped), globex's in its grant, one overflow
//!   on an ordinary slot, one `n2-standard-8` on-demand.
//! - A managed pool `us-central1 managed` (with `vm`, and `lending` with a
//!   two-minute notice) on reservation `demo-m` (4 slots) of a second root
//!   account (project `platform-vms`), offered to acme and globex; acme's
//!   grant of 3 of its slots for 7 days, which acme lends; two acme
//!   instances created at the end (`managed-1`, `managed-2`, in the grant)
//!   and globex's interruptible `spot-1` in the grant's third, idle slot:
//!   the worker creates their VMs on fake-gce. The story's pool stays a
//!   ledger pool: its three days of history are played with a moving
//!   clock, and a managed instance is
//!   billed from when the worker saw its VM running. demo-seed does not wait
//!   for the VMs: with fake-gce's operation latency (2 to 5 s under `just
//!   run`) the instances are `provisioning` until the worker sees them run.
//!
//! With a manual clock set at least three days back (`just run` sets a fresh
//! database's clock back) the past is played: the clock is moved forward
//! through the story and ends at the wall clock's now, so the worker then
//! meters three days of history. Otherwise the story starts at the clock's
//! now. A world that already has `acme` is left as it is: on a second `just
//! run` the database has it, and fake-gce brings back its reservations and
//! VMs from its state file (`BC_FAKE_GCE_STATE`).
//!
//! Env: `BC_API` (default `http://127.0.0.1:8080`), `BC_TOKEN` (a root admin
//! key, required), `BC_FAKE_GCE` (default `http://127.0.0.1:8085`),
//! `BC_ROOT_TENANT` (default `root`). Prints a JSON summary with the
//! tenants' keys on stdout.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use serde_json::{Value, json};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;
const PROJECT: &str = "platform-dev";
/// The project of the managed pool's account.
const VM_PROJECT: &str = "platform-vms";
const ZONE: &str = "us-central1-a";
const FLAVOR: &str = "n2-standard-4";
const BIG_FLAVOR: &str = "n2-standard-8";

/// The API and the fake, as one root caller sees them.
struct World {
    client: reqwest::Client,
    api: String,
    gce: String,
    root: String,
    token: String,
    manual: bool,
    clock: i64,
}

impl World {
    /// `POST /api/compute/{method}` with `token`; an error answer is an
    /// error naming its code and message.
    async fn call_as(&self, token: &str, method: &str, mut body: Value) -> anyhow::Result<Value> {
        if let Some(fields) = body.as_object_mut() {
            fields.entry("tenantId").or_insert_with(|| json!(self.root));
        }
        let answer = self
            .client
            .post(format!("{}/api/compute/{method}", self.api))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .with_context(|| format!("calling {method}"))?;
        let status = answer.status();
        let value: Value = answer.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            bail!(
                "{method} answered {status}: {} {}",
                value.pointer("/error/code").unwrap_or(&Value::Null),
                value.pointer("/error/message").unwrap_or(&Value::Null)
            );
        }
        Ok(value)
    }

    async fn call(&self, method: &str, body: Value) -> anyhow::Result<Value> {
        self.call_as(&self.token, method, body).await
    }

    /// Moves the story to `at`: the manual clock is set there (forward only).
    async fn at(&mut self, at: i64) -> anyhow::Result<()> {
        if self.manual && at > self.clock {
            self.call("clock/set", json!({ "now": at })).await?;
            self.clock = at;
        }
        Ok(())
    }

    /// `pools.offer` of `pool` to `tenant` with `quotas`.
    async fn offer(&self, pool: &str, tenant: &str, quotas: Value) -> anyhow::Result<()> {
        let body = json!({ "poolId": pool, "offerTenantId": tenant, "quotas": quotas });
        self.call("pools/offer", body).await?;
        Ok(())
    }

    /// `instances.create` of `name` (also its idempotency key) by `tenant`
    /// with `token`; answers the created instance's answer.
    async fn create_instance(
        &self,
        token: &str,
        tenant: &str,
        pool: &str,
        flavor: &str,
        name: &str,
    ) -> anyhow::Result<Value> {
        let body = json!({
            "tenantId": tenant,
            "poolId": pool,
            "flavor": flavor,
            "name": name,
            "idempotencyKey": name,
        });
        self.call_as(token, "instances/create", body).await
    }

    async fn put_reservation_in(
        &self,
        project: &str,
        name: &str,
        count: i64,
    ) -> anyhow::Result<()> {
        let url = format!(
            "{}/fake/projects/{project}/zones/{ZONE}/reservations/{name}",
            self.gce
        );
        let answer = self
            .client
            .put(url)
            .json(&json!({ "count": count, "inUseCount": 0, "machineType": FLAVOR }))
            .send()
            .await
            .context("fake-gce")?;
        if !answer.status().is_success() {
            bail!(
                "fake-gce answered {} to the reservation {name}",
                answer.status()
            );
        }
        Ok(())
    }
}

/// A pool on a provider account of its own on the fake, as root makes it:
/// the reservations put on the fake (`n2-standard-4` in [`ZONE`]), the
/// account on `project` created and scanned, the pool created on it and
/// every reservation bound to it. The story's pool and the managed pool are
/// both made so.
struct PoolWorld<'a> {
    project: &'a str,
    account_name: &'a str,
    account_key: &'a str,
    /// `(name, slots)` of each reservation.
    reservations: &'a [(&'a str, i64)],
    /// The `pools.create` body, without `accountId`.
    pool: Value,
}

/// What a [`PoolWorld`] made.
struct Made {
    account: String,
    pool: String,
    /// The bound reservations' ids, in the order given.
    reservations: Vec<String>,
}

impl PoolWorld<'_> {
    async fn build(self, w: &World) -> anyhow::Result<Made> {
        let project = self.project;
        for (name, count) in self.reservations {
            w.put_reservation_in(project, name, *count).await?;
        }
        let account = w
            .call(
                "providerAccounts/create",
                json!({
                    "name": self.account_name,
                    "provider": "gce",
                    "config": { "project": project, "endpoint": w.gce, "credentials": "none" },
                    "idempotencyKey": self.account_key,
                }),
            )
            .await?;
        let account = id(&account, &["account", "accountId"])?;
        w.call("providerAccounts/scan", json!({ "accountId": account }))
            .await?;
        let mut body = self.pool;
        if let Some(fields) = body.as_object_mut() {
            fields.insert("accountId".into(), json!(account));
        }
        let pool = w.call("pools/create", body).await?;
        let pool = id(&pool, &["pool", "poolId"])?;
        let mut reservations = Vec::new();
        for (name, _) in self.reservations {
            let r = format!("projects/{project}/zones/{ZONE}/reservations/{name}");
            w.call(
                "providerAccounts/bindReservation",
                json!({ "accountId": account, "reservationId": r, "poolId": pool }),
            )
            .await?;
            reservations.push(r);
        }
        Ok(Made {
            account,
            pool,
            reservations,
        })
    }
}

fn id(v: &Value, path: &[&str]) -> anyhow::Result<String> {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_str()
        .map(str::to_owned)
        .with_context(|| format!("no {} in {v}", path.join(".")))
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_owned())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let token = std::env::var("BC_TOKEN").context("BC_TOKEN (a root admin key) is required")?;
    let mut w = World {
        client: reqwest::Client::new(),
        api: env_or("BC_API", "http://127.0.0.1:8080"),
        gce: env_or("BC_FAKE_GCE", "http://127.0.0.1:8085"),
        root: env_or("BC_ROOT_TENANT", "root"),
        token,
        manual: false,
        clock: 0,
    };
    let tenants = w.call("tenants/list", json!({})).await?;
    let seeded = tenants
        .get("items")
        .and_then(Value::as_array)
        .is_some_and(|items| items.iter().any(|t| t["tenantId"] == "acme"));
    if seeded {
        eprintln!("demo-seed: the demo world is already there (tenant acme exists)");
        #[expect(clippy::print_stdout, reason = "the seed's summary is its output")]
        {
            println!("{}", json!({ "seeded": false }));
        }
        return Ok(());
    }
    let clock = w.call("clock/get", json!({})).await?;
    w.clock = clock
        .get("now")
        .and_then(Value::as_i64)
        .context("clock.now")?;
    let wall = i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis()),
    )?;
    // T, the hour the story is told at, is this hour of the wall clock. The
    // past three days are played when the clock is manual and not already
    // past their start (`just run` sets a fresh database's manual clock
    // back); otherwise the story starts at the clock's now, three days
    // "early".
    let history = (wall / HOUR) * HOUR - 3 * DAY;
    w.manual = clock.get("mode").is_some_and(|m| m == "manual") && w.clock <= history;
    let t = if w.manual {
        history + 3 * DAY
    } else {
        w.clock + 3 * DAY
    };
    w.at(t - 3 * DAY).await?;
    seed(&mut w, t, wall).await?;
    // Back to the wall clock's now, so the system clock can take over.
    w.at(wall).await?;
    Ok(())
}

async fn seed(w: &mut World, t: i64, wall: i64) -> anyhow::Result<()> {
    let made = PoolWorld {
        project: PROJECT,
        account_name: "platform on fake-gce",
        account_key: "demo-account",
        reservations: &[("demo-a", 8), ("demo-b", 4)],
        pool: json!({
            "name": "us-central1 demo",
            "region": "us-central1",
            "provider": "gce",
            "flavors": [
                { "name": FLAVOR, "vcpus": 4, "memoryGib": 16, "gpus": 0 },
                { "name": BIG_FLAVOR, "vcpus": 8, "memoryGib": 32, "gpus": 0 },
            ],
            "quotas": { "instances": 100, "vcpus": 800 },
            "idempotencyKey": "demo-pool",
        }),
    }
    .build(w)
    .await?;
    let (account, pool) = (made.account, made.pool);
    let [res_a, res_b] = <[String; 2]>::try_from(made.reservations)
        .map_err(|r| anyhow::anyhow!("two reservations bound, not {}", r.len()))?;
    let mut keys = serde_json::Map::new();
    for name in ["acme", "globex"] {
        let created = w
            .call(
                "tenants/create",
                json!({ "name": name, "displayName": format!("{name} demo") }),
            )
            .await?;
        keys.insert(name.into(), json!(id(&created, &["adminKey", "secret"])?));
        let quotas = json!({ "instances": 20, "vcpus": 160, "memoryGib": 640 });
        w.offer(&pool, name, quotas).await?;
    }
    let key = |name: &str| {
        keys.get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };

    let start = t - 3 * DAY;
    let grant = |tenant: &str, r: &str, slots: i64, from: i64, to: i64, k: &str| {
        json!({
            "accountId": account,
            "reservationId": r,
            "grantTenantId": tenant,
            "slots": slots,
            "startsAt": from,
            "endsAt": to,
            "idempotencyKey": k,
        })
    };
    let terms = [
        grant("acme", &res_a, 4, start, t - DAY, "demo-acme-ended"),
        grant(
            "acme",
            &res_a,
            4,
            t - 2 * DAY,
            t + 12 * DAY,
            "demo-acme-active",
        ),
        grant(
            "acme",
            &res_a,
            4,
            t + 12 * DAY,
            t + 26 * DAY,
            "demo-acme-renewal",
        ),
        grant(
            "globex",
            &res_b,
            2,
            t - DAY,
            t + 6 * DAY,
            "demo-globex-active",
        ),
        grant(
            "globex",
            &res_a,
            2,
            t + DAY,
            t + 8 * DAY,
            "demo-globex-tomorrow",
        ),
    ];
    for body in terms {
        w.call("reservationGrants/create", body).await?;
    }

    // The instances, in story order: (when, tenant, flavor, name).
    let story = [
        // Three days ago: three acme instances, taken into the first grant.
        (t - 3 * DAY, "acme", FLAVOR, "acme-web-1"),
        (t - 3 * DAY, "acme", FLAVOR, "acme-web-2"),
        (t - 3 * DAY, "acme", FLAVOR, "acme-web-3"),
        // Two days ago the active grant has started: two more.
        (t - 2 * DAY + HOUR, "acme", FLAVOR, "acme-web-4"),
        (t - 2 * DAY + HOUR, "acme", FLAVOR, "acme-web-5"),
        // Yesterday (the first grant has ended and handed its instances
        // over): globex fills its grant, overflows onto an ordinary slot,
        // and runs a larger flavor no reservation has (on-demand).
        (t - DAY + 2 * HOUR, "globex", FLAVOR, "globex-db-1"),
        (t - DAY + 2 * HOUR, "globex", FLAVOR, "globex-db-2"),
        (t - DAY + 2 * HOUR, "globex", FLAVOR, "globex-overflow"),
        (t - DAY + 2 * HOUR, "globex", BIG_FLAVOR, "globex-batch"),
    ];
    let mut first_acme = None;
    for (at, tenant, flavor, name) in story {
        w.at(at).await?;
        let created = w
            .create_instance(&key(tenant), tenant, &pool, flavor, name)
            .await?;
        if first_acme.is_none() && tenant == "acme" {
            first_acme = Some(id(&created, &["instance", "instanceId"])?);
        }
    }
    // One acme instance is stopped: it keeps its grant slot (held, unused).
    if let Some(first) = first_acme {
        let body = json!({ "tenantId": "acme", "instanceId": first });
        w.call_as(&key("acme"), "instances/stop", body).await?;
    }
    // The managed pool, its lending grant and its VMs start now: the story
    // is over and the clock is the wall clock's.
    w.at(wall).await?;
    let managed = managed_pool(w, &key("acme"), &key("globex")).await?;
    #[expect(clippy::print_stdout, reason = "the seed's summary is its output")]
    {
        println!(
            "{}",
            json!({
                "seeded": true,
                "accountId": account,
                "poolId": pool,
                "managedPoolId": managed,
                "reservations": [res_a, res_b],
                "keys": keys,
                "storyHour": t,
            })
        );
    }
    Ok(())
}

/// A managed pool (contract 3.12) that lends (3.14) on reservation `demo-m`
/// (4 slots) of a second account (project `platform-vms`), offered to acme
/// and globex; acme's lending grant of 3 slots from now for 7 days, two acme
/// instances in it and globex's interruptible one in its idle slot, created
/// now: the worker of `just run` creates their VMs on fake-gce. Returns the
/// pool's id.
async fn managed_pool(w: &mut World, acme: &str, globex: &str) -> anyhow::Result<String> {
    let made = PoolWorld {
        project: VM_PROJECT,
        account_name: "gce vms",
        account_key: "demo-vm-account",
        reservations: &[("demo-m", 4)],
        pool: json!({
            "name": "us-central1 managed",
            "region": "us-central1",
            "provider": "gce",
            "flavors": [{ "name": FLAVOR, "vcpus": 4, "memoryGib": 16, "gpus": 0 }],
            "quotas": { "instances": 20, "vcpus": 80 },
            "vm": {
                "image": "projects/debian-cloud/global/images/family/debian-12",
                "zones": ["us-central1-a", "us-central1-b"],
                "labels": { "env": "demo" },
            },
            "lending": { "noticeSeconds": 120 },
            "idempotencyKey": "demo-managed-pool",
        }),
    }
    .build(w)
    .await?;
    let pool = made.pool;
    let quotas = json!({ "instances": 4, "vcpus": 16, "memoryGib": 64 });
    w.offer(&pool, "acme", quotas.clone()).await?;
    w.offer(&pool, "globex", quotas).await?;
    let reservation = made
        .reservations
        .first()
        .context("demo-m is bound")?
        .clone();
    let grant = w
        .call(
            "reservationGrants/create",
            json!({
                "accountId": made.account,
                "reservationId": reservation,
                "grantTenantId": "acme",
                "slots": 3,
                "startsAt": w.clock,
                "endsAt": w.clock + 7 * DAY,
                "idempotencyKey": "demo-lending-grant",
            }),
        )
        .await?;
    let grant_id = id(&grant, &["grant", "grantId"])?;
    w.call_as(
        acme,
        "reservationGrants/setLending",
        json!({ "tenantId": "acme", "grantId": grant_id, "lend": true }),
    )
    .await?;
    for name in ["managed-1", "managed-2"] {
        w.create_instance(acme, "acme", &pool, FLAVOR, name).await?;
    }
    w.call_as(
        globex,
        "instances/create",
        json!({
            "tenantId": "globex",
            "poolId": pool,
            "flavor": FLAVOR,
            "name": "spot-1",
            "interruptible": true,
            "idempotencyKey": "spot-1",
        }),
    )
    .await?;
    Ok(pool)
}
