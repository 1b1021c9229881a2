//! The API methods the tests call again and again with the same body, one
//! function each, so that a call reads as one line: who calls, acting in
//! which tenant, on what. Each returns the [`Answer`] for the test to check.

use serde_json::{Value, json};

use super::server::{Answer, Server};

/// POSTs `{ "tenantId": tenant, ..fields }` to `path` with `token`.
async fn acting(s: &Server, token: &str, tenant: &str, path: &str, fields: Value) -> Answer {
    let mut body = json!({ "tenantId": tenant });
    for (k, v) in fields.as_object().expect("fields") {
        body[k] = v.clone();
    }
    s.call(token, path, body).await
}

// Provider accounts.

/// `providerAccounts.get`.
pub async fn get_account(s: &Server, token: &str, tenant: &str, account: &str) -> Answer {
    let fields = json!({ "accountId": account });
    acting(s, token, tenant, "providerAccounts/get", fields).await
}

/// `providerAccounts.list`.
pub async fn list_accounts(s: &Server, token: &str, tenant: &str) -> Answer {
    acting(s, token, tenant, "providerAccounts/list", json!({})).await
}

/// `providerAccounts.listReservations`.
pub async fn list_reservations_as(s: &Server, token: &str, tenant: &str, account: &str) -> Answer {
    let fields = json!({ "accountId": account });
    acting(
        s,
        token,
        tenant,
        "providerAccounts/listReservations",
        fields,
    )
    .await
}

/// `providerAccounts.scan`.
pub async fn scan_as(s: &Server, token: &str, tenant: &str, account: &str) -> Answer {
    let fields = json!({ "accountId": account });
    acting(s, token, tenant, "providerAccounts/scan", fields).await
}

// Pools and quotas.

/// `pools.get`.
pub async fn get_pool(s: &Server, token: &str, tenant: &str, pool: &str) -> Answer {
    acting(s, token, tenant, "pools/get", json!({ "poolId": pool })).await
}

/// `pools.list`.
pub async fn list_pools(s: &Server, token: &str, tenant: &str) -> Answer {
    acting(s, token, tenant, "pools/list", json!({})).await
}

/// `quotas.get`: the rows of `pool`, or of every pool.
pub async fn get_quotas(s: &Server, token: &str, tenant: &str, pool: Option<&str>) -> Answer {
    let fields = match pool {
        Some(p) => json!({ "poolId": p }),
        None => json!({}),
    };
    acting(s, token, tenant, "quotas/get", fields).await
}

// Tenancy: tenants, projects, keys and secrets.

/// `tenants.delete` of `tenant`, by root.
pub async fn delete_tenant(s: &Server, tenant: &str) -> Answer {
    let body = json!({ "targetTenantId": tenant });
    s.root("tenants/delete", body).await
}

/// `projects.create`.
pub async fn create_project(s: &Server, token: &str, tenant: &str, name: &str) -> Answer {
    acting(s, token, tenant, "projects/create", json!({ "name": name })).await
}

/// `projects.list`.
pub async fn list_projects(s: &Server, token: &str, tenant: &str) -> Answer {
    acting(s, token, tenant, "projects/list", json!({})).await
}

/// `apiKeys.list`.
pub async fn list_keys(s: &Server, token: &str, tenant: &str) -> Answer {
    acting(s, token, tenant, "apiKeys/list", json!({})).await
}

/// `apiKeys.revoke`.
pub async fn revoke_key(s: &Server, token: &str, tenant: &str, key: &str) -> Answer {
    acting(s, token, tenant, "apiKeys/revoke", json!({ "keyId": key })).await
}

/// `secrets.put`.
pub async fn put_secret(s: &Server, token: &str, tenant: &str, name: &str, value: &str) -> Answer {
    let fields = json!({ "name": name, "value": value });
    acting(s, token, tenant, "secrets/put", fields).await
}

/// `secrets.list`.
pub async fn list_secrets(s: &Server, token: &str, tenant: &str) -> Answer {
    acting(s, token, tenant, "secrets/list", json!({})).await
}

/// `secrets.delete`.
pub async fn delete_secret(s: &Server, token: &str, tenant: &str, name: &str) -> Answer {
    acting(s, token, tenant, "secrets/delete", json!({ "name": name })).await
}

// Reservation grants.

/// `reservationGrants.end` of a grant on `account`.
pub async fn end_grant_as(
    s: &Server,
    token: &str,
    tenant: &str,
    account: &str,
    grant: &str,
) -> Answer {
    let fields = json!({ "accountId": account, "grantId": grant });
    acting(s, token, tenant, "reservationGrants/end", fields).await
}
