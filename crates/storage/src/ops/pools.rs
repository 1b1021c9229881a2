//! Pools, their offers to tenants, and quota rows (the capacity module).

use std::collections::BTreeMap;

use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::actor::Actor;
use crate::error::{Field, Reason, Result, StorageError};
use crate::ids;
use crate::ids::{PoolId, TenantId};
use crate::locks;
use crate::model::event_data::{EventData, QuotaUpdated};
use crate::model::events::{self, NewEvent};
use crate::model::idempotency::{self, Claim, Created, KeyedRequest};
use crate::model::pool_vm::PoolVm;
use crate::ops::accounts;
use crate::schema::{pool_offers, pools, quotas};

/// A machine shape a pool offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Flavor {
    /// Provider machine type, e.g. `n2-standard-4`.
    pub name: String,
    /// vCPUs per instance.
    pub vcpus: i64,
    /// Memory per instance in GiB.
    pub memory_gib: i64,
    /// GPUs per instance.
    pub gpus: i64,
}

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = pools)]
struct PoolRow {
    pool_id: String,
    name: String,
    region: String,
    provider: String,
    account_id: String,
    flavors: Value,
    created_at: i64,
    vm: Option<Value>,
    lending_notice_s: Option<i32>,
}

/// A managed pool's lending (contract 3.3, r4): its grants may lend idle
/// slots to interruptible instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolLending {
    /// The notice a borrower gets before its VM is deleted (0 to 3600).
    pub notice_seconds: i32,
}

/// A pool as the API shows it.
#[derive(Debug, Clone)]
pub struct Pool {
    /// `pool_...`
    pub pool_id: String,
    /// Name.
    pub name: String,
    /// Region, e.g. `us-central1`.
    pub region: String,
    /// Provider name.
    pub provider: String,
    /// The root provider account behind the pool.
    pub account_id: String,
    /// Flavors.
    pub flavors: Vec<Flavor>,
    /// Tenants the pool is offered to (to root: all of them; to a tenant: itself).
    pub offered_to: Vec<String>,
    /// Creation instant.
    pub created_at: i64,
    /// Its VM settings: a managed pool (contract 3.12); `None`: a ledger pool.
    pub vm: Option<PoolVm>,
    /// Whether its grants may lend, and with which notice.
    pub lending: Option<PoolLending>,
}

impl Pool {
    /// Looks up a flavor by name.
    pub fn flavor(&self, name: &str) -> Option<&Flavor> {
        self.flavors.iter().find(|f| f.name == name)
    }
}

/// A quota row as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    /// The pool.
    pub pool_id: String,
    /// The resource (`instances`, `vcpus`, ...).
    pub resource: String,
    /// The maximum in effect.
    pub max: i64,
    /// Currently charged.
    pub used: i64,
    /// `max - used`, never below 0.
    pub available: i64,
}

impl Quota {
    fn from_parts(pool_id: String, resource: String, max: i64, used: i64) -> Self {
        let row = quotas_core::QuotaRow {
            resource: resource.clone(),
            max,
            used,
        };
        Quota {
            pool_id,
            resource,
            max,
            used,
            available: row.available(),
        }
    }
}

/// Input of `pools.create`.
#[derive(Debug, Clone)]
pub struct NewPool<'a> {
    /// Name.
    pub name: &'a str,
    /// Region.
    pub region: &'a str,
    /// Provider name.
    pub provider: &'a str,
    /// A provider account of the root tenant.
    pub account_id: &'a str,
    /// Flavors (validated).
    pub flavors: &'a [Flavor],
    /// The root tenant's quota rows to create.
    pub quotas: &'a BTreeMap<String, i64>,
    /// Its VM settings (checked, defaults filled): a managed pool.
    pub vm: Option<&'a PoolVm>,
    /// Its lending (a managed pool only).
    pub lending: Option<PoolLending>,
}

async fn pool_row(conn: &mut AsyncPgConnection, pool_id: &str) -> Result<Option<PoolRow>> {
    Ok(pools::table
        .find(pool_id)
        .select(PoolRow::as_select())
        .first(conn)
        .await
        .optional()?)
}

async fn offered_to(conn: &mut AsyncPgConnection, pool_id: &str) -> Result<Vec<String>> {
    Ok(pool_offers::table
        .filter(pool_offers::pool_id.eq(pool_id))
        .order(pool_offers::tenant_id.asc())
        .select(pool_offers::tenant_id)
        .load(conn)
        .await?)
}

fn to_pool(row: PoolRow, offered: Vec<String>) -> Result<Pool> {
    Ok(Pool {
        pool_id: row.pool_id,
        name: row.name,
        region: row.region,
        provider: row.provider,
        account_id: row.account_id,
        flavors: serde_json::from_value(row.flavors)?,
        offered_to: offered,
        created_at: row.created_at,
        vm: row.vm.map(serde_json::from_value).transpose()?,
        lending: row
            .lending_notice_s
            .map(|notice_seconds| PoolLending { notice_seconds }),
    })
}

/// Whether `tenant` may use the pool: root always, others when offered.
pub async fn is_visible(
    conn: &mut AsyncPgConnection,
    actor: &Actor,
    pool_id: &PoolId,
) -> Result<bool> {
    visible(
        conn,
        actor.tenant().as_str(),
        actor.root().as_str(),
        pool_id.as_str(),
    )
    .await
}

/// [`is_visible`] on ids already read from rows.
pub async fn visible(
    conn: &mut AsyncPgConnection,
    tenant: &str,
    root: &str,
    pool_id: &str,
) -> Result<bool> {
    if tenant == root {
        return Ok(pool_row(conn, pool_id).await?.is_some());
    }
    let n: i64 = pool_offers::table
        .filter(pool_offers::pool_id.eq(pool_id))
        .filter(pool_offers::tenant_id.eq(tenant))
        .count()
        .get_result(conn)
        .await?;
    Ok(n > 0)
}

/// `pools.get`: `NOT_FOUND` unless the pool is visible to `tenant`.
pub async fn get(conn: &mut AsyncPgConnection, actor: &Actor, pool_id: &PoolId) -> Result<Pool> {
    find(
        conn,
        actor.tenant().as_str(),
        actor.root().as_str(),
        pool_id.as_str(),
    )
    .await
}

/// [`get`] on ids already read from rows.
pub async fn find(
    conn: &mut AsyncPgConnection,
    tenant: &str,
    root: &str,
    pool_id: &str,
) -> Result<Pool> {
    if !visible(conn, tenant, root, pool_id).await? {
        return Err(StorageError::not_found("pool", pool_id));
    }
    let row = pool_row(conn, pool_id)
        .await?
        .ok_or_else(|| StorageError::not_found("pool", pool_id))?;
    let offered = offered_to(conn, pool_id).await?;
    let offered = if tenant == root {
        offered
    } else {
        vec![tenant.to_owned()]
    };
    to_pool(row, offered)
}

/// A pool by id, whoever asks (for internal lookups).
pub async fn get_any(conn: &mut AsyncPgConnection, pool_id: &str) -> Result<Pool> {
    let row = pool_row(conn, pool_id)
        .await?
        .ok_or_else(|| StorageError::not_found("pool", pool_id))?;
    to_pool(row, Vec::new())
}

/// `pools.list`: root sees every pool, another tenant the pools offered to it.
pub async fn list(conn: &mut AsyncPgConnection, actor: &Actor) -> Result<Vec<Pool>> {
    let (tenant, root) = (actor.tenant().as_str(), actor.root().as_str());
    let rows: Vec<PoolRow> = if tenant == root {
        pools::table
            .order((pools::created_at.desc(), pools::pool_id.desc()))
            .limit(crate::LIST_LIMIT)
            .select(PoolRow::as_select())
            .load(conn)
            .await?
    } else {
        pools::table
            .inner_join(pool_offers::table)
            .filter(pool_offers::tenant_id.eq(tenant))
            .order((pools::created_at.desc(), pools::pool_id.desc()))
            .limit(crate::LIST_LIMIT)
            .select(PoolRow::as_select())
            .load(conn)
            .await?
    };
    let ids: Vec<&str> = rows.iter().map(|r| r.pool_id.as_str()).collect();
    let offers: Vec<(String, String)> = pool_offers::table
        .filter(pool_offers::pool_id.eq_any(&ids))
        .order((pool_offers::pool_id, pool_offers::tenant_id))
        .select((pool_offers::pool_id, pool_offers::tenant_id))
        .load(conn)
        .await?;
    rows.into_iter()
        .map(|row| {
            let offered = if tenant == root {
                offers
                    .iter()
                    .filter(|(p, _)| *p == row.pool_id)
                    .map(|(_, t)| t.clone())
                    .collect()
            } else {
                vec![tenant.to_owned()]
            };
            to_pool(row, offered)
        })
        .collect()
}

/// Sets one quota row's maximum as `quotas.set` does (a max below `used` is
/// raised to `used`), creating the row if needed. Returns the row and whether
/// it was created or changed.
async fn set_quota_row(
    conn: &mut AsyncPgConnection,
    tenant: &str,
    pool_id: &str,
    resource: &str,
    requested: i64,
) -> Result<(Quota, bool)> {
    let current = locks::quota_row(conn, tenant, pool_id, resource).await?;
    let (max, used, changed) = match current {
        Some((old_max, used)) => {
            let max = quotas_core::effective_max(requested, used);
            if max != old_max {
                diesel::update(quotas::table.find((tenant, pool_id, resource)))
                    .set(quotas::max_value.eq(max))
                    .execute(conn)
                    .await?;
            }
            (max, used, max != old_max)
        }
        None => {
            // A concurrent creator may win the insert; then update its row.
            let (max, used): (i64, i64) = diesel::insert_into(quotas::table)
                .values((
                    quotas::tenant_id.eq(tenant),
                    quotas::pool_id.eq(pool_id),
                    quotas::resource.eq(resource),
                    quotas::max_value.eq(requested),
                    quotas::used.eq(0),
                ))
                .on_conflict((quotas::tenant_id, quotas::pool_id, quotas::resource))
                .do_update()
                .set(
                    quotas::max_value.eq(diesel::dsl::sql::<diesel::sql_types::BigInt>(
                        "GREATEST(EXCLUDED.max_value, quotas.used)",
                    )),
                )
                .returning((quotas::max_value, quotas::used))
                .get_result(conn)
                .await?;
            (max, used, true)
        }
    };
    Ok((
        Quota::from_parts(pool_id.to_owned(), resource.to_owned(), max, used),
        changed,
    ))
}

fn quota_event(tenant: &str, pool_id: &str, resource: &str, requested: i64, now: i64) -> NewEvent {
    NewEvent::new(
        tenant,
        EventData::QuotaUpdated(QuotaUpdated {
            pool_id: pool_id.to_owned(),
            resource: resource.to_owned(),
            max: requested,
        }),
        now,
    )
}

/// `pools.create` by root, idempotent under `key`.
pub async fn create(
    conn: &mut AsyncPgConnection,
    root: &TenantId,
    new: NewPool<'_>,
    key: KeyedRequest<'_>,
    now: i64,
) -> Result<Created<Pool>> {
    let root = root.as_str();
    conn.transaction::<_, StorageError, _>(async move |conn| {
        let id = ids::new_id("pool", now);
        if let Claim::Replay(existing) = idempotency::claim(conn, key, &id, now).await? {
            return find(conn, root, root, &existing).await.map(Created::replay);
        }
        accounts::find(conn, root, new.account_id).await?;
        if new.lending.is_some() && new.vm.is_none() {
            return Err(StorageError::invalid(
                Field::Lending,
                Reason::LedgerPool,
                "a ledger pool cannot lend: lending needs vm",
            ));
        }
        diesel::insert_into(pools::table)
            .values((
                pools::pool_id.eq(&id),
                pools::name.eq(new.name),
                pools::region.eq(new.region),
                pools::provider.eq(new.provider),
                pools::account_id.eq(new.account_id),
                pools::flavors.eq(serde_json::to_value(new.flavors)?),
                pools::created_at.eq(now),
                pools::vm.eq(new.vm.map(serde_json::to_value).transpose()?),
                pools::lending_notice_s.eq(new.lending.map(|l| l.notice_seconds)),
            ))
            .execute(conn)
            .await?;
        let mut batch = Vec::new();
        for (resource, max) in new.quotas {
            set_quota_row(conn, root, &id, resource, *max).await?;
            batch.push(quota_event(root, &id, resource, *max, now));
        }
        events::publish(conn, now, batch).await?;
        find(conn, root, root, &id).await.map(Created::new)
    })
    .await
}

/// `pools.offer` by root: offers the pool and creates or updates the tenant's rows.
pub async fn offer(
    conn: &mut AsyncPgConnection,
    root: &TenantId,
    pool_id: &PoolId,
    tenant: &TenantId,
    quota_max: &BTreeMap<String, i64>,
    now: i64,
) -> Result<Pool> {
    let root = root.as_str();
    let pool_id = pool_id.as_str();
    let tenant = tenant.as_str();
    conn.transaction::<_, StorageError, _>(async move |conn| {
        locks::named_tenant(conn, tenant).await?;
        pool_row(conn, pool_id)
            .await?
            .ok_or_else(|| StorageError::not_found("pool", pool_id))?;
        diesel::insert_into(pool_offers::table)
            .values((
                pool_offers::pool_id.eq(pool_id),
                pool_offers::tenant_id.eq(tenant),
                pool_offers::offered_at.eq(now),
            ))
            .on_conflict_do_nothing()
            .execute(conn)
            .await?;
        let mut batch = Vec::new();
        for (resource, max) in quota_max {
            let (_, changed) = set_quota_row(conn, tenant, pool_id, resource, *max).await?;
            if changed {
                batch.push(quota_event(tenant, pool_id, resource, *max, now));
            }
        }
        events::publish(conn, now, batch).await?;
        find(conn, root, root, pool_id).await
    })
    .await
}

/// `quotas.set` by root for a target tenant.
pub async fn set_quota(
    conn: &mut AsyncPgConnection,
    target: &TenantId,
    pool_id: &PoolId,
    resource: &str,
    requested: i64,
    now: i64,
) -> Result<Quota> {
    let target = target.as_str();
    let pool_id = pool_id.as_str();
    conn.transaction::<_, StorageError, _>(async move |conn| {
        locks::named_tenant(conn, target).await?;
        pool_row(conn, pool_id)
            .await?
            .ok_or_else(|| StorageError::not_found("pool", pool_id))?;
        let (quota, _) = set_quota_row(conn, target, pool_id, resource, requested).await?;
        events::publish(
            conn,
            now,
            vec![quota_event(target, pool_id, resource, requested, now)],
        )
        .await?;
        Ok(quota)
    })
    .await
}

/// `quotas.get`: the tenant's rows ordered by pool, then resource.
pub async fn get_quotas(
    conn: &mut AsyncPgConnection,
    actor: &Actor,
    pool_id: Option<&PoolId>,
) -> Result<Vec<Quota>> {
    let (tenant, root) = (actor.tenant().as_str(), actor.root().as_str());
    let pool_id = pool_id.map(PoolId::as_str);
    let mut query = quotas::table
        .filter(quotas::tenant_id.eq(tenant))
        // String (byte) order whatever the database's collation: under a
        // linguistic one `Zeta` would sort after `alpha` and `a_b` before `a-b`.
        .order(diesel::dsl::sql::<diesel::sql_types::Text>(
            r#"quotas.pool_id COLLATE "C", quotas.resource COLLATE "C""#,
        ))
        .select((
            quotas::pool_id,
            quotas::resource,
            quotas::max_value,
            quotas::used,
        ))
        .into_boxed();
    if let Some(pool_id) = pool_id {
        query = query.filter(quotas::pool_id.eq(pool_id));
    }
    let rows: Vec<(String, String, i64, i64)> = query.load(conn).await?;
    if let Some(pool_id) = pool_id
        && rows.is_empty()
        && !visible(conn, tenant, root, pool_id).await?
    {
        return Err(StorageError::not_found("pool", pool_id));
    }
    Ok(rows
        .into_iter()
        .map(|(p, r, m, u)| Quota::from_parts(p, r, m, u))
        .collect())
}
