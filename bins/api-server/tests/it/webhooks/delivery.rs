//! Webhook delivery end to end (contract 3.13): the real api-server and
//! worker, a receiver in the test, the manual clock.

use serde_json::{Value, json};

use crate::accounts::google_auth::SECRETS_KEY;
use crate::support::builders::PlatformBuilder;
use crate::support::clock::{MIN, T0};
use crate::support::db::db;
use crate::support::fixtures::set_quota;
use crate::support::receiver::{Received, Receiver, signed_by};
use crate::support::server::{Options, ROOT, ROOT_TOKEN, Server, rand_suffix};
use crate::support::worker;

pub(super) async fn server() -> Server {
    let s = Server::start_with(Options {
        env: vec![("BC_SECRETS_KEY".into(), SECRETS_KEY.into())],
        ..Options::default()
    })
    .await;
    s.set_clock(T0).await;
    s
}

/// Root's webhook to `url` (root may name a loopback http endpoint).
pub(super) async fn webhook(s: &Server, url: &str, types: Option<Value>) -> (String, String) {
    let mut body = json!({ "url": url, "idempotencyKey": format!("wh-{}", rand_suffix()) });
    if let Some(t) = types {
        body["types"] = t;
    }
    let v = s.root("webhooks/create", body).await.ok();
    (
        v["webhook"]["webhookId"].as_str().expect("id").to_owned(),
        v["secret"].as_str().expect("secret").to_owned(),
    )
}

pub(super) async fn test_event(s: &Server, id: &str) -> String {
    let v = s
        .root("webhooks/test", json!({ "webhookId": id }))
        .await
        .ok();
    v["eventId"].as_str().expect("eventId").to_owned()
}

/// A webhook's deliveries as stored, in log order: (event id, state).
pub(super) async fn webhook_deliveries(
    conn: &mut diesel_async::AsyncPgConnection,
    id: &str,
) -> Vec<(String, String)> {
    use diesel::sql_types::Text;
    use diesel_async::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = Text)]
        event_id: String,
        #[diesel(sql_type = Text)]
        state: String,
    }
    let rows: Vec<Row> = diesel::sql_query(
        "SELECT event_id, state FROM webhook_deliveries WHERE webhook_id = $1 ORDER BY seq",
    )
    .bind::<Text, _>(id)
    .load(conn)
    .await
    .expect("deliveries");
    rows.into_iter().map(|r| (r.event_id, r.state)).collect()
}

pub(super) async fn deliver(s: &Server) {
    deliver_with(s, &[]).await;
}

/// One `events.webhooks` pass with extra env.
pub(super) async fn deliver_with(s: &Server, env: &[(&str, &str)]) {
    let mut all = vec![("BC_SECRETS_KEY", SECRETS_KEY)];
    all.extend_from_slice(env);
    let (status, err) = worker::once_with(s, &["events.webhooks"], &all).await;
    assert!(status.success(), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn events_arrive_signed_once_each_in_log_order_filtered_by_type() {
    let s = server().await;
    // The pool's quota rows publish quota.updated before any webhook exists.
    let p = PlatformBuilder::new().slots(2).build(&s).await;
    let r = Receiver::start().await;
    let quotas_only = Receiver::start().await;
    let (id, secret) = webhook(&s, &r.url, None).await;
    webhook(&s, &quotas_only.url, Some(json!(["quota.updated"]))).await;
    let mut sent = Vec::new();
    for _ in 0..3 {
        sent.push(test_event(&s, &id).await);
    }
    set_quota(&s, ROOT, &p.pool, "gpus", 3).await;
    let quota_event = s
        .events_of(ROOT_TOKEN, ROOT, "quota.updated")
        .await
        .last()
        .and_then(|e| e["eventId"].as_str().map(str::to_owned))
        .expect("quota.updated");
    sent.push(quota_event.clone());
    // Another tenant's event goes to neither.
    set_quota(&s, "acme", &p.pool, "gpus", 2).await;
    deliver(&s).await;
    let seen = r.seen();
    let ids: Vec<String> = seen
        .iter()
        .map(|q| q.json()["eventId"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(ids, sent, "each event once, in log order, none from before");
    for q in &seen {
        assert!(signed_by(
            q.header("bc-signature").expect("signed"),
            &q.body,
            &secret
        ));
        assert_eq!(q.header("bc-webhook-id"), Some(id.as_str()));
        assert_eq!(q.header("content-type"), Some("application/json"));
        let body = q.json();
        assert_eq!(body["tenantId"], ROOT);
        assert_eq!(q.header("bc-event-id"), body["eventId"].as_str());
    }
    assert_eq!(seen[0].json()["data"]["webhookId"], json!(id));
    // The other webhook gets only its type, and none of the tests of the first.
    let quiet: Vec<Value> = quotas_only.seen().iter().map(Received::json).collect();
    assert_eq!(quiet.len(), 1, "{quiet:?}");
    assert_eq!(quiet[0]["eventId"], json!(quota_event));
    assert_eq!(quiet[0]["type"], "quota.updated");
    // Nothing new: nothing sent again.
    deliver(&s).await;
    assert_eq!(r.seen().len(), 4);
    let d = s
        .root("webhooks/deliveries", json!({ "webhookId": id }))
        .await
        .ok();
    let items = d["items"].as_array().expect("items");
    assert_eq!(items.len(), 4);
    assert!(
        items
            .iter()
            .all(|i| i["outcome"] == "delivered" && i["attempt"] == 1)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failure_is_retried_on_schedule_and_holds_nothing_back() {
    let s = server().await;
    let r = Receiver::start().await;
    let (id, _) = webhook(&s, &r.url, None).await;
    r.answer(&[(500, None)]);
    let first = test_event(&s, &id).await;
    let second = test_event(&s, &id).await;
    deliver(&s).await;
    let order: Vec<String> = r
        .seen()
        .iter()
        .map(|q| q.json()["eventId"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        order,
        vec![first.clone(), second.clone()],
        "the second is not held back"
    );
    // Not due again before a minute has passed.
    s.set_clock(T0 + 59 * 1000).await;
    deliver(&s).await;
    assert_eq!(r.seen().len(), 2);
    s.set_clock(T0 + MIN).await;
    deliver(&s).await;
    let seen = r.seen();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[2].json()["eventId"], json!(first));
    let d = s
        .root("webhooks/deliveries", json!({ "webhookId": id }))
        .await
        .ok();
    let rows: Vec<(String, i64, String)> = d["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            (
                i["eventId"].as_str().unwrap_or_default().to_owned(),
                i["attempt"].as_i64().unwrap_or(0),
                i["outcome"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            (first.clone(), 1, "retrying".to_owned()),
            (second, 1, "delivered".to_owned()),
            (first, 2, "delivered".to_owned()),
        ]
    );
    let retry = &d["items"][0];
    assert_eq!(retry["status"], 500);
    assert_eq!(retry["nextAttemptAt"], T0 + MIN);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redirect_is_never_followed() {
    let s = server().await;
    let r = Receiver::start().await;
    let elsewhere = Receiver::start().await;
    let (id, _) = webhook(&s, &r.url, None).await;
    r.answer(&[(302, Some(elsewhere.url.as_str()))]);
    test_event(&s, &id).await;
    deliver(&s).await;
    assert_eq!(r.seen().len(), 1);
    assert!(elsewhere.seen().is_empty(), "the redirect was followed");
    let d = s
        .root("webhooks/deliveries", json!({ "webhookId": id }))
        .await
        .ok();
    assert_eq!(d["items"][0]["outcome"], "retrying");
    assert_eq!(d["items"][0]["status"], 302);
}

#[tokio::test(flavor = "multi_thread")]
async fn three_days_of_failures_disable_the_webhook() {
    let s = server().await;
    let r = Receiver::start().await;
    let (id, _) = webhook(&s, &r.url, None).await;
    r.answer(&[(503, None); 64]);
    test_event(&s, &id).await;
    // Walk the clock through the retry schedule: 1, 2, 4, ... minutes, at
    // most 6 hours apart, for 3 days.
    let mut now = T0;
    let mut wait = MIN;
    deliver(&s).await;
    // An event of day 2 is still being retried when the webhook is disabled.
    let mut late = None;
    while now < T0 + 3 * 24 * 60 * MIN + 6 * 60 * MIN {
        now += wait;
        wait = (wait * 2).min(6 * 60 * MIN);
        s.set_clock(now).await;
        if late.is_none() && now >= T0 + 2 * 24 * 60 * MIN {
            late = Some(test_event(&s, &id).await);
        }
        deliver(&s).await;
    }
    let hook = s
        .root("webhooks/get", json!({ "webhookId": id }))
        .await
        .ok();
    assert_eq!(hook["webhook"]["state"], "disabled");
    let disabled = s.events_of(ROOT_TOKEN, ROOT, "webhook.disabled").await;
    assert_eq!(disabled.len(), 1);
    assert_eq!(disabled[0]["data"]["webhookId"], json!(id));
    // Sent to none; the failed delivery is given up, and disabling ended
    // the late one too (contract 3.13 r4).
    let late = late.expect("a late event");
    assert!(r.event_ids().contains(&late));
    let mut conn = db(&s).await;
    let open: Vec<String> = webhook_deliveries(&mut conn, &id)
        .await
        .into_iter()
        .filter(|(_, state)| state != "failed")
        .map(|(event, state)| format!("{event} {state}"))
        .collect();
    assert!(open.is_empty(), "deliveries still open: {open:?}");
    let attempts = r.seen().len();
    assert!((10..=30).contains(&attempts), "{attempts} attempts");
    assert!(
        r.seen()
            .iter()
            .all(|q| q.json()["type"] != "webhook.disabled")
    );
    // Enabled again: what was missed is not sent.
    test_event(&s, &id).await;
    s.root(
        "webhooks/update",
        json!({ "webhookId": id, "state": "enabled" }),
    )
    .await
    .ok();
    let after = test_event(&s, &id).await;
    deliver(&s).await;
    let last = r.seen().last().cloned().expect("one more");
    assert_eq!(last.json()["eventId"], json!(after));
    assert_eq!(r.seen().len(), attempts + 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_event_goes_out_within_about_a_second_of_its_commit() {
    let s = server().await;
    let r = Receiver::start().await;
    let (id, _) = webhook(&s, &r.url, None).await;
    // An interval of ten minutes: only NOTIFY can send an event sooner.
    let mut cmd = worker::command(&s);
    cmd.args(["--only", "events.webhooks"])
        .env("BC_INTERVAL_MS", "600000")
        .env("BC_SECRETS_KEY", SECRETS_KEY);
    let w = worker::Running::spawn(cmd);
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let events = 1000;
    let mut lags = Vec::new();
    let started = std::time::Instant::now();
    for k in 0..events {
        let sent = std::time::Instant::now();
        test_event(&s, &id).await;
        loop {
            if r.seen().len() > k {
                lags.push(sent.elapsed());
                break;
            }
            assert!(
                sent.elapsed() < std::time::Duration::from_secs(30),
                "event {k} not sent"
            );
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }
    lags.sort();
    let p50 = lags[lags.len() / 2];
    let p99 = lags[lags.len() * 99 / 100];
    eprintln!(
        "webhook delay from commit to arrival over {events} events: p50 {p50:?}, p99 {p99:?}, \
         max {:?}, {:.1} s in all",
        lags[lags.len() - 1],
        started.elapsed().as_secs_f64()
    );
    // Far below the ten-minute interval, with room for a loaded machine.
    assert!(p50 < std::time::Duration::from_secs(5), "p50 {p50:?}");
    w.terminate_clean().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_slower_than_ten_seconds_is_a_failure() {
    let s = server().await;
    let r = Receiver::start_slow(11_000).await;
    let (id, _) = webhook(&s, &r.url, None).await;
    test_event(&s, &id).await;
    deliver(&s).await;
    assert_eq!(r.seen().len(), 1);
    let d = s
        .root("webhooks/deliveries", json!({ "webhookId": id }))
        .await
        .ok();
    let row = &d["items"][0];
    assert_eq!(row["outcome"], "retrying", "{d}");
    assert!(row.get("status").is_none_or(Value::is_null), "{d}");
    assert!(row["durationMs"].as_i64().unwrap_or(0) >= 9_900, "{d}");
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_rotation_both_secrets_sign_for_a_day() {
    let s = server().await;
    let r = Receiver::start().await;
    let (id, old) = webhook(&s, &r.url, None).await;
    let v = s
        .root("webhooks/rotateSecret", json!({ "webhookId": id }))
        .await
        .ok();
    let new = v["secret"].as_str().expect("secret").to_owned();
    assert_ne!(new, old);
    test_event(&s, &id).await;
    deliver(&s).await;
    let first = r.seen()[0].clone();
    let header = first.header("bc-signature").expect("signed").to_owned();
    assert!(signed_by(&header, &first.body, &new), "{header}");
    assert!(signed_by(&header, &first.body, &old), "{header}");
    assert_eq!(header.matches("v1=").count(), 2);
    // A day later only the new secret signs.
    s.set_clock(T0 + 24 * 60 * MIN + 1).await;
    test_event(&s, &id).await;
    deliver(&s).await;
    let second = r.seen()[1].clone();
    let header = second.header("bc-signature").expect("signed").to_owned();
    assert!(signed_by(&header, &second.body, &new));
    assert!(!signed_by(&header, &second.body, &old));
    assert_eq!(header.matches("v1=").count(), 1);
}
