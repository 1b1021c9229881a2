//! pools and quotas (the capacity module).

use std::collections::BTreeMap;

use iam_check::{Permission, TenantRule};
use serde_json::json;
use storage::ops::pools::{self, Flavor, NewPool};

use super::CAPACITY;
use super::examples::{ACCOUNT, KEY, POOL};
use crate::error::{ApiError, Code};
use crate::registry::{Call, Endpoint, Kind, Method, endpoint};
use crate::schema::{TenantOnly, Ty, idem_key, input, int, name, pat, resource, typeid};
use crate::wire::{self, Items, PoolReply, QuotaReply};

fn quota_map() -> Ty {
    Ty::Map {
        key: Box::new(resource()),
        value: Box::new(int(0, i64::MAX)),
        max_entries: 64,
    }
}

fn flavor() -> Ty {
    Ty::Obj(vec![
        crate::schema::req("name", pat(64, "^[a-z0-9][a-z0-9-]{0,63}$")),
        crate::schema::req("vcpus", int(1, 4096)),
        crate::schema::req("memoryGib", int(0, 1_048_576)),
        crate::schema::req("gpus", int(0, 64)),
    ])
}

fn method(
    module: &'static str,
    method: &'static str,
    kind: Kind,
    permission: Permission,
    phase: &'static str,
    summary: &'static str,
    endpoint: Endpoint,
) -> Method {
    CAPACITY
        .method(module, method, kind, permission, summary, endpoint)
        .phase(phase)
        .example(json!({ "tenantId": "acme", "poolId": POOL }))
}

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    vec![
        method(
            "pools",
            "create",
            Kind::Mutation,
            Permission::PoolsManage,
            "v0.1",
            "Creates a pool on a root provider account, with the root tenant's quota rows.",
            endpoint(create_pool),
        )
        .errors(&[Code::NotFound, Code::Conflict])
        .example(json!({
            "tenantId": "root",
            "name": "us-central1 general",
            "region": "us-central1",
            "provider": "gce",
            "accountId": ACCOUNT,
            "flavors": [{ "name": "n2-standard-4", "vcpus": 4, "memoryGib": 16, "gpus": 0 }],
            "quotas": { "instances": 100, "vcpus": 400 },
            "idempotencyKey": KEY,
        })),
        method(
            "pools",
            "offer",
            Kind::Mutation,
            Permission::PoolsManage,
            "v0.1",
            "Offers a pool to a tenant and creates or updates its quota rows.",
            endpoint(offer_pool),
        )
        .errors(&[Code::NotFound, Code::InvalidState])
        .example(json!({
            "tenantId": "root",
            "poolId": POOL,
            "offerTenantId": "acme",
            "quotas": { "instances": 10, "vcpus": 40 },
        })),
        method(
            "pools",
            "get",
            Kind::Read,
            Permission::QuotasRead,
            "v0.1",
            "Returns a pool visible to the tenant.",
            endpoint(get_pool),
        ),
        method(
            "pools",
            "list",
            Kind::Read,
            Permission::QuotasRead,
            "v0.1",
            "Lists the pools visible to the tenant, newest first.",
            endpoint(list_pools),
        )
        .errors(&[])
        .example(json!({ "tenantId": "acme" })),
        method(
            "quotas",
            "get",
            Kind::Read,
            Permission::QuotasRead,
            "v0.1",
            "Returns the tenant's quota rows, ordered by pool then resource.",
            endpoint(get_quotas),
        ),
        method(
            "quotas",
            "set",
            Kind::Mutation,
            Permission::QuotasManage,
            "v0.2",
            "Sets a tenant's maximum for one resource in one pool (raised to used if below).",
            endpoint(set_quota),
        )
        .tenant_rule(TenantRule::RootCaller)
        .errors(&[Code::NotFound, Code::InvalidState])
        .example(json!({
            "tenantId": "acme",
            "poolId": POOL,
            "resource": "vcpus",
            "max": 64,
        })),
    ]
}

input! {
    /// `pools.create`.
    struct CreatePool {
        req name: String = ("name", name()),
        req region: String = ("region", pat(63, "^[a-z][a-z0-9-]{1,62}$")),
        req provider: String = ("provider", Ty::Enum(&["gce"])),
        req account_id: String = ("accountId", typeid("pacct")),
        req flavors: Vec<Flavor> = ("flavors", Ty::Arr {
            item: Box::new(flavor()),
            min_items: 1,
            max_items: 100,
            unique: true,
        }),
        opt quotas: BTreeMap<String, i64> = ("quotas", quota_map()),
        req idempotency_key: String = ("idempotencyKey", idem_key()),
    }
}

async fn create_pool(call: Call, input: CreatePool) -> Result<PoolReply, ApiError> {
    for (i, f) in input.flavors.iter().enumerate() {
        if input.flavors[..i].iter().any(|g| g.name == f.name) {
            return Err(ApiError::invalid(
                &format!("flavors[{i}].name"),
                "duplicate",
                format!("flavor {} is listed twice", f.name),
            ));
        }
    }
    let hash = call.request_hash();
    let key = call.keyed(&input.idempotency_key, &hash);
    let quotas = input.quotas.unwrap_or_default();
    let new = NewPool {
        name: &input.name,
        region: &input.region,
        provider: &input.provider,
        account_id: &input.account_id,
        flavors: &input.flavors,
        quotas: &quotas,
    };
    let (mut conn, now) = call.conn_now().await?;
    let created = pools::create(&mut conn, call.root(), new, key, now).await?;
    Ok(call.created(created).into())
}

input! {
    /// `pools.offer`.
    struct OfferPool {
        req pool_id: String = ("poolId", typeid("pool")),
        req offer_tenant_id: String = ("offerTenantId", crate::schema::tenant_id()),
        req quotas: BTreeMap<String, i64> = ("quotas", quota_map()),
    }
}

async fn offer_pool(call: Call, input: OfferPool) -> Result<PoolReply, ApiError> {
    let (mut conn, now) = call.conn_now().await?;
    let pool = pools::offer(
        &mut conn,
        call.root(),
        &input.pool_id,
        &input.offer_tenant_id,
        &input.quotas,
        now,
    )
    .await?;
    Ok(pool.into())
}

input! {
    /// `pools.get`.
    struct PoolRef {
        req pool_id: String = ("poolId", typeid("pool")),
    }
}

async fn get_pool(call: Call, input: PoolRef) -> Result<PoolReply, ApiError> {
    let mut conn = call.app.conn().await?;
    Ok(storage::db::read_only(&mut conn, async |conn| {
        pools::get(conn, call.tenant(), call.root(), &input.pool_id).await
    })
    .await?
    .into())
}

async fn list_pools(call: Call, _: TenantOnly) -> Result<Items<wire::Pool>, ApiError> {
    let mut conn = call.app.conn().await?;
    Ok(Items::of(
        storage::db::read_only(&mut conn, async |conn| {
            pools::list(conn, call.tenant(), call.root()).await
        })
        .await?,
    ))
}

input! {
    /// `quotas.get`.
    struct GetQuotas {
        opt pool_id: String = ("poolId", typeid("pool")),
    }
}

async fn get_quotas(call: Call, input: GetQuotas) -> Result<Items<wire::Quota>, ApiError> {
    let mut conn = call.app.conn().await?;
    let rows = storage::db::read_only(&mut conn, async |conn| {
        pools::get_quotas(conn, call.tenant(), call.root(), input.pool_id.as_deref()).await
    })
    .await?;
    Ok(Items::of(rows))
}

input! {
    /// `quotas.set`: `tenantId` names the target tenant.
    struct SetQuota {
        req pool_id: String = ("poolId", typeid("pool")),
        req resource: String = ("resource", resource()),
        req max: i64 = ("max", int(0, i64::MAX)),
    }
}

async fn set_quota(call: Call, input: SetQuota) -> Result<QuotaReply, ApiError> {
    let (mut conn, now) = call.conn_now().await?;
    let target = call.tenant();
    let quota = pools::set_quota(
        &mut conn,
        target,
        &input.pool_id,
        &input.resource,
        input.max,
        now,
    )
    .await?;
    tracing::info!(
        target_tenant = %target,
        pool = %input.pool_id,
        resource = %input.resource,
        requested = input.max,
        max = quota.max,
        "quota set"
    );
    Ok(quota.into())
}
