//! pools and quotas (the capacity module).

use std::collections::BTreeMap;

use iam_check::{Permission, TenantRule};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer};
use serde_json::json;
use storage::model::pool_vm::{DEFAULT_DISK_GB, DEFAULT_NETWORK, PoolVm};
use storage::ops::pools::{self, Flavor, NewPool, PoolLending};

use super::CAPACITY;
use super::examples::{ACCOUNT, KEY, POOL};
use crate::error::{ApiError, Code};
use crate::registry::{Call, Endpoint, Kind, Method, endpoint};
use crate::schema::{FLAVOR, IDEMPOTENCY_KEY, NAME, RESOURCE, TenantOnly};
use crate::wire::{self, Items, PoolReply, QuotaReply};
use storage::ids::{AccountId, PoolId, TenantId};

/// Quota maxima by resource: at most 64 entries.
fn quota_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "propertyNames": {
            "type": "string",
            "minLength": 1,
            "maxLength": 64,
            "pattern": RESOURCE,
        },
        "additionalProperties": {
            "type": "integer",
            "format": "int64",
            "minimum": 0,
            "maximum": i64::MAX,
        },
        "maxProperties": 64,
    })
}

/// A machine shape as `pools.create` takes it.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FlavorInput {
    #[schemars(length(min = 1, max = 64), regex(pattern = FLAVOR))]
    name: String,
    #[schemars(range(min = 1, max = 4096))]
    vcpus: i64,
    #[schemars(range(min = 0, max = 1_048_576))]
    memory_gib: i64,
    #[schemars(range(min = 0, max = 64))]
    gpus: i64,
}

/// GCE image references: a URL or `projects/{p}/global/images/...`.
const IMAGE: &str = concat!(
    "^(https://www\\.googleapis\\.com/compute/v1/)?projects/[a-z][-a-z0-9.:]{0,62}",
    "/global/images/(family/)?[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
);
/// GCE zones.
const ZONE: &str = "^[a-z]+-[a-z]+[0-9]+-[a-z]$";
/// GCE networks.
const NETWORK: &str = concat!(
    "^(https://www\\.googleapis\\.com/compute/v1/)?(projects/[a-z][-a-z0-9.:]{0,62}/)?",
    "global/networks/[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
);
/// GCE subnetworks.
const SUBNETWORK: &str = concat!(
    "^(https://www\\.googleapis\\.com/compute/v1/)?(projects/[a-z][-a-z0-9.:]{0,62}/)?",
    "regions/[a-z]+-[a-z]+[0-9]+/subnetworks/[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
);
/// Service account emails.
const EMAIL: &str = "^[a-z0-9][a-z0-9._-]{0,62}@[a-z0-9][a-z0-9.-]{0,190}\\.[a-z]{2,63}$";

/// GCE labels: at most 16 from a pool; keys start with a lowercase letter,
/// keys and values are lowercase letters, digits, `_` and `-`, at most 63.
fn labels_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "propertyNames": { "type": "string", "pattern": "^[a-z][a-z0-9_-]{0,62}$" },
        "additionalProperties": { "type": "string", "pattern": "^[a-z0-9_-]{0,63}$" },
        "maxProperties": 16,
    })
}

/// `pools.create`'s `vm`: makes the pool managed (contract 3.3, r3).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct VmInput {
    #[schemars(length(min = 1, max = 512), regex(pattern = IMAGE))]
    image: String,
    #[serde(default)]
    #[schemars(length(min = 1, max = 8), extend("uniqueItems" = true))]
    zones: Option<Vec<ZoneName>>,
    #[serde(default)]
    #[schemars(length(min = 1, max = 512), regex(pattern = NETWORK))]
    network: Option<String>,
    #[serde(default)]
    #[schemars(length(min = 1, max = 512), regex(pattern = SUBNETWORK))]
    subnetwork: Option<String>,
    #[serde(default)]
    #[schemars(range(min = 10, max = 65536))]
    disk_gb: Option<i64>,
    #[serde(default)]
    #[schemars(length(min = 3, max = 254), regex(pattern = EMAIL))]
    service_account: Option<String>,
    #[serde(default)]
    #[schemars(schema_with = "labels_map")]
    labels: Option<BTreeMap<String, String>>,
}

/// A zone name.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(transparent)]
struct ZoneName(#[schemars(length(min = 1, max = 63), regex(pattern = ZONE))] String);

impl VmInput {
    /// The stored settings, defaults filled in, or the rule it breaks.
    fn checked(self, region: &str) -> Result<PoolVm, ApiError> {
        let vm = PoolVm {
            image: self.image,
            zones: match self.zones {
                Some(z) => z.into_iter().map(|z| z.0).collect(),
                None => vec![format!("{region}-a")],
            },
            network: self.network.unwrap_or_else(|| DEFAULT_NETWORK.to_owned()),
            subnetwork: self.subnetwork,
            disk_gb: self.disk_gb.unwrap_or(DEFAULT_DISK_GB),
            service_account: self.service_account,
            labels: self.labels.unwrap_or_default(),
        };
        if let Some(zone) = vm.zone_outside(region) {
            return Err(ApiError::invalid(
                "vm.zones",
                "region-mismatch",
                format!("zone {zone} is not in the pool's region {region}"),
            ));
        }
        if let Some(key) = vm.reserved_label() {
            return Err(ApiError::invalid(
                &format!("vm.labels.{key}"),
                "reserved",
                format!("label {key} is set by the platform on every vm"),
            ));
        }
        Ok(vm)
    }
}

/// The flavors of `pools.create` as storage takes them.
fn flavors<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Flavor>, D::Error> {
    let flavors = Vec::<FlavorInput>::deserialize(d)?;
    let flavor = |FlavorInput {
                      name,
                      vcpus,
                      memory_gib,
                      gpus,
                  }| Flavor {
        name,
        vcpus,
        memory_gib,
        gpus,
    };
    Ok(flavors.into_iter().map(flavor).collect())
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

/// `pools.create`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CreatePool {
    #[schemars(length(min = 1, max = 128), regex(pattern = NAME))]
    name: String,
    #[schemars(length(min = 1, max = 63), regex(pattern = REGION))]
    region: String,
    #[schemars(extend("enum" = ["gce"]))]
    provider: String,
    account_id: AccountId,
    #[serde(deserialize_with = "flavors")]
    #[schemars(
        with = "Vec<FlavorInput>",
        length(min = 1, max = 100),
        extend("uniqueItems" = true)
    )]
    flavors: Vec<Flavor>,
    #[serde(default)]
    #[schemars(schema_with = "quota_map")]
    quotas: Option<BTreeMap<String, i64>>,
    #[serde(default)]
    vm: Option<VmInput>,
    /// Lets the pool's grants lend idle slots (a managed pool only).
    #[serde(default)]
    lending: Option<LendingInput>,
    #[schemars(length(min = 1, max = 128), regex(pattern = IDEMPOTENCY_KEY))]
    idempotency_key: String,
}

/// `lending` of `pools.create` (contract 3.3, r4).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct LendingInput {
    /// The notice a borrower gets before its VM is deleted.
    #[serde(default = "default_notice")]
    #[schemars(range(min = 0, max = 3600))]
    notice_seconds: i32,
}

fn default_notice() -> i32 {
    120
}

/// Provider regions.
const REGION: &str = "^[a-z][a-z0-9-]{1,62}$";

async fn create_pool(call: Call, input: CreatePool) -> Result<PoolReply, ApiError> {
    for (i, f) in input.flavors.iter().enumerate() {
        if input.flavors.iter().take(i).any(|g| g.name == f.name) {
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
    if input.lending.is_some() && input.vm.is_none() {
        return Err(ApiError::invalid(
            "lending",
            "ledger-pool",
            "a ledger pool cannot lend: lending needs vm",
        ));
    }
    let vm = input.vm.map(|v| v.checked(&input.region)).transpose()?;
    let new = NewPool {
        vm: vm.as_ref(),
        lending: input.lending.map(|l| PoolLending {
            notice_seconds: l.notice_seconds,
        }),
        name: &input.name,
        region: &input.region,
        provider: &input.provider,
        account_id: input.account_id.as_str(),
        flavors: &input.flavors,
        quotas: &quotas,
    };
    let (mut conn, now) = call.conn_now().await?;
    let created = pools::create(&mut conn, call.root(), new, key, now).await?;
    Ok(call.created(created).into())
}

/// `pools.offer`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct OfferPool {
    pool_id: PoolId,
    offer_tenant_id: TenantId,
    #[schemars(schema_with = "quota_map")]
    quotas: BTreeMap<String, i64>,
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

/// `pools.get`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PoolRef {
    pool_id: PoolId,
}

async fn get_pool(call: Call, input: PoolRef) -> Result<PoolReply, ApiError> {
    let mut conn = call.conn().await?;
    Ok(storage::db::read_only(&mut conn, async |conn| {
        pools::get(conn, &call.actor, &input.pool_id).await
    })
    .await?
    .into())
}

async fn list_pools(call: Call, _: TenantOnly) -> Result<Items<wire::Pool>, ApiError> {
    let mut conn = call.conn().await?;
    Ok(Items::of(
        storage::db::read_only(&mut conn, async |conn| pools::list(conn, &call.actor).await)
            .await?,
    ))
}

/// `quotas.get`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct GetQuotas {
    pool_id: Option<PoolId>,
}

async fn get_quotas(call: Call, input: GetQuotas) -> Result<Items<wire::Quota>, ApiError> {
    let mut conn = call.conn().await?;
    let rows = storage::db::read_only(&mut conn, async |conn| {
        pools::get_quotas(conn, &call.actor, input.pool_id.as_ref()).await
    })
    .await?;
    Ok(Items::of(rows))
}

/// `quotas.set`: `tenantId` names the target tenant.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SetQuota {
    pool_id: PoolId,
    #[schemars(length(min = 1, max = 64), regex(pattern = RESOURCE))]
    resource: String,
    #[schemars(range(min = 0, max = i64::MAX))]
    max: i64,
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
