//! The committed step function kept as rows (`reservation_steps`, written by
//! the triggers on `grants`) is `grants_core::capacity::steps` of the stored
//! grants after every kind of write: bulk inserts and deletes in one
//! statement, cancellations, ends moved earlier, state changes that leave
//! the term alone, on two reservations at once.

use diesel::sql_types::{BigInt, Integer, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use grants_core::{Commitment, Term};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::world::{RESERVATION, World};

const OTHER: &str = "projects/acme-project-1/zones/us-central1-a/reservations/res-b";

#[derive(diesel::QueryableByName)]
struct Step {
    #[diesel(sql_type = BigInt)]
    at: i64,
    #[diesel(sql_type = BigInt)]
    committed: i64,
}

#[derive(diesel::QueryableByName)]
struct Committed {
    #[diesel(sql_type = BigInt)]
    starts_at: i64,
    #[diesel(sql_type = BigInt)]
    ends_at: i64,
    #[diesel(sql_type = Integer)]
    slots: i32,
}

async fn run(conn: &mut AsyncPgConnection, sql: &str) {
    diesel::sql_query(sql)
        .execute(conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The stored steps of a reservation and the steps of its stored grants.
async fn both(
    conn: &mut AsyncPgConnection,
    reservation: &str,
) -> (Vec<(i64, u64)>, Vec<(i64, u64)>) {
    let stored: Vec<Step> = diesel::sql_query(
        "SELECT at, committed FROM reservation_steps WHERE reservation_id = $1 ORDER BY at",
    )
    .bind::<Text, _>(reservation)
    .load(conn)
    .await
    .unwrap_or_else(|e| panic!("steps: {e}"));
    let grants: Vec<Committed> = diesel::sql_query(
        "SELECT starts_at, ends_at, slots FROM grants \
         WHERE reservation_id = $1 AND settled_state <> 'cancelled'",
    )
    .bind::<Text, _>(reservation)
    .load(conn)
    .await
    .unwrap_or_else(|e| panic!("grants: {e}"));
    let commitments: Vec<Commitment> = grants
        .iter()
        .map(|g| {
            Commitment::new(
                Term::new(g.starts_at, g.ends_at),
                u32::try_from(g.slots).unwrap_or_else(|e| panic!("{e}")),
            )
        })
        .collect();
    (
        stored
            .iter()
            .map(|s| {
                (
                    s.at,
                    u64::try_from(s.committed).unwrap_or_else(|e| panic!("{e}")),
                )
            })
            .collect(),
        grants_core::capacity::steps(&commitments),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stored_steps_are_the_steps_of_the_stored_grants_after_every_write() {
    let mut w = World::new(4).await;
    let account = w.account.as_str().to_owned();
    let pool = w.pool.as_str().to_owned();
    run(
        &mut w.conn,
        &format!(
            "INSERT INTO reservations (account_id, reservation_id, region, zone, flavor, total, \
             provider_in_use, status, last_scanned_at) SELECT account_id, '{OTHER}', region, \
             zone, flavor, total, provider_in_use, status, last_scanned_at FROM reservations \
             WHERE reservation_id = '{RESERVATION}'"
        ),
    )
    .await;
    let mut rng = StdRng::seed_from_u64(29);
    let mut next = 0;
    for round in 0..400 {
        let conn = &mut w.conn;
        match rng.random_range(0..10) {
            // A bulk insert over both reservations, some cancelled already.
            0..=3 => {
                let n = rng.random_range(1..6);
                let start = rng.random_range(0..60i64);
                diesel::sql_query(
                    "INSERT INTO grants (grant_id, account_id, reservation_id, pool_id, \
                     tenant_id, slots, starts_at, ends_at, settled_state, created_at, \
                     metered_through) \
                     SELECT 'rgrant_' || ($1 + k), $2, \
                       CASE WHEN k % 2 = 0 THEN $3 ELSE $4 END, $5, 'acme', \
                       1 + (k * 7 + $1) % 4, $6 + (k * 5) % 9, \
                       $6 + (k * 5) % 9 + (k * 11 + $1) % 25, \
                       CASE WHEN (k + $1) % 9 = 0 THEN 'cancelled' ELSE 'scheduled' END, 0, \
                       $6 + (k * 5) % 9 \
                     FROM generate_series(0, $7 - 1) AS k",
                )
                .bind::<BigInt, _>(next)
                .bind::<Text, _>(&account)
                .bind::<Text, _>(RESERVATION)
                .bind::<Text, _>(OTHER)
                .bind::<Text, _>(&pool)
                .bind::<BigInt, _>(start)
                .bind::<BigInt, _>(n)
                .execute(conn)
                .await
                .unwrap_or_else(|e| panic!("insert: {e}"));
                next += n;
            }
            4 => {
                run(
                    conn,
                    "UPDATE grants SET settled_state = 'cancelled' WHERE grant_id = \
                 (SELECT grant_id FROM grants WHERE settled_state <> 'cancelled' \
                  ORDER BY md5(grant_id) LIMIT 1)",
                )
                .await
            }
            // An end moved earlier (root's end, a forced end).
            5 | 6 => {
                run(
                    conn,
                    "UPDATE grants SET ends_at = starts_at + (ends_at - starts_at) / 2, \
                 settled_state = 'ended', metered_through = starts_at WHERE grant_id = \
                 (SELECT grant_id FROM grants WHERE settled_state <> 'cancelled' \
                  ORDER BY md5(grant_id || ends_at) LIMIT 1)",
                )
                .await
            }
            // A state change that leaves the term alone.
            7 => {
                run(
                    conn,
                    "UPDATE grants SET settled_state = 'active' \
                 WHERE settled_state = 'scheduled'",
                )
                .await
            }
            // A bulk delete.
            _ => {
                run(
                    conn,
                    "DELETE FROM grants WHERE grant_id IN \
                 (SELECT grant_id FROM grants ORDER BY md5(grant_id || slots) LIMIT 3)",
                )
                .await
            }
        }
        for reservation in [RESERVATION, OTHER] {
            let (stored, expected) = both(&mut w.conn, reservation).await;
            assert_eq!(stored, expected, "round {round}, {reservation}");
        }
    }
    run(&mut w.conn, "DELETE FROM grants").await;
    let (stored, _) = both(&mut w.conn, RESERVATION).await;
    assert!(stored.is_empty(), "no grant, no steps: {stored:?}");
}
