//! Property tests of deficit credits (contract 5.4): the shares of an instant
//! add up to the shortfall, a grant's credit never exceeds what it committed,
//! its records add up to its exact credit rounded once (checked against a
//! minute-by-minute sum made without the stretches), nothing is credited
//! while the total covers the commitment, and metering in steps writes what
//! one call would.

use grants_core::deficit::{
    TotalChange, deficit_records, deficit_records_after, exact_deficit_ms, round_to_micros,
    share_at, shortfall_at,
};
use grants_core::{Commitment, HOUR_MS, Record, Term, grant_slot_records};
use num_bigint::BigInt;
use num_rational::BigRational;
use num_traits::Zero;
use proptest::prelude::*;

const MINUTE: i64 = 60_000;
/// Everything happens on whole minutes within this many of them.
const SPAN_MINUTES: i64 = 6 * 60;

fn sum(records: &[Record]) -> i64 {
    records.iter().map(|r| r.quantity_micro).sum()
}

prop_compose! {
    fn grant()(start in 0..SPAN_MINUTES, len in 0..SPAN_MINUTES, slots in 1u32..6)
        -> Commitment
    {
        Commitment::new(Term::new(start * MINUTE, (start + len) * MINUTE), slots)
    }
}

prop_compose! {
    /// A history of totals changing at whole minutes, oldest first.
    fn history()(changes in prop::collection::vec((0..SPAN_MINUTES, 0u64..12), 1..6))
        -> Vec<TotalChange>
    {
        let mut changes: Vec<TotalChange> = changes
            .into_iter()
            .map(|(at, total)| TotalChange { at: at * MINUTE, total })
            .collect();
        changes.sort_by_key(|c| c.at);
        changes.dedup_by_key(|c| c.at);
        changes
    }
}

/// The exact credit of `subject` up to `until`, minute by minute: every
/// change falls on a minute, so the share is constant over each.
fn credit_by_minutes(
    subject: usize,
    grants: &[Commitment],
    history: &[TotalChange],
    until: i64,
) -> BigRational {
    let mut total = BigRational::zero();
    let mut t = 0;
    while t < until {
        total += share_at(subject, grants, history, t) * BigInt::from(MINUTE);
        t += MINUTE;
    }
    total
}

proptest! {
    #[test]
    fn the_shares_of_an_instant_add_up_to_the_shortfall(
        grants in prop::collection::vec(grant(), 1..6),
        history in history(),
        minute in 0..SPAN_MINUTES,
    ) {
        let t = minute * MINUTE;
        let shares = (0..grants.len())
            .map(|i| share_at(i, &grants, &history, t))
            .fold(BigRational::zero(), |a, b| a + b);
        let short = shortfall_at(&grants, &history, t);
        prop_assert_eq!(shares, BigRational::from_integer(BigInt::from(short)));
    }

    #[test]
    fn records_add_up_to_the_exact_credit_rounded_once(
        grants in prop::collection::vec(grant(), 1..6),
        history in history(),
        subject in 0usize..6,
        now_minute in 0..(2 * SPAN_MINUTES),
    ) {
        let subject = subject % grants.len();
        let now = now_minute * MINUTE;
        let g = grants[subject];
        let records = deficit_records(subject, &grants, &history, g.term.start, now);
        // Buckets are written once ended, so the credit runs to the last
        // ended hour (and never past the term).
        let until = now - now.rem_euclid(HOUR_MS);
        let exact = credit_by_minutes(subject, &grants, &history, until.min(g.term.end));
        prop_assert_eq!(&exact, &exact_deficit_ms(subject, &grants, &history, until));
        prop_assert_eq!(sum(&records), round_to_micros(&exact));
        for r in &records {
            prop_assert!(r.quantity_micro >= 0);
            prop_assert!(r.period_end <= until);
        }
    }

    #[test]
    fn a_credit_never_exceeds_the_committed_slot_hours(
        grants in prop::collection::vec(grant(), 1..6),
        history in history(),
        subject in 0usize..6,
    ) {
        let subject = subject % grants.len();
        let g = grants[subject];
        let now = 100 * HOUR_MS;
        let credit = deficit_records(subject, &grants, &history, g.term.start, now);
        let slots =
            grant_slot_records(g.slots, g.term.start, g.term.end, g.term.start, now);
        prop_assert!(sum(&credit) <= sum(&slots));
        // And at every bucket end, the credit so far is within the slot-hours
        // so far.
        let mut credited = 0;
        for r in &credit {
            credited += r.quantity_micro;
            let billed: i64 = slots
                .iter()
                .filter(|s| s.period_end <= r.period_end)
                .map(|s| s.quantity_micro)
                .sum();
            prop_assert!(credited <= billed, "{credited} > {billed} at {}", r.period_end);
        }
    }

    #[test]
    fn nothing_is_credited_while_the_total_covers_the_commitment(
        grants in prop::collection::vec(grant(), 1..6),
        mut history in history(),
        subject in 0usize..6,
    ) {
        let subject = subject % grants.len();
        let most: u64 = grants.iter().map(|g| u64::from(g.slots)).sum();
        for change in &mut history {
            change.total = change.total.max(most);
        }
        let records = deficit_records(subject, &grants, &history, 0, 100 * HOUR_MS);
        prop_assert!(records.is_empty(), "{records:?}");
    }

    #[test]
    fn metering_in_steps_writes_what_one_call_would(
        grants in prop::collection::vec(grant(), 1..6),
        history in history(),
        subject in 0usize..6,
        mut nows in prop::collection::vec(0..(2 * SPAN_MINUTES), 1..6),
    ) {
        let subject = subject % grants.len();
        let g = grants[subject];
        nows.sort_unstable();
        let last = nows.last().copied().unwrap_or(0) * MINUTE;
        let at_once = deficit_records(subject, &grants, &history, g.term.start, last);
        // Each pass resumes from the slot meter's mark, as `vps.grants` does.
        let mut through = g.term.start;
        let mut stepped = Vec::new();
        for now in nows {
            let now = now * MINUTE;
            stepped.extend(deficit_records(subject, &grants, &history, through, now));
            let slots = grant_slot_records(g.slots, g.term.start, g.term.end, through, now);
            if let Some(r) = slots.last() {
                through = r.metered_through;
            }
        }
        prop_assert_eq!(stepped, at_once);
    }

    #[test]
    fn metering_from_the_kept_exact_credit_writes_what_one_call_would(
        grants in prop::collection::vec(grant(), 1..6),
        history in history(),
        subject in 0usize..6,
        mut nows in prop::collection::vec(0..(2 * SPAN_MINUTES), 1..6),
    ) {
        let subject = subject % grants.len();
        let g = grants[subject];
        nows.sort_unstable();
        let last = nows.last().copied().unwrap_or(0) * MINUTE;
        let at_once = deficit_records(subject, &grants, &history, g.term.start, last);
        // Each pass keeps the exact credit and resumes from it, as storage
        // does; the history before the resumed hour is not passed at all.
        let mut through = g.term.start;
        let mut exact = BigRational::zero();
        let mut stepped = Vec::new();
        for now in nows {
            let now = now * MINUTE;
            let from = through - through.rem_euclid(HOUR_MS);
            let later: Vec<TotalChange> = {
                let mut h: Vec<TotalChange> =
                    history.iter().copied().filter(|c| c.at > from).collect();
                // The change in effect at `from` is kept, at `from`.
                if let Some(t) = grants_core::deficit::total_at(&history, from) {
                    h.insert(0, TotalChange { at: from, total: t });
                }
                h
            };
            let (records, kept) = deficit_records_after(
                subject, &grants, &later, &exact, through, now,
            );
            stepped.extend(records);
            exact = kept;
            let slots = grant_slot_records(g.slots, g.term.start, g.term.end, through, now);
            if let Some(r) = slots.last() {
                through = r.metered_through;
            }
        }
        prop_assert_eq!(stepped, at_once);
    }
}

#[test]
fn the_issue_example_credits_half_a_slot_hour_per_bucket() {
    // Two grants of 2 slots on a 4-slot reservation, shrunk to 2 at T0+30m
    // and restored at T0+90m: 0.5 + 0.5 slot-hours each.
    let h = HOUR_MS;
    let history = [
        TotalChange { at: 0, total: 4 },
        TotalChange {
            at: h / 2,
            total: 2,
        },
        TotalChange {
            at: 3 * h / 2,
            total: 4,
        },
    ];
    let grants = [
        Commitment::new(Term::new(0, 10 * h), 2),
        Commitment::new(Term::new(0, 10 * h), 2),
    ];
    for subject in 0..2 {
        let records = deficit_records(subject, &grants, &history, 0, 3 * h);
        let q: Vec<i64> = records.iter().map(|r| r.quantity_micro).collect();
        assert_eq!(q, [500_000, 500_000]);
    }
    let exact = exact_deficit_ms(0, &grants, &history, 3 * h);
    assert_eq!(exact, BigRational::from_integer(BigInt::from(h)));
    assert!(round_to_micros(&exact) == 1_000_000, "one slot-hour");
}
