//! A grant's hours (`reservationGrants.usage`): one [`HourRow`] per hour
//! bucket of its term, with the slot-hours its meter bills and the
//! instance-hours held and run in it.

use crate::capacity::Term;
use crate::metering::{HOUR_MS, bucket_start, hour_buckets, round_to_micros};
use crate::views::preview::Stint;

/// One hour bucket of a grant: what it committed and billed, what its
/// instances held and ran, in micro-hours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HourRow {
    /// The bucket's start.
    pub period_start: i64,
    /// The bucket's end.
    pub period_end: i64,
    /// The grant's slots.
    pub slots: u32,
    /// Slot-hours committed in the bucket: exactly the `vm.grant.slot.hours`
    /// record of the bucket (cumulative rounding over the term), written or
    /// still to be written.
    pub slot_micros: i64,
    /// Instance-hours held in the grant, running or stopped, up to now:
    /// the bucket's exact instance-milliseconds rounded half-up.
    pub held_micros: i64,
    /// Instance-hours running in the grant, up to now, rounded likewise.
    pub usage_micros: i64,
    /// Slot-hours credited in the bucket for capacity the provider did not
    /// hold (`vm.grant.deficit.hours`, contract 5.4). The rows of
    /// [`grant_hours`] carry 0; the caller sets it from the grant's credits
    /// (see [`crate::deficit`]).
    pub deficit_micros: i64,
    /// Slot-hours its borrowers held running in lent slots
    /// (`vm.grant.lent.hours`, contract 5.5). The rows of [`grant_hours`]
    /// carry 0; the caller sets it (see [`lent_micros`]).
    pub lent_micros: i64,
}

/// The provisional lent slot-hours of one hour bucket `[start, end)`, up
/// to `now`: the borrowers' running milliseconds in it (`stretches`, each
/// `[from, to)`), rounded half-up to micro-slot-hours, never more than the
/// bucket's committed `slot_micros` (contract 5.5).
///
/// ```
/// use grants_core::views::hours::lent_micros;
/// use grants_core::HOUR_MS;
///
/// // Two borrowers, half an hour each, in a one-slot bucket: capped at 1.
/// let both = [(0, HOUR_MS / 2), (0, HOUR_MS / 2), (HOUR_MS / 2, HOUR_MS)];
/// assert_eq!(lent_micros(&both[..1], 0, HOUR_MS, HOUR_MS, 1_000_000), 500_000);
/// assert_eq!(lent_micros(&both, 0, HOUR_MS, HOUR_MS, 1_000_000), 1_000_000);
/// // Up to now only.
/// assert_eq!(lent_micros(&both[..1], 0, HOUR_MS, HOUR_MS / 4, 1_000_000), 250_000);
/// ```
pub fn lent_micros(
    stretches: &[(i64, i64)],
    start: i64,
    end: i64,
    now: i64,
    slot_micros: i64,
) -> i64 {
    let end = end.min(now);
    let ms: i128 = stretches
        .iter()
        .map(|&(from, to)| i128::from(to.min(end).saturating_sub(from.max(start)).max(0)))
        .sum();
    i64::try_from(round_to_micros(ms))
        .unwrap_or(i64::MAX)
        .min(slot_micros)
}

/// How many hour buckets `window` overlaps.
///
/// ```
/// use grants_core::views::hours::bucket_count;
/// use grants_core::{Term, HOUR_MS};
///
/// assert_eq!(bucket_count(Term::new(0, HOUR_MS)), 1);
/// assert_eq!(bucket_count(Term::new(HOUR_MS / 2, HOUR_MS + 1)), 2);
/// assert_eq!(bucket_count(Term::new(5, 5)), 0);
/// ```
pub fn bucket_count(window: Term) -> u64 {
    if window.is_empty() {
        return 0;
    }
    let first = i128::from(bucket_start(window.start));
    let last = i128::from(bucket_start(window.end - 1));
    u64::try_from((last - first) / i128::from(HOUR_MS) + 1).unwrap_or(u64::MAX)
}

/// The rows of a grant of `slots` slots over `term`, one per hour bucket of
/// the term that `window` overlaps (so a row is always its whole hour, as
/// billed), oldest first.
///
/// `slot_micros` follows the grant's slot meter exactly (the term's
/// cumulative slot-milliseconds rounded at each bucket end), also for hours
/// not billed yet. `held_micros` and `usage_micros` come from the `stints`
/// of grant `grant_id` (others are ignored) up to `now`, so they are 0 for
/// hours after now, each rounded half-up on its own: a row never holds
/// fewer hours than it ran. Nothing for a window that misses the term.
pub fn grant_hours(
    grant_id: &str,
    slots: u32,
    term: Term,
    window: Term,
    stints: &[Stint],
    now: i64,
) -> Vec<HourRow> {
    grant_hours_with(grant_id, slots, term, window, &[], stints, now)
}

/// The exact instance-milliseconds some of a grant's segments spent in one
/// hour bucket, already summed (storage has the database sum its closed
/// segments, up to now).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BucketMs {
    /// The bucket's start.
    pub bucket: i64,
    /// Held, running or stopped.
    pub held_ms: i64,
    /// Running.
    pub usage_ms: i64,
}

/// [`grant_hours`] from segments of which some are already summed per
/// bucket in `totals` (their buckets outside the rows are ignored) and the
/// others given as `stints`: the same rows as [`grant_hours`] over all of
/// them.
pub fn grant_hours_with(
    grant_id: &str,
    slots: u32,
    term: Term,
    window: Term,
    totals: &[BucketMs],
    stints: &[Stint],
    now: i64,
) -> Vec<HourRow> {
    let Some(range) = term.intersection(&window) else {
        return Vec::new();
    };
    let first = bucket_start(range.start);
    let count = usize::try_from(bucket_count(range)).unwrap_or(0);
    // Exact instance-milliseconds per bucket: held (any power), running.
    let mut held = vec![0i128; count];
    let mut running = vec![0i128; count];
    let span = Term::new(
        first,
        first.saturating_add(HOUR_MS.saturating_mul(count as i64)),
    );
    for stint in stints
        .iter()
        .filter(|s| s.grant_id.as_deref() == Some(grant_id))
    {
        let lived = Term::new(stint.from, stint.to.unwrap_or(now).min(now));
        let Some(inside) = lived.intersection(&span) else {
            continue;
        };
        for (bucket, ms) in hour_buckets(inside.start, inside.end) {
            let k = usize::try_from((bucket - first) / HOUR_MS).unwrap_or(usize::MAX);
            if let Some(h) = held.get_mut(k) {
                *h += i128::from(ms);
            }
            if stint.running
                && let Some(r) = running.get_mut(k)
            {
                *r += i128::from(ms);
            }
        }
    }
    for t in totals {
        if t.bucket < first || (t.bucket - first) % HOUR_MS != 0 {
            continue;
        }
        let k = usize::try_from((t.bucket - first) / HOUR_MS).unwrap_or(usize::MAX);
        if let (Some(h), Some(r)) = (held.get_mut(k), running.get_mut(k)) {
            *h += i128::from(t.held_ms);
            *r += i128::from(t.usage_ms);
        }
    }
    // The slot meter's cumulative value at `t`: slot-ms of the term before it.
    let cumulative = |t: i64| {
        i128::from(slots) * (i128::from(t.clamp(term.start, term.end)) - i128::from(term.start))
    };
    let micros = |m: i128| i64::try_from(m).unwrap_or(i64::MAX);
    held.iter()
        .zip(&running)
        .enumerate()
        .map(|(k, (held, running))| {
            let period_start = first + HOUR_MS * k as i64;
            let period_end = period_start.saturating_add(HOUR_MS);
            let slot =
                round_to_micros(cumulative(period_end)) - round_to_micros(cumulative(period_start));
            HourRow {
                period_start,
                period_end,
                slots,
                slot_micros: micros(slot),
                held_micros: micros(round_to_micros(*held)),
                usage_micros: micros(round_to_micros(*running)),
                deficit_micros: 0,
                lent_micros: 0,
            }
        })
        .collect()
}
