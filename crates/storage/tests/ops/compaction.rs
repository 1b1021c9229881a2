//! Closed months of the logs rewritten sorted by tenant
//! (`ops::partitions::compact_next`, `bc_compact_month`): the rows, indexes
//! and constraints stay what they were, one tenant's page reads a few heap
//! pages instead of one per row, each month is rewritten once, and a write
//! racing the rewrite is either in it or refused, never lost.
//!
//! One more property is not asserted here, as it is timing: while the swap
//! waits for the log's lock, the log's readers and writers queue behind it
//! for at most 50 ms a try (`bc_compact_month`).

use std::time::Duration;

use diesel::sql_types::{BigInt, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use storage::ops::partitions::{Compacted, compact_next};
use storage::test_db::TestDatabase;

/// 2030-01-01, 2030-02-01 and 2030-03-01 (ms, UTC).
const JAN: i64 = 1_893_456_000_000;
const FEB: i64 = JAN + 31 * DAY;
const MAR: i64 = FEB + 28 * DAY;
const DAY: i64 = 86_400_000;
/// Rows of each log, spread evenly from `JAN` over 90 days.
const ROWS: i64 = 6_000;
/// Tenants, interleaved row by row as a platform writes them.
const TENANTS: i64 = 20;

#[derive(diesel::QueryableByName)]
struct Num {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(diesel::QueryableByName)]
struct Txt {
    #[diesel(sql_type = Text)]
    t: String,
}

async fn run(conn: &mut AsyncPgConnection, sql: &str) {
    diesel::sql_query(sql)
        .execute(conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn num(conn: &mut AsyncPgConnection, sql: &str) -> i64 {
    diesel::sql_query(sql)
        .get_result::<Num>(conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .n
}

async fn text(conn: &mut AsyncPgConnection, sql: &str) -> String {
    diesel::sql_query(sql)
        .get_result::<Txt>(conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .t
}

async fn connect(db: &TestDatabase) -> AsyncPgConnection {
    storage::db::establish(db.url())
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

/// The rows of `table`.
async fn rows(conn: &mut AsyncPgConnection, table: &str) -> i64 {
    num(conn, &format!("SELECT count(*) AS n FROM {table}")).await
}

/// A connection in a transaction that has run `sql` (and holds what it
/// took) until it ends.
async fn holding(db: &TestDatabase, sql: &str) -> AsyncPgConnection {
    let mut conn = connect(db).await;
    run(&mut conn, "BEGIN").await;
    run(&mut conn, sql).await;
    conn
}

/// Every month due at `now`, rewritten one call at a time.
async fn compact_all(conn: &mut AsyncPgConnection, now: i64) -> Vec<Compacted> {
    let mut done = Vec::new();
    while let Some(month) = compact_next(conn, now)
        .await
        .unwrap_or_else(|e| panic!("compact: {e}"))
    {
        done.push(month);
        assert!(done.len() <= 30, "a month rewritten twice: {done:?}");
    }
    done
}

/// A database with the months of January to March 2030 and [`ROWS`] usage
/// records and events in them, [`TENANTS`] tenants interleaved.
async fn seeded() -> (TestDatabase, AsyncPgConnection) {
    let db = TestDatabase::new().await;
    let mut conn = connect(&db).await;
    let c = &mut conn;
    for table in ["usage_records", "events"] {
        run(
            c,
            &format!("SELECT bc_ensure_month_partitions('{table}', {JAN}, {MAR})"),
        )
        .await;
    }
    let step = 90 * DAY / ROWS;
    run(
        c,
        &format!(
            "INSERT INTO usage_records \
             SELECT g + 1, 'u' || g, 't' || (g % {TENANTS}), NULL, 'vm.grant.slot.hours', \
                    1000000, 'slot-hours', {JAN} + g * {step}, {JAN} + g * {step} + 3600000, \
                    'g' || g, NULL, 'grant:g' || g, 'r', \
                    jsonb_build_object('pad', repeat('x', 200)), {JAN} + g * {step} \
             FROM generate_series(0::bigint, {ROWS} - 1) AS g"
        ),
    )
    .await;
    run(
        c,
        &format!(
            "INSERT INTO events \
             SELECT 't' || (g % {TENANTS}), g / {TENANTS} + 1, 'e' || g, \
                    'reservation-grant.created', \
                    jsonb_build_object('grantId', 'g' || g, 'pad', repeat('x', 200)), \
                    {JAN} + g * {step} \
             FROM generate_series(0::bigint, {ROWS} - 1) AS g"
        ),
    )
    .await;
    (db, conn)
}

/// Every row of a month, in a fixed order, hashed.
async fn digest(conn: &mut AsyncPgConnection, part: &str) -> String {
    text(
        conn,
        &format!("SELECT md5(string_agg(r::text, '|' ORDER BY r::text)) AS t FROM {part} r"),
    )
    .await
}

/// The heap pages holding the first 100 rows of tenant `t3` in a month.
async fn pages_of_a_tenant_page(conn: &mut AsyncPgConnection, part: &str) -> i64 {
    num(
        conn,
        &format!(
            "SELECT count(DISTINCT (ctid::text::point)[0])::bigint AS n \
             FROM (SELECT ctid FROM {part} WHERE tenant_id = 't3' ORDER BY seq LIMIT 100) s"
        ),
    )
    .await
}

/// The rows of `part` and the first page of tenant `t3` read through the
/// parent, hashed.
async fn tenant_page(conn: &mut AsyncPgConnection, parent: &str) -> String {
    text(
        conn,
        &format!(
            "SELECT md5(string_agg(r::text, '|' ORDER BY r.seq)) AS t FROM \
             (SELECT * FROM {parent} WHERE tenant_id = 't3' AND seq > 10 \
              ORDER BY seq LIMIT 100) r"
        ),
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn closed_months_are_rewritten_sorted_by_tenant_once_with_rows_indexes_and_keys_kept() {
    let (db, mut conn) = seeded().await;
    let c = &mut conn;
    let parts = [
        "usage_records_2030_01",
        "usage_records_2030_02",
        "events_2030_01",
        "events_2030_02",
    ];
    let mut before = Vec::new();
    for part in parts {
        before.push(digest(c, part).await);
        let pages = pages_of_a_tenant_page(c, part).await;
        assert!(
            pages >= 50,
            "{part}: a tenant's page spans {pages} heap pages"
        );
    }
    let pages_before = (
        tenant_page(c, "usage_records").await,
        tenant_page(c, "events").await,
    );
    let now = MAR + 2 * DAY;

    // Another worker's rewrite is not waited for, and nothing is recorded.
    let mut other = holding(
        &db,
        "SELECT pg_advisory_xact_lock(hashtext('bc_compact_month'))",
    )
    .await;
    let busy = compact_next(c, now).await.expect("compact");
    assert_eq!(busy.map(|m| (m.month_start, m.rows)), Some((JAN, None)));
    run(&mut other, "ROLLBACK").await;
    assert_eq!(rows(c, "compacted_months").await, 0);

    // Oldest month first, one a call, until none is due; March has not
    // ended a day ago, so it stays as written.
    let done = compact_all(c, now).await;
    let month = |parent: &str, month_start, n| Compacted {
        parent: parent.to_owned(),
        month_start,
        rows: Some(n),
    };
    let in_jan = rows(c, "events_2030_01").await;
    let in_feb = rows(c, "events_2030_02").await;
    assert_eq!(
        done,
        [
            month("events", JAN, in_jan),
            month("usage_records", JAN, in_jan),
            month("events", FEB, in_feb),
            month("usage_records", FEB, in_feb),
        ]
    );
    assert_eq!(in_jan + in_feb + rows(c, "events_2030_03").await, ROWS);

    // The same rows; one tenant's page now reads a few heap pages.
    for (part, digest_before) in parts.iter().zip(&before) {
        assert_eq!(&digest(c, part).await, digest_before, "{part}");
        let pages = pages_of_a_tenant_page(c, part).await;
        assert!(
            pages <= 6,
            "{part}: a tenant's page spans {pages} heap pages"
        );
    }
    assert!(pages_of_a_tenant_page(c, "usage_records_2030_03").await >= 50);
    assert_eq!(
        (
            tenant_page(c, "usage_records").await,
            tenant_page(c, "events").await
        ),
        pages_before
    );

    // Still partitions of their logs, every index of the parent attached.
    for parent in ["usage_records", "events"] {
        let partitions = num(
            c,
            &format!(
                "SELECT count(*) AS n FROM pg_inherits WHERE inhparent = '{parent}'::regclass"
            ),
        )
        .await;
        let unattached = num(
            c,
            &format!(
                "SELECT count(*) AS n FROM pg_index x \
                 JOIN pg_inherits p ON p.inhrelid = x.indrelid \
                 WHERE p.inhparent = '{parent}'::regclass \
                   AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = x.indexrelid)"
            ),
        )
        .await;
        let parent_indexes = num(
            c,
            &format!("SELECT count(*) AS n FROM pg_index WHERE indrelid = '{parent}'::regclass"),
        )
        .await;
        let partition_indexes = num(
            c,
            &format!(
                "SELECT count(*) AS n FROM pg_index x \
                 JOIN pg_inherits p ON p.inhrelid = x.indrelid \
                 WHERE p.inhparent = '{parent}'::regclass"
            ),
        )
        .await;
        assert_eq!(unattached, 0, "{parent}");
        assert_eq!(partition_indexes, partitions * parent_indexes, "{parent}");
    }
    // The exactly-once key still holds in a rewritten month.
    let duplicate = diesel::sql_query(
        "INSERT INTO usage_records SELECT 999999, 'other', tenant_id, project_id, meter, \
         quantity_micro, unit, period_start, period_end, grant_id, instance_id, subject, \
         target, tags, recorded_at FROM usage_records_2030_01 LIMIT 1",
    )
    .execute(c)
    .await
    .expect_err("a second record of the same meter, subject, target and hour");
    assert!(
        duplicate.to_string().contains("duplicate key"),
        "{duplicate}"
    );

    // Never twice; a month that ended less than a day ago is refused.
    assert_eq!(
        compact_next(c, now + 365 * DAY)
            .await
            .expect("compact")
            .map(|m| m.month_start),
        Some(MAR)
    );
    let again = num(
        c,
        &format!("SELECT coalesce(bc_compact_month('events', {JAN}, {now}), -1) AS n"),
    )
    .await;
    assert_eq!(again, -1);
    let recent = diesel::sql_query(format!(
        "SELECT bc_compact_month('usage_records', {MAR}, {})",
        MAR + 31 * DAY
    ))
    .execute(c)
    .await
    .expect_err("April 1 is less than a day after March");
    assert!(
        recent.to_string().contains("too recent to compact"),
        "{recent}"
    );
    assert_eq!(rows(c, "compacted_months").await, 5);
}

/// Waits until some backend of this database waits for a lock.
async fn until_one_waits(conn: &mut AsyncPgConnection) {
    for _ in 0..600 {
        let waiting = num(
            conn,
            "SELECT count(*) AS n FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .await;
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no backend waited for a lock within 30 s");
}

/// A usage record of January no seeded row collides with.
const LATE_RECORD: &str = "INSERT INTO usage_records SELECT 500000, 'late', 't3', NULL, \
     'vm.grant.slot.hours', 1000000, 'slot-hours', 1893456000000 + 7200000, \
     1893456000000 + 10800000, 'late', NULL, 'grant:late', 'r', '{}', 0";

#[tokio::test(flavor = "multi_thread")]
async fn a_write_in_flight_holds_the_rewrite_off_and_is_then_in_it() {
    let (db, mut conn) = seeded().await;
    let now = MAR + 2 * DAY;
    let jan = rows(&mut conn, "usage_records_2030_01").await;
    let mut writer = holding(&db, LATE_RECORD).await;
    // Events' January goes first and does not wait; the usage month waits
    // for the writer, gives up after its lock timeout and changes nothing.
    let first = compact_next(&mut conn, now).await.expect("events");
    assert_eq!(first.map(|m| m.parent), Some("events".to_owned()));
    let err = compact_next(&mut conn, now)
        .await
        .expect_err("the month's lock is held by the writer");
    assert_eq!(err.kind, storage::ErrorKind::Unavailable, "{err}");
    assert!(err.to_string().contains("lock timeout"), "{err}");
    assert_eq!(
        num(
            &mut conn,
            "SELECT count(*) AS n FROM compacted_months WHERE parent = 'usage_records'"
        )
        .await,
        0
    );
    run(&mut writer, "COMMIT").await;
    let done = compact_next(&mut conn, now).await.expect("usage");
    assert_eq!(
        done.map(|m| (m.parent, m.rows)),
        Some(("usage_records".to_owned(), Some(jan + 1)))
    );
    assert_eq!(
        num(
            &mut conn,
            "SELECT count(*) AS n FROM usage_records_2030_01 WHERE usage_id = 'late'"
        )
        .await,
        1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_arriving_while_the_month_is_swapped_lands_in_the_sorted_month() {
    let (db, mut conn) = seeded().await;
    let now = MAR + 2 * DAY;
    let jan = rows(&mut conn, "usage_records_2030_01").await;
    run(&mut conn, "BEGIN").await;
    let copied = num(
        &mut conn,
        &format!("SELECT bc_compact_month('usage_records', {JAN}, {now}) AS n"),
    )
    .await;
    assert_eq!(copied, jan);
    // The rewrite holds the log's lock until it commits: the write waits.
    let mut writer = connect(&db).await;
    let write =
        tokio::spawn(async move { diesel::sql_query(LATE_RECORD).execute(&mut writer).await });
    let mut watcher = connect(&db).await;
    until_one_waits(&mut watcher).await;
    run(&mut conn, "COMMIT").await;
    write
        .await
        .expect("join")
        .expect("the write succeeds once the swap commits");
    let c = &mut conn;
    assert_eq!(rows(c, "usage_records_2030_01").await, jan + 1);
    assert_eq!(
        num(
            c,
            "SELECT count(*) AS n FROM usage_records WHERE usage_id = 'late'"
        )
        .await,
        1
    );
    assert!(pages_of_a_tenant_page(c, "usage_records_2030_01").await <= 6);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_routed_to_the_month_during_the_copy_is_written_once_or_refused_whole() {
    let (db, mut conn) = seeded().await;
    let now = MAR + 2 * DAY;
    let jan = rows(&mut conn, "usage_records_2030_01").await;
    // The rewrite's first step: the month locked against writes.
    run(&mut conn, "BEGIN").await;
    run(&mut conn, "LOCK TABLE usage_records_2030_01 IN SHARE MODE").await;
    // A write routed to the month waits for it, holding the log's lock.
    let mut writer = connect(&db).await;
    let write =
        tokio::spawn(async move { diesel::sql_query(LATE_RECORD).execute(&mut writer).await });
    let mut watcher = connect(&db).await;
    until_one_waits(&mut watcher).await;
    // The rewrite then needs the log's lock, which the writer holds: its
    // tries run out and it rolls back, or PostgreSQL's deadlock check (run
    // once by the writer after a second of waiting) finds the rewrite waiting
    // and fails the writer. Either way one of the two fails, whole.
    let rewrite = diesel::sql_query(format!(
        "SELECT bc_compact_month('usage_records', {JAN}, {now})"
    ))
    .execute(&mut conn)
    .await;
    run(
        &mut conn,
        if rewrite.is_ok() {
            "COMMIT"
        } else {
            "ROLLBACK"
        },
    )
    .await;
    let write = write.await.expect("join");
    let failed: Vec<String> = [rewrite.as_ref().err(), write.as_ref().err()]
        .into_iter()
        .flatten()
        .map(ToString::to_string)
        .collect();
    assert_eq!(failed.len(), 1, "exactly one fails: {failed:?}");
    assert!(
        failed[0].contains("deadlock detected")
            || failed[0].contains("lock timeout: usage_records stayed in use"),
        "{failed:?}"
    );
    let c = &mut conn;
    let late = num(
        c,
        "SELECT count(*) AS n FROM usage_records WHERE usage_id = 'late'",
    )
    .await;
    let compacted = rows(c, "compacted_months").await;
    assert_eq!(late, i64::from(write.is_ok()));
    assert_eq!(compacted, i64::from(rewrite.is_ok()));
    assert_eq!(rows(c, "usage_records_2030_01").await, jan + late);
    // Whichever failed, the next pass finishes the job with every row.
    if rewrite.is_err() {
        let done = compact_all(c, now).await;
        let usage = done
            .iter()
            .find(|m| m.parent == "usage_records" && m.month_start == JAN);
        assert_eq!(usage.map(|m| m.rows), Some(Some(jan + 1)), "{done:?}");
    }
    assert!(pages_of_a_tenant_page(c, "usage_records_2030_01").await <= 6);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_page_without_filters_answers_what_the_query_built_for_it_answers() {
    use storage::ops::metering::{UsageFilter, list};
    let (_db, mut conn) = seeded().await;
    let c = &mut conn;
    let ids = |page: &(Vec<storage::ops::metering::UsageRecord>, bool)| {
        let seqs: Vec<i64> = page.0.iter().map(|r| r.seq).collect();
        (seqs, page.1)
    };
    for round in 0..2 {
        for after in [0, 1, 7, 999, 2_500, 5_950, 5_999, 6_000, 10_000] {
            for (tenant, limit) in [(Some("t3"), 100), (Some("t19"), 7), (None, 100), (None, 1)] {
                let plain = UsageFilter {
                    tenant_id: tenant.map(str::to_owned),
                    ..UsageFilter::default()
                };
                // `from: 0` holds for every record: the same page, read by
                // the query built for the filters.
                let built = UsageFilter {
                    from: Some(0),
                    ..plain.clone()
                };
                let a = list(c, &plain, after, limit).await.expect("page");
                let b = list(c, &built, after, limit).await.expect("built");
                assert_eq!(ids(&a), ids(&b), "{tenant:?} after {after}");
                assert_eq!(
                    format!("{:?}", a.0),
                    format!("{:?}", b.0),
                    "{tenant:?} after {after}"
                );
                if let Some(t) = tenant {
                    assert!(a.0.iter().all(|r| r.tenant_id == t));
                }
            }
        }
        // The same once the closed months are sorted by tenant.
        if round == 0 {
            compact_all(c, MAR + 2 * DAY).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vacuum_of_another_month_does_not_hold_the_swap_off() {
    let (db, mut conn) = seeded().await;
    let now = MAR + 2 * DAY;
    // What (auto)vacuum holds on the month it works on, for seconds.
    let mut vacuum = holding(
        &db,
        "LOCK TABLE usage_records_2030_03, events_2030_03 IN SHARE UPDATE EXCLUSIVE MODE",
    )
    .await;
    let first = compact_next(&mut conn, now).await.expect("events' January");
    let second = compact_next(&mut conn, now).await.expect("usage's January");
    assert_eq!(
        [first, second].map(|m| m.map(|m| (m.parent, m.month_start))),
        [
            Some(("events".to_owned(), JAN)),
            Some(("usage_records".to_owned(), JAN))
        ]
    );
    run(&mut vacuum, "ROLLBACK").await;
}
