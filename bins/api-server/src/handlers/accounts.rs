//! providerAccounts (the vps module).

use control::scans;
use iam_check::{Permission, TenantRule};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use storage::ops::accounts::{self, NewAccount};
use storage::ops::reservations;

use super::VPS;
use super::examples::{ACCOUNT, KEY, POOL, RESERVATION};
use crate::error::{ApiError, Code};
use crate::registry::{Call, Kind, Method, endpoint};
use crate::schema::{IDEMPOTENCY_KEY, NAME, TenantOnly, checked_by_handler};
use crate::wire::{self, AccountDeleted, AccountReply, Items, ReservationReply};
use storage::ids::{AccountId, PoolId, ReservationId};

fn method(
    method: &'static str,
    kind: Kind,
    permission: Permission,
    summary: &'static str,
    endpoint: crate::registry::Endpoint,
) -> Method {
    VPS.method(
        "providerAccounts",
        method,
        kind,
        permission,
        summary,
        endpoint,
    )
    .example(json!({ "tenantId": "acme", "accountId": ACCOUNT }))
}

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    vec![
        method(
            "create",
            Kind::Mutation,
            Permission::IamManage,
            "Connects a provider account; config holds secret references, never secret values.",
            endpoint(create),
        )
        .errors(&[Code::Conflict, Code::QuotaExceeded])
        .example(json!({
            "tenantId": "acme",
            "name": "acme capacity",
            "provider": "gce",
            "config": {
                "project": "acme-capacity",
                "credentials": "env:GCE_TOKEN",
            },
            "idempotencyKey": KEY,
        })),
        method(
            "get",
            Kind::Read,
            Permission::ProvidersRead,
            "Returns a provider account of the tenant.",
            endpoint(get),
        ),
        method(
            "list",
            Kind::Read,
            Permission::ProvidersRead,
            "Lists the tenant's provider accounts, newest first.",
            endpoint(list),
        )
        .errors(&[])
        .example(json!({ "tenantId": "acme" })),
    ]
}

/// `providerAccounts.create`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Create {
    #[schemars(length(min = 1, max = 128), regex(pattern = NAME))]
    name: String,
    #[schemars(extend("enum" = ["gce"]))]
    provider: String,
    #[schemars(schema_with = "gce_config_schema")]
    config: Map<String, Value>,
    #[schemars(length(min = 1, max = 128), regex(pattern = IDEMPOTENCY_KEY))]
    idempotency_key: String,
}

/// The documented shape of a `gce` account's config (`GceConfig` decides).
fn gce_config_schema(_: &mut SchemaGenerator) -> Schema {
    checked_by_handler(json!({
        "type": "object",
        "required": ["project", "credentials"],
        "additionalProperties": false,
        "properties": {
            "project": {
                "type": "string",
                "description": "The GCE project id.",
                "minLength": 6,
                "maxLength": 30,
                "pattern": "^[a-z][a-z0-9-]{4,28}[a-z0-9]$",
            },
            "endpoint": {
                "type": "string",
                "description": "Compute API base URL (only those the server's policy lists).",
                "format": "uri",
            },
            "credentials": {
                "type": "string",
                "description": "A credential reference, never a secret: none, env:NAME, \
                    file:NAME, secret:NAME or adc (only those the server's policy allows the \
                    account's owner).",
                "pattern": "^(none|adc|env:[A-Z_][A-Z0-9_]{0,127}|secret:[a-z][a-z0-9-]{0,62}\
                    |file:/[^\\s]{1,4095})$",
            },
        },
    }))
}

async fn create(call: Call, input: Create) -> Result<AccountReply, ApiError> {
    let config = control::accounts::checked_config(
        &Value::Object(input.config),
        call.tenant().as_str(),
        call.root().as_str(),
        &call.app.provider_policy,
    )
    .map_err(|refusal| {
        let e = refusal.error();
        ApiError::invalid(&e.field, e.reason.as_str(), refusal.to_string())
    })?;
    let hash = call.request_hash();
    let key = call.keyed(&input.idempotency_key, &hash);
    let new = NewAccount {
        tenant_id: call.tenant().as_str(),
        name: &input.name,
        provider: &input.provider,
        config: &config,
        // The root tenant is not limited (contract 1.7).
        max_accounts: (call.tenant() != call.root()).then_some(call.app.max_accounts_per_tenant),
    };
    let (mut conn, now) = call.conn_now().await?;
    let created = accounts::create(&mut conn, new, key, now).await?;
    Ok(call.created(created).into())
}

/// A method on one provider account.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct AccountRef {
    account_id: AccountId,
}

async fn get(call: Call, input: AccountRef) -> Result<AccountReply, ApiError> {
    let mut conn = call.conn().await?;
    Ok(storage::db::read_only(&mut conn, async |conn| {
        accounts::get(conn, call.tenant(), &input.account_id).await
    })
    .await?
    .into())
}

async fn list(call: Call, _: TenantOnly) -> Result<Items<wire::Account>, ApiError> {
    let mut conn = call.conn().await?;
    Ok(Items::of(
        storage::db::read_only(&mut conn, async |conn| {
            accounts::list(conn, call.tenant()).await
        })
        .await?,
    ))
}

/// The methods that act on an account's reservations and lifecycle.
pub fn reservation_methods() -> Vec<Method> {
    let on_reservation = json!({
        "tenantId": "root",
        "accountId": ACCOUNT,
        "reservationId": RESERVATION,
    });
    vec![
        method(
            "listReservations",
            Kind::Read,
            Permission::ProvidersRead,
            "Lists the reservations the account's scans have seen.",
            endpoint(list_reservations),
        ),
        method(
            "scan",
            Kind::Mutation,
            Permission::ProvidersManage,
            "Scans the account's reservations at the provider now (the vps.reservations pass for \
             one account).",
            endpoint(scan),
        )
        .errors(&[Code::NotFound, Code::InvalidState, Code::QuotaExceeded]),
        // The reservations that serve pools are the platform's: only the
        // root tenant binds, and so only reservations of its accounts.
        method(
            "bindReservation",
            Kind::Mutation,
            Permission::ProvidersManage,
            "Binds a reservation of a root account to a pool of the same region offering its \
             flavor (root only).",
            endpoint(bind),
        )
        .tenant_rule(TenantRule::RootOnly)
        .errors(&[Code::NotFound, Code::Conflict, Code::InvalidState])
        .example(json!({
            "tenantId": "root",
            "accountId": ACCOUNT,
            "reservationId": RESERVATION,
            "poolId": POOL,
        })),
        method(
            "unbindReservation",
            Kind::Mutation,
            Permission::ProvidersManage,
            "Unbinds a reservation from its pool; refused while grants on it are scheduled or \
             active.",
            endpoint(unbind),
        )
        .errors(&[Code::NotFound, Code::InvalidState])
        .example(on_reservation),
        method(
            "delete",
            Kind::Mutation,
            Permission::ProvidersManage,
            "Deletes the account once its grants are over and fully metered.",
            endpoint(delete),
        )
        .errors(&[Code::NotFound, Code::InvalidState]),
    ]
}

async fn list_reservations(
    call: Call,
    input: AccountRef,
) -> Result<Items<wire::Reservation>, ApiError> {
    let (mut conn, now) = call.conn_now().await?;
    Ok(Items::of(
        storage::db::read_only(&mut conn, async |conn| {
            reservations::list(conn, call.tenant(), &input.account_id, now).await
        })
        .await?,
    ))
}

async fn scan(call: Call, input: AccountRef) -> Result<Items<wire::Reservation>, ApiError> {
    // A tenant looping on a slow account holds at most a few of the
    // server's tasks and connections (contract 1.7).
    let max = crate::gate::MAX_SCANS_PER_TENANT;
    let _permit = call
        .app
        .scans
        .enter(call.tenant().as_str(), max)
        .map_err(|used| {
            ApiError::new(
                Code::QuotaExceeded,
                format!(
                    "at most {max} scans of one tenant run at once; retry when one has answered"
                ),
            )
            .with("resource", "concurrentScans")
            .with("max", max)
            .with("used", used)
            .with("requested", 1)
        })?;
    // The listing may take up to the scan's limit: hold no connection.
    call.release_conn();
    let (outcome, found) = scans::scan(
        &call.app.pool,
        call.app.clock,
        call.root(),
        scans::ExplicitScan {
            tenant: call.tenant(),
            account_id: &input.account_id,
            limit: Some(call.app.scan_timeout),
        },
        call.app.providers.as_ref(),
        &call.app.keyring,
    )
    .await?;
    tracing::info!(account = %input.account_id, ?outcome, "scan applied");
    Ok(Items::of(found))
}

/// `providerAccounts.bindReservation`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Bind {
    account_id: AccountId,
    reservation_id: ReservationId,
    pool_id: PoolId,
}

async fn bind(call: Call, input: Bind) -> Result<ReservationReply, ApiError> {
    let (mut conn, now) = call.conn_now().await?;
    let bound = reservations::bind(
        &mut conn,
        call.root(),
        &input.account_id,
        &input.reservation_id,
        &input.pool_id,
        now,
    )
    .await?;
    Ok(bound.into())
}

/// `providerAccounts.unbindReservation`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Unbind {
    account_id: AccountId,
    reservation_id: ReservationId,
}

async fn unbind(call: Call, input: Unbind) -> Result<ReservationReply, ApiError> {
    let (mut conn, now) = call.conn_now().await?;
    let unbound = reservations::unbind(
        &mut conn,
        call.tenant(),
        &input.account_id,
        &input.reservation_id,
        now,
    )
    .await?;
    Ok(unbound.into())
}

async fn delete(call: Call, input: AccountRef) -> Result<AccountDeleted, ApiError> {
    let (mut conn, now) = call.conn_now().await?;
    accounts::delete_account(&mut conn, call.tenant(), &input.account_id, now).await?;
    Ok(AccountDeleted {
        account_id: input.account_id.into(),
        deleted: true,
    })
}
