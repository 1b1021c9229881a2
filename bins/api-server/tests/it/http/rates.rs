//! Request rates (contract 1.2 and 1.7 r4): a tenant over its rate gets
//! `RATE_LIMITED` (429, `details.retryAfterMs`, `Retry-After`) and its
//! request is not performed, while another tenant at the same moment is
//! served; root is limited only when `BC_ROOT_RATE` is set; unauthenticated
//! requests are limited per client address; the defaults hold; `bcctl`
//! waits and sends again.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::server::{ROOT_TOKEN, Server, metric, sibling_binary};

/// A server with these rate variables (an empty value keeps the default;
/// the test support turns the rates off otherwise).
async fn server_with(vars: &[(&str, &str)]) -> Server {
    Server::start_with_vars(vars).await
}

/// One raw call; the status, `Retry-After` and the body.
async fn post(
    s: &Server,
    token: Option<&str>,
    path: &str,
    body: Value,
) -> (u16, Option<u64>, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{}/api/compute/{path}", s.url))
        .json(&body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.expect("answer");
    answer(resp).await
}

async fn answer(resp: reqwest::Response) -> (u16, Option<u64>, Value) {
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let body = resp.json().await.unwrap_or(Value::Null);
    (status, retry, body)
}

/// `projects.list` of `tenant` with `token`.
async fn list_projects(s: &Server, token: &str, tenant: &str) -> (u16, Option<u64>, Value) {
    post(
        s,
        Some(token),
        "projects/list",
        json!({ "tenantId": tenant }),
    )
    .await
}

/// A tenant's burst is shared by all its keys; over it, its next request is
/// `RATE_LIMITED` with the wait, and not performed (no project made);
/// another tenant is served at that moment; root is not limited; after the
/// wait the tenant is served again; the refusals are counted by tenant.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_over_its_rate_is_refused_while_another_is_served() {
    let s = server_with(&[("BC_TENANT_RATE", "1"), ("BC_TENANT_BURST", "4")]).await;
    let acme = s.tenant("acme").await;
    let globex = s.tenant("globex").await;
    // The tenants' first requests above spent one of each burst
    // (`tenants.create` is root's): acme gets a second key, then spends the
    // rest with both.
    let second = s.key(&acme, "acme", "admin", None).await;
    let mut served = 0;
    let refused = loop {
        let key = if served % 2 == 0 { &acme } else { &second };
        let (status, retry, body) = list_projects(&s, key, "acme").await;
        if status == 429 {
            break (retry, body);
        }
        assert_eq!(status, 200, "{body}");
        served += 1;
        assert!(served < 10, "never refused");
    };
    // The burst of 4 less the key's creation, and perhaps one that came
    // back on a slow machine.
    assert!(served <= 4, "served {served} beyond a burst of 4");
    let (retry, body) = refused;
    assert_eq!(body["error"]["code"], "RATE_LIMITED", "{body}");
    let wait = body["error"]["details"]["retryAfterMs"]
        .as_u64()
        .expect("details.retryAfterMs");
    assert!((1..=1000).contains(&wait), "{body}");
    assert_eq!(retry, Some(1), "Retry-After in whole seconds, rounded up");
    // Refused, so not performed: a create refused makes nothing.
    let (status, _, body) = post(
        &s,
        Some(&acme),
        "projects/create",
        json!({ "tenantId": "acme", "name": "refused" }),
    )
    .await;
    assert_eq!(status, 429, "{body}");
    // At this moment another tenant and root are served.
    let (status, _, body) = list_projects(&s, &globex, "globex").await;
    assert_eq!(status, 200, "{body}");
    for _ in 0..20 {
        s.root("tenants/list", json!({})).await.ok();
    }
    // After the wait acme is served again, and nothing was made.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (status, _, body) = list_projects(&s, &acme, "acme").await;
    assert_eq!(status, 200, "{body}");
    let names: Vec<&str> = body["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(!names.contains(&"refused"), "{names:?}");
    let (_, metrics) = s.get_text("/metrics").await;
    let line = "bc_api_rate_limited_total{client=\"acme\"}";
    assert!(metric(&metrics, line) >= 2.0, "{metrics}");
    assert_eq!(
        metric(&metrics, "bc_api_rate_limited_total{client=\"globex\"}"),
        0.0
    );
}

/// Root is limited only when `BC_ROOT_RATE` is set.
#[tokio::test(flavor = "multi_thread")]
async fn root_is_limited_only_when_its_rate_is_set() {
    let s = server_with(&[("BC_ROOT_RATE", "1"), ("BC_ROOT_BURST", "3")]).await;
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let (status, _, _) = post(
            &s,
            Some(ROOT_TOKEN),
            "tenants/list",
            json!({ "tenantId": "root" }),
        )
        .await;
        statuses.push(status);
    }
    assert!(statuses.contains(&429), "{statuses:?}");
    let (_, metrics) = s.get_text("/metrics").await;
    assert!(metric(&metrics, "bc_api_rate_limited_total{client=\"root\"}") >= 1.0);
}

/// Unauthenticated requests (the open paths and failed authentications)
/// share a bucket per client address; a tenant's valid key is not counted
/// in it and is served while the address is refused.
#[tokio::test(flavor = "multi_thread")]
async fn unauthenticated_requests_are_limited_per_address() {
    let s = server_with(&[("BC_ANON_RATE", "1"), ("BC_ANON_BURST", "3")]).await;
    let client = reqwest::Client::new();
    let mut statuses = Vec::new();
    for _ in 0..2 {
        let r = client
            .get(format!("{}/healthz", s.url))
            .send()
            .await
            .expect("answer");
        statuses.push(r.status().as_u16());
    }
    let (status, _, _) = post(&s, Some("bck_nope"), "tenants/list", json!({})).await;
    statuses.push(status);
    assert_eq!(statuses, [200, 200, 401], "the burst of 3");
    let r = client
        .get(format!("{}/api/openapi.json", s.url))
        .send()
        .await
        .expect("answer");
    let (status, retry, body) = answer(r).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "RATE_LIMITED");
    assert!(retry.is_some_and(|r| r >= 1));
    let (status, _, body) = post(&s, None, "tenants/list", json!({})).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (429, &json!("RATE_LIMITED"))
    );
    // A valid key from the same address is served.
    s.root("tenants/list", json!({})).await.ok();
}

/// With no rate variable set the defaults hold: a tenant's burst of 200
/// goes through, and a tight loop beyond it is refused within a few hundred
/// more (50 a second come back meanwhile).
#[tokio::test(flavor = "multi_thread")]
async fn the_default_rate_allows_a_burst_of_200_then_refuses() {
    let s = server_with(&[("BC_TENANT_RATE", ""), ("BC_ANON_RATE", "")]).await;
    let acme = s.tenant("acme").await;
    let client = reqwest::Client::new();
    let started = Instant::now();
    let mut served = 0u32;
    loop {
        let r = client
            .post(format!("{}/api/compute/projects/list", s.url))
            .bearer_auth(&acme)
            .json(&json!({ "tenantId": "acme" }))
            .send()
            .await
            .expect("answer");
        match r.status().as_u16() {
            200 => served += 1,
            429 => break,
            other => panic!("answered {other}"),
        }
        assert!(served < 5000, "never refused");
    }
    let took = started.elapsed().as_secs_f64();
    eprintln!("served {served} in {took:.2} s before the first refusal");
    // The burst, and at most what came back meanwhile.
    assert!(served >= 200, "refused after {served}");
    let refill = (took * 50.0).ceil() as u32;
    assert!(served <= 200 + refill, "served {served} in {took} s");
}

/// `bcctl` refused `RATE_LIMITED` waits for the time the server names and
/// sends again, saying so on standard error; the command succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn bcctl_waits_and_sends_again_when_rate_limited() {
    let s = server_with(&[("BC_TENANT_RATE", "1"), ("BC_TENANT_BURST", "1")]).await;
    let acme = s.tenant("acme").await;
    let config = tempfile::tempdir().expect("tempdir");
    let run = || {
        let mut cmd = tokio::process::Command::new(sibling_binary("bcctl", "cargo build -p bcctl"));
        cmd.args(["--output", "json", "call", "projects.list"])
            .env_remove("BC_PROFILE")
            .env("BC_ENDPOINT", &s.url)
            .env("BC_TOKEN", &acme)
            .env("BC_TENANT", "acme")
            .env("XDG_CONFIG_HOME", config.path())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd.output()
    };
    // This request takes the burst: bcctl's waits about a second.
    let (status, _, body) = list_projects(&s, &acme, "acme").await;
    assert_eq!(status, 200, "{body}");
    let out = tokio::time::timeout(Duration::from_secs(60), run())
        .await
        .expect("bcctl hung")
        .expect("bcctl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("request rate is spent") && stderr.contains("retry 1 of 5"),
        "{stderr}"
    );
    let answer: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(answer["items"].is_array(), "{answer}");
}
