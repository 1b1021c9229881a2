//! The power lifecycle of a managed instance (contract 3.12): which state
//! each request, step outcome or provider observation leads to, whether the
//! instance then holds a running slot, whether its time is billed, and what
//! the change releases.
//!
//! Two rules carry the money and the capacity:
//! - **billed from what ran**: time is billed only from a confirmed create
//!   or start (the VM seen `RUNNING`) until the next request or observation
//!   that ends it; `provisioning` and `starting` hold their slot unbilled;
//! - **slots follow the provider**: a slot is given up only when the
//!   provider confirms the VM stopped or gone (or it was never made), never
//!   at the request, so no new VM is sent to a slot an old one occupies.
//!
//! ```
//! use grants_core::vm::{Cause, StepKind, VmState, next};
//!
//! let admitted = VmState::Provisioning.admitted();
//! assert!(admitted.holds_slot && !admitted.billed);
//! let ran = next(admitted.state, admitted.holds_slot, Cause::Confirmed(StepKind::Create))
//!     .expect("a create can be confirmed");
//! assert!(ran.billed && ran.state == VmState::Running);
//! let stop = next(ran.state, ran.holds_slot, Cause::StopRequested).expect("a stop");
//! // Billing ends at the request; the slot is kept until the VM is stopped.
//! assert!(!stop.billed && stop.holds_slot);
//! ```

pub mod status;

pub use status::{StepFailure, VmStatus};

/// The states of a managed instance (contract 3.7, r3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VmState {
    /// Admitted; its VM is being created.
    Provisioning,
    /// Its VM was seen running.
    Running,
    /// A stop was requested; the VM is not confirmed stopped yet.
    Stopping,
    /// Its VM is stopped.
    Stopped,
    /// A start was requested; the VM is not confirmed running yet.
    Starting,
    /// A delete was requested; the VM is not confirmed gone yet.
    Deleting,
    /// Gone (requested, lost or its tenant deleted).
    Deleted,
    /// Its create failed; it holds nothing.
    Failed,
}

impl VmState {
    /// Whether nothing ever changes it again.
    pub fn is_final(self) -> bool {
        matches!(self, VmState::Deleted | VmState::Failed)
    }

    /// The step a state waits on, if any (a `stopped` instance whose VM was
    /// found running again is `stopping`, so every step has its state).
    pub fn step(self) -> Option<StepKind> {
        match self {
            VmState::Provisioning => Some(StepKind::Create),
            VmState::Stopping => Some(StepKind::Stop),
            VmState::Starting => Some(StepKind::Start),
            VmState::Deleting => Some(StepKind::Delete),
            VmState::Running | VmState::Stopped | VmState::Deleted | VmState::Failed => None,
        }
    }

    /// What an admission (`instances.create`) records: provisioning,
    /// holding a running slot, billing nothing.
    pub fn admitted(self) -> Transition {
        Transition {
            state: VmState::Provisioning,
            holds_slot: true,
            billed: false,
            release: Release::Nothing,
            step: Some(StepKind::Create),
        }
    }
}

/// The provider steps (contract 3.12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepKind {
    /// Create the VM.
    Create,
    /// Stop it.
    Stop,
    /// Start it.
    Start,
    /// Delete it.
    Delete,
}

impl StepKind {
    /// The stored and logged name.
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::Create => "create",
            StepKind::Stop => "stop",
            StepKind::Start => "start",
            StepKind::Delete => "delete",
        }
    }

    /// The step a stored name names.
    pub fn parse(text: &str) -> Option<StepKind> {
        [
            StepKind::Create,
            StepKind::Stop,
            StepKind::Start,
            StepKind::Delete,
        ]
        .into_iter()
        .find(|k| k.as_str() == text)
    }
}

/// What happened to a managed instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cause {
    /// `instances.stop`.
    StopRequested,
    /// `instances.start` (its placement is decided at the request).
    StartRequested,
    /// `instances.delete` (or its tenant's deletion).
    DeleteRequested,
    /// The notice of an interrupted borrower is over (contract 3.14): its
    /// VM is deleted as for a delete request, but a running one stays
    /// billed until it is confirmed gone (5.5).
    Reclaimed,
    /// A step succeeded: the operation is done and the VM read back.
    Confirmed(StepKind),
    /// A step failed for good (an error or its deadline).
    Failed(StepKind),
    /// A listing found the VM stopped while the record says running.
    ObservedStopped,
    /// A listing found the VM running while the record says stopped.
    ObservedRunning,
    /// The VM was missing from two listings in a row.
    Lost,
}

/// What a change gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Release {
    /// Nothing.
    Nothing,
    /// Its seat unless it is a grant slot (a stopped VM keeps its grant
    /// slot, contract 4); quota stays charged.
    Seat,
    /// Its slot and its quota: it is gone.
    All,
}

/// The outcome of a [`Cause`] in a state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Transition {
    /// The new state.
    pub state: VmState,
    /// Whether it holds a running slot from now (for the slot accounts of
    /// contract 4: `ordinaryFree` and `physicalInUse`).
    pub holds_slot: bool,
    /// Whether its time is billed from now.
    pub billed: bool,
    /// What the change gives up, at its instant.
    pub release: Release,
    /// A step to record with the change, if it starts one.
    pub step: Option<StepKind>,
}

/// Why a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refused {
    /// Another step is in flight, or the instance is final: `INVALID_STATE`
    /// naming the state.
    InvalidState(VmState),
    /// Not a change this state can take (an observation or a step outcome
    /// that does not apply); the caller ignores it.
    NotApplicable,
}

fn stay(state: VmState, holds_slot: bool) -> Transition {
    Transition {
        state,
        holds_slot,
        billed: state == VmState::Running,
        release: Release::Nothing,
        step: None,
    }
}

fn to(state: VmState, holds_slot: bool, billed: bool, release: Release) -> Transition {
    Transition {
        state,
        holds_slot,
        billed,
        release,
        step: state.step(),
    }
}

/// The transition `cause` makes from `state` (holding a running slot or
/// not), or why it does not apply.
///
/// A request that repeats the one that started the current step (or finds
/// its aim already reached) returns the state unchanged with no step. A
/// delete is taken in any state but `deleted` and `failed`, also while
/// another step is in flight: its step runs after that one. A step's outcome
/// that no longer matters (a create confirmed after a delete was requested)
/// changes nothing.
pub fn next(state: VmState, holds_slot: bool, cause: Cause) -> Result<Transition, Refused> {
    use Cause as C;
    use StepKind as K;
    use VmState as S;
    let refused = Err(Refused::InvalidState(state));
    match (state, cause) {
        (S::Deleted | S::Failed, C::DeleteRequested | C::Reclaimed) => Ok(stay(state, false)),
        (S::Deleted | S::Failed, C::StopRequested | C::StartRequested) => refused,
        (S::Deleted | S::Failed, _) => Err(Refused::NotApplicable),

        (S::Deleting, C::DeleteRequested | C::Reclaimed) => Ok(stay(state, holds_slot)),
        (_, C::DeleteRequested) => Ok(to(S::Deleting, holds_slot, false, Release::Nothing)),
        // A running borrower interrupted keeps running, billed, on its slot
        // until its VM is confirmed gone.
        (S::Running, C::Reclaimed) => Ok(to(S::Deleting, holds_slot, true, Release::Nothing)),
        (_, C::Reclaimed) => Ok(to(S::Deleting, holds_slot, false, Release::Nothing)),
        (S::Deleting, C::Confirmed(K::Delete) | C::Lost) => {
            Ok(to(S::Deleted, false, false, Release::All))
        }
        (S::Deleting, C::StopRequested | C::StartRequested) => refused,
        (S::Deleting, _) => Err(Refused::NotApplicable),

        (S::Provisioning, C::Confirmed(K::Create)) => {
            Ok(to(S::Running, true, true, Release::Nothing))
        }
        // A create refused for good, or whose VM vanished before it ran.
        (S::Provisioning, C::Failed(K::Create) | C::Lost) => {
            Ok(to(S::Failed, false, false, Release::All))
        }
        (S::Provisioning, C::StopRequested | C::StartRequested) => refused,

        (S::Running, C::StartRequested) | (S::Stopped, C::StopRequested) => {
            Ok(stay(state, holds_slot))
        }
        (S::Running, C::StopRequested) => Ok(to(S::Stopping, true, false, Release::Nothing)),
        (S::Running, C::ObservedStopped) => Ok(to(S::Stopped, false, false, Release::Seat)),
        // The VM is gone: found missing by listings, or by a stop or start
        // step (no state is left waiting for a step that cannot end).
        (S::Running | S::Stopped | S::Stopping | S::Starting, C::Lost) => {
            Ok(to(S::Deleted, false, false, Release::All))
        }

        (S::Stopping, C::StopRequested) | (S::Starting, C::StartRequested) => {
            Ok(stay(state, holds_slot))
        }
        (S::Stopping, C::Confirmed(K::Stop)) => Ok(to(S::Stopped, false, false, Release::Seat)),
        // The VM kept running: so does the record, billed from now.
        (S::Stopping, C::Failed(K::Stop)) if holds_slot => {
            Ok(to(S::Running, true, true, Release::Nothing))
        }
        // A VM found running while stopped, and not stopped again: it runs
        // outside the platform's books (the drift pass tries again).
        (S::Stopping, C::Failed(K::Stop)) => Ok(to(S::Stopped, false, false, Release::Nothing)),
        (S::Stopping | S::Starting, C::StopRequested | C::StartRequested) => refused,

        (S::Stopped, C::StartRequested) => Ok(to(S::Starting, true, false, Release::Nothing)),
        (S::Stopped, C::ObservedRunning) => Ok(to(S::Stopping, false, false, Release::Nothing)),

        (S::Starting, C::Confirmed(K::Start)) => Ok(to(S::Running, true, true, Release::Nothing)),
        (S::Starting, C::Failed(K::Start)) => Ok(to(S::Stopped, false, false, Release::Seat)),

        _ => Err(Refused::NotApplicable),
    }
}

/// A managed instance's history replayed: the billed and slot-holding
/// intervals of a sequence of `(instant, cause)` (instants not decreasing),
/// from an admission at `admitted_at`, up to `until`. Causes that do not
/// apply are skipped, as the platform skips them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Replay {
    /// `[from, to)` intervals billed, adjacent ones merged.
    pub billed: Vec<(i64, i64)>,
    /// `[from, to)` intervals holding a running slot, adjacent ones merged.
    pub holds_slot: Vec<(i64, i64)>,
    /// The instant slot and quota were released, if they were.
    pub released_at: Option<i64>,
    /// The state at the end.
    pub state: Option<VmState>,
}

/// Replays `history` (see [`Replay`]).
pub fn replay(admitted_at: i64, history: &[(i64, Cause)], until: i64) -> Replay {
    let mut out = Replay::default();
    let start = VmState::Provisioning.admitted();
    let mut state = start.state;
    let mut slot = start.holds_slot;
    let mut billed = start.billed;
    let mut since = admitted_at;
    // Adjacent intervals are merged: `[a, b)` then `[b, c)` is `[a, c)`.
    let push = |list: &mut Vec<(i64, i64)>, from: i64, to: i64| match list.last_mut() {
        Some(last) if last.1 == from => last.1 = to,
        _ => list.push((from, to)),
    };
    let close = |out: &mut Replay, from: i64, to: i64, slot: bool, billed: bool| {
        if to > from {
            if slot {
                push(&mut out.holds_slot, from, to);
            }
            if billed {
                push(&mut out.billed, from, to);
            }
        }
    };
    for &(at, cause) in history {
        let Ok(t) = next(state, slot, cause) else {
            continue;
        };
        // A repeated request changes nothing, as storage records it: a
        // reclaimed VM stays billed through its tenant's own delete.
        if t.state == state && t.step.is_none() {
            continue;
        }
        close(&mut out, since, at, slot, billed);
        since = at;
        if t.release == Release::All && out.released_at.is_none() {
            out.released_at = Some(at);
        }
        state = t.state;
        slot = t.holds_slot;
        billed = t.billed;
    }
    close(&mut out, since, until.max(since), slot, billed);
    out.state = Some(state);
    out
}
