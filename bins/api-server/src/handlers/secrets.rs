//! secrets (contract 3.9): a tenant's credentials for its provider accounts.
//! A value goes in once and never comes out: answers, logs, events and
//! errors carry its name, kind and fingerprint only.

use iam_check::Permission;
use providers::auth::{SecretProblem, classify_secret};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use storage::ops::secrets;

use super::IAM;
use crate::error::{ApiError, Code};
use crate::registry::{Call, Kind, Method, endpoint};
use crate::schema::TenantOnly;
use crate::wire::{Items, Secret, SecretDeleted, SecretReply};

/// The largest value, in bytes.
const MAX_VALUE_BYTES: usize = 16 * 1024;

/// Secret names (at most 63 characters).
const SECRET_NAME: &str = "^[a-z][a-z0-9-]{0,62}$";

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    vec![
        IAM.method(
            "secrets",
            "put",
            Kind::Mutation,
            Permission::IamManage,
            "Creates or replaces a secret of the tenant (a service-account key or a token); the \
             value is stored encrypted and never returned.",
            endpoint(put),
        )
        .phase("v1.0")
        .errors(&[Code::InvalidState])
        .example(json!({ "tenantId": "acme", "name": "gce-reader", "value": "ya29.example" })),
        IAM.method(
            "secrets",
            "list",
            Kind::Read,
            Permission::IamManage,
            "Lists the tenant's secrets by name (never their values).",
            endpoint(list),
        )
        .phase("v1.0"),
        IAM.method(
            "secrets",
            "delete",
            Kind::Mutation,
            Permission::IamManage,
            "Deletes a secret; refused while a provider account of the tenant references it.",
            endpoint(delete),
        )
        .phase("v1.0")
        .errors(&[Code::NotFound, Code::InvalidState])
        .example(json!({ "tenantId": "acme", "name": "gce-reader" })),
    ]
}

/// `secrets.put`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Put {
    #[schemars(length(min = 1, max = 63), regex(pattern = SECRET_NAME))]
    name: String,
    #[schemars(length(min = 1, max = MAX_VALUE_BYTES))]
    value: String,
}

async fn put(call: Call, input: Put) -> Result<SecretReply, ApiError> {
    if input.value.len() > MAX_VALUE_BYTES {
        return Err(ApiError::invalid(
            "value",
            "length",
            format!("value must be at most {MAX_VALUE_BYTES} bytes"),
        )
        .with("maxLength", MAX_VALUE_BYTES));
    }
    let kind = classify_secret(&input.value).map_err(|problem| {
        let reason = match problem {
            SecretProblem::NotAToken => "token-invalid",
            SecretProblem::ServiceAccountInvalid(_) => "service-account-invalid",
        };
        ApiError::invalid("value", reason, problem.to_string())
    })?;
    let (mut conn, now) = call.conn_now().await?;
    let stored = control::secrets::put(
        &mut conn,
        &call.app.keyring,
        call.tenant().as_str(),
        &input.name,
        &input.value,
        kind,
        now,
    )
    .await?;
    Ok(stored.into())
}

async fn list(call: Call, _input: TenantOnly) -> Result<Items<Secret>, ApiError> {
    let mut conn = call.conn().await?;
    Ok(Items::of(
        storage::db::read_only(&mut conn, async |conn| {
            secrets::list(conn, call.tenant()).await
        })
        .await?,
    ))
}

/// `secrets.delete`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Delete {
    #[schemars(length(min = 1, max = 63), regex(pattern = SECRET_NAME))]
    name: String,
}

async fn delete(call: Call, input: Delete) -> Result<SecretDeleted, ApiError> {
    let mut conn = call.conn().await?;
    secrets::delete(&mut conn, call.tenant(), &input.name).await?;
    Ok(SecretDeleted {
        name: input.name,
        deleted: true,
    })
}
