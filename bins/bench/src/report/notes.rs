//! The prose of `docs/benchmarks.md`: per figure, what runs, what the
//! ceiling includes, what limits the figure, and the findings of profiling
//! it. Numbers come from the run; the profile observations are from the
//! session that built this program (perf on this machine), as stated.

use std::fmt::Write as _;

use super::{Report, TARGET_METER, TARGET_READ};
use crate::load::Outcome;
use crate::metering;

fn rate(o: &Outcome) -> String {
    format!("{:.0}/s", o.throughput())
}

fn ratio(a: f64, b: f64) -> String {
    format!("{:.2}", a / b.max(1e-9))
}

impl Report {
    /// The sections after the tables.
    pub(super) fn notes(&self) -> String {
        let mut s = String::new();
        s.push_str("## What each figure measures and what limits it\n\n");
        self.note_grants(&mut s);
        self.note_instances(&mut s);
        self.note_reads(&mut s);
        self.note_metering(&mut s);
        self.note_memory(&mut s);
        s.push_str(HOW);
        s
    }

    fn note_grants(&self, s: &mut String) {
        s.push_str("### 1. `reservationGrants.create` on one hot reservation\n\n");
        s.push_str(
            "Every operation commits 1 slot of the same reservation (100,000 slots, never full) to \
             tenant `acme` for a term starting an hour after the manual clock's now, under a new \
             idempotency key. Each side (API, storage call, SQL) has a hot reservation of its own, \
             empty at its start, and the storage call and the SQL run exactly as many operations \
             as the API did, so all three end with the same number of grants on their \
             reservation.\n\n\
             The ceiling is the transaction `storage::grants::create` runs, replayed statement by \
             statement with the same diesel DSL (so the same SQL text): the idempotency claim, the \
             account lookup, the reservation `SELECT ... FOR UPDATE`, the tenant lookup, the offer \
             count, the settlement reads (open grants `FOR UPDATE`, seated instances), the \
             committed terms, the grant `INSERT ... RETURNING` (a term in the future needs no \
             second settlement), the event head upsert and event insert, the reload. It leaves out \
             the two reads the API does before the transaction (authentication, the manual clock), \
             the pure decisions (`grants_core::settle`, `check_capacity`), the JSON and the log \
             line.\n\n",
        );
        if let Some(g) = &self.grants {
            let _ = write!(
                s,
                "**What limits it: the reservation's row lock, held while the transaction re-reads \
                 every open grant of the reservation.** All creates serialize on the lock, so \
                 throughput is one over the lock-hold time, and under the lock each create loads \
                 and row-locks the reservation's open grants (settlement) and reads all its \
                 non-cancelled terms: two passes over every grant created so far, one of them \
                 taking a row lock on each (a create whose term starts at or before now settles a \
                 second time). The hold time grows with the reservation, so throughput falls \
                 during the run: the API made {:.0}/s in the first quarter of its run and {:.0}/s \
                 in the last; the SQL {:.0}/s and {:.0}/s. The API's own work (HTTP, \
                 authentication, the clock read, JSON) happens outside the lock and overlaps other \
                 clients' waits, which is why the ratio holds (API {}, storage call {}, SQL {}); \
                 what it loses is CPU taken from PostgreSQL on two shared cores while the lock \
                 holder runs.\n\n\
                 Done: the second settlement after the insert now runs only for a term starting \
                 at or before now. Possible next step: derive the committed terms from the open \
                 grants already read (plus ended grants ending after the new start, one filtered \
                 query) and load seated instances only when a transition is due; it would raise \
                 the API and its ceiling alike.\n\n",
                g.api.rate_in(0.0, 0.25),
                g.api.rate_in(0.75, 1.0),
                g.sql.rate_in(0.0, 0.25),
                g.sql.rate_in(0.75, 1.0),
                rate(&g.api),
                rate(&g.storage),
                rate(&g.sql),
            );
        }
    }

    fn note_instances(&self, s: &mut String) {
        s.push_str("### 2. `instances.create` over 100 reservations with grants\n\n");
        s.push_str(
            "Per side, 100 pools each with one bound reservation (1,000 slots) and one live grant \
             of all its slots to `acme`; operations go round robin over the pools, so the 16 \
             clients rarely meet on a quota row or a reservation lock, and every instance lands in \
             its grant. The ceiling replays `storage::instances::create` for that case: the \
             idempotency claim, the pool visibility and pool reads, the quota rows `FOR UPDATE`, \
             the tenant's state, the candidate reservations, the reservation `FOR UPDATE`, the \
             settlement and placement reads (open grants `FOR UPDATE` and seated instances, twice \
             each), three quota updates, the instance `INSERT ... RETURNING`, its placement \
             update, the segment close, delete and insert, and the reload (no event is published). \
             Left out as in figure 1: authentication, the clock read, the pure decisions, JSON, \
             the log line.\n\n",
        );
        if let Some(g) = &self.instances {
            let _ = write!(
                s,
                "**What limits it: PostgreSQL executing about twenty statements per instance on \
                 two shared cores.** There is no shared hot row, so the figure is round trips \
                 times statement cost; the API adds two round trips and some CPU per request, a \
                 small share of the whole (API {}, storage call {}, SQL {}). Throughput also \
                 drifts down slowly as each reservation's seated instances, read twice per create \
                 (with its open grants, read and locked twice), grow (API {:.0}/s in the first \
                 quarter, {:.0}/s in the last). The same read-once change as in figure 1 applies \
                 to `decide`/`view` (settlement and the placement view read the same rows \
                 twice).\n\n",
                rate(&g.api),
                rate(&g.storage),
                rate(&g.sql),
                g.api.rate_in(0.0, 0.25),
                g.api.rate_in(0.75, 1.0),
            );
        }
    }

    fn note_reads(&self, s: &mut String) {
        s.push_str("### 3. `reservationGrants.get` and `list`\n\n");
        s.push_str(
            "The ceiling is a hyper server in the benchmark process (its own two-thread runtime, \
             the api-server's connection setup) answering every request with the exact bytes the \
             API answered, to the same load generator sending the same requests (POST, bearer \
             token, JSON body) over 16 keep-alive connections. Two informative rows split the \
             gap: the statements the API sends for one request, run directly on 16 connections \
             (authentication, the manual clock read, the handler's query), and the handler's query \
             alone. A second api-server with `BC_CLOCK=system` on the same database shows what \
             the manual clock's read costs (production runs the system clock).\n\n",
        );
        if let Some(g) = &self.get {
            let (q, t) = (g.sql_query.throughput(), g.trivial.throughput());
            let _ = write!(
                s,
                "**`get`: three database round trips per request against none.** API {} \
                 (`BC_CLOCK=system`: {}), trivial handler {}: {}. The statements alone on direct \
                 connections reach {} (API / statements {}); the handler's query alone {}, {} of \
                 the trivial handler. Both saturate the same two cores, so a server doing the \
                 trivial handler's work plus that one query per request could at best reach \
                 1 / (1/{:.0} + 1/{:.0}) per second, {} of the trivial handler. Profile (perf, \
                 whole machine, during the API run): the PostgreSQL backends took more CPU than \
                 the api-server, and the api-server's own profile is flat (socket writes and \
                 wakeups, malloc, tokio-postgres message handling): no hotspot to remove.\n\n\
                 Proposed (api-server, storage; not changed here): (a) cache authentication \
                 results in the process for a few seconds, keyed by the secret's hash (a revoked \
                 key then works for at most that long, which the contract would have to allow): \
                 one round trip fewer; (b) the manual clock's read is a test and demo cost \
                 (production's `BC_CLOCK=system` reads no row; the informative row measures it, \
                 though run-to-run noise here is of the same order); with the manual clock, read \
                 it in the authentication's statement. With both, a `get` is one round trip. \
                 **What remains:** the bound above; the {} target is out of reach for a read that \
                 queries PostgreSQL per request on this machine, short of serving grant state from \
                 memory, which a strongly consistent control plane should not do.\n\n",
                rate(&g.api),
                g.api_system_clock
                    .as_ref()
                    .map_or_else(|| "n/a".into(), rate),
                rate(&g.trivial),
                ratio(g.api.throughput(), t),
                rate(&g.sql_full),
                ratio(g.api.throughput(), g.sql_full.throughput()),
                rate(&g.sql_query),
                ratio(q, t),
                t,
                q,
                ratio(q, q + t),
                TARGET_READ,
            );
        }
        if let Some(l) = &self.list {
            let cost = self.list_cost.as_ref();
            let ms = |f: fn(&crate::reads::ListCost) -> std::time::Duration| {
                cost.map_or_else(
                    || "n/a".into(),
                    |c| format!("{:.1} ms", f(c).as_secs_f64() * 1e3),
                )
            };
            let _ = write!(
                s,
                "**`list` (1000 items): CPU in the api-server, decoding 1000 rows and encoding \
                 them.** API {}, trivial handler {}: {}. The statements alone reach {} and the \
                 query alone {} ({} of the trivial handler: fetching and decoding 1000 rows is \
                 itself far more work than sending the answer). Measured one request at a time: \
                 `storage::grants::list` {}, the JSON built through a `serde_json::Value` tree {}, \
                 the same grants written straight to bytes {}. Answers were first built through \
                 the `Value` tree (a profile showed `BTreeMap` inserts, `malloc`/`free` and \
                 `serde_json::value::ser` on top); `handlers::items` and `one` now serialize the \
                 typed answer directly, which is the last of the three. **What remains:** by the \
                 same bound as for `get`, a server doing the trivial handler's work plus the query \
                 could reach {} of the trivial handler.\n\n",
                rate(&l.api),
                rate(&l.trivial),
                ratio(l.api.throughput(), l.trivial.throughput()),
                rate(&l.sql_full),
                rate(&l.sql_query),
                ratio(l.sql_query.throughput(), l.trivial.throughput()),
                ms(|c| c.storage),
                ms(|c| c.via_value),
                ms(|c| c.direct),
                ratio(
                    l.sql_query.throughput(),
                    l.sql_query.throughput() + l.trivial.throughput()
                ),
            );
        }
    }

    fn note_metering(&self, s: &mut String) {
        s.push_str("### 4. `vps.grants` metering\n\n");
        let _ = write!(
            s,
            "A database of its own, rows inserted directly: {} grants of 1–4 slots over 100 \
             reservations, settled and ended, never metered, with the manual clock {} hours and a \
             minute after their start; then the real `reconciler-worker --once --only vps.grants`. \
             Records per second use the pass's own `elapsed_ms` (the process's wall time, with \
             start and connect, is in the table when the run succeeds). The ceiling is one `INSERT \
             ... SELECT` of the same {} rows (same columns, types and sizes) into a scratch copy \
             of `usage_records` (`LIKE ... INCLUDING ALL`: the same four indexes and unique keys), \
             in the database's best case: usage ids in index order, rows in (grant, hour) order, \
             tags built once per grant.\n\n",
            metering::GRANTS,
            metering::HOURS,
            metering::GRANTS * metering::HOURS,
        );
        let Some(m) = &self.metering else { return };
        if m.catch_up.is_some() {
            let _ = write!(
                s,
                "**Finding: the pass fails, and keeps failing.** `{}`. A batch's records go to \
                 PostgreSQL as a multi-row `INSERT` with 15 bind parameters per record, and the \
                 protocol allows 65,535 parameters per statement: a batch of 200 grants with 24 \
                 ended hours each is 4,800 records, 72,000 parameters. Because the next round \
                 picks the same lowest grant ids, `vps.grants` then meters nothing at all until \
                 the code changes. The worker figure above is the same work in two runs of 12 \
                 hours each (the clock moved between them).\n\n",
                m.worker.line
            );
        } else {
            s.push_str(
                "An earlier version of `vps.grants` failed on this figure: it sent a batch's \
                 records as one multi-row `INSERT` with 15 bind parameters per record, and 200 \
                 grants × 24 hours is 72,000 parameters, over the protocol's 65,535 (\"error \
                 encoding message to server\"), after which every round retried the same batch and \
                 metered nothing. The array-bound statements described below have no such limit. \
                 If a pass fails again, the program says so in the table and measures the work in \
                 12-hour rounds instead.\n\n",
            );
        }
        let (records, secs, _) = Self::meter_api(m);
        let api = records as f64 / secs.max(1e-9);
        let bulk = m.bulk_rows as f64 / m.bulk.as_secs_f64().max(1e-9);
        let _ = write!(
            s,
            "**What limits it: statements and record building, on one connection.** The worker \
             ({:.0}/s, {} of the ceiling, target {}) claims up to 50 reservations and 1,000 of \
             their grants per transaction and writes the batch with two array-bound statements: \
             `UPDATE grants ... FROM unnest(...)` for the marks and `INSERT INTO usage_records \
             ... SELECT ... FROM unnest(...) WITH ORDINALITY` for the records (one prepared \
             statement whatever the batch holds). An earlier version sent one `UPDATE` per \
             grant and multi-row `INSERT`s with 15 parameters per record, which PostgreSQL \
             parsed and planned afresh each time (a perf profile of the backend showed the \
             parser and planner on top) and which ran at about a fifth of the ceiling; it also \
             failed outright past 65,535 parameters. Usage ids now count up within a \
             millisecond, so they append to the `usage_id` index as the ceiling's do. **What \
             remains:** building the records in Rust (a TypeID, a tags object and 15 values per \
             record) and jsonb input in PostgreSQL, which the ceiling does not pay, and the \
             pass working sequentially on one connection.\n\n",
            api,
            ratio(api, bulk),
            TARGET_METER,
        );
    }

    fn note_memory(&self, s: &mut String) {
        s.push_str("### 5. Memory\n\n");
        let _ = write!(
            s,
            "`VmHWM` of the api-server from `/proc/PID/status`: read after figure 1 (the peak \
             since start, setup included), then reset (`clear_refs` 5) before figure 3 and read \
             after it. The peak during 3 comes from `list`: 16 concurrent {} KiB answers. \
             Both are far under the 100 MiB target ({} and {} MiB).\n\n",
            self.list_bytes / 1024,
            super::mib(self.rss_fig1),
            super::mib(self.rss_fig3),
        );
    }
}

const HOW: &str = "## How to read and rerun\n\n\
- The machine was shared while this was recorded (2 cores, other sessions compiling and \
  testing against the same PostgreSQL cluster), so repeated runs differ by tens of percent in \
  absolute terms; figures and their ceilings run back to back, so ratios move less.\n\
- PostgreSQL is the private cluster of `scripts/db.sh` (`fsync`, `synchronous_commit` and \
  `full_page_writes` off): commits cost no disk flush, so every figure is CPU and round trips. \
  With durable settings the write figures and their ceilings would both drop.\n\
- `BENCH_FIGURES=grants,instances,reads,metering` (any subset) runs part of the program and \
  leaves this file alone; `BENCH_WRITE_SECONDS`, `BENCH_READ_SECONDS`, `BENCH_SERVER_LOG` \
  change the durations and the api-server's log filter.\n\
- Profiles: `perf record -g -p $(pgrep -f target/release/api-server)` during a run, or \
  `perf record -a -g` for the whole machine (PostgreSQL backends appear as `postgres`).\n";
