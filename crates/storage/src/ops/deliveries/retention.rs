//! Deliveries and their attempts kept `BC_WEBHOOK_RETENTION` (30 days by
//! default) after their last attempt, then removed (contract 3.13 r4), a
//! bounded number per run; and the rows of deleted webhooks (their secrets
//! already erased) once nothing of theirs is left.

use diesel::QueryableByName;
use diesel::sql_types::BigInt;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use crate::error::{Result, StorageError};

/// Deliveries removed per transaction.
const BATCH: i64 = 1000;
/// Transactions per run: at most `BATCH * BATCHES` deliveries a run.
const BATCHES: usize = 10;

/// What one run removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Removed {
    /// Deliveries.
    pub deliveries: u64,
    /// Their attempts.
    pub attempts: u64,
    /// Deleted webhooks with nothing left.
    pub webhooks: u64,
}

#[derive(QueryableByName)]
struct Counts {
    #[diesel(sql_type = BigInt)]
    deliveries: i64,
    #[diesel(sql_type = BigInt)]
    attempts: i64,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// Removes the ended (delivered or failed) deliveries whose last attempt
/// was at `now - retention_ms` or before, with their attempts, oldest
/// first, at most 10,000 a run in transactions of 1,000 (rows another
/// replica is removing are skipped); then up to 1,000 deleted webhooks
/// deleted that long ago with no delivery or attempt left. `now` is the
/// product's clock, as the attempts' instants are.
pub async fn remove_expired(
    conn: &mut AsyncPgConnection,
    now: i64,
    retention_ms: i64,
) -> Result<Removed> {
    let cutoff = now.saturating_sub(retention_ms);
    let mut removed = Removed::default();
    for _ in 0..BATCHES {
        let counts: Counts = conn
            .transaction::<_, StorageError, _>(async |conn| {
                Ok(crate::db::cached_sql(
                    "WITH gone AS ( \
                       SELECT webhook_id, seq, event_id FROM webhook_deliveries \
                       WHERE state IN ('delivered', 'failed') AND last_at <= $1 \
                       ORDER BY last_at LIMIT $2 FOR UPDATE SKIP LOCKED), \
                     attempts AS ( \
                       DELETE FROM webhook_attempts a USING gone g \
                       WHERE a.webhook_id = g.webhook_id AND a.event_id = g.event_id \
                       RETURNING 1), \
                     deliveries AS ( \
                       DELETE FROM webhook_deliveries d USING gone g \
                       WHERE d.webhook_id = g.webhook_id AND d.seq = g.seq \
                       RETURNING 1) \
                     SELECT (SELECT count(*) FROM deliveries) AS deliveries, \
                       (SELECT count(*) FROM attempts) AS attempts",
                )
                .bind::<BigInt, _>(cutoff)
                .bind::<BigInt, _>(BATCH)
                .get_result(conn)
                .await?)
            })
            .await?;
        removed.deliveries += u64::try_from(counts.deliveries).unwrap_or(0);
        removed.attempts += u64::try_from(counts.attempts).unwrap_or(0);
        if counts.deliveries < BATCH {
            break;
        }
    }
    let webhooks: Count = crate::db::single_write(conn, async |conn| {
        crate::db::cached_sql(
            "WITH gone AS ( \
               SELECT w.webhook_id FROM webhooks w \
               WHERE w.deleted_at IS NOT NULL AND w.deleted_at <= $1 \
                 AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d \
                                 WHERE d.webhook_id = w.webhook_id) \
                 AND NOT EXISTS (SELECT 1 FROM webhook_attempts a \
                                 WHERE a.webhook_id = w.webhook_id) \
               LIMIT $2 FOR UPDATE SKIP LOCKED), \
             deleted AS (DELETE FROM webhooks w USING gone g \
               WHERE w.webhook_id = g.webhook_id RETURNING 1) \
             SELECT count(*) AS n FROM deleted",
        )
        .bind::<BigInt, _>(cutoff)
        .bind::<BigInt, _>(BATCH)
        .get_result(conn)
        .await
    })
    .await?;
    removed.webhooks = u64::try_from(webhooks.n).unwrap_or(0);
    if removed != Removed::default() {
        tracing::info!(
            deliveries = removed.deliveries,
            attempts = removed.attempts,
            webhooks = removed.webhooks,
            "webhook deliveries past their retention removed"
        );
    }
    Ok(removed)
}
