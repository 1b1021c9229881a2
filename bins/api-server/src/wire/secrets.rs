//! The tenant's secrets (contract 3.9): never their values.

use schemars::JsonSchema;
use serde::Serialize;
use storage::ops::secrets;

use super::Millis;

/// A secret of the tenant (contract 3.9): never its value.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Secret {
    /// Its name.
    pub name: String,
    /// The owning tenant.
    pub tenant_id: String,
    /// What the value is.
    #[schemars(extend("enum" = ["service-account", "token"]))]
    pub kind: String,
    /// The first 16 hex digits of the value's SHA-256.
    #[schemars(extend("pattern" = "^[0-9a-f]{16}$"))]
    pub fingerprint: String,
    /// Creation instant.
    pub created_at: Millis,
    /// Last `secrets.put`.
    pub updated_at: Millis,
}

impl From<secrets::SecretInfo> for Secret {
    fn from(s: secrets::SecretInfo) -> Secret {
        Secret {
            name: s.name,
            tenant_id: s.tenant_id,
            kind: s.kind,
            fingerprint: s.fingerprint,
            created_at: s.created_at,
            updated_at: s.updated_at,
        }
    }
}

/// `secrets.delete`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SecretDeleted {
    /// The deleted secret.
    pub name: String,
    /// Always true.
    pub deleted: bool,
}

replies! {
    /// `{ "secret": Secret }`
    SecretReply { secret: Secret as "secret" }
}
