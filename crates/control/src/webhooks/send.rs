//! One claimed batch of a webhook's deliveries, sent one at a time in log
//! order: each attempt re-reads the webhook (storage's `start_attempt`:
//! deleted or disabled stops the batch, a new url or secret is used at
//! once), checks its url against the rules again, POSTs the signed body
//! with the 10 s deadline and records the outcome. The batch stops at its
//! first failed attempt; whatever it did not attempt is put back, due as it
//! was.

use std::sync::Arc;
use std::time::{Duration, Instant};

use storage::ops::deliveries::{self, Attempt, Batch, Claimed, Sending, Start, Stopped};
use storage::{Result, StorageError};

use super::{DeliveryReport, WebhookContext, endpoint, ms, signature};

/// A webhook's body (contract 3.13): the event as `events.list` shows it.
/// Its serde names are the wire's; this is their one home on the sending
/// side.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct WebhookBody {
    event_id: String,
    tenant_id: String,
    #[serde(flatten)]
    payload: storage::model::event_data::EventData,
    occurred_at: i64,
}

impl TryFrom<storage::model::events::Event> for WebhookBody {
    type Error = StorageError;

    fn try_from(e: storage::model::events::Event) -> Result<WebhookBody> {
        let (event_id, tenant_id, payload, occurred_at) = e.into_parts()?;
        Ok(WebhookBody {
            event_id,
            tenant_id,
            payload,
            occurred_at,
        })
    }
}

/// Sends `batch`, then puts back what it did not attempt, and rings the
/// pass's bell (a place is free).
pub(super) async fn batch(ctx: Arc<WebhookContext>, batch: Batch) -> Result<DeliveryReport> {
    let sent = attempts(&ctx, &batch).await;
    let put_back = async {
        let mut conn = ctx.pool.get().await?;
        deliveries::release(&mut conn, &batch).await
    };
    let put_back = put_back.await;
    if let Some(wake) = &ctx.wake {
        wake.notify_one();
    }
    let mut report = sent?;
    report.put_back += u64::try_from(put_back?).unwrap_or(0);
    Ok(report)
}

/// The attempts of a batch, until one fails or the batch stops.
async fn attempts(ctx: &WebhookContext, batch: &Batch) -> Result<DeliveryReport> {
    let mut report = DeliveryReport::default();
    let root = batch.tenant_id == ctx.root.as_str();
    let guard = (!root).then(|| ctx.policy.clone());
    let client = providers::outbound::guarded_client(guard, ctx.rules.timeout, &ctx.options)
        .map_err(|e| StorageError::internal(format!("webhook client: {e}")))?;
    for d in &batch.deliveries {
        let start = {
            let mut conn = ctx.pool.get().await?;
            let now = ctx.clock.now(&mut conn).await?;
            deliveries::start_attempt(&mut conn, &ctx.keyring, d, ms(ctx.rules.lease), now).await?
        };
        let sending = match start {
            Start::Send(sending) => sending,
            Start::Stop(why) => {
                if why == Stopped::LeaseLost {
                    tracing::warn!(webhook = %batch.webhook_id, event = %d.event_id, "lease lost");
                } else {
                    tracing::info!(
                        webhook = %batch.webhook_id,
                        why = ?why,
                        "webhook changed after its deliveries were claimed: nothing more sent"
                    );
                }
                report.stopped += 1;
                break;
            }
        };
        let attempt = attempt(ctx, client.clone(), batch, d, &sending, root, &mut report).await?;
        let delivered = attempt.0.delivered;
        let mut conn = ctx.pool.get().await?;
        let at = ctx.clock.now(&mut conn).await?;
        match deliveries::record_attempt(&mut conn, d, sending.number, &attempt.0, at).await? {
            None => {
                tracing::info!(
                    webhook = %batch.webhook_id,
                    event = %d.event_id,
                    "attempt not recorded: the delivery ended or its lease was lost meanwhile"
                );
                break;
            }
            Some("delivered") => {
                report.delivered += 1;
                if let Some(occurred) = attempt.1 {
                    report.lags_ms.push(at - occurred);
                }
            }
            Some("failed") => report.failed += 1,
            Some(_) => report.retrying += 1,
        }
        if !delivered {
            // The rest goes back, due as it was: this endpoint is failing
            // now, and its next claim tries again.
            break;
        }
    }
    Ok(report)
}

/// One attempt of `d` as `sending` says (the webhook as it is now): its
/// url checked again, then the signed POST. Answers how it went and, when
/// an event was sent, the instant the event occurred.
async fn attempt(
    ctx: &WebhookContext,
    client: reqwest::Client,
    batch: &Batch,
    d: &Claimed,
    sending: &Sending,
    root: bool,
    report: &mut DeliveryReport,
) -> Result<(Attempt, Option<i64>)> {
    let failed = Attempt {
        status: None,
        delivered: false,
        duration_ms: 0,
    };
    let url = match endpoint::checked(&sending.url, root, &ctx.rules.endpoints) {
        Ok(url) => url,
        Err(refused) => {
            tracing::info!(
                webhook = %batch.webhook_id,
                event = %d.event_id,
                reason = refused.message(),
                "webhook url refused at the attempt"
            );
            report.refused += 1;
            return Ok((failed, None));
        }
    };
    let event = {
        let mut conn = ctx.pool.get().await?;
        deliveries::event(&mut conn, &batch.tenant_id, d.seq).await?
    };
    // The event is gone (its month archived): nothing to send.
    let Some(event) = event else {
        return Ok((failed, None));
    };
    let body = WebhookBody::try_from(event)?;
    let occurred = body.occurred_at;
    let attempt = post(
        &client,
        url,
        batch,
        d,
        &body,
        &sending.secrets,
        ctx.rules.timeout,
    )
    .await;
    Ok((attempt, Some(occurred)))
}

/// One attempt: the signed POST, its answer read up to 64 KiB and dropped.
async fn post(
    client: &reqwest::Client,
    url: reqwest::Url,
    batch: &Batch,
    d: &Claimed,
    body: &WebhookBody,
    secrets: &[String],
    timeout: Duration,
) -> Attempt {
    let started = Instant::now();
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0));
    let sent = client
        .post(url)
        .header("content-type", "application/json")
        .header("bc-webhook-id", &batch.webhook_id)
        .header("bc-event-id", &d.event_id)
        .header("bc-signature", signature(secrets, t, &bytes))
        .body(bytes)
        .send();
    let answered = tokio::time::timeout(timeout, async {
        let mut resp = sent.await?;
        let status = resp.status();
        // The answer's body is read up to 64 KiB and kept nowhere.
        let mut read = 0usize;
        while read < 64 * 1024 {
            match resp.chunk().await? {
                Some(chunk) => read += chunk.len(),
                None => break,
            }
        }
        Ok::<_, reqwest::Error>(status)
    })
    .await;
    let duration_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
    match answered {
        Ok(Ok(status)) => Attempt {
            status: Some(status.as_u16()),
            delivered: status.is_success(),
            duration_ms,
        },
        Ok(Err(e)) => {
            tracing::info!(
                webhook = %batch.webhook_id,
                event = %d.event_id,
                error = %without_url(&e),
                "webhook attempt failed"
            );
            Attempt {
                status: None,
                delivered: false,
                duration_ms,
            }
        }
        Err(_) => Attempt {
            status: None,
            delivered: false,
            duration_ms,
        },
    }
}

/// A request error without its URL (a tenant's endpoint may carry a token
/// in its query).
fn without_url(e: &reqwest::Error) -> String {
    let mut shown = String::new();
    let mut source: Option<&dyn std::error::Error> = Some(e);
    while let Some(s) = source {
        if !shown.is_empty() {
            shown.push_str(": ");
        }
        shown.push_str(&s.to_string());
        source = s.source();
    }
    match e.url() {
        Some(url) => shown.replace(url.as_str(), "<endpoint>"),
        None => shown,
    }
}
