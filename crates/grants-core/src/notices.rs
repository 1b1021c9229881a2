//! Foresight for grantees and root (contract 3.6 `preview`, contract 9
//! `reservation-grant.expiring` and `.underused`): what a grant would bill
//! before it is made, when its expiry notices fall due, whether its last day
//! was underused, and how large a renewal should be from what it really held.
//!
//! * [`committed_slot_micros`]: the exact total `vm.grant.slot.hours` adds
//!   up to over a term.
//! * [`due_notices`]: the expiry notices due at an instant.
//! * [`underuse_window`]: the last 24 whole hours, once a grant has been
//!   active that long.
//! * [`summarise`]: utilisation and the suggested renewal size over a
//!   window, from the grant's placement segments.
//!
//! ```
//! use grants_core::notices::{summarise, ExpiryNotice, due_notices};
//! use grants_core::views::preview::Stint;
//! use grants_core::{Term, HOUR_MS};
//!
//! // Two slots over twenty hours; one instance held the whole time, a
//! // second for the first hour only.
//! let held = |id: &str, to: i64| Stint {
//!     instance_id: id.into(),
//!     from: 0,
//!     to: Some(to),
//!     running: true,
//!     grant_id: Some("rgrant_1".into()),
//! };
//! let stints = [held("inst_a", 20 * HOUR_MS), held("inst_b", HOUR_MS)];
//! let s = summarise("rgrant_1", 2, Term::new(0, 20 * HOUR_MS), &stints, 20 * HOUR_MS);
//! assert_eq!(s.utilisation(), "0.525000"); // 21 instance-hours of 40
//! assert_eq!(s.suggested_slots, 1); // 19 hours of 20 held one instance
//!
//! let notices = [ExpiryNotice::new("1d", 24 * HOUR_MS), ExpiryNotice::new("1h", HOUR_MS)];
//! // A grant of 10 hours: the 1d notice would come before its start.
//! let due = due_notices(&notices, 0, 10 * HOUR_MS, 9 * HOUR_MS + 1);
//! assert_eq!(due.iter().map(|n| n.label.as_str()).collect::<Vec<_>>(), ["1h"]);
//! ```

use crate::capacity::Term;
use crate::metering::{HOUR_MS, MICROS_PER_UNIT, bucket_start, format_micros, round_to_micros};
use crate::views::preview::Stint;

/// The window `reservation-grant.underused` looks back over.
pub const UNDERUSE_WINDOW_MS: i64 = 24 * HOUR_MS;

/// The exact micro-slot-hours a grant of `slots` over `term` bills in all:
/// its records round the cumulative slot-milliseconds at each bucket end,
/// so they add up to the whole term's rounded once.
///
/// ```
/// use grants_core::notices::committed_slot_micros;
/// use grants_core::{Term, HOUR_MS};
///
/// // 3 slots for 1 h 20 min 1 ms.
/// let term = Term::new(0, HOUR_MS + 20 * 60_000 + 1);
/// assert_eq!(committed_slot_micros(3, term), 4_000_001);
/// ```
pub fn committed_slot_micros(slots: u32, term: Term) -> i64 {
    if term.is_empty() {
        return 0;
    }
    let ms = i128::from(slots) * (i128::from(term.end) - i128::from(term.start));
    i64::try_from(round_to_micros(ms)).unwrap_or(i64::MAX)
}

/// The hour buckets a term bills: the first one's start and the last one's
/// end (`None` for an empty term).
///
/// ```
/// use grants_core::notices::billed_periods;
/// use grants_core::{Term, HOUR_MS};
///
/// let term = Term::new(HOUR_MS / 2, 2 * HOUR_MS + 1);
/// assert_eq!(billed_periods(term), Some((0, 3 * HOUR_MS)));
/// ```
pub fn billed_periods(term: Term) -> Option<(i64, i64)> {
    if term.is_empty() {
        return None;
    }
    Some((
        bucket_start(term.start),
        bucket_start(term.end - 1).saturating_add(HOUR_MS),
    ))
}

/// One configured expiry notice: sent when the clock passes
/// `endsAt - before_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ExpiryNotice {
    /// As configured (`"7d"`): the event's `notice`.
    pub label: String,
    /// How long before `endsAt` it is due, in milliseconds (positive).
    pub before_ms: i64,
}

impl ExpiryNotice {
    /// A notice `before_ms` before the end, named `label`.
    pub fn new(label: &str, before_ms: i64) -> ExpiryNotice {
        ExpiryNotice {
            label: label.to_owned(),
            before_ms,
        }
    }
}

/// The notices of a grant with term `[starts_at, ends_at)` due at `now`,
/// longest first: those whose instant `ends_at - before` has passed
/// (`<= now`) and is not before the start, while the grant is active
/// (`starts_at <= now < ends_at`). One found late is still due while the
/// grant is active; none is due once it has ended. Which of them were sent
/// already is the caller's record.
pub fn due_notices(
    notices: &[ExpiryNotice],
    starts_at: i64,
    ends_at: i64,
    now: i64,
) -> Vec<&ExpiryNotice> {
    if !(starts_at <= now && now < ends_at) {
        return Vec::new();
    }
    let mut due: Vec<&ExpiryNotice> = notices
        .iter()
        .filter(|n| {
            let at = ends_at.saturating_sub(n.before_ms);
            starts_at <= at && at <= now
        })
        .collect();
    due.sort_by(|a, b| b.before_ms.cmp(&a.before_ms).then(a.label.cmp(&b.label)));
    due
}

/// The window `reservation-grant.underused` judges at `now`: the last 24
/// whole hours (`[h - 24 h, h)` where `h` is the start of now's hour), once
/// it lies inside the term, so the grant has been active for all of it; and
/// only while the grant is active.
///
/// ```
/// use grants_core::notices::underuse_window;
/// use grants_core::{Term, HOUR_MS};
///
/// let day = 24 * HOUR_MS;
/// // Started at 00:30: at 00:40 the next day the last whole day began before it.
/// assert_eq!(underuse_window(HOUR_MS / 2, 10 * day, day + 40 * 60_000), None);
/// assert_eq!(
///     underuse_window(HOUR_MS / 2, 10 * day, day + HOUR_MS + 1),
///     Some(Term::new(HOUR_MS, day + HOUR_MS)),
/// );
/// ```
pub fn underuse_window(starts_at: i64, ends_at: i64, now: i64) -> Option<Term> {
    if !(starts_at <= now && now < ends_at) {
        return None;
    }
    let to = bucket_start(now);
    let from = to.checked_sub(UNDERUSE_WINDOW_MS)?;
    (from >= starts_at).then(|| Term::new(from, to))
}

/// What a grant held over a window, as the notices report it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UsageSummary {
    /// The window (its end clipped to now).
    pub window: Term,
    /// Exact instance-milliseconds held in the grant, running or stopped.
    pub held_ms: i128,
    /// Exact slot-milliseconds committed (`slots` times the window).
    pub committed_ms: i128,
    /// The 95th percentile (nearest rank) of the most instances the grant
    /// held at once in each hour bucket of the window, between 1 and the
    /// grant's slots.
    pub suggested_slots: u32,
}

impl UsageSummary {
    /// Held over committed, in millionths rounded half-up (0 for an empty
    /// window).
    pub fn utilisation_micros(&self) -> i64 {
        if self.committed_ms <= 0 {
            return 0;
        }
        let scaled = self.held_ms * i128::from(MICROS_PER_UNIT) * 2 + self.committed_ms;
        i64::try_from(scaled.div_euclid(2 * self.committed_ms)).unwrap_or(i64::MAX)
    }

    /// [`Self::utilisation_micros`] as a 6-decimal string (`"0.412500"`).
    pub fn utilisation(&self) -> String {
        format_micros(self.utilisation_micros())
    }

    /// Whether the held instance-hours are below `ratio_micros` millionths
    /// of the committed slot-hours (exact, no rounding).
    pub fn is_below(&self, ratio_micros: i64) -> bool {
        self.held_ms * i128::from(MICROS_PER_UNIT) < i128::from(ratio_micros) * self.committed_ms
    }
}

/// The 95th percentile of `values` by nearest rank (the smallest value at
/// least 95 % of them do not exceed); 0 for none.
///
/// ```
/// use grants_core::notices::percentile_95;
///
/// assert_eq!(percentile_95(&[3; 7]), 3);
/// assert_eq!(percentile_95(&[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 9]), 1);
/// assert_eq!(percentile_95(&[1, 9]), 9);
/// ```
pub fn percentile_95(values: &[u32]) -> u32 {
    if values.is_empty() {
        return 0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    // rank = ceil(0.95 n), 1-based.
    let rank = (sorted.len() * 95).div_ceil(100).max(1);
    sorted.get(rank - 1).copied().unwrap_or(0)
}

/// The most of `stints` that overlap at any instant of `span`.
fn peak_held(stints: &[Term], span: Term) -> u32 {
    let mut edges: Vec<(i64, i32)> = Vec::new();
    for t in stints {
        if let Some(inside) = t.intersection(&span) {
            edges.push((inside.start, 1));
            edges.push((inside.end, -1));
        }
    }
    // Ends before starts at one instant: a hand-over is not an overlap.
    edges.sort_unstable();
    let (mut now, mut peak) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        peak = peak.max(now);
    }
    u32::try_from(peak).unwrap_or(0)
}

/// Utilisation and the suggested renewal size of grant `grant_id` (of
/// `slots` slots) over `window`, up to `now`, from the placement segments
/// `stints` (those of other grants and ordinary slots are ignored): the
/// instance-milliseconds it held, running or stopped, over the
/// slot-milliseconds it committed, and the 95th percentile of its hourly
/// peaks of held instances, at least 1 and at most `slots`.
pub fn summarise(
    grant_id: &str,
    slots: u32,
    window: Term,
    stints: &[Stint],
    now: i64,
) -> UsageSummary {
    let window = Term::new(window.start, window.end.min(now).max(window.start));
    let held: Vec<Term> = stints
        .iter()
        .filter(|s| s.grant_id.as_deref() == Some(grant_id))
        .filter_map(|s| Term::new(s.from, s.to.unwrap_or(now).min(now)).intersection(&window))
        .collect();
    let held_ms: i128 = held
        .iter()
        .map(|t| i128::from(t.end) - i128::from(t.start))
        .sum();
    let committed_ms = i128::from(slots) * (i128::from(window.end) - i128::from(window.start));
    let mut peaks = Vec::new();
    if !window.is_empty() {
        let mut bucket = bucket_start(window.start);
        while bucket < window.end {
            let span = Term::new(bucket.max(window.start), (bucket + HOUR_MS).min(window.end));
            peaks.push(peak_held(&held, span));
            bucket += HOUR_MS;
        }
    }
    UsageSummary {
        window,
        held_ms,
        committed_ms,
        suggested_slots: percentile_95(&peaks).clamp(1, slots.max(1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stint(from: i64, to: Option<i64>, grant: &str) -> Stint {
        Stint {
            instance_id: format!("inst_{from}"),
            from,
            to,
            running: false,
            grant_id: Some(grant.into()),
        }
    }

    #[test]
    fn a_hand_over_at_one_instant_is_not_two_held() {
        let h = HOUR_MS;
        let stints = [stint(0, Some(h / 2), "g"), stint(h / 2, None, "g")];
        let s = summarise("g", 3, Term::new(0, 4 * h), &stints, 4 * h);
        assert_eq!(s.suggested_slots, 1);
        assert_eq!(s.utilisation(), "0.333333");
    }

    #[test]
    fn an_open_segment_counts_up_to_now_only() {
        let h = HOUR_MS;
        let s = summarise("g", 1, Term::new(0, 10 * h), &[stint(0, None, "g")], 2 * h);
        assert_eq!(s.window, Term::new(0, 2 * h));
        assert_eq!(s.utilisation(), "1.000000");
        assert!(!s.is_below(200_000));
    }

    #[test]
    fn other_grants_and_an_empty_window_hold_nothing() {
        let s = summarise("g", 2, Term::new(5, 5), &[stint(0, None, "other")], 9);
        assert_eq!((s.utilisation(), s.suggested_slots), ("0.000000".into(), 1));
        assert!(!s.is_below(200_000), "nothing committed is not underused");
    }

    #[test]
    fn notices_stop_at_the_end_and_skip_those_before_the_start() {
        let n = [
            ExpiryNotice::new("1h", HOUR_MS),
            ExpiryNotice::new("7d", 7 * 24 * HOUR_MS),
        ];
        let (start, end) = (0, 2 * HOUR_MS);
        assert!(due_notices(&n, start, end, HOUR_MS - 1).is_empty());
        assert_eq!(due_notices(&n, start, end, HOUR_MS).len(), 1);
        assert!(due_notices(&n, start, end, end).is_empty());
        // A term of exactly one notice: its instant is the start.
        assert_eq!(due_notices(&n, HOUR_MS, end, HOUR_MS).len(), 1);
    }
}
