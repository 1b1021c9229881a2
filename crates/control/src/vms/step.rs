//! Driving one claimed step (contract 3.12): sent with its `requestId` (the
//! same on every try), its operation read until `DONE` (at most once a
//! second, less often as it ages), the VM read back to confirm, the outcome
//! recorded with storage. While its operation runs the step keeps its claim
//! (the lease renewed) but no provider slot: the pipeline sends others.
//! A retryable failure puts it off with backoff; a quota refusal puts it off
//! until the account's pause ends, neither failed nor counted as a try.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::look::{Facts, Round, Target, look};
use super::pipeline::{Slot, Slots};
use super::{StepEnd, StepReport, VmContext, build, ms, wall_ms};
use grants_core::vm::{StepFailure, StepKind};
use providers::{MANAGED_LABEL, ProviderError, Throttle, VmSpec};
use storage::Result;
use storage::clock::db_now_ms;
use storage::ops::vms::{self, OperationChange, Outcome, Progress, StepClaim, StepWork};

/// Drives a claimed step until it ends or is put off. It calls the provider
/// only holding a slot of `slots` (it starts with `slot`, if one was free at
/// its claim), and gives it back while it waits.
pub(super) async fn drive<'s>(
    ctx: &VmContext<'_>,
    slots: &'s Slots,
    mut slot: Option<Slot<'s>>,
    claim: StepClaim,
) -> Result<StepReport> {
    let kind = claim.step()?;
    let work = {
        let mut conn = ctx.pool.get().await?;
        vms::work_of(&mut conn, claim).await?
    };
    let instance = work.instance.instance_id.clone();
    tracing::debug!(
        instance = %instance,
        step = kind.as_str(),
        request_id = %work.claim.request_id,
        operation = ?work.claim.operation,
        "vm step claimed"
    );
    let Some(account) = work.account.clone() else {
        return give_up_or_wait(ctx, &work, kind, None).await;
    };
    let provider = match build(ctx, &account).await {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(instance = %instance, error = %e, "no provider for a vm step");
            return give_up_or_wait(ctx, &work, kind, Some(e)).await;
        }
    };
    let account = account.account_id;
    let mut claim = work.claim.clone();
    let zones = work
        .pool
        .vm
        .as_ref()
        .map(|v| v.zones.clone())
        .unwrap_or_default();
    let spec = spec(&work, &claim);
    let name = work.instance.vm_name.clone().unwrap_or_default();
    let (lease_ms, timeout_ms) = (ms(ctx.rules.lease), ms(ctx.rules.step_timeout));
    // A step whose operation never ends is given back after a while, so one
    // stuck operation never holds a `--once` run.
    let held = Instant::now();
    let mut renewed = Instant::now();
    loop {
        let overdue = claim
            .sent_wall
            .is_some_and(|sent| wall_ms() > sent + timeout_ms);
        if overdue && kind != StepKind::Delete {
            tracing::warn!(instance = %instance, step = kind.as_str(), "vm step deadline passed");
            let outcome = Outcome::Failed {
                failure: StepFailure::Timeout,
            };
            return record(ctx, &work, &claim, kind, outcome).await;
        }
        let sending = claim.operation.is_none();
        if sending && let Err(wait) = ctx.pacer.try_send(&account, wall_ms()) {
            tracing::debug!(
                instance = %instance,
                wait_ms = wait.as_millis() as u64,
                "the account's write budget is spent: the step waits"
            );
            let p = Progress {
                due_in_ms: ms(wait),
                ..Progress::default()
            };
            return put_off(ctx, &claim, p, kind).await;
        }
        let round = {
            let _slot = match slot.take() {
                Some(s) => s,
                None => slots.take().await,
            };
            let facts = Facts {
                kind,
                instance_id: &work.instance.instance_id,
                installation: &work.installation,
                on_demand: work.instance.vm_reservation_id.is_none(),
                zones: &zones,
                zone_index: claim.zone_index,
            };
            let target = Target {
                name: &name,
                zone: &claim.zone,
                request_id: &claim.request_id,
                operation: claim.operation.as_deref(),
                spec: spec.as_ref(),
            };
            look(provider.as_ref(), &facts, &target).await
        };
        // The first send dates the deadline (a quota refusal sent nothing).
        let sent = (sending && !matches!(round, Round::Throttled(..))).then_some(timeout_ms);
        // What the account has in flight: a granted send that started no
        // operation, or an operation seen ending, leaves it.
        let started = matches!(round, Round::Operation(_));
        let ended = matches!(round, Round::End(_) | Round::NextZone(..) | Round::Resend);
        if (sending && !started && !matches!(round, Round::Throttled(..))) || (!sending && ended) {
            ctx.pacer.operation_done(&account);
        }
        if sent.is_some() && claim.sent_wall.is_none() {
            claim.sent_wall = Some(wall_ms());
        }
        match round {
            // A delete is never given up (contract 3.12 r4): a refusal is
            // sent again after backoff, with a fresh request id; an overdue
            // delete raises the step-overdue alert.
            Round::End(Outcome::Failed { failure }) if kind == StepKind::Delete => {
                let backoff = backoff(claim.attempts, ctx.rules.max_backoff);
                tracing::warn!(
                    instance = %instance,
                    code = %failure,
                    attempts = claim.attempts + 1,
                    backoff_ms = backoff.as_millis() as u64,
                    "the provider refused a delete: sent again after backoff"
                );
                let p = Progress {
                    operation: OperationChange::Forget,
                    new_request: true,
                    failed_try: true,
                    due_in_ms: ms(backoff),
                    sent,
                    ..Progress::default()
                };
                return put_off(ctx, &claim, p, kind).await;
            }
            Round::End(outcome) => return record(ctx, &work, &claim, kind, outcome).await,
            Round::Operation(op) => {
                claim.operation = Some(op.clone());
                let p = Progress {
                    operation: OperationChange::Follow(op),
                    lease_ms,
                    sent,
                    ..Progress::default()
                };
                if let Some(lost) = keep(ctx, &claim, p, kind).await? {
                    return Ok(lost);
                }
                renewed = Instant::now();
                tokio::time::sleep(poll_wait(&claim, ctx.rules.max_poll)).await;
            }
            Round::NextZone(zone, index) => {
                tracing::info!(
                    instance = %instance,
                    zone = %zone,
                    "zone exhausted: the on-demand create goes on in the next zone"
                );
                // Given back: the next claim reads the fresh request id and
                // sends it in that zone at once.
                let p = Progress {
                    operation: OperationChange::Forget,
                    next_zone: Some((zone, index)),
                    sent,
                    ..Progress::default()
                };
                return put_off(ctx, &claim, p, kind).await;
            }
            Round::Resend => {
                // Sent again a second later, with the same request id.
                let p = Progress {
                    operation: OperationChange::Forget,
                    due_in_ms: 1000,
                    sent,
                    ..Progress::default()
                };
                return put_off(ctx, &claim, p, kind).await;
            }
            Round::PollOperation | Round::PollVm if held.elapsed() > ctx.rules.lease * 5 => {
                let p = Progress {
                    due_in_ms: 1000,
                    sent,
                    ..Progress::default()
                };
                return put_off(ctx, &claim, p, kind).await;
            }
            Round::PollOperation | Round::PollVm => {
                let wait = if matches!(round, Round::PollOperation) {
                    poll_wait(&claim, ctx.rules.max_poll)
                } else {
                    Duration::from_secs(1)
                };
                tokio::time::sleep(wait).await;
                if renewed.elapsed() > ctx.rules.lease / 4 || sent.is_some() {
                    let p = Progress {
                        lease_ms,
                        sent,
                        ..Progress::default()
                    };
                    if let Some(lost) = keep(ctx, &claim, p, kind).await? {
                        return Ok(lost);
                    }
                    renewed = Instant::now();
                }
            }
            Round::Throttled(quota, retry_after) => {
                let (pause, first) = ctx.pacer.throttled(&account, quota, retry_after, wall_ms());
                if first {
                    tracing::warn!(
                        account = %account,
                        quota = %quota,
                        pause_ms = pause.as_millis() as u64,
                        "the provider refused a call for its quota: the account's calls \
                         are paced (the step waits; BC_VM_WRITES_PER_MIN may be above \
                         the project's quota)"
                    );
                } else {
                    tracing::debug!(instance = %instance, quota = %quota, "quota refusal");
                }
                // Due again when the pause ends; under a concurrent-
                // operations cap, as soon as one of the account's operations
                // ends. Until then the account's steps are not claimed.
                let due = match quota {
                    Throttle::Rate => pause,
                    Throttle::ConcurrentOperations => Duration::ZERO,
                };
                let p = Progress {
                    due_in_ms: ms(due),
                    ..Progress::default()
                };
                return put_off(ctx, &claim, p, kind).await;
            }
            Round::Retry(e) => {
                let backoff = backoff(claim.attempts, ctx.rules.max_backoff);
                tracing::warn!(
                    instance = %instance,
                    step = kind.as_str(),
                    error = %e,
                    attempts = claim.attempts + 1,
                    backoff_ms = backoff.as_millis() as u64,
                    "vm step failed, will retry with the same request id"
                );
                let p = Progress {
                    failed_try: true,
                    due_in_ms: ms(backoff),
                    sent,
                    ..Progress::default()
                };
                return put_off(ctx, &claim, p, kind).await;
            }
        }
    }
}

/// How long until an operation is read again: a second at first, then an
/// eighth of its age, at most `max`.
fn poll_wait(claim: &StepClaim, max: Duration) -> Duration {
    let age = claim
        .sent_wall
        .map_or(0, |sent| wall_ms().saturating_sub(sent));
    let wait = Duration::from_millis(u64::try_from(age / 8).unwrap_or(0));
    wait.clamp(Duration::from_secs(1), max.max(Duration::from_secs(1)))
}

/// Records progress and goes on: `Some` (the lease is lost) stops the step.
async fn keep(
    ctx: &VmContext<'_>,
    claim: &StepClaim,
    p: Progress,
    kind: StepKind,
) -> Result<Option<StepReport>> {
    Ok((!save(ctx, claim, p).await?).then(|| lost(kind)))
}

/// Records progress and gives the claim back (`p.lease_ms` is 0): the step
/// is due again at `p.due_in_ms`.
async fn put_off(
    ctx: &VmContext<'_>,
    claim: &StepClaim,
    p: Progress,
    kind: StepKind,
) -> Result<StepReport> {
    if !save(ctx, claim, p).await? {
        return Ok(lost(kind));
    }
    Ok(StepReport {
        kind,
        end: StepEnd::Waiting,
        latency: None,
    })
}

fn lost(kind: StepKind) -> StepReport {
    StepReport {
        kind,
        end: StepEnd::LeaseLost,
        latency: None,
    }
}

/// Exponential backoff from 1 s with jitter, at most `max`.
fn backoff(attempts: i32, max: Duration) -> Duration {
    let base = Duration::from_millis(1000u64 << attempts.clamp(0, 16));
    let jitter = Duration::from_millis(rand::random_range(0..=250));
    base.min(max) + jitter
}

async fn save(ctx: &VmContext<'_>, claim: &StepClaim, p: Progress) -> Result<bool> {
    let mut conn = ctx.pool.get().await?;
    vms::progress(&mut conn, claim, &p).await
}

async fn record(
    ctx: &VmContext<'_>,
    work: &StepWork,
    claim: &StepClaim,
    kind: StepKind,
    outcome: Outcome,
) -> Result<StepReport> {
    let mut conn = ctx.pool.get().await?;
    let now = ctx.clock.now(&mut conn).await?;
    let wall = db_now_ms(&mut conn).await?;
    let recorded = vms::finish(&mut conn, claim, &outcome, now).await?;
    let end = match (&outcome, recorded) {
        (_, false) => StepEnd::LeaseLost,
        (Outcome::Confirmed { .. }, true) => StepEnd::Done,
        (Outcome::Failed { .. }, true) => StepEnd::Failed,
    };
    match &outcome {
        Outcome::Confirmed { vm_status } => tracing::info!(
            instance = %work.instance.instance_id,
            step = kind.as_str(),
            vm = work.instance.vm_name.as_deref().unwrap_or_default(),
            zone = %claim.zone,
            status = vm_status.as_ref().map_or("gone", |s| s.as_str()),
            recorded,
            "vm step succeeded"
        ),
        Outcome::Failed { failure } => tracing::warn!(
            instance = %work.instance.instance_id,
            step = kind.as_str(),
            code = %failure,
            vanished = failure.vanished(),
            recorded,
            "vm step failed for good"
        ),
    }
    let latency = u64::try_from(wall - claim.created_wall)
        .ok()
        .map(Duration::from_millis);
    Ok(StepReport { kind, end, latency })
}

/// No adapter for the step's account: the step fails (`no-account`) when
/// the account is gone, a create fails (`provider-error`) when the account
/// cannot be used as stored; anything transient (the platform's own
/// database or secret store, the token endpoint) puts the step off.
async fn give_up_or_wait(
    ctx: &VmContext<'_>,
    work: &StepWork,
    kind: StepKind,
    error: Option<ProviderError>,
) -> Result<StepReport> {
    let failure = match &error {
        None => Some(StepFailure::NoAccount),
        Some(e) if kind == StepKind::Create && !e.is_retryable() => {
            Some(StepFailure::ProviderError)
        }
        Some(_) => None,
    };
    if let Some(failure) = failure {
        let outcome = Outcome::Failed { failure };
        return record(ctx, work, &work.claim, kind, outcome).await;
    }
    let wait = backoff(work.claim.attempts, ctx.rules.max_backoff);
    tracing::warn!(
        instance = %work.instance.instance_id,
        error = ?error.map(|e| e.to_string()),
        backoff_ms = wait.as_millis() as u64,
        "vm step put off"
    );
    let p = Progress {
        failed_try: true,
        due_in_ms: ms(wait),
        ..Progress::default()
    };
    put_off(ctx, &work.claim, p, kind).await
}

/// The create request of a step's VM (contract 3.12).
fn spec(work: &StepWork, claim: &StepClaim) -> Option<VmSpec> {
    let vm = work.pool.vm.as_ref()?;
    let inst = &work.instance;
    let mut labels: BTreeMap<String, String> = vm.labels.clone();
    labels.insert(providers::INSTANCE_LABEL.into(), inst.instance_id.clone());
    labels.insert("bc-pool".into(), inst.pool_id.clone());
    labels.insert(MANAGED_LABEL.into(), "true".into());
    labels.insert(
        providers::INSTALLATION_LABEL.into(),
        work.installation.clone(),
    );
    Some(VmSpec {
        name: inst.vm_name.clone()?,
        zone: claim.zone.clone(),
        machine_type: inst.flavor.clone(),
        labels,
        // Stored as the provider's full path; GCE's affinity names the
        // reservation alone.
        reservation: inst
            .vm_reservation_id
            .as_deref()
            .map(|r| r.rsplit('/').next().unwrap_or(r).to_owned()),
        image: vm.image.clone(),
        disk_gb: vm.disk_gb,
        network: vm.network.clone(),
        subnetwork: vm.subnetwork.clone(),
        service_account: vm.service_account.clone(),
    })
}
