//! Operations that span several parts of the model.

use diesel_async::{AsyncConnection, AsyncPgConnection};
use grants_core::ForcedEnd;

use crate::error::{Field, Reason, Result, StorageError};
use crate::ids::TenantId;
use crate::locks;
use crate::model::events;
use crate::model::states::TenantState;
use crate::ops::accounts;
use crate::ops::instances;
use crate::ops::secrets;
use crate::ops::settlement;
use crate::ops::tenancy::{self, Tenant};
use crate::ops::webhooks;

/// `tenants.delete`: the tenant's active grants end now and its scheduled
/// ones are cancelled (`reason: "tenant-deleted"`), its instances are deleted
/// with their slots and quota released, its keys stop working, and its
/// provider accounts and secrets are deleted (contract 3.1), and its
/// webhooks with their signing secrets (3.13 r4). Deleting a
/// deleted tenant returns it unchanged; the root tenant cannot be deleted.
pub async fn delete_tenant(
    conn: &mut AsyncPgConnection,
    root: &TenantId,
    tenant_id: &TenantId,
    now: i64,
) -> Result<Tenant> {
    let target = tenant_id;
    let root = root.as_str();
    let tenant_id = tenant_id.as_str();
    if tenant_id == root {
        return Err(StorageError::invalid(
            Field::TargetTenantId,
            Reason::RootTenant,
            "the root tenant cannot be deleted",
        ));
    }
    conn.transaction::<_, StorageError, _>(async move |conn| {
        // The tenant row first, `FOR UPDATE`: every write naming the tenant
        // takes it `FOR SHARE` before writing, so from here on nothing new
        // can be created for the tenant, and whatever committed before is
        // visible to the statements below.
        let current = locks::tenant_for_delete(conn, tenant_id)
            .await?
            .ok_or_else(|| StorageError::not_found("tenant", tenant_id))?;
        if current.state == TenantState::Deleted {
            return Ok(current);
        }
        // Lock order: tenant, its provider accounts, quota rows, then
        // reservations, then instances.
        let accounts = locks::tenant_accounts(conn, tenant_id).await?;
        locks::tenant_quota_rows(conn, tenant_id).await?;
        let mut batch = Vec::new();
        let cause = ForcedEnd::TenantDeleted {
            tenant_id: tenant_id.to_owned(),
        };
        for (account_id, reservation_id) in
            instances::reservations_of_tenant(conn, tenant_id).await?
        {
            if let Some(res) = locks::reservation(conn, &account_id, &reservation_id).await? {
                settlement::force_end(conn, &res, &cause, now, &mut batch).await?;
            }
        }
        let deleted = instances::delete_all_of_tenant(conn, tenant_id, now).await?;
        // Its grants ended, its provider accounts go (no scan lists them
        // again), then the secrets they could name.
        let accounts =
            accounts::delete_accounts_of_tenant(conn, &accounts, now, &mut batch).await?;
        let tenant = tenancy::mark_tenant_deleted(conn, target, now).await?;
        let secrets = secrets::delete_all_of_tenant(conn, target).await?;
        let webhooks = webhooks::delete_all_of_tenant(conn, target, now).await?;
        events::publish(conn, now, batch).await?;
        tracing::info!(
            tenant = %tenant_id,
            instances = deleted,
            accounts,
            secrets,
            webhooks,
            "tenant deleted"
        );
        Ok(tenant)
    })
    .await
}
