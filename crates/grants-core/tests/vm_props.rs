//! Property tests of a managed instance's lifecycle (contract 3.12): billed
//! time is only ever time the VM was seen running, inside its slot, and its
//! slot and quota are released once, when the provider confirms it gone.

use grants_core::vm::{Cause, Refused, Release, StepKind, VmState, next, replay};
use proptest::prelude::*;

fn any_step() -> impl Strategy<Value = StepKind> {
    prop_oneof![
        Just(StepKind::Create),
        Just(StepKind::Stop),
        Just(StepKind::Start),
        Just(StepKind::Delete),
    ]
}

fn any_cause() -> impl Strategy<Value = Cause> {
    prop_oneof![
        Just(Cause::StopRequested),
        Just(Cause::StartRequested),
        Just(Cause::DeleteRequested),
        Just(Cause::Reclaimed),
        any_step().prop_map(Cause::Confirmed),
        any_step().prop_map(Cause::Failed),
        Just(Cause::ObservedStopped),
        Just(Cause::ObservedRunning),
        Just(Cause::Lost),
    ]
}

/// A history: causes at instants that never go back.
fn history() -> impl Strategy<Value = Vec<(i64, Cause)>> {
    prop::collection::vec((0i64..5_000_000, any_cause()), 0..40).prop_map(|steps| {
        let mut at = 0;
        steps
            .into_iter()
            .map(|(gap, cause)| {
                at += gap;
                (at, cause)
            })
            .collect()
    })
}

fn total(intervals: &[(i64, i64)]) -> i64 {
    intervals.iter().map(|(a, b)| b - a).sum()
}

/// Every billed interval lies inside a slot-holding one.
fn covered(inner: &[(i64, i64)], outer: &[(i64, i64)]) -> bool {
    inner
        .iter()
        .all(|&(a, b)| outer.iter().any(|&(c, d)| c <= a && b <= d))
}

/// What billing must be, stated independently of `next`: from each
/// confirmation that the VM runs (or a failed stop: it kept running) to the
/// next request or observation that ends it; after a reclaim of a running
/// VM, to its deletion confirmed (contract 5.5).
fn expected_billed(history: &[(i64, Cause)], until: i64) -> i64 {
    let mut state = VmState::Provisioning;
    let mut slot = true;
    let mut billed_since: Option<i64> = None;
    let mut sum = 0;
    for &(at, cause) in history {
        let Ok(t) = next(state, slot, cause) else {
            continue;
        };
        let starts_billing = matches!(
            cause,
            Cause::Confirmed(StepKind::Create | StepKind::Start) | Cause::Failed(StepKind::Stop)
        ) && t.state == VmState::Running;
        let reclaimed = state == VmState::Running && cause == Cause::Reclaimed;
        let ends_billing = (state == VmState::Running && t.state != VmState::Running && !reclaimed)
            || (billed_since.is_some() && state == VmState::Deleting && t.state.is_final());
        if ends_billing && let Some(from) = billed_since.take() {
            sum += at - from;
        }
        if starts_billing {
            billed_since = Some(at);
        }
        state = t.state;
        slot = t.holds_slot;
    }
    sum + billed_since.map_or(0, |from| until.max(from) - from)
}

proptest! {
    #[test]
    fn billing_is_inside_the_slot_and_only_while_running(h in history()) {
        let until = h.last().map_or(0, |(at, _)| *at) + 3_600_000;
        let r = replay(0, &h, until);
        prop_assert!(covered(&r.billed, &r.holds_slot));
        prop_assert_eq!(total(&r.billed), expected_billed(&h, until));
    }

    #[test]
    fn requests_never_start_billing_and_final_states_hold_nothing(
        h in history(),
        cause in any_cause(),
    ) {
        let r = replay(0, &h, 0);
        let state = r.state.expect("a state");
        let last = h.last().map_or(0, |x| x.0);
        let slot = r.holds_slot.last().is_some_and(|(_, to)| *to >= last);
        if let Ok(t) = next(state, slot, cause) {
            let request = matches!(
                cause,
                Cause::StopRequested | Cause::StartRequested | Cause::DeleteRequested
            );
            if request && t.state != state {
                prop_assert!(!t.billed, "{cause:?} from {state:?} bills");
            }
            if t.state.is_final() {
                prop_assert!(!t.holds_slot && !t.billed);
            }
            if t.state != state {
                prop_assert_eq!(t.step, t.state.step());
            } else {
                prop_assert_eq!(t.step, None);
            }
        }
        if state.is_final() {
            prop_assert!(matches!(
                next(state, false, cause),
                Ok(_) | Err(Refused::InvalidState(_)) | Err(Refused::NotApplicable)
            ));
            if let Ok(t) = next(state, false, cause) {
                prop_assert_eq!(t.state, state);
            }
        }
    }

    #[test]
    fn slot_and_quota_are_released_once_and_only_when_the_vm_is_gone(h in history()) {
        let mut state = VmState::Provisioning;
        let mut slot = true;
        let mut releases = 0;
        for &(_, cause) in &h {
            let Ok(t) = next(state, slot, cause) else { continue };
            if t.release == Release::All {
                releases += 1;
                prop_assert!(matches!(
                    cause,
                    Cause::Confirmed(StepKind::Delete)
                        | Cause::Failed(StepKind::Create)
                        | Cause::Lost
                ));
                prop_assert!(t.state.is_final());
            }
            if t.release == Release::Seat {
                prop_assert!(matches!(
                    cause,
                    Cause::Confirmed(StepKind::Stop)
                        | Cause::Failed(StepKind::Start)
                        | Cause::ObservedStopped
                ));
            }
            state = t.state;
            slot = t.holds_slot;
        }
        prop_assert!(releases <= 1);
        let r = replay(0, &h, 0);
        prop_assert_eq!(r.released_at.is_some(), releases == 1);
    }

    #[test]
    fn a_delete_is_taken_in_every_state_but_the_final_ones(h in history()) {
        let state = replay(0, &h, 0).state.expect("a state");
        let t = next(state, true, Cause::DeleteRequested).expect("a delete is never refused");
        if state.is_final() {
            prop_assert_eq!(t.state, state);
        } else {
            prop_assert_eq!(t.state, VmState::Deleting);
            prop_assert!(!t.billed);
        }
    }
}

/// The example: created at T0, seen running at T0+10 min, stopped
/// at T0+70 min: exactly 60 minutes billed.
#[test]
fn sixty_minutes_from_seen_running_to_the_stop_request() {
    let min = 60_000;
    let h = [
        (10 * min, Cause::Confirmed(StepKind::Create)),
        (70 * min, Cause::StopRequested),
        (72 * min, Cause::Confirmed(StepKind::Stop)),
    ];
    let r = replay(0, &h, 200 * min);
    assert_eq!(r.billed, vec![(10 * min, 70 * min)]);
    assert_eq!(r.holds_slot, vec![(0, 72 * min)]);
    assert_eq!(r.state, Some(VmState::Stopped));
}

#[test]
fn stop_or_start_while_another_step_is_in_flight_is_refused() {
    for state in [
        VmState::Provisioning,
        VmState::Stopping,
        VmState::Starting,
        VmState::Deleting,
    ] {
        let stop = next(state, true, Cause::StopRequested);
        let start = next(state, true, Cause::StartRequested);
        let repeats = matches!(
            (state, stop, start),
            (VmState::Stopping, Ok(_), _) | (VmState::Starting, _, Ok(_))
        );
        assert!(repeats || stop.is_err() || start.is_err(), "{state:?}");
    }
    assert_eq!(
        next(VmState::Provisioning, true, Cause::StopRequested),
        Err(Refused::InvalidState(VmState::Provisioning))
    );
    assert_eq!(
        next(VmState::Deleting, true, Cause::StartRequested),
        Err(Refused::InvalidState(VmState::Deleting))
    );
}

/// No state without a step (contract 3.12 r4): in every state that waits
/// for a step, each way that step can end (done, failed for good, or the VM
/// found gone) moves the instance on, to a state that waits for nothing or
/// for a new step. A delete is never given up, so it has no failure.
#[test]
fn every_end_of_a_step_leaves_its_waiting_state() {
    let waiting = [
        VmState::Provisioning,
        VmState::Stopping,
        VmState::Starting,
        VmState::Deleting,
    ];
    for state in waiting {
        let kind = state.step().expect("a waiting state has its step");
        let mut ends = vec![Cause::Confirmed(kind), Cause::Lost];
        if kind != StepKind::Delete {
            ends.push(Cause::Failed(kind));
        }
        for slot in [true, false] {
            for end in &ends {
                let t = next(state, slot, *end)
                    .unwrap_or_else(|r| panic!("{state:?} ({slot}) + {end:?}: {r:?}"));
                assert_ne!(t.state, state, "{state:?} + {end:?} stays");
                assert_eq!(t.step, t.state.step(), "{state:?} + {end:?}");
            }
        }
    }
}
