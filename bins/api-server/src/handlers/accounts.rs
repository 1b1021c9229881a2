//! providerAccounts (the vps module).

use iam_check::{Permission, TenantRule};
use providers::gce::GceConfig;
use serde::Deserialize;
use serde_json::Value;
use storage::Error;
use storage::accounts::{self, NewAccount};
use storage::idempotency::KeyedRequest;

use super::{items, one};
use crate::registry::{Call, Kind, Method, handler};
use crate::schema::{Ty, idem_key, name, req, tenant_id, typeid};

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

async fn create(call: Call) -> Result<Value, Error> {
    let input: Create = call.parse()?;
    let config = GceConfig::from_json(&input.config).map_err(|e| {
        Error::invalid(
            &e.field,
            e.reason.as_str(),
            format!("invalid provider config: {e}"),
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

async fn get(call: Call) -> Result<Value, Error> {
    let input: AccountRef = call.parse()?;
    let mut conn = call.app.conn().await?;
    one(
        "account",
        &accounts::get(&mut conn, call.tenant(), &input.account_id).await?,
    )
}

async fn list(call: Call) -> Result<Value, Error> {
    let mut conn = call.app.conn().await?;
    items(&accounts::list(&mut conn, call.tenant()).await?)
}
