//! `quotas`: a tenant's maximum and use of one resource in one pool.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::error::Result;
use crate::schema::quotas;

/// Sets the use of one quota row (locked by the caller,
/// [`crate::locks::quota_rows`]).
pub async fn set_used(
    conn: &AsyncPgConnection,
    tenant: &str,
    pool_id: &str,
    resource: &str,
    used: i64,
) -> Result<()> {
    let mut conn = conn;
    let conn = &mut conn;
    // A fixed text: kept prepared (`db::cached`).
    crate::db::cached(
        diesel::update(quotas::table.find((tenant, pool_id, resource))).set(quotas::used.eq(used)),
    )
    .execute(conn)
    .await?;
    Ok(())
}
