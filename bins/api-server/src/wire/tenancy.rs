//! Tenants, their projects and API keys.

use schemars::JsonSchema;
use serde::Serialize;
use storage::ops::tenancy;

use super::Millis;

/// A tenant.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Tenant {
    /// The tenant's chosen name.
    pub tenant_id: String,
    /// Display name.
    pub display_name: String,
    /// Lifecycle state.
    #[schemars(extend("enum" = ["active", "deleted"]))]
    pub state: &'static str,
    /// Creation instant.
    pub created_at: Millis,
    /// Deletion instant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleted_at: Option<Millis>,
}

impl From<tenancy::Tenant> for Tenant {
    fn from(t: tenancy::Tenant) -> Tenant {
        Tenant {
            tenant_id: t.tenant_id,
            display_name: t.display_name,
            state: t.state.as_str(),
            created_at: t.created_at,
            deleted_at: t.deleted_at,
        }
    }
}

/// A project of a tenant.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Project {
    /// `prj_...`
    pub project_id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// Name.
    pub name: String,
    /// Creation instant.
    pub created_at: Millis,
}

impl From<tenancy::Project> for Project {
    fn from(p: tenancy::Project) -> Project {
        Project {
            project_id: p.project_id,
            tenant_id: p.tenant_id,
            name: p.name,
            created_at: p.created_at,
        }
    }
}

/// An API key (never its secret).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKey {
    /// `key_...`
    pub key_id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// Name.
    pub name: String,
    /// The key's role.
    #[schemars(extend("enum" = ["admin", "provider-admin", "member", "viewer"]))]
    pub role: String,
    /// The one provider account the key is limited to, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    /// Creation instant.
    pub created_at: Millis,
    /// Revocation instant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<Millis>,
}

impl From<tenancy::ApiKey> for ApiKey {
    fn from(k: tenancy::ApiKey) -> ApiKey {
        ApiKey {
            key_id: k.key_id,
            tenant_id: k.tenant_id,
            name: k.name,
            role: k.role,
            account_id: k.account_id,
            created_at: k.created_at,
            revoked_at: k.revoked_at,
        }
    }
}

/// A newly issued key with its secret, shown once.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IssuedKey {
    /// The key.
    pub api_key: ApiKey,
    /// The secret (`bck_...`); the server keeps only its hash.
    pub secret: String,
}

impl From<tenancy::IssuedKey> for IssuedKey {
    fn from(k: tenancy::IssuedKey) -> IssuedKey {
        IssuedKey {
            api_key: k.api_key.into(),
            secret: k.secret,
        }
    }
}

/// `tenants.create`: the tenant and its first admin key.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedTenant {
    /// The tenant.
    pub tenant: Tenant,
    /// Its first admin key, with the secret shown once.
    pub admin_key: IssuedKey,
}

replies! {
    /// `{ "tenant": Tenant }`
    TenantReply { tenant: Tenant as "tenant" }
    /// `{ "project": Project }`
    ProjectReply { project: Project as "project" }
    /// `{ "apiKey": ApiKey }`
    ApiKeyReply { api_key: ApiKey as "apiKey" }
}
