//! The quota an instance holds: its charges, and the tenant's quota rows
//! of its pool locked (first in the lock order), charged and released.

use diesel_async::AsyncPgConnection;
use quotas_core::{Charge, QuotaRow};

use crate::error::{Result, StorageError};
use crate::locks;
use crate::model::instance::InstanceRow;
use crate::model::quota;
use crate::ops::pools::{self, Pool};

/// Locks the tenant's quota rows of the pool for `charges` (by resource).
pub(super) async fn lock_quota_rows(
    conn: &AsyncPgConnection,
    tenant: &str,
    pool_id: &str,
    charges: &[Charge],
) -> Result<Vec<QuotaRow>> {
    let resources: Vec<&str> = charges.iter().map(|c| c.resource.as_str()).collect();
    let rows = locks::quota_rows(conn, tenant, pool_id, &resources).await?;
    Ok(rows
        .into_iter()
        .map(|(r, m, u)| QuotaRow::new(r, m, u))
        .collect())
}

pub(super) async fn write_quota_rows(
    conn: &AsyncPgConnection,
    tenant: &str,
    pool_id: &str,
    before: &[QuotaRow],
    after: &[QuotaRow],
) -> Result<()> {
    // The rows whose use changes, pipelined: one round trip.
    let writes = after
        .iter()
        .filter(|row| {
            !before
                .iter()
                .any(|b| b.resource == row.resource && b.used == row.used)
        })
        .map(|row| quota::set_used(conn, tenant, pool_id, &row.resource, row.used));
    futures::future::try_join_all(writes).await?;
    Ok(())
}

pub(super) fn charges_for(pool: &Pool, flavor: &str) -> Result<Vec<Charge>> {
    let f = pool
        .flavor(flavor)
        .ok_or_else(|| StorageError::internal("flavor vanished"))?;
    Ok(quotas_core::instance_charges(f.vcpus, f.memory_gib, f.gpus))
}

/// Releases the quota a locked instance holds.
pub(super) async fn release_quota(conn: &mut AsyncPgConnection, inst: &InstanceRow) -> Result<()> {
    let pool = pool_of(conn, &inst.pool_id).await?;
    let charges = charges_for(&pool, &inst.flavor)?;
    let rows = lock_quota_rows(conn, &inst.tenant_id, &inst.pool_id, &charges).await?;
    let released = quotas_core::release(&rows, &charges);
    write_quota_rows(conn, &inst.tenant_id, &inst.pool_id, &rows, &released).await
}

/// Locks the quota rows a locked instance holds (first in the lock order,
/// before its reservation and its row).
pub(crate) async fn lock_quota_of(conn: &mut AsyncPgConnection, inst: &InstanceRow) -> Result<()> {
    let pool = pool_of(conn, &inst.pool_id).await?;
    lock_quota_rows(
        conn,
        &inst.tenant_id,
        &inst.pool_id,
        &charges_for(&pool, &inst.flavor)?,
    )
    .await?;
    Ok(())
}

pub(super) async fn pool_of(conn: &mut AsyncPgConnection, pool_id: &str) -> Result<Pool> {
    pools::get_any(conn, pool_id).await
}
