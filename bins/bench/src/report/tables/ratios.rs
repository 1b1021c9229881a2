//! The table of ratios: each API figure against its ceiling, with its
//! target and whether it is met.

use super::Ratio;
use crate::history;
use crate::load::Outcome;
use crate::report::{MIB, ReadFigure, Report, mib, thousands};
use crate::setup::INST_HISTORY_RESERVATIONS;

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

impl Report {
    pub(super) fn ratios(&self) -> Vec<Ratio> {
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
}
