//! Three worker replicas SIGKILLed at random while 30 events are delivered
//! (contract 3.13: at least once, never more often than the attempts
//! recorded).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Integer, Text};
use diesel_async::RunQueryDsl;
use serde_json::json;

use crate::accounts::google_auth::SECRETS_KEY;
use crate::support::clock::T0;
use crate::support::db::db;
use crate::support::receiver::Receiver;
use crate::support::rng::Rng;
use crate::support::server::{Options, Server};
use crate::support::worker::{self, Running};

fn replica(s: &Server) -> Running {
    let mut cmd = worker::command(s);
    cmd.args(["--only", "events.webhooks"])
        .env("BC_INTERVAL_MS", "100")
        .env("BC_WEBHOOK_LEASE", "2s")
        .env("BC_SECRETS_KEY", SECRETS_KEY);
    Running::spawn(cmd)
}

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = Text)]
    event_id: String,
    #[diesel(sql_type = Text)]
    state: String,
    #[diesel(sql_type = Integer)]
    attempts: i32,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_killed_while_delivering_lose_nothing_and_never_exceed_the_attempts() {
    let s = Server::start_with(Options {
        env: vec![("BC_SECRETS_KEY".into(), SECRETS_KEY.into())],
        ..Options::default()
    })
    .await;
    s.set_clock(T0).await;
    // Each answer takes 100 ms: the 30 deliveries take seconds, during which
    // replicas are killed.
    let r = Receiver::start_slow(100).await;
    let v = s
        .root(
            "webhooks/create",
            json!({ "url": r.url, "idempotencyKey": "crash" }),
        )
        .await
        .ok();
    let id = v["webhook"]["webhookId"].as_str().expect("id").to_owned();
    let mut rng = Rng::from_env("webhook-crash");
    let mut replicas: Vec<Running> = (0..3).map(|_| replica(&s)).collect();
    let mut conn = db(&s).await;
    let mut events = Vec::new();
    for _ in 0..30 {
        let e = s
            .root("webhooks/test", json!({ "webhookId": id }))
            .await
            .ok();
        events.push(e["eventId"].as_str().expect("event").to_owned());
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut kills = 0;
    loop {
        let pending: Count = diesel::sql_query(
            "SELECT count(*) AS n FROM webhook_deliveries WHERE state <> 'delivered'",
        )
        .get_result(&mut conn)
        .await
        .expect("count");
        let recorded: Count = diesel::sql_query("SELECT count(*) AS n FROM webhook_deliveries")
            .get_result(&mut conn)
            .await
            .expect("count");
        if pending.n == 0 && recorded.n == 30 {
            break;
        }
        assert!(Instant::now() < deadline, "not delivered in 120 s");
        tokio::time::sleep(Duration::from_millis(
            u64::try_from(rng.range(50, 300)).unwrap_or(100),
        ))
        .await;
        if kills < 40 {
            let k = rng.pick(replicas.len());
            replicas.swap_remove(k).kill().await;
            kills += 1;
            replicas.push(replica(&s));
        }
    }
    for w in replicas {
        w.kill().await;
    }
    let rows: Vec<Row> =
        diesel::sql_query("SELECT event_id, state, attempts FROM webhook_deliveries ORDER BY seq")
            .load(&mut conn)
            .await
            .expect("rows");
    let mut arrivals: BTreeMap<String, i32> = BTreeMap::new();
    for q in r.seen() {
        *arrivals
            .entry(q.json()["eventId"].as_str().unwrap_or_default().to_owned())
            .or_default() += 1;
    }
    assert_eq!(rows.len(), 30);
    for row in &rows {
        assert_eq!(row.state, "delivered");
        let got = arrivals.get(&row.event_id).copied().unwrap_or(0);
        assert!(got >= 1, "{} never arrived", row.event_id);
        assert!(
            got <= row.attempts,
            "{} arrived {got} times with {} attempts recorded",
            row.event_id,
            row.attempts
        );
    }
    let order: Vec<&str> = rows.iter().map(|r| r.event_id.as_str()).collect();
    let want: Vec<&str> = events.iter().map(String::as_str).collect();
    assert_eq!(order, want);
    assert!(kills >= 5, "only {kills} kills happened while delivering");
    let extra: i32 = arrivals.values().map(|n| n - 1).sum();
    eprintln!("webhook crash: {kills} kills, {extra} repeated arrivals of 30 events");
}
