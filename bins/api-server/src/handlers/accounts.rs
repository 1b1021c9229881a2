//! providerAccounts (the vps module).

use iam_check::{Permission, TenantRule};
use providers::gce::GceConfig;
use providers::policy::AccountOwner;
use serde::Deserialize;
use serde_json::Value;
use storage::Error;
use storage::accounts::{self, NewAccount};
use storage::idempotency::KeyedRequest;
use storage::reservations;

use super::{items, one};
use crate::registry::{Call, Kind, Method, Reply, handler};
use crate::schema::{Ty, idem_key, name, req, reservation_id, tenant_id, typeid};

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    let m = |method, kind, permission, summary, fields: Vec<_>, handler| Method {
        module: "providerAccounts",
        method,
        service_module: "vps",
        kind,
        permission,
        tenant_rule: TenantRule::Acting,
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
            Permission::IamManage,
            "Connects a provider account; config holds secret references, never secret values.",
            vec![
                req("tenantId", tenant_id()),
                req("name", name()),
                req("provider", Ty::Enum(&["gce"])),
                req("config", Ty::AnyObject),
                req("idempotencyKey", idem_key()),
            ],
            handler!(create),
        ),
        m(
            "get",
            Kind::Read,
            Permission::ProvidersRead,
            "Returns a provider account of the tenant.",
            vec![
                req("tenantId", tenant_id()),
                req("accountId", typeid("pacct")),
            ],
            handler!(get),
        ),
        m(
            "list",
            Kind::Read,
            Permission::ProvidersRead,
            "Lists the tenant's provider accounts, newest first.",
            vec![req("tenantId", tenant_id())],
            handler!(list),
        ),
    ]
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Create {
    name: String,
    provider: String,
    config: Value,
    idempotency_key: String,
}

async fn create(call: Call) -> Result<Reply, Error> {
    let input: Create = call.parse()?;
    let config = GceConfig::from_json(&input.config).map_err(|e| {
        Error::invalid(
            &e.field,
            e.reason.as_str(),
            format!("invalid provider config: {e}"),
        )
    })?;
    // Tenants are not trusted: what the account may reach depends on whose
    // it is (contract 3.5). Checked again at every use.
    let owner = AccountOwner::of(call.tenant(), call.root());
    call.app
        .provider_policy
        .check(&config, owner)
        .map_err(|e| {
            Error::invalid(
                &e.field,
                e.reason.as_str(),
                format!("provider config not allowed: {e}"),
            )
        })?;
    let config = config.to_json();
    let hash = call.request_hash();
    let key = KeyedRequest {
        tenant_id: call.tenant(),
        method: &call.name,
        key: &input.idempotency_key,
        request_hash: &hash,
    };
    let new = NewAccount {
        tenant_id: call.tenant(),
        name: &input.name,
        provider: &input.provider,
        config: &config,
    };
    let (mut conn, now) = call.conn_now().await?;
    one(
        "account",
        &accounts::create(&mut conn, new, key, now).await?,
    )
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AccountRef {
    account_id: String,
}

async fn get(call: Call) -> Result<Reply, Error> {
    let input: AccountRef = call.parse()?;
    let mut conn = call.app.conn().await?;
    one(
        "account",
        &accounts::get(&mut conn, call.tenant(), &input.account_id).await?,
    )
}

async fn list(call: Call) -> Result<Reply, Error> {
    let mut conn = call.app.conn().await?;
    items(&accounts::list(&mut conn, call.tenant()).await?)
}

/// The methods that act on an account's reservations and lifecycle.
pub fn reservation_methods() -> Vec<Method> {
    let m = |method, kind, permission, summary, fields: Vec<_>, handler| Method {
        module: "providerAccounts",
        method,
        service_module: "vps",
        kind,
        permission,
        tenant_rule: TenantRule::Acting,
        phase: "v1.0",
        status: "registered",
        summary,
        fields,
        handler,
    };
    let account = || {
        vec![
            req("tenantId", tenant_id()),
            req("accountId", typeid("pacct")),
        ]
    };
    let with = |mut base: Vec<crate::schema::Field>, extra: Vec<crate::schema::Field>| {
        base.extend(extra);
        base
    };
    vec![
        m(
            "listReservations",
            Kind::Read,
            Permission::ProvidersRead,
            "Lists the reservations the account's scans have seen.",
            account(),
            handler!(list_reservations),
        ),
        m(
            "scan",
            Kind::Mutation,
            Permission::ProvidersManage,
            "Scans the account's reservations at the provider now (the vps.reservations pass for \
             one account).",
            account(),
            handler!(scan),
        ),
        Method {
            // The reservations that serve pools are the platform's: only the
            // root tenant binds, and so only reservations of its accounts.
            tenant_rule: TenantRule::RootOnly,
            ..m(
                "bindReservation",
                Kind::Mutation,
                Permission::ProvidersManage,
                "Binds a reservation of a root account to a pool of the same region offering its \
                 flavor (root only).",
                with(
                    account(),
                    vec![
                        req("reservationId", reservation_id()),
                        req("poolId", typeid("pool")),
                    ],
                ),
                handler!(bind),
            )
        },
        m(
            "unbindReservation",
            Kind::Mutation,
            Permission::ProvidersManage,
            "Unbinds a reservation from its pool; refused while grants on it are scheduled or \
             active.",
            with(account(), vec![req("reservationId", reservation_id())]),
            handler!(unbind),
        ),
        m(
            "delete",
            Kind::Mutation,
            Permission::ProvidersManage,
            "Deletes the account once its grants are over and fully metered.",
            account(),
            handler!(delete),
        ),
    ]
}

async fn list_reservations(call: Call) -> Result<Reply, Error> {
    let input: AccountRef = call.parse()?;
    let mut conn = call.app.conn().await?;
    items(&reservations::list(&mut conn, call.tenant(), &input.account_id).await?)
}

async fn scan(call: Call) -> Result<Reply, Error> {
    let input: AccountRef = call.parse()?;
    let (outcome, found) = reservations::scan(
        &call.app.pool,
        call.app.clock,
        call.root(),
        call.tenant(),
        &input.account_id,
        call.app.providers.as_ref(),
    )
    .await?;
    tracing::info!(account = %input.account_id, ?outcome, "scan applied");
    items(&found)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Bind {
    account_id: String,
    reservation_id: String,
    pool_id: Option<String>,
}

async fn bind(call: Call) -> Result<Reply, Error> {
    let input: Bind = call.parse()?;
    let mut conn = call.app.conn().await?;
    let pool_id = input.pool_id.unwrap_or_default();
    one(
        "reservation",
        &reservations::bind(
            &mut conn,
            call.root(),
            &input.account_id,
            &input.reservation_id,
            &pool_id,
        )
        .await?,
    )
}

async fn unbind(call: Call) -> Result<Reply, Error> {
    let input: Bind = call.parse()?;
    let (mut conn, now) = call.conn_now().await?;
    one(
        "reservation",
        &reservations::unbind(
            &mut conn,
            call.tenant(),
            &input.account_id,
            &input.reservation_id,
            now,
        )
        .await?,
    )
}

async fn delete(call: Call) -> Result<Value, Error> {
    let input: AccountRef = call.parse()?;
    let (mut conn, now) = call.conn_now().await?;
    reservations::delete_account(&mut conn, call.tenant(), &input.account_id, now).await?;
    Ok(serde_json::json!({ "accountId": input.account_id, "deleted": true }))
}
