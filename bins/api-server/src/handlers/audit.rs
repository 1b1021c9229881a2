//! audit: the audit trail's reader (contract 3.11). The records are written
//! by the request pipeline ([`crate::audit`]), not by handlers.

use iam_check::{Permission, RootOption};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use storage::model::audit::{self, AUDIT_PREFIX, AuditFilter};

use super::IAM;
use super::examples::{T0, T1};
use crate::error::ApiError;
use crate::registry::{Call, Kind, Method, endpoint};
use crate::schema::{KEYSET_CURSOR, keyset_after};
use crate::wire::{self, Page};

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    vec![
        IAM.method(
            "audit",
            "list",
            Kind::Read,
            Permission::IamManage,
            "Pages the tenant's audit records (one per mutation call), oldest first (all \
             tenants' with all, root only).",
            endpoint(list),
        )
        .phase("v1.0")
        .example(json!({
            "tenantId": "acme",
            "from": T0,
            "to": T1,
            "method": "instances.create",
            "limit": 100,
        })),
    ]
}

/// `module.method` (at most 129 characters).
const METHOD_NAME: &str = "^[a-z][A-Za-z]{0,63}\\.[a-z][A-Za-z]{0,63}$";

/// `audit.list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ListAudit {
    #[schemars(range(min = 0, max = i64::MAX))]
    from: Option<i64>,
    #[schemars(range(min = 0, max = i64::MAX))]
    to: Option<i64>,
    #[schemars(length(min = 1, max = 129), regex(pattern = METHOD_NAME))]
    method: Option<String>,
    #[serde(default)]
    all: bool,
    #[schemars(length(min = 1, max = 40), regex(pattern = KEYSET_CURSOR))]
    after: Option<String>,
    #[serde(default = "crate::schema::page_limit")]
    #[schemars(range(min = 1, max = 1000))]
    limit: i64,
}

async fn list(call: Call, input: ListAudit) -> Result<Page<wire::AuditRecord>, ApiError> {
    if input.all {
        call.allow(RootOption::AllTenants)?;
    }
    let after = keyset_after(input.after.as_deref(), AUDIT_PREFIX, "audit.list")?;
    let filter = AuditFilter {
        tenant_id: (!input.all).then(|| call.tenant().to_string()),
        from: input.from,
        to: input.to,
        method: input.method,
    };
    let mut conn = call.conn().await?;
    let (items, next, has_more) = storage::db::read_only(&mut conn, async |conn| {
        audit::page(conn, &filter, after, input.limit).await
    })
    .await?;
    Ok(Page {
        items: items.into_iter().map(Into::into).collect(),
        next_cursor: next.encode(AUDIT_PREFIX),
        has_more,
    })
}
