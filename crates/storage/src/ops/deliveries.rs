//! The delivery side of webhooks (contract 3.13), for the worker's
//! `events.webhooks` pass: the events each webhook must send, recorded as
//! deliveries in log order; claims of a webhook's due deliveries (one
//! replica per webhook at a time, so first attempts keep log order); and
//! each attempt's record, retry schedule and the disabling of a webhook
//! that has failed for 3 days.
//!
//! Delivery is at least once: an attempt is recorded after its request, so
//! a replica killed in between leaves the delivery due again once its lease
//! runs out, and it is sent once more.
//!
//! Every statement here is a fixed text with its values bound, kept
//! prepared on the worker's connection (`db::cached_sql`).

use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Integer, Nullable, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use crate::clock::DB_NOW_MS;
use crate::error::{Result, StorageError};
use crate::ids;
use crate::model::event_data::{EventData, WebhookDisabled};
use crate::model::events::{self, NewEvent};

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
           (webhook_id, seq, event_id, event_type, state, next_at, first_at) \
         SELECT $1, e.seq, e.event_id, e.event_type, 'pending', $5, $5 FROM events e \
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

/// One delivery claimed for sending, with what the request carries.
#[derive(Debug, Clone, QueryableByName)]
pub struct Claimed {
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
    /// The claim's token.
    #[diesel(sql_type = Text)]
    pub lease_token: String,
}

/// A webhook with due deliveries, claimed: where to send them and what.
#[derive(Debug, Clone)]
pub struct Batch {
    /// The webhook.
    pub webhook_id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// Its endpoint.
    pub url: String,
    /// The due deliveries, in log order.
    pub deliveries: Vec<Claimed>,
}

#[derive(QueryableByName)]
struct Target {
    #[diesel(sql_type = Text)]
    webhook_id: String,
    #[diesel(sql_type = Text)]
    tenant_id: String,
    #[diesel(sql_type = Text)]
    url: String,
}

/// Claims, for up to `webhooks` webhooks with deliveries due at `now`, up to
/// `per_webhook` of them each, in log order, for `lease_ms`. A webhook whose
/// deliveries another replica holds is skipped: one replica sends a
/// webhook's deliveries at a time.
pub async fn claim(
    conn: &mut AsyncPgConnection,
    now: i64,
    webhooks: i64,
    per_webhook: i64,
    lease_ms: i64,
) -> Result<Vec<Batch>> {
    let targets: Vec<Target> = crate::db::read_only(conn, async |conn| {
        crate::db::cached_sql(
            "SELECT w.webhook_id, w.tenant_id, w.url FROM webhooks w \
             WHERE w.deleted_at IS NULL AND w.state = 'enabled' AND EXISTS ( \
               SELECT 1 FROM webhook_deliveries d WHERE d.webhook_id = w.webhook_id \
               AND d.state IN ('pending', 'retrying') AND d.next_at <= $1) \
             ORDER BY w.webhook_id LIMIT $2",
        )
        .bind::<BigInt, _>(now)
        .bind::<BigInt, _>(webhooks)
        .load(conn)
        .await
    })
    .await?;
    let mut out = Vec::new();
    for t in targets {
        let token = format!("{}", uuid::Uuid::now_v7());
        let sql = format!(
            "WITH free AS ( \
               SELECT (pg_try_advisory_xact_lock(hashtext('webhook:' || $1)) \
                 AND NOT EXISTS (SELECT 1 FROM webhook_deliveries WHERE webhook_id = $1 \
                   AND state IN ('pending', 'retrying') AND lease_until > {DB_NOW_MS})) AS ok), \
             due AS ( \
               SELECT seq FROM webhook_deliveries, free WHERE free.ok AND webhook_id = $1 \
                 AND state IN ('pending', 'retrying') AND next_at <= $2 \
               ORDER BY seq LIMIT $3 FOR UPDATE) \
             UPDATE webhook_deliveries d SET lease_until = {DB_NOW_MS} + $4, lease_token = $5 \
             FROM due WHERE d.webhook_id = $1 AND d.seq = due.seq \
             RETURNING d.webhook_id, d.seq, d.event_id, d.event_type, d.attempts, d.first_at, \
               d.lease_token"
        );
        let mut deliveries: Vec<Claimed> = conn
            .transaction::<_, StorageError, _>(async |conn| {
                Ok(crate::db::cached_sql(sql)
                    .bind::<Text, _>(&t.webhook_id)
                    .bind::<BigInt, _>(now)
                    .bind::<BigInt, _>(per_webhook)
                    .bind::<BigInt, _>(lease_ms)
                    .bind::<Text, _>(&token)
                    .load(conn)
                    .await?)
            })
            .await?;
        if deliveries.is_empty() {
            continue;
        }
        deliveries.sort_by_key(|d| d.seq);
        out.push(Batch {
            webhook_id: t.webhook_id,
            tenant_id: t.tenant_id,
            url: t.url,
            deliveries,
        });
    }
    Ok(out)
}

/// An event's body as a webhook sends it (and `events.list` shows it).
pub async fn event_body(
    conn: &mut AsyncPgConnection,
    tenant_id: &str,
    seq: i64,
) -> Result<Option<serde_json::Value>> {
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
    let Some(event) = event else { return Ok(None) };
    let (event_id, tenant, data, occurred_at) = event.into_parts()?;
    Ok(Some(serde_json::json!({
        "eventId": event_id,
        "type": data.event_type(),
        "tenantId": tenant,
        "occurredAt": occurred_at,
        "data": data.to_data()?,
    })))
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

/// Counts an attempt of a claimed delivery before it is sent, so that a
/// replica killed between sending and recording leaves it counted: an event
/// never arrives more often than its delivery's `attempts`. Answers the
/// attempt's number, or `None` when the claim's lease was lost.
pub async fn start_attempt(conn: &mut AsyncPgConnection, claimed: &Claimed) -> Result<Option<i32>> {
    #[derive(QueryableByName)]
    struct Number {
        #[diesel(sql_type = Integer)]
        attempts: i32,
    }
    let n: Option<Number> = crate::db::single_write(conn, async |conn| {
        crate::db::cached_sql(
            "UPDATE webhook_deliveries SET attempts = attempts + 1 \
             WHERE webhook_id = $1 AND seq = $2 AND lease_token = $3 \
               AND state IN ('pending', 'retrying') RETURNING attempts",
        )
        .bind::<Text, _>(&claimed.webhook_id)
        .bind::<BigInt, _>(claimed.seq)
        .bind::<Text, _>(&claimed.lease_token)
        .get_result(conn)
        .await
        .optional()
    })
    .await?;
    Ok(n.map(|n| n.attempts))
}

/// Records attempt `number` (from [`start_attempt`]) of a claimed delivery
/// at `now`: the attempts log, the
/// delivery's next state and the webhook's run of failures, disabling it
/// (`webhook.disabled`) after 3 days of failures. Answers the attempt's
/// outcome (`delivered`, `retrying`, `failed`), or `None` when the claim's
/// lease was lost (nothing is written).
pub async fn record_attempt(
    conn: &mut AsyncPgConnection,
    batch: &Batch,
    claimed: &Claimed,
    number: i32,
    attempt: &Attempt,
    now: i64,
) -> Result<Option<&'static str>> {
    conn.transaction::<_, StorageError, _>(async |conn| {
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
               next_at = coalesce($5, next_at), lease_until = NULL \
             WHERE webhook_id = $1 AND seq = $2 AND lease_token = $6 \
               AND state IN ('pending', 'retrying')",
        )
        .bind::<Text, _>(&claimed.webhook_id)
        .bind::<BigInt, _>(claimed.seq)
        .bind::<Integer, _>(number)
        .bind::<Text, _>(outcome)
        .bind::<Nullable<BigInt>, _>(next)
        .bind::<Text, _>(&claimed.lease_token)
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
        #[derive(QueryableByName)]
        struct Run {
            #[diesel(sql_type = Nullable<BigInt>)]
            failing_since: Option<i64>,
            #[diesel(sql_type = Text)]
            url: String,
        }
        let run: Run = crate::db::cached_sql(
            "UPDATE webhooks SET failing_since = CASE WHEN $2 THEN NULL \
               ELSE coalesce(failing_since, $3) END \
             WHERE webhook_id = $1 RETURNING failing_since, url",
        )
        .bind::<Text, _>(&claimed.webhook_id)
        .bind::<diesel::sql_types::Bool, _>(attempt.delivered)
        .bind::<BigInt, _>(now)
        .get_result(conn)
        .await?;
        if run
            .failing_since
            .is_some_and(|since| now - since >= GIVE_UP_MS)
        {
            let disabled = crate::db::cached_sql(
                "UPDATE webhooks SET state = 'disabled', updated_at = $2 \
                 WHERE webhook_id = $1 AND state = 'enabled'",
            )
            .bind::<Text, _>(&claimed.webhook_id)
            .bind::<BigInt, _>(now)
            .execute(conn)
            .await?;
            if disabled == 1 {
                let data = EventData::WebhookDisabled(WebhookDisabled {
                    webhook_id: claimed.webhook_id.clone(),
                    url: run.url,
                });
                events::publish(conn, now, vec![NewEvent::new(&batch.tenant_id, data, now)])
                    .await?;
                tracing::warn!(
                    webhook = %claimed.webhook_id,
                    "webhook disabled after 3 days of failed deliveries"
                );
            }
        }
        Ok(Some(outcome))
    })
    .await
}

/// Gives back the leases of a batch's deliveries not attempted.
pub async fn release(conn: &mut AsyncPgConnection, claimed: &Claimed) -> Result<()> {
    crate::db::single_write(conn, async |conn| {
        crate::db::cached_sql(
            "UPDATE webhook_deliveries SET lease_until = NULL \
             WHERE webhook_id = $1 AND seq = $2 AND lease_token = $3",
        )
        .bind::<Text, _>(&claimed.webhook_id)
        .bind::<BigInt, _>(claimed.seq)
        .bind::<Text, _>(&claimed.lease_token)
        .execute(conn)
        .await
    })
    .await?;
    Ok(())
}
