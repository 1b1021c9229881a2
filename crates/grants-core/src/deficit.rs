//! Deficit credits (contract 5.4): the committed slot-hours the provider did
//! not hold, shared among the grants that were live, exactly.
//!
//! A reservation's `total` is a step function of time, known from the scans
//! that saw it change ([`TotalChange`]); what the platform committed is a step
//! function too, the sum of the slots of the grants live at each instant
//! ([`Commitment`], ended grants with their final end, cancelled ones left
//! out). Wherever the total is below the commitment the difference is the
//! shortfall, and each live grant carries `shortfall × slots / committed` of
//! it. Those shares are rational: they are kept exact (arbitrary-precision
//! rationals, no floats) and rounded only where a record is cut, with the
//! cumulative rounding of [`crate::metering`], so a grant's records add up to
//! its exact credit rounded once.
//!
//! ```
//! use grants_core::deficit::{TotalChange, deficit_records};
//! use grants_core::{Commitment, Term, HOUR_MS};
//!
//! // Two grants of 2 slots on a 4-slot reservation, shrunk to 2 for an hour
//! // from 00:30: each grant carries 1 slot of the shortfall for that hour.
//! let history = [
//!     TotalChange { at: 0, total: 4 },
//!     TotalChange { at: HOUR_MS / 2, total: 2 },
//!     TotalChange { at: 3 * HOUR_MS / 2, total: 4 },
//! ];
//! let grants = [
//!     Commitment::new(Term::new(0, 10 * HOUR_MS), 2),
//!     Commitment::new(Term::new(0, 10 * HOUR_MS), 2),
//! ];
//! let records = deficit_records(0, &grants, &history, 0, 2 * HOUR_MS);
//! let quantities: Vec<String> = records.iter().map(|r| r.quantity()).collect();
//! assert_eq!(quantities, ["0.500000", "0.500000"]);
//! ```

use std::collections::BTreeMap;

use num_bigint::BigInt;
use num_integer::Integer;
pub use num_rational::BigRational;
use num_traits::{ToPrimitive, Zero};

use crate::capacity::{Commitment, Term};
use crate::metering::{HOUR_MS, Record, bucket_start, hour_buckets};

/// The reservation's total as a scan saw it change: `total` from `at` on,
/// until the next change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TotalChange {
    /// The scan's instant.
    pub at: i64,
    /// The total it saw.
    pub total: u64,
}

/// A stretch of time with a shortfall: `[from, to)`, the slots committed and
/// the slots missing, both constant over it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shortfall {
    /// First instant.
    pub from: i64,
    /// First instant after it.
    pub to: i64,
    /// Slots of the grants live over it.
    pub committed: u64,
    /// `committed - total` over it (positive).
    pub short: u64,
}

/// The reservation's total at `t`: the last change at or before `t`; before
/// the first change, the first one's total (the reservation as first seen).
/// `None` without history.
pub fn total_at(history: &[TotalChange], t: i64) -> Option<u64> {
    let first = history.first()?;
    Some(
        history
            .iter()
            .take_while(|c| c.at <= t)
            .last()
            .unwrap_or(first)
            .total,
    )
}

/// The slots of `grants` live at `t`.
pub fn committed_at(grants: &[Commitment], t: i64) -> u64 {
    grants
        .iter()
        .filter(|g| g.term.contains(t))
        .map(|g| u64::from(g.slots))
        .sum()
}

/// `max(0, committed(t) - total(t))`; 0 without history.
pub fn shortfall_at(grants: &[Commitment], history: &[TotalChange], t: i64) -> u64 {
    total_at(history, t).map_or(0, |total| committed_at(grants, t).saturating_sub(total))
}

/// The share of the shortfall at `t` that `grants[subject]` carries, in
/// slots: `shortfall × slots / committed` if it is live at `t`, else 0.
pub fn share_at(
    subject: usize,
    grants: &[Commitment],
    history: &[TotalChange],
    t: i64,
) -> BigRational {
    let Some(grant) = grants.get(subject).filter(|g| g.term.contains(t)) else {
        return BigRational::zero();
    };
    let short = shortfall_at(grants, history, t);
    if short == 0 {
        return BigRational::zero();
    }
    ratio(
        u128::from(short) * u128::from(grant.slots),
        u128::from(committed_at(grants, t)),
    )
}

/// The stretches of `window` where the reservation was short, in order, each
/// as long as neither the total nor the commitment changes. Nothing without
/// history.
pub fn shortfall_steps(
    grants: &[Commitment],
    history: &[TotalChange],
    window: Term,
) -> Vec<Shortfall> {
    if history.is_empty() || window.is_empty() {
        return Vec::new();
    }
    // Every instant where the total or the commitment may change.
    let mut cuts: Vec<i64> = history
        .iter()
        .map(|c| c.at)
        .chain(grants.iter().flat_map(|g| [g.term.start, g.term.end]))
        .filter(|t| window.contains(*t))
        .chain([window.start, window.end])
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut out: Vec<Shortfall> = Vec::new();
    for (&from, &to) in cuts.iter().zip(cuts.iter().skip(1)) {
        let committed = committed_at(grants, from);
        let short = shortfall_at(grants, history, from);
        if short == 0 {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.to == from && (last.committed, last.short) == (committed, short) => {
                last.to = to;
            }
            _ => out.push(Shortfall {
                from,
                to,
                committed,
                short,
            }),
        }
    }
    out
}

/// The exact credit of `grants[subject]` per hour bucket over its term up to
/// `until`, in slot-milliseconds: `shortfall × slots / committed × ms` summed
/// over each bucket. Only buckets with a credit appear.
pub fn deficit_ms_by_bucket(
    subject: usize,
    grants: &[Commitment],
    history: &[TotalChange],
    until: i64,
) -> BTreeMap<i64, BigRational> {
    deficit_ms_in(subject, grants, history, Term::new(i64::MIN, until))
}

/// [`deficit_ms_by_bucket`] over the part of the grant's term inside
/// `window` only.
pub fn deficit_ms_in(
    subject: usize,
    grants: &[Commitment],
    history: &[TotalChange],
    window: Term,
) -> BTreeMap<i64, BigRational> {
    let mut out: BTreeMap<i64, BigRational> = BTreeMap::new();
    let Some(grant) = grants.get(subject) else {
        return out;
    };
    let Some(span) = grant.term.intersection(&window) else {
        return out;
    };
    for stretch in shortfall_steps(grants, history, span) {
        let per_ms = ratio(
            u128::from(stretch.short) * u128::from(grant.slots),
            u128::from(stretch.committed),
        );
        for (bucket, ms) in hour_buckets(stretch.from, stretch.to) {
            let credit = &per_ms * BigRational::from_integer(BigInt::from(ms));
            *out.entry(bucket).or_insert_with(BigRational::zero) += credit;
        }
    }
    out
}

/// The exact credit of `grants[subject]` over `[term start, until)`, in
/// slot-milliseconds.
pub fn exact_deficit_ms(
    subject: usize,
    grants: &[Commitment],
    history: &[TotalChange],
    until: i64,
) -> BigRational {
    deficit_ms_by_bucket(subject, grants, history, until)
        .into_values()
        .fold(BigRational::zero(), |sum, ms| sum + ms)
}

/// The `vm.grant.deficit.hours` records of `grants[subject]` for every hour
/// bucket that has ended by `now`, is not metered yet and holds a credit, as
/// [`crate::grant_slot_records`] cuts the slot-hours: `metered_through` is the
/// grant's `meteredThrough`, buckets ending at or before it are written
/// already, and each record is the difference of the grant's cumulative
/// exact credit rounded at consecutive bucket ends.
///
/// `grants` are the reservation's non-cancelled grants (ended ones with their
/// final end), the subject among them; `history` its total as the scans saw
/// it, oldest first.
pub fn deficit_records(
    subject: usize,
    grants: &[Commitment],
    history: &[TotalChange],
    metered_through: i64,
    now: i64,
) -> Vec<Record> {
    let Some(grant) = grants.get(subject) else {
        return Vec::new();
    };
    if metered_through >= grant.term.end {
        return Vec::new();
    }
    let first = bucket_start(metered_through);
    let ended = bucket_start(now);
    if ended <= first {
        return Vec::new();
    }
    let before = exact_deficit_ms(subject, grants, history, first);
    deficit_records_after(subject, grants, history, &before, metered_through, now).0
}

/// [`deficit_records`] from a known exact credit: `before` is the grant's
/// exact credit (slot-milliseconds) over its term before the bucket holding
/// `metered_through`, as the previous call returned it (0 at first). Only
/// the hours from that bucket on are computed, so the history and grants
/// before it are not needed, and a change to an hour already written never
/// reaches a later record. Returns the records and the exact credit before
/// the first bucket not written (to keep for the next call).
///
/// ```
/// use grants_core::deficit::{BigRational, TotalChange, deficit_records_after};
/// use grants_core::{Commitment, Term, HOUR_MS};
///
/// let history = [TotalChange { at: 0, total: 2 }];
/// let grants = [Commitment::new(Term::new(0, 3 * HOUR_MS), 1); 3];
/// let zero = BigRational::from_integer(0.into());
/// let (first, exact) = deficit_records_after(2, &grants, &history, &zero, 0, HOUR_MS);
/// let (rest, _) = deficit_records_after(2, &grants, &history, &exact, HOUR_MS, 3 * HOUR_MS);
/// let q: Vec<i64> = first.iter().chain(&rest).map(|r| r.quantity_micro).collect();
/// assert_eq!(q, [333_333, 333_334, 333_333]);
/// ```
pub fn deficit_records_after(
    subject: usize,
    grants: &[Commitment],
    history: &[TotalChange],
    before: &BigRational,
    metered_through: i64,
    now: i64,
) -> (Vec<Record>, BigRational) {
    let Some(grant) = grants.get(subject) else {
        return (Vec::new(), before.clone());
    };
    let first = bucket_start(metered_through);
    let ended = bucket_start(now);
    if metered_through >= grant.term.end || ended <= first {
        return (Vec::new(), before.clone());
    }
    let mut cumulative = before.clone();
    let mut out = Vec::new();
    for (bucket, ms) in deficit_ms_in(subject, grants, history, Term::new(first, ended)) {
        let previous = round_to_micros(&cumulative);
        cumulative += ms;
        let period_end = bucket + HOUR_MS;
        out.push(Record {
            period_start: bucket,
            period_end,
            quantity_micro: round_to_micros(&cumulative) - previous,
            metered_through: period_end.min(grant.term.end),
        });
    }
    (out, cumulative)
}

/// [`deficit_micros_from`] from a known exact credit `before` at the bucket
/// holding `from` (see [`deficit_records_after`]).
pub fn deficit_micros_after(
    subject: usize,
    grants: &[Commitment],
    history: &[TotalChange],
    before: &BigRational,
    from: i64,
    until: i64,
) -> BTreeMap<i64, i64> {
    let mut cumulative = before.clone();
    let mut out = BTreeMap::new();
    let window = Term::new(bucket_start(from), until);
    for (bucket, ms) in deficit_ms_in(subject, grants, history, window) {
        let previous = round_to_micros(&cumulative);
        cumulative += ms;
        out.insert(bucket, round_to_micros(&cumulative) - previous);
    }
    out
}

/// The credit of `grants[subject]` per hour bucket from the bucket holding
/// `from` up to `until`, in micro-slot-hours, rounded as the records are (the
/// cumulative credit rounded at each bucket end, and at `until` for the
/// bucket it falls in): for an ended bucket, exactly its record. Only buckets
/// with a credit appear.
pub fn deficit_micros_from(
    subject: usize,
    grants: &[Commitment],
    history: &[TotalChange],
    from: i64,
    until: i64,
) -> BTreeMap<i64, i64> {
    let first = bucket_start(from);
    let before = exact_deficit_ms(subject, grants, history, first.min(until));
    deficit_micros_after(subject, grants, history, &before, first, until)
}

/// Slot-milliseconds to micro-slot-hours, rounded half-up, as
/// [`crate::metering`] rounds: `floor(ms × 5 / 18 + 1/2)`.
pub fn round_to_micros(ms: &BigRational) -> i64 {
    // floor((10 ms + 18) / 36) = floor((10 p + 18 q) / (36 q)) for ms = p/q.
    let (p, q) = (ms.numer(), ms.denom());
    let num = p * BigInt::from(10) + q * BigInt::from(18);
    let den = q * BigInt::from(36);
    num.div_floor(&den).to_i64().unwrap_or(i64::MAX)
}

/// `n / d` as an exact rational (`d > 0`).
fn ratio(n: u128, d: u128) -> BigRational {
    BigRational::new(BigInt::from(n), BigInt::from(d.max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = HOUR_MS;

    fn g(start: i64, end: i64, slots: u32) -> Commitment {
        Commitment::new(Term::new(start, end), slots)
    }

    fn micros(records: &[Record]) -> Vec<i64> {
        records.iter().map(|r| r.quantity_micro).collect()
    }

    #[test]
    fn nothing_while_the_total_covers_the_commitment() {
        let history = [TotalChange { at: 0, total: 4 }];
        let grants = [g(0, 10 * H, 2), g(0, 10 * H, 2)];
        assert!(deficit_records(0, &grants, &history, 0, 10 * H).is_empty());
        assert!(shortfall_steps(&grants, &history, Term::new(0, 10 * H)).is_empty());
        assert!(deficit_records(0, &grants, &[], 0, 10 * H).is_empty());
    }

    #[test]
    fn unequal_grants_share_by_slots() {
        // 3 + 1 slots on a total of 3 for one hour: 3/4 and 1/4 slot-hours.
        let history = [TotalChange { at: 0, total: 3 }];
        let grants = [g(0, H, 3), g(0, H, 1)];
        assert_eq!(
            micros(&deficit_records(0, &grants, &history, 0, H)),
            [750_000]
        );
        assert_eq!(
            micros(&deficit_records(1, &grants, &history, 0, H)),
            [250_000]
        );
    }

    #[test]
    fn thirds_round_cumulatively() {
        // Three 1-slot grants, total 2 for three hours: 1/3 slot-hour each
        // hour, written 0.333333, 0.333334, 0.333333.
        let history = [TotalChange { at: 0, total: 2 }];
        let grants = [g(0, 3 * H, 1), g(0, 3 * H, 1), g(0, 3 * H, 1)];
        let records = deficit_records(2, &grants, &history, 0, 3 * H);
        assert_eq!(micros(&records), [333_333, 333_334, 333_333]);
        // Metering in two calls writes the same records.
        let first = deficit_records(2, &grants, &history, 0, H);
        let rest = deficit_records(2, &grants, &history, H, 3 * H);
        assert_eq!(micros(&first), [333_333]);
        assert_eq!(micros(&rest), [333_334, 333_333]);
    }

    #[test]
    fn an_ended_grant_changes_the_shares_from_its_end() {
        // Total 2 under 2 + 2 + 2 slots; the third grant ends at 00:30: the
        // shortfall goes from 4 to 2, and each remaining grant's share from
        // 4/3 to 1 slot.
        let history = [TotalChange { at: 0, total: 2 }];
        let grants = [g(0, 2 * H, 2), g(0, 2 * H, 2), g(0, H / 2, 2)];
        let records = deficit_records(0, &grants, &history, 0, H);
        // 4/3 × 1/2 h + 1 × 1/2 h = 7/6 slot-hours.
        assert_eq!(micros(&records), [1_166_667]);
    }

    #[test]
    fn a_record_waits_for_its_bucket_to_end() {
        let history = [TotalChange { at: 0, total: 0 }];
        let grants = [g(0, 10 * H, 1)];
        assert!(deficit_records(0, &grants, &history, 0, H - 1).is_empty());
        assert_eq!(
            micros(&deficit_records(0, &grants, &history, 0, H)),
            [1_000_000]
        );
        assert!(deficit_records(0, &grants, &history, 10 * H, 20 * H).is_empty());
    }

    #[test]
    fn the_view_of_ended_buckets_is_their_records() {
        let history = [TotalChange { at: 0, total: 2 }];
        let grants = [g(0, 3 * H, 1), g(0, 3 * H, 1), g(0, 3 * H, 1)];
        let records = deficit_records(1, &grants, &history, H, 3 * H);
        let view = deficit_micros_from(1, &grants, &history, H, 3 * H);
        let from_records: BTreeMap<i64, i64> = records
            .iter()
            .map(|r| (r.period_start, r.quantity_micro))
            .collect();
        assert_eq!(view, from_records);
        // Half of the current hour: 1/6 slot-hour so far.
        let partial = deficit_micros_from(1, &grants, &history, 3 * H, 3 * H + H / 2);
        assert!(partial.is_empty(), "the term is over");
        let partial = deficit_micros_from(1, &grants, &history, 2 * H, 2 * H + H / 2);
        // 5/6 rounded (833_333) less 2/3 rounded (666_667).
        assert_eq!(partial.get(&(2 * H)), Some(&166_666));
    }

    #[test]
    fn before_the_first_scan_the_first_total_holds() {
        let history = [TotalChange { at: H, total: 1 }];
        assert_eq!(total_at(&history, 0), Some(1));
        assert_eq!(total_at(&[], 0), None);
        let grants = [g(0, H, 2)];
        assert_eq!(shortfall_at(&grants, &history, 0), 1);
    }

    #[test]
    fn rounding_is_half_up_on_exact_rationals() {
        let r = |n: i64, d: i64| BigRational::new(BigInt::from(n), BigInt::from(d));
        assert_eq!(round_to_micros(&r(0, 1)), 0);
        assert_eq!(round_to_micros(&r(9, 5)), 1); // 0.5 micro
        assert_eq!(round_to_micros(&r(17, 10)), 0); // 0.472 micro
        assert_eq!(round_to_micros(&r(H, 1)), 1_000_000);
        assert_eq!(round_to_micros(&r(H, 3)), 333_333);
    }
}
