//! instances (the vps module).

use grants_core::Billing;
use iam_check::{Permission, RootOption};
use serde_json::{Value, json};
use storage::LIST_LIMIT;
use storage::model::instance::InstanceFilter;
use storage::model::states::InstanceState;
use storage::ops::instances::{self, INSTANCE_PREFIX, NewInstance};

use super::VPS;
use super::examples::{INSTANCE, KEY, POOL, PROJECT};
use crate::error::{ApiError, Code};
use crate::registry::{Call, Endpoint, Kind, Method, endpoint};
use crate::schema::{
    Ty, idem_key, input, int, keyset_after, keyset_cursor, name, pat, reservation_id, states,
    typeid,
};
use crate::wire::{self, InstanceReply, Page};

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

input! {
    /// `instances.create`.
    struct Create {
        req pool_id: String = ("poolId", typeid("pool")),
        req flavor: String = ("flavor", pat(64, "^[a-z0-9][a-z0-9-]{0,63}$")),
        opt project_id: String = ("projectId", typeid("prj")),
        opt name: String = ("name", name()),
        def billing: String = (
            "billing",
            Ty::Enum(&["standard", "none"]),
            Value::from("standard")
        ),
        req idempotency_key: String = ("idempotencyKey", idem_key()),
    }
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
        project_id: input.project_id.as_deref(),
        name: input.name.as_deref(),
        billing,
    };
    let (mut conn, now) = call.conn_now().await?;
    let created = instances::create(&mut conn, call.root(), new, key, now).await?;
    Ok(call.created(created).into())
}

input! {
    /// A method on one instance.
    struct InstanceRef {
        req instance_id: String = ("instanceId", typeid("inst")),
    }
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
    let mut conn = call.app.conn().await?;
    Ok(storage::db::read_only(&mut conn, async |conn| {
        instances::get(conn, call.tenant(), &input.instance_id).await
    })
    .await?
    .into())
}

input! {
    /// `instances.list`.
    struct List {
        opt project_id: String = ("projectId", typeid("prj")),
        opt pool_id: String = ("poolId", typeid("pool")),
        opt reservation_id: String = ("reservationId", reservation_id()),
        opt grant_id: String = ("grantId", typeid("rgrant")),
        opt states: Vec<String> = ("states", states(&["running", "stopped", "deleted"])),
        def all: bool = ("all", Ty::Bool, Value::Bool(false)),
        opt after: String = ("after", keyset_cursor()),
        def limit: i64 = ("limit", int(1, LIST_LIMIT), json!(LIST_LIMIT)),
    }
}

async fn list(call: Call, input: List) -> Result<Page<wire::Instance>, ApiError> {
    if input.all {
        call.allow(RootOption::AllTenants)?;
    }
    let after = keyset_after(input.after.as_deref(), INSTANCE_PREFIX, "instances.list")?;
    let filter = InstanceFilter {
        tenant_id: (!input.all).then(|| call.tenant().to_owned()),
        project_id: input.project_id,
        pool_id: input.pool_id,
        reservation_id: input.reservation_id,
        grant_id: input.grant_id,
        states: input.states.map(|states| {
            states
                .iter()
                .filter_map(|s| InstanceState::parse(s))
                .collect()
        }),
    };
    let mut conn = call.app.conn().await?;
    let page = storage::db::read_only(&mut conn, async |conn| {
        instances::list(conn, &filter, after, input.limit).await
    })
    .await?;
    Ok(Page::of(page, INSTANCE_PREFIX))
}
