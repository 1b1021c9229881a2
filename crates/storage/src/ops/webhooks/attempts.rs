//! A webhook's attempts: the `webhook.test` event it is sent, and the log
//! of its attempts, newest first.

use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use super::*;

/// `webhooks.test`: publishes `webhook.test { webhookId }` in the tenant
/// and answers its event id.
pub async fn test(
    conn: &mut AsyncPgConnection,
    tenant: &TenantId,
    id: &WebhookId,
    now: i64,
) -> Result<String> {
    let (tenant, id) = (tenant.as_str(), id.as_str());
    conn.transaction::<_, StorageError, _>(async move |conn| {
        let row = lock(conn, tenant, id).await?;
        let data = EventData::WebhookTest(WebhookTest {
            webhook_id: row.webhook_id,
        });
        events::publish(conn, now, vec![NewEvent::new(tenant, data, now)]).await?;
        // The tenant's head row is locked by the publish until commit: its
        // last event is this one.
        Ok(ev::table
            .filter(ev::tenant_id.eq(tenant))
            .order(ev::seq.desc())
            .select(ev::event_id)
            .first(conn)
            .await?)
    })
    .await
}

/// One page of a webhook's attempts.
#[derive(Debug, Clone)]
pub struct AttemptPage {
    /// Attempts after the position, oldest first.
    pub items: Vec<AttemptRow>,
    /// The position after the last one returned, or the given position.
    pub next_seq: i64,
    /// Whether more follow now.
    pub has_more: bool,
}

/// `webhooks.deliveries`: the webhook's attempts after position `after`
/// (0: from the first), oldest first, at most `limit`. Another tenant's, a
/// deleted or an unknown webhook is `NOT_FOUND`.
pub async fn deliveries(
    conn: &mut AsyncPgConnection,
    tenant: &TenantId,
    id: &WebhookId,
    after: i64,
    limit: i64,
) -> Result<AttemptPage> {
    let id = id.as_str();
    find(conn, tenant.as_str(), id).await?;
    let mut items: Vec<AttemptRow> = wa::table
        .filter(wa::webhook_id.eq(id))
        .filter(wa::attempt_seq.gt(after))
        .order(wa::attempt_seq.asc())
        .limit(limit.saturating_add(1))
        .select(AttemptRow::as_select())
        .load(conn)
        .await?;
    let limit = usize::try_from(limit).unwrap_or(0);
    let has_more = items.len() > limit;
    items.truncate(limit);
    let next_seq = items.last().map_or(after, |a| a.attempt_seq);
    Ok(AttemptPage {
        items,
        next_seq,
        has_more,
    })
}
