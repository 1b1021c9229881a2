//! One look at a step's provider (contract 3.12): its mutation sent when
//! it has no operation yet, else its operation read, and once that is done
//! the VM read back. What each answer means is [`decide`], a pure function
//! of the step's facts and the answer, so every case is tested without a
//! provider; [`look`] only makes the calls it asks for (two at most).

use std::time::Duration;

use grants_core::vm::{StepFailure, StepKind};
use providers::{
    InstanceProvider, OperationStatus, ProviderError, Throttle, Vm, VmOperation, VmSpec,
};
use storage::ops::vms::Outcome;

/// What a step's decision needs to know about it.
#[derive(Debug, Clone)]
pub(super) struct Facts<'a> {
    /// The step.
    pub kind: StepKind,
    /// Its instance (a VM is this instance's when its `bc-instance` label
    /// says so).
    pub instance_id: &'a str,
    /// This installation's id (its `bc-installation` label).
    pub installation: &'a str,
    /// A create aimed at no reservation: it may go on in the next zone.
    pub on_demand: bool,
    /// The pool's zones, in the order an on-demand create tries them.
    pub zones: &'a [String],
    /// The index in `zones` of the zone the step is in.
    pub zone_index: i32,
}

/// What a step sends and reads.
#[derive(Debug, Clone)]
pub(super) struct Target<'a> {
    /// The VM's name.
    pub name: &'a str,
    /// The step's zone.
    pub zone: &'a str,
    /// The request id sent with every try of the step.
    pub request_id: &'a str,
    /// Its operation, once the provider answered one.
    pub operation: Option<&'a str>,
    /// A create's request (`None`: the pool's VM settings are gone).
    pub spec: Option<&'a VmSpec>,
}

/// What one look found.
#[derive(Debug)]
pub(super) enum Round {
    /// The step ended.
    End(Outcome),
    /// Its operation is not done: read it again later (less often as it
    /// ages).
    PollOperation,
    /// The VM is not in the status aimed at yet (or not listed yet after a
    /// create): read it again in a second.
    PollVm,
    /// A retryable failure: wait with backoff.
    Retry(ProviderError),
    /// A mutating call refused for a quota of the account's project.
    Throttled(Throttle, Option<Duration>),
    /// The operation is known now (keep it).
    Operation(String),
    /// An on-demand create goes on in the pool's next zone (and its index),
    /// at once.
    NextZone(String, i32),
    /// The operation was lost at the provider: send the step again.
    Resend,
}

/// The provider's answer to one call of a look.
#[derive(Debug)]
pub(super) enum Answer {
    /// To the step's mutation.
    Sent(Result<VmOperation, ProviderError>),
    /// To a read of its operation.
    Operation(Result<VmOperation, ProviderError>),
    /// To a read of the VM after its operation is done.
    ReadBack(Result<Option<Vm>, ProviderError>),
    /// To a read of the VM a create found existing (`alreadyExists`).
    Adopt(Result<Option<Vm>, ProviderError>),
}

/// A call a look makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Call {
    /// Send the step's mutation with its request id.
    Send,
    /// Read its operation.
    ReadOperation,
    /// Read the VM to confirm the status aimed at.
    ReadBack,
    /// Read the VM a create found existing, to adopt it if it is ours.
    Adopt,
}

/// What to do after an answer.
#[derive(Debug)]
pub(super) enum Next {
    /// Make this call next (in the same look).
    Call(Call),
    /// The look is over.
    Round(Round),
}

/// The first call of a look: the mutation when the step has no operation.
pub(super) fn first(target: &Target<'_>) -> Call {
    if target.operation.is_some() {
        Call::ReadOperation
    } else {
        Call::Send
    }
}

/// What an answer means for the step. A mutation's answer leads at most to
/// a read of the VM, an operation's to a read of the VM, a read of the VM
/// to the end of the look: a look makes two calls at most.
pub(super) fn decide(facts: &Facts<'_>, answer: Answer) -> Next {
    let kind = facts.kind;
    let round = match answer {
        Answer::Sent(Ok(op)) if let Some(failure) = op.failure() => {
            operation_failed(facts, failure)
        }
        Answer::Sent(Ok(op)) => Round::Operation(op.name),
        Answer::Sent(Err(ProviderError::AlreadyExists)) if kind == StepKind::Create => {
            return Next::Call(Call::Adopt);
        }
        Answer::Sent(Err(ProviderError::NotFound)) => match kind {
            // Gone already: confirmed by a read.
            StepKind::Delete => return Next::Call(Call::ReadBack),
            // What the create names (its image, network, zone) does not
            // exist: refused for good, with the provider's reason.
            StepKind::Create => failed(ProviderError::NotFound.failure()),
            // The VM is gone: the instance is lost.
            StepKind::Stop | StepKind::Start => failed(StepFailure::Vanished),
        },
        Answer::Sent(Err(ProviderError::Throttled { quota, retry_after })) => {
            Round::Throttled(quota, retry_after)
        }
        Answer::Operation(Ok(op)) if op.status != OperationStatus::Done => Round::PollOperation,
        Answer::Operation(Ok(op)) if let Some(failure) = op.failure() => {
            operation_failed(facts, failure)
        }
        Answer::Operation(Ok(_)) => return Next::Call(Call::ReadBack),
        Answer::Operation(Err(ProviderError::NotFound)) => Round::Resend,
        Answer::Adopt(Ok(Some(vm))) if owned(facts, &vm) => confirm(kind, vm),
        Answer::Adopt(Ok(Some(_))) => failed(StepFailure::NameTaken),
        Answer::Adopt(Ok(None)) => Round::PollVm,
        Answer::ReadBack(Ok(None)) => match kind {
            StepKind::Delete => Round::End(Outcome::Confirmed { vm_status: None }),
            // A VM just made may not be readable at once.
            StepKind::Create => Round::PollVm,
            StepKind::Stop | StepKind::Start => failed(StepFailure::Vanished),
        },
        Answer::ReadBack(Ok(Some(vm))) if kind == StepKind::Create && !owned(facts, &vm) => {
            failed(StepFailure::NameTaken)
        }
        Answer::ReadBack(Ok(Some(vm))) => confirm(kind, vm),
        Answer::Sent(Err(e))
        | Answer::Operation(Err(e))
        | Answer::ReadBack(Err(e))
        | Answer::Adopt(Err(e)) => {
            if e.is_retryable() {
                Round::Retry(e)
            } else {
                failed(e.failure())
            }
        }
    };
    Next::Round(round)
}

/// Makes the calls [`decide`] asks for, from [`first`] on.
pub(super) async fn look(
    provider: &dyn InstanceProvider,
    facts: &Facts<'_>,
    target: &Target<'_>,
) -> Round {
    let mut call = first(target);
    loop {
        let answer = ask(provider, facts.kind, target, call).await;
        if let Answer::Sent(Ok(op)) | Answer::Operation(Ok(op)) = &answer
            && let Some(failure) = op.failure()
        {
            tracing::warn!(
                instance = %facts.instance_id,
                step = facts.kind.as_str(),
                code = %failure,
                messages = ?op.error_messages,
                "the provider's operation ended with an error"
            );
        }
        if let (Call::Adopt, Answer::Adopt(Ok(Some(vm)))) = (call, &answer)
            && owned(facts, vm)
        {
            tracing::info!(vm = %target.name, "create answered alreadyExists: adopting our own vm");
        }
        match decide(facts, answer) {
            Next::Call(next) => call = next,
            Next::Round(round) => return round,
        }
    }
}

async fn ask(
    provider: &dyn InstanceProvider,
    kind: StepKind,
    target: &Target<'_>,
    call: Call,
) -> Answer {
    let (zone, name, request) = (target.zone, target.name, target.request_id);
    match call {
        Call::Send => Answer::Sent(match kind {
            StepKind::Create => match target.spec {
                Some(spec) => provider.create_vm(spec, request).await,
                // Nothing to send: refused for good without a reason of the
                // provider's (`provider-error`).
                None => Err(ProviderError::Rejected {
                    status: 400,
                    reason: String::new(),
                }),
            },
            StepKind::Stop => provider.stop_vm(zone, name, request).await,
            StepKind::Start => provider.start_vm(zone, name, request).await,
            StepKind::Delete => provider.delete_vm(zone, name, request).await,
        }),
        Call::ReadOperation => {
            let op = target.operation.unwrap_or_default();
            Answer::Operation(provider.get_operation(zone, op).await)
        }
        Call::ReadBack => Answer::ReadBack(provider.get_vm(zone, name).await),
        Call::Adopt => Answer::Adopt(provider.get_vm(zone, name).await),
    }
}

fn failed(failure: StepFailure) -> Round {
    Round::End(Outcome::Failed { failure })
}

/// Whether the VM is this step's instance's own: its `bc-instance` label
/// names the instance and its `bc-installation` label this installation
/// (contract 3.12 r4: another installation's VM is never adopted).
fn owned(facts: &Facts<'_>, vm: &Vm) -> bool {
    let label = |key: &str| vm.labels.get(key).map(String::as_str);
    label(providers::INSTANCE_LABEL) == Some(facts.instance_id)
        && label(providers::INSTALLATION_LABEL) == Some(facts.installation)
}

/// The VM read back: the step succeeded when it is in the status aimed at.
fn confirm(kind: StepKind, vm: Vm) -> Round {
    let aimed = match kind {
        StepKind::Create | StepKind::Start => vm.status.is_running(),
        StepKind::Stop => vm.status.is_off(),
        // A VM still there: its delete is not done.
        StepKind::Delete => false,
    };
    if aimed {
        Round::End(Outcome::Confirmed {
            vm_status: Some(vm.status),
        })
    } else {
        Round::PollVm
    }
}

/// A done operation with errors: an on-demand create goes on in the pool's
/// next zone when the zone is exhausted; anything else fails the step with
/// the provider's first code (its message goes to the log only).
fn operation_failed(facts: &Facts<'_>, failure: StepFailure) -> Round {
    if facts.kind == StepKind::Create && facts.on_demand && failure.zone_exhausted() {
        let next = facts.zone_index + 1;
        if let Some(zone) = usize::try_from(next).ok().and_then(|i| facts.zones.get(i)) {
            return Round::NextZone(zone.clone(), next);
        }
    }
    failed(failure)
}

#[cfg(test)]
mod tests;
