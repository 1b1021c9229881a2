//! Operations that span several parts of the model.

use diesel_async::{AsyncConnection, AsyncPgConnection};

use crate::error::{Error, Result};
use crate::tenancy::{self, Tenant};

/// `tenants.delete`: the tenant's keys stop working at once. Deleting a
/// deleted tenant returns it unchanged.
pub async fn delete_tenant(
    conn: &mut AsyncPgConnection,
    tenant_id: &str,
    now: i64,
) -> Result<Tenant> {
    conn.transaction::<_, Error, _>(async move |conn| {
        let (tenant, _deleted_now) = tenancy::mark_tenant_deleted(conn, tenant_id, now).await?;
        Ok(tenant)
    })
    .await
}
