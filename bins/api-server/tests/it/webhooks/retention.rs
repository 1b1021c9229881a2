//! Deliveries and their attempts are kept `BC_WEBHOOK_RETENTION` (default
//! 30 days) after their last attempt, then removed by the
//! `events.webhooks` pass (contract 3.13 r4, 8.2).

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Text};
use diesel_async::RunQueryDsl;
use serde_json::{Value, json};

use super::delivery::{deliver, deliver_with, server, test_event, webhook};
use crate::accounts::google_auth::SECRETS_KEY;
use crate::support::clock::{MIN, T0};
use crate::support::db::db;
use crate::support::receiver::Receiver;
use crate::support::server::Server;
use crate::support::worker;

const DAY: i64 = 24 * 60 * MIN;

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// The webhook's (deliveries, attempts) rows.
async fn rows(s: &Server, id: &str) -> (i64, i64) {
    let mut conn = db(s).await;
    let mut count = async |sql: &str| {
        diesel::sql_query(sql)
            .bind::<Text, _>(id)
            .get_result::<Count>(&mut conn)
            .await
            .expect("count")
            .n
    };
    (
        count("SELECT count(*) AS n FROM webhook_deliveries WHERE webhook_id = $1").await,
        count("SELECT count(*) AS n FROM webhook_attempts WHERE webhook_id = $1").await,
    )
}

async fn attempts(s: &Server, id: &str) -> Vec<Value> {
    let page = s
        .root("webhooks/deliveries", json!({ "webhookId": id }))
        .await
        .ok();
    page["items"].as_array().expect("items").clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn deliveries_are_removed_a_retention_after_their_last_attempt() {
    let s = server().await;
    let r = Receiver::start().await;
    let (id, _) = webhook(&s, &r.url, None).await;
    // The first fails once and is delivered a minute later; the second is
    // delivered 20 days on.
    r.answer(&[(500, None)]);
    let old = test_event(&s, &id).await;
    deliver(&s).await;
    s.set_clock(T0 + MIN).await;
    deliver(&s).await;
    s.set_clock(T0 + 20 * DAY).await;
    let recent = test_event(&s, &id).await;
    deliver(&s).await;
    assert_eq!(rows(&s, &id).await, (2, 3));
    // 30 days after the first one's last attempt, not yet.
    s.set_clock(T0 + MIN + 30 * DAY - 1).await;
    deliver(&s).await;
    assert_eq!(rows(&s, &id).await, (2, 3));
    s.set_clock(T0 + MIN + 30 * DAY + 1).await;
    deliver(&s).await;
    assert_eq!(rows(&s, &id).await, (1, 1));
    let kept = attempts(&s, &id).await;
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0]["eventId"], json!(recent));
    assert_ne!(kept[0]["eventId"], json!(old));
    // A shorter retention, with a unit.
    deliver_with(&s, &[("BC_WEBHOOK_RETENTION", "5d")]).await;
    assert_eq!(rows(&s, &id).await, (0, 0));
    assert!(attempts(&s, &id).await.is_empty());
    // Nothing sent again.
    assert_eq!(r.seen().len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn webhook_settings_out_of_range_stop_the_worker_at_start() {
    let s = server().await;
    for (var, bad) in [
        ("BC_WEBHOOK_RETENTION", "soon"),
        ("BC_WEBHOOK_RETENTION", "0"),
        ("BC_WEBHOOK_TENANT_CONCURRENCY", "0"),
        ("BC_WEBHOOK_TENANT_CONCURRENCY", "four"),
    ] {
        let (status, err) = worker::once_with(
            &s,
            &["events.webhooks"],
            &[("BC_SECRETS_KEY", SECRETS_KEY), (var, bad)],
        )
        .await;
        assert!(!status.success(), "{var}={bad} accepted");
        assert!(err.contains(var), "{err}");
    }
}
