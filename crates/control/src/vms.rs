//! The provider side of managed instances (contract 3.12): carrying out the
//! steps of the outbox and listing each account's VMs for drift, through
//! the [`InstanceProvider`] trait, never inside a transaction.
//!
//! A step is claimed, then driven as far as it goes: sent with its
//! `requestId` (the same on every try), its operation polled to `DONE`, the
//! VM read back; the outcome is recorded with storage. A retryable failure
//! waits with backoff (the step stays claimable by any replica once its
//! lease is given back); a worker killed anywhere leaves the step open, and
//! the replica that claims it next sends the same `requestId` again or finds
//! the operation or the VM, so nothing is done twice.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use grants_core::vm::StepKind;
use providers::{
    AccountSpec, InstanceFactory, InstanceProvider, MANAGED_LABEL, OperationStatus, ProviderError,
    Vm, VmOperation, VmSpec,
};
use storage::Clock;
use storage::Result;
use storage::crypto::Keyring;
use storage::db::DbPool;
use storage::ids::TenantId;
use storage::ops::accounts::Account;
use storage::ops::instances::managed::db_now_ms;
use storage::ops::secrets;
use storage::ops::vms::{self, Outcome, Progress, StepClaim, StepWork};

/// How steps and listings are paced.
#[derive(Debug, Clone)]
pub struct VmRules {
    /// How long a step may take (`BC_VM_STEP_TIMEOUT`, default 10 min).
    pub step_timeout: Duration,
    /// A claim's lease, renewed at each recorded progress.
    pub lease: Duration,
    /// Steps driven at once by one worker.
    pub concurrency: usize,
    /// The least time between two listings of an account.
    pub list_interval: Duration,
    /// The longest wait between two reads of an operation.
    pub max_poll: Duration,
    /// The longest backoff of a retryable failure.
    pub max_backoff: Duration,
}

impl Default for VmRules {
    fn default() -> Self {
        VmRules {
            step_timeout: Duration::from_secs(600),
            lease: Duration::from_secs(60),
            concurrency: 16,
            list_interval: Duration::from_secs(30),
            max_poll: Duration::from_secs(2),
            max_backoff: Duration::from_secs(60),
        }
    }
}

/// What the steps and listings need.
pub struct VmContext<'a> {
    /// Connections.
    pub pool: &'a DbPool,
    /// The product's clock.
    pub clock: Clock,
    /// The root tenant (orphan events go there).
    pub root: &'a TenantId,
    /// Builds an account's instance adapter under the provider policy.
    pub factory: &'a InstanceFactory,
    /// Resolves `secret:NAME` credentials.
    pub keyring: &'a Keyring,
    /// Pacing.
    pub rules: &'a VmRules,
}

/// How one step ended for this worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepEnd {
    /// Recorded as succeeded.
    Done,
    /// Recorded as failed.
    Failed,
    /// Put off (a retryable failure or a slow operation): due again later.
    Waiting,
    /// The lease was lost to another replica: nothing recorded.
    LeaseLost,
}

/// One step's end, for metrics and logs.
#[derive(Debug, Clone)]
pub struct StepReport {
    /// Its kind.
    pub kind: StepKind,
    /// How it ended here.
    pub end: StepEnd,
    /// From its recording to its end (real time), for a step that ended.
    pub latency: Option<Duration>,
}

/// Claims and drives due steps until none is due now (a step put off for
/// later is left to a later round).
pub async fn drive_steps(ctx: &VmContext<'_>) -> Result<Vec<StepReport>> {
    let mut reports = Vec::new();
    let lease_ms = ms(ctx.rules.lease);
    let timeout_ms = ms(ctx.rules.step_timeout);
    let limit = i64::try_from(ctx.rules.concurrency).unwrap_or(16);
    // Bounded: a step is claimed once per round at most; a round ends when
    // every claimed step has ended or been put off.
    for _ in 0..1000 {
        let claims = {
            let mut conn = ctx.pool.get().await?;
            vms::claim_steps(&mut conn, limit, lease_ms, timeout_ms).await?
        };
        if claims.is_empty() {
            break;
        }
        let runs = claims.into_iter().map(|c| drive_claim(ctx, c));
        for r in futures::future::join_all(runs).await {
            match r {
                Ok(report) => reports.push(report),
                Err(e) => tracing::error!(error = %e, "a vm step could not be recorded"),
            }
        }
    }
    Ok(reports)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// What one look at a step found.
enum Round {
    /// The step ended.
    End(Outcome),
    /// Look again after this long (an operation not done yet).
    Poll(Duration),
    /// A retryable failure: wait with backoff.
    Retry(ProviderError),
    /// The operation is known now (keep it), look again at once.
    Operation(String),
    /// An on-demand create goes on in the next zone, at once.
    NextZone(String, i32),
    /// The operation was lost at the provider: send the step again.
    Resend,
}

async fn drive_claim(ctx: &VmContext<'_>, claim: StepClaim) -> Result<StepReport> {
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
    let provider = match provider_for(ctx, &work).await {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(instance = %instance, error = %e, "no provider for a vm step");
            return give_up_or_wait(ctx, &work, kind, e).await;
        }
    };
    let mut claim = work.claim.clone();
    let mut polls = 0u32;
    // A slow operation is read for half a lease at most, then put off: one
    // stuck operation never holds a worker's slot (or a `--once` run).
    let held = Instant::now();
    loop {
        let wall = {
            let mut conn = ctx.pool.get().await?;
            db_now_ms(&mut conn).await?
        };
        if wall > claim.deadline_wall && kind != StepKind::Delete {
            tracing::warn!(instance = %instance, step = kind.as_str(), "vm step deadline passed");
            let outcome = Outcome::Failed {
                code: "timeout".into(),
                vanished: false,
            };
            return record(ctx, &work, &claim, kind, outcome).await;
        }
        let round = look(provider.as_ref(), &work, &claim, kind).await;
        let lease_ms = ms(ctx.rules.lease);
        match round {
            Round::End(outcome) => return record(ctx, &work, &claim, kind, outcome).await,
            Round::Operation(op) => {
                claim.operation = Some(op.clone());
                let p = Progress {
                    operation: Some(Some(op)),
                    lease_ms,
                    ..Progress::default()
                };
                if let Some(lost) = keep(ctx, &claim, p, kind).await? {
                    return Ok(lost);
                }
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
                    ..Progress::default()
                };
                return put_off(ctx, &claim, p, kind).await;
            }
            Round::Resend => {
                claim.operation = None;
                let p = Progress {
                    operation: Some(None),
                    lease_ms,
                    ..Progress::default()
                };
                if let Some(lost) = keep(ctx, &claim, p, kind).await? {
                    return Ok(lost);
                }
            }
            Round::Poll(_) if held.elapsed() > ctx.rules.lease / 2 => {
                let p = Progress {
                    due_in_ms: 1000,
                    ..Progress::default()
                };
                return put_off(ctx, &claim, p, kind).await;
            }
            Round::Poll(wait) => {
                polls += 1;
                tokio::time::sleep(wait).await;
                // The lease is renewed about every second of waiting.
                if polls.is_multiple_of(4) {
                    let p = Progress {
                        lease_ms,
                        ..Progress::default()
                    };
                    if let Some(lost) = keep(ctx, &claim, p, kind).await? {
                        return Ok(lost);
                    }
                }
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
                    ..Progress::default()
                };
                return put_off(ctx, &claim, p, kind).await;
            }
        }
    }
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

/// No adapter for the step's account: a create fails (`provider-error`,
/// or `no-account` when the account is gone); other steps wait.
async fn give_up_or_wait(
    ctx: &VmContext<'_>,
    work: &StepWork,
    kind: StepKind,
    error: ProviderError,
) -> Result<StepReport> {
    if kind == StepKind::Create || work.account.is_none() {
        let code = if work.account.is_none() {
            "no-account"
        } else {
            "provider-error"
        };
        let outcome = Outcome::Failed {
            code: code.into(),
            vanished: false,
        };
        return record(ctx, work, &work.claim, kind, outcome).await;
    }
    let wait = backoff(work.claim.attempts, ctx.rules.max_backoff);
    tracing::warn!(error = %error, "vm step put off");
    let p = Progress {
        failed_try: true,
        due_in_ms: ms(wait),
        ..Progress::default()
    };
    put_off(ctx, &work.claim, p, kind).await
}

async fn provider_for(
    ctx: &VmContext<'_>,
    work: &StepWork,
) -> std::result::Result<Box<dyn InstanceProvider>, ProviderError> {
    let account = work
        .account
        .as_ref()
        .ok_or_else(|| ProviderError::NotAllowed("the pool's provider account is gone".into()))?;
    build(ctx, account).await
}

pub(crate) async fn build(
    ctx: &VmContext<'_>,
    account: &Account,
) -> std::result::Result<Box<dyn InstanceProvider>, ProviderError> {
    let secret = match secrets::named_in(&account.config) {
        Some(name) => {
            let mut conn = ctx
                .pool
                .get()
                .await
                .map_err(|e| ProviderError::Transport(format!("database: {e}")))?;
            Some(crate::secrets::resolve(&mut conn, ctx.keyring, &account.tenant_id, name).await?)
        }
        None => None,
    };
    (ctx.factory)(AccountSpec {
        account_id: &account.account_id,
        tenant_id: &account.tenant_id,
        provider: &account.provider,
        config: &account.config,
        secret: secret.as_ref(),
    })
}

/// The create request of a step's VM (contract 3.12).
fn spec(work: &StepWork, claim: &StepClaim) -> Option<VmSpec> {
    let vm = work.pool.vm.as_ref()?;
    let inst = &work.instance;
    let mut labels: BTreeMap<String, String> = vm.labels.clone();
    labels.insert("bc-instance".into(), inst.instance_id.clone());
    labels.insert("bc-pool".into(), inst.pool_id.clone());
    labels.insert(MANAGED_LABEL.into(), "true".into());
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
) -> Round {
    let name = work.instance.vm_name.clone().unwrap_or_default();
    let zone = claim.zone.as_str();
    let Some(op) = &claim.operation else {
        return send(provider, work, claim, kind).await;
    };
    match provider.get_operation(zone, op).await {
        Ok(op) if op.status != OperationStatus::Done => Round::Poll(poll_wait(&op)),
        Ok(op) if !op.error_codes.is_empty() => operation_failed(work, claim, kind, &op),
        Ok(_) => read_back(provider, work, zone, &name, kind).await,
        Err(ProviderError::NotFound) => Round::Resend,
        Err(e) if e.is_retryable() => Round::Retry(e),
        Err(e) => failed(code_of(&e)),
    }
}

fn poll_wait(_op: &VmOperation) -> Duration {
    Duration::from_millis(250)
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
            _ => Round::End(Outcome::Failed {
                code: "not-found".into(),
                vanished: true,
            }),
        },
        Err(e) if e.is_retryable() => Round::Retry(e),
        Err(e) => failed(code_of(&e)),
    }
}

/// A create answered `alreadyExists`: the VM is this instance's when its
/// `bc-instance` label says so (a create whose answer was lost), else the
/// name is taken.
async fn adopt(provider: &dyn InstanceProvider, work: &StepWork, zone: &str, name: &str) -> Round {
    match provider.get_vm(zone, name).await {
        Ok(Some(vm)) if owned(&vm, &work.instance.instance_id) => {
            tracing::info!(vm = %name, "create answered alreadyExists: adopting our own vm");
            confirm_status(&vm, StepKind::Create)
        }
        Ok(Some(_)) => failed("name-taken"),
        Ok(None) => Round::Poll(Duration::from_millis(500)),
        Err(e) if e.is_retryable() => Round::Retry(e),
        Err(e) => failed(code_of(&e)),
    }
}

fn owned(vm: &Vm, instance_id: &str) -> bool {
    vm.labels.get("bc-instance").map(String::as_str) == Some(instance_id)
}

fn confirm_status(vm: &Vm, kind: StepKind) -> Round {
    if aimed(kind, Some(&vm.status)) {
        Round::End(Outcome::Confirmed {
            vm_status: Some(vm.status.clone()),
        })
    } else {
        Round::Poll(Duration::from_millis(500))
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
        Ok(None) if kind == StepKind::Create => Round::Poll(Duration::from_millis(500)),
        Ok(None) => Round::End(Outcome::Failed {
            code: "not-found".into(),
            vanished: true,
        }),
        Ok(Some(vm)) if kind == StepKind::Create && !owned(&vm, &work.instance.instance_id) => {
            failed("name-taken")
        }
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

mod listings;

pub use listings::{ListingReport, list_accounts};
