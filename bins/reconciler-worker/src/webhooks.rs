//! `events.webhooks` (contract 3.13, 6): delivers the tenants' events to
//! their webhooks. Between rounds it sleeps until the interval ends or an
//! event is committed (`NOTIFY`), whichever comes first; a retry that falls
//! due is sent at the next round.

use std::time::Duration;

use control::webhooks::{WebhookContext, deliver};

use crate::passes::{Pass, PassContext, PassFuture, PassReport};
use crate::vms::PassPause;

/// The pass's name.
pub const PASS: &str = "events.webhooks";

/// `events.webhooks`.
pub struct Webhooks;

impl Pass for Webhooks {
    fn name(&self) -> &'static str {
        PASS
    }

    fn run<'a>(&'a self, ctx: &'a PassContext) -> PassFuture<'a> {
        Box::pin(async move {
            let wh = WebhookContext {
                pool: &ctx.pool,
                clock: ctx.clock,
                root: &ctx.root_tenant,
                keyring: &ctx.keyring,
                policy: ctx.webhook_policy.clone(),
                options: &ctx.provider_options,
                rules: &ctx.webhook_rules,
            };
            let r = deliver(&wh).await?;
            let mut counts = vec![
                ("deliveriesRecorded", r.recorded),
                ("delivered", r.delivered),
                ("retrying", r.retrying),
                ("failed", r.failed),
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
