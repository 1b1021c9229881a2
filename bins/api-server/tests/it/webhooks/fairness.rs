//! Delivery that one tenant cannot slow for the others (contract 3.13 r4):
//! one tenant's ten webhooks point at an endpoint that never answers, with
//! a thousand deliveries due, while another tenant's events still arrive
//! within seconds, and the noisy tenant has at most
//! `BC_WEBHOOK_TENANT_CONCURRENCY` (4) attempts in flight.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::accounts::google_auth::SECRETS_KEY;
use crate::support::clock::T0;
use crate::support::receiver::Receiver;
use crate::support::server::{Options, Server, rand_suffix};
use crate::support::worker::{self, Running};

/// Other tenants may name loopback endpoints in these tests.
const LISTED: &str = "http://127.0.0.1:*";

async fn tenant_webhook(s: &Server, token: &str, tenant: &str, url: &str) -> String {
    let key = format!("wh-{}", rand_suffix());
    let v = s
        .call(
            token,
            "webhooks/create",
            json!({ "tenantId": tenant, "url": url, "idempotencyKey": key }),
        )
        .await
        .ok();
    v["webhook"]["webhookId"].as_str().expect("id").to_owned()
}

async fn test_event(s: &Server, token: &str, tenant: &str, id: &str) -> String {
    let v = s
        .call(
            token,
            "webhooks/test",
            json!({ "tenantId": tenant, "webhookId": id }),
        )
        .await
        .ok();
    v["eventId"].as_str().expect("eventId").to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_whose_endpoints_never_answer_delays_no_other_tenant() {
    let s = Server::start_with(Options {
        env: vec![
            ("BC_SECRETS_KEY".into(), SECRETS_KEY.into()),
            ("BC_WEBHOOK_ENDPOINTS".into(), LISTED.into()),
        ],
        ..Options::default()
    })
    .await;
    s.set_clock(T0).await;
    let silent = Receiver::start_silent().await;
    let good = Receiver::start().await;
    let noisy = s.tenant("noisy").await;
    let calm = s.tenant("calm").await;
    let mut hooks = Vec::new();
    for k in 0..10 {
        let url = format!("{}{k}", silent.url);
        hooks.push(tenant_webhook(&s, &noisy, "noisy", &url).await);
    }
    let calm_hook = tenant_webhook(&s, &calm, "calm", &good.url).await;
    // A thousand deliveries due to endpoints that never answer.
    for round in 0..10 {
        let sends = (0..100).map(|k| {
            let hook = &hooks[(round * 100 + k) % hooks.len()];
            test_event(&s, &noisy, "noisy", hook)
        });
        futures::future::join_all(sends).await;
    }
    let mut cmd = worker::command(&s);
    cmd.args(["--only", "events.webhooks"])
        .env("BC_SECRETS_KEY", SECRETS_KEY)
        .env("BC_WEBHOOK_ENDPOINTS", LISTED);
    let w = Running::spawn(cmd);
    assert!(
        silent.wait_for(1, Duration::from_secs(60)).await >= 1,
        "the noisy tenant's deliveries never started"
    );
    // The calm tenant's events arrive within seconds of their commit, each,
    // while the noisy tenant's attempts wait for their 10 s deadlines, and
    // after those failed and the next ones went out.
    let mut lags = Vec::new();
    for k in 0..3 {
        if k > 0 {
            tokio::time::sleep(Duration::from_secs(6)).await;
        }
        let sent = Instant::now();
        let event = test_event(&s, &calm, "calm", &calm_hook).await;
        let got = good.wait_for(k + 1, Duration::from_secs(20)).await;
        assert!(
            got > k,
            "the calm tenant's event {k} did not arrive within 20 s"
        );
        lags.push(sent.elapsed());
        assert_eq!(good.event_ids()[k], event);
    }
    // At most 4 of the noisy tenant's attempts at once: in the first 8 s
    // after its first attempt (none of them can end before its 10 s
    // deadline), no more than 4 arrived; and its deliveries went on after
    // those timed out.
    let seen = silent.seen();
    assert!(seen.len() > 4, "{} noisy attempts", seen.len());
    let first = seen[0].at;
    let early: Vec<&str> = seen
        .iter()
        .filter(|q| q.at < first + Duration::from_secs(8))
        .map(|q| q.path.as_str())
        .collect();
    assert!(
        early.len() <= 4,
        "{} attempts of one tenant in flight at once",
        early.len()
    );
    // One attempt at a time per webhook.
    let mut webhooks = early.clone();
    webhooks.sort_unstable();
    webhooks.dedup();
    assert_eq!(webhooks.len(), early.len(), "{early:?}");
    eprintln!(
        "webhook fairness: calm tenant's lags {lags:?} while {} noisy attempts went out",
        seen.len()
    );
    w.terminate_clean().await;
}
