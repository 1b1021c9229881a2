//! The delivery side of webhooks (contract 3.13), for the worker's
//! `events.webhooks` pass: the events each webhook must send, recorded as
//! deliveries in log order; claims of webhooks' due deliveries (one claim
//! per webhook at a time, so first attempts keep log order; round-robin
//! across tenants, a tenant's held webhooks capped); the start of each
//! attempt, which reads the webhook again; each attempt's record, retry
//! schedule and the disabling of a webhook that has failed for 3 days;
//! and the removal of deliveries past their retention ([`remove_expired`]).
//!
//! Delivery is at least once: an attempt is recorded after its request, so
//! a replica killed in between leaves the delivery due again once its lease
//! runs out, and it is sent once more.
//!
//! Locks: a webhook's row, then its delivery rows (update, delete, the
//! tenant's deletion, an attempt's start and record); claims take delivery
//! rows alone, under an advisory lock of their own, and never wait for a
//! webhook's row.
//!
//! Every statement here is a fixed text with its values bound, kept
//! prepared on the worker's connection (`db::cached_sql`).

use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Integer, Nullable, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use crate::clock::DB_NOW_MS;
use crate::crypto::Keyring;
use crate::error::{Result, StorageError};
use crate::ids;
use crate::model::event_data::{EventData, WebhookDisabled};
use crate::model::events::{self, NewEvent};
use crate::model::webhook::WebhookRow;

mod retention;

pub use retention::{Removed, remove_expired};

/// The first retry waits a minute; each later one twice as long.
pub const FIRST_RETRY_MS: i64 = 60_000;
/// The longest wait between two attempts.
pub const MAX_RETRY_MS: i64 = 6 * 3_600_000;
/// How long a delivery (and a webhook) may keep failing.
pub const GIVE_UP_MS: i64 = 3 * 24 * 3_600_000;
/// Events recorded per webhook per round.
const SCAN_BATCH: i64 = 1000;

/// The channel events are announced on when committed.
pub const EVENTS_CHANNEL: &str = "bc_events";

/// Records, for every enabled webhook, the deliveries of the events
/// committed after its position (up to 1,000 each per round), at `now`.
/// Returns how many were recorded.
pub async fn record_new(conn: &mut AsyncPgConnection, now: i64) -> Result<u64> {
    let ids: Vec<String> = crate::db::read_only(conn, async |conn| {
        crate::db::cached_sql(
            "SELECT w.webhook_id FROM webhooks w JOIN event_heads h USING (tenant_id) \
             WHERE w.deleted_at IS NULL AND w.state = 'enabled' AND h.last_seq > w.scanned_seq \
             ORDER BY w.webhook_id",
        )
        .load::<IdRow>(conn)
        .await
        .map(|rows| rows.into_iter().map(|r| r.webhook_id).collect())
    })
    .await?;
    let mut recorded = 0;
    for id in ids {
        recorded += conn
            .transaction::<_, StorageError, _>(async |conn| record_one(conn, &id, now).await)
            .await?;
    }
    Ok(recorded)
}

#[derive(QueryableByName)]
struct IdRow {
    #[diesel(sql_type = Text)]
    webhook_id: String,
}

#[derive(QueryableByName)]
struct Position {
    #[diesel(sql_type = Text)]
    tenant_id: String,
    #[diesel(sql_type = BigInt)]
    scanned_seq: i64,
    #[diesel(sql_type = Nullable<Array<Text>>)]
    types: Option<Vec<String>>,
}

async fn record_one(conn: &mut AsyncPgConnection, webhook_id: &str, now: i64) -> Result<u64> {
    // The webhook row, skipped when another replica is recording it.
    let Some(pos) = crate::db::cached_sql(
        "SELECT tenant_id, scanned_seq, types FROM webhooks \
         WHERE webhook_id = $1 AND deleted_at IS NULL AND state = 'enabled' \
         FOR UPDATE SKIP LOCKED",
    )
    .bind::<Text, _>(webhook_id)
    .get_result::<Position>(conn)
    .await
    .optional()?
    else {
        return Ok(0);
    };
    let types = pos.types.unwrap_or_default();
    #[derive(QueryableByName)]
    struct Upto {
        #[diesel(sql_type = BigInt)]
        upto: i64,
    }
    let upto: Upto = crate::db::cached_sql(
        "SELECT least(coalesce(max(last_seq), 0), $2 + $3) AS upto FROM event_heads \
         WHERE tenant_id = $1",
    )
    .bind::<Text, _>(&pos.tenant_id)
    .bind::<BigInt, _>(pos.scanned_seq)
    .bind::<BigInt, _>(SCAN_BATCH)
    .get_result(conn)
    .await?;
    if upto.upto <= pos.scanned_seq {
        return Ok(0);
    }
    // A `webhook.test` goes only to its webhook; `webhook.disabled` to none.
    let n = crate::db::cached_sql(
        "INSERT INTO webhook_deliveries \
           (webhook_id, seq, event_id, event_type, state, next_at, first_at, last_at) \
         SELECT $1, e.seq, e.event_id, e.event_type, 'pending', $5, $5, $5 FROM events e \
         WHERE e.tenant_id = $2 AND e.seq > $3 AND e.seq <= $4 \
           AND (cardinality($6::text[]) = 0 OR e.event_type = ANY($6)) \
           AND e.event_type <> 'webhook.disabled' \
           AND (e.event_type <> 'webhook.test' OR e.data ->> 'webhookId' = $1) \
         ON CONFLICT DO NOTHING",
    )
    .bind::<Text, _>(webhook_id)
    .bind::<Text, _>(&pos.tenant_id)
    .bind::<BigInt, _>(pos.scanned_seq)
    .bind::<BigInt, _>(upto.upto)
    .bind::<BigInt, _>(now)
    .bind::<Array<Text>, _>(&types)
    .execute(conn)
    .await?;
    crate::db::cached_sql("UPDATE webhooks SET scanned_seq = $2 WHERE webhook_id = $1")
        .bind::<Text, _>(webhook_id)
        .bind::<BigInt, _>(upto.upto)
        .execute(conn)
        .await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// One delivery claimed for sending.
#[derive(Debug, Clone, QueryableByName)]
pub struct Claimed {
    /// The webhook's tenant.
    #[diesel(sql_type = Text)]
    pub tenant_id: String,
    /// The webhook.
    #[diesel(sql_type = Text)]
    pub webhook_id: String,
    /// The event's position in its tenant's log.
    #[diesel(sql_type = BigInt)]
    pub seq: i64,
    /// The event.
    #[diesel(sql_type = Text)]
    pub event_id: String,
    /// Its type.
    #[diesel(sql_type = Text)]
    pub event_type: String,
    /// Attempts so far.
    #[diesel(sql_type = Integer)]
    pub attempts: i32,
    /// When it was first due.
    #[diesel(sql_type = BigInt)]
    pub first_at: i64,
    /// The claim's token (one per webhook and claim).
    #[diesel(sql_type = Text)]
    pub lease_token: String,
}

/// A webhook's claimed deliveries, sent one at a time in log order. Where
/// to send them is read again at each attempt ([`start_attempt`]).
#[derive(Debug, Clone)]
pub struct Batch {
    /// The webhook.
    pub webhook_id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// The claim's token.
    pub token: String,
    /// The due deliveries, in log order.
    pub deliveries: Vec<Claimed>,
}

/// How webhooks are claimed.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRules {
    /// The most webhooks claimed at once.
    pub webhooks: i64,
    /// The most deliveries of one webhook claimed at once.
    pub per_webhook: i64,
    /// The most webhooks of one tenant held at once, every replica's claims
    /// counted (`BC_WEBHOOK_TENANT_CONCURRENCY`).
    pub per_tenant: i64,
    /// How long a claim holds its deliveries without progress (real time).
    pub lease_ms: i64,
}

/// Claims, for up to `rules.webhooks` webhooks with deliveries due at `now`
/// (the product's clock) that no claim holds, up to `rules.per_webhook` of
/// them each in log order: round-robin across tenants, at most
/// `rules.per_tenant` webhooks of a tenant held at once
/// (`sql/deliveries_claim.sql`). One short transaction under an advisory
/// lock that every replica's claims take, so the per-tenant count is exact.
pub async fn claim(
    conn: &mut AsyncPgConnection,
    now: i64,
    rules: ClaimRules,
) -> Result<Vec<Batch>> {
    let token = uuid::Uuid::now_v7().to_string();
    let sql = include_str!("sql/deliveries_claim.sql").replace("{DB_NOW_MS}", DB_NOW_MS);
    let claimed: Vec<Claimed> = conn
        .transaction::<_, StorageError, _>(async |conn| {
            crate::db::cached_sql("SELECT pg_advisory_xact_lock(hashtext('bc_webhook_claims'))")
                .execute(conn)
                .await?;
            Ok(crate::db::cached_sql(sql)
                .bind::<BigInt, _>(rules.webhooks)
                .bind::<BigInt, _>(rules.per_webhook)
                .bind::<BigInt, _>(rules.lease_ms)
                .bind::<Text, _>(&token)
                .bind::<BigInt, _>(rules.per_tenant)
                .bind::<BigInt, _>(now)
                .load(conn)
                .await?)
        })
        .await?;
    let mut batches: Vec<Batch> = Vec::new();
    for d in claimed {
        match batches.iter_mut().find(|b| b.webhook_id == d.webhook_id) {
            Some(b) => b.deliveries.push(d),
            None => batches.push(Batch {
                webhook_id: d.webhook_id.clone(),
                tenant_id: d.tenant_id.clone(),
                token: d.lease_token.clone(),
                deliveries: vec![d],
            }),
        }
    }
    for b in &mut batches {
        b.deliveries.sort_by_key(|d| d.seq);
    }
    Ok(batches)
}

/// The event a delivery sends, as the tenant's log keeps it; `None` when it
/// is gone (its month archived). The body's wire shape is the sender's.
pub async fn event(
    conn: &mut AsyncPgConnection,
    tenant_id: &str,
    seq: i64,
) -> Result<Option<crate::model::events::Event>> {
    let event = crate::db::read_only(conn, async |conn| {
        crate::schema::events::table
            .filter(crate::schema::events::tenant_id.eq(tenant_id))
            .filter(crate::schema::events::seq.eq(seq))
            .select(crate::model::events::Event::as_select())
            .first(conn)
            .await
            .optional()
    })
    .await?;
    Ok(event)
}

/// How one attempt went.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The HTTP status, when an answer came.
    pub status: Option<u16>,
    /// Whether it delivered (a 2xx within the deadline).
    pub delivered: bool,
    /// How long it took.
    pub duration_ms: i64,
}

/// The wait before attempt `attempts + 1` after `attempts` failed ones.
pub fn retry_after(attempts: i32) -> i64 {
    let doublings = u32::try_from(attempts.saturating_sub(1))
        .unwrap_or(0)
        .min(20);
    FIRST_RETRY_MS
        .saturating_mul(1_i64 << doublings)
        .min(MAX_RETRY_MS)
}

/// Why a claimed delivery is not attempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// The webhook was deleted after the claim.
    Deleted,
    /// The webhook was disabled after the claim (its open deliveries ended).
    Disabled,
    /// The claim's lease ran out and another claim holds the delivery, or
    /// the delivery ended.
    LeaseLost,
}

/// An attempt started: where it goes and how it is signed, as the webhook
/// is now. It holds the secrets, so it has no `Debug`.
pub struct Sending {
    /// The attempt's number (1 for the first).
    pub number: i32,
    /// The webhook's url now.
    pub url: String,
    /// The secrets that sign it now: the current one, then the one it
    /// replaced while that still signs.
    pub secrets: Vec<String>,
}

/// What [`start_attempt`] found.
pub enum Start {
    /// Send it.
    Send(Sending),
    /// Send nothing more of the batch.
    Stop(Stopped),
}

/// Starts an attempt of a claimed delivery at `now`: re-reads its webhook
/// (held `FOR SHARE` until the attempt is counted, so an update, disable or
/// delete commits either before it, and is what this attempt sees, or
/// after it), counts the attempt before it is sent (a replica killed
/// between sending and recording leaves it counted: an event never arrives
/// more often than its delivery's `attempts`) and renews the claim's lease
/// for `lease_ms`. A deleted or disabled webhook, or a lost lease, stops the
/// batch; nothing is counted then. A key problem is an error naming the key
/// id, never a secret.
pub async fn start_attempt(
    conn: &mut AsyncPgConnection,
    keyring: &Keyring,
    claimed: &Claimed,
    lease_ms: i64,
    now: i64,
) -> Result<Start> {
    conn.transaction::<_, StorageError, _>(async |conn| {
        let row: Option<WebhookRow> = crate::schema::webhooks::table
            .find(&claimed.webhook_id)
            .select(WebhookRow::as_select())
            .for_share()
            .first(conn)
            .await
            .optional()?;
        let row = match row {
            Some(row) if row.deleted_at.is_none() => row,
            _ => return Ok(Start::Stop(Stopped::Deleted)),
        };
        if row.state != "enabled" {
            return Ok(Start::Stop(Stopped::Disabled));
        }
        let secrets = super::webhooks::secrets_of(keyring, &row, now)?;
        #[derive(QueryableByName)]
        struct Counted {
            #[diesel(sql_type = BigInt)]
            seq: i64,
            #[diesel(sql_type = Integer)]
            attempts: i32,
        }
        let counted: Vec<Counted> = crate::db::cached_sql(format!(
            "UPDATE webhook_deliveries \
             SET attempts = attempts + CASE WHEN seq = $2 THEN 1 ELSE 0 END, \
               lease_until = {DB_NOW_MS} + $4 \
             WHERE webhook_id = $1 AND lease_token = $3 \
               AND state IN ('pending', 'retrying') RETURNING seq, attempts"
        ))
        .bind::<Text, _>(&claimed.webhook_id)
        .bind::<BigInt, _>(claimed.seq)
        .bind::<Text, _>(&claimed.lease_token)
        .bind::<BigInt, _>(lease_ms)
        .load(conn)
        .await?;
        Ok(match counted.iter().find(|c| c.seq == claimed.seq) {
            Some(c) => Start::Send(Sending {
                number: c.attempts,
                url: row.url,
                secrets,
            }),
            None => Start::Stop(Stopped::LeaseLost),
        })
    })
    .await
}

/// Records attempt `number` (from [`start_attempt`]) of a claimed delivery
/// at `now`: the attempts log, the delivery's next state and the webhook's
/// run of failures, disabling it (`webhook.disabled`, its open deliveries
/// ended) after 3 days of failures. Answers the attempt's outcome
/// (`delivered`, `retrying`, `failed`), or `None` when the claim's lease was
/// lost or the delivery ended meanwhile (nothing is written).
pub async fn record_attempt(
    conn: &mut AsyncPgConnection,
    claimed: &Claimed,
    number: i32,
    attempt: &Attempt,
    now: i64,
) -> Result<Option<&'static str>> {
    conn.transaction::<_, StorageError, _>(async |conn| {
        // The webhook's row first, as every writer of a webhook's
        // deliveries takes it (update, delete, the tenant's deletion).
        #[derive(QueryableByName)]
        struct Run {
            #[diesel(sql_type = Nullable<BigInt>)]
            failing_since: Option<i64>,
            #[diesel(sql_type = Text)]
            url: String,
        }
        let run: Run = crate::db::cached_sql(
            "SELECT failing_since, url FROM webhooks WHERE webhook_id = $1 FOR NO KEY UPDATE",
        )
        .bind::<Text, _>(&claimed.webhook_id)
        .get_result(conn)
        .await?;
        // The last retry is at the end of the 3 days; it failing gives up.
        let deadline = claimed.first_at + GIVE_UP_MS;
        let (outcome, next) = if attempt.delivered {
            ("delivered", None)
        } else if now >= deadline {
            ("failed", None)
        } else {
            ("retrying", Some((now + retry_after(number)).min(deadline)))
        };
        let n = crate::db::cached_sql(
            "UPDATE webhook_deliveries SET attempts = $3, state = $4, \
               next_at = coalesce($5, next_at), lease_until = NULL, last_at = $7 \
             WHERE webhook_id = $1 AND seq = $2 AND lease_token = $6 \
               AND state IN ('pending', 'retrying')",
        )
        .bind::<Text, _>(&claimed.webhook_id)
        .bind::<BigInt, _>(claimed.seq)
        .bind::<Integer, _>(number)
        .bind::<Text, _>(outcome)
        .bind::<Nullable<BigInt>, _>(next)
        .bind::<Text, _>(&claimed.lease_token)
        .bind::<BigInt, _>(now)
        .execute(conn)
        .await?;
        if n != 1 {
            return Ok(None);
        }
        crate::db::cached_sql(
            "INSERT INTO webhook_attempts (delivery_id, webhook_id, event_id, event_type, \
               attempt, at, outcome, status, duration_ms, next_attempt_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind::<Text, _>(ids::new_id("dlv", now))
        .bind::<Text, _>(&claimed.webhook_id)
        .bind::<Text, _>(&claimed.event_id)
        .bind::<Text, _>(&claimed.event_type)
        .bind::<Integer, _>(number)
        .bind::<BigInt, _>(now)
        .bind::<Text, _>(outcome)
        .bind::<Nullable<Integer>, _>(attempt.status.map(i32::from))
        .bind::<BigInt, _>(attempt.duration_ms)
        .bind::<Nullable<BigInt>, _>(next)
        .execute(conn)
        .await?;
        // The webhook's run of failures: cleared by a delivery, started by
        // the first failure; 3 days of it disable the webhook.
        let failing_since = if attempt.delivered {
            None
        } else {
            Some(run.failing_since.unwrap_or(now))
        };
        if failing_since != run.failing_since {
            crate::db::cached_sql("UPDATE webhooks SET failing_since = $2 WHERE webhook_id = $1")
                .bind::<Text, _>(&claimed.webhook_id)
                .bind::<Nullable<BigInt>, _>(failing_since)
                .execute(conn)
                .await?;
        }
        if failing_since.is_some_and(|since| now - since >= GIVE_UP_MS) {
            disable_after_failures(conn, claimed, run.url, now).await?;
        }
        Ok(Some(outcome))
    })
    .await
}

/// Disables a webhook that has failed for 3 days (its row locked by the
/// caller): its open deliveries end as `failed`, and `webhook.disabled` is
/// published in its tenant (sent to none of its webhooks).
async fn disable_after_failures(
    conn: &mut AsyncPgConnection,
    claimed: &Claimed,
    url: String,
    now: i64,
) -> Result<()> {
    let disabled = crate::db::cached_sql(
        "UPDATE webhooks SET state = 'disabled', updated_at = $2 \
         WHERE webhook_id = $1 AND state = 'enabled'",
    )
    .bind::<Text, _>(&claimed.webhook_id)
    .bind::<BigInt, _>(now)
    .execute(conn)
    .await?;
    if disabled == 1 {
        let ended = end_open(conn, &claimed.webhook_id, now).await?;
        let data = EventData::WebhookDisabled(WebhookDisabled {
            webhook_id: claimed.webhook_id.clone(),
            url,
        });
        events::publish(
            conn,
            now,
            vec![NewEvent::new(&claimed.tenant_id, data, now)],
        )
        .await?;
        tracing::warn!(
            webhook = %claimed.webhook_id,
            deliveries_ended = ended,
            "webhook disabled after 3 days of failed deliveries"
        );
    }
    Ok(())
}

/// Puts back the deliveries of a batch not attempted (after its first
/// failed attempt, or when it stops): due as they were, their attempts
/// unchanged, free for the next claim. Answers how many.
pub async fn release(conn: &mut AsyncPgConnection, batch: &Batch) -> Result<usize> {
    crate::db::single_write(conn, async |conn| {
        crate::db::cached_sql(
            "UPDATE webhook_deliveries SET lease_until = NULL, lease_token = NULL \
             WHERE webhook_id = $1 AND lease_token = $2 AND state IN ('pending', 'retrying')",
        )
        .bind::<Text, _>(&batch.webhook_id)
        .bind::<Text, _>(&batch.token)
        .execute(conn)
        .await
    })
    .await
    .map_err(Into::into)
}

/// Ends the open deliveries of webhook `id` as `failed` at `now` (it was
/// disabled or deleted, its row locked by the caller): nothing more is
/// attempted, and an attempt in flight is not recorded. Answers how many.
pub(crate) async fn end_open(conn: &mut AsyncPgConnection, id: &str, now: i64) -> Result<usize> {
    Ok(crate::db::cached_sql(
        "UPDATE webhook_deliveries \
         SET state = 'failed', lease_until = NULL, lease_token = NULL, last_at = $2 \
         WHERE webhook_id = $1 AND state IN ('pending', 'retrying')",
    )
    .bind::<Text, _>(id)
    .bind::<BigInt, _>(now)
    .execute(conn)
    .await?)
}
