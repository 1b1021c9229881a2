//! A reservation timeline drawn as a text Gantt chart.
//!
//! [`render`] takes the `timeline` object of `reservations.timeline`
//! (contract 3.10) as JSON and draws, at most `width` columns wide: a title,
//! a time axis, one bar per grant, the committed and in-use slots per column
//! against the reservation's total, the events, and a legend. The output
//! depends on its arguments only (and, with `local`, on the machine's
//! offset), never on the current time or the terminal.

use serde_json::Value;

use crate::when::{format_duration, format_instant};

mod layout;
mod text;

use layout::{Grid, round_duration};
use text::{fit, pad, short_id, shorten, wrap};

/// A grant's term, or the part of it after an early end or a cancellation.
const FILLED: char = '█';
/// The part of a term not served: all of a cancelled grant's, and what
/// follows an early end.
const HOLLOW: char = '░';
/// A bar's edge inside the range.
const EDGE: char = '│';
/// Levels of a slots row, from a share of at most 1/8 of the total to all of it.
const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
/// A slots row's column above the total.
const ABOVE: char = '!';
/// A slots row's column at zero.
const ZERO: char = '·';
/// The row drawn for a timeline without grants.
const NO_GRANTS: &str = "(no grants)";
/// Fewest bar columns worth narrowing the labels for.
const MIN_COLUMNS: usize = 8;

/// Draws a reservation timeline (the `timeline` object of the API's
/// `reservations.timeline` answer) as text at most `width` columns wide.
///
/// Every line has at most `width` characters; missing or malformed fields
/// are drawn as unknown rather than refused, and no input panics. Times are
/// shown in UTC, or with `local` in the machine's offset.
///
/// ```
/// use serde_json::json;
///
/// let timeline = json!({
///     "reservationId": "res_1", "total": 4,
///     "from": 1_893_456_000_000i64, "to": 1_893_542_400_000i64,
///     "grants": [{
///         "grantId": "rgrant_01HZX9", "tenantId": "acme", "slots": 2,
///         "startsAt": 1_893_456_000_000i64, "endsAt": 1_893_499_200_000i64,
///         "state": "active",
///     }],
///     "committed": [{ "from": 1_893_456_000_000i64, "to": 1_893_499_200_000i64, "slots": 2 }],
///     "inUse": [], "events": [],
/// });
/// let text = bcctl::gantt::render(&timeline, 80, false);
/// assert!(text.lines().all(|l| l.chars().count() <= 80));
/// assert!(text.contains("rgrant_01HZX9 acme ×2 active"));
/// assert!(text.contains("01-01 12:00"));
/// ```
pub fn render(timeline: &Value, width: usize, local: bool) -> String {
    let chart = Chart::read(timeline);
    let mut out: Vec<String> = Vec::new();
    chart.title(width, local, &mut out);
    chart.body(width, local, &mut out);
    let mut text = String::new();
    for line in out {
        text.push_str(fit(&line, width).trim_end());
        text.push('\n');
    }
    text
}

/// What the chart draws, read leniently from the timeline.
struct Chart {
    id: String,
    total: Option<i64>,
    /// Whether the timeline gave its range (else it is the grants' terms).
    range_known: bool,
    from: i64,
    to: i64,
    grants: Vec<Bar>,
    committed: Vec<Step>,
    in_use: Vec<Step>,
    events: Vec<(i64, bool)>,
}

/// One grant's row.
struct Bar {
    label: Label,
    /// The term, `[start, end)`; `None` when unknown.
    term: Option<(i64, i64)>,
    /// Where the served part stops (a cancelled grant's start, an early end).
    served_until: Option<i64>,
}

/// What a grant's row is labelled with.
#[derive(Default)]
struct Label {
    /// The shortened grant id; `None` for another tenant's grant.
    id: Option<String>,
    /// The grantee; `None` for another tenant's grant.
    tenant: Option<String>,
    /// ` ×2 active`: the slots and the state.
    rest: String,
}

impl Label {
    fn full(&self) -> String {
        match (&self.id, &self.tenant) {
            (Some(id), Some(t)) => format!("{id} {}{}", shorten(t, 14), self.rest),
            (None, Some(t)) => format!("{}{}", shorten(t, 14), self.rest),
            (Some(id), None) => format!("{id}{}", self.rest),
            (None, None) => format!("(other tenant){}", self.rest),
        }
    }

    /// The label in at most `width` characters: in full, else without the
    /// grant id, else with the tenant cut, else cut at the end.
    fn fitted(&self, width: usize) -> String {
        let full = self.full();
        if full.chars().count() <= width {
            return full;
        }
        let Some(tenant) = &self.tenant else {
            return fit(&full, width);
        };
        let rest = self.rest.chars().count();
        if tenant.chars().count() + rest <= width {
            return format!("{tenant}{}", self.rest);
        }
        if width >= rest + 4 {
            return format!("{}{}", fit(tenant, width - rest), self.rest);
        }
        fit(&format!("{tenant}{}", self.rest), width)
    }
}

/// A constant number of slots over `[from, to)`.
struct Step {
    from: i64,
    to: i64,
    slots: i64,
}

/// An integer field, also from a float (truncated) or a huge unsigned one
/// (saturated).
fn int(v: &Value, key: &str) -> Option<i64> {
    let x = v.get(key)?;
    x.as_i64().or_else(|| x.as_f64().map(|f| f as i64))
}

fn text_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn array<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

impl Chart {
    fn read(t: &Value) -> Chart {
        let grants: Vec<Bar> = array(t, "grants").iter().map(Bar::read).collect();
        let terms = || grants.iter().filter_map(|g| g.term);
        let from = int(t, "from")
            .or_else(|| terms().map(|(s, _)| s).min())
            .unwrap_or(0);
        let to = int(t, "to")
            .or_else(|| terms().map(|(_, e)| e).max())
            .unwrap_or(from);
        let steps = |key: &str, slots: &dyn Fn(&Value) -> Option<i64>| -> Vec<Step> {
            array(t, key)
                .iter()
                .filter_map(|s| {
                    Some(Step {
                        from: int(s, "from")?,
                        to: int(s, "to")?,
                        slots: slots(s)?,
                    })
                })
                .collect()
        };
        let committed = steps("committed", &|s| int(s, "slots"));
        let in_use = steps(
            "inUse",
            &|s| match (int(s, "inGrants"), int(s, "ordinary")) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
            },
        );
        let events = array(t, "events")
            .iter()
            .filter_map(|e| {
                let kind = text_field(e, "type").unwrap_or("");
                let alarm = kind.ends_with("capacity-short") || kind == "reservation.gone";
                Some((int(e, "at")?, alarm))
            })
            .collect();
        Chart {
            id: text_field(t, "reservationId")
                .unwrap_or("(unknown reservation)")
                .to_owned(),
            total: int(t, "total"),
            range_known: int(t, "from").is_some() && int(t, "to").is_some(),
            from,
            to,
            grants,
            committed,
            in_use,
            events,
        }
    }

    /// The title: the reservation, its total, the range and a column's span,
    /// wrapped when it does not fit on one line.
    fn title(&self, width: usize, local: bool, out: &mut Vec<String>) {
        let total = match self.total {
            Some(1) => "1 slot".to_owned(),
            Some(n) => format!("{n} slots"),
            None => "total unknown".to_owned(),
        };
        let range = if self.range_known {
            format!(
                "{} → {}",
                format_instant(self.from, local),
                format_instant(self.to, local)
            )
        } else {
            "no range given".to_owned()
        };
        let mut items = vec![format!("reservation {}", self.id), total, range];
        let columns = self.columns(width);
        let span = i128::from(self.to) - i128::from(self.from);
        if columns > 0 && span > 0 {
            let n = columns as i128;
            let per = i64::try_from(span / n).unwrap_or(i64::MAX);
            items.push(if span % n == 0 {
                format!("{} per column", format_duration(per))
            } else {
                format!("≈{} per column", format_duration(round_duration(per)))
            });
        }
        out.extend(wrap(&items, " · ", width));
    }

    fn body(&self, width: usize, local: bool, out: &mut Vec<String>) {
        let (label_w, n) = self.layout(width);
        let span = i128::from(self.to) - i128::from(self.from);
        if span <= 0 || n == 0 {
            out.push(
                if span <= 0 {
                    "(empty range)"
                } else {
                    "(too narrow to draw)"
                }
                .into(),
            );
            for g in &self.grants {
                out.push(g.label.full());
            }
            return;
        }
        let grid = Grid {
            from: i128::from(self.from),
            span,
            n,
        };
        let row = |label: &str, left: char, cells: &str, right: char| {
            format!("{} {left}{cells}{right}", pad(label, label_w))
        };
        let (labels, ruler) = self.axis(&grid, local);
        out.push(format!("{}  {labels}", pad("", label_w)));
        out.push(row("", '├', &ruler, '┤'));
        if self.grants.is_empty() {
            out.push(row(NO_GRANTS, EDGE, &" ".repeat(n), EDGE));
        }
        for g in &self.grants {
            let (left, cells, right) = g.cells(&grid);
            out.push(row(&g.label.fitted(label_w), left, &cells, right));
        }
        let total = self.total;
        out.push(row(
            "committed",
            EDGE,
            &slots_cells(&grid, &self.committed, total),
            EDGE,
        ));
        out.push(row(
            "in use",
            EDGE,
            &slots_cells(&grid, &self.in_use, total),
            EDGE,
        ));
        if !self.events.is_empty() {
            let mut cells = vec![' '; n];
            for &(at, alarm) in &self.events {
                if let Some(c) = grid.column_of(i128::from(at))
                    && let Some(cell) = cells.get_mut(c)
                    && (alarm || *cell == ' ')
                {
                    *cell = if alarm { ABOVE } else { '•' };
                }
            }
            out.push(row("events", EDGE, &cells.iter().collect::<String>(), EDGE));
        }
        self.peaks(width, out);
        self.legend(width, out);
    }

    /// The peaks of the committed and in-use rows, against the total.
    fn peaks(&self, width: usize, out: &mut Vec<String>) {
        let peak = |steps: &[Step]| {
            steps
                .iter()
                .filter(|s| s.from < self.to && s.to > self.from)
                .map(|s| s.slots)
                .max()
        };
        let of_total = |p: i64| match self.total {
            Some(t) if p > t => format!("{p} of {t}, above the total"),
            Some(t) => format!("{p} of {t}"),
            None => p.to_string(),
        };
        let mut items = Vec::new();
        if let Some(p) = peak(&self.committed) {
            items.push(format!("peak committed {}", of_total(p)));
        }
        if let Some(p) = peak(&self.in_use) {
            items.push(format!("peak in use {}", of_total(p)));
        }
        out.extend(wrap(&items, " · ", width));
    }

    fn legend(&self, width: usize, out: &mut Vec<String>) {
        let share = match self.total {
            Some(t) => format!("▁…█ share of {t} slots"),
            None => "▁…█ share of the peak".to_owned(),
        };
        let items = [
            format!("{FILLED} term"),
            format!("{HOLLOW} cancelled or ended early"),
            "< > beyond the range".to_owned(),
            share,
            format!("{ZERO} none"),
            format!("{ABOVE} above total, capacity short"),
            "• event".to_owned(),
        ];
        out.extend(wrap(&items, "  ", width));
    }
}

impl Bar {
    fn read(g: &Value) -> Bar {
        let slots = int(g, "slots").map_or_else(|| "?".to_owned(), |s| s.to_string());
        let state = text_field(g, "state")
            .map(|s| format!(" {s}"))
            .unwrap_or_default();
        let id = text_field(g, "grantId").map(short_id);
        let tenant = text_field(g, "tenantId").map(str::to_owned);
        let label = match (&id, &tenant) {
            (None, None) => Label {
                id,
                tenant,
                rest: format!(" ×{slots}"),
            },
            (Some(_), None) => Label {
                id,
                tenant: Some("?".to_owned()),
                rest: format!(" ×{slots}{state}"),
            },
            _ => Label {
                id,
                tenant,
                rest: format!(" ×{slots}{state}"),
            },
        };
        let term = int(g, "startsAt").zip(int(g, "endsAt"));
        let served_until = match (text_field(g, "state"), term) {
            (Some("cancelled"), Some((s, _))) => Some(s),
            (Some("ended"), Some((s, _))) => int(g, "endedAt").map(|at| at.max(s)),
            _ => None,
        };
        Bar {
            label,
            term,
            served_until,
        }
    }

    /// The left edge, the cells and the right edge of the bar.
    fn cells(&self, grid: &Grid) -> (char, String, char) {
        let Some((s, e)) = self.term else {
            return (EDGE, " ".repeat(grid.n), EDGE);
        };
        let (s, e) = (i128::from(s), i128::from(e));
        let served = self.served_until.map_or(e, |u| i128::from(u).max(s).min(e));
        let cells = (0..grid.n)
            .map(|c| {
                let (c0, c1) = grid.bounds(c);
                if s < served && s < c1 && served > c0 {
                    FILLED
                } else if served < e && served < c1 && e > c0 {
                    HOLLOW
                } else {
                    ' '
                }
            })
            .collect();
        let left = if s < grid.from && e > s { '<' } else { EDGE };
        let right = if e > grid.from + grid.span && e > s {
            '>'
        } else {
            EDGE
        };
        (left, cells, right)
    }
}

/// share of `total` (or of the row's peak when the total is unknown).
fn slots_cells(grid: &Grid, steps: &[Step], total: Option<i64>) -> String {
    let peak = steps.iter().map(|s| s.slots).max().unwrap_or(0);
    let scale = i128::from(total.unwrap_or(peak));
    (0..grid.n)
        .map(|c| {
            let (c0, c1) = grid.bounds(c);
            let most = steps
                .iter()
                .filter(|s| i128::from(s.from) < c1 && i128::from(s.to) > c0 && s.to > s.from)
                .map(|s| i128::from(s.slots))
                .max();
            match most {
                None => ' ',
                Some(v) if v <= 0 => ZERO,
                Some(v) if v > scale => ABOVE,
                #[expect(
                    clippy::indexing_slicing,
                    reason = "the level is clamped to 1..=8 and there are eight levels"
                )]
                Some(v) => {
                    let level = (v * 8 + scale - 1) / scale;
                    LEVELS[usize::try_from(level.clamp(1, 8) - 1).unwrap_or(7)]
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
