//! The tables (terminal and `docs/benchmarks.md`). The program writes only
//! the part of `docs/benchmarks.md` between [`BEGIN`] and [`END`]: the
//! machine, the command, the results and the per-run figures the
//! hand-written text around them refers to.

use std::fmt::Write as _;
use std::time::Duration;

use crate::load::Outcome;
use crate::metering::Metering;
use crate::pgbench::Pgbench;
use crate::reads::ListCost;

mod derived;
mod pace;
mod tables;

/// The line before the generated part of `docs/benchmarks.md`.
pub const BEGIN: &str = "<!-- generated: begin -->";
/// The line after it.
pub const END: &str = "<!-- generated: end -->";

/// `doc` with the part between [`BEGIN`] and [`END`] replaced by
/// `generated`; everything outside the markers is kept byte for byte.
pub fn splice(doc: &str, generated: &str) -> anyhow::Result<String> {
    splice_between(doc, BEGIN, END, generated)
}

/// `doc` with the part between the lines `begin` and `end` replaced by
/// `generated`; everything outside them is kept byte for byte.
pub fn splice_between(
    doc: &str,
    begin: &str,
    end: &str,
    generated: &str,
) -> anyhow::Result<String> {
    let (begin_marker, end_marker) = (begin, end);
    let once = |marker: &str| -> anyhow::Result<usize> {
        let mut at = doc.match_indices(marker).map(|(i, _)| i);
        match (at.next(), at.next()) {
            (Some(i), None) => Ok(i),
            (None, _) => anyhow::bail!("no {marker} line"),
            (Some(_), Some(_)) => anyhow::bail!("more than one {marker} line"),
        }
    };
    let begin = once(begin_marker)? + begin_marker.len();
    let end = once(end_marker)?;
    anyhow::ensure!(begin <= end, "{end_marker} comes before {begin_marker}");
    Ok(format!(
        "{}\n\n{}\n\n{}",
        &doc[..begin],
        generated.trim(),
        &doc[end..]
    ))
}

/// A new `docs/benchmarks.md`: a title and the markers.
pub fn skeleton() -> String {
    format!("# Benchmarks\n\n{BEGIN}\n{END}\n")
}

/// The machine and database the run measured.
#[derive(Debug, Clone)]
pub struct Machine {
    /// Logical CPUs.
    pub nproc: usize,
    /// `model name` of /proc/cpuinfo.
    pub cpu: String,
    /// MemTotal.
    pub mem_gib: f64,
    /// Kernel release.
    pub kernel: String,
    /// `SELECT version()`.
    pub postgres: String,
    /// Durability and size settings of the server.
    pub pg_settings: String,
    /// /proc/loadavg at the start.
    pub loadavg_start: String,
    /// /proc/loadavg at the end.
    pub loadavg_end: String,
    /// The CPU others used before and during the run.
    pub others: crate::busy::Others,
}

/// A write figure: the API, the storage call, the SQL.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Over HTTP.
    pub api: Outcome,
    /// `storage::*::create` called directly.
    pub storage: Outcome,
    /// The replicated statements (the ceiling).
    pub sql: Outcome,
}

/// A read figure: the API, the trivial handler, the statements.
#[derive(Debug, Clone)]
pub struct ReadFigure {
    /// Over HTTP (manual clock).
    pub api: Outcome,
    /// Over HTTP on a second api-server with the system clock.
    pub api_system_clock: Option<Outcome>,
    /// The trivial hyper handler (the ceiling).
    pub trivial: Outcome,
    /// Authenticate, clock, query: what the API sends, run directly.
    pub sql_full: Outcome,
    /// The handler's query alone.
    pub sql_query: Outcome,
}

/// The api-server's memory during one figure.
#[derive(Debug, Clone)]
pub struct Rss {
    /// The figure (`1`, `1h`, ...).
    pub fig: &'static str,
    /// VmRSS right before it, once the peak was reset.
    pub before: Option<u64>,
    /// Whether the peak could be reset (`clear_refs` 5) before it.
    pub reset: bool,
    /// VmHWM right after it.
    pub peak: Option<u64>,
}

/// Everything one run measured.
#[derive(Debug)]
pub struct Report {
    /// Machine.
    pub machine: Machine,
    clients: usize,
    write_dur: Duration,
    read_dur: Duration,
    /// `RUST_LOG` of the api-server.
    pub log_filter: String,
    /// Figure 1.
    pub grants: Option<Measured>,
    /// Figure 1: pgbench's row lock + insert.
    pub pgbench: Option<Pgbench>,
    /// Figure 1h: the API on a reservation with earlier grants.
    pub grants_history: Option<Outcome>,
    /// Figure 2.
    pub instances: Option<Measured>,
    /// Figure 2h: the API on a smaller layout, without and with deleted
    /// instances on its reservations.
    pub instances_history: Option<(Outcome, Outcome)>,
    /// Figure 2b: the instance burst on one reservation.
    pub burst: Option<crate::burst::Burst>,
    /// Figure 7: two tenants' bursts against a provider at the real pace.
    pub pace: Option<crate::pace::Pace>,
    /// Figure 6: webhook delivery.
    pub webhooks: Option<crate::hooks::Deliveries>,
    /// Figure 6 again, beside a tenant whose webhooks never answer.
    pub webhooks_hostile: Option<crate::hooks::Deliveries>,
    /// Figure 3: get.
    pub get: Option<ReadFigure>,
    /// Figure 3: list.
    pub list: Option<ReadFigure>,
    /// Figure 3: one list answer's cost in the server.
    pub list_cost: Option<ListCost>,
    /// Size of a get answer.
    pub get_bytes: usize,
    /// Items of a list answer.
    pub list_items: usize,
    /// Size of a list answer.
    pub list_bytes: usize,
    /// Figure 4.
    pub metering: Option<Metering>,
    /// RSS once set up, before figure 1.
    pub rss_after_setup: Option<u64>,
    /// The api-server's peak during each figure it served.
    pub rss: Vec<Rss>,
}

const MIB: f64 = 1024.0 * 1024.0;

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

fn mib(b: Option<u64>) -> String {
    b.map_or_else(|| "n/a".into(), |b| format!("{:.1}", b as f64 / MIB))
}

/// `n` with a comma every three digits (10,000).
fn thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (k, ch) in digits.chars().enumerate() {
        if k > 0 && (digits.len() - k).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    if n < 0 { format!("-{out}") } else { out }
}

fn met(ok: bool) -> &'static str {
    if ok { "yes" } else { "**no**" }
}

fn ratio(a: f64, b: f64) -> String {
    format!("{:.2}", a / b.max(1e-9))
}

/// Throughput in the first and in the last quarter of a run.
fn quarters(o: &Outcome) -> String {
    format!(
        "{:.0}/s, {:.0}/s",
        o.rate_in(0.0, 0.25),
        o.rate_in(0.75, 1.0)
    )
}

impl Report {
    /// An empty report.
    pub fn new(
        machine: Machine,
        clients: usize,
        write_dur: Duration,
        read_dur: Duration,
        log_filter: &str,
    ) -> Report {
        Report {
            machine,
            clients,
            write_dur,
            read_dur,
            log_filter: log_filter.to_owned(),
            grants: None,
            pgbench: None,
            grants_history: None,
            instances: None,
            instances_history: None,
            burst: None,
            pace: None,
            webhooks: None,
            webhooks_hostile: None,
            get: None,
            list: None,
            list_cost: None,
            get_bytes: 0,
            list_items: 0,
            list_bytes: 0,
            metering: None,
            rss_after_setup: None,
            rss: Vec::new(),
        }
    }

    fn rss_line(&self) -> String {
        let mut s = format!(
            "api-server RSS: {} MiB once set up. Before each figure the api-server serves, its \
             peak (VmHWM) is reset to its RSS (`/proc/PID/clear_refs` 5) and read after it:",
            mib(self.rss_after_setup)
        );
        for (k, m) in self.rss.iter().enumerate() {
            let _ = write!(
                s,
                "{} figure {}: {} MiB before, peak {} MiB{}",
                if k == 0 { "" } else { ";" },
                m.fig,
                mib(m.before),
                mib(m.peak),
                if m.reset {
                    ""
                } else {
                    " (the reset was refused: the peak since the start)"
                }
            );
        }
        s.push_str(". Figure 4 runs the worker alone, without the api-server.\n");
        s
    }

    /// When `vps.grants` failed all at once: what the worker row is instead.
    fn metering_line(&self) -> String {
        match self
            .metering
            .as_ref()
            .and_then(|m| Some((m, m.catch_up.as_ref()?)))
        {
            Some((m, (hours, runs, _))) => format!(
                "**The all-at-once `vps.grants` pass failed** (`{}`): figure 4's worker row is \
                 the same work in {} runs of {hours} ended hours.\n",
                m.worker.line,
                runs.len()
            ),
            None => String::new(),
        }
    }

    /// What the terminal shows.
    pub fn terminal(&self) -> String {
        let mut s = String::new();
        s.push_str(&self.busy_line());
        let _ = writeln!(s, "\n{}", self.machine_line());
        s.push('\n');
        s.push_str(&self.tables());
        s.push('\n');
        s.push_str(&self.pace_section());
        s.push_str(&self.rss_line());
        s.push_str(&self.metering_line());
        s
    }

    /// A warning when others used the machine during the run (empty when
    /// it was quiet).
    fn busy_line(&self) -> String {
        let o = &self.machine.others;
        if !o.busy() {
            return String::new();
        }
        format!(
            "**The machine was busy: others used {:.2} cores before this run and {:.2} on \
             average during it (at most {:.2}); every figure is low, and only ratios measured \
             side by side mean anything. Rerun on a quiet machine.**\n\n",
            o.at_start, o.mean, o.max
        )
    }

    fn machine_line(&self) -> String {
        let m = &self.machine;
        format!(
            "{} × {}, {:.1} GiB, Linux {}; {}",
            m.nproc, m.cpu, m.mem_gib, m.kernel, m.postgres
        )
    }

    /// The generated part of `docs/benchmarks.md` (see [`splice`]).
    pub fn generated(&self) -> String {
        let m = &self.machine;
        let mut s = String::new();
        s.push_str(&self.busy_line());
        s.push_str("## Machine\n\n");
        let _ = writeln!(s, "- CPU: {} × {} (`nproc` = {})", m.nproc, m.cpu, m.nproc);
        let _ = writeln!(s, "- Memory: {:.1} GiB", m.mem_gib);
        let _ = writeln!(s, "- Kernel: Linux {}", m.kernel);
        let _ = writeln!(s, "- PostgreSQL: {}", m.postgres);
        let _ = writeln!(s, "- PostgreSQL settings: {}", m.pg_settings);
        let _ = writeln!(
            s,
            "- Load average (1, 5, 15 min) at start: {}; at end: {}",
            m.loadavg_start, m.loadavg_end
        );
        let _ = writeln!(
            s,
            "- CPU used by other processes (not the bench, its api-server, worker or \
             pgbench, nor PostgreSQL): {:.2} cores in the 2 s before the run; during it \
             {:.2} on average, {:.2} in the busiest second\n",
            m.others.at_start, m.others.mean, m.others.max
        );
        s.push_str("## Command\n\n");
        s.push_str(concat!(
            "```sh\njust bench\n",
            "# = cargo build --release --locked -p api-server -p reconciler-worker\n",
            "#   DATABASE_URL=\"$(scripts/db.sh url)\" cargo run --release --locked -p bench\n",
            "```\n\n",
        ));
        let _ = writeln!(
            s,
            "{} clients (connections) everywhere; writes: the API runs {} s, then the storage \
             call and the SQL run exactly as many operations; the history runs (1h, 2h) and \
             `pgbench` (`-n -j 2 -M prepared`) run as long as the API; reads: {} s each after a \
             1 s warm-up. api-server: release build, `BC_CLOCK=manual`, `BC_DB_POOL_SIZE=16`, \
             request rates off, `RUST_LOG={}` (logs to `target/bench/api-server.log`).\n",
            self.clients,
            self.write_dur.as_secs(),
            self.read_dur.as_secs(),
            self.log_filter
        );
        s.push_str("## Results\n\n");
        s.push_str(&self.tables());
        s.push('\n');
        s.push_str(&self.pace_section());
        s.push_str(&self.rss_line());
        let meter = self.metering_line();
        if !meter.is_empty() {
            s.push('\n');
            s.push_str(&meter);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "# Title\n\nhand-written before\n\n<!-- generated: begin -->\n\nold \
                       numbers\n\n<!-- generated: end -->\n\nhand-written after\n";

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(10_000), "10,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(-1000), "-1,000");
    }

    #[test]
    fn splice_replaces_only_the_generated_part() {
        let out = splice(DOC, "## Results\n\nnew numbers\n").expect("splice");
        assert_eq!(
            out,
            "# Title\n\nhand-written before\n\n<!-- generated: begin -->\n\n## Results\n\nnew \
             numbers\n\n<!-- generated: end -->\n\nhand-written after\n"
        );
        assert_eq!(
            splice(&out, "## Results\n\nnew numbers").expect("again"),
            out
        );
        assert_eq!(splice(&out, "old numbers").expect("back"), DOC);
    }

    #[test]
    fn splice_refuses_a_document_without_one_pair_of_markers() {
        assert!(splice("# Title\n", "x").is_err());
        assert!(splice(&format!("{BEGIN}\n"), "x").is_err());
        assert!(splice(&format!("{END}\n{BEGIN}\n"), "x").is_err());
        assert!(splice(&format!("{BEGIN}\n{BEGIN}\n{END}\n"), "x").is_err());
        assert!(splice(&skeleton(), "x").is_ok());
    }

    #[test]
    fn the_documentation_has_its_markers() {
        let path = crate::procs::workspace_root().join("docs/benchmarks.md");
        let doc = std::fs::read_to_string(&path).expect("docs/benchmarks.md");
        splice(&doc, "x").expect("docs/benchmarks.md has one pair of markers");
    }
}
