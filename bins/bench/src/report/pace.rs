//! Figure 7's section: a burst against a provider like the real one, with
//! its targets (issue: makespan within 1.25 times the provider's bound, the
//! second tenant's p99 within the slowest operation plus 5 s, nothing
//! failed, rate refusals at most 1% of the mutating calls).

use std::fmt::Write;

use super::{Report, met};
use crate::pace;

impl Report {
    /// Figure 7's table, or nothing when it did not run.
    pub(super) fn pace_section(&self) -> String {
        let Some(f) = &self.pace else {
            return String::new();
        };
        let mut s = String::new();
        let _ = writeln!(
            s,
            "### Figure 7: a burst against a provider like the real one\n\n\
             {} managed creates of one tenant ({} clients), then {} of a second tenant, \
             against fake-gce with operations of {} to {} s (drawn per operation) and {} \
             mutating calls a minute per project; the worker with its defaults \
             (`BC_VM_CONCURRENCY` 256, `BC_VM_WRITES_PER_MIN` 1200). The first tenant's \
             creates took {:.1} s over HTTP.\n",
            pace::FIRST,
            self.clients,
            pace::SECOND,
            pace::LATENCY_MS.0 / 1000,
            pace::LATENCY_MS.1 / 1000,
            pace::WRITES_PER_MIN,
            f.api.elapsed.as_secs_f64(),
        );
        s.push_str("| measure | value | target | met |\n|---|---|---|---|\n");
        let secs = |d: std::time::Duration| format!("{:.1} s", d.as_secs_f64());
        let slowest = std::time::Duration::from_millis(pace::LATENCY_MS.1);
        let ratio = f.makespan.as_secs_f64() / f.bound.as_secs_f64().max(1e-9);
        let _ = writeln!(
            s,
            "| makespan (first answer to last `RUNNING`) / provider's bound ({}) | {} / {} = \
             {ratio:.2} | ≤ 1.25 | {} |",
            secs(f.bound),
            secs(f.makespan),
            secs(f.bound),
            met(ratio <= 1.25)
        );
        let p99 = f.second_quantile(0.99);
        let _ = writeln!(
            s,
            "| second tenant, API answer to `RUNNING`, p50 / p99 | {} / {} | p99 ≤ {} | {} |",
            secs(f.second_quantile(0.5)),
            secs(p99),
            secs(slowest + std::time::Duration::from_secs(5)),
            met(p99 <= slowest + std::time::Duration::from_secs(5))
        );
        let _ = writeln!(
            s,
            "| first tenant, API answer to `RUNNING`, p50 / p99 | {} / {} | – | – |",
            secs(f.first_quantile(0.5)),
            secs(f.first_quantile(0.99))
        );
        let _ = writeln!(
            s,
            "| instances failed / never settled | {} / {} | 0 | {} |",
            f.failed,
            f.unsettled,
            met(f.failed == 0 && f.unsettled == 0)
        );
        let share = f.rate_refusals as f64 / (f.mutating_calls.max(1) as f64);
        let _ = writeln!(
            s,
            "| rate refusals / mutating calls | {} / {} = {:.2}% | ≤ 1% | {} |",
            f.rate_refusals,
            f.mutating_calls,
            share * 100.0,
            met(share <= 0.01)
        );
        let _ = writeln!(
            s,
            "| peak operations in flight at the provider; concurrent-operations refusals | \
             {}; {} | – | – |",
            f.peak_in_flight, f.concurrent_refusals
        );
        let _ = writeln!(
            s,
            "| worker CPU over the run | {:.2} cores ({:.2} ms per instance) | – | – |",
            f.worker_cores(),
            f.worker_cores() * f.cpu.wall.as_secs_f64() * 1e3
                / ((pace::FIRST + pace::SECOND) as f64)
        );
        let _ = writeln!(
            s,
            "| database connections in use, at most (api-server and worker) | {} | – | – |\n",
            f.peak_connections
        );
        s
    }
}
