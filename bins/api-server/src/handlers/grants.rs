//! reservationGrants (the vps module).

use grants_core::GrantState;
use iam_check::{Permission, RootOption, TenantRule};
use serde_json::{Value, json};
use storage::LIST_LIMIT;
use storage::model::grant::GrantFilter;
use storage::ops::grants::{self, GRANT_PREFIX, NewGrant};

use super::VPS;
use super::examples::{ACCOUNT, GRANT, KEY, PROJECT, RESERVATION, T0, T1};
use crate::error::{ApiError, Code};
use crate::registry::{Call, Kind, Method, endpoint};
use crate::schema::{
    Field, Input, Ty, idem_key, input, instant, int, keyset_after, keyset_cursor, req,
    reservation_id, states, tenant_id, typeid,
};
use crate::wire::{self, GrantReply, Page, PreviewReply};

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
            "preview",
            Kind::Read,
            Permission::ProvidersManage,
            "What create of the same input would decide and bill, written nowhere: whether it \
             fits, the reservation's total, granted and available slots, the exact slot-hours, \
             the hour buckets billed and the instances it would take in now.",
            endpoint(preview),
        )
        .tenant_rule(TenantRule::RootOnly)
        .errors(&[Code::NotFound, Code::InvalidState])
        .example(json!({
            "tenantId": "root",
            "accountId": ACCOUNT,
            "reservationId": RESERVATION,
            "grantTenantId": "acme",
            "slots": 2,
            "startsAt": T0,
            "endsAt": T1,
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
            "Pages the tenant's grants, newest first, optionally of one reservation or account, \
             in some states at now or live at an instant; with all, root lists every tenant's.",
            endpoint(list),
        )
        .errors(&[])
        .example(json!({
            "tenantId": "acme",
            "reservationId": RESERVATION,
            "states": ["scheduled", "active"],
            "limit": 100,
        })),
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
    /// The terms of a grant: `reservationGrants.preview`, and `create`
    /// without its idempotency key.
    struct Terms {
        req account_id: String = ("accountId", typeid("pacct")),
        req reservation_id: String = ("reservationId", reservation_id()),
        req grant_tenant_id: String = ("grantTenantId", tenant_id()),
        opt project_id: String = ("projectId", typeid("prj")),
        req slots: i32 = ("slots", int(1, 100_000)),
        req starts_at: i64 = ("startsAt", instant()),
        req ends_at: i64 = ("endsAt", instant()),
    }
}

impl Terms {
    fn new_grant(&self) -> NewGrant<'_> {
        NewGrant {
            account_id: &self.account_id,
            reservation_id: &self.reservation_id,
            grant_tenant_id: &self.grant_tenant_id,
            project_id: self.project_id.as_deref(),
            slots: self.slots,
            starts_at: self.starts_at,
            ends_at: self.ends_at,
        }
    }
}

/// `reservationGrants.create`: the terms and an idempotency key.
#[derive(Debug, serde::Deserialize)]
struct Create {
    #[serde(flatten)]
    terms: Terms,
    #[serde(rename = "idempotencyKey")]
    idempotency_key: String,
}

impl Input for Create {
    fn fields() -> Vec<Field> {
        let mut fields = Terms::fields();
        fields.push(req("idempotencyKey", idem_key()));
        fields
    }
}

async fn create(call: Call, input: Create) -> Result<GrantReply, ApiError> {
    let hash = call.request_hash();
    let key = call.keyed(&input.idempotency_key, &hash);
    let (mut conn, now) = call.conn_now().await?;
    let created = grants::create(&mut conn, call.root(), input.terms.new_grant(), key, now).await?;
    Ok(call.created(created).into())
}

async fn preview(call: Call, input: Terms) -> Result<PreviewReply, ApiError> {
    let (mut conn, now) = call.conn_now().await?;
    Ok(
        grants::preview(&mut conn, call.root(), input.new_grant(), now)
            .await?
            .into(),
    )
}

input! {
    /// `reservationGrants.get`.
    struct GrantRef {
        req grant_id: String = ("grantId", typeid("rgrant")),
    }
}

async fn get(call: Call, input: GrantRef) -> Result<GrantReply, ApiError> {
    let (mut conn, now) = call.conn_now().await?;
    Ok(storage::db::read_only(&mut conn, async |conn| {
        grants::get(conn, call.tenant(), call.root(), &input.grant_id, now).await
    })
    .await?
    .into())
}

/// The grant states `reservationGrants.list` filters by.
const GRANT_STATES: &[&str] = &["scheduled", "active", "ended", "cancelled"];

input! {
    /// `reservationGrants.list`.
    struct List {
        def all: bool = ("all", Ty::Bool, Value::Bool(false)),
        opt reservation_id: String = ("reservationId", reservation_id()),
        opt account_id: String = ("accountId", typeid("pacct")),
        opt states: Vec<String> = ("states", states(GRANT_STATES)),
        opt active_at: i64 = ("activeAt", instant()),
        opt after: String = ("after", keyset_cursor()),
        def limit: i64 = ("limit", int(1, LIST_LIMIT), json!(LIST_LIMIT)),
    }
}

async fn list(call: Call, input: List) -> Result<Page<wire::Grant>, ApiError> {
    if input.all {
        call.allow(RootOption::AllTenants)?;
    }
    let after = keyset_after(
        input.after.as_deref(),
        GRANT_PREFIX,
        "reservationGrants.list",
    )?;
    let filter = GrantFilter {
        tenant_id: (!input.all).then(|| call.tenant().to_owned()),
        account_id: input.account_id,
        reservation_id: input.reservation_id,
        states: input
            .states
            .map(|states| states.iter().filter_map(|s| GrantState::parse(s)).collect()),
        active_at: input.active_at,
    };
    let (mut conn, now) = call.conn_now().await?;
    let page = storage::db::read_only(&mut conn, async |conn| {
        grants::list(conn, &filter, after, input.limit, now).await
    })
    .await?;
    Ok(Page::of(page, GRANT_PREFIX))
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
