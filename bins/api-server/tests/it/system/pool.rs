//! The database pool on the request path: one checkout per request, and a
//! connection whose session ended while it was idle is replaced before a
//! request gets it (a checkout sends no `SELECT 1`).

use std::time::Duration;

use diesel::QueryableByName;
use diesel::sql_types::{Bool, Integer};
use diesel_async::RunQueryDsl;
use serde_json::json;

use crate::support::builders::GrantBuilder;
use crate::support::db::db;
use crate::support::fixtures::platform_at_t0;
use crate::support::server::{ROOT_TOKEN, Server};

/// `bc_db_pool_wait_seconds_count`: how many connections the api-server has
/// checked out.
async fn checkouts(s: &Server) -> u64 {
    let (status, text) = s.get_text("/metrics").await;
    assert_eq!(status, 200, "{text}");
    text.lines()
        .find_map(|l| l.strip_prefix("bc_db_pool_wait_seconds_count "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pool wait count in\n{text}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_checks_out_one_connection_for_authentication_and_handler() {
    let (s, p) = platform_at_t0(4).await;
    let g = GrantBuilder::new(&p)
        .term(crate::support::clock::T0, i64::MAX / 2)
        .create(&s)
        .await;
    let before = checkouts(&s).await;
    for _ in 0..10 {
        s.call(
            ROOT_TOKEN,
            "reservationGrants/get",
            json!({ "tenantId": "root", "grantId": g }),
        )
        .await
        .ok();
    }
    assert_eq!(checkouts(&s).await - before, 10);
}

#[derive(QueryableByName)]
struct Pid {
    #[diesel(sql_type = Integer)]
    pid: i32,
}

#[derive(QueryableByName)]
struct Done {
    #[diesel(sql_type = Bool)]
    done: bool,
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connection_that_died_while_idle_is_replaced_before_it_is_handed_out() {
    let s = Server::start().await;
    let pool = storage::db::pool(s.db.url(), 1).expect("pool");
    let first = {
        let mut conn = pool.get().await.expect("connection");
        diesel::sql_query("SELECT pg_backend_pid() AS pid")
            .get_result::<Pid>(&mut *conn)
            .await
            .expect("pid")
            .pid
    };
    // The server ends the pooled connection's session while it is idle (a
    // restart or a failover would do the same to all of them).
    let mut admin = db(&s).await;
    // Waits (up to 10 s) for the backend to have exited.
    let killed = diesel::sql_query("SELECT pg_terminate_backend($1, 10000) AS done")
        .bind::<Integer, _>(first)
        .get_result::<Done>(&mut admin)
        .await
        .expect("terminate");
    assert!(killed.done);
    // The client's connection task reads the socket's end within moments.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut conn = pool.get().await.expect("connection");
    let second = diesel::sql_query("SELECT pg_backend_pid() AS pid")
        .get_result::<Pid>(&mut *conn)
        .await
        .expect("the connection handed out works")
        .pid;
    assert_ne!(second, first);
}
