//! Webhook delivery (contract 3.13), the `events.webhooks` pass's work: a
//! pipeline, not rounds (3.13 r4). It records the new events each webhook
//! must send, claims webhooks' due deliveries as places free up (one claim
//! per webhook, round-robin across tenants, at most
//! `BC_WEBHOOK_TENANT_CONCURRENCY` webhooks of a tenant at once, every
//! replica's claims counted) and sends each claimed batch in a task of its
//! own (`send`): one attempt at a time in log order, the webhook read
//! again at each, signed (`bc-signature: t=..,v1=..`, one `v1=` per signing
//! secret) with a 10 s deadline through a client that refuses redirects,
//! proxies and, for other tenants' endpoints, internal addresses; a batch
//! stops at its first failed attempt and puts the rest back. No pass waits
//! for a slow attempt: a pass ends when nothing is in flight and nothing is
//! due, or after its budget, handing the batches still in flight to the
//! next pass. It also removes the deliveries past their retention.

mod endpoint;
mod send;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use providers::gce::GceProviderOptions;
use providers::{Origins, ProviderPolicy};
use sha2::Sha256;
use storage::Clock;
use storage::Result;
use storage::crypto::Keyring;
use storage::db::DbPool;
use storage::ids::TenantId;
use storage::ops::deliveries::{self, ClaimRules};
use tokio::sync::Notify;
use tokio::task::JoinSet;

pub use endpoint::{Refused, checked};

/// How often a pass with work in flight looks for deliveries that fell due
/// (a retry's time) besides the commits it is woken for.
const TICK: Duration = Duration::from_millis(500);

/// The least time between two runs of the retention's removal.
const UPKEEP_EVERY: Duration = Duration::from_secs(60);

/// How deliveries are paced.
#[derive(Debug, Clone)]
pub struct WebhookRules {
    /// The deadline of one request (10 s).
    pub timeout: Duration,
    /// A claim's lease (`BC_WEBHOOK_LEASE`, 5 min): how long a batch stays
    /// claimed without progress; each attempt renews it.
    pub lease: Duration,
    /// Webhooks one worker sends to at once (each one request at a time).
    pub concurrency: usize,
    /// Webhooks of one tenant sent to at once, by every replica
    /// (`BC_WEBHOOK_TENANT_CONCURRENCY`, 4).
    pub tenant_concurrency: usize,
    /// Deliveries claimed per webhook at once.
    pub batch: i64,
    /// How long deliveries and their attempts are kept after their last
    /// attempt (`BC_WEBHOOK_RETENTION`, 30 days).
    pub retention: Duration,
    /// The origins other tenants' webhooks may name over `http` or on
    /// internal addresses (`BC_WEBHOOK_ENDPOINTS`), checked at every attempt.
    pub endpoints: Origins,
    /// The longest a pass claims before it ends and hands its batches in
    /// flight to the next (`None`: until nothing is due, as `--once` runs;
    /// the worker's interval otherwise).
    pub pass_budget: Option<Duration>,
}

impl Default for WebhookRules {
    fn default() -> Self {
        WebhookRules {
            timeout: Duration::from_secs(10),
            lease: Duration::from_secs(300),
            concurrency: 256,
            tenant_concurrency: 4,
            batch: 20,
            retention: Duration::from_secs(30 * 24 * 3600),
            endpoints: Origins::default(),
            pass_budget: Some(Duration::from_secs(10)),
        }
    }
}

/// What delivering needs, shared by a pass and the batches it sends.
pub struct WebhookContext {
    /// Connections.
    pub pool: DbPool,
    /// The product's clock (attempts' instants, the retry schedule).
    pub clock: Clock,
    /// The root tenant (its webhooks may name any endpoint).
    pub root: TenantId,
    /// Opens the signing secrets.
    pub keyring: Keyring,
    /// `BC_WEBHOOK_ENDPOINTS`, as the connect-time guard applies it.
    pub policy: Arc<ProviderPolicy>,
    /// The extra TLS roots and DNS overrides of the provider clients.
    pub options: GceProviderOptions,
    /// Pacing.
    pub rules: WebhookRules,
    /// Rung when events are committed (`NOTIFY`); a batch that ends rings
    /// it too, so the next claim comes at once.
    pub wake: Option<Arc<Notify>>,
}

/// What a pass did.
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
    /// Attempts whose url the rules refused (counted in `retrying` or
    /// `failed` too).
    pub refused: u64,
    /// Claimed deliveries put back unattempted (after a failed attempt of
    /// their batch, or when it stopped).
    pub put_back: u64,
    /// Batches stopped because their webhook was deleted or disabled after
    /// the claim, or their lease was lost.
    pub stopped: u64,
    /// Deliveries removed after their retention.
    pub removed: u64,
    /// From each delivered event's commit instant to its delivery (product
    /// clock, ms).
    pub lags_ms: Vec<i64>,
}

impl DeliveryReport {
    fn add(&mut self, other: DeliveryReport) {
        self.recorded += other.recorded;
        self.delivered += other.delivered;
        self.retrying += other.retrying;
        self.failed += other.failed;
        self.refused += other.refused;
        self.put_back += other.put_back;
        self.stopped += other.stopped;
        self.removed += other.removed;
        self.lags_ms.extend(other.lags_ms);
    }
}

/// Whole milliseconds of `d`.
fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
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

/// The delivery pipeline of one worker: the batches in flight outlive the
/// pass that claimed them.
pub struct Deliverer {
    ctx: Arc<WebhookContext>,
    running: tokio::sync::Mutex<JoinSet<Result<DeliveryReport>>>,
    upkept_at: Mutex<Option<Instant>>,
}

impl Deliverer {
    /// A pipeline with nothing in flight.
    pub fn new(ctx: WebhookContext) -> Deliverer {
        Deliverer {
            ctx: Arc::new(ctx),
            running: tokio::sync::Mutex::new(JoinSet::new()),
            upkept_at: Mutex::new(None),
        }
    }

    /// One pass: removes what is past its retention (at most once a
    /// minute), then records new events and claims due deliveries whenever
    /// a place is free, until nothing is in flight and nothing is due, or
    /// until the pass budget is spent (the batches in flight then go on,
    /// and the next pass collects them). Answers what ended in this pass.
    pub async fn deliver(&self) -> Result<DeliveryReport> {
        let ctx = &self.ctx;
        let mut running = self.running.lock().await;
        let started = Instant::now();
        let mut report = DeliveryReport::default();
        // Deliveries go on whatever the removal met; it is tried again
        // a minute later.
        if let Err(e) = self.upkeep(&mut report).await {
            tracing::warn!(error = %e, "removing webhook deliveries past their retention failed");
        }
        let rules = &ctx.rules;
        let concurrency = rules.concurrency.max(1);
        loop {
            while let Some(ended) = running.try_join_next() {
                collect(&mut report, ended);
            }
            let spent = rules.pass_budget.is_some_and(|b| started.elapsed() >= b);
            let room = concurrency.saturating_sub(running.len());
            let mut full = false;
            if room > 0 && !spent {
                let (recorded, batches) = claim(ctx, room).await?;
                report.recorded += recorded;
                full = batches.len() >= room;
                for batch in batches {
                    running.spawn(send::batch(ctx.clone(), batch));
                }
            }
            if running.is_empty() || spent {
                break;
            }
            if full {
                // Places may have freed meanwhile: claim again first.
                continue;
            }
            // Never wait for the slowest: the first batch to end, a commit,
            // or a moment (a retry may fall due).
            let wake = async {
                match &ctx.wake {
                    Some(w) => w.notified().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some(ended) = running.join_next() => collect(&mut report, ended),
                () = wake => {}
                () = tokio::time::sleep(TICK) => {}
            }
        }
        Ok(report)
    }

    /// Removes the deliveries past their retention, when the last try is a
    /// minute old or more (always in a worker's first pass).
    async fn upkeep(&self, report: &mut DeliveryReport) -> Result<()> {
        {
            let mut last = self
                .upkept_at
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if last.is_some_and(|at| at.elapsed() < UPKEEP_EVERY) {
                return Ok(());
            }
            *last = Some(Instant::now());
        }
        let mut conn = self.ctx.pool.get().await?;
        let now = self.ctx.clock.now(&mut conn).await?;
        let removed =
            deliveries::remove_expired(&mut conn, now, ms(self.ctx.rules.retention)).await?;
        report.removed += removed.deliveries;
        Ok(())
    }
}

/// New events recorded, then up to `room` webhooks' due deliveries claimed.
async fn claim(ctx: &WebhookContext, room: usize) -> Result<(u64, Vec<deliveries::Batch>)> {
    let mut conn = ctx.pool.get().await?;
    let now = ctx.clock.now(&mut conn).await?;
    let recorded = deliveries::record_new(&mut conn, now).await?;
    let rules = ClaimRules {
        webhooks: i64::try_from(room).unwrap_or(i64::MAX),
        per_webhook: ctx.rules.batch,
        per_tenant: i64::try_from(ctx.rules.tenant_concurrency.max(1)).unwrap_or(4),
        lease_ms: ms(ctx.rules.lease),
    };
    Ok((recorded, deliveries::claim(&mut conn, now, rules).await?))
}

fn collect(
    report: &mut DeliveryReport,
    ended: std::result::Result<Result<DeliveryReport>, tokio::task::JoinError>,
) {
    match ended {
        Ok(Ok(r)) => report.add(r),
        Ok(Err(e)) => tracing::error!(error = %e, "a webhook's deliveries could not be recorded"),
        Err(e) => tracing::error!(error = %e, "a webhook's batch panicked or was cancelled"),
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
