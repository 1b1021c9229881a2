//! Driving one claimed step (contract 3.12): sent with its `requestId` (the
//! same on every try), its operation read until `DONE` (at most once a
//! second, less often as it ages), the VM read back to confirm, the outcome
//! recorded with storage. While its operation runs the step keeps its claim
//! (the lease renewed) but no provider slot: the pipeline sends others.
//! A retryable failure puts it off with backoff; a quota refusal puts it off
//! until the account's pause ends, neither failed nor counted as a try.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::pipeline::{Slot, Slots};
use super::{StepEnd, StepReport, VmContext, build, ms, wall_ms};
use grants_core::vm::StepKind;
use providers::{
    InstanceProvider, MANAGED_LABEL, OperationStatus, ProviderError, Throttle, Vm, VmOperation,
    VmSpec,
};
use storage::Result;
use storage::ops::instances::managed::db_now_ms;
use storage::ops::vms::{self, Outcome, Progress, StepClaim, StepWork};

/// What one look at a step found.
enum Round {
    /// The step ended.
    End(Outcome),
    /// Look again after this long (an operation not done yet).
    Poll(Duration),
    /// A retryable failure: wait with backoff.
    Retry(ProviderError),
    /// A mutating call refused for a quota of the account's project.
    Throttled(Throttle, Option<Duration>),
    /// The operation is known now (keep it).
    Operation(String),
    /// An on-demand create goes on in the next zone, at once.
    NextZone(String, i32),
    /// The operation was lost at the provider: send the step again.
    Resend,
}

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
                code: "timeout".into(),
                vanished: false,
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
            look(provider.as_ref(), &work, &claim, kind, ctx.rules.max_poll).await
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
            Round::End(Outcome::Failed { code, .. }) if kind == StepKind::Delete => {
                let backoff = backoff(claim.attempts, ctx.rules.max_backoff);
                tracing::warn!(
                    instance = %instance,
                    code = %code,
                    attempts = claim.attempts + 1,
                    backoff_ms = backoff.as_millis() as u64,
                    "the provider refused a delete: sent again after backoff"
                );
                let p = Progress {
                    operation: Some(None),
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
                    operation: Some(Some(op)),
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
                    operation: Some(None),
                    next_zone: Some((zone, index)),
                    sent,
                    ..Progress::default()
                };
                return put_off(ctx, &claim, p, kind).await;
            }
            Round::Resend => {
                // Sent again a second later, with the same request id.
                let p = Progress {
                    operation: Some(None),
                    due_in_ms: 1000,
                    sent,
                    ..Progress::default()
                };
                return put_off(ctx, &claim, p, kind).await;
            }
            Round::Poll(_) if held.elapsed() > ctx.rules.lease * 5 => {
                let p = Progress {
                    due_in_ms: 1000,
                    sent,
                    ..Progress::default()
                };
                return put_off(ctx, &claim, p, kind).await;
            }
            Round::Poll(wait) => {
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
            status = vm_status.as_deref().unwrap_or("gone"),
            recorded,
            "vm step succeeded"
        ),
        Outcome::Failed { code, vanished } => tracing::warn!(
            instance = %work.instance.instance_id,
            step = kind.as_str(),
            code = %code,
            vanished,
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
    let code = match &error {
        None => Some("no-account"),
        Some(e) if kind == StepKind::Create && !e.is_retryable() => Some("provider-error"),
        Some(_) => None,
    };
    if let Some(code) = code {
        let outcome = Outcome::Failed {
            code: code.into(),
            vanished: false,
        };
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

/// What the VM's status must be for the step to have succeeded.
fn aimed(kind: StepKind, status: Option<&str>) -> bool {
    match (kind, status) {
        (StepKind::Create | StepKind::Start, Some(s)) => s == "RUNNING",
        (StepKind::Stop, Some(s)) => matches!(s, "TERMINATED" | "STOPPED"),
        (StepKind::Delete, None) => true,
        _ => false,
    }
}

fn failed(code: impl Into<String>) -> Round {
    Round::End(Outcome::Failed {
        code: code.into(),
        vanished: false,
    })
}

/// A non-retryable provider error as a failure code.
fn code_of(e: &ProviderError) -> String {
    match e {
        ProviderError::Rejected { reason, .. } if !reason.is_empty() => reason.clone(),
        _ => "provider-error".into(),
    }
}

/// Looks at a step once: sends it if its operation is unknown, else reads
/// the operation, and when it is done reads the VM.
async fn look(
    provider: &dyn InstanceProvider,
    work: &StepWork,
    claim: &StepClaim,
    kind: StepKind,
    max_poll: Duration,
) -> Round {
    let name = work.instance.vm_name.clone().unwrap_or_default();
    let zone = claim.zone.as_str();
    let Some(op) = &claim.operation else {
        return send(provider, work, claim, kind).await;
    };
    match provider.get_operation(zone, op).await {
        Ok(op) if op.status != OperationStatus::Done => Round::Poll(poll_wait(claim, max_poll)),
        Ok(op) if !op.error_codes.is_empty() => operation_failed(work, claim, kind, &op),
        Ok(_) => read_back(provider, work, zone, &name, kind).await,
        Err(ProviderError::NotFound) => Round::Resend,
        Err(e) if e.is_retryable() => Round::Retry(e),
        Err(e) => failed(code_of(&e)),
    }
}

async fn send(
    provider: &dyn InstanceProvider,
    work: &StepWork,
    claim: &StepClaim,
    kind: StepKind,
) -> Round {
    let name = work.instance.vm_name.clone().unwrap_or_default();
    let zone = claim.zone.as_str();
    let request = claim.request_id.as_str();
    let sent = match kind {
        StepKind::Create => match spec(work, claim) {
            Some(spec) => provider.create_vm(&spec, request).await,
            None => return failed("provider-error"),
        },
        StepKind::Stop => provider.stop_vm(zone, &name, request).await,
        StepKind::Start => provider.start_vm(zone, &name, request).await,
        StepKind::Delete => provider.delete_vm(zone, &name, request).await,
    };
    match sent {
        Ok(op) if op.status == OperationStatus::Done && !op.error_codes.is_empty() => {
            operation_failed(work, claim, kind, &op)
        }
        Ok(op) => Round::Operation(op.name),
        Err(ProviderError::AlreadyExists) if kind == StepKind::Create => {
            adopt(provider, work, zone, &name).await
        }
        Err(ProviderError::NotFound) => match kind {
            StepKind::Delete => read_back(provider, work, zone, &name, kind).await,
            // What the create names (its image, network, zone) does not
            // exist: refused for good, with the provider's reason.
            StepKind::Create => failed("notFound"),
            // The VM is gone: the instance is lost.
            StepKind::Stop | StepKind::Start => Round::End(Outcome::Failed {
                code: "not-found".into(),
                vanished: true,
            }),
        },
        Err(ProviderError::Throttled { quota, retry_after }) => {
            Round::Throttled(quota, retry_after)
        }
        Err(e) if e.is_retryable() => Round::Retry(e),
        Err(e) => failed(code_of(&e)),
    }
}

/// A create answered `alreadyExists`: the VM is this instance's when its
/// `bc-instance` label says so (a create whose answer was lost), else the
/// name is taken.
async fn adopt(provider: &dyn InstanceProvider, work: &StepWork, zone: &str, name: &str) -> Round {
    match provider.get_vm(zone, name).await {
        Ok(Some(vm)) if owned(&vm, work) => {
            tracing::info!(vm = %name, "create answered alreadyExists: adopting our own vm");
            confirm_status(&vm, StepKind::Create)
        }
        Ok(Some(_)) => failed("name-taken"),
        Ok(None) => Round::Poll(Duration::from_secs(1)),
        Err(e) if e.is_retryable() => Round::Retry(e),
        Err(e) => failed(code_of(&e)),
    }
}

/// Whether the VM is this step's instance's own: its `bc-instance` label
/// names the instance and its `bc-installation` label this installation
/// (contract 3.12 r4: another installation's VM is never adopted).
fn owned(vm: &Vm, work: &StepWork) -> bool {
    let label = |key: &str| vm.labels.get(key).map(String::as_str);
    label(providers::INSTANCE_LABEL) == Some(work.instance.instance_id.as_str())
        && label(providers::INSTALLATION_LABEL) == Some(work.installation.as_str())
}

fn confirm_status(vm: &Vm, kind: StepKind) -> Round {
    if aimed(kind, Some(&vm.status)) {
        Round::End(Outcome::Confirmed {
            vm_status: Some(vm.status.clone()),
        })
    } else {
        Round::Poll(Duration::from_secs(1))
    }
}

/// The operation is done without error: read the VM to confirm.
async fn read_back(
    provider: &dyn InstanceProvider,
    work: &StepWork,
    zone: &str,
    name: &str,
    kind: StepKind,
) -> Round {
    match provider.get_vm(zone, name).await {
        Ok(None) if kind == StepKind::Delete => Round::End(Outcome::Confirmed { vm_status: None }),
        Ok(None) if kind == StepKind::Create => Round::Poll(Duration::from_secs(1)),
        Ok(None) => Round::End(Outcome::Failed {
            code: "not-found".into(),
            vanished: true,
        }),
        Ok(Some(vm)) if kind == StepKind::Create && !owned(&vm, work) => failed("name-taken"),
        Ok(Some(vm)) => confirm_status(&vm, kind),
        Err(e) if e.is_retryable() => Round::Retry(e),
        Err(e) => failed(code_of(&e)),
    }
}

/// A done operation with errors: an on-demand create goes on in the pool's
/// next zone when the zone is exhausted; anything else fails the step with
/// the provider's first code (its message goes to the log only).
fn operation_failed(work: &StepWork, claim: &StepClaim, kind: StepKind, op: &VmOperation) -> Round {
    let code = op
        .error_codes
        .first()
        .cloned()
        .unwrap_or_else(|| "provider-error".into());
    tracing::warn!(
        instance = %work.instance.instance_id,
        step = kind.as_str(),
        code = %code,
        messages = ?op.error_messages,
        "the provider's operation ended with an error"
    );
    let on_demand = work.instance.vm_reservation_id.is_none();
    if kind == StepKind::Create && on_demand && code == "ZONE_RESOURCE_POOL_EXHAUSTED" {
        let zones = work
            .pool
            .vm
            .as_ref()
            .map(|v| v.zones.clone())
            .unwrap_or_default();
        let next = usize::try_from(claim.zone_index + 1).unwrap_or(usize::MAX);
        if let Some(zone) = zones.get(next) {
            return Round::NextZone(zone.clone(), claim.zone_index + 1);
        }
    }
    failed(code)
}
