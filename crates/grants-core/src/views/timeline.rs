//! A reservation's timeline as one viewer may see it
//! (`reservations.timeline`): the grants meeting a window, its step
//! functions and its events; a grantee sees other tenants' grants only as
//! [`AnonymousGrant`]s and none of their ids.

use std::collections::HashSet;

use crate::capacity::{Commitment, Term};
use crate::settlement::Transition;
use crate::views::preview::Stint;
use crate::views::steps::{CommittedStep, InUseStep, committed_steps, in_use_steps};

/// Who reads a reservation's timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Viewer<'a> {
    /// The reservation's owner (root): every grant in full.
    Operator,
    /// A tenant holding a grant on it: its own grants in full, other
    /// tenants' only as [`AnonymousGrant`]s, and no other tenant's ids.
    Grantee(&'a str),
}

/// A grant of the reservation, as the timeline needs it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListedGrant {
    /// The grant.
    pub grant_id: String,
    /// Its grantee.
    pub tenant_id: String,
    /// Committed slots.
    pub slots: u32,
    /// Term start.
    pub starts_at: i64,
    /// Term end (final once ended).
    pub ends_at: i64,
    /// Whether it was cancelled (it then commits nothing).
    pub cancelled: bool,
}

impl ListedGrant {
    fn term(&self) -> Term {
        Term::new(self.starts_at, self.ends_at)
    }

    /// Whether its term meets `window` (an empty term: whether its instant
    /// lies in it).
    fn meets(&self, window: Term) -> bool {
        let term = self.term();
        term.intersection(&window).is_some() || (term.is_empty() && window.contains(term.start))
    }
}

/// Another tenant's grant as a grantee sees it: only its slots and term.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AnonymousGrant {
    /// Committed slots.
    pub slots: u32,
    /// Term start.
    pub starts_at: i64,
    /// Term end.
    pub ends_at: i64,
}

/// A grant in a timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShownGrant {
    /// Shown in full: the index of the grant in the list given.
    Full(usize),
    /// Another tenant's, anonymised.
    Anonymous(AnonymousGrant),
}

/// An event on the reservation's timeline.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TimelineEvent {
    /// When it happened.
    pub at: i64,
    /// Its type (`reservation-grant.active`, ...).
    pub event_type: String,
    /// The grant it is about, if it is about one grant.
    pub grant_id: Option<String>,
}

/// The grant events `transitions` (from
/// [`preview_settlement`](super::preview::preview_settlement)) will publish
/// when they are written: `reservation-grant.active`, `.ended` and
/// `.cancelled` at their own instants (refills and a reservation's loss
/// publish none).
pub fn transition_events(transitions: &[Transition]) -> Vec<TimelineEvent> {
    transitions
        .iter()
        .filter_map(|t| {
            let event_type = match t {
                Transition::Activate { .. } => "reservation-grant.active",
                Transition::End { .. } => "reservation-grant.ended",
                Transition::Cancel { .. } => "reservation-grant.cancelled",
                Transition::Refill { .. } | Transition::ReservationLost { .. } => return None,
            };
            Some(TimelineEvent {
                at: t.at(),
                event_type: event_type.to_owned(),
                grant_id: t.grant_id().map(str::to_owned),
            })
        })
        .collect()
}

/// What a reservation's timeline is computed from.
#[derive(Debug, Clone, Copy)]
pub struct TimelineInput<'a> {
    /// The range `[from, to)`.
    pub window: Term,
    /// The server's now: in-use steps stop there.
    pub now: i64,
    /// Every grant of the reservation, cancelled ones included.
    pub grants: &'a [ListedGrant],
    /// Its placement segments ([`project_stints`](super::preview::project_stints)).
    pub stints: &'a [Stint],
    /// Its grant transitions and capacity changes: those of its logs in
    /// commit order, then those [`transition_events`] expects (an event
    /// given twice is shown once).
    pub events: &'a [TimelineEvent],
    /// Who reads it.
    pub viewer: Viewer<'a>,
}

/// A reservation's timeline over a window, as one viewer may see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimelineView {
    /// The grants whose term meets the window, by start: indices of the
    /// input's grants shown in full, or anonymous ones.
    pub grants: Vec<ShownGrant>,
    /// The committed slots over the window.
    pub committed: Vec<CommittedStep>,
    /// The running instances over the part of the window up to now.
    pub in_use: Vec<InUseStep>,
    /// The events in the window, oldest first.
    pub events: Vec<TimelineEvent>,
}

/// A reservation's timeline over `input.window`: the grants meeting it,
/// the committed step function of its non-cancelled grants, the in-use step
/// function up to `now` and the events in it.
///
/// A [`Viewer::Operator`] sees every grant in full. A
/// [`Viewer::Grantee`] sees its own grants in full, other tenants'
/// non-cancelled ones as [`AnonymousGrant`]s (their cancelled ones not at
/// all: they commit nothing) and events of other tenants' grants without
/// their grant id: nothing it is shown names another tenant or its grants.
/// The step functions are aggregates and the same for both. Events keep the
/// order given among those of one instant.
pub fn reservation_timeline(input: &TimelineInput<'_>) -> TimelineView {
    let window = input.window;
    let own = |g: &ListedGrant| match input.viewer {
        Viewer::Operator => true,
        Viewer::Grantee(tenant) => g.tenant_id == tenant,
    };
    let mut listed: Vec<(usize, &ListedGrant)> = input
        .grants
        .iter()
        .enumerate()
        .filter(|(_, g)| g.meets(window) && (own(g) || !g.cancelled))
        .collect();
    listed.sort_by_key(|(_, g)| (g.starts_at, g.ends_at, g.grant_id.as_str()));
    let grants = listed
        .into_iter()
        .map(|(k, g)| {
            if own(g) {
                ShownGrant::Full(k)
            } else {
                ShownGrant::Anonymous(AnonymousGrant {
                    slots: g.slots,
                    starts_at: g.starts_at,
                    ends_at: g.ends_at,
                })
            }
        })
        .collect();
    let commitments: Vec<Commitment> = input
        .grants
        .iter()
        .filter(|g| !g.cancelled)
        .map(|g| Commitment::new(g.term(), g.slots))
        .collect();
    let visible: HashSet<&str> = input
        .grants
        .iter()
        .filter(|g| own(g))
        .map(|g| g.grant_id.as_str())
        .collect();
    let mut seen = HashSet::new();
    let mut events: Vec<TimelineEvent> = input
        .events
        .iter()
        .filter(|e| window.contains(e.at) && seen.insert(*e))
        .map(|e| TimelineEvent {
            at: e.at,
            event_type: e.event_type.clone(),
            grant_id: e.grant_id.clone().filter(|g| visible.contains(g.as_str())),
        })
        .collect();
    events.sort_by_key(|e| e.at);
    TimelineView {
        grants,
        committed: committed_steps(&commitments, window),
        in_use: in_use_steps(
            input.stints,
            Term::new(window.start, window.end.min(input.now)),
        ),
        events,
    }
}
