//! Hourly meters with exact cumulative rounding (contract section 5.2).
//!
//! Quantities are exact integers until the last step: time is in
//! milliseconds, a subject's usage is weighted milliseconds (slot-ms for a
//! grant's `vm.grant.slot.hours`, instance-ms for the instance meters), and a
//! record's quantity is in millionths of an hour ("micros"), rendered with
//! exactly 6 decimals by [`format_micros`]. No floating point is involved.
//!
//! Records are written per UTC hour bucket `[h, h + 1h)`, only once the bucket
//! has ended. The subject's cumulative exact usage is rounded half-up to
//! micros at each bucket end, and each record is the difference of two
//! consecutive rounded cumulative values, so the records of a subject always
//! add up to its exact total rounded once, however its usage falls across
//! hours and however often it is metered.

use std::collections::BTreeMap;

use crate::capacity::Term;

/// Milliseconds in an hour: the length of a metering bucket.
pub const HOUR_MS: i64 = 3_600_000;

/// Micros in one unit (slot-hour or instance-hour): quantities have 6
/// decimals.
pub const MICROS_PER_UNIT: i64 = 1_000_000;

/// The start of the UTC hour bucket containing `t`.
///
/// ```
/// use grants_core::metering::bucket_start;
///
/// assert_eq!(bucket_start(7_199_999), 3_600_000);
/// assert_eq!(bucket_start(7_200_000), 7_200_000);
/// ```
pub fn bucket_start(t: i64) -> i64 {
    t.saturating_sub(t.rem_euclid(HOUR_MS))
}

/// The UTC hour buckets that `[from, to)` overlaps, in order, as
/// `(bucket_start, overlap_ms)`. Nothing when `to <= from`.
///
/// ```
/// use grants_core::{hour_buckets, HOUR_MS};
///
/// let buckets: Vec<_> = hour_buckets(HOUR_MS / 2, 2 * HOUR_MS + 1).collect();
/// assert_eq!(buckets, [(0, HOUR_MS / 2), (HOUR_MS, HOUR_MS), (2 * HOUR_MS, 1)]);
/// ```
pub fn hour_buckets(from: i64, to: i64) -> impl Iterator<Item = (i64, i64)> {
    let mut next = from;
    std::iter::from_fn(move || {
        (next < to).then(|| {
            let start = bucket_start(next);
            let end = start.saturating_add(HOUR_MS).min(to);
            let overlap = end - next;
            next = end;
            (start, overlap)
        })
    })
}

/// A stretch of a subject's usage: `[from, to)` at `weight` units (slots for
/// a grant, 1 for an instance).
///
/// An open stretch (an instance still running) may end at `i64::MAX`; only
/// ended buckets are ever metered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Segment {
    /// First instant of usage.
    pub from: i64,
    /// First instant after it.
    pub to: i64,
    /// Units in use during it.
    pub weight: u32,
}

/// One usage record: a subject's quantity in one ended hour bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Record {
    /// The bucket's start (`periodStart`).
    pub period_start: i64,
    /// The bucket's end (`periodEnd`), even when only part of it was used.
    pub period_end: i64,
    /// The quantity in micros (millionths of a slot-hour or instance-hour);
    /// see [`format_micros`].
    pub quantity_micro: i64,
    /// The subject's `meteredThrough` once this record is written.
    pub metered_through: i64,
}

impl Record {
    /// The quantity as the API writes it: exactly 6 decimals.
    pub fn quantity(&self) -> String {
        format_micros(self.quantity_micro)
    }
}

/// The records of a subject for every bucket that has ended by `now`, is not
/// metered yet, and has usage.
///
/// `segments` are the subject's whole usage history (the cumulative value
/// starts from its beginning; they may overlap, weights then add up).
/// `metered_through` says what is already written: every bucket ending at or
/// before it. Pass the start of the subject's history at first, then the last
/// record's `metered_through`. A bucket is written when its end is at or
/// before `now`; a bucket without usage gets no record; a bucket used for a
/// moment gets one even if its rounded quantity is 0.
///
/// Metering up to `now1` and then up to `now2` gives exactly the records of
/// one call up to `now2`.
///
/// ```
/// use grants_core::{cumulative_rounded_records, Segment, HOUR_MS};
///
/// // One instance running 20 minutes in each of three hours: 1/3 hour each.
/// let third = HOUR_MS / 3;
/// let segments: Vec<Segment> = (0..3)
///     .map(|h| Segment { from: h * HOUR_MS, to: h * HOUR_MS + third, weight: 1 })
///     .collect();
/// let records = cumulative_rounded_records(&segments, 0, 3 * HOUR_MS);
/// let quantities: Vec<String> = records.iter().map(|r| r.quantity()).collect();
/// // 0.333333, then 0.666667 - 0.333333, then 1.000000 - 0.666667.
/// assert_eq!(quantities, ["0.333333", "0.333334", "0.333333"]);
/// ```
pub fn cumulative_rounded_records(
    segments: &[Segment],
    metered_through: i64,
    now: i64,
) -> Vec<Record> {
    // Buckets starting in `[first, ended)` are unmetered and over by `now`.
    let first = bucket_start(metered_through);
    let ended = bucket_start(now);
    let window = Term::new(first, ended);
    if window.is_empty() {
        return Vec::new();
    }

    let mut cumulative: i128 = 0; // exact weighted ms before `first`
    let mut per_bucket: BTreeMap<i64, i128> = BTreeMap::new();
    for segment in segments.iter().filter(|s| s.weight > 0) {
        let weight = i128::from(segment.weight);
        let before_window = Term::new(segment.from, segment.to.min(first));
        if !before_window.is_empty() {
            cumulative += weight * (i128::from(before_window.end) - i128::from(segment.from));
        }
        if let Some(inside) = Term::new(segment.from, segment.to).intersection(&window) {
            for (bucket, ms) in hour_buckets(inside.start, inside.end) {
                *per_bucket.entry(bucket).or_default() += weight * i128::from(ms);
            }
        }
    }

    per_bucket
        .into_iter()
        .map(|(period_start, used)| {
            let quantity = round_to_micros(cumulative + used) - round_to_micros(cumulative);
            cumulative += used;
            let period_end = period_start + HOUR_MS;
            Record {
                period_start,
                period_end,
                quantity_micro: i64::try_from(quantity).unwrap_or(i64::MAX),
                metered_through: period_end,
            }
        })
        .collect()
}

/// The `vm.grant.slot.hours` records of a grant of `slots` slots with term
/// `[starts_at, ends_at)`: every committed slot, used or not, for every hour
/// bucket that has ended by `now` and is not metered yet, never beyond
/// `ends_at`.
///
/// `metered_through` is the grant's `meteredThrough` (it starts at
/// `starts_at`); each record carries the next one, which never passes
/// `ends_at`. Once it reaches `ends_at` the grant is fully metered and this
/// returns nothing.
///
/// ```
/// use grants_core::{grant_slot_records, HOUR_MS};
///
/// // 3 slots from 00:30 to 02:00, metered at 01:10: only 00:00-01:00 has ended.
/// let records = grant_slot_records(3, HOUR_MS / 2, 2 * HOUR_MS, HOUR_MS / 2, HOUR_MS + 600_000);
/// assert_eq!(records.len(), 1);
/// assert_eq!(records[0].quantity(), "1.500000");
/// assert_eq!((records[0].period_start, records[0].period_end), (0, HOUR_MS));
/// assert_eq!(records[0].metered_through, HOUR_MS);
/// ```
pub fn grant_slot_records(
    slots: u32,
    starts_at: i64,
    ends_at: i64,
    metered_through: i64,
    now: i64,
) -> Vec<Record> {
    if metered_through >= ends_at {
        return Vec::new();
    }
    let term = Segment {
        from: starts_at,
        to: ends_at,
        weight: slots,
    };
    cumulative_rounded_records(&[term], metered_through, now)
        .into_iter()
        .map(|record| Record {
            metered_through: record.metered_through.min(ends_at),
            ..record
        })
        .collect()
}

/// A quantity in micros as a decimal string with exactly 6 decimals.
///
/// ```
/// use grants_core::format_micros;
///
/// assert_eq!(format_micros(1_500_000), "1.500000");
/// assert_eq!(format_micros(7), "0.000007");
/// assert_eq!(format_micros(-250_000), "-0.250000");
/// ```
pub fn format_micros(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let abs = micros.unsigned_abs();
    let unit = MICROS_PER_UNIT.unsigned_abs();
    format!("{sign}{}.{:06}", abs / unit, abs % unit)
}

/// Weighted milliseconds to micro-hours, rounded half-up:
/// `ms * 1_000_000 / 3_600_000 = ms * 5 / 18`.
pub(crate) fn round_to_micros(weighted_ms: i128) -> i128 {
    (weighted_ms * 5 + 9).div_euclid(18)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_half_up() {
        assert_eq!(round_to_micros(0), 0);
        assert_eq!(round_to_micros(1), 0); // 0.28 micro
        assert_eq!(round_to_micros(2), 1); // 0.56 micro
        assert_eq!(round_to_micros(9), 3); // 2.5 micros
        assert_eq!(round_to_micros(i128::from(HOUR_MS)), 1_000_000);
    }

    #[test]
    fn buckets_split_at_utc_hours() {
        assert_eq!(hour_buckets(5, 5).count(), 0);
        assert_eq!(hour_buckets(5, 4).count(), 0);
        assert_eq!(
            hour_buckets(HOUR_MS, 2 * HOUR_MS).collect::<Vec<_>>(),
            [(HOUR_MS, HOUR_MS)]
        );
        assert_eq!(
            hour_buckets(-1, 1).collect::<Vec<_>>(),
            [(-HOUR_MS, 1), (0, 1)]
        );
    }

    #[test]
    fn a_bucket_is_written_only_once_it_has_ended() {
        let h = HOUR_MS;
        assert!(grant_slot_records(1, 0, 10 * h, 0, h - 1).is_empty());
        assert_eq!(grant_slot_records(1, 0, 10 * h, 0, h).len(), 1);
        // The last, partial bucket waits for its hour to end, not for endsAt.
        let records = grant_slot_records(1, 0, h + h / 4, h, 2 * h - 1);
        assert!(records.is_empty());
        let records = grant_slot_records(1, 0, h + h / 4, h, 2 * h);
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].quantity(), "0.250000");
        assert_eq!(records[0].period_end, 2 * h);
        assert_eq!(records[0].metered_through, h + h / 4);
    }

    #[test]
    fn a_fully_metered_grant_writes_nothing_more() {
        let h = HOUR_MS;
        assert!(grant_slot_records(4, 0, h / 2, h / 2, 100 * h).is_empty());
        assert!(grant_slot_records(4, 7, 7, 7, 100 * h).is_empty());
    }

    #[test]
    fn every_slot_is_billed_per_hour() {
        let h = HOUR_MS;
        let records = grant_slot_records(2, 0, 3 * h, 0, 5 * h);
        let quantities: Vec<String> = records.iter().map(Record::quantity).collect();
        assert_eq!(quantities, ["2.000000", "2.000000", "2.000000"]);
        assert_eq!(records[2].metered_through, 3 * h);
    }

    #[test]
    fn rounding_error_never_accumulates() {
        // 1 slot for 1 ms in each of 3 hours: each alone rounds to 0, but the
        // cumulative 3 ms rounds to 1 micro, written where it is reached.
        let h = HOUR_MS;
        let segments: Vec<Segment> = (0..3)
            .map(|i| Segment {
                from: i * h,
                to: i * h + 1,
                weight: 1,
            })
            .collect();
        let records = cumulative_rounded_records(&segments, 0, 3 * h);
        let quantities: Vec<i64> = records.iter().map(|r| r.quantity_micro).collect();
        assert_eq!(quantities, [0, 1, 0]);
    }

    #[test]
    fn idle_buckets_get_no_record() {
        let h = HOUR_MS;
        let segments = [
            Segment {
                from: 0,
                to: h / 2,
                weight: 1,
            },
            Segment {
                from: 3 * h,
                to: i64::MAX,
                weight: 1,
            },
        ];
        let records = cumulative_rounded_records(&segments, 0, 5 * h + 1);
        let starts: Vec<i64> = records.iter().map(|r| r.period_start).collect();
        assert_eq!(starts, [0, 3 * h, 4 * h]);
        // Resuming from the last record leaves the earlier history counted.
        let later = cumulative_rounded_records(&segments, 5 * h, 6 * h);
        assert_eq!(later.len(), 1);
        assert_eq!(later[0].quantity(), "1.000000");
    }

    #[test]
    fn formats_exactly_six_decimals() {
        assert_eq!(format_micros(0), "0.000000");
        assert_eq!(format_micros(1_000_000), "1.000000");
        assert_eq!(format_micros(123_456_789), "123.456789");
        assert_eq!(format_micros(i64::MIN), "-9223372036854.775808");
    }
}
