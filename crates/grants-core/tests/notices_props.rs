//! Property tests of the grant notices' arithmetic: the suggested renewal is
//! between 1 and the grant's slots and is the constant of a constant
//! series; utilisation is between 0 and 1 when the grant never holds more
//! than its slots, 1 when every slot is held all along, and never falls when
//! more is held; a preview's slot-hours are what the slot meter writes;
//! expiry notices are due only while the grant is active and never for an
//! instant before its start; the underuse window lies in the term.

use grants_core::notices::{
    ExpiryNotice, billed_periods, committed_slot_micros, due_notices, percentile_95, summarise,
    underuse_window,
};
use grants_core::views::preview::Stint;
use grants_core::{HOUR_MS, Term, grant_slot_records};
use proptest::prelude::*;

const GRANT: &str = "rgrant_g";

/// Segments of up to `slots` instances, each a sequence of back-to-back or
/// spaced stretches in the grant (some on other grants or ordinary slots),
/// over `[0, span)`: the grant never holds more than `slots` at once.
fn held(slots: u32, span: i64) -> impl Strategy<Value = Vec<Stint>> {
    let lane = prop::collection::vec((0i64..3 * HOUR_MS, 0i64..5 * HOUR_MS, 0u8..4), 0..6);
    prop::collection::vec(lane, 0..=slots as usize).prop_map(move |lanes| {
        let mut out = Vec::new();
        for (k, lane) in lanes.into_iter().enumerate() {
            let mut t = 0;
            for (gap, len, kind) in lane {
                let from = t + gap;
                let to = (from + len).min(span);
                if from >= span {
                    break;
                }
                out.push(Stint {
                    instance_id: format!("inst_{k}"),
                    from,
                    to: (kind != 3 || to < span).then_some(to),
                    running: kind == 1,
                    grant_id: match kind {
                        2 => Some("rgrant_other".into()),
                        _ => Some(GRANT.into()),
                    },
                });
                t = to;
            }
        }
        out
    })
}

proptest! {
    #[test]
    fn the_suggestion_is_between_one_and_the_slots(
        slots in 1u32..6,
        stints in held(5, 40 * HOUR_MS),
        start in 0i64..10 * HOUR_MS,
        len in 0i64..30 * HOUR_MS,
        now in 0i64..45 * HOUR_MS,
    ) {
        let s = summarise(GRANT, slots, Term::new(start, start + len), &stints, now);
        prop_assert!((1..=slots).contains(&s.suggested_slots), "{s:?}");
    }

    #[test]
    fn the_p95_of_a_constant_series_is_that_constant(value in 0u32..1000, n in 1usize..400) {
        prop_assert_eq!(percentile_95(&vec![value; n]), value);
    }

    #[test]
    fn the_p95_is_one_of_the_values_and_covers_95_percent(
        values in prop::collection::vec(0u32..50, 1..300),
    ) {
        let p = percentile_95(&values);
        prop_assert!(values.contains(&p));
        let at_most = values.iter().filter(|v| **v <= p).count();
        prop_assert!(at_most * 100 >= values.len() * 95);
        let below = values.iter().filter(|v| **v < p).count();
        prop_assert!(below * 100 < values.len() * 95, "not the smallest such value");
    }

    #[test]
    fn holding_every_slot_all_along_suggests_every_slot(
        slots in 1u32..6,
        hours in 1i64..50,
        offset in 0i64..HOUR_MS,
    ) {
        let window = Term::new(offset, offset + hours * HOUR_MS);
        let stints: Vec<Stint> = (0..slots)
            .map(|k| Stint {
                instance_id: format!("inst_{k}"),
                from: 0,
                to: None,
                running: k % 2 == 0,
                grant_id: Some(GRANT.into()),
            })
            .collect();
        let s = summarise(GRANT, slots, window, &stints, window.end);
        prop_assert_eq!(s.utilisation(), "1.000000");
        prop_assert_eq!(s.suggested_slots, slots);
        prop_assert!(!s.is_below(1_000_000));
    }

    #[test]
    fn utilisation_is_a_fraction_and_grows_with_what_is_held(
        slots in 1u32..6,
        stints in held(5, 40 * HOUR_MS),
        len in 1i64..40 * HOUR_MS,
        now in 1i64..45 * HOUR_MS,
        extra in 0i64..5 * HOUR_MS,
    ) {
        let stints: Vec<Stint> = stints
            .into_iter()
            .filter(|s| s.instance_id.as_str() < format!("inst_{slots}").as_str())
            .collect();
        let window = Term::new(0, len);
        let s = summarise(GRANT, slots, window, &stints, now);
        prop_assert!((0..=1_000_000).contains(&s.utilisation_micros()), "{s:?}");
        // Holding one more instance for a while never lowers it (the
        // committed side is unchanged; it may exceed 1 with more than slots).
        let mut more = stints.clone();
        more.push(Stint {
            instance_id: "inst_extra".into(),
            from: 0,
            to: Some(extra),
            running: true,
            grant_id: Some(GRANT.into()),
        });
        let t = summarise(GRANT, slots, window, &more, now);
        prop_assert!(t.held_ms >= s.held_ms);
        prop_assert!(t.utilisation_micros() >= s.utilisation_micros());
        prop_assert_eq!(t.committed_ms, s.committed_ms);
    }

    #[test]
    fn below_agrees_with_the_exact_ratio(
        stints in held(3, 30 * HOUR_MS),
        ratio in 0i64..=1_000_000,
    ) {
        let s = summarise(GRANT, 3, Term::new(0, 24 * HOUR_MS), &stints, 30 * HOUR_MS);
        let exact = s.held_ms as f64 / s.committed_ms as f64;
        let limit = ratio as f64 / 1e6;
        if (exact - limit).abs() > 1e-9 {
            prop_assert_eq!(s.is_below(ratio), exact < limit);
        }
    }

    #[test]
    fn a_previews_slot_hours_are_what_the_meter_writes(
        slots in 1u32..100,
        start in -3 * HOUR_MS..3 * HOUR_MS,
        len in 1i64..200 * HOUR_MS,
    ) {
        let term = Term::new(start, start + len);
        let records = grant_slot_records(slots, term.start, term.end, term.start, i64::MAX / 2);
        let written: i64 = records.iter().map(|r| r.quantity_micro).sum();
        prop_assert_eq!(committed_slot_micros(slots, term), written);
        let (first, last) = billed_periods(term).expect("a term");
        prop_assert_eq!(records.first().map(|r| r.period_start), Some(first));
        prop_assert_eq!(records.last().map(|r| r.period_end), Some(last));
    }

    #[test]
    fn notices_are_due_only_while_active_and_never_before_the_start(
        start in 0i64..100 * HOUR_MS,
        len in 1i64..300 * HOUR_MS,
        now in 0i64..500 * HOUR_MS,
        befores in prop::collection::vec(1i64..200 * HOUR_MS, 0..5),
    ) {
        let notices: Vec<ExpiryNotice> = befores
            .iter()
            .map(|b| ExpiryNotice::new(&format!("{b}ms"), *b))
            .collect();
        let end = start + len;
        let due = due_notices(&notices, start, end, now);
        if !(start <= now && now < end) {
            prop_assert!(due.is_empty());
        }
        for n in &due {
            prop_assert!(end - n.before_ms >= start);
            prop_assert!(end - n.before_ms <= now);
        }
        // Every notice whose instant lies in [start, now] is due.
        let expected = notices
            .iter()
            .filter(|_| start <= now && now < end)
            .filter(|n| (start..=now).contains(&(end - n.before_ms)))
            .count();
        prop_assert_eq!(due.len(), expected);
    }

    #[test]
    fn the_underuse_window_is_24_whole_hours_inside_the_term(
        start in 0i64..100 * HOUR_MS,
        len in 1i64..300 * HOUR_MS,
        now in 0i64..500 * HOUR_MS,
    ) {
        if let Some(w) = underuse_window(start, start + len, now) {
            prop_assert_eq!(w.end - w.start, 24 * HOUR_MS);
            prop_assert_eq!(w.end % HOUR_MS, 0);
            prop_assert!(w.start >= start && w.end <= now && now < start + len);
            prop_assert!(now - w.end < HOUR_MS, "not the last whole hours");
        } else {
            let h = now - now % HOUR_MS;
            prop_assert!(now < start || now >= start + len || h - 24 * HOUR_MS < start);
        }
    }
}
