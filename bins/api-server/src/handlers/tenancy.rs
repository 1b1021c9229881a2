//! tenants, projects and apiKeys.

use iam_check::{Permission, Role};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use storage::ops::tenancy;

use super::IAM;
use super::examples::{ACCOUNT, API_KEY};
use crate::error::{ApiError, Code};
use crate::registry::{Call, Kind, Method, endpoint};
use crate::schema::{NAME, TenantOnly};
use crate::wire::{self, ApiKeyReply, CreatedTenant, IssuedKey, Items, ProjectReply, TenantReply};
use storage::ids::{AccountId, KeyId, TenantId};

const ROLES: &[&str] = &["admin", "provider-admin", "member", "viewer"];

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    vec![
        IAM.method(
            "tenants",
            "create",
            Kind::Mutation,
            Permission::TenantsManage,
            "Creates a tenant and returns its first admin key (secret shown once).",
            endpoint(create_tenant),
        )
        .errors(&[Code::Conflict])
        .example(json!({ "tenantId": "root", "name": "acme", "displayName": "Acme Corp" })),
        IAM.method(
            "tenants",
            "delete",
            Kind::Mutation,
            Permission::TenantsManage,
            "Deletes a tenant: its keys stop working.",
            endpoint(delete_tenant),
        )
        .errors(&[Code::NotFound, Code::InvalidState])
        .example(json!({ "tenantId": "root", "targetTenantId": "acme" })),
        IAM.method(
            "tenants",
            "list",
            Kind::Read,
            Permission::TenantsManage,
            "Lists every tenant, newest first.",
            endpoint(list_tenants),
        )
        .example(json!({ "tenantId": "root" })),
        IAM.method(
            "projects",
            "create",
            Kind::Mutation,
            Permission::InstancesManage,
            "Creates a project of the tenant.",
            endpoint(create_project),
        )
        .errors(&[Code::Conflict])
        .example(json!({ "tenantId": "acme", "name": "web" })),
        IAM.method(
            "projects",
            "list",
            Kind::Read,
            Permission::InstancesManage,
            "Lists the tenant's projects, newest first.",
            endpoint(list_projects),
        ),
        IAM.method(
            "apiKeys",
            "create",
            Kind::Mutation,
            Permission::IamManage,
            "Creates an API key (secret shown once), optionally limited to one provider account.",
            endpoint(create_key),
        )
        .errors(&[Code::NotFound])
        .example(json!({
            "tenantId": "acme",
            "name": "ci deploys",
            "role": "provider-admin",
            "accountId": ACCOUNT,
        })),
        IAM.method(
            "apiKeys",
            "list",
            Kind::Read,
            Permission::IamManage,
            "Lists the tenant's API keys (never their secrets).",
            endpoint(list_keys),
        ),
        IAM.method(
            "apiKeys",
            "revoke",
            Kind::Mutation,
            Permission::IamManage,
            "Revokes an API key; it is refused from its next request.",
            endpoint(revoke_key),
        )
        .errors(&[Code::NotFound])
        .example(json!({ "tenantId": "acme", "keyId": API_KEY })),
    ]
}

/// `tenants.create`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CreateTenant {
    name: TenantId,
    #[schemars(length(min = 1, max = 128), regex(pattern = NAME))]
    display_name: Option<String>,
}

async fn create_tenant(call: Call, input: CreateTenant) -> Result<CreatedTenant, ApiError> {
    let (mut conn, now) = call.conn_now().await?;
    let (tenant, key) =
        tenancy::create_tenant(&mut conn, &input.name, input.display_name.as_deref(), now).await?;
    tracing::info!(tenant = %tenant.tenant_id, "tenant created");
    Ok(CreatedTenant {
        tenant: tenant.into(),
        admin_key: key.into(),
    })
}

/// `tenants.delete`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DeleteTenant {
    target_tenant_id: TenantId,
}

async fn delete_tenant(call: Call, input: DeleteTenant) -> Result<TenantReply, ApiError> {
    let (mut conn, now) = call.conn_now().await?;
    let tenant = storage::ops::lifecycle::delete_tenant(
        &mut conn,
        call.root(),
        &input.target_tenant_id,
        now,
    )
    .await?;
    Ok(tenant.into())
}

async fn list_tenants(call: Call, _: TenantOnly) -> Result<Items<wire::Tenant>, ApiError> {
    let mut conn = call.conn().await?;
    Ok(Items::of(
        storage::db::read_only(&mut conn, async |conn| tenancy::list_tenants(conn).await).await?,
    ))
}

/// `projects.create`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CreateProject {
    #[schemars(length(min = 1, max = 128), regex(pattern = NAME))]
    name: String,
}

async fn create_project(call: Call, input: CreateProject) -> Result<ProjectReply, ApiError> {
    let (mut conn, now) = call.conn_now().await?;
    Ok(
        tenancy::create_project(&mut conn, call.tenant(), &input.name, now)
            .await?
            .into(),
    )
}

async fn list_projects(call: Call, _: TenantOnly) -> Result<Items<wire::Project>, ApiError> {
    let mut conn = call.conn().await?;
    Ok(Items::of(
        storage::db::read_only(&mut conn, async |conn| {
            tenancy::list_projects(conn, call.tenant()).await
        })
        .await?,
    ))
}

/// `apiKeys.create`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CreateKey {
    #[schemars(length(min = 1, max = 128), regex(pattern = NAME))]
    name: String,
    #[schemars(extend("enum" = ROLES))]
    role: String,
    account_id: Option<AccountId>,
}

async fn create_key(call: Call, input: CreateKey) -> Result<IssuedKey, ApiError> {
    let role = Role::parse(&input.role)
        .ok_or_else(|| ApiError::invalid("role", "enum", "unknown role"))?;
    let (mut conn, now) = call.conn_now().await?;
    let issued = tenancy::create_key(
        &mut conn,
        call.tenant(),
        &input.name,
        role,
        input.account_id.as_ref(),
        now,
    )
    .await?;
    Ok(issued.into())
}

async fn list_keys(call: Call, _: TenantOnly) -> Result<Items<wire::ApiKey>, ApiError> {
    let mut conn = call.conn().await?;
    Ok(Items::of(
        storage::db::read_only(&mut conn, async |conn| {
            tenancy::list_keys(conn, call.tenant()).await
        })
        .await?,
    ))
}

/// `apiKeys.revoke`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RevokeKey {
    key_id: KeyId,
}

async fn revoke_key(call: Call, input: RevokeKey) -> Result<ApiKeyReply, ApiError> {
    let (mut conn, now) = call.conn_now().await?;
    Ok(storage::db::single_write(&mut conn, async |conn| {
        tenancy::revoke_key(conn, call.tenant(), &input.key_id, now).await
    })
    .await?
    .into())
}
