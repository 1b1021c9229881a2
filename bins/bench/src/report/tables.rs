//! The tables: a row per run, a row per ratio against its ceiling with its
//! target, and the per-run figures the notes refer to.

use std::fmt::Write as _;
use std::time::Duration;

use super::{MIB, ReadFigure, Report, met, mib, ms, thousands};
use crate::load::Outcome;
use crate::metering::{self, Metering};
use crate::setup::INST_HISTORY_RESERVATIONS;
use crate::{burst, history, hooks};

/// Target ratios and memory.
const TARGET_WRITE: f64 = 0.6;
const TARGET_PGBENCH: f64 = 0.4;
const TARGET_HISTORY: f64 = 0.9;
const TARGET_READ: f64 = 0.5;
const TARGET_GET_QUERY: f64 = 0.5;
const TARGET_LIST_QUERY: f64 = 0.8;
/// A burst of instance creates on one reservation against pgbench's hot row.
const TARGET_BURST: f64 = 0.3;
/// The API against HTTP plus its own statements and nothing else.
const TARGET_OVERHEAD: f64 = 0.8;
const TARGET_METER: f64 = 0.5;
const TARGET_COPY: f64 = 0.7;
const TARGET_RSS_MIB: f64 = 100.0;

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
        if let Some(b) = &self.pgbench {
            out.push(Line {
                fig: "1",
                what: "reservationGrants.create, 1 hot reservation".into(),
                run: format!(
                    "pgbench row lock + insert (ceiling), {c} clients, `-j 2 -M prepared` \
                     (p50: latency average)"
                ),
                ops: b.transactions.to_string(),
                secs: format!("{:.2}", b.duration.as_secs_f64()),
                rate: format!("{:.0}", b.tps),
                p50: format!("avg {}", ms(b.latency_avg)),
                p99: "–".into(),
            });
        }
        if let Some(h) = &self.grants_history {
            out.push(Line::load(
                "1h",
                &format!(
                    "reservationGrants.create, 1 hot reservation with {} earlier grants",
                    thousands(history::GRANTS)
                ),
                &format!("HTTP API, {c} clients"),
                h,
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
        if let Some((without, with)) = &self.instances_history {
            let what =
                format!("instances.create, {INST_HISTORY_RESERVATIONS} reservations with grants");
            out.push(Line::load(
                "2h",
                &what,
                &format!("HTTP API, {c} clients, no deleted instances"),
                without,
            ));
            out.push(Line::load(
                "2h",
                &what,
                &format!(
                    "HTTP API, {c} clients, {} deleted instances per reservation",
                    thousands(history::INSTANCES)
                ),
                with,
            ));
        }
        if let Some(b) = &self.burst {
            let what = format!(
                "instances.create burst: one {}-slot grant on one reservation of a managed pool",
                thousands(burst::SLOTS)
            );
            out.push(Line::load(
                "2b",
                &what,
                &format!("HTTP API, {c} clients (worker and fake-gce creating the VMs)"),
                &b.api,
            ));
            let ms = |d: std::time::Duration| format!("{:.2}", d.as_secs_f64() * 1e3);
            out.push(Line {
                fig: "2b",
                what,
                run: format!(
                    "API answer to VM `RUNNING` recorded, per instance ({} never running)",
                    b.not_running
                ),
                ops: b.to_running.len().to_string(),
                secs: "–".into(),
                rate: "–".into(),
                p50: ms(b.running_quantile(0.5)),
                p99: ms(b.running_quantile(0.99)),
            });
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
        if let Some(d) = &self.webhooks {
            out.push(webhook_line(
                d,
                format!(
                    "webhook delivery, {} events one at a time",
                    thousands(i64::try_from(hooks::EVENTS).unwrap_or(0))
                ),
                "from the request committing the event to its arrival at a local receiver \
                 (worker woken by NOTIFY)"
                    .into(),
            ));
        }
        if let Some(d) = &self.webhooks_hostile {
            let met = if d.quantile(0.99) < Duration::from_secs(1) {
                "met"
            } else {
                "NOT met"
            };
            let due = hooks::HOSTILE_WEBHOOKS * hooks::HOSTILE_DUE_EACH;
            out.push(webhook_line(
                d,
                format!(
                    "webhook delivery, {} events one at a time, while another tenant's {} \
                     webhooks never answer ({} deliveries due)",
                    hooks::HOSTILE_EVENTS,
                    hooks::HOSTILE_WEBHOOKS,
                    thousands(i64::try_from(due).unwrap_or(0))
                ),
                format!(
                    "as above; the worker busy with the other tenant's attempts \
                     (BC_WEBHOOK_TENANT_CONCURRENCY default); target p99 < 1 s: {met}"
                ),
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
                what: what.clone(),
                run: "one bulk INSERT ... SELECT (ceiling)".into(),
                ops: m.bulk_rows.to_string(),
                secs: format!("{:.2}", m.bulk.as_secs_f64()),
                rate: format!("{:.0}", m.bulk_rows as f64 / m.bulk.as_secs_f64().max(1e-9)),
                p50: "–".into(),
                p99: "–".into(),
            });
            out.push(Line {
                fig: "4",
                what,
                run: "one COPY ... FROM STDIN (FORMAT binary), rows built in the client (ceiling)"
                    .into(),
                ops: m.copy_rows.to_string(),
                secs: format!("{:.2}", m.copy.as_secs_f64()),
                rate: format!("{:.0}", m.copy_rows as f64 / m.copy.as_secs_f64().max(1e-9)),
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
            if let Some(b) = &self.pgbench {
                let r = g.api.throughput() / b.tps.max(1e-9);
                out.push(Ratio {
                    fig: "1",
                    what: "reservationGrants.create: API / pgbench row lock + insert".into(),
                    api: format!("{:.0}/s", g.api.throughput()),
                    ceiling: format!("{:.0}/s", b.tps),
                    ratio: format!("{r:.2}"),
                    target: format!("≥ {TARGET_PGBENCH}"),
                    ok: r >= TARGET_PGBENCH,
                });
            }
            if let Some(h) = &self.grants_history {
                out.push(tput(
                    "1h",
                    &format!(
                        "reservationGrants.create with {} earlier grants / on an empty \
                         reservation",
                        thousands(history::GRANTS)
                    ),
                    h,
                    &g.api,
                    TARGET_HISTORY,
                ));
            }
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
        if let Some((without, with)) = &self.instances_history {
            out.push(tput(
                "2h",
                &format!(
                    "instances.create, {INST_HISTORY_RESERVATIONS} pools per side: with {} \
                     deleted instances per reservation / without them",
                    thousands(history::INSTANCES)
                ),
                with,
                without,
                TARGET_HISTORY,
            ));
        }
        if let (Some(b), Some(pg)) = (&self.burst, &self.pgbench) {
            let r = b.api.throughput() / pg.tps.max(1e-9);
            out.push(Ratio {
                fig: "2b",
                what: "instances.create burst on one reservation: API / pgbench row lock + insert"
                    .into(),
                api: format!("{:.0}/s", b.api.throughput()),
                ceiling: format!("{:.0}/s", pg.tps),
                ratio: format!("{r:.2}"),
                target: format!("≥ {TARGET_BURST}"),
                ok: r >= TARGET_BURST && b.not_running == 0,
            });
        }
        // What an API adding nothing to HTTP and its own statements would
        // make: 1 / (1/trivial + 1/statements on 16 direct connections).
        let overhead = |what: &str, f: &ReadFigure| {
            let (t, q) = (f.trivial.throughput(), f.sql_full.throughput());
            let bound = 1.0 / (1.0 / t.max(1e-9) + 1.0 / q.max(1e-9));
            let r = f.api.throughput() / bound.max(1e-9);
            Ratio {
                fig: "3",
                what: format!(
                    "{what}: API / (HTTP and its statements: 1 / (1/trivial + 1/direct SQL))"
                ),
                api: format!("{:.0}/s", f.api.throughput()),
                ceiling: format!("{bound:.0}/s"),
                ratio: format!("{r:.2}"),
                target: format!("≥ {TARGET_OVERHEAD}"),
                ok: r >= TARGET_OVERHEAD,
            }
        };
        if let Some(f) = &self.get {
            out.push(overhead("reservationGrants.get", f));
        }
        if let Some(f) = &self.list {
            out.push(overhead("reservationGrants.list", f));
        }
        if let Some(f) = &self.get {
            out.push(tput(
                "3",
                "reservationGrants.get: API / trivial hyper",
                &f.api,
                &f.trivial,
                TARGET_READ,
            ));
            out.push(tput(
                "3",
                "reservationGrants.get: API / the query alone",
                &f.api,
                &f.sql_query,
                TARGET_GET_QUERY,
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
            out.push(tput(
                "3",
                "reservationGrants.list: API / the query alone",
                &f.api,
                &f.sql_query,
                TARGET_LIST_QUERY,
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
            let copy = m.copy_rows as f64 / m.copy.as_secs_f64().max(1e-9);
            let r = api / copy.max(1e-9);
            out.push(Ratio {
                fig: "4",
                what: if m.catch_up.is_some() {
                    "vps.grants records/s: worker (in rounds) / COPY binary".into()
                } else {
                    "vps.grants records/s: worker / COPY binary".into()
                },
                api: format!("{api:.0}/s"),
                ceiling: format!("{copy:.0}/s"),
                ratio: format!("{r:.2}"),
                target: format!("≥ {TARGET_COPY}"),
                ok: r >= TARGET_COPY && m.catch_up.is_none(),
            });
        }
        for m in &self.rss {
            let v = m.peak;
            out.push(Ratio {
                fig: "5",
                what: format!(
                    "api-server peak RSS during {}{}",
                    m.fig,
                    if m.reset { "" } else { " (peak not reset)" }
                ),
                api: format!("{} MiB", mib(v)),
                ceiling: "–".into(),
                ratio: "–".into(),
                target: format!("< {TARGET_RSS_MIB} MiB"),
                ok: v.is_some_and(|b| (b as f64 / MIB) < TARGET_RSS_MIB),
            });
        }
        out
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

/// A line of figure 6: its delays' rate and quantiles.
fn webhook_line(d: &hooks::Deliveries, what: String, run: String) -> Line {
    let ms = |q: f64| format!("{:.2}", d.quantile(q).as_secs_f64() * 1e3);
    Line {
        fig: "6",
        what,
        run,
        ops: d.lags.len().to_string(),
        secs: format!("{:.2}", d.elapsed.as_secs_f64()),
        rate: format!(
            "{:.0}",
            d.lags.len() as f64 / d.elapsed.as_secs_f64().max(1e-9)
        ),
        p50: ms(0.5),
        p99: ms(0.99),
    }
}
