//! Settlement of one reservation (contract section 5.3): the
//! transitions that are due at grants' `startsAt` and `endsAt`, and the
//! forced ends (`reservationGrants.end`, tenant deletion, reservation loss).
//!
//! Settlement is lazy: the storage layer, holding the reservation's row lock,
//! reads its grants and the instances on it, asks [`settle`] what happened
//! since the last settlement up to now, writes the answer (placement
//! segments, grant states, events) and records it in the rows, which
//! [`apply`] does to the in-memory snapshot. Asking again then yields nothing,
//! so it does not matter whether a request or the `vps.grants` reconciler
//! settles first, nor how often.
//!
//! # What happens, and when
//!
//! * At a grant's **start** it becomes active and takes in its tenant's
//!   running `standard` instances on ordinary slots of the reservation that it
//!   serves (its project's only, if it names one), oldest first (`createdAt`,
//!   then instance id), up to its free slots. A grant created after its
//!   `startsAt` takes them in from its creation instant instead: placement
//!   history is never rewritten into the past.
//! * At a grant's **end** its instances, running ones first then stopped
//!   ones, oldest first, move into a renewal (another grant of the same
//!   tenant on the reservation, live at that instant, that serves them), up
//!   to its free slots; among several renewals the placement order applies
//!   (project-scoped first, then earliest `startsAt`, then grant id). The
//!   remaining running instances go to ordinary slots, the remaining stopped
//!   ones lose their slot.
//!
//! # Order at one instant
//!
//! Transitions are processed in time order. **At the same instant, ends come
//! before starts**: a renewal that starts exactly when the old grant ends
//! first receives the old grant's instances by hand-over, and then takes in
//! ordinary instances with whatever slots are left. Its `Activate` thus
//! follows, at the same instant, the `End` that handed instances to it: a
//! grant not yet activated holds instances only between the two, within one
//! settlement. Among several ends, or several starts, at one instant, grants
//! go in placement order, so the
//! grant placement would fill first also takes in first. A grant whose term
//! is over before it could take anything in (created after its `endsAt`, or
//! with an empty term) is activated without take-in immediately before its
//! own end.
//!
//! # Preconditions
//!
//! The snapshot must be the reservation as settled so far: the caller
//! settles before every change to the reservation's grants or to the
//! instances on it (create, stop, start, delete), so instances did not
//! change between the last settlement and `now`. As a guard, nothing is taken
//! in or handed over to a grant before its `createdAt`, and no instance is
//! taken in before its `createdAt`.

mod engine;
#[cfg(test)]
mod tests;

use std::fmt;

use crate::placement::{Billing, Seat};
use crate::rules::Owner;

use engine::{Engine, take_in_instant};

/// The state of a grant (`scheduled`, `active`, `ended`, `cancelled`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GrantState {
    /// Before `startsAt`.
    Scheduled,
    /// In `[startsAt, endsAt)`.
    Active,
    /// From `endsAt` on.
    Ended,
    /// Ended before it started.
    Cancelled,
}

impl GrantState {
    /// Every state, in lifecycle order.
    pub const ALL: [GrantState; 4] = [
        GrantState::Scheduled,
        GrantState::Active,
        GrantState::Ended,
        GrantState::Cancelled,
    ];

    /// The wire name: `"scheduled"`, `"active"`, `"ended"` or `"cancelled"`.
    pub fn as_str(self) -> &'static str {
        match self {
            GrantState::Scheduled => "scheduled",
            GrantState::Active => "active",
            GrantState::Ended => "ended",
            GrantState::Cancelled => "cancelled",
        }
    }

    /// Parses a wire name; `None` for anything else (exact, case-sensitive).
    pub fn parse(s: &str) -> Option<GrantState> {
        GrantState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
    }
}

impl fmt::Display for GrantState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of a grant at `now`, whether or not anything has been settled:
/// `cancelled` if it was cancelled, else `scheduled` before `starts_at`,
/// `active` in `[starts_at, ends_at)` and `ended` from `ends_at`.
///
/// ```
/// use grants_core::{grant_state, GrantState};
///
/// assert_eq!(grant_state(10, 20, false, 9), GrantState::Scheduled);
/// assert_eq!(grant_state(10, 20, false, 10), GrantState::Active);
/// assert_eq!(grant_state(10, 20, false, 20), GrantState::Ended);
/// assert_eq!(grant_state(10, 20, true, 15), GrantState::Cancelled);
/// ```
pub fn grant_state(starts_at: i64, ends_at: i64, cancelled: bool, now: i64) -> GrantState {
    if cancelled {
        GrantState::Cancelled
    } else if now < starts_at {
        GrantState::Scheduled
    } else if now < ends_at {
        GrantState::Active
    } else {
        GrantState::Ended
    }
}

/// Why a grant ended or was cancelled (`reason` on the grant and on its
/// `reservation-grant.ended` / `.cancelled` event).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EndReason {
    /// `"term-over"`: it reached its `endsAt`.
    TermOver,
    /// `"ended"`: root ended it with `reservationGrants.end`.
    Ended,
    /// `"reservation-gone"`: the provider stopped reporting the reservation.
    ReservationGone,
    /// `"tenant-deleted"`: its grantee was deleted.
    TenantDeleted,
}

impl EndReason {
    /// Every reason.
    pub const ALL: [EndReason; 4] = [
        EndReason::TermOver,
        EndReason::Ended,
        EndReason::ReservationGone,
        EndReason::TenantDeleted,
    ];

    /// The wire name: `"term-over"`, `"ended"`, `"reservation-gone"` or
    /// `"tenant-deleted"`.
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::TermOver => "term-over",
            EndReason::Ended => "ended",
            EndReason::ReservationGone => "reservation-gone",
            EndReason::TenantDeleted => "tenant-deleted",
        }
    }

    /// Parses a wire name; `None` for anything else (exact, case-sensitive).
    pub fn parse(s: &str) -> Option<EndReason> {
        EndReason::ALL
            .into_iter()
            .find(|reason| reason.as_str() == s)
    }
}

impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether an instance runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Power {
    /// `"running"`.
    Running,
    /// `"stopped"`.
    Stopped,
}

/// A grant on the reservation, as settlement sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SettlementGrant {
    /// The grant's id.
    pub grant_id: String,
    /// The grantee.
    pub tenant_id: String,
    /// The one project it serves, if it names one.
    pub project_id: Option<String>,
    /// The committed slots.
    pub slots: u32,
    /// Start of the term.
    pub starts_at: i64,
    /// End of the term (its final value for an ended grant).
    pub ends_at: i64,
    /// When the grant was created; it takes nothing in or over before then.
    pub created_at: i64,
    /// What settlement has recorded so far: `Scheduled` until its activation
    /// is applied, `Active` until its end is, then `Ended`; `Cancelled` grants
    /// are left alone. This is the stored state, which may lag behind
    /// [`SettlementGrant::state_at`].
    pub settled: GrantState,
}

impl SettlementGrant {
    /// The grant's true state at `now` (see [`grant_state`]).
    pub fn state_at(&self, now: i64) -> GrantState {
        grant_state(
            self.starts_at,
            self.ends_at,
            self.settled == GrantState::Cancelled,
            now,
        )
    }

    fn owner(&self) -> Owner<'_> {
        Owner {
            tenant_id: &self.tenant_id,
            project_id: self.project_id.as_deref(),
        }
    }
}

/// An instance on the reservation, as settlement sees it.
///
/// Only instances holding a slot of the reservation matter; others may be
/// passed with `seat: None` and are left alone.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SettlementInstance {
    /// The instance's id.
    pub instance_id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// Its project, if any.
    pub project_id: Option<String>,
    /// How it is billed; `billing: "none"` instances are never taken in.
    pub billing: Billing,
    /// Whether it runs.
    pub power: Power,
    /// When it was created: the "oldest first" order.
    pub created_at: i64,
    /// The slot it holds on the reservation now, if any.
    pub seat: Option<Seat>,
}

impl SettlementInstance {
    fn owner(&self) -> Owner<'_> {
        Owner {
            tenant_id: &self.tenant_id,
            project_id: self.project_id.as_deref(),
        }
    }
}

/// Where an instance goes at a transition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Destination {
    /// Into this grant (a renewal).
    Grant(String),
    /// Onto an ordinary slot of the reservation (`placement.kind: "reservation"`).
    Reservation,
    /// Off the reservation, on-demand (the reservation is gone).
    OnDemand,
    /// Nowhere: a stopped instance loses its slot (`placement.kind: "none"`).
    None,
}

impl Destination {
    /// The slot the instance holds on the reservation afterwards, if any.
    pub fn seat(&self) -> Option<Seat> {
        match self {
            Destination::Grant(grant_id) => Some(Seat::Grant(grant_id.clone())),
            Destination::Reservation => Some(Seat::Ordinary),
            Destination::OnDemand | Destination::None => None,
        }
    }
}

/// One instance moving at a transition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Move {
    /// The instance.
    pub instance_id: String,
    /// Where it goes.
    pub to: Destination,
}

/// A change to the reservation at one instant. Each one publishes
/// its grant's event (`reservation-grant.active`, `.ended`, `.cancelled`)
/// exactly once, and starts a new placement segment, from `at`, for every
/// instance it names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Transition {
    /// The grant becomes active and takes in these instances (oldest first)
    /// from their ordinary slots.
    Activate {
        /// The grant.
        grant_id: String,
        /// Its `startsAt`, or its `createdAt` if that is later (bounded by
        /// its `endsAt`): the instant the take-in takes effect.
        at: i64,
        /// The instances it takes in, oldest first.
        take_in: Vec<String>,
    },
    /// The grant ends (its `endsAt` becomes `at`) and hands its instances
    /// over.
    End {
        /// The grant.
        grant_id: String,
        /// The instant it ends: its `endsAt`, or earlier for a forced end.
        at: i64,
        /// Why it ends.
        reason: EndReason,
        /// Where each of its instances goes: running ones first, then
        /// stopped ones, each oldest first.
        moves: Vec<Move>,
    },
    /// The grant is cancelled before it started; its term is kept as it was.
    Cancel {
        /// The grant.
        grant_id: String,
        /// The instant it is cancelled (its `endedAt`).
        at: i64,
        /// Why.
        reason: EndReason,
    },
    /// A live grant holds fewer instances than its slots because one of its
    /// instances left it (deleted) while it goes on: its tenant's running
    /// `standard` instances on ordinary slots of the reservation that it
    /// serves move into it at that instant, oldest first, up to its free
    /// slots (contract 5.3, r2). No event: the grant's state is unchanged.
    Refill {
        /// The grant.
        grant_id: String,
        /// The instant the slot freed.
        at: i64,
        /// The instances it takes in, oldest first.
        take_in: Vec<String>,
    },
    /// The reservation is gone: the instances on its ordinary slots leave it
    /// (running ones on-demand, any stopped one loses its slot). Grant
    /// instances leave with their grant's [`Transition::End`].
    ReservationLost {
        /// The instant the scan saw it gone.
        at: i64,
        /// The instances, oldest first.
        moves: Vec<Move>,
    },
}

impl Transition {
    /// The instant of the transition.
    pub fn at(&self) -> i64 {
        match self {
            Transition::Activate { at, .. }
            | Transition::Refill { at, .. }
            | Transition::End { at, .. }
            | Transition::Cancel { at, .. }
            | Transition::ReservationLost { at, .. } => *at,
        }
    }

    /// The grant it is about (none for [`Transition::ReservationLost`]).
    pub fn grant_id(&self) -> Option<&str> {
        match self {
            Transition::Activate { grant_id, .. }
            | Transition::Refill { grant_id, .. }
            | Transition::End { grant_id, .. }
            | Transition::Cancel { grant_id, .. } => Some(grant_id),
            Transition::ReservationLost { .. } => None,
        }
    }
}

/// An end that does not wait for `endsAt`. Active grants it covers end at the
/// given instant with a hand-over; scheduled ones are cancelled.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ForcedEnd {
    /// `reservationGrants.end` of one grant (reason `ended`). Another live
    /// grant of the tenant may take its instances over.
    Root {
        /// The grant root ends.
        grant_id: String,
    },
    /// The tenant is deleted: all its grants on the reservation (reason
    /// `tenant-deleted`), none of which takes over from another.
    TenantDeleted {
        /// The deleted tenant.
        tenant_id: String,
    },
    /// The provider stopped reporting the reservation: all its grants (reason
    /// `reservation-gone`); running instances go on-demand instead of to
    /// ordinary slots, those on ordinary slots included.
    ReservationGone,
}

impl ForcedEnd {
    /// The reason recorded on the grants it ends or cancels.
    pub fn reason(&self) -> EndReason {
        match self {
            ForcedEnd::Root { .. } => EndReason::Ended,
            ForcedEnd::TenantDeleted { .. } => EndReason::TenantDeleted,
            ForcedEnd::ReservationGone => EndReason::ReservationGone,
        }
    }

    /// Where running instances without a renewal go.
    fn fallback(&self) -> Destination {
        match self {
            ForcedEnd::ReservationGone => Destination::OnDemand,
            ForcedEnd::Root { .. } | ForcedEnd::TenantDeleted { .. } => Destination::Reservation,
        }
    }

    fn covers(&self, grant: &SettlementGrant) -> bool {
        match self {
            ForcedEnd::Root { grant_id } => grant.grant_id == *grant_id,
            ForcedEnd::TenantDeleted { tenant_id } => grant.tenant_id == *tenant_id,
            ForcedEnd::ReservationGone => true,
        }
    }
}

/// The transitions due on the reservation up to `now` (inclusive) that
/// settlement has not recorded yet, in the order they happen (see the module
/// documentation for the order at one instant).
///
/// Apply them all (storage writes them; [`apply`] mirrors that on the
/// snapshot) and `settle` returns nothing more for the same `now`. Settling to
/// `t1` and then to `t2` gives the same transitions as settling to `t2` at
/// once.
///
/// ```
/// use grants_core::{
///     settle, Billing, GrantState, Power, Seat, SettlementGrant, SettlementInstance, Transition,
/// };
///
/// let grant = SettlementGrant {
///     grant_id: "rgrant_1".into(),
///     tenant_id: "acme".into(),
///     project_id: None,
///     slots: 1,
///     starts_at: 100,
///     ends_at: 200,
///     created_at: 0,
///     settled: GrantState::Scheduled,
/// };
/// let vm = SettlementInstance {
///     instance_id: "inst_1".into(),
///     tenant_id: "acme".into(),
///     project_id: None,
///     billing: Billing::Standard,
///     power: Power::Running,
///     created_at: 50,
///     seat: Some(Seat::Ordinary),
/// };
/// let due = settle(&[grant], &[vm], 150);
/// assert_eq!(due, [Transition::Activate {
///     grant_id: "rgrant_1".into(),
///     at: 100,
///     take_in: vec!["inst_1".into()],
/// }]);
/// ```
pub fn settle(
    grants: &[SettlementGrant],
    instances: &[SettlementInstance],
    now: i64,
) -> Vec<Transition> {
    let mut engine = Engine::new(grants, instances);
    engine.settle(now);
    engine.into_transitions()
}

/// Whether anything is due up to `now` among `grants`: a scheduled grant
/// whose take-in instant has come, or an open grant whose term is over. It is
/// true exactly when [`settle`] answers at least one transition, whatever the
/// instances, so storage asks it before reading the seated instances.
///
/// Only grants that have started by `now` can be due, and [`settle`] answers
/// the same for the open grants that have started as for all of them: a
/// grant starting later is neither activated, nor ended, nor live to take an
/// instance over (`tests/settlement_props.rs` checks both).
pub fn has_due(grants: &[SettlementGrant], now: i64) -> bool {
    grants.iter().any(|g| match g.settled {
        GrantState::Scheduled => take_in_instant(g) <= now,
        GrantState::Active => g.ends_at <= now,
        GrantState::Ended | GrantState::Cancelled => false,
    })
}

/// A forced end at `at`: first the transitions due up to `at` (exactly as
/// [`settle`] gives them), then the forced ones. Every grant covered by
/// `cause` that is active after that settlement ends at `at` with a
/// hand-over; every one still scheduled is cancelled; ended and cancelled
/// ones are left as they are (an `end` never makes `endsAt` later). For
/// [`ForcedEnd::ReservationGone`], a [`Transition::ReservationLost`] also
/// moves the instances on ordinary slots off the reservation.
///
/// Like [`settle`], applying the answer and asking again for the same `at`
/// yields nothing.
pub fn force_end(
    grants: &[SettlementGrant],
    instances: &[SettlementInstance],
    cause: &ForcedEnd,
    at: i64,
) -> Vec<Transition> {
    let mut engine = Engine::new(grants, instances);
    engine.settle(at);
    engine.force(cause, at);
    engine.into_transitions()
}

/// The refill at `at` after an instance left a grant (contract 5.3, r2):
/// first the transitions due up to `at` (exactly as [`settle`] gives them),
/// then, for every grant live at `at` with a free slot, in placement order,
/// a [`Transition::Refill`] taking in its tenant's running `standard`
/// instances on ordinary slots that it serves, oldest first, up to its free
/// slots. The caller passes the snapshot as it is once the instance has
/// left (a deleted instance is no longer in it, or holds no seat).
///
/// With the take-in at `startsAt` and placement's grants-first rule, this
/// keeps the source's promise: an instance of a grantee is on an ordinary
/// slot only while every live grant of its tenant on the reservation that
/// serves it is full. Applying the answer and asking again yields nothing.
///
/// ```
/// use grants_core::{
///     refill, Billing, GrantState, Power, Seat, SettlementGrant, SettlementInstance, Transition,
/// };
///
/// let grant = SettlementGrant {
///     grant_id: "rgrant_1".into(),
///     tenant_id: "acme".into(),
///     project_id: None,
///     slots: 1,
///     starts_at: 0,
///     ends_at: 100,
///     created_at: 0,
///     settled: GrantState::Active,
/// };
/// // The grant's instance was just deleted; an older and a newer one are on
/// // ordinary slots.
/// let ordinary = |id: &str, created_at| SettlementInstance {
///     instance_id: id.into(),
///     tenant_id: "acme".into(),
///     project_id: None,
///     billing: Billing::Standard,
///     power: Power::Running,
///     created_at,
///     seat: Some(Seat::Ordinary),
/// };
/// let due = refill(&[grant], &[ordinary("inst_b", 20), ordinary("inst_a", 10)], 50);
/// assert_eq!(due, [Transition::Refill {
///     grant_id: "rgrant_1".into(),
///     at: 50,
///     take_in: vec!["inst_a".into()],
/// }]);
/// ```
pub fn refill(
    grants: &[SettlementGrant],
    instances: &[SettlementInstance],
    at: i64,
) -> Vec<Transition> {
    let mut engine = Engine::new(grants, instances);
    engine.settle(at);
    engine.refill(at);
    engine.into_transitions()
}

/// Records `transition` in the snapshot, as storage records it in its rows:
/// grant states, the final `endsAt` of an ended grant, and the seat of every
/// instance it moves. Grants and instances it names that are not in the
/// snapshot are ignored.
pub fn apply(
    grants: &mut [SettlementGrant],
    instances: &mut [SettlementInstance],
    transition: &Transition,
) {
    match transition {
        Transition::Activate {
            grant_id, take_in, ..
        } => {
            update_grant(grants, grant_id, |grant| grant.settled = GrantState::Active);
            let seat = Seat::Grant(grant_id.clone());
            for instance_id in take_in {
                set_seat(instances, instance_id, Some(seat.clone()));
            }
        }
        Transition::Refill {
            grant_id, take_in, ..
        } => {
            let seat = Seat::Grant(grant_id.clone());
            for instance_id in take_in {
                set_seat(instances, instance_id, Some(seat.clone()));
            }
        }
        Transition::End {
            grant_id,
            at,
            moves,
            ..
        } => {
            update_grant(grants, grant_id, |grant| {
                grant.settled = GrantState::Ended;
                grant.ends_at = grant.ends_at.min(*at);
            });
            apply_moves(instances, moves);
        }
        Transition::Cancel { grant_id, .. } => {
            update_grant(grants, grant_id, |grant| {
                grant.settled = GrantState::Cancelled;
            });
        }
        Transition::ReservationLost { moves, .. } => apply_moves(instances, moves),
    }
}

fn update_grant(
    grants: &mut [SettlementGrant],
    grant_id: &str,
    update: impl FnOnce(&mut SettlementGrant),
) {
    if let Some(grant) = grants.iter_mut().find(|grant| grant.grant_id == grant_id) {
        update(grant);
    }
}

fn apply_moves(instances: &mut [SettlementInstance], moves: &[Move]) {
    for Move { instance_id, to } in moves {
        set_seat(instances, instance_id, to.seat());
    }
}

fn set_seat(instances: &mut [SettlementInstance], instance_id: &str, seat: Option<Seat>) {
    if let Some(instance) = instances
        .iter_mut()
        .find(|instance| instance.instance_id == instance_id)
    {
        instance.seat = seat;
    }
}
