//! What PostgreSQL did during the timed requests: the scan counters of
//! the big tables and the plans of one tenant's pages.

use diesel::sql_types::{BigInt, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::{Draws, Num, PAGE, Scans, TENANTS, Txt, exec};
use crate::setup::TENANT;

/// Tables smaller than this may be scanned sequentially: that is the right
/// plan for them (an empty default partition, a month with a few rows).
pub(super) const SMALL_TABLE: i64 = 10_000;

/// Per table (`grants` and every partition of the logs): sequential scans,
/// index scans and live rows.
pub(super) async fn scans(
    conn: &mut AsyncPgConnection,
) -> anyhow::Result<std::collections::BTreeMap<String, (i64, i64, i64)>> {
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = Text)]
        relname: String,
        #[diesel(sql_type = BigInt)]
        seq: i64,
        #[diesel(sql_type = BigInt)]
        idx: i64,
        #[diesel(sql_type = BigInt)]
        live: i64,
    }
    exec(conn, "SELECT pg_stat_clear_snapshot()").await?;
    let rows: Vec<Row> = diesel::sql_query(
        "SELECT relname::text AS relname, seq_scan AS seq, coalesce(idx_scan, 0) AS idx, \
                n_live_tup AS live \
         FROM pg_stat_user_tables \
         WHERE relname = 'grants' OR relname LIKE 'usage\\_records%' OR relname LIKE 'events%'",
    )
    .load(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.relname, (r.seq, r.idx, r.live)))
        .collect())
}

/// What changed between two readings of [`scans`]: the sequential scans of
/// tables of at least [`SMALL_TABLE`] rows (named), of smaller ones, and
/// the index scans.
pub(super) fn scans_between(
    before: &std::collections::BTreeMap<String, (i64, i64, i64)>,
    after: &std::collections::BTreeMap<String, (i64, i64, i64)>,
) -> Scans {
    let mut out = Scans::default();
    for (name, (seq, idx, live)) in after {
        let (seq0, idx0, _) = before.get(name).copied().unwrap_or_default();
        out.idx += idx - idx0;
        if seq - seq0 > 0 {
            if *live >= SMALL_TABLE {
                out.seq += seq - seq0;
                out.big
                    .push(format!("{name} ({} rows): {}", live, seq - seq0));
            } else {
                out.small += seq - seq0;
            }
        }
    }
    out
}

/// `EXPLAIN (ANALYZE, BUFFERS)` of the tenant's usage and events pages from
/// the middle of the log, as one statement planned for its values: the
/// plan's top line, buffers (execution's, then planning's), planning and
/// execution times.
pub(super) async fn explain(
    conn: &mut AsyncPgConnection,
    rows: i64,
) -> anyhow::Result<Vec<String>> {
    let queries = [
        (
            "usage",
            format!(
                "SELECT * FROM usage_records WHERE tenant_id = '{TENANT}' AND seq > {} \
                 ORDER BY seq LIMIT {}",
                rows / 2,
                PAGE + 1
            ),
        ),
        (
            "events",
            format!(
                "SELECT * FROM events WHERE tenant_id = '{TENANT}' AND seq > {} \
                 ORDER BY seq LIMIT {}",
                rows / TENANTS / 2,
                PAGE + 1
            ),
        ),
    ];
    let mut out = Vec::new();
    for (name, sql) in queries {
        let plan = explain_lines(conn, &sql).await?;
        let keep: Vec<&str> = plan
            .iter()
            .map(String::as_str)
            .filter(|l| {
                l.starts_with("Limit")
                    || l.starts_with("  Buffers: shared")
                    || l.contains("Planning Time")
                    || l.contains("Execution Time")
            })
            .collect();
        out.push(format!("{name}: {}", keep.join("; ")));
    }
    Ok(out)
}

/// The lines of `EXPLAIN (ANALYZE, BUFFERS)` of `sql`.
async fn explain_lines(conn: &mut AsyncPgConnection, sql: &str) -> anyhow::Result<Vec<String>> {
    exec(
        conn,
        "CREATE OR REPLACE FUNCTION bc_scale_explain(q text) RETURNS SETOF text \
         LANGUAGE plpgsql AS $f$ DECLARE r text; BEGIN \
         FOR r IN EXECUTE 'EXPLAIN (ANALYZE, BUFFERS) ' || q LOOP RETURN NEXT r; END LOOP; \
         END $f$",
    )
    .await?;
    let rows: Vec<Txt> = diesel::sql_query(format!(
        "SELECT line AS t FROM bc_scale_explain($${sql}$$) AS line"
    ))
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|r| r.t).collect())
}

/// Tenant pages sampled by [`heap_pages`].
const HEAP_SAMPLES: usize = 200;

/// The mean number of heap pages one tenant's page of each log reads
/// (usage, events), over [`HEAP_SAMPLES`] pages from random cursors drawn
/// as the timed requests draw them.
pub(super) async fn heap_pages(
    conn: &mut AsyncPgConnection,
    rows: i64,
    rng: &mut Draws,
) -> anyhow::Result<(f64, f64)> {
    let mut sums = (0i64, 0i64);
    for _ in 0..HEAP_SAMPLES {
        for (table, after, sum) in [
            ("usage_records", rng.below(rows), &mut sums.0),
            ("events", rng.below(rows / TENANTS), &mut sums.1),
        ] {
            let n: Num = diesel::sql_query(format!(
                "SELECT count(DISTINCT (tableoid, (ctid::text::point)[0]))::bigint AS n \
                 FROM (SELECT tableoid, ctid FROM {table} \
                       WHERE tenant_id = $1 AND seq > $2 ORDER BY seq LIMIT {PAGE}) p"
            ))
            .bind::<Text, _>(TENANT)
            .bind::<BigInt, _>(after)
            .get_result(conn)
            .await?;
            *sum += n.n;
        }
    }
    let mean = |sum: i64| sum as f64 / HEAP_SAMPLES as f64;
    Ok((mean(sums.0), mean(sums.1)))
}
