//! A webhook changed while its deliveries are claimed (contract 3.13 r4):
//! every attempt re-reads its webhook (a new url, a delete), disabling ends
//! the open deliveries, the URL rules are checked again at every attempt,
//! and a deleted webhook's (or tenant's) secrets are erased at once.

use std::time::Duration;

use diesel::QueryableByName;
use diesel::sql_types::{Bool, Text};
use diesel_async::RunQueryDsl;
use serde_json::json;

use super::delivery::{deliver, deliver_with, server, test_event, webhook, webhook_deliveries};
use crate::accounts::google_auth::SECRETS_KEY;
use crate::support::calls::delete_tenant;
use crate::support::clock::{MIN, T0};
use crate::support::db::db;
use crate::support::receiver::Receiver;
use crate::support::server::{Options, Server};
use crate::support::worker::{self, Running};

/// A worker running `events.webhooks` only.
fn worker(s: &Server) -> Running {
    let mut cmd = worker::command(s);
    cmd.args(["--only", "events.webhooks"])
        .env("BC_SECRETS_KEY", SECRETS_KEY);
    Running::spawn(cmd)
}

#[derive(QueryableByName)]
struct Erased {
    #[diesel(sql_type = Bool)]
    deleted: bool,
    #[diesel(sql_type = Bool)]
    erased: bool,
}

/// Whether webhook `id` is marked deleted, and whether every sealed secret
/// column of its row is empty.
async fn erased(s: &Server, id: &str) -> (bool, bool) {
    let mut conn = db(s).await;
    let row: Erased = diesel::sql_query(
        "SELECT deleted_at IS NOT NULL AS deleted, \
           (key_id IS NULL AND nonce IS NULL AND ciphertext IS NULL AND old_key_id IS NULL \
            AND old_nonce IS NULL AND old_ciphertext IS NULL) AS erased \
         FROM webhooks WHERE webhook_id = $1",
    )
    .bind::<Text, _>(id)
    .get_result(&mut conn)
    .await
    .expect("webhook row");
    (row.deleted, row.erased)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_url_gets_the_rest_of_a_claimed_batch_and_the_old_one_nothing_more() {
    let s = server().await;
    // Each answer of the old endpoint takes 3 s: the batch of four is
    // claimed, its first attempt in flight, when the url changes.
    let old = Receiver::start_slow(3_000).await;
    let new = Receiver::start().await;
    let (id, _) = webhook(&s, &old.url, None).await;
    let mut events = Vec::new();
    for _ in 0..4 {
        events.push(test_event(&s, &id).await);
    }
    let w = worker(&s);
    assert_eq!(old.wait_for(1, Duration::from_secs(30)).await, 1);
    s.root(
        "webhooks/update",
        json!({ "webhookId": id, "url": new.url }),
    )
    .await
    .ok();
    assert_eq!(new.wait_for(3, Duration::from_secs(30)).await, 3);
    // The attempt in flight at the change ended at the old url; nothing
    // more went there.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(old.event_ids(), events[..1]);
    assert_eq!(new.event_ids(), events[1..]);
    w.terminate_clean().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_deleted_during_its_batch_gets_nothing_more_and_its_secret_is_erased() {
    let s = server().await;
    let r = Receiver::start_slow(3_000).await;
    let (id, _) = webhook(&s, &r.url, None).await;
    s.root("webhooks/rotateSecret", json!({ "webhookId": id }))
        .await
        .ok();
    for _ in 0..4 {
        test_event(&s, &id).await;
    }
    let w = worker(&s);
    assert_eq!(r.wait_for(1, Duration::from_secs(30)).await, 1);
    s.root("webhooks/delete", json!({ "webhookId": id }))
        .await
        .ok();
    // Erased at once, both the secret and the one it replaced.
    assert_eq!(erased(&s, &id).await, (true, true));
    // Long enough for the attempt in flight to end and two more to come.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(r.seen().len(), 1, "sent after the delete");
    let mut conn = db(&s).await;
    let open: Vec<_> = webhook_deliveries(&mut conn, &id)
        .await
        .into_iter()
        .filter(|(_, state)| state == "pending" || state == "retrying")
        .collect();
    assert!(open.is_empty(), "{open:?}");
    w.terminate_clean().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_tenants_webhooks_are_deleted_and_their_secrets_erased() {
    let s = server().await;
    let acme = s.tenant("acme").await;
    let v = s
        .call(
            &acme,
            "webhooks/create",
            json!({ "tenantId": "acme", "url": "https://hooks.example.com/x",
                    "idempotencyKey": "wh-1" }),
        )
        .await
        .ok();
    let id = v["webhook"]["webhookId"].as_str().expect("id").to_owned();
    assert_eq!(erased(&s, &id).await, (false, false));
    delete_tenant(&s, "acme").await.ok();
    assert_eq!(erased(&s, &id).await, (true, true));
}

#[tokio::test(flavor = "multi_thread")]
async fn disabling_ends_open_deliveries_and_enabling_sends_only_later_events() {
    let s = server().await;
    let r = Receiver::start().await;
    let (id, _) = webhook(&s, &r.url, None).await;
    r.answer(&[(500, None), (500, None)]);
    let first = test_event(&s, &id).await;
    let second = test_event(&s, &id).await;
    deliver(&s).await;
    assert_eq!(r.event_ids(), [first.clone(), second.clone()]);
    let mut conn = db(&s).await;
    let retrying = |first: &str, second: &str| {
        vec![
            (first.to_owned(), "retrying".to_owned()),
            (second.to_owned(), "retrying".to_owned()),
        ]
    };
    assert_eq!(
        webhook_deliveries(&mut conn, &id).await,
        retrying(&first, &second)
    );
    s.root(
        "webhooks/update",
        json!({ "webhookId": id, "state": "disabled" }),
    )
    .await
    .ok();
    let ended: Vec<String> = webhook_deliveries(&mut conn, &id)
        .await
        .into_iter()
        .map(|(_, state)| state)
        .collect();
    assert_eq!(ended, ["failed", "failed"]);
    // Missed while disabled: not sent.
    test_event(&s, &id).await;
    s.root(
        "webhooks/update",
        json!({ "webhookId": id, "state": "enabled" }),
    )
    .await
    .ok();
    let later = test_event(&s, &id).await;
    // The old retries would be due by now.
    s.set_clock(T0 + 10 * MIN).await;
    deliver(&s).await;
    assert_eq!(r.event_ids(), [first, second, later]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_url_rules_are_checked_again_at_every_attempt() {
    // The api-server lists the receiver's origin for tenants; a worker
    // started without that listing refuses the same url at the attempt.
    let s = Server::start_with(Options {
        env: vec![
            ("BC_SECRETS_KEY".into(), SECRETS_KEY.into()),
            ("BC_WEBHOOK_ENDPOINTS".into(), "http://127.0.0.1:*".into()),
        ],
        ..Options::default()
    })
    .await;
    s.set_clock(T0).await;
    let r = Receiver::start().await;
    let acme = s.tenant("acme").await;
    let v = s
        .call(
            &acme,
            "webhooks/create",
            json!({ "tenantId": "acme", "url": r.url, "idempotencyKey": "wh-1" }),
        )
        .await
        .ok();
    let id = v["webhook"]["webhookId"].as_str().expect("id").to_owned();
    let e = s
        .call(
            &acme,
            "webhooks/test",
            json!({ "tenantId": "acme", "webhookId": id }),
        )
        .await
        .ok();
    let event = e["eventId"].as_str().expect("eventId").to_owned();
    deliver(&s).await;
    assert!(r.seen().is_empty(), "an internal IP literal was reached");
    let page = s
        .call(
            &acme,
            "webhooks/deliveries",
            json!({ "tenantId": "acme", "webhookId": id }),
        )
        .await
        .ok();
    let row = &page["items"][0];
    assert_eq!(row["eventId"], json!(event));
    assert_eq!(row["outcome"], "retrying", "{page}");
    assert!(row.get("status").is_none(), "{page}");
    // Listed again: the retry goes out.
    s.set_clock(T0 + MIN).await;
    deliver_with(&s, &[("BC_WEBHOOK_ENDPOINTS", "http://127.0.0.1:*")]).await;
    assert_eq!(r.event_ids(), [event]);
}
