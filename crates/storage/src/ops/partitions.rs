//! The monthly partitions of `usage_records` and `events` (migration
//! `2026-12-06-000001_monthly_partitions`): created ahead by the reconciler,
//! rewritten sorted by tenant once closed (migration
//! `2026-12-12-000001_month_compaction`), detached by an operator
//! (`docs/operations.md`, "Archiving old months").

use diesel::OptionalExtension;
use diesel::sql_types::{BigInt, Integer, Nullable, Text};
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
        wait_at_most_two_seconds(conn).await?;
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

/// Makes the current transaction wait at most two seconds for any lock
/// (`SET LOCAL lock_timeout`): the partitions' upkeep gives way to the
/// platform's own work and is tried again on a later pass.
async fn wait_at_most_two_seconds(conn: &mut AsyncPgConnection) -> diesel::QueryResult<()> {
    diesel::sql_query("SET LOCAL lock_timeout = '2s'")
        .execute(conn)
        .await
        .map(|_| ())
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

/// One closed month rewritten sorted by `(tenant_id, seq)`.
#[derive(Debug, Clone, PartialEq, Eq, diesel::QueryableByName)]
pub struct Compacted {
    /// `usage_records` or `events`.
    #[diesel(sql_type = Text)]
    pub parent: String,
    /// The month's first instant (ms, UTC).
    #[diesel(sql_type = BigInt)]
    pub month_start: i64,
    /// Rows copied; `None` when another worker had already rewritten it or
    /// was rewriting a month (it is not waited for).
    #[diesel(sql_type = Nullable<BigInt>)]
    pub rows: Option<i64>,
}

/// Rewrites the oldest closed month of either log that has not been rewritten
/// yet (ended a day or more before `now`) sorted by `(tenant_id, seq)`, so
/// one tenant's page of it reads a few heap pages instead of one per row
/// (`bc_compact_month`). `None` when no month is due. One transaction: a
/// crash leaves the month as it was. Writers of that month wait while it is
/// copied (there should be none: it is closed); readers do not. Waits at
/// most two seconds for the month's lock, and 50 ms at a time for the log's
/// (the swap), so a long reader of the log postpones the rewrite to a later
/// pass instead of queueing every reader and writer behind it.
pub async fn compact_next(conn: &mut AsyncPgConnection, now: i64) -> Result<Option<Compacted>> {
    let done = conn
        .transaction::<_, diesel::result::Error, _>(async move |conn| {
            wait_at_most_two_seconds(conn).await?;
            diesel::sql_query(
                "SELECT due.parent, due.month_start, \
                        bc_compact_month(due.parent, due.month_start, $1) AS rows \
                 FROM (SELECT p.parent, m.month_start \
                       FROM unnest(ARRAY['usage_records', 'events']) AS p(parent) \
                       CROSS JOIN LATERAL bc_compactable_months(p.parent, $1) AS m \
                       ORDER BY m.month_start, p.parent LIMIT 1) AS due",
            )
            .bind::<BigInt, _>(now)
            .get_result(conn)
            .await
            .optional()
        })
        .await;
    match done {
        Err(diesel::result::Error::DatabaseError(_, info))
            if BUSY.iter().any(|m| info.message().starts_with(m)) =>
        {
            Err(StorageError::unavailable(format!(
                "the month is in use ({}); it is rewritten on a later pass",
                info.message()
            )))
        }
        other => Ok(other?),
    }
}

/// What PostgreSQL answers when a month's rewrite meets another transaction
/// on the month or its log: a lock timeout (the month's, or the log's tries
/// run out in `bc_compact_month`), or a deadlock with a writer of the month
/// (one of the two is failed, whole).
const BUSY: &[&str] = &[
    "canceling statement due to lock timeout",
    "lock timeout:",
    "deadlock detected",
];
