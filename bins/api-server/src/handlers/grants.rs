//! reservationGrants (the vps module).

use grants_core::GrantState;
use iam_check::{Permission, RootOption, TenantRule};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use storage::LIST_LIMIT;
use storage::model::grant::GrantFilter;
use storage::ops::grants::{self, GRANT_PREFIX, NewGrant};

use super::VPS;
use super::examples::{ACCOUNT, GRANT, KEY, PROJECT, RESERVATION, T0, T1};
use crate::error::{ApiError, Code};
use crate::registry::{Call, Kind, Method, endpoint};
use crate::schema::{IDEMPOTENCY_KEY, KEYSET_CURSOR, keyset_after};
use crate::wire::{self, GrantReply, Page, PreviewReply};
use storage::ids::{AccountId, GrantId, ProjectId, ReservationId, TenantId};

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
        VPS.method(
            "reservationGrants",
            "setLending",
            Kind::Mutation,
            Permission::GrantsLend,
            "Lets the grant's idle slots be lent to interruptible instances of other tenants, \
             taken back with the pool's notice whenever the grantee needs them, or stops \
             lending (interrupting every borrower). The grantee's admin keys and root.",
            endpoint(set_lending),
        )
        .errors(&[Code::NotFound, Code::InvalidState])
        .example(json!({ "tenantId": "acme", "grantId": GRANT, "lend": true })),
    ]
}

/// The terms of a grant: `reservationGrants.preview`, and `create`
/// without its idempotency key.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Terms {
    account_id: AccountId,
    reservation_id: ReservationId,
    grant_tenant_id: TenantId,
    project_id: Option<ProjectId>,
    #[schemars(range(min = 1, max = 100_000))]
    slots: i32,
    #[schemars(range(min = 0, max = i64::MAX))]
    starts_at: i64,
    #[schemars(range(min = 0, max = i64::MAX))]
    ends_at: i64,
}

impl Terms {
    fn new_grant(&self) -> NewGrant<'_> {
        NewGrant {
            account_id: self.account_id.as_str(),
            reservation_id: self.reservation_id.as_str(),
            grant_tenant_id: self.grant_tenant_id.as_str(),
            project_id: self.project_id.as_ref().map(AsRef::as_ref),
            slots: self.slots,
            starts_at: self.starts_at,
            ends_at: self.ends_at,
        }
    }
}

/// `reservationGrants.create`: the terms and an idempotency key.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Create {
    #[serde(flatten)]
    terms: Terms,
    #[schemars(length(min = 1, max = 128), regex(pattern = IDEMPOTENCY_KEY))]
    idempotency_key: String,
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

/// `reservationGrants.get`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct GrantRef {
    grant_id: GrantId,
}

async fn get(call: Call, input: GrantRef) -> Result<GrantReply, ApiError> {
    let (mut conn, now) = call.conn_now().await?;
    Ok(storage::db::read_only(&mut conn, async |conn| {
        grants::get(conn, &call.actor, &input.grant_id, now).await
    })
    .await?
    .into())
}

/// The grant states `reservationGrants.list` filters by.
const GRANT_STATES: &[&str] = &["scheduled", "active", "ended", "cancelled"];

/// `reservationGrants.list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct List {
    #[serde(default)]
    all: bool,
    reservation_id: Option<ReservationId>,
    account_id: Option<AccountId>,
    #[serde(default)]
    #[schemars(
        with = "Vec<String>",
        length(min = 1, max = 4),
        extend("items" = { "type": "string", "enum": GRANT_STATES }, "uniqueItems" = true)
    )]
    states: Option<Vec<String>>,
    #[schemars(range(min = 0, max = i64::MAX))]
    active_at: Option<i64>,
    #[schemars(length(min = 1, max = 40), regex(pattern = KEYSET_CURSOR))]
    after: Option<String>,
    #[serde(default = "crate::schema::list_limit")]
    #[schemars(range(min = 1, max = LIST_LIMIT))]
    limit: i64,
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
        tenant_id: (!input.all).then(|| call.tenant().to_string()),
        account_id: input.account_id.map(String::from),
        reservation_id: input.reservation_id.map(String::from),
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

/// `reservationGrants.end`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct End {
    account_id: AccountId,
    grant_id: GrantId,
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

/// `reservationGrants.setLending`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SetLending {
    grant_id: GrantId,
    lend: bool,
}

async fn set_lending(call: Call, input: SetLending) -> Result<GrantReply, ApiError> {
    let (mut conn, now) = call.conn_now().await?;
    let grant = storage::ops::lending::set_lending(
        &mut conn,
        &call.actor,
        &input.grant_id,
        input.lend,
        now,
    )
    .await?;
    Ok(grant.into())
}
