//! pools and quotas (the capacity module).

use std::collections::BTreeMap;

use iam_check::{Permission, TenantRule};
use serde::Deserialize;
use storage::Error;
use storage::idempotency::KeyedRequest;
use storage::pools::{self, Flavor, NewPool};

use super::{items, one};
use crate::registry::{Call, Kind, Method, Reply, handler};
use crate::schema::{Ty, idem_key, int, name, opt, pat, req, resource, tenant_id, typeid};

fn quota_map() -> Ty {
    Ty::Map {
        key: Box::new(resource()),
        value: Box::new(int(0, i64::MAX)),
        max_entries: 64,
    }
}

fn flavor() -> Ty {
    Ty::Obj(vec![
        req("name", pat(64, "^[a-z0-9][a-z0-9-]{0,63}$")),
        req("vcpus", int(1, 4096)),
        req("memoryGib", int(0, 1_048_576)),
        req("gpus", int(0, 64)),
    ])
}

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    let m =
        |module, method, kind, permission, tenant_rule, phase, summary, fields: Vec<_>, handler| {
            Method {
                module,
                method,
                service_module: "capacity",
                kind,
                permission,
                tenant_rule,
                phase,
                status: "registered",
                summary,
                fields,
                handler,
            }
        };
    vec![
        m(
            "pools",
            "create",
            Kind::Mutation,
            Permission::PoolsManage,
            TenantRule::Acting,
            "v0.1",
            "Creates a pool on a root provider account, with the root tenant's quota rows.",
            vec![
                req("tenantId", tenant_id()),
                req("name", name()),
                req("region", pat(63, "^[a-z][a-z0-9-]{1,62}$")),
                req("provider", Ty::Enum(&["gce"])),
                req("accountId", typeid("pacct")),
                req(
                    "flavors",
                    Ty::Arr {
                        item: Box::new(flavor()),
                        min_items: 1,
                        max_items: 100,
                    },
                ),
                opt("quotas", quota_map()),
                req("idempotencyKey", idem_key()),
            ],
            handler!(create_pool),
        ),
        m(
            "pools",
            "offer",
            Kind::Mutation,
            Permission::PoolsManage,
            TenantRule::Acting,
            "v0.1",
            "Offers a pool to a tenant and creates or updates its quota rows.",
            vec![
                req("tenantId", tenant_id()),
                req("poolId", typeid("pool")),
                req("offerTenantId", tenant_id()),
                req("quotas", quota_map()),
            ],
            handler!(offer_pool),
        ),
        m(
            "pools",
            "get",
            Kind::Read,
            Permission::QuotasRead,
            TenantRule::Acting,
            "v0.1",
            "Returns a pool visible to the tenant.",
            vec![req("tenantId", tenant_id()), req("poolId", typeid("pool"))],
            handler!(get_pool),
        ),
        m(
            "pools",
            "list",
            Kind::Read,
            Permission::QuotasRead,
            TenantRule::Acting,
            "v0.1",
            "Lists the pools visible to the tenant, newest first.",
            vec![req("tenantId", tenant_id())],
            handler!(list_pools),
        ),
        m(
            "quotas",
            "get",
            Kind::Read,
            Permission::QuotasRead,
            TenantRule::Acting,
            "v0.1",
            "Returns the tenant's quota rows, ordered by pool then resource.",
            vec![req("tenantId", tenant_id()), opt("poolId", typeid("pool"))],
            handler!(get_quotas),
        ),
        m(
            "quotas",
            "set",
            Kind::Mutation,
            Permission::QuotasManage,
            TenantRule::RootCaller,
            "v0.2",
            "Sets a tenant's maximum for one resource in one pool (raised to used if below).",
            vec![
                req("tenantId", tenant_id()),
                req("poolId", typeid("pool")),
                req("resource", resource()),
                req("max", int(0, i64::MAX)),
            ],
            handler!(set_quota),
        ),
    ]
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreatePool {
    name: String,
    region: String,
    provider: String,
    account_id: String,
    flavors: Vec<Flavor>,
    #[serde(default)]
    quotas: BTreeMap<String, i64>,
    idempotency_key: String,
}

async fn create_pool(call: Call) -> Result<Reply, Error> {
    let input: CreatePool = call.parse()?;
    for (i, f) in input.flavors.iter().enumerate() {
        if input.flavors[..i].iter().any(|g| g.name == f.name) {
            return Err(Error::invalid(
                &format!("flavors[{i}].name"),
                "duplicate",
                format!("flavor {} is listed twice", f.name),
            ));
        }
    }
    let hash = call.request_hash();
    let key = KeyedRequest {
        tenant_id: call.tenant(),
        method: &call.name,
        key: &input.idempotency_key,
        request_hash: &hash,
    };
    let new = NewPool {
        name: &input.name,
        region: &input.region,
        provider: &input.provider,
        account_id: &input.account_id,
        flavors: &input.flavors,
        quotas: &input.quotas,
    };
    let (mut conn, now) = call.conn_now().await?;
    one(
        "pool",
        &pools::create(&mut conn, call.root(), new, key, now).await?,
    )
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OfferPool {
    pool_id: String,
    offer_tenant_id: String,
    quotas: BTreeMap<String, i64>,
}

async fn offer_pool(call: Call) -> Result<Reply, Error> {
    let input: OfferPool = call.parse()?;
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
    one("pool", &pool)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PoolRef {
    pool_id: Option<String>,
}

async fn get_pool(call: Call) -> Result<Reply, Error> {
    let input: PoolRef = call.parse()?;
    let mut conn = call.app.conn().await?;
    let pool_id = input.pool_id.unwrap_or_default();
    one(
        "pool",
        &pools::get(&mut conn, &pool_id, call.tenant(), call.root()).await?,
    )
}

async fn list_pools(call: Call) -> Result<Reply, Error> {
    let mut conn = call.app.conn().await?;
    items(&pools::list(&mut conn, call.tenant(), call.root()).await?)
}

async fn get_quotas(call: Call) -> Result<Reply, Error> {
    let input: PoolRef = call.parse()?;
    let mut conn = call.app.conn().await?;
    items(
        &pools::get_quotas(
            &mut conn,
            call.tenant(),
            call.root(),
            input.pool_id.as_deref(),
        )
        .await?,
    )
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SetQuota {
    tenant_id: String,
    pool_id: String,
    resource: String,
    max: i64,
}

async fn set_quota(call: Call) -> Result<Reply, Error> {
    let input: SetQuota = call.parse()?;
    let (mut conn, now) = call.conn_now().await?;
    let quota = pools::set_quota(
        &mut conn,
        &input.tenant_id,
        &input.pool_id,
        &input.resource,
        input.max,
        now,
    )
    .await?;
    tracing::info!(
        target_tenant = %input.tenant_id,
        pool = %input.pool_id,
        resource = %input.resource,
        requested = input.max,
        max = quota.max,
        "quota set"
    );
    one("quota", &quota)
}
