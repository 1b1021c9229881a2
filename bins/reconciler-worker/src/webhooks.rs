//! `events.webhooks` (contract 3.13, 6): delivers the tenants' events to
//! their webhooks through `control`'s pipeline, which outlives a pass: a
//! pass claims as places free up and ends when nothing is due or after its
//! budget, and the batches still in flight go on into the next. Between
//! passes it sleeps until the interval ends, an event is committed
//! (`NOTIFY`) or a batch ends, whichever comes first; a retry that falls due
//! is sent within the interval.

use std::sync::OnceLock;
use std::time::Duration;

use control::webhooks::{Deliverer, WebhookContext};

use crate::passes::{Pass, PassContext, PassFuture, PassReport};
use crate::vms::PassPause;

/// The pass's name.
pub const PASS: &str = "events.webhooks";

/// `events.webhooks`: the worker's one delivery pipeline, made at its first
/// run.
#[derive(Default)]
pub struct Webhooks {
    pipeline: OnceLock<Deliverer>,
}

impl Webhooks {
    fn pipeline(&self, ctx: &PassContext) -> &Deliverer {
        self.pipeline.get_or_init(|| {
            Deliverer::new(WebhookContext {
                pool: ctx.pool.clone(),
                clock: ctx.clock,
                root: ctx.root_tenant.clone(),
                keyring: ctx.keyring.clone(),
                policy: ctx.webhook_policy.clone(),
                options: ctx.provider_options.clone(),
                rules: ctx.webhook_rules.clone(),
                wake: Some(ctx.events_wake.clone()),
            })
        })
    }
}

impl Pass for Webhooks {
    fn name(&self) -> &'static str {
        PASS
    }

    fn run<'a>(&'a self, ctx: &'a PassContext) -> PassFuture<'a> {
        Box::pin(async move {
            let r = self.pipeline(ctx).deliver().await?;
            let mut counts = vec![
                ("deliveriesRecorded", r.recorded),
                ("delivered", r.delivered),
                ("retrying", r.retrying),
                ("failed", r.failed),
                ("refused", r.refused),
                ("putBack", r.put_back),
                ("batchesStopped", r.stopped),
                ("deliveriesRemoved", r.removed),
            ];
            counts.retain(|(_, n)| *n > 0);
            Ok(PassReport {
                counts,
                webhook_lags_ms: r.lags_ms,
                ..PassReport::default()
            })
        })
    }

    fn pause<'a>(&'a self, ctx: &'a PassContext, interval: Duration) -> PassPause<'a> {
        Box::pin(async move {
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                () = ctx.events_wake.notified() => {}
            }
        })
    }
}
