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

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde_json::{Value, json};
use storage::model::idempotency::KeyedRequest;
use storage::model::instance::InstanceRow;
use storage::model::{grant::GrantRow, reservation::ReservationRow};
use storage::ops::accounts::Account;
use storage::schema::{
    events, grants, idempotency_keys as ik, instances, placement_segments as seg, pool_offers,
    pools, provider_accounts as pa, quotas, reservations, tenants,
};

use crate::load::Op;
use crate::setup::{FLAVOR, HOUR_MS, InstTarget, Platform, TENANT};

const ROOT: &str = "root";

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
            targets: p.inst[tag].clone(),
            now: p.now,
        }
    }

    /// The target of operation `i` (round robin).
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
}

/// `storage::ops::grants::create` called directly.
pub struct GrantStorage {
    /// Its connection.
    pub conn: AsyncPgConnection,
    /// The operation.
    pub ctx: Arc<GrantCtx>,
}

impl Op for GrantStorage {
    async fn run(&mut self, i: u64) -> anyhow::Result<()> {
        let c = &self.ctx;
        let body = c.body(i);
        let hash = storage::ids::request_hash(&body);
        let key = format!("g-{}-{i}", c.tag);
        storage::ops::grants::create(
            &mut self.conn,
            ROOT,
            storage::ops::grants::NewGrant {
                account_id: &c.account_id,
                reservation_id: &c.reservation_id,
                grant_tenant_id: TENANT,
                project_id: None,
                slots: 1,
                starts_at: c.starts_at,
                ends_at: c.ends_at,
            },
            KeyedRequest {
                tenant_id: ROOT,
                method: "reservationGrants.create",
                key: &key,
                request_hash: &hash,
            },
            c.now,
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(())
    }
}

/// `storage::ops::instances::create` called directly.
pub struct InstanceStorage {
    /// Its connection.
    pub conn: AsyncPgConnection,
    /// The operation.
    pub ctx: Arc<InstanceCtx>,
}

impl Op for InstanceStorage {
    async fn run(&mut self, i: u64) -> anyhow::Result<()> {
        let c = &self.ctx;
        let body = c.body(i);
        let hash = storage::ids::request_hash(&body);
        let key = format!("i-{}-{i}", c.tag);
        storage::ops::instances::create(
            &mut self.conn,
            ROOT,
            storage::ops::instances::NewInstance {
                tenant_id: TENANT,
                pool_id: &c.target(i).pool_id,
                flavor: FLAVOR,
                project_id: None,
                name: None,
                billing: grants_core::Billing::Standard,
            },
            KeyedRequest {
                tenant_id: TENANT,
                method: "instances.create",
                key: &key,
                request_hash: &hash,
            },
            c.now,
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(())
    }
}

/// The idempotency claim (`idempotency::claim`, new key).
async fn claim(
    conn: &mut AsyncPgConnection,
    tenant: &str,
    method: &str,
    key: &str,
    hash: &[u8],
    object_id: &str,
    now: i64,
) -> anyhow::Result<()> {
    let inserted = diesel::insert_into(ik::table)
        .values((
            ik::tenant_id.eq(tenant),
            ik::method.eq(method),
            ik::idem_key.eq(key),
            ik::request_hash.eq(hash),
            ik::object_id.eq(object_id),
            ik::created_at.eq(now),
        ))
        .on_conflict_do_nothing()
        .execute(conn)
        .await?;
    anyhow::ensure!(inserted == 1, "idempotency key {key} already used");
    Ok(())
}

/// `locks::tenant_shared`: the tenant's row `FOR SHARE`, which must be
/// active (`locks::named_tenant`, `locks::acting_tenant`).
async fn lock_tenant(conn: &mut AsyncPgConnection, tenant: &str) -> anyhow::Result<()> {
    let state: Option<String> = tenants::table
        .find(tenant)
        .select(tenants::state)
        .for_share()
        .first(conn)
        .await
        .optional()?;
    anyhow::ensure!(
        state.as_deref() == Some("active"),
        "tenant {tenant} not active"
    );
    Ok(())
}

/// `pools::is_visible` for a tenant other than root: the offer count.
async fn offered(conn: &mut AsyncPgConnection, pool_id: &str, tenant: &str) -> anyhow::Result<()> {
    let n: i64 = pool_offers::table
        .filter(pool_offers::pool_id.eq(pool_id))
        .filter(pool_offers::tenant_id.eq(tenant))
        .count()
        .get_result(conn)
        .await?;
    anyhow::ensure!(n > 0, "pool {pool_id} not offered to {tenant}");
    Ok(())
}

/// `locks::reservation`.
async fn lock_reservation(
    conn: &mut AsyncPgConnection,
    account_id: &str,
    reservation_id: &str,
) -> anyhow::Result<ReservationRow> {
    Ok(reservations::table
        .find((account_id, reservation_id))
        .select(ReservationRow::as_select())
        .for_update()
        .first(conn)
        .await?)
}

/// `locks::open_grants` (row-locked, after the reservation).
async fn open_grants(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
) -> anyhow::Result<Vec<GrantRow>> {
    Ok(grants::table
        .filter(grants::account_id.eq(&res.account_id))
        .filter(grants::reservation_id.eq(&res.reservation_id))
        .filter(grants::settled_state.eq_any(["scheduled", "active"]))
        .order((grants::starts_at.asc(), grants::grant_id.asc()))
        .select(GrantRow::as_select())
        .for_update()
        .load(conn)
        .await?)
}

/// `instances::seated`.
async fn seated(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
) -> anyhow::Result<Vec<InstanceRow>> {
    Ok(instances::table
        .filter(instances::account_id.eq(&res.account_id))
        .filter(instances::reservation_id.eq(&res.reservation_id))
        .filter(instances::state.ne("deleted"))
        .order((instances::created_at.asc(), instances::instance_id.asc()))
        .select(InstanceRow::as_select())
        .load(conn)
        .await?)
}

/// `timeline::settle` without the pure step: the reads (no transition is
/// due in these workloads, so it writes nothing).
async fn settle_reads(conn: &mut AsyncPgConnection, res: &ReservationRow) -> anyhow::Result<()> {
    let open = open_grants(conn, res).await?;
    if !open.is_empty() {
        seated(conn, res).await?;
    }
    Ok(())
}

#[derive(QueryableByName)]
struct Head {
    #[diesel(sql_type = BigInt)]
    last_seq: i64,
}

/// `events::publish` of one event.
async fn publish_one(
    conn: &mut AsyncPgConnection,
    tenant: &str,
    event_type: &str,
    data: &Value,
    now: i64,
) -> anyhow::Result<()> {
    let head: Head = diesel::sql_query(
        "INSERT INTO event_heads (tenant_id, last_seq) VALUES ($1, $2) \
         ON CONFLICT (tenant_id) \
         DO UPDATE SET last_seq = event_heads.last_seq + EXCLUDED.last_seq \
         RETURNING last_seq",
    )
    .bind::<Text, _>(tenant)
    .bind::<BigInt, _>(1i64)
    .get_result(conn)
    .await?;
    let rows = vec![(
        events::tenant_id.eq(tenant),
        events::seq.eq(head.last_seq),
        events::event_id.eq(storage::ids::new_id("evt", now)),
        events::event_type.eq(event_type),
        events::data.eq(data),
        events::occurred_at.eq(now),
    )];
    diesel::insert_into(events::table)
        .values(rows)
        .execute(conn)
        .await?;
    Ok(())
}

/// The statements of `reservationGrants.create` (a new key, a grantee
/// other than root, no project, a term in the future).
pub struct GrantSql {
    /// Its connection.
    pub conn: AsyncPgConnection,
    /// The operation.
    pub ctx: Arc<GrantCtx>,
}

impl Op for GrantSql {
    async fn run(&mut self, i: u64) -> anyhow::Result<()> {
        let c = self.ctx.clone();
        let hash = storage::ids::request_hash(&c.body(i));
        let key = format!("g-{}-{i}", c.tag);
        let now = c.now;
        self.conn
            .transaction::<_, anyhow::Error, _>(async move |conn| {
                let id = storage::ids::new_id("rgrant", now);
                let method = "reservationGrants.create";
                claim(conn, ROOT, method, &key, &hash, &id, now).await?;
                // the grantee's row first (the lock order)
                lock_tenant(conn, TENANT).await?;
                // accounts::get
                let _account: Account = pa::table
                    .find(&c.account_id)
                    .filter(pa::tenant_id.eq(ROOT))
                    .select(Account::as_select())
                    .first(conn)
                    .await?;
                let res = lock_reservation(conn, &c.account_id, &c.reservation_id).await?;
                anyhow::ensure!(
                    res.status == storage::model::states::ReservationStatus::Ready,
                    "reservation not ready"
                );
                let pool_id = res
                    .pool_id
                    .clone()
                    .ok_or_else(|| anyhow::anyhow!("reservation not bound"))?;
                offered(conn, &pool_id, TENANT).await?;
                settle_reads(conn, &res).await?;
                // grants::commitments
                let _commitments: Vec<(i64, i64, i32)> = grants::table
                    .filter(grants::account_id.eq(&res.account_id))
                    .filter(grants::reservation_id.eq(&res.reservation_id))
                    .filter(grants::settled_state.ne("cancelled"))
                    .select((grants::starts_at, grants::ends_at, grants::slots))
                    .load(conn)
                    .await?;
                let row: GrantRow = diesel::insert_into(grants::table)
                    .values((
                        grants::grant_id.eq(&id),
                        grants::account_id.eq(&c.account_id),
                        grants::reservation_id.eq(&c.reservation_id),
                        grants::pool_id.eq(&pool_id),
                        grants::tenant_id.eq(TENANT),
                        grants::project_id.eq(None::<&str>),
                        grants::slots.eq(1),
                        grants::starts_at.eq(c.starts_at),
                        grants::ends_at.eq(c.ends_at),
                        grants::settled_state.eq("scheduled"),
                        grants::created_at.eq(now),
                        grants::metered_through.eq(c.starts_at),
                    ))
                    .returning(GrantRow::as_returning())
                    .get_result(conn)
                    .await?;
                let data = row.event_data(None);
                // The term is in the future: create settles only once.
                publish_one(conn, TENANT, "reservation-grant.created", &data, now).await?;
                let _reloaded: GrantRow = grants::table
                    .find(&id)
                    .select(GrantRow::as_select())
                    .first(conn)
                    .await?;
                Ok(())
            })
            .await
    }
}

/// `quotas_core::instance_charges`: one instance and its flavor's vCPUs,
/// memory and GPUs, the zero amounts left out.
fn instance_charges(f: &storage::ops::pools::Flavor) -> Vec<(&'static str, i64)> {
    [
        ("instances", 1),
        ("vcpus", f.vcpus),
        ("memoryGib", f.memory_gib),
        ("gpus", f.gpus),
    ]
    .into_iter()
    .filter(|(_, amount)| *amount > 0)
    .collect()
}

/// The statements of `instances.create` (a new key, no project, placed in
/// the tenant's grant on the pool's one reservation; it publishes no event).
pub struct InstanceSql {
    /// Its connection.
    pub conn: AsyncPgConnection,
    /// The operation.
    pub ctx: Arc<InstanceCtx>,
}

impl Op for InstanceSql {
    async fn run(&mut self, i: u64) -> anyhow::Result<()> {
        let c = self.ctx.clone();
        let hash = storage::ids::request_hash(&c.body(i));
        let key = format!("i-{}-{i}", c.tag);
        let now = c.now;
        self.conn
            .transaction::<_, anyhow::Error, _>(async move |conn| {
                let target = c.target(i);
                let pool_id = target.pool_id.as_str();
                let id = storage::ids::new_id("inst", now);
                claim(conn, TENANT, "instances.create", &key, &hash, &id, now).await?;
                // the acting tenant's row first (the lock order)
                lock_tenant(conn, TENANT).await?;
                // pools::get: is_visible, pool_row, offered_to
                offered(conn, pool_id, TENANT).await?;
                type PoolRow = (String, String, String, String, String, Value, i64);
                let pool: PoolRow = pools::table
                    .find(pool_id)
                    .select((
                        pools::pool_id,
                        pools::name,
                        pools::region,
                        pools::provider,
                        pools::account_id,
                        pools::flavors,
                        pools::created_at,
                    ))
                    .first(conn)
                    .await?;
                let _offered: Vec<String> = pool_offers::table
                    .filter(pool_offers::pool_id.eq(pool_id))
                    .order(pool_offers::tenant_id.asc())
                    .select(pool_offers::tenant_id)
                    .load(conn)
                    .await?;
                let flavors: Vec<storage::ops::pools::Flavor> = serde_json::from_value(pool.5)?;
                let f = flavors
                    .iter()
                    .find(|f| f.name == FLAVOR)
                    .ok_or_else(|| anyhow::anyhow!("no flavor"))?;
                let charges = instance_charges(f);
                let resources: Vec<&str> = charges.iter().map(|c| c.0).collect();
                // locks::quota_rows
                let rows: Vec<(String, i64, i64)> = quotas::table
                    .filter(quotas::tenant_id.eq(TENANT))
                    .filter(quotas::pool_id.eq(pool_id))
                    .filter(quotas::resource.eq_any(&resources))
                    .order(quotas::resource.asc())
                    .select((quotas::resource, quotas::max_value, quotas::used))
                    .for_update()
                    .load(conn)
                    .await?;
                // decide: the candidates, the hint of where the tenant has a
                // live grant, then the first candidate locked, settled, viewed
                let candidates: Vec<(String, String)> = reservations::table
                    .filter(reservations::pool_id.eq(pool_id))
                    .filter(reservations::flavor.eq(FLAVOR))
                    .filter(reservations::status.eq("ready"))
                    .order((
                        reservations::reservation_id.asc(),
                        reservations::account_id.asc(),
                    ))
                    .select((reservations::account_id, reservations::reservation_id))
                    .load(conn)
                    .await?;
                // granted_candidates
                let _granted: Vec<(String, String)> = grants::table
                    .filter(grants::tenant_id.eq(TENANT))
                    .filter(grants::settled_state.eq_any(["scheduled", "active"]))
                    .filter(grants::starts_at.le(now))
                    .filter(grants::ends_at.gt(now))
                    .select((grants::account_id, grants::reservation_id))
                    .load(conn)
                    .await?;
                let (account_id, reservation_id) = candidates
                    .into_iter()
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("no candidate"))?;
                anyhow::ensure!(reservation_id == target.reservation_id, "wrong reservation");
                let res = lock_reservation(conn, &account_id, &reservation_id).await?;
                anyhow::ensure!(
                    res.status == storage::model::states::ReservationStatus::Ready,
                    "reservation not ready"
                );
                settle_reads(conn, &res).await?;
                // view: seated, timeline::live_grants
                seated(conn, &res).await?;
                let live = open_grants(conn, &res).await?;
                let grant_id = live
                    .iter()
                    .find(|g| g.tenant_id == TENANT)
                    .map(|g| g.grant_id.clone())
                    .ok_or_else(|| anyhow::anyhow!("no live grant"))?;
                anyhow::ensure!(grant_id == target.grant_id, "wrong grant");
                // write_quota_rows: the rows whose use changes
                for (resource, _max, used) in &rows {
                    let amount = charges.iter().find(|c| c.0 == resource).map_or(0, |c| c.1);
                    if amount == 0 {
                        continue;
                    }
                    diesel::update(quotas::table.find((TENANT, pool_id, resource)))
                        .set(quotas::used.eq(used + amount))
                        .execute(conn)
                        .await?;
                }
                let row: InstanceRow = diesel::insert_into(instances::table)
                    .values((
                        instances::instance_id.eq(&id),
                        instances::tenant_id.eq(TENANT),
                        instances::project_id.eq(None::<&str>),
                        instances::pool_id.eq(pool_id),
                        instances::flavor.eq(FLAVOR),
                        instances::name.eq(&id),
                        instances::billing.eq("standard"),
                        instances::state.eq("running"),
                        instances::placement_kind.eq("none"),
                        instances::created_at.eq(now),
                        instances::usage_metered_through.eq(now),
                    ))
                    .returning(InstanceRow::as_returning())
                    .get_result(conn)
                    .await?;
                // place_at
                diesel::update(instances::table.find(&row.instance_id))
                    .set((
                        instances::placement_kind.eq("grant"),
                        instances::grant_id.eq(Some(grant_id.as_str())),
                        instances::account_id.eq(Some(account_id.as_str())),
                        instances::reservation_id.eq(Some(reservation_id.as_str())),
                        instances::state.eq("running"),
                        instances::deleted_at.eq(row.deleted_at),
                    ))
                    .execute(conn)
                    .await?;
                diesel::update(
                    seg::table
                        .filter(seg::instance_id.eq(&row.instance_id))
                        .filter(seg::to_ms.is_null())
                        .filter(seg::from_ms.lt(now)),
                )
                .set(seg::to_ms.eq(now))
                .execute(conn)
                .await?;
                diesel::delete(
                    seg::table
                        .filter(seg::instance_id.eq(&row.instance_id))
                        .filter(seg::to_ms.is_null()),
                )
                .execute(conn)
                .await?;
                diesel::insert_into(seg::table)
                    .values((
                        seg::instance_id.eq(&row.instance_id),
                        seg::from_ms.eq(now),
                        seg::kind.eq("grant"),
                        seg::running.eq(true),
                        seg::grant_id.eq(Some(grant_id.as_str())),
                        seg::account_id.eq(Some(account_id.as_str())),
                        seg::reservation_id.eq(Some(reservation_id.as_str())),
                    ))
                    .execute(conn)
                    .await?;
                // instances::get
                let _reloaded: InstanceRow = instances::table
                    .find(&id)
                    .select(InstanceRow::as_select())
                    .first(conn)
                    .await?;
                Ok(())
            })
            .await
    }
}
