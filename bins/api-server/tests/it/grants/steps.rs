//! The committed step function kept as rows (`reservation_steps`) is exact
//! after every change a grant can go through (what a create's capacity check
//! reads instead of the grants overlapping its term: `hot_paths`).

use diesel::sql_types::{BigInt, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::support::builders::GrantBuilder;
use crate::support::calls::delete_tenant;
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::db::db;
use crate::support::fixtures::{
    create_grant, end_grant, grant_body, platform_at_t0, scan, tenant_with_pool,
};
use crate::support::server::Server;

#[derive(diesel::QueryableByName, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Step {
    #[diesel(sql_type = Text)]
    reservation_id: String,
    #[diesel(sql_type = BigInt)]
    at: i64,
    #[diesel(sql_type = BigInt)]
    committed: i64,
}

/// The rows as stored.
async fn stored(conn: &mut AsyncPgConnection) -> Vec<Step> {
    diesel::sql_query(
        "SELECT reservation_id, at, committed FROM reservation_steps \
         ORDER BY reservation_id, at",
    )
    .load(conn)
    .await
    .expect("steps")
}

/// The rows recomputed from the grants, by definition: at every instant
/// where the slots of the non-cancelled grants change, their running sum.
async fn recomputed(conn: &mut AsyncPgConnection) -> Vec<Step> {
    diesel::sql_query(
        "SELECT reservation_id, at, \
           (sum(delta) OVER (PARTITION BY account_id, reservation_id ORDER BY at))::bigint \
             AS committed \
         FROM (SELECT account_id, reservation_id, at, sum(d) AS delta FROM ( \
                 SELECT account_id, reservation_id, starts_at AS at, slots::bigint AS d \
                   FROM grants WHERE settled_state <> 'cancelled' AND ends_at > starts_at \
                 UNION ALL \
                 SELECT account_id, reservation_id, ends_at, -slots::bigint \
                   FROM grants WHERE settled_state <> 'cancelled' AND ends_at > starts_at) e \
               GROUP BY account_id, reservation_id, at) c \
         WHERE delta <> 0 ORDER BY reservation_id, at",
    )
    .load(conn)
    .await
    .expect("recomputed steps")
}

async fn assert_exact(s: &Server, after: &str) -> Vec<Step> {
    let mut conn = db(s).await;
    let rows = stored(&mut conn).await;
    assert_eq!(rows, recomputed(&mut conn).await, "the steps after {after}");
    rows
}

#[tokio::test(flavor = "multi_thread")]
async fn the_steps_follow_every_change_of_the_grants() {
    let (s, p) = platform_at_t0(10).await;
    tenant_with_pool(&s, "bob", &p.pool).await;
    let bob = "bob".to_owned();
    // Overlapping, adjacent and nested terms; one started, the others later.
    let now_grant = GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    let later = GrantBuilder::new(&p)
        .slots(3)
        .term(T0 + 2 * HOUR, T0 + 6 * HOUR)
        .create(&s)
        .await;
    GrantBuilder::new(&p)
        .slots(3)
        .term(T0 + 6 * HOUR, T0 + 8 * HOUR)
        .create(&s)
        .await;
    GrantBuilder::new(&p)
        .grantee(&bob)
        .term(T0 + 3 * HOUR, T0 + 4 * HOUR)
        .create(&s)
        .await;
    GrantBuilder::new(&p)
        .grantee(&bob)
        .slots(4)
        .term(T0 + 5 * HOUR, T0 + 9 * HOUR)
        .create(&s)
        .await;
    let rows = assert_exact(&s, "the creates").await;
    let levels: Vec<(i64, i64)> = rows.iter().map(|r| (r.at - T0, r.committed)).collect();
    // At 6 h one grant of 3 ends as another of 3 starts: no row there.
    assert_eq!(
        levels,
        [
            (0, 2),
            (2 * HOUR, 5),
            (3 * HOUR, 6),
            (4 * HOUR, 5),
            (5 * HOUR, 9),
            (8 * HOUR, 6),
            (9 * HOUR, 2),
            (10 * HOUR, 0),
        ]
    );
    // A refusal writes nothing.
    create_grant(&s, grant_body(&p, 2, T0 + 5 * HOUR, T0 + 6 * HOUR, "full"))
        .await
        .err(409, "CAPACITY_UNAVAILABLE");
    assert_eq!(assert_exact(&s, "a refused create").await, rows);

    // Root ends a started grant (its end moves to now) and cancels one that
    // has not started.
    s.set_clock(T0 + 30 * MIN).await;
    assert_eq!(end_grant(&s, &p.account, &now_grant).await.status, 200);
    assert_eq!(end_grant(&s, &p.account, &later).await.status, 200);
    assert_exact(&s, "root's ends").await;

    // The grantee's deletion cancels bob's grants.
    assert_eq!(delete_tenant(&s, &bob).await.status, 200);
    assert_exact(&s, "the grantee's deletion").await;

    // The reservation's loss ends or cancels the rest.
    GrantBuilder::new(&p)
        .term(T0 + 30 * MIN, T0 + 2 * HOUR)
        .create(&s)
        .await;
    s.set_clock(T0 + HOUR).await;
    p.gce.delete("res-a").await;
    scan(&s, &p.account).await;
    let rows = assert_exact(&s, "the reservation's loss").await;
    assert!(
        rows.iter().all(|r| r.at <= T0 + HOUR),
        "nothing is committed after the loss: {rows:?}"
    );
}
