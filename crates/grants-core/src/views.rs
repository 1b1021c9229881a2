//! Operator views (contract 3.10): the arithmetic behind a reservation's
//! slot accounts, its timeline and a grant's hour-by-hour usage. Nothing
//! here writes or settles anything: the views are computed at the server's
//! now from what is stored, with the transitions due since the last
//! settlement applied in memory ([`preview_settlement`]), so an answer never
//! depends on whether a reconciler has run.
//!
//! * [`slot_accounts`]: `grantedSlots`, `heldInGrants`, `ordinaryInUse`,
//!   `ordinaryFree` and `physicalInUse` of contract 4 at an instant.
//! * [`project_stints`]: the placement segments on the reservation with the
//!   due transitions applied, as settlement would write them.
//! * [`committed_steps`] and [`in_use_steps`]: contiguous, gapless step
//!   functions over a window, merged where equal.
//! * [`reservation_timeline`]: the timeline as one viewer may see it; a
//!   grantee sees other tenants' grants only as [`AnonymousGrant`]s.
//! * [`grant_hours`]: one [`HourRow`] per hour bucket of a grant's term.
//!
//! ```
//! use grants_core::views::{committed_steps, CommittedStep};
//! use grants_core::{Commitment, Term};
//!
//! let grants = [Commitment::new(Term::new(10, 30), 2), Commitment::new(Term::new(20, 40), 3)];
//! let steps = committed_steps(&grants, Term::new(0, 50));
//! let step = |from, to, slots| CommittedStep { from, to, slots };
//! assert_eq!(
//!     steps,
//!     [step(0, 10, 0), step(10, 20, 2), step(20, 30, 5), step(30, 40, 3), step(40, 50, 0)],
//! );
//! ```

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::capacity::{Commitment, Term};
use crate::metering::{HOUR_MS, bucket_start, hour_buckets, round_to_micros};
use crate::placement::{LiveGrant, ReservationView, Seat};
use crate::settlement::{
    Destination, GrantState, Power, TimelineGrant, TimelineInstance, Transition, apply, settle,
};

/// A reservation's snapshot as settlement at an instant would leave it: the
/// transitions due, and the grants and instances once they are applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettlementPreview {
    /// The grants afterwards.
    pub grants: Vec<TimelineGrant>,
    /// The instances afterwards.
    pub instances: Vec<TimelineInstance>,
    /// What settlement would record, in order.
    pub transitions: Vec<Transition>,
}

/// What [`settle`] up to `now` would do to the snapshot, applied to a copy
/// of it: the read-only twin of storage's settlement.
pub fn preview_settlement(
    grants: &[TimelineGrant],
    instances: &[TimelineInstance],
    now: i64,
) -> SettlementPreview {
    let transitions = settle(grants, instances, now);
    let mut grants = grants.to_vec();
    let mut instances = instances.to_vec();
    for transition in &transitions {
        apply(&mut grants, &mut instances, transition);
    }
    SettlementPreview {
        grants,
        instances,
        transitions,
    }
}

/// A reservation's slot accounts at one instant (contract 3.10 and 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlotAccounts {
    /// The slots of the grants live at the instant (non-cancelled,
    /// `startsAt <= t < endsAt`), used or not.
    pub granted_slots: u64,
    /// The instances those grants hold, running or stopped.
    pub held_in_grants: u64,
    /// The running instances on the reservation outside any grant
    /// (`billing: "none"` ones included).
    pub ordinary_in_use: u64,
    /// `total - grantedSlots - ordinaryInUse`, floored at 0.
    pub ordinary_free: u64,
    /// `max(running instances on the reservation, providerInUse)`.
    pub physical_in_use: u64,
}

/// The slot accounts of a reservation of `total` slots (`providerInUse`
/// from its last scan) at `now`, from its open grants and the instances
/// seated on it as last settled: the transitions due up to `now` are applied
/// in memory first, so the figures are those a settlement at `now` would
/// leave, whether or not one has run.
///
/// ```
/// use grants_core::views::{slot_accounts, SlotAccounts};
/// use grants_core::{Billing, GrantState, Power, Seat, TimelineGrant, TimelineInstance};
///
/// let grant = TimelineGrant {
///     grant_id: "rgrant_1".into(),
///     tenant_id: "acme".into(),
///     project_id: None,
///     slots: 2,
///     starts_at: 100,
///     ends_at: 200,
///     created_at: 0,
///     settled: GrantState::Scheduled,
/// };
/// let vm = |id: &str| TimelineInstance {
///     instance_id: id.into(),
///     tenant_id: "acme".into(),
///     project_id: None,
///     billing: Billing::Standard,
///     power: Power::Running,
///     created_at: 10,
///     seat: Some(Seat::Ordinary),
/// };
/// let instances = [vm("inst_a"), vm("inst_b"), vm("inst_c")];
/// // Before the start: three ordinary instances, two slots committed later.
/// let before = slot_accounts(5, 0, &[grant.clone()], &instances, 50);
/// assert_eq!((before.granted_slots, before.ordinary_in_use, before.ordinary_free), (0, 3, 2));
/// // At 150 the grant has taken two of them in, settled or not.
/// assert_eq!(
///     slot_accounts(5, 4, &[grant], &instances, 150),
///     SlotAccounts {
///         granted_slots: 2,
///         held_in_grants: 2,
///         ordinary_in_use: 1,
///         ordinary_free: 2,
///         physical_in_use: 4,
///     },
/// );
/// ```
pub fn slot_accounts(
    total: u64,
    provider_in_use: u64,
    grants: &[TimelineGrant],
    instances: &[TimelineInstance],
    now: i64,
) -> SlotAccounts {
    let settled = preview_settlement(grants, instances, now);
    let held = |grant_id: &str| {
        settled
            .instances
            .iter()
            .filter(|i| matches!(&i.seat, Some(Seat::Grant(g)) if g == grant_id))
            .count()
    };
    let live_grants: Vec<LiveGrant> = settled
        .grants
        .iter()
        .filter(|g| g.state_at(now) == GrantState::Active)
        .map(|g| LiveGrant {
            grant_id: g.grant_id.clone(),
            tenant_id: g.tenant_id.clone(),
            project_id: g.project_id.clone(),
            slots: g.slots,
            starts_at: g.starts_at,
            held: u32::try_from(held(&g.grant_id)).unwrap_or(u32::MAX),
        })
        .collect();
    let running = |seat: fn(&Seat) -> bool| {
        settled
            .instances
            .iter()
            .filter(|i| i.power == Power::Running && i.seat.as_ref().is_some_and(seat))
            .count() as u64
    };
    let view = ReservationView {
        reservation_id: String::new(),
        total,
        provider_in_use,
        running_outside_grants: running(|s| *s == Seat::Ordinary),
        running: running(|_| true),
        live_grants,
    };
    SlotAccounts {
        granted_slots: view.live_grants.iter().map(|g| u64::from(g.slots)).sum(),
        held_in_grants: view.live_grants.iter().map(|g| u64::from(g.held)).sum(),
        ordinary_in_use: view.running_outside_grants,
        ordinary_free: view.ordinary_free(),
        physical_in_use: view.physical_in_use(),
    }
}

/// One placement segment of an instance on the reservation: `[from, to)`
/// (open while `to` is `None`), in a grant or on an ordinary slot.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stint {
    /// The instance.
    pub instance_id: String,
    /// First instant.
    pub from: i64,
    /// First instant after it; `None` while it lasts.
    pub to: Option<i64>,
    /// Whether the instance runs during it.
    pub running: bool,
    /// The grant holding the instance; `None` on an ordinary slot.
    pub grant_id: Option<String>,
}

impl Stint {
    /// Its stretch, an open one lasting until `until`.
    fn term(&self, until: i64) -> Term {
        Term::new(self.from, self.to.unwrap_or(until))
    }
}

/// The reservation's placement segments as they will be once `transitions`
/// (from [`preview_settlement`]) are written: each move closes the
/// instance's open segment at the transition's instant and opens the next
/// one there (none when the instance leaves the reservation), as storage
/// writes them. A move whose instance has no open segment changes nothing.
pub fn project_stints(stints: &[Stint], transitions: &[Transition]) -> Vec<Stint> {
    let mut out = stints.to_vec();
    for transition in transitions {
        let at = transition.at();
        let moves: Vec<(&str, Destination)> = match transition {
            Transition::Activate {
                grant_id, take_in, ..
            }
            | Transition::Refill {
                grant_id, take_in, ..
            } => take_in
                .iter()
                .map(|i| (i.as_str(), Destination::Grant(grant_id.clone())))
                .collect(),
            Transition::End { moves, .. } | Transition::ReservationLost { moves, .. } => moves
                .iter()
                .map(|m| (m.instance_id.as_str(), m.to.clone()))
                .collect(),
            Transition::Cancel { .. } => Vec::new(),
        };
        for (instance_id, to) in moves {
            move_stint(&mut out, instance_id, &to, at);
        }
    }
    out
}

fn move_stint(stints: &mut Vec<Stint>, instance_id: &str, to: &Destination, at: i64) {
    let Some(k) = stints
        .iter()
        .position(|s| s.instance_id == instance_id && s.to.is_none())
    else {
        return;
    };
    // The grant of the next segment on the reservation; None: it leaves.
    let next = match to {
        Destination::Grant(g) => Some(Some(g.clone())),
        Destination::Reservation => Some(None),
        Destination::OnDemand | Destination::None => None,
    };
    if stints[k].from < at {
        stints[k].to = Some(at);
        if let Some(grant_id) = next {
            let running = stints[k].running;
            stints.push(Stint {
                instance_id: instance_id.to_owned(),
                from: at,
                to: None,
                running,
                grant_id,
            });
        }
    } else {
        // An empty segment is replaced, as storage drops it.
        match next {
            Some(grant_id) => stints[k].grant_id = grant_id,
            None => {
                stints.remove(k);
            }
        }
    }
}

/// One step of the committed slots: `slots` over `[from, to)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommittedStep {
    /// First instant.
    pub from: i64,
    /// First instant after it.
    pub to: i64,
    /// The slots of the grants live throughout it.
    pub slots: u64,
}

/// One step of the running instances: over `[from, to)`, `in_grants` held in
/// grants and `ordinary` on ordinary slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InUseStep {
    /// First instant.
    pub from: i64,
    /// First instant after it.
    pub to: i64,
    /// Running instances in grants.
    pub in_grants: u64,
    /// Running instances on ordinary slots.
    pub ordinary: u64,
}

/// The step function of live committed slots over `window`: at every
/// instant `t`, the slots of the `commitments` whose term contains `t`. The
/// steps are contiguous and cover `window` exactly (a step of 0 where
/// nothing is committed), and adjacent steps differ. Nothing for an empty
/// window. Pass every non-cancelled grant (ended ones with their final
/// `endsAt`).
pub fn committed_steps(commitments: &[Commitment], window: Term) -> Vec<CommittedStep> {
    let items = commitments.iter().map(|c| (c.term, [u64::from(c.slots)]));
    sweep(window, items)
        .into_iter()
        .map(|(term, [slots])| CommittedStep {
            from: term.start,
            to: term.end,
            slots,
        })
        .collect()
}

/// The step function of running instances over `window`, from the
/// reservation's placement segments: at every instant, the running segments
/// in a grant and those on an ordinary slot. An open segment lasts to the
/// window's end (pass a window that ends at now at the latest). Contiguous,
/// covering `window` exactly, adjacent steps differ.
pub fn in_use_steps(stints: &[Stint], window: Term) -> Vec<InUseStep> {
    let items = stints.iter().filter(|s| s.running).map(|s| {
        let weight = if s.grant_id.is_some() { [1, 0] } else { [0, 1] };
        (s.term(window.end), weight)
    });
    sweep(window, items)
        .into_iter()
        .map(|(term, [in_grants, ordinary])| InUseStep {
            from: term.start,
            to: term.end,
            in_grants,
            ordinary,
        })
        .collect()
}

/// The step function over `window` of the summed weights of the terms
/// containing each instant, merged where equal.
fn sweep<const N: usize>(
    window: Term,
    items: impl IntoIterator<Item = (Term, [u64; N])>,
) -> Vec<(Term, [u64; N])> {
    if window.is_empty() {
        return Vec::new();
    }
    let mut edges: Vec<(i64, [i128; N])> = Vec::new();
    for (term, weight) in items {
        if let Some(inside) = term.intersection(&window) {
            edges.push((inside.start, weight.map(i128::from)));
            edges.push((inside.end, weight.map(|w| -i128::from(w))));
        }
    }
    edges.sort_by_key(|&(at, _)| at);
    let mut steps: Vec<(Term, [u64; N])> = Vec::new();
    let mut level = [0i128; N];
    let mut next_edge = 0;
    let mut at = window.start;
    while at < window.end {
        while let Some((t, delta)) = edges.get(next_edge)
            && *t <= at
        {
            for (l, d) in level.iter_mut().zip(delta) {
                *l += d;
            }
            next_edge += 1;
        }
        let until = edges
            .get(next_edge)
            .map_or(window.end, |&(t, _)| t.min(window.end));
        let value = level.map(|l| u64::try_from(l).unwrap_or(0));
        match steps.last_mut() {
            Some((last, v)) if *v == value => last.end = until,
            _ => steps.push((Term::new(at, until), value)),
        }
        at = until;
    }
    steps
}

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
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AnonymousGrant {
    /// Committed slots.
    pub slots: u32,
    /// Term start.
    pub starts_at: i64,
    /// Term end.
    pub ends_at: i64,
}

/// A grant in a timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ShownGrant {
    /// Shown in full: the index of the grant in the list given.
    Full(usize),
    /// Another tenant's, anonymised.
    Anonymous(AnonymousGrant),
}

/// An event on the reservation's timeline.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineEvent {
    /// When it happened.
    pub at: i64,
    /// Its type (`reservation-grant.active`, ...).
    pub event_type: String,
    /// The grant it is about, if it is about one grant.
    pub grant_id: Option<String>,
}

/// The grant events `transitions` (from [`preview_settlement`]) will
/// publish when they are written: `reservation-grant.active`, `.ended` and
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
    /// Its placement segments ([`project_stints`]).
    pub stints: &'a [Stint],
    /// Its grant transitions and capacity changes: those of its logs in
    /// commit order, then those [`transition_events`] expects (an event
    /// given twice is shown once).
    pub events: &'a [TimelineEvent],
    /// Who reads it.
    pub viewer: Viewer<'a>,
}

/// A reservation's timeline over a window, as one viewer may see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
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

/// One hour bucket of a grant: what it committed and billed, what its
/// instances held and ran, in micro-hours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HourRow {
    /// The bucket's start.
    pub period_start: i64,
    /// The bucket's end.
    pub period_end: i64,
    /// The grant's slots.
    pub slots: u32,
    /// Slot-hours committed in the bucket: exactly the `vm.grant.slot.hours`
    /// record of the bucket (cumulative rounding over the term), written or
    /// still to be written.
    pub slot_micros: i64,
    /// Instance-hours held in the grant, running or stopped, up to now:
    /// the bucket's exact instance-milliseconds rounded half-up.
    pub held_micros: i64,
    /// Instance-hours running in the grant, up to now, rounded likewise.
    pub usage_micros: i64,
}

/// How many hour buckets `window` overlaps.
///
/// ```
/// use grants_core::views::bucket_count;
/// use grants_core::{Term, HOUR_MS};
///
/// assert_eq!(bucket_count(Term::new(0, HOUR_MS)), 1);
/// assert_eq!(bucket_count(Term::new(HOUR_MS / 2, HOUR_MS + 1)), 2);
/// assert_eq!(bucket_count(Term::new(5, 5)), 0);
/// ```
pub fn bucket_count(window: Term) -> u64 {
    if window.is_empty() {
        return 0;
    }
    let first = i128::from(bucket_start(window.start));
    let last = i128::from(bucket_start(window.end - 1));
    u64::try_from((last - first) / i128::from(HOUR_MS) + 1).unwrap_or(u64::MAX)
}

/// The rows of a grant of `slots` slots over `term`, one per hour bucket of
/// the term that `window` overlaps (so a row is always its whole hour, as
/// billed), oldest first.
///
/// `slot_micros` follows the grant's slot meter exactly (the term's
/// cumulative slot-milliseconds rounded at each bucket end), also for hours
/// not billed yet. `held_micros` and `usage_micros` come from the `stints`
/// of grant `grant_id` (others are ignored) up to `now`, so they are 0 for
/// hours after now, each rounded half-up on its own: a row never holds
/// fewer hours than it ran. Nothing for a window that misses the term.
pub fn grant_hours(
    grant_id: &str,
    slots: u32,
    term: Term,
    window: Term,
    stints: &[Stint],
    now: i64,
) -> Vec<HourRow> {
    grant_hours_with(grant_id, slots, term, window, &[], stints, now)
}

/// The exact instance-milliseconds some of a grant's segments spent in one
/// hour bucket, already summed (storage has the database sum its closed
/// segments, up to now).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BucketMs {
    /// The bucket's start.
    pub bucket: i64,
    /// Held, running or stopped.
    pub held_ms: i64,
    /// Running.
    pub usage_ms: i64,
}

/// [`grant_hours`] from segments of which some are already summed per
/// bucket in `totals` (their buckets outside the rows are ignored) and the
/// others given as `stints`: the same rows as [`grant_hours`] over all of
/// them.
pub fn grant_hours_with(
    grant_id: &str,
    slots: u32,
    term: Term,
    window: Term,
    totals: &[BucketMs],
    stints: &[Stint],
    now: i64,
) -> Vec<HourRow> {
    let Some(range) = term.intersection(&window) else {
        return Vec::new();
    };
    let first = bucket_start(range.start);
    let count = usize::try_from(bucket_count(range)).unwrap_or(0);
    // Exact instance-milliseconds per bucket: held (any power), running.
    let mut held = vec![0i128; count];
    let mut running = vec![0i128; count];
    let span = Term::new(
        first,
        first.saturating_add(HOUR_MS.saturating_mul(count as i64)),
    );
    for stint in stints
        .iter()
        .filter(|s| s.grant_id.as_deref() == Some(grant_id))
    {
        let lived = Term::new(stint.from, stint.to.unwrap_or(now).min(now));
        let Some(inside) = lived.intersection(&span) else {
            continue;
        };
        for (bucket, ms) in hour_buckets(inside.start, inside.end) {
            let k = usize::try_from((bucket - first) / HOUR_MS).unwrap_or(usize::MAX);
            if let Some(h) = held.get_mut(k) {
                *h += i128::from(ms);
            }
            if stint.running
                && let Some(r) = running.get_mut(k)
            {
                *r += i128::from(ms);
            }
        }
    }
    for t in totals {
        if t.bucket < first || (t.bucket - first) % HOUR_MS != 0 {
            continue;
        }
        let k = usize::try_from((t.bucket - first) / HOUR_MS).unwrap_or(usize::MAX);
        if let (Some(h), Some(r)) = (held.get_mut(k), running.get_mut(k)) {
            *h += i128::from(t.held_ms);
            *r += i128::from(t.usage_ms);
        }
    }
    // The slot meter's cumulative value at `t`: slot-ms of the term before it.
    let cumulative = |t: i64| {
        i128::from(slots) * (i128::from(t.clamp(term.start, term.end)) - i128::from(term.start))
    };
    let micros = |m: i128| i64::try_from(m).unwrap_or(i64::MAX);
    (0..count)
        .map(|k| {
            let period_start = first + HOUR_MS * k as i64;
            let period_end = period_start.saturating_add(HOUR_MS);
            let slot =
                round_to_micros(cumulative(period_end)) - round_to_micros(cumulative(period_start));
            HourRow {
                period_start,
                period_end,
                slots,
                slot_micros: micros(slot),
                held_micros: micros(round_to_micros(held[k])),
                usage_micros: micros(round_to_micros(running[k])),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::Billing;

    fn stint(id: &str, from: i64, to: Option<i64>, running: bool, grant: Option<&str>) -> Stint {
        Stint {
            instance_id: id.into(),
            from,
            to,
            running,
            grant_id: grant.map(Into::into),
        }
    }

    #[test]
    fn an_empty_window_has_no_steps() {
        let c = [Commitment::new(Term::new(0, 10), 1)];
        assert!(committed_steps(&c, Term::new(5, 5)).is_empty());
        assert!(in_use_steps(&[], Term::new(6, 5)).is_empty());
    }

    #[test]
    fn nothing_committed_is_one_zero_step() {
        assert_eq!(
            committed_steps(&[], Term::new(3, 9)),
            [CommittedStep {
                from: 3,
                to: 9,
                slots: 0
            }]
        );
    }

    #[test]
    fn back_to_back_equal_grants_merge() {
        let c = [
            Commitment::new(Term::new(0, 10), 2),
            Commitment::new(Term::new(10, 20), 2),
        ];
        assert_eq!(
            committed_steps(&c, Term::new(0, 20)),
            [CommittedStep {
                from: 0,
                to: 20,
                slots: 2
            }]
        );
    }

    #[test]
    fn in_use_counts_running_segments_by_seat() {
        let stints = [
            stint("a", 0, Some(10), true, Some("g")),
            stint("a", 10, None, true, None),
            stint("b", 5, None, false, Some("g")),
            stint("c", 5, Some(8), true, Some("g")),
        ];
        let step = |from, to, in_grants, ordinary| InUseStep {
            from,
            to,
            in_grants,
            ordinary,
        };
        assert_eq!(
            in_use_steps(&stints, Term::new(0, 12)),
            [
                step(0, 5, 1, 0),
                step(5, 8, 2, 0),
                step(8, 10, 1, 0),
                step(10, 12, 0, 1)
            ]
        );
    }

    #[test]
    fn a_take_in_splits_the_open_segment_at_its_instant() {
        let stints = [stint("a", 0, None, true, None)];
        let t = [Transition::Activate {
            grant_id: "g".into(),
            at: 7,
            take_in: vec!["a".into(), "unknown".into()],
        }];
        assert_eq!(
            project_stints(&stints, &t),
            [
                stint("a", 0, Some(7), true, None),
                stint("a", 7, None, true, Some("g"))
            ]
        );
        // A move at the segment's own start replaces it.
        let t = [Transition::Activate {
            grant_id: "g".into(),
            at: 0,
            take_in: vec!["a".into()],
        }];
        assert_eq!(
            project_stints(&stints, &t),
            [stint("a", 0, None, true, Some("g"))]
        );
    }

    #[test]
    fn a_stopped_instance_losing_its_slot_leaves_the_reservation() {
        let stints = [stint("a", 0, None, false, Some("g"))];
        let t = [Transition::End {
            grant_id: "g".into(),
            at: 9,
            reason: crate::EndReason::TermOver,
            moves: vec![crate::Move {
                instance_id: "a".into(),
                to: Destination::None,
            }],
        }];
        assert_eq!(
            project_stints(&stints, &t),
            [stint("a", 0, Some(9), false, Some("g"))]
        );
    }

    #[test]
    fn slot_accounts_floor_ordinary_free_at_zero() {
        let vm = |id: &str| TimelineInstance {
            instance_id: id.into(),
            tenant_id: "acme".into(),
            project_id: None,
            billing: Billing::None,
            power: Power::Running,
            created_at: 0,
            seat: Some(Seat::Ordinary),
        };
        let accounts = slot_accounts(1, 0, &[], &[vm("a"), vm("b")], 10);
        assert_eq!(accounts.ordinary_in_use, 2);
        assert_eq!(accounts.ordinary_free, 0);
        assert_eq!(accounts.physical_in_use, 2);
    }

    #[test]
    fn hour_rows_bill_the_term_and_count_held_and_running_hours() {
        let h = HOUR_MS;
        // 2 slots from 00:30 to 02:15; one instance held from 01:00, stopped
        // from 01:30, still held at now = 01:45.
        let stints = [
            stint("a", h, Some(h + h / 2), true, Some("g")),
            stint("a", h + h / 2, None, false, Some("g")),
            stint("b", 0, None, true, Some("other")),
        ];
        let term = Term::new(h / 2, 2 * h + h / 4);
        let rows = grant_hours("g", 2, term, Term::new(0, 10 * h), &stints, h + 3 * h / 4);
        let figures: Vec<(i64, i64, i64, i64)> = rows
            .iter()
            .map(|r| (r.period_start, r.slot_micros, r.held_micros, r.usage_micros))
            .collect();
        assert_eq!(
            figures,
            [
                (0, 1_000_000, 0, 0),
                (h, 2_000_000, 750_000, 500_000),
                (2 * h, 500_000, 0, 0)
            ]
        );
        // A window inside one hour selects that whole hour.
        let one = grant_hours("g", 2, term, Term::new(h + 1, h + 2), &stints, 2 * h);
        assert_eq!(one.len(), 1);
        assert_eq!((one[0].period_start, one[0].slot_micros), (h, 2_000_000));
        assert!(grant_hours("g", 2, term, Term::new(5 * h, 6 * h), &stints, h).is_empty());
    }

    #[test]
    fn hours_from_bucket_totals_equal_hours_from_the_segments() {
        let h = HOUR_MS;
        let stints = vec![
            stint("a", 0, Some(h / 2), true, Some("g")),
            stint("a", h / 2, Some(3 * h + 7), false, Some("g")),
            stint("a", 3 * h + 7, Some(5 * h), true, Some("g")),
            stint("b", h + 5, None, true, Some("g")),
            stint("c", 0, Some(2 * h), true, Some("other")),
            stint("d", h, Some(2 * h), true, None),
        ];
        let term = Term::new(0, 5 * h);
        let now = 4 * h + 11;
        let all = grant_hours("g", 2, term, term, &stints, now);
        // The closed segments of the grant, summed per bucket up to now.
        let mut totals = Vec::new();
        for s in stints.iter().filter(|s| s.grant_id.as_deref() == Some("g")) {
            let Some(to) = s.to else { continue };
            for (bucket, ms) in hour_buckets(s.from, to.min(now)) {
                let usage_ms = if s.running { ms } else { 0 };
                totals.push(BucketMs {
                    bucket,
                    held_ms: ms,
                    usage_ms,
                });
            }
        }
        let open: Vec<Stint> = stints.iter().filter(|s| s.to.is_none()).cloned().collect();
        assert_eq!(
            grant_hours_with("g", 2, term, term, &totals, &open, now),
            all
        );
        let later = Term::new(2 * h, 5 * h);
        assert_eq!(
            grant_hours_with("g", 2, term, later, &totals, &open, now),
            grant_hours("g", 2, term, later, &stints, now)
        );
    }
}
