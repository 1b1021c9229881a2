//! The capacity rule of `reservationGrants.create` (contract section 3.6):
//! the peak overlap of a reservation's grants.
//!
//! At every instant of a new grant's term, the slots of every non-cancelled
//! grant live at that instant plus the new slots must fit the reservation's
//! `total`. Ended grants count for `[startsAt, endsAt)` with their final
//! `endsAt`; the caller simply leaves cancelled grants out.

use std::fmt;

/// A half-open interval of time `[start, end)` in epoch milliseconds.
///
/// A term whose `end` is not after its `start` is empty: it contains no
/// instant. Empty terms are allowed (a grant ended by root at the very instant
/// it started has one) and simply never count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Term {
    /// First instant in the term.
    pub start: i64,
    /// First instant after the term.
    pub end: i64,
}

impl Term {
    /// The term `[start, end)`.
    pub const fn new(start: i64, end: i64) -> Term {
        Term { start, end }
    }

    /// The term from `start` on, without end (`[start, i64::MAX)`).
    ///
    /// Useful for "the peak from now on", as the `vps.reservations` scan needs
    /// for `reservation-grant.capacity-short`.
    pub const fn since(start: i64) -> Term {
        Term::new(start, i64::MAX)
    }

    /// Whether the term contains no instant.
    pub const fn is_empty(&self) -> bool {
        self.end <= self.start
    }

    /// Whether instant `t` is in the term (`start <= t < end`).
    pub const fn contains(&self, t: i64) -> bool {
        self.start <= t && t < self.end
    }

    /// The instants in both terms, or `None` if they share none.
    pub fn intersection(&self, other: &Term) -> Option<Term> {
        let both = Term::new(self.start.max(other.start), self.end.min(other.end));
        (!both.is_empty()).then_some(both)
    }
}

/// Some slots of a reservation committed for a term: a grant as the capacity
/// rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Commitment {
    /// When the slots are committed.
    pub term: Term,
    /// How many slots.
    pub slots: u32,
}

impl Commitment {
    /// `slots` slots committed for `term`.
    pub const fn new(term: Term, slots: u32) -> Commitment {
        Commitment { term, slots }
    }
}

/// The answer of [`check_capacity`] when a new grant does not fit:
/// `CAPACITY_UNAVAILABLE` with `details { total, granted }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CapacityShort {
    /// The reservation's total slots.
    pub total: u64,
    /// The peak overlap of the existing grants over the new term, without the
    /// new grant.
    pub granted: u64,
}

impl fmt::Display for CapacityShort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the reservation has {} slots and {} are already granted at the peak of the term",
            self.total, self.granted
        )
    }
}

impl std::error::Error for CapacityShort {}

/// The largest number of slots committed at one instant of `window`: the
/// maximum, over the instants `t` in `window`, of the slots of the
/// commitments whose term contains `t`. 0 when none does (or `window` is
/// empty).
///
/// Runs in `O(n log n)`: a sweep over the clipped start and end instants,
/// where an end is counted before a start at the same instant (terms are
/// half-open, so one that ends at `t` and one that starts at `t` never
/// overlap).
///
/// ```
/// use grants_core::{peak_overlap, Commitment, Term};
///
/// let grants = [
///     Commitment::new(Term::new(0, 10), 2),
///     Commitment::new(Term::new(5, 20), 3),
///     Commitment::new(Term::new(10, 30), 4), // starts as the first ends
/// ];
/// assert_eq!(peak_overlap(&grants, Term::new(0, 30)), 7);
/// assert_eq!(peak_overlap(&grants, Term::new(0, 8)), 5);
/// assert_eq!(peak_overlap(&grants, Term::new(20, 40)), 4);
/// assert_eq!(peak_overlap(&grants, Term::new(30, 40)), 0);
/// ```
pub fn peak_overlap(existing: &[Commitment], window: Term) -> u64 {
    // (instant, is_start, slots): `false < true` sorts ends before starts.
    let mut edges: Vec<(i64, bool, u64)> = Vec::with_capacity(existing.len() * 2);
    for commitment in existing.iter().filter(|c| c.slots > 0) {
        if let Some(term) = commitment.term.intersection(&window) {
            let slots = u64::from(commitment.slots);
            edges.push((term.start, true, slots));
            edges.push((term.end, false, slots));
        }
    }
    edges.sort_unstable();

    let (mut live, mut peak) = (0u64, 0u64);
    for (_, is_start, slots) in edges {
        if is_start {
            live += slots;
            peak = peak.max(live);
        } else {
            // Every end follows its own start, so this never underflows.
            live -= slots;
        }
    }
    peak
}

/// The capacity rule of `reservationGrants.create`: whether `new` fits a
/// reservation of `total` slots next to the `existing` commitments (every
/// non-cancelled grant on the reservation).
///
/// It fits when the peak overlap of `existing` over `new.term`, plus
/// `new.slots`, is at most `total`. Otherwise the error carries that peak as
/// `granted`. (An empty term overlaps nothing, so only `new.slots <= total`
/// is asked of it.)
///
/// ```
/// use grants_core::{check_capacity, CapacityShort, Commitment, Term};
///
/// let existing = [Commitment::new(Term::new(0, 100), 6)];
/// assert!(check_capacity(10, &existing, Commitment::new(Term::new(50, 150), 4)).is_ok());
/// assert_eq!(
///     check_capacity(10, &existing, Commitment::new(Term::new(50, 150), 5)),
///     Err(CapacityShort { total: 10, granted: 6 }),
/// );
/// // After the existing grant ends, the whole reservation is free.
/// assert!(check_capacity(10, &existing, Commitment::new(Term::new(100, 150), 10)).is_ok());
/// ```
pub fn check_capacity(
    total: u64,
    existing: &[Commitment],
    new: Commitment,
) -> Result<(), CapacityShort> {
    fits(total, peak_overlap(existing, new.term), new.slots)
}

/// The capacity rule once the peak is known: `slots` more fit a reservation
/// of `total` slots whose existing grants commit `granted` at the peak of the
/// new term when `granted + slots <= total`.
pub fn fits(total: u64, granted: u64, slots: u32) -> Result<(), CapacityShort> {
    if granted + u64::from(slots) <= total {
        Ok(())
    } else {
        Err(CapacityShort { total, granted })
    }
}

/// The committed step function of `existing`, as storage keeps it per
/// reservation (`reservation_steps`): `(at, committed)` rows by instant, each
/// the slots committed from `at` until the next row. Normalized: no row
/// repeats the level before it, the level before the first row is 0, and the
/// last row is 0 (every term is finite), so no commitment gives no rows.
///
/// ```
/// use grants_core::capacity::steps;
/// use grants_core::{Commitment, Term};
///
/// let grants = [
///     Commitment::new(Term::new(0, 10), 2),
///     Commitment::new(Term::new(10, 30), 2), // the level does not change at 10
///     Commitment::new(Term::new(5, 20), 3),
/// ];
/// assert_eq!(steps(&grants), vec![(0, 2), (5, 5), (20, 2), (30, 0)]);
/// ```
pub fn steps(existing: &[Commitment]) -> Vec<(i64, u64)> {
    let mut changes: std::collections::BTreeMap<i64, i128> = std::collections::BTreeMap::new();
    for c in existing.iter().filter(|c| !c.term.is_empty()) {
        *changes.entry(c.term.start).or_default() += i128::from(c.slots);
        *changes.entry(c.term.end).or_default() -= i128::from(c.slots);
    }
    let mut level: i128 = 0;
    changes
        .into_iter()
        .filter(|(_, delta)| *delta != 0)
        .map(|(at, delta)| {
            level += delta;
            // A running sum of whole terms never goes below 0.
            (at, u64::try_from(level).unwrap_or(0))
        })
        .collect()
}

/// The peak of a step function ([`steps`]) over `window`: the level at its
/// start (the last row at or before it) or of any row inside it, as
/// storage's capacity read computes it from the rows of the term alone.
/// Equal to [`peak_overlap`] of the commitments the steps come from.
pub fn peak_of_steps(steps: &[(i64, u64)], window: Term) -> u64 {
    if window.is_empty() {
        return 0;
    }
    let at_start = steps
        .iter()
        .take_while(|(at, _)| *at <= window.start)
        .last()
        .map_or(0, |(_, level)| *level);
    steps
        .iter()
        .filter(|(at, _)| window.start < *at && *at < window.end)
        .map(|(_, level)| *level)
        .fold(at_start, u64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(start: i64, end: i64, slots: u32) -> Commitment {
        Commitment::new(Term::new(start, end), slots)
    }

    #[test]
    fn terms_are_half_open() {
        let term = Term::new(10, 20);
        assert!(term.contains(10));
        assert!(term.contains(19));
        assert!(!term.contains(20));
        assert!(!term.contains(9));
        assert_eq!(term.intersection(&Term::new(20, 30)), None);
        assert_eq!(
            term.intersection(&Term::new(15, 30)),
            Some(Term::new(15, 20))
        );
    }

    #[test]
    fn empty_terms_never_count() {
        assert!(Term::new(5, 5).is_empty());
        assert!(Term::new(6, 5).is_empty());
        assert_eq!(peak_overlap(&[c(5, 5, 9)], Term::new(0, 10)), 0);
        assert_eq!(peak_overlap(&[c(0, 10, 9)], Term::new(5, 5)), 0);
    }

    #[test]
    fn back_to_back_terms_do_not_overlap() {
        let grants = [c(0, 10, 5), c(10, 20, 5)];
        assert_eq!(peak_overlap(&grants, Term::new(0, 20)), 5);
        assert!(check_capacity(5, &grants, c(20, 30, 5)).is_ok());
    }

    #[test]
    fn only_the_window_counts() {
        let grants = [c(0, 10, 5), c(20, 30, 7)];
        assert_eq!(peak_overlap(&grants, Term::new(9, 20)), 5);
        assert_eq!(peak_overlap(&grants, Term::new(10, 20)), 0);
        assert_eq!(peak_overlap(&grants, Term::since(29)), 7);
    }

    #[test]
    fn a_short_reservation_reports_the_peak_without_the_new_grant() {
        let grants = [c(0, 10, 3), c(5, 15, 4)];
        assert_eq!(
            check_capacity(8, &grants, c(0, 20, 2)),
            Err(CapacityShort {
                total: 8,
                granted: 7
            })
        );
        assert!(check_capacity(8, &grants, c(0, 20, 1)).is_ok());
    }

    #[test]
    fn zero_total_refuses_any_slot() {
        assert_eq!(
            check_capacity(0, &[], c(0, 1, 1)),
            Err(CapacityShort {
                total: 0,
                granted: 0
            })
        );
    }
}
