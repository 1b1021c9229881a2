//! Property tests of the capacity rule against a brute-force sweep.

use grants_core::{CapacityShort, Commitment, Term, check_capacity, peak_overlap};
use proptest::prelude::*;

/// Slots committed at instant `t`, by definition.
fn live_at(commitments: &[Commitment], t: i64) -> u64 {
    commitments
        .iter()
        .filter(|c| c.term.contains(t))
        .map(|c| u64::from(c.slots))
        .sum()
}

fn brute_peak(commitments: &[Commitment], window: Term) -> u64 {
    (window.start..window.end)
        .map(|t| live_at(commitments, t))
        .max()
        .unwrap_or(0)
}

fn term() -> impl Strategy<Value = Term> {
    // Includes empty and inverted terms.
    (-5i64..45, -5i64..45).prop_map(|(start, end)| Term::new(start, end))
}

fn commitment() -> impl Strategy<Value = Commitment> {
    (term(), 0u32..6).prop_map(|(term, slots)| Commitment::new(term, slots))
}

proptest! {
    #[test]
    fn peak_overlap_is_the_brute_force_maximum(
        commitments in prop::collection::vec(commitment(), 0..12),
        window in term(),
    ) {
        prop_assert_eq!(peak_overlap(&commitments, window), brute_peak(&commitments, window));
    }

    /// Storage reads only the commitments whose term overlaps the new one
    /// (PostgreSQL's `int8range(s, e) && int8range(S, E)`: both non-empty
    /// and `s < E && S < e`); the answer is the same as over all of them.
    #[test]
    fn the_overlapping_commitments_decide_as_all_of_them(
        total in 0u64..12,
        existing in prop::collection::vec(commitment(), 0..12),
        request in commitment(),
    ) {
        let (start, end) = (request.term.start, request.term.end);
        let overlapping: Vec<Commitment> = existing
            .iter()
            .filter(|c| c.term.start < c.term.end && start < end)
            .filter(|c| c.term.start < end && start < c.term.end)
            .copied()
            .collect();
        prop_assert_eq!(
            check_capacity(total, &overlapping, request),
            check_capacity(total, &existing, request)
        );
        prop_assert_eq!(
            peak_overlap(&overlapping, request.term),
            peak_overlap(&existing, request.term)
        );
    }

    #[test]
    fn accepting_only_what_fits_never_over_commits(
        total in 0u64..12,
        requests in prop::collection::vec(commitment(), 0..20),
    ) {
        let mut accepted: Vec<Commitment> = Vec::new();
        for request in requests {
            match check_capacity(total, &accepted, request) {
                Ok(()) => accepted.push(request),
                Err(CapacityShort { total: reported, granted }) => {
                    prop_assert_eq!(reported, total);
                    prop_assert_eq!(granted, brute_peak(&accepted, request.term));
                    prop_assert!(granted + u64::from(request.slots) > total);
                }
            }
            for t in -5..45 {
                prop_assert!(live_at(&accepted, t) <= total, "over-committed at {}", t);
            }
        }
    }

    #[test]
    fn a_request_that_fits_everywhere_is_accepted(
        total in 0u64..12,
        existing in prop::collection::vec(commitment(), 0..8),
        request in commitment().prop_filter("non-empty", |c| !c.term.is_empty()),
    ) {
        let fits = (request.term.start..request.term.end)
            .all(|t| live_at(&existing, t) + u64::from(request.slots) <= total);
        prop_assert_eq!(check_capacity(total, &existing, request).is_ok(), fits);
    }
}

proptest! {
    /// The capacity read from the stored steps (the level at the term's
    /// start and the levels of the rows inside it) is the peak overlap.
    #[test]
    fn the_peak_of_the_steps_is_the_peak_overlap(
        commitments in prop::collection::vec(commitment(), 0..12),
        window in term(),
    ) {
        let steps = grants_core::capacity::steps(&commitments);
        prop_assert_eq!(
            grants_core::capacity::peak_of_steps(&steps, window),
            peak_overlap(&commitments, window)
        );
    }

    /// The steps are the committed level at every instant, and normalized:
    /// no row repeats the level before it, and the last is 0.
    #[test]
    fn the_steps_are_the_level_at_every_instant_and_normalized(
        commitments in prop::collection::vec(commitment(), 0..12),
    ) {
        let steps = grants_core::capacity::steps(&commitments);
        for t in -6i64..46 {
            let level = steps.iter().take_while(|(at, _)| *at <= t).last().map_or(0, |s| s.1);
            prop_assert_eq!(level, live_at(&commitments, t));
        }
        let mut before = 0;
        for (_, level) in &steps {
            prop_assert_ne!(*level, before);
            before = *level;
        }
        prop_assert_eq!(steps.last().map_or(0, |s| s.1), 0);
    }
}
