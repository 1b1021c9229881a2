//! `vps.instances` (contract 3.12, 6): drives the steps of managed
//! instances and lists each account's VMs for drift. Between passes it
//! sleeps until the interval ends, the next put-off step is due, or the
//! api-server records a step (`NOTIFY`), whichever comes first.

use std::sync::Arc;
use std::time::Duration;

use control::vms::{ListingReport, StepEnd, VmContext, drive_steps, list_accounts};
use futures::StreamExt;
use storage::clock::db_now_ms;
use storage::ops::vms::outbox::STEPS_CHANNEL;
use tokio::sync::Notify;

use crate::passes::{Pass, PassContext, PassFuture, PassReport};

/// `vps.instances`.
pub struct Instances;

impl Pass for Instances {
    fn name(&self) -> &'static str {
        "vps.instances"
    }

    fn run<'a>(&'a self, ctx: &'a PassContext) -> PassFuture<'a> {
        Box::pin(async move {
            let vm = VmContext {
                pool: &ctx.pool,
                clock: ctx.clock,
                root: &ctx.root_tenant,
                factory: ctx.instances.as_ref(),
                keyring: &ctx.keyring,
                rules: &ctx.vm_rules,
                pacer: &ctx.vm_pacer,
                owner: &ctx.vm_owner,
            };
            // Borrowers whose notice is over are deleted first: their
            // delete steps go with the others (contract 3.14).
            let reclaimed = reclaim_due(ctx).await?;
            // Listings run beside the steps, never behind them: every
            // interval while the steps' pipeline runs.
            let steps_done = Notify::new();
            let (steps, listing) = tokio::join!(
                async {
                    let steps = drive_steps(&vm).await;
                    steps_done.notify_one();
                    steps
                },
                list_while(&vm, &steps_done),
            );
            let (mut steps, listing) = (steps?, listing?);
            if listing.drift.restopped > 0 {
                steps.extend(drive_steps(&vm).await?);
            }
            let count = |end: StepEnd| steps.iter().filter(|s| s.end == end).count() as u64;
            let mut counts = vec![
                ("reclaimed", reclaimed),
                ("stepsDone", count(StepEnd::Done)),
                ("stepsFailed", count(StepEnd::Failed)),
                ("stepsPutOff", count(StepEnd::Waiting)),
                ("stepsLeaseLost", count(StepEnd::LeaseLost)),
                ("accountsListed", listing.listed),
                ("listingsFailed", listing.failed),
                ("orphansDeleted", listing.orphans_deleted),
                ("orphansFound", listing.orphans_found),
                ("driftStopped", listing.drift.stopped),
                ("driftRestopped", listing.drift.restopped),
                ("driftLost", listing.drift.lost),
            ];
            counts.retain(|(_, n)| *n > 0);
            Ok(PassReport {
                counts,
                steps,
                drift: listing.drift,
                orphans_deleted: listing.orphans_deleted,
                ..PassReport::default()
            })
        })
    }

    fn pause<'a>(&'a self, ctx: &'a PassContext, interval: Duration) -> PassPause<'a> {
        Box::pin(async move {
            let now = control::vms::wall_ms();
            let resume = ctx.vm_pacer.next_resume(now).unwrap_or(interval);
            let paused: Vec<String> = ctx
                .vm_pacer
                .allowances(now)
                .into_iter()
                .filter_map(|(account, n)| (n == 0).then_some(account))
                .collect();
            let wait = next_step_in(ctx, &paused)
                .await
                .map_or(interval, |d| d.min(interval))
                .min(resume)
                .min(next_interrupt_in(ctx).await.unwrap_or(interval));
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = ctx.vm_wake.notified() => {}
            }
        })
    }
}

/// Lists the accounts' VMs now, then again every listing interval (at
/// least a second) until `done` rings; the reports summed.
async fn list_while(vm: &VmContext<'_>, done: &Notify) -> storage::Result<ListingReport> {
    let mut total = list_accounts(vm).await?;
    let every = vm.rules.list_interval.max(Duration::from_secs(1));
    loop {
        tokio::select! {
            () = done.notified() => return Ok(total),
            () = tokio::time::sleep(every) => {}
        }
        let more = list_accounts(vm).await?;
        total.listed += more.listed;
        total.failed += more.failed;
        total.orphans_deleted += more.orphans_deleted;
        total.orphans_found += more.orphans_found;
        total.drift += more.drift;
    }
}

/// How long a pass may wait.
pub type PassPause<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>>;

/// How long until the next open step of an account not `paused` is due
/// (at least 50 ms).
async fn next_step_in(ctx: &PassContext, paused: &[String]) -> Option<Duration> {
    let mut conn = ctx.pool.get().await.ok()?;
    let due = storage::ops::vms::next_due(&mut conn, paused)
        .await
        .ok()??;
    let now = db_now_ms(&mut conn).await.ok()?;
    Some(Duration::from_millis(
        u64::try_from(due.saturating_sub(now)).unwrap_or(0).max(50),
    ))
}

/// Deletes the borrowers whose interruption is due (`deletedReason:
/// "reclaimed"`), each in its own transaction: how many.
async fn reclaim_due(ctx: &PassContext) -> anyhow::Result<u64> {
    let mut conn = ctx.pool.get().await?;
    let mut reclaimed = 0;
    loop {
        let now = ctx.clock.now(&mut conn).await?;
        let due = storage::db::read_only(&mut conn, async |conn| {
            storage::ops::lending::due(conn, now, 100).await
        })
        .await?;
        if due.is_empty() {
            return Ok(reclaimed);
        }
        let mut done = 0;
        for id in &due {
            if storage::ops::lending::reclaim(&mut conn, id, now).await? {
                done += 1;
            }
        }
        reclaimed += done;
        if done == 0 {
            return Ok(reclaimed);
        }
    }
}

/// How long until the next interruption is due (at least 50 ms).
async fn next_interrupt_in(ctx: &PassContext) -> Option<Duration> {
    let mut conn = ctx.pool.get().await.ok()?;
    let now = ctx.clock.now(&mut conn).await.ok()?;
    let at = storage::ops::lending::next_due(&mut conn).await.ok()??;
    Some(Duration::from_millis(
        u64::try_from(at.saturating_sub(now)).unwrap_or(0).max(50),
    ))
}

/// Wakes `wake` whenever a step is recorded: `LISTEN` on a connection of
/// its own, opened again after a failure. Runs until the process ends.
pub async fn listen(url: String, wake: Arc<Notify>) {
    listen_on(url, STEPS_CHANNEL, wake).await;
}

/// Wakes `wake` at every notification on `channel` (see [`listen`]).
pub async fn listen_on(url: String, channel: &'static str, wake: Arc<Notify>) {
    loop {
        match storage::db::establish(&url).await {
            Ok(mut conn) => {
                use diesel_async::RunQueryDsl;
                let listening = diesel::sql_query(format!("LISTEN {channel}"))
                    .execute(&mut conn)
                    .await;
                if let Err(e) = listening {
                    tracing::warn!(error = %e, channel, "LISTEN failed: work waits an interval");
                } else {
                    tracing::info!(channel, "listening for notifications");
                    // A step recorded while not listening is found now.
                    wake.notify_one();
                    let mut stream = std::pin::pin!(conn.notifications_stream());
                    while let Some(n) = stream.next().await {
                        match n {
                            Ok(_) => wake.notify_one(),
                            Err(e) => {
                                tracing::warn!(error = %e, "the LISTEN connection failed");
                                break;
                            }
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not open the LISTEN connection"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
