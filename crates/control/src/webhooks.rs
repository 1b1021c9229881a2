//! Webhook delivery (contract 3.13), the `events.webhooks` pass's work:
//! record the new events each webhook must send, claim due deliveries one
//! replica per webhook, send each signed (`bc-signature: t=..,v1=..`, one
//! `v1=` per signing secret) with a 10 s deadline through a client that
//! refuses redirects, proxies and, for other tenants' endpoints, internal
//! addresses, and record every attempt. A failing delivery is retried on
//! its schedule and never holds back the ones after it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use hmac::{Hmac, Mac};
use providers::ProviderPolicy;
use providers::gce::GceProviderOptions;
use sha2::Sha256;
use storage::Clock;
use storage::crypto::Keyring;
use storage::db::DbPool;
use storage::ids::TenantId;
use storage::ops::deliveries::{self, Attempt, Batch, Claimed};
use storage::{Result, StorageError};

/// How deliveries are paced.
#[derive(Debug, Clone)]
pub struct WebhookRules {
    /// The deadline of one request (10 s).
    pub timeout: Duration,
    /// A claim's lease: longer than a batch takes.
    pub lease: Duration,
    /// Webhooks sent to at once (each one request at a time, in log order).
    pub concurrency: usize,
    /// Deliveries claimed per webhook at once.
    pub batch: i64,
}

impl Default for WebhookRules {
    fn default() -> Self {
        WebhookRules {
            timeout: Duration::from_secs(10),
            lease: Duration::from_secs(300),
            concurrency: 16,
            batch: 20,
        }
    }
}

/// What delivering needs.
pub struct WebhookContext<'a> {
    /// Connections.
    pub pool: &'a DbPool,
    /// The product's clock (attempts' instants, the retry schedule).
    pub clock: Clock,
    /// The root tenant (its webhooks may name any endpoint).
    pub root: &'a TenantId,
    /// Opens the signing secrets.
    pub keyring: &'a Keyring,
    /// `BC_WEBHOOK_ENDPOINTS`.
    pub policy: Arc<ProviderPolicy>,
    /// The extra TLS roots and DNS overrides of the provider clients.
    pub options: &'a GceProviderOptions,
    /// Pacing.
    pub rules: &'a WebhookRules,
}

/// What a round did.
#[derive(Debug, Clone, Default)]
pub struct DeliveryReport {
    /// Deliveries recorded from new events.
    pub recorded: u64,
    /// Attempts that delivered.
    pub delivered: u64,
    /// Attempts that failed and will be retried.
    pub retrying: u64,
    /// Deliveries given up after 3 days.
    pub failed: u64,
    /// From each delivered event's commit instant to its delivery (product
    /// clock, ms).
    pub lags_ms: Vec<i64>,
}

/// `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">` for each secret.
pub fn signature(secrets: &[String], t: i64, body: &[u8]) -> String {
    let mut header = format!("t={t}");
    for secret in secrets {
        // HMAC takes a key of any length.
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
            continue;
        };
        mac.update(t.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        header.push_str(",v1=");
        header.push_str(&hex::encode(mac.finalize().into_bytes()));
    }
    header
}

/// One round: new events recorded, then every due delivery attempted once.
pub async fn deliver(ctx: &WebhookContext<'_>) -> Result<DeliveryReport> {
    let mut report = DeliveryReport::default();
    let (now, batches) = {
        let mut conn = ctx.pool.get().await?;
        let now = ctx.clock.now(&mut conn).await?;
        report.recorded = deliveries::record_new(&mut conn, now).await?;
        let lease = i64::try_from(ctx.rules.lease.as_millis()).unwrap_or(i64::MAX);
        let webhooks = i64::try_from(ctx.rules.concurrency).unwrap_or(16) * 4;
        let batches = deliveries::claim(&mut conn, now, webhooks, ctx.rules.batch, lease).await?;
        (now, batches)
    };
    let mut runs = futures::stream::iter(batches)
        .map(|b| async move { send_batch(ctx, &b, now).await })
        .buffer_unordered(ctx.rules.concurrency.max(1));
    while let Some(r) = runs.next().await {
        match r {
            Ok(r) => {
                report.delivered += r.delivered;
                report.retrying += r.retrying;
                report.failed += r.failed;
                report.lags_ms.extend(r.lags_ms);
            }
            Err(e) => tracing::error!(error = %e, "a webhook's deliveries could not be recorded"),
        }
    }
    Ok(report)
}

/// Sends a webhook's claimed deliveries one after the other, in log order.
async fn send_batch(ctx: &WebhookContext<'_>, batch: &Batch, now: i64) -> Result<DeliveryReport> {
    let mut report = DeliveryReport::default();
    let secrets = {
        let mut conn = ctx.pool.get().await?;
        storage::ops::webhooks::signing_secrets(&mut conn, ctx.keyring, &batch.webhook_id, now)
            .await
    };
    let guard = (batch.tenant_id != ctx.root.as_str()).then(|| ctx.policy.clone());
    let client = providers::outbound::guarded_client(guard, ctx.rules.timeout, ctx.options)
        .map_err(|e| StorageError::internal(format!("webhook client: {e}")));
    let (secrets, client) = match (secrets, client) {
        (Ok(s), Ok(c)) => (s, c),
        (Err(e), _) | (_, Err(e)) => {
            let mut conn = ctx.pool.get().await?;
            for d in &batch.deliveries {
                deliveries::release(&mut conn, d).await?;
            }
            return Err(e);
        }
    };
    for d in &batch.deliveries {
        let body = {
            let mut conn = ctx.pool.get().await?;
            deliveries::event_body(&mut conn, &batch.tenant_id, d.seq).await?
        };
        let number = {
            let mut conn = ctx.pool.get().await?;
            deliveries::start_attempt(&mut conn, d).await?
        };
        let Some(number) = number else {
            tracing::warn!(webhook = %batch.webhook_id, event = %d.event_id, "lease lost");
            break;
        };
        let attempt = match &body {
            Some(body) => post(&client, batch, d, body, &secrets, ctx.rules.timeout).await,
            // The event is gone (its month archived): nothing to send.
            None => Attempt {
                status: None,
                delivered: false,
                duration_ms: 0,
            },
        };
        let mut conn = ctx.pool.get().await?;
        let at = ctx.clock.now(&mut conn).await?;
        match deliveries::record_attempt(&mut conn, batch, d, number, &attempt, at).await? {
            None => {
                tracing::warn!(webhook = %batch.webhook_id, event = %d.event_id, "lease lost");
            }
            Some("delivered") => {
                report.delivered += 1;
                if let Some(occurred) = body.as_ref().and_then(|b| b["occurredAt"].as_i64()) {
                    report.lags_ms.push(at - occurred);
                }
            }
            Some("failed") => report.failed += 1,
            Some(_) => report.retrying += 1,
        }
    }
    Ok(report)
}

/// One attempt: the signed POST, its answer read up to 64 KiB and dropped.
async fn post(
    client: &reqwest::Client,
    batch: &Batch,
    d: &Claimed,
    body: &serde_json::Value,
    secrets: &[String],
    timeout: Duration,
) -> Attempt {
    let started = Instant::now();
    let bytes = body.to_string().into_bytes();
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0));
    let sent = client
        .post(&batch.url)
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

#[cfg(test)]
mod tests {
    use super::signature;

    /// Expected values from Python's `hmac.new(secret, b"<t>.<body>", sha256)`.
    #[test]
    fn the_signature_is_hmac_sha256_of_the_timestamp_and_body_per_secret() {
        let body = br#"{"a":1}"#;
        assert_eq!(
            signature(&["whsec_test".to_owned()], 1_700_000_000, body),
            "t=1700000000,\
             v1=38877139021993b830af32feea6e18a8da83eb2f6e49ee50bd9e4cf4ca4d3789"
        );
        // During a rotation both secrets sign, the current one first.
        let both = signature(
            &["whsec_test".to_owned(), "whsec_old".to_owned()],
            1_700_000_000,
            body,
        );
        assert!(
            both.ends_with(",v1=b9d801502bb535e960ee9aeee7a294b082bda5089d79c7db610b85116ce6faa6")
        );
        assert_eq!(both.matches("v1=").count(), 2);
    }
}
