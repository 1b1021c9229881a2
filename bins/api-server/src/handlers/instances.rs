//! instances (the vps module).

use grants_core::Billing;
use iam_check::{Permission, RootOption};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use storage::LIST_LIMIT;
use storage::model::instance::InstanceFilter;
use storage::model::states::InstanceState;
use storage::ops::instances::{self, INSTANCE_PREFIX, NewInstance};

use super::VPS;
use super::examples::{INSTANCE, KEY, POOL, PROJECT};
use crate::error::{ApiError, Code};
use crate::registry::{Call, Endpoint, Kind, Method, endpoint};
use crate::schema::{FLAVOR, IDEMPOTENCY_KEY, KEYSET_CURSOR, NAME, keyset_after};
use crate::wire::{self, InstanceReply, Page};
use storage::ids::{GrantId, InstanceId, PoolId, ProjectId, ReservationId};

fn method(method: &'static str, kind: Kind, summary: &'static str, endpoint: Endpoint) -> Method {
    VPS.method(
        "instances",
        method,
        kind,
        Permission::InstancesManage,
        summary,
        endpoint,
    )
    .example(json!({ "tenantId": "acme", "instanceId": INSTANCE }))
}

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    let transition = &[
        Code::NotFound,
        Code::InvalidState,
        Code::CapacityUnavailable,
    ];
    vec![
        method(
            "create",
            Kind::Mutation,
            "Creates an instance: quota is charged, then it is placed (grant first, then an \
             ordinary slot, else on-demand).",
            endpoint(create),
        )
        .errors(&[
            Code::NotFound,
            Code::Conflict,
            Code::InvalidState,
            Code::CapacityUnavailable,
            Code::QuotaExceeded,
        ])
        .example(json!({
            "tenantId": "acme",
            "poolId": POOL,
            "flavor": "n2-standard-4",
            "projectId": PROJECT,
            "name": "web-1",
            "idempotencyKey": KEY,
        })),
        method(
            "stop",
            Kind::Mutation,
            "Stops an instance; in a grant it keeps its slot.",
            endpoint(stop),
        )
        .errors(transition),
        method(
            "start",
            Kind::Mutation,
            "Starts an instance, back into its grant if still live.",
            endpoint(start),
        )
        .errors(&[
            Code::NotFound,
            Code::InvalidState,
            Code::CapacityUnavailable,
            Code::QuotaExceeded,
        ]),
        method(
            "delete",
            Kind::Mutation,
            "Deletes an instance, releasing its slot and quota.",
            endpoint(delete),
        )
        .errors(transition),
        method(
            "get",
            Kind::Read,
            "Returns an instance of the tenant.",
            endpoint(get),
        ),
        method(
            "list",
            Kind::Read,
            "Pages the tenant's instances, newest first, optionally of one project, pool, \
             reservation or grant and in some states; with all, root lists every tenant's.",
            endpoint(list),
        )
        .errors(&[])
        .example(json!({
            "tenantId": "acme",
            "projectId": PROJECT,
            "states": ["running", "stopped"],
            "limit": 100,
        })),
    ]
}

/// `instances.create`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Create {
    pool_id: PoolId,
    #[schemars(length(min = 1, max = 64), regex(pattern = FLAVOR))]
    flavor: String,
    project_id: Option<ProjectId>,
    #[schemars(length(min = 1, max = 128), regex(pattern = NAME))]
    name: Option<String>,
    #[serde(default = "standard")]
    #[schemars(extend("enum" = ["standard", "none"]))]
    billing: String,
    /// Takes only a slot a lending grant lent (contract 3.14).
    #[serde(default)]
    interruptible: bool,
    #[schemars(length(min = 1, max = 128), regex(pattern = IDEMPOTENCY_KEY))]
    idempotency_key: String,
}

fn standard() -> String {
    "standard".to_owned()
}

async fn create(call: Call, input: Create) -> Result<InstanceReply, ApiError> {
    let billing = Billing::parse(&input.billing)
        .ok_or_else(|| ApiError::invalid("billing", "enum", "billing must be standard or none"))?;
    if billing == Billing::None {
        call.allow(RootOption::Unbilled)?;
    }
    let hash = call.request_hash();
    let key = call.keyed(&input.idempotency_key, &hash);
    let new = NewInstance {
        tenant_id: call.tenant(),
        pool_id: &input.pool_id,
        flavor: &input.flavor,
        project_id: input.project_id.as_ref(),
        name: input.name.as_deref(),
        billing,
        interruptible: input.interruptible,
    };
    let (mut conn, now) = call.conn_now().await?;
    let created = instances::create(&mut conn, call.root(), new, key, now).await?;
    Ok(call.created(created).into())
}

/// A method on one instance.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct InstanceRef {
    instance_id: InstanceId,
}

async fn stop(call: Call, input: InstanceRef) -> Result<InstanceReply, ApiError> {
    let (mut conn, now) = call.conn_now().await?;
    Ok(
        instances::stop(&mut conn, call.tenant(), &input.instance_id, now)
            .await?
            .into(),
    )
}

async fn start(call: Call, input: InstanceRef) -> Result<InstanceReply, ApiError> {
    let (mut conn, now) = call.conn_now().await?;
    Ok(
        instances::start(&mut conn, call.tenant(), &input.instance_id, now)
            .await?
            .into(),
    )
}

async fn delete(call: Call, input: InstanceRef) -> Result<InstanceReply, ApiError> {
    let (mut conn, now) = call.conn_now().await?;
    Ok(
        instances::delete(&mut conn, call.tenant(), &input.instance_id, now)
            .await?
            .into(),
    )
}

async fn get(call: Call, input: InstanceRef) -> Result<InstanceReply, ApiError> {
    let mut conn = call.conn().await?;
    Ok(storage::db::read_only(&mut conn, async |conn| {
        instances::get(conn, call.tenant(), &input.instance_id).await
    })
    .await?
    .into())
}

/// `instances.list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct List {
    project_id: Option<ProjectId>,
    pool_id: Option<PoolId>,
    reservation_id: Option<ReservationId>,
    grant_id: Option<GrantId>,
    #[serde(default)]
    #[schemars(
        with = "Vec<String>",
        length(min = 1, max = 8),
        extend(
            "items" = { "type": "string", "enum": [
                "running", "stopped", "deleted",
                "provisioning", "stopping", "starting", "deleting", "failed"
            ] },
            "uniqueItems" = true
        )
    )]
    states: Option<Vec<String>>,
    #[serde(default)]
    all: bool,
    #[schemars(length(min = 1, max = 40), regex(pattern = KEYSET_CURSOR))]
    after: Option<String>,
    #[serde(default = "crate::schema::list_limit")]
    #[schemars(range(min = 1, max = LIST_LIMIT))]
    limit: i64,
}

async fn list(call: Call, input: List) -> Result<Page<wire::Instance>, ApiError> {
    if input.all {
        call.allow(RootOption::AllTenants)?;
    }
    let after = keyset_after(input.after.as_deref(), INSTANCE_PREFIX, "instances.list")?;
    let filter = InstanceFilter {
        tenant_id: (!input.all).then(|| call.tenant().to_string()),
        project_id: input.project_id.map(String::from),
        pool_id: input.pool_id.map(String::from),
        reservation_id: input.reservation_id.map(String::from),
        grant_id: input.grant_id.map(String::from),
        states: input.states.map(|states| {
            states
                .iter()
                .filter_map(|s| InstanceState::parse(s))
                .collect()
        }),
    };
    let mut conn = call.conn().await?;
    let page = storage::db::read_only(&mut conn, async |conn| {
        instances::list(conn, &filter, after, input.limit).await
    })
    .await?;
    Ok(Page::of(page, INSTANCE_PREFIX))
}
