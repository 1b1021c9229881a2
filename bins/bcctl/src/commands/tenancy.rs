//! `bcctl tenants`, `keys` and `projects` (the tenancy methods).

use clap::Subcommand;
use serde_json::json;

use super::{Ctx, opt};
use crate::exit::Failure;
use crate::output::{text, time};

/// `bcctl tenants`.
#[derive(Debug, Subcommand)]
pub enum Tenants {
    /// List tenants.
    #[command(after_help = "Example:\n  bcctl tenants list")]
    List,
    /// Create a tenant; prints its first admin key's secret once.
    #[command(after_help = "Example:\n  bcctl tenants create acme --display-name \"Acme Corp\"")]
    Create {
        /// Its name (its id).
        name: String,
        /// A display name.
        #[arg(long)]
        display_name: Option<String>,
    },
    /// Delete a tenant (its grants end, its instances go).
    #[command(after_help = "Example:\n  bcctl tenants delete acme")]
    Delete {
        /// The tenant.
        tenant_id: String,
    },
}

/// `bcctl keys`.
#[derive(Debug, Subcommand)]
pub enum Keys {
    /// List keys.
    #[command(after_help = "Example:\n  bcctl keys list")]
    List,
    /// Create a key; prints its secret once.
    #[command(after_help = "Example:\n  bcctl --tenant acme keys create --role viewer --name ci")]
    Create {
        /// `admin`, `member`, `viewer`, ...
        #[arg(long)]
        role: String,
        /// Its name.
        #[arg(long, default_value = "bcctl")]
        name: String,
        /// Limit it to one provider account.
        #[arg(long)]
        account: Option<String>,
    },
    /// Revoke a key.
    #[command(after_help = "Example:\n  bcctl keys revoke key_01...")]
    Revoke {
        /// The key.
        key_id: String,
    },
}

/// `bcctl projects`.
#[derive(Debug, Subcommand)]
pub enum Projects {
    /// List projects.
    #[command(after_help = "Example:\n  bcctl --tenant acme projects list")]
    List,
    /// Create a project.
    #[command(after_help = "Example:\n  bcctl --tenant acme projects create web")]
    Create {
        /// Its name.
        name: String,
    },
}

pub(super) async fn tenants(ctx: &Ctx, t: Tenants) -> Result<(), Failure> {
    match t {
        Tenants::List => {
            let a = ctx.call("tenants.list", json!({})).await?;
            ctx.list(
                &a,
                &[
                    text("TENANT", "tenantId"),
                    text("NAME", "displayName"),
                    text("STATE", "state"),
                    time("CREATED", "createdAt"),
                ],
            );
        }
        Tenants::Create { name, display_name } => {
            let mut body = json!({ "name": name });
            opt(&mut body, "displayName", display_name);
            let a = ctx.call("tenants.create", body).await?;
            // The admin key's secret is shown once: it is the answer.
            ctx.id(&a, "adminKey.secret");
        }
        Tenants::Delete { tenant_id } => {
            ctx.call_quiet("tenants.delete", json!({ "targetTenantId": tenant_id }))
                .await?;
        }
    }
    Ok(())
}

pub(super) async fn keys(ctx: &Ctx, k: Keys) -> Result<(), Failure> {
    match k {
        Keys::List => {
            let a = ctx.call("apiKeys.list", json!({})).await?;
            ctx.list(
                &a,
                &[
                    text("KEY", "keyId"),
                    text("NAME", "name"),
                    text("ROLE", "role"),
                    text("ACCOUNT", "accountId"),
                    time("CREATED", "createdAt"),
                    time("REVOKED", "revokedAt"),
                ],
            );
        }
        Keys::Create {
            role,
            name,
            account,
        } => {
            let mut body = json!({ "role": role, "name": name });
            opt(&mut body, "accountId", account);
            let a = ctx.call("apiKeys.create", body).await?;
            ctx.id(&a, "secret");
        }
        Keys::Revoke { key_id } => {
            ctx.call_quiet("apiKeys.revoke", json!({ "keyId": key_id }))
                .await?;
        }
    }
    Ok(())
}

pub(super) async fn projects(ctx: &Ctx, p: Projects) -> Result<(), Failure> {
    match p {
        Projects::List => {
            let a = ctx.call("projects.list", json!({})).await?;
            ctx.list(
                &a,
                &[
                    text("PROJECT", "projectId"),
                    text("NAME", "name"),
                    time("CREATED", "createdAt"),
                ],
            );
        }
        Projects::Create { name } => {
            let a = ctx.call("projects.create", json!({ "name": name })).await?;
            ctx.id(&a, "project.projectId");
        }
    }
    Ok(())
}
