//! Property tests of the operator views: the step functions integrate to
//! the grants' slot-time and tile their window; slot accounts computed
//! without settling equal those after settling; projected segments agree
//! with the settled seats; a grantee's timeline names no other tenant; a
//! grant's hour rows bill exactly its slot meter and never hold fewer hours
//! than they ran.

#![expect(
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "tests index answers and expect them; a panic fails the test"
)]

use grants_core::views::hours::{bucket_count, grant_hours};
use grants_core::views::preview::{Stint, preview_settlement, project_stints};
use grants_core::views::slots::slot_accounts;
use grants_core::views::steps::{CommittedStep, InUseStep, committed_steps, in_use_steps};
use grants_core::views::timeline::{
    ListedGrant, ShownGrant, TimelineEvent, TimelineInput, Viewer, reservation_timeline,
};
use grants_core::{
    Billing, Commitment, GrantState, HOUR_MS, Power, Seat, SettlementGrant, SettlementInstance,
    Term, grant_slot_records,
};
use proptest::prelude::*;

mod common;
use common::{new_instance, scheduled_grant, toggle};

const TENANTS: [&str; 3] = ["acme", "globex", "initech"];

/// The exact total of `weighted_ms`, rounded once, half-up, to micro-hours.
fn rounded_once(weighted_ms: i128) -> i64 {
    i64::try_from((weighted_ms * 1_000_000 + 1_800_000) / 3_600_000).expect("fits")
}

fn overlap(a: Term, b: Term) -> i128 {
    a.intersection(&b)
        .map_or(0, |t| i128::from(t.end) - i128::from(t.start))
}

/// Steps tile `window`: contiguous, gapless, exactly its bounds.
fn tiles(steps: &[(i64, i64)], window: Term) -> Result<(), TestCaseError> {
    if window.is_empty() {
        prop_assert!(steps.is_empty());
        return Ok(());
    }
    prop_assert_eq!(steps.first().map(|s| s.0), Some(window.start));
    prop_assert_eq!(steps.last().map(|s| s.1), Some(window.end));
    for (k, &(from, to)) in steps.iter().enumerate() {
        prop_assert!(from < to, "an empty step");
        if k > 0 {
            prop_assert_eq!(from, steps[k - 1].1, "a gap or an overlap");
        }
    }
    Ok(())
}

prop_compose! {
    fn commitment()(start in -50i64..150, len in 0i64..80, slots in 0u32..5) -> Commitment {
        Commitment::new(Term::new(start, start + len), slots)
    }
}

prop_compose! {
    fn window()(start in -20i64..120, len in 0i64..120) -> Term {
        Term::new(start, start + len)
    }
}

prop_compose! {
    fn stint()(instance in 0usize..4, from in -30i64..100, len in 1i64..60, open in any::<bool>(),
        running in any::<bool>(), grant in prop::option::of(0usize..3)) -> Stint {
        Stint {
            instance_id: format!("inst_{instance}"),
            from,
            to: (!open).then_some(from + len),
            running,
            grant_id: grant.map(|g| format!("rgrant_{g:03}")),
        }
    }
}

proptest! {
    #[test]
    fn committed_steps_integrate_to_the_grants_slot_time_and_tile_the_window(
        commitments in prop::collection::vec(commitment(), 0..8),
        window in window(),
        probes in prop::collection::vec(0i64..1000, 5),
    ) {
        let steps = committed_steps(&commitments, window);
        let bounds: Vec<(i64, i64)> = steps.iter().map(|s| (s.from, s.to)).collect();
        tiles(&bounds, window)?;
        for pair in steps.windows(2) {
            prop_assert_ne!(pair[0].slots, pair[1].slots, "equal neighbours are merged");
        }
        let integral: i128 = steps
            .iter()
            .map(|s| i128::from(s.slots) * i128::from(s.to - s.from))
            .sum();
        let expected: i128 = commitments
            .iter()
            .map(|c| i128::from(c.slots) * overlap(c.term, window))
            .sum();
        prop_assert_eq!(integral, expected);
        // At any instant of the window, the step is the live slots.
        if !window.is_empty() {
            for p in probes {
                let t = window.start + p % (window.end - window.start);
                let live: u64 = commitments
                    .iter()
                    .filter(|c| c.term.contains(t))
                    .map(|c| u64::from(c.slots))
                    .sum();
                let step: Vec<&CommittedStep> =
                    steps.iter().filter(|s| s.from <= t && t < s.to).collect();
                prop_assert_eq!(step.len(), 1);
                prop_assert_eq!(step[0].slots, live);
            }
        }
    }

    #[test]
    fn in_use_steps_count_running_segments_by_seat_and_tile_the_window(
        stints in prop::collection::vec(stint(), 0..10),
        window in window(),
        probes in prop::collection::vec(0i64..1000, 5),
    ) {
        let steps = in_use_steps(&stints, window);
        let bounds: Vec<(i64, i64)> = steps.iter().map(|s| (s.from, s.to)).collect();
        tiles(&bounds, window)?;
        for pair in steps.windows(2) {
            prop_assert!(
                (pair[0].in_grants, pair[0].ordinary) != (pair[1].in_grants, pair[1].ordinary)
            );
        }
        let lived = |s: &Stint| Term::new(s.from, s.to.unwrap_or(window.end));
        let integral = |f: fn(&InUseStep) -> u64| -> i128 {
            steps.iter().map(|s| i128::from(f(s)) * i128::from(s.to - s.from)).sum()
        };
        let expected = |in_grant: bool| -> i128 {
            stints
                .iter()
                .filter(|s| s.running && s.grant_id.is_some() == in_grant)
                .map(|s| overlap(lived(s), window))
                .sum()
        };
        prop_assert_eq!(integral(|s| s.in_grants), expected(true));
        prop_assert_eq!(integral(|s| s.ordinary), expected(false));
        if !window.is_empty() {
            for p in probes {
                let t = window.start + p % (window.end - window.start);
                let count = |in_grant: bool| {
                    stints
                        .iter()
                        .filter(|s| {
                            s.running && s.grant_id.is_some() == in_grant && lived(s).contains(t)
                        })
                        .count() as u64
                };
                let step = steps.iter().find(|s| s.from <= t && t < s.to).expect("a step");
                prop_assert_eq!((step.in_grants, step.ordinary), (count(true), count(false)));
            }
        }
    }
}

// Slot accounts and projected segments, on snapshots built as settlement
// builds them.

prop_compose! {
    fn grant(i: usize)(tenant in 0..2usize, slots in 1u32..4, starts_at in 0i64..40,
        len in 0i64..30, created_early in -3i64..10) -> SettlementGrant {
        let owner = (TENANTS[tenant], None);
        scheduled_grant(format!("rgrant_{i:03}"), owner, slots, starts_at, len, created_early)
    }
}

prop_compose! {
    fn instance(i: usize)(tenant in 0..2usize,
        billing in prop_oneof![4 => Just(Billing::Standard), 1 => Just(Billing::None)],
        running in any::<bool>(), created_at in -10i64..40) -> SettlementInstance {
        new_instance(format!("inst_{i:03}"), (TENANTS[tenant], None), billing, running, created_at)
    }
}

prop_compose! {
    /// A reservation settled up to `t0`, then some instances stopped or
    /// started, and a later instant `t1` nothing has settled yet.
    fn snapshot()(
        grants in (0usize..6).prop_flat_map(|n| (0..n).map(grant).collect::<Vec<_>>()),
        instances in (0usize..9).prop_flat_map(|n| (0..n).map(instance).collect::<Vec<_>>()),
        t0 in 0i64..40, later in 0i64..40,
        toggles in prop::collection::vec(any::<bool>(), 9),
    ) -> (Vec<SettlementGrant>, Vec<SettlementInstance>, i64, i64) {
        let settled = preview_settlement(&grants, &instances, t0);
        let (grants, mut instances) = (settled.grants, settled.instances);
        toggle(&mut instances, toggles);
        (grants, instances, t0, t0 + later)
    }
}

/// Open segments for the seated instances, from before anything happened.
fn open_stints(instances: &[SettlementInstance]) -> Vec<Stint> {
    instances
        .iter()
        .filter_map(|i| {
            let grant_id = match i.seat.as_ref()? {
                Seat::Grant(g) | Seat::Lent(g) => Some(g.clone()),
                Seat::Ordinary => None,
            };
            Some(Stint {
                instance_id: i.instance_id.clone(),
                from: -100,
                to: None,
                running: i.power == Power::Running,
                grant_id,
            })
        })
        .collect()
}

proptest! {
    #[test]
    fn slot_accounts_read_without_settling_equal_those_after_settling(
        (grants, instances, _t0, t1) in snapshot(),
        total in 0u64..12,
        provider_in_use in 0u64..12,
    ) {
        let unsettled = slot_accounts(total, provider_in_use, &grants, &instances, t1);
        let settled = preview_settlement(&grants, &instances, t1);
        let after = slot_accounts(total, provider_in_use, &settled.grants, &settled.instances, t1);
        prop_assert_eq!(unsettled, after);
        // Contract 4, from the settled snapshot directly.
        let live: Vec<&SettlementGrant> = settled
            .grants
            .iter()
            .filter(|g| g.settled != GrantState::Cancelled && g.starts_at <= t1 && t1 < g.ends_at)
            .collect();
        let granted: u64 = live.iter().map(|g| u64::from(g.slots)).sum();
        let in_live = |i: &SettlementInstance| {
            matches!(&i.seat, Some(Seat::Grant(g)) if live.iter().any(|l| &l.grant_id == g))
        };
        let held = settled.instances.iter().filter(|i| in_live(i)).count() as u64;
        let running = |i: &&SettlementInstance| i.power == Power::Running;
        let ordinary = settled
            .instances
            .iter()
            .filter(running)
            .filter(|i| i.seat == Some(Seat::Ordinary))
            .count() as u64;
        let on_it = settled
            .instances
            .iter()
            .filter(running)
            .filter(|i| i.seat.is_some())
            .count() as u64;
        prop_assert_eq!(unsettled.granted_slots, granted);
        prop_assert_eq!(unsettled.held_in_grants, held);
        prop_assert_eq!(unsettled.ordinary_in_use, ordinary);
        prop_assert_eq!(
            unsettled.ordinary_free,
            total.saturating_sub(granted).saturating_sub(ordinary)
        );
        prop_assert_eq!(unsettled.physical_in_use, on_it.max(provider_in_use));
        prop_assert!(unsettled.held_in_grants <= unsettled.granted_slots);
    }

    #[test]
    fn projected_segments_end_where_settlement_seats_the_instances(
        (grants, instances, _t0, t1) in snapshot(),
    ) {
        let settled = preview_settlement(&grants, &instances, t1);
        let stints = project_stints(&open_stints(&instances), &settled.transitions);
        for i in &settled.instances {
            let mine: Vec<&Stint> =
                stints.iter().filter(|s| s.instance_id == i.instance_id).collect();
            // Each instance's segments follow one another without gaps.
            for pair in mine.windows(2) {
                prop_assert_eq!(pair[0].to, Some(pair[1].from));
                prop_assert!(pair[0].from < pair[1].from);
            }
            let open: Vec<&&Stint> = mine.iter().filter(|s| s.to.is_none()).collect();
            match &i.seat {
                None => prop_assert!(open.is_empty()),
                Some(seat) => {
                    prop_assert_eq!(open.len(), 1);
                    let grant = match seat {
                        Seat::Grant(g) | Seat::Lent(g) => Some(g.clone()),
                        Seat::Ordinary => None,
                    };
                    prop_assert_eq!(&open[0].grant_id, &grant);
                    prop_assert_eq!(open[0].running, i.power == Power::Running);
                }
            }
        }
        // The in-use step at t1 is what the slot accounts count.
        let accounts = slot_accounts(100, 0, &grants, &instances, t1);
        let at_t1 = in_use_steps(&stints, Term::new(t1, t1 + 1));
        prop_assert_eq!(at_t1.len(), 1);
        prop_assert_eq!(at_t1[0].ordinary, accounts.ordinary_in_use);
        let running_held = settled
            .instances
            .iter()
            .filter(|i| i.power == Power::Running && matches!(i.seat, Some(Seat::Grant(_))))
            .count() as u64;
        prop_assert_eq!(at_t1[0].in_grants, running_held);
    }
}

// Anonymising.

prop_compose! {
    fn listed(i: usize)(tenant in 0..TENANTS.len(), slots in 1u32..5, starts_at in 0i64..100,
        len in 0i64..50, cancelled in prop::bool::weighted(0.2)) -> ListedGrant {
        ListedGrant {
            grant_id: format!("rgrant_{i:03}"),
            tenant_id: TENANTS[tenant].into(),
            slots,
            starts_at,
            ends_at: starts_at + len,
            cancelled,
        }
    }
}

fn listed_grants() -> impl Strategy<Value = Vec<ListedGrant>> {
    (0usize..10).prop_flat_map(|n| (0..n).map(listed).collect::<Vec<_>>())
}

prop_compose! {
    fn event()(at in 0i64..150, grant in prop::option::of(0usize..12),
        kind in prop::sample::select(vec!["reservation-grant.active", "reservation-grant.ended",
            "reservation-grant.capacity-short"])) -> TimelineEvent {
        TimelineEvent {
            at,
            event_type: kind.into(),
            grant_id: grant.map(|g| format!("rgrant_{g:03}")),
        }
    }
}

proptest! {
    #[test]
    fn a_grantees_timeline_never_names_another_tenant_or_its_grants(
        grants in listed_grants(),
        events in prop::collection::vec(event(), 0..10),
        window in window(),
        viewer in 0..TENANTS.len(),
        now in 0i64..150,
    ) {
        let me = TENANTS[viewer];
        let view = reservation_timeline(&TimelineInput {
            window,
            now,
            grants: &grants,
            stints: &[],
            events: &events,
            viewer: Viewer::Grantee(me),
        });
        // What the API would send: full grants by index, anonymous ones as
        // they are, the events (every field of each, as Debug writes them).
        let mut shown = Vec::new();
        for g in &view.grants {
            match g {
                ShownGrant::Full(k) => {
                    prop_assert_eq!(grants[*k].tenant_id.as_str(), me);
                    shown.push(format!("{:?}", grants[*k]));
                }
                ShownGrant::Anonymous(a) => shown.push(format!("{a:?}")),
            }
        }
        shown.push(format!("{:?}", view.events));
        let text = shown.join("\n");
        for other in grants.iter().filter(|g| g.tenant_id != me) {
            prop_assert!(!text.contains(&other.grant_id), "{} leaked", other.grant_id);
        }
        for tenant in TENANTS.iter().filter(|t| **t != me) {
            prop_assert!(!text.contains(tenant), "{tenant} leaked");
        }
        // Event ids are only the viewer's own grants.
        for e in &view.events {
            if let Some(g) = &e.grant_id {
                prop_assert!(grants.iter().any(|l| &l.grant_id == g && l.tenant_id == me));
            }
        }
        // Every grant meeting the window is there, save other tenants'
        // cancelled ones; the committed steps are the operator's.
        let operator = reservation_timeline(&TimelineInput {
            window,
            now,
            grants: &grants,
            stints: &[],
            events: &events,
            viewer: Viewer::Operator,
        });
        prop_assert!(operator.grants.iter().all(|g| matches!(g, ShownGrant::Full(_))));
        let hidden = operator
            .grants
            .iter()
            .filter(|g| matches!(g, ShownGrant::Full(k) if grants[*k].cancelled
                && grants[*k].tenant_id != me))
            .count();
        prop_assert_eq!(view.grants.len() + hidden, operator.grants.len());
        prop_assert_eq!(&view.committed, &operator.committed);
        prop_assert_eq!(view.events.len(), operator.events.len());
        prop_assert!(operator.events.iter().all(|e| window.contains(e.at)));
        prop_assert!(operator.events.windows(2).all(|p| p[0].at <= p[1].at));
    }
}

// A grant's hour rows.

prop_compose! {
    fn term()(starts_at in 0i64..(6 * HOUR_MS), len in 0i64..(6 * HOUR_MS), slots in 1u32..1000)
        -> (u32, Term) {
        (slots, Term::new(starts_at, starts_at + len))
    }
}

prop_compose! {
    fn grant_stint()(instance in 0usize..3, from in 0i64..(12 * HOUR_MS),
        len in 1i64..(3 * HOUR_MS), open in prop::bool::weighted(0.2), running in any::<bool>(),
        mine in prop::bool::weighted(0.8)) -> Stint {
        Stint {
            instance_id: format!("inst_{instance}"),
            from,
            to: (!open).then_some(from + len),
            running,
            grant_id: Some(if mine { "rgrant_g" } else { "rgrant_h" }.to_owned()),
        }
    }
}

proptest! {
    #[test]
    fn hour_rows_bill_the_slot_meter_exactly_and_hold_at_least_what_they_ran(
        (slots, term) in term(),
        stints in prop::collection::vec(grant_stint(), 0..8),
        now in 0i64..(14 * HOUR_MS),
        window in (0i64..(14 * HOUR_MS), 0i64..(14 * HOUR_MS)),
    ) {
        let everything = Term::new(-HOUR_MS, 20 * HOUR_MS);
        let rows = grant_hours("rgrant_g", slots, term, everything, &stints, now);
        prop_assert_eq!(rows.len() as u64, bucket_count(term));
        // The rows' slot-hours add up to slots x the term's hours, exactly
        // as billed: the slot meter's records, bucket by bucket.
        let total: i64 = rows.iter().map(|r| r.slot_micros).sum();
        let exact = i128::from(slots) * i128::from(term.end - term.start);
        prop_assert_eq!(total, rounded_once(exact));
        if (term.end - term.start) % 18 == 0 {
            // A whole number of micro-hours per slot: no rounding at all.
            prop_assert_eq!(i128::from(total) * 18, exact * 5);
        }
        let records = grant_slot_records(slots, term.start, term.end, term.start, i64::MAX / 2);
        let billed: Vec<(i64, i64)> =
            records.iter().map(|r| (r.period_start, r.quantity_micro)).collect();
        let mine: Vec<(i64, i64)> = rows.iter().map(|r| (r.period_start, r.slot_micros)).collect();
        prop_assert_eq!(mine, billed);
        for r in &rows {
            prop_assert_eq!(r.period_end - r.period_start, HOUR_MS);
            prop_assert_eq!(r.slots, slots);
            prop_assert!(r.held_micros >= r.usage_micros, "{:?}", r);
            prop_assert!(r.usage_micros >= 0);
            if r.period_start >= now {
                prop_assert_eq!((r.held_micros, r.usage_micros), (0, 0));
            }
            // Held hours are the grant's segments only, up to now.
            let bucket = Term::new(r.period_start, r.period_end);
            let held: i128 = stints
                .iter()
                .filter(|s| s.grant_id.as_deref() == Some("rgrant_g"))
                .map(|s| overlap(Term::new(s.from, s.to.unwrap_or(now).min(now)), bucket))
                .sum();
            prop_assert_eq!(r.held_micros, rounded_once(held));
        }
        // A window selects a run of the same rows.
        let window = Term::new(window.0.min(window.1), window.0.max(window.1));
        let some = grant_hours("rgrant_g", slots, term, window, &stints, now);
        let expected: Vec<_> = rows
            .iter()
            .filter(|r| Term::new(r.period_start, r.period_end).intersection(&window)
                .and_then(|w| w.intersection(&term)).is_some())
            .copied()
            .collect();
        prop_assert_eq!(some, expected);
    }
}
