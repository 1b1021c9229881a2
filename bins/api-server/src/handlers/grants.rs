//! reservationGrants (the vps module).

use iam_check::{Permission, TenantRule};
use serde::Deserialize;
use serde_json::Value;
use storage::Error;
use storage::grants::{self, NewGrant};
use storage::idempotency::KeyedRequest;

use super::{items, one};
use crate::registry::{Call, Kind, Method, Reply, handler};
use crate::schema::{
    Ty, idem_key, instant, int, opt, opt_default, req, reservation_id, tenant_id, typeid,
};

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    let m = |method, kind, permission, tenant_rule, summary, fields: Vec<_>, handler| Method {
        module: "reservationGrants",
        method,
        service_module: "vps",
        kind,
        permission,
        tenant_rule,
        phase: "v1.0",
        status: "registered",
        summary,
        fields,
        handler,
    };
    vec![
        m(
            "create",
            Kind::Mutation,
            Permission::ProvidersManage,
            TenantRule::RootOnly,
            "Commits slots of a reservation to a tenant (optionally one project) for \
             [startsAt, endsAt).",
            vec![
                req("tenantId", tenant_id()),
                req("accountId", typeid("pacct")),
                req("reservationId", reservation_id()),
                req("grantTenantId", tenant_id()),
                opt("projectId", typeid("prj")),
                req("slots", int(1, 100_000)),
                req("startsAt", instant()),
                req("endsAt", instant()),
                req("idempotencyKey", idem_key()),
            ],
            handler!(create),
        ),
        m(
            "get",
            Kind::Read,
            Permission::QuotasRead,
            TenantRule::Acting,
            "Returns one grant of the tenant (root, in the root tenant, reads any).",
            vec![
                req("tenantId", tenant_id()),
                req("grantId", typeid("rgrant")),
            ],
            handler!(get),
        ),
        m(
            "list",
            Kind::Read,
            Permission::QuotasRead,
            TenantRule::Acting,
            "Lists the tenant's grants, newest first; with all, root lists every tenant's.",
            vec![
                req("tenantId", tenant_id()),
                opt_default("all", Ty::Bool, Value::Bool(false)),
            ],
            handler!(list),
        ),
        m(
            "end",
            Kind::Mutation,
            Permission::ProvidersManage,
            TenantRule::RootOnly,
            "Ends a grant now (cancels it if it has not started).",
            vec![
                req("tenantId", tenant_id()),
                req("accountId", typeid("pacct")),
                req("grantId", typeid("rgrant")),
            ],
            handler!(end),
        ),
    ]
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Create {
    account_id: String,
    reservation_id: String,
    grant_tenant_id: String,
    project_id: Option<String>,
    slots: i32,
    starts_at: i64,
    ends_at: i64,
    idempotency_key: String,
}

async fn create(call: Call) -> Result<Reply, Error> {
    let input: Create = call.parse()?;
    let hash = call.request_hash();
    let key = KeyedRequest {
        tenant_id: call.tenant(),
        method: &call.name,
        key: &input.idempotency_key,
        request_hash: &hash,
    };
    let new = NewGrant {
        account_id: &input.account_id,
        reservation_id: &input.reservation_id,
        grant_tenant_id: &input.grant_tenant_id,
        project_id: input.project_id.as_deref(),
        slots: input.slots,
        starts_at: input.starts_at,
        ends_at: input.ends_at,
    };
    let (mut conn, now) = call.conn_now().await?;
    one(
        "grant",
        &grants::create(&mut conn, call.root(), new, key, now).await?,
    )
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GrantRef {
    grant_id: String,
    account_id: Option<String>,
}

async fn get(call: Call) -> Result<Reply, Error> {
    let input: GrantRef = call.parse()?;
    let (mut conn, now) = call.conn_now().await?;
    one(
        "grant",
        &grants::get(&mut conn, call.tenant(), call.root(), &input.grant_id, now).await?,
    )
}

#[derive(Deserialize)]
struct List {
    all: Option<bool>,
}

async fn list(call: Call) -> Result<Reply, Error> {
    let input: List = call.parse()?;
    let all = input.all.unwrap_or(false);
    if all && !call.in_root() {
        return Err(Error::access_denied(
            "only the root tenant may list every tenant's grants",
        ));
    }
    let (mut conn, now) = call.conn_now().await?;
    items(&grants::list(&mut conn, call.tenant(), all, now).await?)
}

async fn end(call: Call) -> Result<Reply, Error> {
    let input: GrantRef = call.parse()?;
    let account = input.account_id.unwrap_or_default();
    let (mut conn, now) = call.conn_now().await?;
    one(
        "grant",
        &grants::end(&mut conn, call.root(), &account, &input.grant_id, now).await?,
    )
}
