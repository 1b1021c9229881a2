//! Usage records and events partitioned by month (migration
//! `2026-12-06-000001_monthly_partitions`): rows written before their month
//! exists wait in the default partition and move when the reconciler creates
//! it; an archived (detached) month is refused by `usage.list` rather than
//! answered partly, and is never created again.

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::json;

use crate::support::builders::GrantBuilder;
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::db::db;
use crate::support::fixtures::platform_at_t0;
use crate::support::meter::{q, usage, usage_all};
use crate::support::server::Server;
use crate::support::worker;

/// 2030-02-01 and 2030-03-01 (T0 is 2030-01-01).
const FEB: i64 = T0 + 31 * 24 * HOUR;
const MAR: i64 = FEB + 28 * 24 * HOUR;

#[derive(QueryableByName, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Part {
    #[diesel(sql_type = Text)]
    part: String,
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// Which partition holds how many rows of `table`.
async fn parts(conn: &mut AsyncPgConnection, table: &str) -> Vec<(String, i64)> {
    let mut v: Vec<Part> = diesel::sql_query(format!(
        "SELECT tableoid::regclass::text AS part, count(*) AS n FROM {table} GROUP BY 1"
    ))
    .load(conn)
    .await
    .expect("partition counts");
    v.sort();
    v.into_iter().map(|p| (p.part, p.n)).collect()
}

#[derive(QueryableByName)]
struct One {
    #[diesel(sql_type = Text)]
    v: String,
}

/// Runs one SQL function call answering text; the error's text on failure.
async fn call(conn: &mut AsyncPgConnection, sql: &str) -> Result<String, String> {
    diesel::sql_query(sql)
        .get_result::<One>(conn)
        .await
        .map(|o| o.v)
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn rows_written_before_their_month_exists_move_into_it_unchanged() {
    let (s, p) = platform_at_t0(4).await;
    GrantBuilder::new(&p)
        .slots(2)
        .term(T0 + 30 * MIN, T0 + 3 * HOUR)
        .create(&s)
        .await;
    let mut conn = db(&s).await;
    // The template's months follow the wall clock; 2030 has none yet.
    let before = s.events(&p.tenant_token, "acme").await;
    assert!(!before.is_empty());
    let events = parts(&mut conn, "events").await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "events_default");
    s.set_clock(T0 + 4 * HOUR).await;
    worker::once(&s, &["vps.grants"]).await;
    // The pass created 2029-12 to 2030-03 and moved the rows into their month.
    let events = parts(&mut conn, "events").await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "events_2030_01");
    assert_eq!(
        parts(&mut conn, "usage_records").await,
        [("usage_records_2030_01".to_owned(), 3)]
    );
    for month in ["2029_12", "2030_01", "2030_02", "2030_03"] {
        let attached = call(
            &mut conn,
            &format!(
                "SELECT count(*)::text AS v FROM pg_inherits \
                 WHERE inhrelid = to_regclass('usage_records_{month}')"
            ),
        )
        .await;
        assert_eq!(attached.as_deref(), Ok("1"), "usage_records_{month}");
    }
    // The log reads the same: every earlier event once, in order, then the
    // pass's own.
    let after = s.events(&p.tenant_token, "acme").await;
    assert_eq!(after[..before.len()], before[..]);
    let recs = usage(&s, &p.tenant_token, "acme", "vm.grant.slot.hours").await;
    assert_eq!(
        q(&recs),
        [
            (T0, "1.000000".to_owned()),
            (T0 + HOUR, "2.000000".to_owned()),
            (T0 + 2 * HOUR, "2.000000".to_owned())
        ]
    );
    // A second pass creates nothing and moves nothing.
    let again = call(
        &mut conn,
        &format!("SELECT bc_ensure_month_partitions('events', {T0}, {MAR})::text AS v"),
    )
    .await;
    assert_eq!(again.as_deref(), Ok("0"));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_archived_month_is_refused_by_usage_list_and_never_created_again() {
    let (s, p) = platform_at_t0(4).await;
    GrantBuilder::new(&p)
        .term(T0, T0 + 2 * HOUR)
        .create(&s)
        .await;
    s.set_clock(T0 + 3 * HOUR).await;
    worker::once(&s, &["vps.grants"]).await;
    s.set_clock(MAR + HOUR).await;
    GrantBuilder::new(&p)
        .term(MAR + HOUR, MAR + 2 * HOUR)
        .create(&s)
        .await;
    s.set_clock(MAR + 3 * HOUR).await;
    worker::once(&s, &["vps.grants"]).await;
    let meter = "vm.grant.slot.hours";
    assert_eq!(usage(&s, &p.tenant_token, "acme", meter).await.len(), 3);
    let now = MAR + 3 * HOUR;
    let mut conn = db(&s).await;

    // The reconciler may still write this month and the last one.
    for (month, name) in [(MAR, "2030_03"), (FEB, "2030_02")] {
        let err = call(
            &mut conn,
            &format!("SELECT bc_detach_month('usage_records', {month}, {now}) AS v"),
        )
        .await
        .expect_err(name);
        assert!(err.contains("too recent to archive"), "{err}");
    }
    let err = call(
        &mut conn,
        &format!("SELECT bc_detach_month('grants', {T0}, {now}) AS v"),
    )
    .await
    .expect_err("grants is not partitioned");
    assert!(err.contains("not partitioned by month"), "{err}");

    let detached = call(
        &mut conn,
        &format!("SELECT bc_detach_month('usage_records', {T0}, {now}) AS v"),
    )
    .await;
    assert_eq!(detached.as_deref(), Ok("usage_records_2030_01"));
    // Its rows are kept in the detached table, to be dumped and dropped.
    assert_eq!(
        parts(&mut conn, "usage_records_2030_01").await,
        [("usage_records_2030_01".to_owned(), 2)]
    );

    // A range reaching into the archived month is refused, whole.
    let tenant = json!({ "tenantId": "acme" });
    let mut body = tenant.clone();
    body["from"] = json!(T0);
    let refused = s.call(&p.tenant_token, "usage/list", body).await;
    let details = refused.err(400, "INVALID_INPUT");
    assert_eq!(details["field"], "from");
    assert_eq!(details["reason"], "archived");
    assert_eq!(details["archivedThrough"], FEB);
    let mut body = tenant.clone();
    body["to"] = json!(T0 + 2 * HOUR);
    let details = s.call(&p.tenant_token, "usage/list", body).await;
    assert_eq!(details.err(400, "INVALID_INPUT")["field"], "to");
    // From the first kept month, or without bounds: what is kept.
    let kept = usage_all(&s, &p.tenant_token, "acme", json!({ "from": FEB })).await;
    assert_eq!(q(&kept), [(MAR + HOUR, "1.000000".to_owned())]);
    let kept = usage(&s, &p.tenant_token, "acme", meter).await;
    assert_eq!(q(&kept), [(MAR + HOUR, "1.000000".to_owned())]);

    // Never created again, even once its table is dropped.
    diesel::sql_query("DROP TABLE usage_records_2030_01")
        .execute(&mut conn)
        .await
        .expect("drop the archived table");
    let created = call(
        &mut conn,
        &format!("SELECT bc_ensure_month_partitions('usage_records', {T0}, {MAR})::text AS v"),
    )
    .await;
    assert_eq!(created.as_deref(), Ok("0"));
    let back = call(
        &mut conn,
        "SELECT coalesce(to_regclass('usage_records_2030_01')::text, '') AS v",
    )
    .await;
    assert_eq!(back.as_deref(), Ok(""));
}

#[derive(QueryableByName, Debug, PartialEq, Eq)]
struct Source {
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = Text)]
    src: String,
}

/// The bodies of the two partition functions and of the key function (if
/// there is one), by name.
async fn partition_function_sources(conn: &mut AsyncPgConnection) -> Vec<Source> {
    diesel::sql_query(
        "SELECT proname::text AS name, prosrc AS src FROM pg_proc \
         WHERE proname IN ('bc_ensure_month_partitions', 'bc_detach_month', \
                           'bc_month_partition_key') \
         ORDER BY proname",
    )
    .load(conn)
    .await
    .expect("function sources")
}

/// The body (between `$$`) of `CREATE FUNCTION name` in a migration's SQL.
fn body_in(sql: &str, name: &str) -> String {
    let start = sql
        .find(&format!("CREATE FUNCTION {name}("))
        .unwrap_or_else(|| panic!("{name} in the migration"));
    let rest = &sql[start..];
    let open = rest.find("$$").expect("$$") + 2;
    let close = rest[open..].find("$$").expect("closing $$") + open;
    rest[open..close].to_owned()
}

/// The partition key of each partitioned table is spelled once, in
/// `bc_month_partition_key`, which both partition functions call; the
/// migration that made it (`2026-12-07-000001_month_partition_key`) undoes
/// to exactly the functions `monthly_partitions` wrote, and redoes cleanly;
/// the functions keep refusing a table that is not partitioned by month.
#[tokio::test(flavor = "multi_thread")]
async fn the_partition_key_is_spelled_once_and_its_migration_undoes_exactly() {
    use diesel_async::SimpleAsyncConnection;
    const PARTITIONS: &str =
        include_str!("../../../../../migrations/2026-12-06-000001_monthly_partitions/up.sql");
    const UP: &str =
        include_str!("../../../../../migrations/2026-12-07-000001_month_partition_key/up.sql");
    const DOWN: &str =
        include_str!("../../../../../migrations/2026-12-07-000001_month_partition_key/down.sql");
    let s = Server::start().await;
    let mut conn = db(&s).await;

    let now = partition_function_sources(&mut conn).await;
    let names: Vec<&str> = now.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "bc_detach_month",
            "bc_ensure_month_partitions",
            "bc_month_partition_key"
        ]
    );
    for f in &now {
        let cases = f
            .src
            .matches("WHEN 'usage_records' THEN 'period_start'")
            .count();
        let expected = usize::from(f.name == "bc_month_partition_key");
        assert_eq!(cases, expected, "{}: {}", f.name, f.src);
    }

    conn.batch_execute(DOWN).await.expect("down.sql");
    let before = partition_function_sources(&mut conn).await;
    let expected: Vec<Source> = ["bc_detach_month", "bc_ensure_month_partitions"]
        .into_iter()
        .map(|name| Source {
            name: name.to_owned(),
            src: body_in(PARTITIONS, name),
        })
        .collect();
    assert_eq!(
        before, expected,
        "down.sql restores monthly_partitions' functions"
    );

    conn.batch_execute(UP).await.expect("up.sql again");
    assert_eq!(partition_function_sources(&mut conn).await, now);
    for parent in ["usage_records", "events"] {
        let made = call(
            &mut conn,
            &format!("SELECT bc_ensure_month_partitions('{parent}', {MAR}, {MAR})::text AS v"),
        )
        .await;
        assert_eq!(made.as_deref(), Ok("1"), "{parent}");
    }
    for sql in [
        format!("SELECT bc_ensure_month_partitions('instances', {MAR}, {MAR})::text AS v"),
        format!("SELECT bc_detach_month('instances', {T0}, {MAR})::text AS v"),
    ] {
        let refused = call(&mut conn, &sql).await;
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("instances is not partitioned by month")),
            "{sql}: {refused:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn vps_usage_rewrites_each_closed_month_once_and_every_read_stays_the_same() {
    let (s, p) = platform_at_t0(4).await;
    GrantBuilder::new(&p)
        .slots(2)
        .term(T0 + 30 * MIN, T0 + 5 * HOUR)
        .create(&s)
        .await;
    GrantBuilder::new(&p)
        .term(T0 + HOUR, T0 + 3 * HOUR)
        .create(&s)
        .await;
    s.set_clock(T0 + 6 * HOUR).await;
    worker::once(&s, &["vps.grants"]).await;
    let events = s.events(&p.tenant_token, "acme").await;
    let records = usage_all(&s, &p.tenant_token, "acme", json!({})).await;
    assert_eq!(records.len(), 7, "{records:?}");
    let mut conn = db(&s).await;
    // Every event so far (root's too) is in January.
    let n_events = call(&mut conn, "SELECT count(*)::text AS v FROM events_2030_01").await;
    let all_events = call(&mut conn, "SELECT count(*)::text AS v FROM events").await;
    assert_eq!(n_events, all_events);
    let n_events = n_events.expect("count");
    let compacted = async |s: &Server| -> i64 {
        let err = worker::once_logged(s, &["vps.usage"]).await;
        let counts = worker::pass_counts(&err, "vps.usage").expect("the pass's line");
        let n = counts
            .get("monthsCompacted")
            .copied()
            .expect("monthsCompacted");
        if n > 0 {
            assert!(
                err.contains("closed month rewritten sorted by tenant"),
                "{err}"
            );
        }
        i64::try_from(n).expect("small")
    };
    // January is still being written.
    assert_eq!(compacted(&s).await, 0);
    // A day after it ends: one month a pass (events first), then none; the
    // empty months are left alone.
    s.set_clock(FEB + 24 * HOUR + HOUR).await;
    assert_eq!(compacted(&s).await, 1);
    assert_eq!(compacted(&s).await, 1);
    assert_eq!(compacted(&s).await, 0);
    let done = call(
        &mut conn,
        "SELECT string_agg(parent || ':' || month_start || ':' || rows, ' ' \
                           ORDER BY parent) AS v FROM compacted_months",
    )
    .await;
    assert_eq!(
        done,
        Ok(format!("events:{T0}:{n_events} usage_records:{T0}:7"))
    );
    // Every read answers what it answered before.
    let feb_events = s.events(&p.tenant_token, "acme").await;
    assert_eq!(feb_events[..events.len()], events[..]);
    assert_eq!(
        usage_all(&s, &p.tenant_token, "acme", json!({})).await,
        records
    );
    assert_eq!(
        parts(&mut conn, "usage_records").await,
        [("usage_records_2030_01".to_owned(), 7)]
    );
}
