//! The tables (terminal and `docs/benchmarks.md`).

use std::fmt::Write as _;
use std::time::Duration;

use crate::load::Outcome;
use crate::metering::{self, Metering};
use crate::reads::ListCost;

mod notes;

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
    /// Figure 2.
    pub instances: Option<Measured>,
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
    /// VmHWM after figure 1 (peak since start).
    pub rss_fig1: Option<u64>,
    /// RSS right before figure 3 (after the peak reset).
    pub rss_before_fig3: Option<u64>,
    /// Whether the peak could be reset before figure 3.
    pub rss_reset: bool,
    /// VmHWM after figure 3.
    pub rss_fig3: Option<u64>,
}

const MIB: f64 = 1024.0 * 1024.0;
/// Target ratios and memory.
const TARGET_WRITE: f64 = 0.6;
const TARGET_READ: f64 = 0.5;
const TARGET_METER: f64 = 0.5;
const TARGET_RSS_MIB: f64 = 100.0;

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

fn mib(b: Option<u64>) -> String {
    b.map_or_else(|| "n/a".into(), |b| format!("{:.1}", b as f64 / MIB))
}

fn met(ok: bool) -> &'static str {
    if ok { "yes" } else { "**no**" }
}

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
            instances: None,
            get: None,
            list: None,
            list_cost: None,
            get_bytes: 0,
            list_items: 0,
            list_bytes: 0,
            metering: None,
            rss_after_setup: None,
            rss_fig1: None,
            rss_before_fig3: None,
            rss_reset: false,
            rss_fig3: None,
        }
    }

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

    fn lines(&self) -> Vec<Line> {
        let mut out = Vec::new();
        let c = self.clients;
        if let Some(g) = &self.grants {
            let what = "reservationGrants.create, 1 hot reservation";
            out.push(Line::load(
                "1",
                what,
                &format!("HTTP API, {c} clients"),
                &g.api,
            ));
            out.push(Line::load(
                "1",
                what,
                &format!("storage call, {c} conns"),
                &g.storage,
            ));
            out.push(Line::load(
                "1",
                what,
                &format!("direct SQL (ceiling), {c} conns"),
                &g.sql,
            ));
        }
        if let Some(g) = &self.instances {
            let what = "instances.create, 100 reservations with grants";
            out.push(Line::load(
                "2",
                what,
                &format!("HTTP API, {c} clients"),
                &g.api,
            ));
            out.push(Line::load(
                "2",
                what,
                &format!("storage call, {c} conns"),
                &g.storage,
            ));
            out.push(Line::load(
                "2",
                what,
                &format!("direct SQL (ceiling), {c} conns"),
                &g.sql,
            ));
        }
        for (fig, what) in [
            (
                &self.get,
                format!("reservationGrants.get ({} B)", self.get_bytes),
            ),
            (
                &self.list,
                format!(
                    "reservationGrants.list ({} items, {} KiB)",
                    self.list_items,
                    self.list_bytes / 1024
                ),
            ),
        ] {
            let Some(f) = fig else { continue };
            out.push(Line::load(
                "3",
                &what,
                &format!("HTTP API, {c} clients"),
                &f.api,
            ));
            if let Some(o) = &f.api_system_clock {
                out.push(Line::load(
                    "3",
                    &what,
                    "HTTP API, `BC_CLOCK=system` (informative)",
                    o,
                ));
            }
            out.push(Line::load(
                "3",
                &what,
                "trivial hyper, same bytes (ceiling)",
                &f.trivial,
            ));
            out.push(Line::load(
                "3",
                &what,
                &format!("direct SQL: authenticate + clock + query, {c} conns (informative)"),
                &f.sql_full,
            ));
            out.push(Line::load(
                "3",
                &what,
                &format!("direct SQL: the query alone, {c} conns (informative)"),
                &f.sql_query,
            ));
        }
        if let Some(m) = &self.metering {
            let what = format!(
                "vps.grants, {} grants × {} ended hours",
                metering::GRANTS,
                metering::HOURS
            );
            let (records, secs, label) = Self::meter_api(m);
            out.push(Line {
                fig: "4",
                what: what.clone(),
                run: label,
                ops: records.to_string(),
                secs: format!("{secs:.2}"),
                rate: format!("{:.0}", records as f64 / secs.max(1e-9)),
                p50: "–".into(),
                p99: "–".into(),
            });
            if m.catch_up.is_some() {
                out.push(Line {
                    fig: "4",
                    what: what.clone(),
                    run: format!("all at once: **failed** ({})", m.worker.line),
                    ops: m.records_written.to_string(),
                    secs: format!("{:.2}", m.worker.pass.as_secs_f64()),
                    rate: "–".into(),
                    p50: "–".into(),
                    p99: "–".into(),
                });
            } else {
                out.push(Line {
                    fig: "4",
                    what: what.clone(),
                    run: "same run, process wall time (start, connect, exit)".into(),
                    ops: m.records_written.to_string(),
                    secs: format!("{:.2}", m.worker.wall.as_secs_f64()),
                    rate: format!(
                        "{:.0}",
                        m.records_written as f64 / m.worker.wall.as_secs_f64().max(1e-9)
                    ),
                    p50: "–".into(),
                    p99: "–".into(),
                });
            }
            out.push(Line {
                fig: "4",
                what,
                run: "one bulk INSERT ... SELECT (ceiling)".into(),
                ops: m.bulk_rows.to_string(),
                secs: format!("{:.2}", m.bulk.as_secs_f64()),
                rate: format!("{:.0}", m.bulk_rows as f64 / m.bulk.as_secs_f64().max(1e-9)),
                p50: "–".into(),
                p99: "–".into(),
            });
        }
        out
    }

    fn ratios(&self) -> Vec<Ratio> {
        let mut out = Vec::new();
        let tput = |fig, what: &str, api: &Outcome, ceiling: &Outcome, target: f64| {
            let r = api.throughput() / ceiling.throughput().max(1e-9);
            Ratio {
                fig,
                what: what.to_owned(),
                api: format!("{:.0}/s", api.throughput()),
                ceiling: format!("{:.0}/s", ceiling.throughput()),
                ratio: format!("{r:.2}"),
                target: format!("≥ {target}"),
                ok: r >= target,
            }
        };
        if let Some(g) = &self.grants {
            out.push(tput(
                "1",
                "reservationGrants.create: API / SQL",
                &g.api,
                &g.sql,
                TARGET_WRITE,
            ));
        }
        if let Some(g) = &self.instances {
            out.push(tput(
                "2",
                "instances.create: API / SQL",
                &g.api,
                &g.sql,
                TARGET_WRITE,
            ));
        }
        if let Some(f) = &self.get {
            out.push(tput(
                "3",
                "reservationGrants.get: API / trivial hyper",
                &f.api,
                &f.trivial,
                TARGET_READ,
            ));
        }
        if let Some(f) = &self.list {
            out.push(tput(
                "3",
                "reservationGrants.list: API / trivial hyper",
                &f.api,
                &f.trivial,
                TARGET_READ,
            ));
        }
        if let Some(m) = &self.metering {
            let (records, secs, _) = Self::meter_api(m);
            let api = records as f64 / secs.max(1e-9);
            let bulk = m.bulk_rows as f64 / m.bulk.as_secs_f64().max(1e-9);
            let r = api / bulk.max(1e-9);
            out.push(Ratio {
                fig: "4",
                what: if m.catch_up.is_some() {
                    "vps.grants records/s: worker (in rounds) / bulk insert".into()
                } else {
                    "vps.grants records/s: worker / bulk insert".into()
                },
                api: format!("{api:.0}/s"),
                ceiling: format!("{bulk:.0}/s"),
                ratio: format!("{r:.2}"),
                target: format!("≥ {TARGET_METER}"),
                ok: r >= TARGET_METER && m.catch_up.is_none(),
            });
        }
        for (what, v) in [
            ("api-server peak RSS during 1", self.rss_fig1),
            ("api-server peak RSS during 3", self.rss_fig3),
        ] {
            out.push(Ratio {
                fig: "5",
                what: what.into(),
                api: format!("{} MiB", mib(v)),
                ceiling: "–".into(),
                ratio: "–".into(),
                target: format!("< {TARGET_RSS_MIB} MiB"),
                ok: v.is_some_and(|b| (b as f64 / MIB) < TARGET_RSS_MIB),
            });
        }
        out
    }

    fn tables(&self) -> String {
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
        s
    }

    /// What the terminal shows.
    pub fn terminal(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "\n{}", self.machine_line());
        s.push('\n');
        s.push_str(&self.tables());
        let _ = writeln!(
            s,
            "\napi-server RSS: {} MiB after setup; peak {} MiB during 1; {} MiB before 3 \
             (peak reset: {}); peak {} MiB during 3",
            mib(self.rss_after_setup),
            mib(self.rss_fig1),
            mib(self.rss_before_fig3),
            self.rss_reset,
            mib(self.rss_fig3)
        );
        s.push_str(&self.list_cost_line());
        s
    }

    fn list_cost_line(&self) -> String {
        self.list_cost.as_ref().map_or_else(String::new, |c| {
            format!(
                "One {}-item list answer ({} KiB), one request at a time: `storage::grants::list` \
                 (SQL, row decoding, `Grant::at`) {:.1} ms; JSON through a `serde_json::Value` \
                 tree (how answers were built before) {:.1} ms; the typed grants straight to bytes \
                 (how `handlers::items` builds them now) {:.1} ms.\n",
                self.list_items,
                c.bytes / 1024,
                c.storage.as_secs_f64() * 1e3,
                c.via_value.as_secs_f64() * 1e3,
                c.direct.as_secs_f64() * 1e3
            )
        })
    }

    fn machine_line(&self) -> String {
        let m = &self.machine;
        format!(
            "{} × {}, {:.1} GiB, Linux {}; {}",
            m.nproc, m.cpu, m.mem_gib, m.kernel, m.postgres
        )
    }

    /// `docs/benchmarks.md`.
    pub fn markdown(&self) -> String {
        let m = &self.machine;
        let mut s = String::new();
        s.push_str("# Benchmarks\n\n");
        s.push_str(
            "Written by `just bench` (the `bench` workspace member, `bins/bench`). Each figure \
             is measured next to its ceiling on the same machine in the same run; rerun it \
             to refresh this file. The prose below the tables is part of the program, the \
             numbers are this run's.\n\n",
        );
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
        s.push_str(
            "- Everything runs on this one machine: PostgreSQL, the api-server, the load \
             generator, the fake GCE and the trivial hyper server. When this run was \
             recorded the machine had 2 cores **shared with other work** (builds and tests \
             of parallel sessions), so absolute figures are noisy and low; the ratios, \
             measured back to back, are what to read.\n\n",
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
             call and the SQL run exactly as many operations (each side on rows of its own, so \
             each starts from the same state); reads: {} s each after a 1 s warm-up. \
             api-server: release build, `BC_CLOCK=manual`, `BC_DB_POOL_SIZE=16`, \
             `RUST_LOG={}` (logs to `target/bench/api-server.log`). \
             `BENCH_WRITE_SECONDS`, `BENCH_READ_SECONDS` and `BENCH_SERVER_LOG` override these.\n",
            self.clients,
            self.write_dur.as_secs(),
            self.read_dur.as_secs(),
            self.log_filter
        );
        s.push_str("## Results\n\n");
        s.push_str(&self.tables());
        let _ = writeln!(
            s,
            "\napi-server RSS: {} MiB once set up; peak (VmHWM) {} MiB during figure 1; \
             {} MiB before figure 3, where the peak was reset (`/proc/PID/clear_refs` 5: {}); \
             peak {} MiB during figure 3.\n",
            mib(self.rss_after_setup),
            mib(self.rss_fig1),
            mib(self.rss_before_fig3),
            if self.rss_reset {
                "done"
            } else {
                "refused, so the figure 3 peak includes 1 and 2"
            },
            mib(self.rss_fig3)
        );
        s.push_str(&self.list_cost_line());
        s.push('\n');
        s.push_str(&self.notes());
        s
    }
}
