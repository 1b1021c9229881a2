//! Unit tests of the operator views.

use crate::capacity::{Commitment, Term};
use crate::metering::{HOUR_MS, hour_buckets};
use crate::placement::{Billing, Seat};
use crate::settlement::{Destination, Power, SettlementInstance, Transition};
use crate::views::hours::{BucketMs, grant_hours, grant_hours_with};
use crate::views::preview::{Stint, project_stints};
use crate::views::slots::slot_accounts;
use crate::views::steps::{CommittedStep, InUseStep, committed_steps, in_use_steps};

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
    let vm = |id: &str| SettlementInstance {
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
