//! audit: the audit trail's reader (contract 3.11). The records are written
//! by the request pipeline ([`crate::audit`]), not by handlers.

use iam_check::{Permission, RootOption};
use serde_json::json;
use storage::model::audit::{self, AUDIT_PREFIX, AuditFilter};

use super::IAM;
use super::examples::{T0, T1};
use crate::error::ApiError;
use crate::registry::{Call, Kind, Method, endpoint};
use crate::schema::{Ty, input, instant, int, keyset_after, keyset_cursor, pat};
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

/// `module.method`.
fn method_name() -> Ty {
    pat(129, "^[a-z][A-Za-z]{0,63}\\.[a-z][A-Za-z]{0,63}$")
}

input! {
    /// `audit.list`.
    struct ListAudit {
        opt from: i64 = ("from", instant()),
        opt to: i64 = ("to", instant()),
        opt method: String = ("method", method_name()),
        def all: bool = ("all", Ty::Bool, json!(false)),
        opt after: String = ("after", keyset_cursor()),
        def limit: i64 = ("limit", int(1, 1000), json!(100)),
    }
}

async fn list(call: Call, input: ListAudit) -> Result<Page<wire::AuditRecord>, ApiError> {
    if input.all {
        call.allow(RootOption::AllTenants)?;
    }
    let after = keyset_after(input.after.as_deref(), AUDIT_PREFIX, "audit.list")?;
    let filter = AuditFilter {
        tenant_id: (!input.all).then(|| call.tenant().to_owned()),
        from: input.from,
        to: input.to,
        method: input.method,
    };
    let mut conn = call.app.conn().await?;
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
