//! The database-side ceilings of the write figures, and the storage layer
//! called without HTTP.
//!
//! `GrantSql` and `InstanceSql` replay, on a connection of their own, the
//! statements `storage::ops::grants::create` and `storage::ops::instances::create`
//! issue for the benchmark's requests, in the same order, in one
//! transaction, taking the same row locks, built with the same diesel query
//! DSL over the same schema and row types, so PostgreSQL sees the same SQL
//! text. Row decoding is included; the pure decisions of the core crates
//! (`grants_core::settle`, `check_capacity`, `place_on`, `quotas_core::charge`),
//! the response serialization and the log line are not. Authentication and
//! the manual clock read, which the API does before the transaction (two
//! more round trips, each on a pooled connection), are not either: the
//! ceiling is the transaction itself.
//!
//! The test module `statements` records the statements both sides send
//! (diesel's connection instrumentation) and fails when they differ: a
//! change to the storage side must be replayed here.
//!
//! `GrantStorage` and `InstanceStorage` call the storage functions
//! themselves, so the gap splits into "HTTP, auth, clock, JSON" (API vs
//! storage) and "Rust logic in storage" (storage vs SQL).

use std::sync::Arc;

use diesel_async::{AsyncConnection, AsyncPgConnection};
use serde_json::{Value, json};
use storage::locks;
use storage::model::events::{self, EventData, NewEvent};
use storage::model::grant::{GrantRow, NewGrantRow};
use storage::model::idempotency::{self, Claim, KeyedRequest};
use storage::model::instance::{InstanceRow, NewInstanceRow};
use storage::model::quota;
use storage::model::reservation::ReservationRow;
use storage::model::states::{InstanceBilling, ReservationStatus};
use storage::ops::instances::{self, Target};
use storage::ops::{accounts, grants, pools, settlement};

use crate::load::Op;
use crate::setup::{FLAVOR, HOUR_MS, InstTarget, Platform, TENANT};

const ROOT: &str = "root";

/// [`ROOT`], typed as storage's operations take it.
static ROOT_ID: std::sync::LazyLock<storage::ids::TenantId> =
    std::sync::LazyLock::new(|| storage::ids::TenantId::from_row(ROOT.to_owned()));

/// [`TENANT`], typed.
static TENANT_ID: std::sync::LazyLock<storage::ids::TenantId> =
    std::sync::LazyLock::new(|| storage::ids::TenantId::from_row(TENANT.to_owned()));

/// What a grant-creating operation needs.
#[derive(Debug, Clone)]
pub struct GrantCtx {
    /// Side tag for idempotency keys.
    pub tag: &'static str,
    /// Root's account.
    pub account_id: String,
    /// The hot reservation.
    pub reservation_id: String,
    /// The manual clock's now.
    pub now: i64,
    /// Term of every grant.
    pub starts_at: i64,
    /// Term of every grant.
    pub ends_at: i64,
}

impl GrantCtx {
    /// Side `tag`'s operations on `reservation_id`: a term starting an hour
    /// after the manual clock's now, 24 hours long.
    pub fn new(tag: &'static str, p: &Platform, reservation_id: &str) -> GrantCtx {
        GrantCtx {
            tag,
            account_id: p.account_id.clone(),
            reservation_id: reservation_id.to_owned(),
            now: p.now,
            starts_at: p.now + HOUR_MS,
            ends_at: p.now + 25 * HOUR_MS,
        }
    }

    /// The API request body of operation `i`.
    pub fn body(&self, i: u64) -> Value {
        json!({
            "tenantId": ROOT,
            "accountId": self.account_id,
            "reservationId": self.reservation_id,
            "grantTenantId": TENANT,
            "slots": 1,
            "startsAt": self.starts_at,
            "endsAt": self.ends_at,
            "idempotencyKey": format!("g-{}-{i}", self.tag),
        })
    }

    /// The key and request hash of operation `i`, by root.
    fn keyed(&self, i: u64) -> Keyed {
        Keyed::of(ROOT, "reservationGrants.create", &self.body(i))
    }
}

/// What an instance-creating operation needs.
#[derive(Debug, Clone)]
pub struct InstanceCtx {
    /// Side tag for idempotency keys.
    pub tag: &'static str,
    /// The 100 pools (one reservation, one grant each).
    pub targets: Vec<InstTarget>,
    /// The manual clock's now.
    pub now: i64,
}

impl InstanceCtx {
    /// Side `tag`'s operations over its instance targets.
    pub fn new(tag: &'static str, p: &Platform) -> InstanceCtx {
        InstanceCtx {
            tag,
            targets: p.instance_targets(tag).to_vec(),
            now: p.now,
        }
    }

    /// The target of operation `i` (round robin).
    #[expect(
        clippy::indexing_slicing,
        reason = "the remainder is below the length, and setup gives every side targets"
    )]
    pub fn target(&self, i: u64) -> &InstTarget {
        &self.targets[(i as usize) % self.targets.len()]
    }

    /// The API request body of operation `i`.
    pub fn body(&self, i: u64) -> Value {
        json!({
            "tenantId": TENANT,
            "poolId": self.target(i).pool_id,
            "flavor": FLAVOR,
            "idempotencyKey": format!("i-{}-{i}", self.tag),
        })
    }

    /// The key and request hash of operation `i`, by the tenant.
    fn keyed(&self, i: u64) -> Keyed {
        Keyed::of(TENANT, "instances.create", &self.body(i))
    }
}

/// One operation's idempotency key and request hash, with the acting
/// tenant and the method: what its [`KeyedRequest`] names.
struct Keyed {
    tenant_id: &'static str,
    method: &'static str,
    key: String,
    hash: Vec<u8>,
}

impl Keyed {
    /// `method` by `tenant_id` with the API request `body`.
    fn of(tenant_id: &'static str, method: &'static str, body: &Value) -> Keyed {
        let key = body["idempotencyKey"].as_str().unwrap_or_default();
        Keyed {
            tenant_id,
            method,
            key: key.to_owned(),
            hash: storage::ids::request_hash(body),
        }
    }

    /// The keyed request.
    fn request(&self) -> KeyedRequest<'_> {
        KeyedRequest {
            tenant_id: self.tenant_id,
            method: self.method,
            key: &self.key,
            request_hash: &self.hash,
        }
    }
}

/// A worker on a connection of its own doing `C`'s operation: through the
/// storage call (`SQL` false) or as the statements that call sends,
/// replayed (`SQL` true).
pub struct Direct<C, const SQL: bool> {
    /// Its connection.
    pub conn: AsyncPgConnection,
    /// The operation.
    pub ctx: Arc<C>,
}

impl<C, const SQL: bool> Direct<C, SQL> {
    /// Makes workers of `ctx`'s operations, one per connection.
    pub fn on(ctx: C) -> impl Fn(AsyncPgConnection) -> Direct<C, SQL> {
        let ctx = Arc::new(ctx);
        move |conn| Direct {
            conn,
            ctx: ctx.clone(),
        }
    }
}

/// `storage::ops::grants::create` called directly.
pub type GrantStorage = Direct<GrantCtx, false>;
/// `storage::ops::instances::create` called directly.
pub type InstanceStorage = Direct<InstanceCtx, false>;
/// The statements of `reservationGrants.create` (a new key, a grantee
/// other than root, no project, a term in the future), composed from the
/// storage building blocks `grants::create` calls, without its pure checks.
pub type GrantSql = Direct<GrantCtx, true>;
/// The statements of `instances.create` (a new key, no project, placed in
/// the tenant's grant on the pool's one reservation; it publishes no event),
/// composed from the storage building blocks `instances::create` calls,
/// without its pure decisions (`quotas_core::charge`, `grants_core::place_on`).
pub type InstanceSql = Direct<InstanceCtx, true>;

impl Op for GrantStorage {
    async fn run(&mut self, i: u64) -> anyhow::Result<()> {
        let c = &self.ctx;
        let keyed = c.keyed(i);
        let new = grants::NewGrant {
            account_id: &c.account_id,
            reservation_id: &c.reservation_id,
            grant_tenant_id: TENANT,
            project_id: None,
            slots: 1,
            starts_at: c.starts_at,
            ends_at: c.ends_at,
        };
        grants::create(&mut self.conn, &ROOT_ID, new, keyed.request(), c.now)
            .await
            .map_err(sql)?;
        Ok(())
    }
}

impl Op for InstanceStorage {
    async fn run(&mut self, i: u64) -> anyhow::Result<()> {
        let c = &self.ctx;
        let keyed = c.keyed(i);
        let pool = storage::ids::PoolId::from_row(c.target(i).pool_id.clone());
        let new = instances::NewInstance {
            tenant_id: &TENANT_ID,
            pool_id: &pool,
            flavor: FLAVOR,
            project_id: None,
            name: None,
            billing: grants_core::Billing::Standard,
            interruptible: false,
        };
        instances::create(&mut self.conn, &ROOT_ID, new, keyed.request(), c.now)
            .await
            .map_err(sql)?;
        Ok(())
    }
}

/// The error of a storage building block, for the bench's `anyhow` flow.
fn sql(e: storage::StorageError) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// `idempotency::claim` of a new key; with `generic`, pipelined after the
/// transaction's `SET LOCAL` of generic plans (`storage::db::generic_plans`),
/// as `reservationGrants.create` sends it.
async fn claim(
    conn: &mut AsyncPgConnection,
    key: KeyedRequest<'_>,
    object_id: &str,
    now: i64,
    generic: bool,
) -> anyhow::Result<()> {
    let claim = if generic {
        idempotency::claim_with_generic_plans(conn, key, object_id, now).await
    } else {
        idempotency::claim(conn, key, object_id, now).await
    }
    .map_err(sql)?;
    anyhow::ensure!(
        matches!(claim, Claim::New),
        "idempotency key {} already used",
        key.key
    );
    Ok(())
}

impl Op for GrantSql {
    async fn run(&mut self, i: u64) -> anyhow::Result<()> {
        let c = self.ctx.clone();
        let keyed = c.keyed(i);
        let now = c.now;
        self.conn
            .transaction::<_, anyhow::Error, _>(async move |conn| {
                let id = storage::ids::new_id("rgrant", now);
                claim(conn, keyed.request(), &id, now, true).await?;
                // the grantee's row first (the lock order)
                locks::named_tenant(conn, TENANT).await.map_err(sql)?;
                accounts::find(conn, ROOT, &c.account_id)
                    .await
                    .map_err(sql)?;
                // the checks before the lock: the reservation as read, its pool
                let read = ReservationRow::find(conn, &c.account_id, &c.reservation_id)
                    .await
                    .map_err(sql)?
                    .ok_or_else(|| anyhow::anyhow!("no reservation"))?;
                let pool_id = read
                    .pool_id
                    .clone()
                    .ok_or_else(|| anyhow::anyhow!("reservation not bound"))?;
                let offered = pools::visible(conn, TENANT, ROOT, &pool_id)
                    .await
                    .map_err(sql)?;
                anyhow::ensure!(offered, "pool {pool_id} not offered to {TENANT}");
                // the lock, settlement's read and the peak, pipelined
                let term = grants_core::Term::new(c.starts_at, c.ends_at);
                let (acc, rid) = (c.account_id.as_str(), c.reservation_id.as_str());
                let (res, _, _) = {
                    let shared = &*conn;
                    futures::try_join!(
                        locks::reservation(shared, acc, rid),
                        locks::started_grants_of(shared, acc, rid, now),
                        grants::peak(shared, acc, rid, term),
                    )
                    .map_err(sql)?
                };
                let res = res.ok_or_else(|| anyhow::anyhow!("no reservation {rid}"))?;
                anyhow::ensure!(
                    res.status == ReservationStatus::Ready,
                    "reservation not ready"
                );
                let new = NewGrantRow {
                    grant_id: &id,
                    account_id: &c.account_id,
                    reservation_id: &c.reservation_id,
                    pool_id: &pool_id,
                    tenant_id: TENANT,
                    project_id: None,
                    slots: 1,
                    starts_at: c.starts_at,
                    ends_at: c.ends_at,
                    created_at: now,
                };
                // The term is in the future: create settles only once, and
                // sends the insert and the event in one round trip.
                let created = EventData::GrantCreated(new.change());
                let event = NewEvent::new(TENANT, created, now);
                let c = &*conn;
                futures::try_join!(
                    GrantRow::insert(c, new),
                    events::publish(c, now, vec![event])
                )
                .map_err(sql)?;
                Ok(())
            })
            .await
    }
}

impl Op for InstanceSql {
    async fn run(&mut self, i: u64) -> anyhow::Result<()> {
        let c = self.ctx.clone();
        let keyed = c.keyed(i);
        let now = c.now;
        self.conn
            .transaction::<_, anyhow::Error, _>(async move |conn| {
                let target = c.target(i);
                let pool_id = target.pool_id.as_str();
                let id = storage::ids::new_id("inst", now);
                claim(conn, keyed.request(), &id, now, false).await?;
                // the acting tenant's row first (the lock order)
                locks::acting_tenant(conn, TENANT).await.map_err(sql)?;
                let pool = pools::find(conn, TENANT, ROOT, pool_id)
                    .await
                    .map_err(sql)?;
                let f = pool
                    .flavor(FLAVOR)
                    .ok_or_else(|| anyhow::anyhow!("no flavor"))?;
                let charges = quotas_core::instance_charges(f.vcpus, f.memory_gib, f.gpus);
                let resources: Vec<&str> = charges.iter().map(|c| c.resource.as_str()).collect();
                // the candidates, the hint of where the tenant has a live
                // grant and the quota rows' lock, pipelined
                let (candidates, _, rows) = {
                    let shared = &*conn;
                    futures::try_join!(
                        ReservationRow::candidates(shared, pool_id, FLAVOR),
                        GrantRow::live_reservations_of(shared, TENANT, now),
                        locks::quota_rows(shared, TENANT, pool_id, &resources),
                    )
                    .map_err(sql)?
                };
                let (account_id, reservation_id) = candidates
                    .into_iter()
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("no candidate"))?;
                anyhow::ensure!(reservation_id == target.reservation_id, "wrong reservation");
                // the lock, settlement's read and the seat counts, pipelined
                let (res, open, _) = {
                    let shared = &*conn;
                    let (acc, rid) = (account_id.as_str(), reservation_id.as_str());
                    futures::try_join!(
                        locks::reservation(shared, acc, rid),
                        locks::started_grants_of(shared, acc, rid, now),
                        instances::seats(shared, acc, rid),
                    )
                    .map_err(sql)?
                };
                let res = res.ok_or_else(|| anyhow::anyhow!("no reservation"))?;
                anyhow::ensure!(
                    res.status == ReservationStatus::Ready,
                    "reservation not ready"
                );
                let live = settlement::live_at(open, now);
                let grant_id = live
                    .iter()
                    .find(|g| g.tenant_id == TENANT)
                    .map(|g| g.grant_id.clone())
                    .ok_or_else(|| anyhow::anyhow!("no live grant"))?;
                anyhow::ensure!(grant_id == target.grant_id, "wrong grant");
                let new = NewInstanceRow {
                    vm: None,
                    instance_id: &id,
                    tenant_id: TENANT,
                    project_id: None,
                    pool_id,
                    flavor: FLAVOR,
                    name: &id,
                    billing: InstanceBilling::Standard,
                    interruptible: false,
                    created_at: now,
                };
                let seat = Target::Grant {
                    grant_id,
                    account_id,
                    reservation_id,
                };
                // the quota rows whose use changes, the row, its placement and
                // the answer's read (instances::get), pipelined
                let shared = &*conn;
                let writes = rows.iter().filter_map(|(resource, _max, used)| {
                    let amount = charges
                        .iter()
                        .find(|c| &c.resource == resource)
                        .map_or(0, |c| c.amount);
                    (amount != 0)
                        .then(|| quota::set_used(shared, TENANT, pool_id, resource, used + amount))
                });
                futures::try_join!(
                    futures::future::try_join_all(writes),
                    InstanceRow::insert(shared, new),
                    instances::place_with(
                        shared,
                        new.subject(),
                        &seat,
                        new.state(),
                        true,
                        true,
                        now
                    ),
                    InstanceRow::find(shared, &id),
                )
                .map_err(sql)?;
                Ok(())
            })
            .await
    }
}
