//! Where the chart's parts go: the label column's width, the bar columns
//! over the range ([`Grid`]) and the time axis's ticks.

use chrono::{DateTime, Local, Offset, Utc};

use super::{Chart, MIN_COLUMNS, NO_GRANTS};

impl Chart {
    /// The label column's width and the number of bar columns.
    pub(super) fn layout(&self, width: usize) -> (usize, usize) {
        let longest = self
            .grants
            .iter()
            .map(|g| g.label.full().chars().count())
            .chain([
                9,
                if self.grants.is_empty() {
                    NO_GRANTS.len()
                } else {
                    0
                },
            ])
            .max()
            .unwrap_or(0);
        // At most two fifths of the width (but room for `committed`), and
        // room for a few bar columns.
        let label = longest
            .min((width * 2 / 5).max(9))
            .min(width.saturating_sub(3 + MIN_COLUMNS.min(width)));
        (label, width.saturating_sub(label + 3))
    }

    pub(super) fn columns(&self, width: usize) -> usize {
        self.layout(width).1
    }

    /// The tick labels and the ruler under them, `grid.n + 1` and `grid.n`
    /// characters: ticks at round times (in UTC or local) spaced so that no
    /// two labels touch.
    pub(super) fn axis(&self, grid: &Grid, local: bool) -> (String, String) {
        let mut labels = vec![' '; grid.n + 1];
        let mut ruler = vec!['─'; grid.n];
        let offset = if local { local_offset_ms(self.from) } else { 0 };
        let Some((interval, format)) = tick_interval(grid) else {
            return (labels.into_iter().collect(), ruler.into_iter().collect());
        };
        let first = div_ceil(grid.from + offset, interval) * interval - offset;
        let mut free_from = 0;
        let mut t = first;
        while t < grid.from + grid.span {
            let Some(c) = grid.column_of(t) else { break };
            if let Some(tick) = ruler.get_mut(c) {
                *tick = '┬';
            }
            let text = i64::try_from(t)
                .ok()
                .and_then(|t| tick_label(t, format, local));
            if let Some(text) = text {
                let len = text.chars().count();
                if c >= free_from && c + len <= labels.len() {
                    for (label, ch) in labels.iter_mut().skip(c).zip(text.chars()) {
                        *label = ch;
                    }
                    free_from = c + len + 1;
                }
            }
            t += interval;
        }
        (labels.into_iter().collect(), ruler.into_iter().collect())
    }
}

/// The bar columns over `[from, from + span)`, `span > 0`, `n > 0`.
pub(super) struct Grid {
    pub(super) from: i128,
    pub(super) span: i128,
    pub(super) n: usize,
}

impl Grid {
    /// Column `c`'s part of the range, `[c0, c1)`, at least 1ms long.
    pub(super) fn bounds(&self, c: usize) -> (i128, i128) {
        let n = self.n as i128;
        let c0 = self.from + self.span * c as i128 / n;
        let c1 = self.from + self.span * (c as i128 + 1) / n;
        (c0, c1.max(c0 + 1))
    }

    /// The column holding instant `t`, if it is in the range.
    pub(super) fn column_of(&self, t: i128) -> Option<usize> {
        if t < self.from || t >= self.from + self.span {
            return None;
        }
        usize::try_from((t - self.from) * self.n as i128 / self.span).ok()
    }
}

/// Tick spacings and their label formats, shortest first.
const TICKS: [(i64, &str); 20] = [
    (1_000, "%H:%M:%S"),
    (5_000, "%H:%M:%S"),
    (15_000, "%H:%M:%S"),
    (30_000, "%H:%M:%S"),
    (60_000, "%m-%d %H:%M"),
    (300_000, "%m-%d %H:%M"),
    (900_000, "%m-%d %H:%M"),
    (1_800_000, "%m-%d %H:%M"),
    (3_600_000, "%m-%d %H:%M"),
    (7_200_000, "%m-%d %H:%M"),
    (10_800_000, "%m-%d %H:%M"),
    (21_600_000, "%m-%d %H:%M"),
    (43_200_000, "%m-%d %H:%M"),
    (86_400_000, "%m-%d"),
    (172_800_000, "%m-%d"),
    (604_800_000, "%m-%d"),
    (1_209_600_000, "%m-%d"),
    (2_592_000_000, "%Y-%m-%d"),
    (7_776_000_000, "%Y-%m-%d"),
    (31_536_000_000, "%Y-%m-%d"),
];

/// The shortest tick spacing whose labels (and a space) fit between ticks;
/// past a year, whole numbers of years.
fn tick_interval(grid: &Grid) -> Option<(i128, &'static str)> {
    let n = grid.n as i128;
    let fits = |interval: i128, format: &str| {
        // Each field is two characters as written, but a year is four.
        let len = format.len() + 2 * format.matches("%Y").count();
        interval * n >= (len as i128 + 1) * grid.span
    };
    if let Some(&(i, f)) = TICKS.iter().find(|(i, f)| fits(i128::from(*i), f)) {
        return Some((i128::from(i), f));
    }
    let [.., (longest, _)] = TICKS;
    let mut interval = i128::from(longest);
    for _ in 0..80 {
        interval *= 2;
        if fits(interval, "%Y-%m-%d") {
            return Some((interval, "%Y-%m-%d"));
        }
    }
    None
}

fn tick_label(t: i64, format: &str, local: bool) -> Option<String> {
    let utc = DateTime::<Utc>::from_timestamp_millis(t)?;
    Some(if local {
        utc.with_timezone(&Local).format(format).to_string()
    } else {
        utc.format(format).to_string()
    })
}

/// The machine's offset from UTC at `t`, in ms (0 when `t` is out of range).
fn local_offset_ms(t: i64) -> i128 {
    DateTime::<Utc>::from_timestamp_millis(t).map_or(0, |at| {
        i128::from(at.with_timezone(&Local).offset().fix().local_minus_utc()) * 1000
    })
}

fn div_ceil(a: i128, b: i128) -> i128 {
    let q = a.div_euclid(b);
    if a.rem_euclid(b) == 0 { q } else { q + 1 }
}

/// A duration rounded to its second-largest unit (`37m53s684ms` → `37m54s`),
/// for an approximate column span.
pub(super) fn round_duration(ms: i64) -> i64 {
    const SIZES: [i64; 5] = [86_400_000, 3_600_000, 60_000, 1000, 1];
    let Some(i) = SIZES.iter().position(|&s| ms >= s) else {
        return ms;
    };
    let Some(&unit) = SIZES.get(i + 1) else {
        return ms;
    };
    let rounded = (i128::from(ms) + i128::from(unit) / 2) / i128::from(unit) * i128::from(unit);
    i64::try_from(rounded).unwrap_or(ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn column_spans_are_rounded() {
        assert_eq!(round_duration(2_273_684), 2_274_000);
        assert_eq!(round_duration(90_061_000), 90_000_000);
        assert_eq!(round_duration(999), 999);
    }
}
