//! tenants, projects and apiKeys.

use iam_check::{Permission, Role, TenantRule};
use serde::Deserialize;
use serde_json::{Value, json};
use storage::{Error, tenancy};

use super::{items, one};
use crate::registry::{Call, Kind, Method, Reply, handler};
use crate::schema::{Ty, name, opt, req, tenant_id, typeid};

const ROLES: &[&str] = &["admin", "provider-admin", "member", "viewer"];

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    let m = |module, method, service_module, kind, permission, summary, fields: Vec<_>, handler| {
        Method {
            module,
            method,
            service_module,
            kind,
            permission,
            tenant_rule: TenantRule::Acting,
            phase: "v0.1",
            status: "registered",
            summary,
            fields,
            handler,
        }
    };
    vec![
        m(
            "tenants",
            "create",
            "iam",
            Kind::Mutation,
            Permission::TenantsManage,
            "Creates a tenant and returns its first admin key (secret shown once).",
            vec![
                req("tenantId", tenant_id()),
                req("name", tenant_id()),
                opt("displayName", name()),
            ],
            handler!(create_tenant),
        ),
        m(
            "tenants",
            "delete",
            "iam",
            Kind::Mutation,
            Permission::TenantsManage,
            "Deletes a tenant: its keys stop working.",
            vec![
                req("tenantId", tenant_id()),
                req("targetTenantId", tenant_id()),
            ],
            handler!(delete_tenant),
        ),
        m(
            "tenants",
            "list",
            "iam",
            Kind::Read,
            Permission::TenantsManage,
            "Lists every tenant, newest first.",
            vec![req("tenantId", tenant_id())],
            handler!(list_tenants),
        ),
        m(
            "projects",
            "create",
            "iam",
            Kind::Mutation,
            Permission::InstancesManage,
            "Creates a project of the tenant.",
            vec![req("tenantId", tenant_id()), req("name", name())],
            handler!(create_project),
        ),
        m(
            "projects",
            "list",
            "iam",
            Kind::Read,
            Permission::InstancesManage,
            "Lists the tenant's projects, newest first.",
            vec![req("tenantId", tenant_id())],
            handler!(list_projects),
        ),
        m(
            "apiKeys",
            "create",
            "iam",
            Kind::Mutation,
            Permission::IamManage,
            "Creates an API key (secret shown once), optionally limited to one provider account.",
            vec![
                req("tenantId", tenant_id()),
                req("name", name()),
                req("role", Ty::Enum(ROLES)),
                opt("accountId", typeid("pacct")),
            ],
            handler!(create_key),
        ),
        m(
            "apiKeys",
            "list",
            "iam",
            Kind::Read,
            Permission::IamManage,
            "Lists the tenant's API keys (never their secrets).",
            vec![req("tenantId", tenant_id())],
            handler!(list_keys),
        ),
        m(
            "apiKeys",
            "revoke",
            "iam",
            Kind::Mutation,
            Permission::IamManage,
            "Revokes an API key; it is refused from its next request.",
            vec![req("tenantId", tenant_id()), req("keyId", typeid("key"))],
            handler!(revoke_key),
        ),
    ]
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateTenant {
    name: String,
    display_name: Option<String>,
}

async fn create_tenant(call: Call) -> Result<Value, Error> {
    let input: CreateTenant = call.parse()?;
    let (mut conn, now) = call.conn_now().await?;
    let (tenant, key) =
        tenancy::create_tenant(&mut conn, &input.name, input.display_name.as_deref(), now).await?;
    tracing::info!(tenant = %tenant.tenant_id, "tenant created");
    Ok(json!({ "tenant": tenant, "adminKey": key }))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeleteTenant {
    target_tenant_id: String,
}

async fn delete_tenant(call: Call) -> Result<Reply, Error> {
    let input: DeleteTenant = call.parse()?;
    let (mut conn, now) = call.conn_now().await?;
    let tenant =
        storage::lifecycle::delete_tenant(&mut conn, call.root(), &input.target_tenant_id, now)
            .await?;
    one("tenant", &tenant)
}

async fn list_tenants(call: Call) -> Result<Reply, Error> {
    let mut conn = call.app.conn().await?;
    items(&tenancy::list_tenants(&mut conn).await?)
}

#[derive(Deserialize)]
struct Named {
    name: String,
}

async fn create_project(call: Call) -> Result<Reply, Error> {
    let input: Named = call.parse()?;
    let (mut conn, now) = call.conn_now().await?;
    one(
        "project",
        &tenancy::create_project(&mut conn, call.tenant(), &input.name, now).await?,
    )
}

async fn list_projects(call: Call) -> Result<Reply, Error> {
    let mut conn = call.app.conn().await?;
    items(&tenancy::list_projects(&mut conn, call.tenant()).await?)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateKey {
    name: String,
    role: String,
    account_id: Option<String>,
}

async fn create_key(call: Call) -> Result<Value, Error> {
    let input: CreateKey = call.parse()?;
    let role =
        Role::parse(&input.role).ok_or_else(|| Error::invalid("role", "enum", "unknown role"))?;
    let (mut conn, now) = call.conn_now().await?;
    let issued = tenancy::create_key(
        &mut conn,
        call.tenant(),
        &input.name,
        role,
        input.account_id.as_deref(),
        now,
    )
    .await?;
    Ok(serde_json::to_value(issued)?)
}

async fn list_keys(call: Call) -> Result<Reply, Error> {
    let mut conn = call.app.conn().await?;
    items(&tenancy::list_keys(&mut conn, call.tenant()).await?)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RevokeKey {
    key_id: String,
}

async fn revoke_key(call: Call) -> Result<Reply, Error> {
    let input: RevokeKey = call.parse()?;
    let (mut conn, now) = call.conn_now().await?;
    one(
        "apiKey",
        &tenancy::revoke_key(&mut conn, call.tenant(), &input.key_id, now).await?,
    )
}
