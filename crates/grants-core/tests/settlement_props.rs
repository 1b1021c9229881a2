//! Property tests of settlement: idempotent, composable, take-in and
//! hand-over oldest first within free slots, and no grant ever holds more
//! instances than it has slots.

#![expect(
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "tests index answers and expect them; a panic fails the test"
)]

use grants_core::{
    Billing, Destination, EndReason, ForcedEnd, GrantState, Power, Seat, SettlementGrant,
    SettlementInstance, Transition, apply, force_end, has_due, refill, settle,
};
use proptest::prelude::*;

mod common;
use common::{new_instance, scheduled_grant, toggle};

const TENANTS: [&str; 2] = ["acme", "globex"];
const PROJECTS: [Option<&str>; 3] = [None, Some("prj_a"), Some("prj_b")];

#[derive(Debug, Clone)]
struct Snapshot {
    grants: Vec<SettlementGrant>,
    instances: Vec<SettlementInstance>,
}

impl Snapshot {
    fn apply_all(&mut self, transitions: &[Transition]) {
        for transition in transitions {
            apply(&mut self.grants, &mut self.instances, transition);
        }
    }

    fn grant(&self, id: &str) -> &SettlementGrant {
        self.grants
            .iter()
            .find(|g| g.grant_id == id)
            .expect("known grant")
    }

    fn instance(&self, id: &str) -> &SettlementInstance {
        self.instances
            .iter()
            .find(|i| i.instance_id == id)
            .expect("known instance")
    }

    fn held(&self, grant_id: &str) -> usize {
        self.instances
            .iter()
            .filter(|i| i.seat == Some(Seat::Grant(grant_id.into())))
            .count()
    }

    fn free(&self, grant: &SettlementGrant) -> usize {
        (grant.slots as usize).saturating_sub(self.held(&grant.grant_id))
    }

    /// The instances `grant` may take in at `at`, oldest first: running on
    /// ordinary slots, created by then and served by it.
    fn eligible(&self, grant: &SettlementGrant, at: i64) -> Vec<&SettlementInstance> {
        let mut eligible: Vec<&SettlementInstance> = self
            .instances
            .iter()
            .filter(|i| {
                i.seat == Some(Seat::Ordinary)
                    && i.power == Power::Running
                    && i.created_at <= at
                    && serves(grant, i)
            })
            .collect();
        eligible.sort_by_key(|i| age(i));
        eligible
    }
}

fn serves(grant: &SettlementGrant, instance: &SettlementInstance) -> bool {
    instance.billing == Billing::Standard
        && grant.tenant_id == instance.tenant_id
        && (grant.project_id.is_none() || grant.project_id == instance.project_id)
}

fn age(instance: &SettlementInstance) -> (i64, &str) {
    (instance.created_at, &instance.instance_id)
}

prop_compose! {
    fn grant(i: usize)(tenant in 0..TENANTS.len(), project in 0..PROJECTS.len(), slots in 1u32..4,
        starts_at in 0i64..40, len in 0i64..30, created_early in -3i64..10) -> SettlementGrant {
        let owner = (TENANTS[tenant], PROJECTS[project]);
        scheduled_grant(format!("rgrant_{i}"), owner, slots, starts_at, len, created_early)
    }
}

prop_compose! {
    fn instance(i: usize)(tenant in 0..TENANTS.len(), project in 0..PROJECTS.len(),
        billing in prop_oneof![4 => Just(Billing::Standard), 1 => Just(Billing::None)],
        running in any::<bool>(), created_at in -10i64..40) -> SettlementInstance {
        let owner = (TENANTS[tenant], PROJECTS[project]);
        new_instance(format!("inst_{i}"), owner, billing, running, created_at)
    }
}

fn grants() -> impl Strategy<Value = Vec<SettlementGrant>> {
    (0usize..6).prop_flat_map(|n| (0..n).map(grant).collect::<Vec<_>>())
}

fn instances() -> impl Strategy<Value = Vec<SettlementInstance>> {
    (0usize..9).prop_flat_map(|n| (0..n).map(instance).collect::<Vec<_>>())
}

prop_compose! {
    /// A reservation settled up to some `t0`, after which some instances were
    /// stopped or started (so grants hold stopped instances too).
    fn snapshot()(grants in grants(), instances in instances(), t0 in 0i64..60,
        toggles in prop::collection::vec(any::<bool>(), 9)) -> (Snapshot, i64) {
        let mut snapshot = Snapshot { grants, instances };
        let due = settle(&snapshot.grants, &snapshot.instances, t0);
        snapshot.apply_all(&due);
        toggle(&mut snapshot.instances, toggles);
        (snapshot, t0)
    }
}

fn cause() -> impl Strategy<Value = ForcedEnd> {
    prop_oneof![
        (0usize..6).prop_map(|i| ForcedEnd::Root {
            grant_id: format!("rgrant_{i}")
        }),
        (0..TENANTS.len()).prop_map(|t| ForcedEnd::TenantDeleted {
            tenant_id: TENANTS[t].into()
        }),
        Just(ForcedEnd::ReservationGone),
    ]
}

/// Take-in: exactly the oldest eligible instances, up to the free slots.
fn check_activation(
    before: &Snapshot,
    grant_id: &str,
    at: i64,
    take_in: &[String],
) -> Result<(), TestCaseError> {
    let grant = before.grant(grant_id);
    prop_assert_eq!(grant.settled, GrantState::Scheduled);
    let eligible = before.eligible(grant, at);
    let room = if at < grant.ends_at {
        before.free(grant)
    } else {
        0
    };
    let expected: Vec<&str> = eligible
        .iter()
        .take(room)
        .map(|i| i.instance_id.as_str())
        .collect();
    prop_assert_eq!(
        take_in.iter().map(String::as_str).collect::<Vec<_>>(),
        expected
    );
    Ok(())
}

/// Hand-over: every holder moves once, running first then stopped, oldest
/// first; renewals get only instances they serve, within their free slots,
/// and greedily in that order.
fn check_end(before: &Snapshot, transition: &Transition) -> Result<(), TestCaseError> {
    let Transition::End {
        grant_id,
        at,
        reason,
        moves,
    } = transition
    else {
        unreachable!("an end");
    };
    let ending = before.grant(grant_id);
    prop_assert!(matches!(
        ending.settled,
        GrantState::Active | GrantState::Scheduled
    ));
    if *reason == EndReason::TermOver {
        prop_assert_eq!(*at, ending.ends_at);
    }

    let mut holders: Vec<&str> = before
        .instances
        .iter()
        .filter(|i| i.seat == Some(Seat::Grant(grant_id.clone())))
        .map(|i| i.instance_id.as_str())
        .collect();
    let mut moved: Vec<&str> = moves.iter().map(|m| m.instance_id.as_str()).collect();
    let order: Vec<(bool, (i64, &str))> = moved
        .iter()
        .map(|id| {
            let i = before.instance(id);
            (i.power != Power::Running, age(i))
        })
        .collect();
    prop_assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "running first, oldest first"
    );
    holders.sort_unstable();
    moved.sort_unstable();
    prop_assert_eq!(holders, moved, "every holder moves exactly once");

    for (k, m) in moves.iter().enumerate() {
        let instance = before.instance(&m.instance_id);
        match &m.to {
            Destination::Grant(renewal_id) => {
                let renewal = before.grant(renewal_id);
                prop_assert_ne!(renewal_id, grant_id);
                prop_assert!(serves(renewal, instance));
                prop_assert!(renewal.starts_at <= *at && *at < renewal.ends_at);
                prop_assert!(renewal.created_at <= *at);
                let into: usize = moves
                    .iter()
                    .filter(|m| m.to == Destination::Grant(renewal_id.clone()))
                    .count();
                prop_assert!(into <= before.free(renewal), "renewal over its free slots");
            }
            other => {
                let expected = match (instance.power, reason) {
                    (Power::Stopped, _) => Destination::None,
                    (Power::Running, EndReason::ReservationGone) => Destination::OnDemand,
                    (Power::Running, _) => Destination::Reservation,
                };
                prop_assert_eq!(other, &expected);
                // Greedy, oldest first: no renewal serving this instance took
                // a later one.
                for later in &moves[k + 1..] {
                    if let Destination::Grant(renewal_id) = &later.to {
                        prop_assert!(
                            !serves(before.grant(renewal_id), instance),
                            "skipped by a renewal"
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

/// Applies `transitions` one by one, checking each against the state it was
/// decided on and the invariants after it.
fn check_sequence(start: &Snapshot, transitions: &[Transition]) -> Result<Snapshot, TestCaseError> {
    let mut state = start.clone();
    let mut last_at = i64::MIN;
    for transition in transitions {
        prop_assert!(transition.at() >= last_at, "out of time order");
        last_at = transition.at();
        match transition {
            Transition::Activate {
                grant_id,
                at,
                take_in,
            } => {
                check_activation(&state, grant_id, *at, take_in)?;
            }
            Transition::Refill {
                grant_id,
                at,
                take_in,
            } => {
                let grant = state.grant(grant_id);
                prop_assert_eq!(grant.settled, GrantState::Active);
                prop_assert!(grant.starts_at <= *at && *at < grant.ends_at);
                prop_assert!(!take_in.is_empty(), "an empty refill is not recorded");
                let eligible = state.eligible(grant, *at);
                let expected: Vec<&str> = eligible
                    .iter()
                    .take(state.free(grant))
                    .map(|i| i.instance_id.as_str())
                    .collect();
                prop_assert_eq!(
                    take_in.iter().map(String::as_str).collect::<Vec<_>>(),
                    expected
                );
            }
            Transition::End { .. } => check_end(&state, transition)?,
            Transition::Cancel { grant_id, .. } => {
                prop_assert_eq!(state.grant(grant_id).settled, GrantState::Scheduled);
            }
            Transition::ReservationLost { moves, .. } => {
                for m in moves {
                    prop_assert_eq!(&state.instance(&m.instance_id).seat, &Some(Seat::Ordinary));
                }
            }
        }
        state.apply_all(std::slice::from_ref(transition));
        check_invariants(&state)?;
    }
    check_only_active_grants_hold(&state)?;
    Ok(state)
}

/// True after every single transition.
fn check_invariants(state: &Snapshot) -> Result<(), TestCaseError> {
    for grant in &state.grants {
        let held = state.held(&grant.grant_id);
        prop_assert!(
            held <= grant.slots as usize,
            "{} holds {} > {}",
            grant.grant_id,
            held,
            grant.slots
        );
        if matches!(grant.settled, GrantState::Ended | GrantState::Cancelled) {
            prop_assert_eq!(
                held,
                0,
                "{} holds instances while {}",
                grant.grant_id,
                grant.settled
            );
        }
    }
    for instance in &state.instances {
        if let Some(Seat::Grant(_)) = instance.seat {
            prop_assert_eq!(instance.billing, Billing::Standard);
        }
    }
    Ok(())
}

/// True once a whole settlement is applied. (In between, a renewal starting
/// at the instant another grant ends receives the hand-over just before its
/// own activation.)
fn check_only_active_grants_hold(state: &Snapshot) -> Result<(), TestCaseError> {
    for grant in state
        .grants
        .iter()
        .filter(|g| g.settled != GrantState::Active)
    {
        prop_assert_eq!(
            state.held(&grant.grant_id),
            0,
            "{} holds instances while {}",
            grant.grant_id,
            grant.settled
        );
    }
    Ok(())
}

/// The grants storage hands settlement at `at`: the ones that exist by then
/// (created at or before `at`), open, and started by `at`.
fn started_by(grants: &[SettlementGrant], at: i64) -> Vec<SettlementGrant> {
    grants
        .iter()
        .filter(|g| g.created_at <= at && g.starts_at <= at)
        .filter(|g| matches!(g.settled, GrantState::Scheduled | GrantState::Active))
        .cloned()
        .collect()
}

fn existing_by(grants: &[SettlementGrant], at: i64) -> Vec<SettlementGrant> {
    grants
        .iter()
        .filter(|g| g.created_at <= at)
        .cloned()
        .collect()
}

proptest! {
    #[test]
    fn settlement_needs_only_the_open_grants_started_by_now(
        (start, t0) in snapshot(),
        dt in 0i64..80,
    ) {
        let now = t0 + dt;
        let all = existing_by(&start.grants, now);
        let started = started_by(&all, now);
        prop_assert_eq!(
            settle(&started, &start.instances, now),
            settle(&all, &start.instances, now)
        );
        prop_assert_eq!(
            refill(&started, &start.instances, now),
            refill(&all, &start.instances, now)
        );
    }

    #[test]
    fn has_due_is_true_exactly_when_settle_answers_something(
        (start, t0) in snapshot(),
        dt in 0i64..80,
    ) {
        let now = t0 + dt;
        prop_assert_eq!(
            has_due(&start.grants, now),
            !settle(&start.grants, &start.instances, now).is_empty()
        );
    }
}

proptest! {
    #[test]
    fn settling_twice_equals_settling_once((start, t0) in snapshot(), dt in 0i64..80) {
        let now = t0 + dt;
        let mut state = start;
        let due = settle(&state.grants, &state.instances, now);
        state.apply_all(&due);
        prop_assert_eq!(settle(&state.grants, &state.instances, now), vec![]);
    }

    #[test]
    fn settling_in_steps_equals_settling_at_once(
        (start, t0) in snapshot(),
        d1 in 0i64..80,
        d2 in 0i64..80,
    ) {
        let (t1, t2) = (t0 + d1.min(d2), t0 + d1.max(d2));
        let at_once = settle(&start.grants, &start.instances, t2);
        let mut state = start.clone();
        let mut stepped = settle(&state.grants, &state.instances, t1);
        state.apply_all(&stepped);
        stepped.extend(settle(&state.grants, &state.instances, t2));
        prop_assert_eq!(stepped, at_once);
    }

    #[test]
    fn every_transition_follows_the_rules((start, t0) in snapshot(), dt in 0i64..80) {
        check_invariants(&start)?;
        check_only_active_grants_hold(&start)?;
        let due = settle(&start.grants, &start.instances, t0 + dt);
        let settled = check_sequence(&start, &due)?;
        // Settled, every grant that exists by then is in its true state.
        for grant in settled.grants.iter().filter(|g| g.created_at <= t0 + dt) {
            prop_assert_eq!(grant.settled, grant.state_at(t0 + dt), "{} settled", grant.grant_id);
        }
    }

    #[test]
    fn forced_ends_follow_the_rules_and_are_idempotent(
        (start, t0) in snapshot(),
        dt in 0i64..80,
        cause in cause(),
    ) {
        let at = t0 + dt;
        let due = force_end(&start.grants, &start.instances, &cause, at);
        let after = check_sequence(&start, &due)?;
        prop_assert_eq!(force_end(&after.grants, &after.instances, &cause, at), vec![]);
        prop_assert_eq!(settle(&after.grants, &after.instances, at), vec![]);
        for grant in &after.grants {
            let covered = match &cause {
                ForcedEnd::Root { grant_id } => grant.grant_id == *grant_id,
                ForcedEnd::TenantDeleted { tenant_id } => grant.tenant_id == *tenant_id,
                ForcedEnd::ReservationGone => true,
            };
            if covered {
                // Ends at `at` at the latest, never later than it was; a
                // cancelled grant keeps its term.
                let original = start.grant(&grant.grant_id).ends_at;
                match grant.settled {
                    GrantState::Ended => prop_assert_eq!(grant.ends_at, original.min(at)),
                    GrantState::Cancelled => prop_assert_eq!(grant.ends_at, original),
                    other => prop_assert!(false, "{} still {}", grant.grant_id, other),
                }
            }
        }
        if cause == ForcedEnd::ReservationGone {
            prop_assert!(after.instances.iter().all(|i| i.seat.is_none()));
        }
    }

    #[test]
    fn a_refill_after_a_delete_fills_the_freed_slots_oldest_first(
        (start, t0) in snapshot(),
        victim in 0usize..9,
        dt in 0i64..40,
    ) {
        // Settled to t0, then at t0 + dt one instance holding a grant slot
        // (if any) is deleted.
        let at = t0 + dt;
        let mut state = start.clone();
        let due = settle(&state.grants, &state.instances, at);
        state.apply_all(&due);
        let holders: Vec<usize> = (0..state.instances.len())
            .filter(|&i| matches!(state.instances[i].seat, Some(Seat::Grant(_))))
            .collect();
        if !holders.is_empty() {
            state.instances.remove(holders[victim % holders.len()]);
        }
        let refills = refill(&state.grants, &state.instances, at);
        let after = check_sequence(&state, &refills)?;
        let only_refills = refills.iter().all(|t| matches!(t, Transition::Refill { .. }));
        prop_assert!(only_refills, "settled to at first: only refills are left");
        // No live grant has a free slot while an instance it serves waits on
        // an ordinary slot.
        for grant in after.grants.iter().filter(|g| {
            g.settled == GrantState::Active && g.starts_at <= at && at < g.ends_at
                && g.created_at <= at
        }) {
            let waiting = after.instances.iter().any(|i| {
                i.seat == Some(Seat::Ordinary)
                    && i.power == Power::Running
                    && i.created_at <= at
                    && serves(grant, i)
            });
            let idle = waiting && after.free(grant) > 0;
            prop_assert!(!idle, "{} left a slot idle", grant.grant_id);
        }
        // Idempotent.
        prop_assert!(refill(&after.grants, &after.instances, at).is_empty());
    }
}
