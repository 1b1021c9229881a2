//! Helpers shared by the end-to-end tests, on top of the `common` harness:
//! fixtures, paging, state snapshots and id checks.
#![allow(dead_code)]

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{Answer, ROOT_TOKEN, Server, rand_suffix};

/// The root tenant's id (the harness runs with the default).
pub const ROOT: &str = "root";

/// Whether `id` is a TypeID with `prefix` (contract 1.3).
pub fn is_typeid(id: &Value, prefix: &str) -> bool {
    let Some(id) = id.as_str() else {
        return false;
    };
    let Some(rest) = id.strip_prefix(&format!("{prefix}_")) else {
        return false;
    };
    rest.len() == 26
        && rest
            .bytes()
            .all(|b| b"0123456789abcdefghjkmnpqrstvwxyz".contains(&b))
}

/// A valid `providerAccounts.create` body.
pub fn account_body(tenant: &str, name: &str, key: &str) -> Value {
    json!({
        "tenantId": tenant,
        "name": name,
        "provider": "gce",
        "config": { "project": "acme-project-1", "credentials": "none" },
        "idempotencyKey": key,
    })
}

/// A valid `pools.create` body (as root) on `account`.
pub fn pool_body(account: &str, name: &str, key: &str) -> Value {
    json!({
        "tenantId": ROOT,
        "name": name,
        "region": "us-central1",
        "provider": "gce",
        "accountId": account,
        "flavors": [
            { "name": "n2-standard-4", "vcpus": 4, "memoryGib": 16, "gpus": 0 },
            { "name": "a2-highgpu-1g", "vcpus": 12, "memoryGib": 85, "gpus": 1 }
        ],
        "quotas": { "instances": 10, "vcpus": 40 },
        "idempotencyKey": key,
    })
}

/// Creates a provider account in `tenant` with `token`; returns its id.
pub async fn account_in(s: &Server, token: &str, tenant: &str) -> String {
    let body = account_body(tenant, "gce account", &format!("acct-{}", rand_suffix()));
    let v = s.call(token, "providerAccounts/create", body).await.ok();
    v["account"]["accountId"]
        .as_str()
        .expect("accountId")
        .to_owned()
}

/// Offers `pool` to `tenant` with `quotas`; returns the pool.
pub async fn offer(s: &Server, pool: &str, tenant: &str, quotas: Value) -> Value {
    s.root(
        "pools/offer",
        json!({ "poolId": pool, "offerTenantId": tenant, "quotas": quotas }),
    )
    .await
    .ok()["pool"]
        .clone()
}

/// Every event of `tenant` from the start, paging with `nextCursor`.
pub async fn all_events(s: &Server, token: &str, tenant: &str) -> Vec<Value> {
    s.all_events(token, tenant).await
}

/// The events of `tenant` of one type.
pub async fn events_of(s: &Server, token: &str, tenant: &str, ty: &str) -> Vec<Value> {
    all_events(s, token, tenant)
        .await
        .into_iter()
        .filter(|e| e["type"] == ty)
        .collect()
}

fn answer_value(a: &Answer) -> Value {
    json!({ "status": a.status, "body": a.body })
}

/// Everything a client can observe of the given tenants (each read with a
/// key of its own), plus the fleet-wide views of root. Two snapshots are equal
/// when nothing observable changed in between.
pub async fn snapshot(s: &Server, tenants: &[(&str, &str)]) -> Value {
    let mut out = serde_json::Map::new();
    for (path, body) in [
        ("tenants/list", json!({})),
        ("pools/list", json!({})),
        ("clock/get", json!({})),
    ] {
        out.insert(
            format!("root:{path}"),
            answer_value(&s.root(path, body).await),
        );
    }
    // The per-tenant lists, those of later releases included when served.
    let (_, methods) = s.get_text("/api/compute/methods").await;
    let served = |path: &str| methods.contains(&format!("\"{}\"", path.replace('/', ".")));
    let lists: Vec<&str> = [
        "apiKeys/list",
        "projects/list",
        "providerAccounts/list",
        "pools/list",
        "quotas/get",
        "instances/list",
        "reservationGrants/list",
    ]
    .into_iter()
    .filter(|p| served(p))
    .collect();
    for (token, tenant) in tenants {
        for path in lists.iter().copied() {
            let a = s.call(token, path, json!({ "tenantId": tenant })).await;
            out.insert(format!("{tenant}:{path}"), answer_value(&a));
        }
        let a = s
            .call(
                token,
                "events/list",
                json!({ "tenantId": tenant, "limit": 1000 }),
            )
            .await;
        out.insert(format!("{tenant}:events/list"), answer_value(&a));
    }
    Value::Object(out)
}

/// Asserts two snapshots are equal, naming the first differing view.
#[track_caller]
pub fn assert_same(before: &Value, after: &Value, what: &str) {
    if before == after {
        return;
    }
    let (Some(b), Some(a)) = (before.as_object(), after.as_object()) else {
        panic!("{what}: snapshots differ");
    };
    for (k, v) in b {
        if a.get(k) != Some(v) {
            panic!(
                "{what} changed observable state in {k}:\nbefore: {v}\nafter:  {}",
                a.get(k).unwrap_or(&Value::Null)
            );
        }
    }
    panic!("{what}: snapshots differ");
}

/// Sends a raw HTTP/1.1 request over TCP and returns the status line's code
/// and the whole response text. `head` is everything up to and including the
/// blank line; `body` is written after it in `chunks` with `pause` between.
pub async fn tcp_request(url: &str, head: &str, body: &[&[u8]], pause: Duration) -> (u16, String) {
    let addr = url.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(head.as_bytes()).await.expect("write head");
    for part in body {
        // The server may answer (and close) before reading everything.
        if stream.write_all(part).await.is_err() {
            break;
        }
        tokio::time::sleep(pause).await;
    }
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf).into_owned();
    (status_code(&text), text)
}

/// The status code of a raw HTTP response text (0 if there is none).
pub fn status_code(text: &str) -> u16 {
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// The body of a raw HTTP response text.
pub fn response_body(text: &str) -> Value {
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or(Value::Null)
}

/// The root token, for symmetry in tables.
pub fn root_token() -> &'static str {
    ROOT_TOKEN
}
