//! instances (the vps module).

use grants_core::Billing;
use iam_check::{Permission, TenantRule};
use serde::Deserialize;
use serde_json::Value;
use storage::Error;
use storage::idempotency::KeyedRequest;
use storage::instances::{self, NewInstance};

use super::{items, one};
use crate::registry::{Call, Kind, Method, Reply, handler};
use crate::schema::{Ty, idem_key, name, opt, opt_default, pat, req, tenant_id, typeid};

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    let m = |method, kind, summary, fields: Vec<_>, handler| Method {
        module: "instances",
        method,
        service_module: "vps",
        kind,
        permission: Permission::InstancesManage,
        tenant_rule: TenantRule::Acting,
        phase: "v1.0",
        status: "registered",
        summary,
        fields,
        handler,
    };
    let one_instance = || {
        vec![
            req("tenantId", tenant_id()),
            req("instanceId", typeid("inst")),
        ]
    };
    vec![
        m(
            "create",
            Kind::Mutation,
            "Creates an instance: quota is charged, then it is placed (grant first, then an \
             ordinary slot, else on-demand).",
            vec![
                req("tenantId", tenant_id()),
                req("poolId", typeid("pool")),
                req("flavor", pat(64, "^[a-z0-9][a-z0-9-]{0,63}$")),
                opt("projectId", typeid("prj")),
                opt("name", name()),
                opt_default(
                    "billing",
                    Ty::Enum(&["standard", "none"]),
                    Value::from("standard"),
                ),
                req("idempotencyKey", idem_key()),
            ],
            handler!(create),
        ),
        m(
            "stop",
            Kind::Mutation,
            "Stops an instance; in a grant it keeps its slot.",
            one_instance(),
            handler!(stop),
        ),
        m(
            "start",
            Kind::Mutation,
            "Starts an instance, back into its grant if still live.",
            one_instance(),
            handler!(start),
        ),
        m(
            "delete",
            Kind::Mutation,
            "Deletes an instance, releasing its slot and quota.",
            one_instance(),
            handler!(delete),
        ),
        m(
            "get",
            Kind::Read,
            "Returns an instance of the tenant.",
            one_instance(),
            handler!(get),
        ),
        m(
            "list",
            Kind::Read,
            "Lists the tenant's instances, newest first.",
            vec![
                req("tenantId", tenant_id()),
                opt("projectId", typeid("prj")),
            ],
            handler!(list),
        ),
    ]
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Create {
    pool_id: String,
    flavor: String,
    project_id: Option<String>,
    name: Option<String>,
    billing: Option<String>,
    idempotency_key: String,
}

async fn create(call: Call) -> Result<Reply, Error> {
    let input: Create = call.parse()?;
    let billing = Billing::parse(input.billing.as_deref().unwrap_or("standard"))
        .ok_or_else(|| Error::invalid("billing", "enum", "billing must be standard or none"))?;
    if billing == Billing::None && !call.in_root() {
        return Err(Error::access_denied(
            "billing \"none\" is reserved to the root tenant",
        ));
    }
    let hash = call.request_hash();
    let key = KeyedRequest {
        tenant_id: call.tenant(),
        method: &call.name,
        key: &input.idempotency_key,
        request_hash: &hash,
    };
    let new = NewInstance {
        tenant_id: call.tenant(),
        pool_id: &input.pool_id,
        flavor: &input.flavor,
        project_id: input.project_id.as_deref(),
        name: input.name.as_deref(),
        billing,
    };
    let (mut conn, now) = call.conn_now().await?;
    one(
        "instance",
        &instances::create(&mut conn, call.root(), new, key, now).await?,
    )
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InstanceRef {
    instance_id: Option<String>,
    project_id: Option<String>,
}

impl InstanceRef {
    fn id(&self) -> &str {
        self.instance_id.as_deref().unwrap_or_default()
    }
}

async fn stop(call: Call) -> Result<Reply, Error> {
    let input: InstanceRef = call.parse()?;
    let (mut conn, now) = call.conn_now().await?;
    one(
        "instance",
        &instances::stop(&mut conn, call.tenant(), input.id(), now).await?,
    )
}

async fn start(call: Call) -> Result<Reply, Error> {
    let input: InstanceRef = call.parse()?;
    let (mut conn, now) = call.conn_now().await?;
    one(
        "instance",
        &instances::start(&mut conn, call.tenant(), input.id(), now).await?,
    )
}

async fn delete(call: Call) -> Result<Reply, Error> {
    let input: InstanceRef = call.parse()?;
    let (mut conn, now) = call.conn_now().await?;
    one(
        "instance",
        &instances::delete(&mut conn, call.tenant(), input.id(), now).await?,
    )
}

async fn get(call: Call) -> Result<Reply, Error> {
    let input: InstanceRef = call.parse()?;
    let mut conn = call.app.conn().await?;
    one(
        "instance",
        &instances::get(&mut conn, call.tenant(), input.id()).await?,
    )
}

async fn list(call: Call) -> Result<Reply, Error> {
    let input: InstanceRef = call.parse()?;
    let mut conn = call.app.conn().await?;
    items(&instances::list(&mut conn, call.tenant(), input.project_id.as_deref()).await?)
}
