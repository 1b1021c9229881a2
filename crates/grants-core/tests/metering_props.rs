//! Property tests of hourly metering: exact totals, ended buckets only,
//! nothing beyond the term, and metering in steps equals metering at once.

#![expect(
    clippy::expect_used,
    reason = "tests expect answers; a panic fails the test"
)]

use grants_core::{
    HOUR_MS, Record, Segment, cumulative_rounded_records, format_micros, grant_slot_records,
    hour_buckets,
};
use proptest::prelude::*;

/// The exact total of `weighted_ms`, rounded once, half-up, to micro-hours.
fn rounded_once(weighted_ms: i128) -> i64 {
    i64::try_from((weighted_ms * 1_000_000 + 1_800_000) / 3_600_000).expect("fits")
}

fn sum(records: &[Record]) -> i64 {
    records.iter().map(|r| r.quantity_micro).sum()
}

/// Meters a grant in one call per instant of `nows`, like successive passes.
fn meter_in_steps(slots: u32, starts_at: i64, ends_at: i64, nows: &[i64]) -> Vec<Record> {
    let mut metered_through = starts_at;
    let mut all = Vec::new();
    for &now in nows {
        let records = grant_slot_records(slots, starts_at, ends_at, metered_through, now);
        if let Some(last) = records.last() {
            metered_through = last.metered_through;
        }
        all.extend(records);
    }
    all
}

prop_compose! {
    fn grant_term()(
        starts_at in 0i64..(10 * HOUR_MS),
        len in 0i64..(10 * HOUR_MS),
        slots in 1u32..100_001,
    ) -> (u32, i64, i64) {
        (slots, starts_at, starts_at + len)
    }
}

proptest! {
    #[test]
    fn buckets_tile_the_interval(from in -3 * HOUR_MS..3 * HOUR_MS, len in 0i64..(5 * HOUR_MS)) {
        let buckets: Vec<(i64, i64)> = hour_buckets(from, from + len).collect();
        prop_assert_eq!(buckets.iter().map(|b| b.1).sum::<i64>(), len);
        for (i, &(start, overlap)) in buckets.iter().enumerate() {
            prop_assert_eq!(start.rem_euclid(HOUR_MS), 0);
            prop_assert!(overlap > 0 && overlap <= HOUR_MS);
            if i > 0 {
                prop_assert_eq!(start, buckets[i - 1].0 + HOUR_MS);
            }
        }
    }

    #[test]
    fn a_grants_records_add_up_to_its_exact_total_rounded_once(
        (slots, starts_at, ends_at) in grant_term(),
    ) {
        let records = grant_slot_records(slots, starts_at, ends_at, starts_at, ends_at + HOUR_MS);
        let exact = i128::from(slots) * i128::from(ends_at - starts_at);
        prop_assert_eq!(sum(&records), rounded_once(exact));
        let last = records.last().map_or(starts_at, |r| r.metered_through);
        prop_assert_eq!(last, ends_at, "fully metered");
    }

    #[test]
    fn only_ended_buckets_within_the_term_are_written(
        (slots, starts_at, ends_at) in grant_term(),
        now in 0i64..(21 * HOUR_MS),
    ) {
        let records = grant_slot_records(slots, starts_at, ends_at, starts_at, now);
        let mut previous_through = starts_at;
        for record in &records {
            prop_assert!(record.period_end <= now, "bucket written before it ended");
            prop_assert_eq!(record.period_end - record.period_start, HOUR_MS);
            prop_assert_eq!(record.period_start.rem_euclid(HOUR_MS), 0);
            prop_assert!(record.period_start < ends_at && record.period_end > starts_at);
            prop_assert!(record.metered_through <= ends_at);
            prop_assert!(record.metered_through > previous_through);
            prop_assert!(record.quantity_micro >= 0);
            previous_through = record.metered_through;
        }
    }

    #[test]
    fn metering_in_steps_equals_metering_at_once(
        (slots, starts_at, ends_at) in grant_term(),
        mut nows in prop::collection::vec(0i64..(22 * HOUR_MS), 1..5),
    ) {
        nows.sort_unstable();
        let last = *nows.last().expect("at least one");
        prop_assert_eq!(
            meter_in_steps(slots, starts_at, ends_at, &nows),
            grant_slot_records(slots, starts_at, ends_at, starts_at, last)
        );
    }

    #[test]
    fn any_subject_adds_up_and_meters_in_steps(
        pieces in prop::collection::vec((0i64..(6 * HOUR_MS), 0i64..(2 * HOUR_MS), 0u32..4), 0..6),
        split in 0i64..(10 * HOUR_MS),
    ) {
        let segments: Vec<Segment> = pieces
            .iter()
            .map(|&(from, len, weight)| Segment { from, to: from + len, weight })
            .collect();
        let end = 9 * HOUR_MS;
        let at_once = cumulative_rounded_records(&segments, 0, end);
        let exact: i128 = segments
            .iter()
            .map(|s| i128::from(s.weight) * i128::from(s.to - s.from))
            .sum();
        prop_assert_eq!(sum(&at_once), rounded_once(exact));

        let first = cumulative_rounded_records(&segments, 0, split.min(end));
        let through = first.last().map_or(0, |r| r.metered_through);
        let mut stepped = first;
        stepped.extend(cumulative_rounded_records(&segments, through, end));
        prop_assert_eq!(stepped, at_once);
    }

    #[test]
    fn quantities_have_exactly_six_decimals(micros in any::<i64>()) {
        let text = format_micros(micros);
        let (whole, fraction) = text.split_once('.').expect("a decimal point");
        prop_assert_eq!(fraction.len(), 6);
        let digits = format!("{}{}", whole.trim_start_matches('-'), fraction);
        let magnitude: u64 = digits.parse().expect("digits");
        prop_assert_eq!(magnitude, micros.unsigned_abs());
        prop_assert_eq!(whole.starts_with('-'), micros < 0);
    }
}
