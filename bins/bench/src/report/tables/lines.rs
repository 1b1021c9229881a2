//! The table of runs: a row per run measured, with its operations, time,
//! rate and latency quantiles.

use std::time::Duration;

use super::Line;
use crate::metering;
use crate::report::{Report, ms, thousands};
use crate::setup::INST_HISTORY_RESERVATIONS;
use crate::{burst, history, hooks};

impl Report {
    pub(super) fn lines(&self) -> Vec<Line> {
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
