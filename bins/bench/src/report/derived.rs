//! The per-run figures the hand-written notes refer to: each write run's
//! throughput in its first and last quarter, each timed run's CPU, and the
//! reads' derived ratios and costs.

use std::time::Duration;

use super::{Report, quarters, ratio, thousands};
use crate::history;
use crate::load::Outcome;

impl Report {
    /// The per-run figures the hand-written notes refer to: (figure, what,
    /// value).
    pub(super) fn derived(&self) -> Vec<(&'static str, String, String)> {
        let mut out = Vec::new();
        let first_last = "throughput in the first and in the last quarter of its run";
        let mut write = |fig, run: &str, o: &Outcome| {
            out.push((fig, format!("{run}: {first_last}"), quarters(o)));
        };
        if let Some(g) = &self.grants {
            write("1", "HTTP API", &g.api);
            write("1", "storage call", &g.storage);
            write("1", "direct SQL (ceiling)", &g.sql);
        }
        if let Some(h) = &self.grants_history {
            let run = format!("HTTP API, {} earlier grants", thousands(history::GRANTS));
            write("1h", &run, h);
        }
        if let Some(g) = &self.instances {
            write("2", "HTTP API", &g.api);
            write("2", "storage call", &g.storage);
            write("2", "direct SQL (ceiling)", &g.sql);
        }
        if let Some((without, with)) = &self.instances_history {
            write("2h", "HTTP API, no deleted instances", without);
            let run = format!(
                "HTTP API, {} deleted instances per reservation",
                thousands(history::INSTANCES)
            );
            write("2h", &run, with);
        }
        if let Some(b) = &self.burst {
            write("2b", "HTTP API, burst", &b.api);
        }
        // The CPU of each write run, and of the reads' API runs: a run on
        // two cores that left CPU idle was held back by a lock or a wait.
        let cpu_of = "CPU while it ran (busy cores of the machine: each part's share) and \
                      per operation";
        let mut cpu = |fig, run: &str, o: &Outcome| {
            out.push((
                fig,
                format!("{run}: {cpu_of}"),
                format!("{}; {:.2} ms", o.cpu.summary(), o.cpu.ms_per_op(o.ops)),
            ));
        };
        if let Some(g) = &self.grants {
            cpu("1", "HTTP API", &g.api);
            cpu("1", "direct SQL (ceiling)", &g.sql);
        }
        if let Some(g) = &self.instances {
            cpu("2", "HTTP API", &g.api);
            cpu("2", "direct SQL (ceiling)", &g.sql);
        }
        if let Some(b) = &self.burst {
            cpu(
                "2b",
                "HTTP API, burst (with the worker and fake GCE)",
                &b.api,
            );
        }
        if let Some(f) = &self.get {
            cpu("3", "get: HTTP API", &f.api);
        }
        if let Some(f) = &self.list {
            cpu("3", "list: HTTP API", &f.api);
        }
        if let Some(b) = &self.pgbench
            && let Some(c) = &b.cpu
        {
            let per = c.ms_per_op(b.transactions);
            out.push((
                "1",
                format!("pgbench row lock + insert (ceiling): {cpu_of}"),
                format!("{}; {per:.2} ms", c.summary()),
            ));
        }
        let bound = "at best the trivial handler's work plus the query alone, \
                     1 / (1/trivial + 1/query),";
        if let Some(f) = &self.get {
            let (q, t) = (f.sql_query.throughput(), f.trivial.throughput());
            out.push((
                "3",
                "get: HTTP API / direct SQL (authenticate + clock + query)".into(),
                ratio(f.api.throughput(), f.sql_full.throughput()),
            ));
            out.push((
                "3",
                "get: direct SQL, the query alone / trivial hyper".into(),
                ratio(q, t),
            ));
            out.push((
                "3",
                format!("get: {bound} / trivial hyper"),
                ratio(q, q + t),
            ));
        }
        if let Some(f) = &self.list {
            let (q, t) = (f.sql_query.throughput(), f.trivial.throughput());
            out.push((
                "3",
                "list: direct SQL, the query alone / trivial hyper".into(),
                ratio(q, t),
            ));
            out.push((
                "3",
                format!("list: {bound} / trivial hyper"),
                ratio(q, q + t),
            ));
        }
        if let Some(c) = &self.list_cost {
            let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
            out.push((
                "3",
                format!(
                    "one list answer ({} items, {} KiB), one request at a time: \
                     `storage::ops::grants::list` (SQL, row decoding, `Grant::at`)",
                    self.list_items,
                    c.bytes / 1024
                ),
                ms(c.storage),
            ));
            out.push((
                "3",
                "the same answer's JSON built through a `serde_json::Value` tree".into(),
                ms(c.via_value),
            ));
            out.push((
                "3",
                "the same answer's typed grants written straight to bytes (as the views are)"
                    .into(),
                ms(c.direct),
            ));
        }
        out
    }
}
