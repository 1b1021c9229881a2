//! The tables: a row per run, a row per ratio against its ceiling with its
//! target, and the per-run figures the notes refer to.

mod lines;
mod ratios;

use std::fmt::Write as _;

use super::{Report, met, ms};
use crate::load::Outcome;
use crate::metering::Metering;

/// A table row.
struct Line {
    fig: &'static str,
    what: String,
    run: String,
    ops: String,
    secs: String,
    rate: String,
    p50: String,
    p99: String,
}

impl Line {
    fn load(fig: &'static str, what: &str, run: &str, o: &Outcome) -> Line {
        Line {
            fig,
            what: what.to_owned(),
            run: run.to_owned(),
            ops: o.ops.to_string(),
            secs: format!("{:.2}", o.elapsed.as_secs_f64()),
            rate: format!("{:.0}", o.throughput()),
            p50: ms(o.p50()),
            p99: ms(o.p99()),
        }
    }
}

/// A ratio row.
struct Ratio {
    fig: &'static str,
    what: String,
    api: String,
    ceiling: String,
    ratio: String,
    target: String,
    ok: bool,
}

impl Report {
    /// Worker figure: (records, seconds of pass time, label).
    fn meter_api(m: &Metering) -> (i64, f64, String) {
        match &m.catch_up {
            Some((h, runs, written)) => (
                *written,
                runs.iter().map(|r| r.pass.as_secs_f64()).sum(),
                format!(
                    "worker, {} runs of {h} ended hours (all-at-once failed)",
                    runs.len()
                ),
            ),
            None => (
                m.records_written,
                m.worker.pass.as_secs_f64(),
                "reconciler-worker --once --only vps.grants (pass time)".into(),
            ),
        }
    }

    pub(super) fn tables(&self) -> String {
        let mut s = String::new();
        s.push_str("| # | figure | run | ops | s | per s | p50 ms | p99 ms |\n");
        s.push_str("|---|---|---|---:|---:|---:|---:|---:|\n");
        for l in self.lines() {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                l.fig, l.what, l.run, l.ops, l.secs, l.rate, l.p50, l.p99
            );
        }
        s.push('\n');
        s.push_str("| # | ratio | API | ceiling | ratio | target | met |\n");
        s.push_str("|---|---|---:|---:|---:|---|---|\n");
        for r in self.ratios() {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} |",
                r.fig,
                r.what,
                r.api,
                r.ceiling,
                r.ratio,
                r.target,
                met(r.ok)
            );
        }
        let derived = self.derived();
        if !derived.is_empty() {
            s.push('\n');
            s.push_str("| # | per-run figure | value |\n");
            s.push_str("|---|---|---:|\n");
            for (fig, what, value) in derived {
                let _ = writeln!(s, "| {fig} | {what} | {value} |");
            }
        }
        s
    }
}
