//! Which steps a worker drives, and how many at once (contract 3.12 r4): a
//! pipeline, not batches. Up to `BC_VM_CONCURRENCY` steps call the provider
//! at once; a step waiting for its operation keeps its claim but no slot, so
//! the next step is claimed and sent as soon as one ends or waits. Claims
//! are round-robin across tenants (storage's `claim_steps`), so one tenant's
//! backlog of any size delays another tenant's step by about one provider
//! call, never by the backlog.

use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use storage::Result;
use storage::ops::vms;
use tokio::sync::{Notify, Semaphore, SemaphorePermit};

use super::{StepReport, VmContext, ms, step};

/// The most claimed steps one worker holds at once (waiting for their
/// operations included), as a multiple of its concurrency.
const HELD_PER_SLOT: usize = 16;

/// How often the pipeline looks for steps that became due while others run.
const TICK: Duration = Duration::from_millis(500);

/// The slots of steps calling the provider, and a bell rung when one frees.
pub(super) struct Slots {
    permits: Semaphore,
    freed: Notify,
}

/// A step's slot while it calls the provider.
pub(super) struct Slot<'a> {
    _permit: SemaphorePermit<'a>,
    freed: &'a Notify,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.freed.notify_one();
    }
}

impl Slots {
    /// Waits for a free slot.
    pub(super) async fn take(&self) -> Slot<'_> {
        let permit = self.permits.acquire().await;
        Slot {
            _permit: permit.unwrap_or_else(|_| unreachable!("the semaphore is never closed")),
            freed: &self.freed,
        }
    }

    pub(super) fn try_take(&self) -> Option<Slot<'_>> {
        Some(Slot {
            _permit: self.permits.try_acquire().ok()?,
            freed: &self.freed,
        })
    }
}

/// Claims and drives steps until none is in flight and none is due now (a
/// step put off for later is left to a later run).
pub async fn drive_steps(ctx: &VmContext<'_>) -> Result<Vec<StepReport>> {
    let concurrency = ctx.rules.concurrency.max(1);
    let slots = Slots {
        permits: Semaphore::new(concurrency),
        freed: Notify::new(),
    };
    let held_max = concurrency.saturating_mul(HELD_PER_SLOT);
    let lease_ms = ms(ctx.rules.lease);
    let mut reports = Vec::new();
    let mut running = FuturesUnordered::new();
    loop {
        // Claim as many as there are free slots (and room to hold them);
        // each claimed step starts with a slot taken here when one is still
        // free, so the count of free slots stays right.
        let room = slots
            .permits
            .available_permits()
            .min(held_max.saturating_sub(running.len()));
        if room > 0 {
            let limit = i64::try_from(room).unwrap_or(i64::MAX);
            let claiming = async {
                let mut conn = ctx.pool.get().await?;
                let allowances = ctx.pacer.allowances(super::wall_ms());
                let fresh = ctx.pacer.full_allowance();
                vms::claim_steps(&mut conn, ctx.owner, limit, lease_ms, &allowances, fresh).await
            };
            let mut claiming = std::pin::pin!(claiming);
            // The running steps go on while the claim waits for a connection
            // (they hold the others and give them back only when polled).
            let claims = loop {
                tokio::select! {
                    c = &mut claiming => break c?,
                    Some(r) = running.next(), if !running.is_empty() => collect(&mut reports, r),
                }
            };
            // Running steps polled while the claim waited may have taken
            // places meanwhile: a step without one waits for one before it
            // calls the provider.
            for claim in claims {
                running.push(step::drive(ctx, &slots, slots.try_take(), claim));
            }
        }
        if running.is_empty() {
            break;
        }
        // Wait for a step to end or free its slot, or a moment (new steps
        // may be due): never for the slowest step.
        let ended = tokio::select! {
            r = running.next() => r,
            () = slots.freed.notified() => None,
            () = tokio::time::sleep(TICK) => None,
        };
        if let Some(r) = ended {
            collect(&mut reports, r);
        }
        // Gather every other step that ended meanwhile.
        while let Some(Some(r)) = running.next().now_or_never() {
            collect(&mut reports, r);
        }
    }
    Ok(reports)
}

fn collect(reports: &mut Vec<StepReport>, r: Result<StepReport>) {
    match r {
        Ok(report) => reports.push(report),
        Err(e) => tracing::error!(error = %e, "a vm step could not be recorded"),
    }
}
