//! The monthly partitions of `usage_records` and `events` (migration
//! `2026-12-06-000001_monthly_partitions`): created ahead by the reconciler,
//! detached by an operator (`docs/operations.md`, "Archiving old months").

use diesel::sql_types::{BigInt, Integer};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use crate::{Result, StorageError};

/// One day in milliseconds.
const DAY: i64 = 86_400_000;

#[derive(diesel::QueryableByName)]
struct Created {
    #[diesel(sql_type = Integer)]
    n: i32,
}

/// Creates the partitions of the month before `now`'s, `now`'s and the next
/// two months, for both tables, moving any of their rows out of the default
/// partitions. Cheap when they exist (a catalog lookup per month). Waits at
/// most two seconds for the locks it needs, so a long transaction on the
/// default partition delays it to the next pass instead of stalling writers
/// queued behind it. Returns the number of partitions created.
pub async fn ensure_ahead(conn: &mut AsyncPgConnection, now: i64) -> Result<i32> {
    let (from, to) = (now.saturating_sub(31 * DAY), now.saturating_add(62 * DAY));
    conn.transaction::<_, StorageError, _>(async move |conn| {
        diesel::sql_query("SET LOCAL lock_timeout = '2s'")
            .execute(conn)
            .await?;
        let created: Created = diesel::sql_query(
            "SELECT bc_ensure_month_partitions('usage_records', $1, $2) \
                  + bc_ensure_month_partitions('events', $1, $2) AS n",
        )
        .bind::<BigInt, _>(from)
        .bind::<BigInt, _>(to)
        .get_result(conn)
        .await?;
        Ok(created.n)
    })
    .await
}

/// The end of the newest archived (detached) month of `usage_records`, if
/// any: usage before it is no longer in the database.
pub async fn usage_archived_through(conn: &mut AsyncPgConnection) -> Result<Option<i64>> {
    #[derive(diesel::QueryableByName)]
    struct Through {
        #[diesel(sql_type = diesel::sql_types::Nullable<BigInt>)]
        end: Option<i64>,
    }
    let t: Through = diesel::sql_query(
        "SELECT max(month_end) AS end FROM archived_months WHERE parent = 'usage_records'",
    )
    .get_result(conn)
    .await?;
    Ok(t.end)
}
