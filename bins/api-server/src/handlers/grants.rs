//! reservationGrants (the vps module).

use iam_check::{Permission, RootOption, TenantRule};
use serde_json::{Value, json};
use storage::ops::grants::{self, NewGrant};

use super::VPS;
use super::examples::{ACCOUNT, GRANT, KEY, PROJECT, RESERVATION, T0, T1};
use crate::error::{ApiError, Code};
use crate::registry::{Call, Kind, Method, endpoint};
use crate::schema::{Ty, idem_key, input, instant, int, reservation_id, tenant_id, typeid};
use crate::views::{self, GrantReply, Items};

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    vec![
        VPS.method(
            "reservationGrants",
            "create",
            Kind::Mutation,
            Permission::ProvidersManage,
            "Commits slots of a reservation to a tenant (optionally one project) for \
             [startsAt, endsAt).",
            endpoint(create),
        )
        .tenant_rule(TenantRule::RootOnly)
        .errors(&[
            Code::NotFound,
            Code::Conflict,
            Code::InvalidState,
            Code::CapacityUnavailable,
        ])
        .example(json!({
            "tenantId": "root",
            "accountId": ACCOUNT,
            "reservationId": RESERVATION,
            "grantTenantId": "acme",
            "projectId": PROJECT,
            "slots": 2,
            "startsAt": T0,
            "endsAt": T1,
            "idempotencyKey": KEY,
        })),
        VPS.method(
            "reservationGrants",
            "get",
            Kind::Read,
            Permission::QuotasRead,
            "Returns one grant of the tenant (root, in the root tenant, reads any).",
            endpoint(get),
        )
        .example(json!({ "tenantId": "acme", "grantId": GRANT })),
        VPS.method(
            "reservationGrants",
            "list",
            Kind::Read,
            Permission::QuotasRead,
            "Lists the tenant's grants, newest first; with all, root lists every tenant's.",
            endpoint(list),
        )
        .errors(&[])
        .example(json!({ "tenantId": "acme" })),
        VPS.method(
            "reservationGrants",
            "end",
            Kind::Mutation,
            Permission::ProvidersManage,
            "Ends a grant now (cancels it if it has not started).",
            endpoint(end),
        )
        .tenant_rule(TenantRule::RootOnly)
        .errors(&[Code::NotFound, Code::InvalidState])
        .example(json!({ "tenantId": "root", "accountId": ACCOUNT, "grantId": GRANT })),
    ]
}

input! {
    /// `reservationGrants.create`.
    struct Create {
        req account_id: String = ("accountId", typeid("pacct")),
        req reservation_id: String = ("reservationId", reservation_id()),
        req grant_tenant_id: String = ("grantTenantId", tenant_id()),
        opt project_id: String = ("projectId", typeid("prj")),
        req slots: i32 = ("slots", int(1, 100_000)),
        req starts_at: i64 = ("startsAt", instant()),
        req ends_at: i64 = ("endsAt", instant()),
        req idempotency_key: String = ("idempotencyKey", idem_key()),
    }
}

async fn create(call: Call, input: Create) -> Result<GrantReply, ApiError> {
    let hash = call.request_hash();
    let key = call.keyed(&input.idempotency_key, &hash);
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
    Ok(grants::create(&mut conn, call.root(), new, key, now)
        .await?
        .into())
}

input! {
    /// `reservationGrants.get`.
    struct GrantRef {
        req grant_id: String = ("grantId", typeid("rgrant")),
    }
}

async fn get(call: Call, input: GrantRef) -> Result<GrantReply, ApiError> {
    let (mut conn, now) = call.conn_now().await?;
    Ok(
        grants::get(&mut conn, call.tenant(), call.root(), &input.grant_id, now)
            .await?
            .into(),
    )
}

input! {
    /// `reservationGrants.list`.
    struct List {
        def all: bool = ("all", Ty::Bool, Value::Bool(false)),
    }
}

async fn list(call: Call, input: List) -> Result<Items<views::Grant>, ApiError> {
    if input.all {
        call.allow(RootOption::AllTenants)?;
    }
    let (mut conn, now) = call.conn_now().await?;
    Ok(Items::of(
        grants::list(&mut conn, call.tenant(), input.all, now).await?,
    ))
}

input! {
    /// `reservationGrants.end`.
    struct End {
        req account_id: String = ("accountId", typeid("pacct")),
        req grant_id: String = ("grantId", typeid("rgrant")),
    }
}

async fn end(call: Call, input: End) -> Result<GrantReply, ApiError> {
    let (mut conn, now) = call.conn_now().await?;
    let grant = grants::end(
        &mut conn,
        call.root(),
        &input.account_id,
        &input.grant_id,
        now,
    )
    .await?;
    Ok(grant.into())
}
