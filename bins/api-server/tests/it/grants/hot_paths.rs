//! What a create reads under its reservation's row lock depends on what
//! overlaps the new term, not on the reservation's history: with 10,000
//! earlier grants (ended, and scheduled far later) or 10,000 deleted
//! instances on the reservation, a `reservationGrants.create` or an
//! `instances.create` fetches a handful of rows and scans no table.
//!
//! Counted with PostgreSQL's statistics of the current transaction
//! (`pg_stat_xact_user_tables`): the storage call runs inside a transaction
//! of the test's own connection, which reads the counters and never commits.

use diesel::sql_types::{BigInt, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use storage::error::StorageError;
use storage::model::idempotency::KeyedRequest;

use crate::support::builders::InstanceBuilder;
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::db::{db, hold_reservation, root_id};
use crate::support::fixtures::{create_grant, grant_body, platform_at_t0};
use crate::support::gce::FLAVOR;
use crate::support::server::Server;

const HISTORY: i64 = 10_000;
const DAY: i64 = 24 * HOUR;

#[derive(diesel::QueryableByName, Debug, Default, Clone, Copy)]
struct Reads {
    #[diesel(sql_type = BigInt)]
    seq_scan: i64,
    #[diesel(sql_type = BigInt)]
    seq_tup_read: i64,
    #[diesel(sql_type = BigInt)]
    idx_tup_fetch: i64,
}

/// The reads of `table` so far in the current transaction.
async fn reads(conn: &mut AsyncPgConnection, table: &str) -> Result<Reads, StorageError> {
    Ok(diesel::sql_query(
        "SELECT coalesce(seq_scan, 0) AS seq_scan, coalesce(seq_tup_read, 0) AS seq_tup_read, \
         coalesce(idx_tup_fetch, 0) AS idx_tup_fetch \
         FROM pg_stat_xact_user_tables WHERE relname = $1",
    )
    .bind::<Text, _>(table)
    .get_result(conn)
    .await?)
}

/// A connection inside a transaction that is never committed (a storage
/// call's own transaction becomes a savepoint of it).
async fn probe(s: &Server) -> AsyncPgConnection {
    let mut conn = db(s).await;
    conn.begin_test_transaction().await.expect("begin");
    conn
}

impl Reads {
    fn since(self, before: Reads) -> Reads {
        Reads {
            seq_scan: self.seq_scan - before.seq_scan,
            seq_tup_read: self.seq_tup_read - before.seq_tup_read,
            idx_tup_fetch: self.idx_tup_fetch - before.idx_tup_fetch,
        }
    }
}

async fn execute(conn: &mut AsyncPgConnection, sql: &str) {
    diesel::sql_query(sql)
        .execute(conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

#[tokio::test]
async fn a_grant_create_reads_only_what_overlaps_its_term() {
    let (s, p) = platform_at_t0(10).await;
    let mut conn = db(&s).await;
    // Half ended a month ago, half scheduled a month ahead: none overlaps
    // the new term, two hours from now.
    diesel::sql_query(
        "INSERT INTO grants (grant_id, account_id, reservation_id, pool_id, tenant_id, slots, \
         starts_at, ends_at, settled_state, reason, created_at, ended_at, metered_through) \
         SELECT 'rgrant_history' || i, $1, $2, $3, 'acme', 10, s, s + 30 * 60000, \
           CASE WHEN past THEN 'ended' ELSE 'scheduled' END, \
           CASE WHEN past THEN 'term-over' END, $4 - 40 * $5, \
           CASE WHEN past THEN s + 30 * 60000 END, \
           CASE WHEN past THEN s + 30 * 60000 ELSE s END \
         FROM (SELECT i, i % 2 = 0 AS past, \
                 CASE WHEN i % 2 = 0 THEN $4 - 30 * $5 + i * 60000 \
                      ELSE $4 + 30 * $5 + i * 60000 END AS s \
               FROM generate_series(1, $6) AS i) AS h",
    )
    .bind::<Text, _>(&p.account)
    .bind::<Text, _>(&p.reservation)
    .bind::<Text, _>(&p.pool)
    .bind::<BigInt, _>(T0)
    .bind::<BigInt, _>(DAY)
    .bind::<BigInt, _>(HISTORY)
    .execute(&mut conn)
    .await
    .expect("insert the history");
    execute(&mut conn, "ANALYZE grants").await;

    let body = grant_body(&p, 4, T0 + 2 * HOUR, T0 + 5 * HOUR, "hot-1");
    let hash = storage::ids::request_hash(&body);
    let mut conn = probe(&s).await;
    let before = reads(&mut conn, "grants").await.expect("stats");
    let new = storage::ops::grants::NewGrant {
        account_id: &p.account,
        reservation_id: &p.reservation,
        grant_tenant_id: "acme",
        project_id: None,
        slots: 4,
        starts_at: T0 + 2 * HOUR,
        ends_at: T0 + 5 * HOUR,
    };
    let key = KeyedRequest {
        tenant_id: "root",
        method: "reservationGrants.create",
        key: "hot-1",
        request_hash: &hash,
    };
    storage::ops::grants::create(&mut conn, &root_id(), new, key, T0)
        .await
        .expect("create");
    let seen = reads(&mut conn, "grants")
        .await
        .expect("stats")
        .since(before);
    drop(conn);
    assert_eq!(seen.seq_scan, 0, "no sequential scan of grants: {seen:?}");
    assert!(
        seen.idx_tup_fetch <= 5,
        "a create fetches the grants overlapping its term, not the {HISTORY} earlier ones: \
         {seen:?}"
    );

    // The history still counts where it overlaps: a term reaching into the
    // first scheduled grant (10 slots of 10) is refused, over HTTP.
    let first_future = T0 + 30 * DAY + 60_000;
    let refused = create_grant(
        &s,
        grant_body(&p, 1, first_future - HOUR, first_future + MIN, "hot-2"),
    )
    .await;
    refused.err(409, "CAPACITY_UNAVAILABLE");
    let fits = create_grant(
        &s,
        grant_body(&p, 10, first_future - HOUR, first_future, "hot-3"),
    )
    .await;
    assert_eq!(fits.status, 200, "{:?}", fits.body);
}

#[tokio::test]
async fn a_grant_create_reads_the_steps_not_the_grants_overlapping_its_term() {
    let (s, p) = platform_at_t0(2_000).await;
    let mut conn = db(&s).await;
    // 1,000 grants of one slot, every one over the new term.
    diesel::sql_query(
        "INSERT INTO grants (grant_id, account_id, reservation_id, pool_id, tenant_id, slots, \
         starts_at, ends_at, settled_state, created_at, metered_through) \
         SELECT 'rgrant_overlap' || i, $1, $2, $3, 'acme', 1, $4 + i, $4 + 10 * $5 + i, \
           'scheduled', $4, $4 + i FROM generate_series(1, 1000) AS i",
    )
    .bind::<Text, _>(&p.account)
    .bind::<Text, _>(&p.reservation)
    .bind::<Text, _>(&p.pool)
    .bind::<BigInt, _>(T0 + HOUR)
    .bind::<BigInt, _>(HOUR)
    .execute(&mut conn)
    .await
    .expect("insert the overlapping grants");
    execute(&mut conn, "ANALYZE grants").await;

    let term = (T0 + 2 * HOUR, T0 + 3 * HOUR);
    let body = grant_body(&p, 1_000, term.0, term.1, "over-1");
    let hash = storage::ids::request_hash(&body);
    let mut conn = probe(&s).await;
    let before = (
        reads(&mut conn, "grants").await.expect("stats"),
        reads(&mut conn, "reservation_steps").await.expect("stats"),
    );
    let new = storage::ops::grants::NewGrant {
        account_id: &p.account,
        reservation_id: &p.reservation,
        grant_tenant_id: "acme",
        project_id: None,
        slots: 1_000,
        starts_at: term.0,
        ends_at: term.1,
    };
    let key = KeyedRequest {
        tenant_id: "root",
        method: "reservationGrants.create",
        key: "over-1",
        request_hash: &hash,
    };
    storage::ops::grants::create(&mut conn, &root_id(), new, key, T0)
        .await
        .expect("create");
    let grants = reads(&mut conn, "grants")
        .await
        .expect("stats")
        .since(before.0);
    let steps = reads(&mut conn, "reservation_steps")
        .await
        .expect("stats")
        .since(before.1);
    drop(conn);
    assert_eq!(
        grants.seq_scan + steps.seq_scan,
        0,
        "no sequential scan: {grants:?} {steps:?}"
    );
    assert!(
        grants.idx_tup_fetch <= 5,
        "a create fetches no grant overlapping its term (1,000 do): {grants:?}"
    );
    assert!(
        steps.idx_tup_fetch <= 10,
        "the capacity read fetches the steps of the term: {steps:?}"
    );

    // The peak still counts every one of them, over HTTP.
    let body = grant_body(&p, 1_000, term.0, term.1, "over-2");
    assert_eq!(create_grant(&s, body).await.status, 200);
    let refused = create_grant(&s, grant_body(&p, 1, term.0, term.1, "over-3")).await;
    let d = refused.err(409, "CAPACITY_UNAVAILABLE");
    assert_eq!(
        (d["total"].clone(), d["granted"].clone()),
        (2_000.into(), 2_000.into())
    );
}

#[tokio::test]
async fn an_instance_create_reads_only_the_seated_instances() {
    let (s, p) = platform_at_t0(10).await;
    // A live grant of 5 slots, and one instance in it to copy the history
    // from.
    let granted = create_grant(&s, grant_body(&p, 5, T0, T0 + 10 * DAY, "live")).await;
    assert_eq!(granted.status, 200, "{:?}", granted.body);
    let first = InstanceBuilder::new(&p).key("i-first").create(&s).await;
    let first_id = first["instanceId"]
        .as_str()
        .expect("instance id")
        .to_owned();
    let mut conn = db(&s).await;
    diesel::sql_query(
        "INSERT INTO instances (instance_id, tenant_id, project_id, pool_id, flavor, name, \
         billing, state, placement_kind, grant_id, account_id, reservation_id, created_at, \
         deleted_at, usage_metered_through) \
         SELECT 'inst_history' || i, tenant_id, project_id, pool_id, flavor, 'history' || i, \
           billing, 'deleted', placement_kind, grant_id, account_id, reservation_id, \
           created_at - $2 + i, created_at - $2 + i + 1, created_at - $2 + i + 1 \
         FROM instances, generate_series(1, $3) AS i WHERE instance_id = $1",
    )
    .bind::<Text, _>(&first_id)
    .bind::<BigInt, _>(DAY)
    .bind::<BigInt, _>(HISTORY)
    .execute(&mut conn)
    .await
    .expect("insert the deleted instances");
    execute(&mut conn, "ANALYZE instances").await;

    let body = serde_json::json!({"tenantId": "acme", "poolId": p.pool, "flavor": FLAVOR});
    let hash = storage::ids::request_hash(&body);
    let mut conn = probe(&s).await;
    let before = reads(&mut conn, "instances").await.expect("stats");
    let acme = storage::ids::TenantId::parse("acme").expect("tenant id");
    let pool = storage::ids::PoolId::parse(&p.pool).expect("pool id");
    let new = storage::ops::instances::NewInstance {
        tenant_id: &acme,
        pool_id: &pool,
        flavor: FLAVOR,
        project_id: None,
        name: None,
        billing: grants_core::Billing::Standard,
        interruptible: false,
    };
    let key = KeyedRequest {
        tenant_id: "acme",
        method: "instances.create",
        key: "i-hot",
        request_hash: &hash,
    };
    let created = storage::ops::instances::create(&mut conn, &root_id(), new, key, T0)
        .await
        .expect("create");
    assert_eq!(
        created.value.placement_kind.as_str(),
        "grant",
        "it lands in the grant"
    );
    let seen = reads(&mut conn, "instances")
        .await
        .expect("stats")
        .since(before);
    drop(conn);
    assert_eq!(
        seen.seq_scan, 0,
        "no sequential scan of instances: {seen:?}"
    );
    assert!(
        seen.idx_tup_fetch <= 10,
        "a create fetches the seated instances, not the {HISTORY} deleted ones: {seen:?}"
    );
}

/// The checks that need no lock run before the reservation's row lock; the
/// create then checks the reservation again as locked. A reservation that
/// stops being ready while the create waits for its lock refuses it, and
/// nothing is written.
#[tokio::test]
async fn a_reservation_that_changes_while_a_create_waits_is_checked_again() {
    let (s, p) = platform_at_t0(10).await;
    let mut holder = hold_reservation(&s, &p.account, &p.reservation).await;
    diesel::sql_query(
        "UPDATE reservations SET status = 'not-ready' \
         WHERE account_id = $1 AND reservation_id = $2",
    )
    .bind::<Text, _>(&p.account)
    .bind::<Text, _>(&p.reservation)
    .execute(&mut holder)
    .await
    .expect("mark not ready");
    let create = create_grant(&s, grant_body(&p, 1, T0 + HOUR, T0 + 2 * HOUR, "waits"));
    let release = async {
        // Once the create waits for the row lock it has passed the lockless
        // checks, which read the reservation as committed: still ready.
        let mut waited = false;
        for _ in 0..200 {
            let waiting: i64 =
                diesel::sql_query("SELECT count(*) AS n FROM pg_locks WHERE NOT granted")
                    .get_result::<Count>(&mut holder)
                    .await
                    .expect("pg_locks")
                    .n;
            if waiting > 0 {
                waited = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        execute(&mut holder, "COMMIT").await;
        waited
    };
    let (answer, waited) = tokio::join!(create, release);
    assert!(waited, "the create waited for the reservation's row lock");
    let details = answer.err(409, "INVALID_STATE");
    assert_eq!(details["status"], "not-ready", "{details}");
    let mut conn = db(&s).await;
    let grants: i64 = diesel::sql_query("SELECT count(*) AS n FROM grants")
        .get_result::<Count>(&mut conn)
        .await
        .expect("count")
        .n;
    assert_eq!(grants, 0, "nothing was written");
}

#[derive(diesel::QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}
