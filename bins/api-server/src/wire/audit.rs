//! The audit trail (`audit.list`, contract 3.11).

use schemars::JsonSchema;
use serde::Serialize;

use super::Millis;

/// A record of the audit trail (contract 3.11): one mutation call.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    /// `aud_...`
    pub audit_id: String,
    /// The server's clock when the call answered.
    pub at: Millis,
    /// The acting tenant (the calling key's).
    pub tenant_id: String,
    /// The calling key.
    pub key_id: String,
    /// `module.method`.
    pub method: String,
    /// The ids the call named and created.
    pub object_ids: Vec<String>,
    /// How the call ended.
    #[schemars(extend("enum" = ["ok", "denied", "replayed", "failed"]))]
    pub outcome: &'static str,
    /// The code it answered, when refused or failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The request's `x-request-id`.
    pub request_id: String,
}

impl From<storage::model::audit::AuditRecord> for AuditRecord {
    fn from(r: storage::model::audit::AuditRecord) -> AuditRecord {
        AuditRecord {
            object_ids: r.ids(),
            audit_id: r.audit_id,
            at: r.at,
            tenant_id: r.tenant_id,
            key_id: r.key_id,
            method: r.method,
            outcome: r.outcome.as_str(),
            code: r.code,
            request_id: r.request_id,
        }
    }
}
