//! HTTP conventions of contract 1.1 and 1.2: body limit, unknown paths, wrong
//! methods, authentication, malformed bodies, request ids, the
//! unauthenticated endpoints, the order of the checks and graceful shutdown.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use storage::test_db::TestDatabase;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::bodies::QuotaBody;
use crate::support::calls::get_account;
use crate::support::server::{Options, ROOT, ROOT_TOKEN, Server};

const MIB: usize = 1024 * 1024;

/// `{"tenantId":"root"}` padded with spaces to exactly `len` bytes.
fn padded_body(len: usize) -> String {
    let mut body = json!({ "tenantId": ROOT }).to_string();
    assert!(body.len() <= len);
    body.push_str(&" ".repeat(len - body.len()));
    body
}

#[tokio::test(flavor = "multi_thread")]
async fn health_ready_and_metrics_are_served_without_a_key() {
    let s = Server::start().await;
    let (status, text) = s.get_text("/healthz").await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&text).expect("json")["status"],
        "ok"
    );
    let (status, text) = s.get_text("/readyz").await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&text).expect("json")["status"],
        "ready"
    );

    // One success and one failure of the same method, then the counters.
    s.root("tenants/list", json!({})).await.ok();
    s.raw(
        None,
        "POST",
        "/api/compute/tenants/list",
        Some(json!({ "tenantId": ROOT }).to_string()),
    )
    .await
    .err(401, "UNAUTHENTICATED");

    let resp = reqwest::Client::new()
        .get(format!("{}/metrics", s.url))
        .header("accept", "application/openmetrics-text; version=1.0.0")
        .send()
        .await
        .expect("metrics");
    assert_eq!(resp.status().as_u16(), 200);
    let ctype = resp.headers()["content-type"]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
    let text = resp.text().await.expect("text");
    assert!(text.contains("# TYPE bc_api_requests counter"), "{text}");
    assert!(
        text.contains(r#"bc_api_requests_total{method="tenants.list",code="OK"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"bc_api_requests_total{method="tenants.list",code="UNAUTHENTICATED"} 1"#),
        "{text}"
    );
    assert!(
        text.contains("bc_api_request_duration_seconds_count{method=\"tenants.list\"} 2"),
        "{text}"
    );
    // Every sample line is `name{labels} value` with a numeric value.
    assert!(text.ends_with("# EOF\n"), "{text}");
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let value = line.rsplit(' ').next().expect("value");
        assert!(value.parse::<f64>().is_ok(), "bad sample line {line:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bodies_over_one_mib_are_refused_before_authentication() {
    let s = Server::start().await;
    // Exactly 1 MiB is accepted.
    let a = s
        .raw(
            Some(ROOT_TOKEN),
            "POST",
            "/api/compute/tenants/list",
            Some(padded_body(MIB)),
        )
        .await;
    assert_eq!(a.status, 200, "{:?}", a.body);

    // One byte more is 413, with or without a key, valid or not; the client
    // always gets to read the answer (repeated: a connection reset would lose it).
    for token in [Some(ROOT_TOKEN), None, Some("bck_nope")]
        .into_iter()
        .cycle()
        .take(15)
    {
        let a = s
            .raw(
                token,
                "POST",
                "/api/compute/tenants/list",
                Some(padded_body(MIB + 1)),
            )
            .await;
        let d = a.err(413, "PAYLOAD_TOO_LARGE");
        assert!(d.is_object());
        assert!(a.request_id.is_some());
    }

    // A body sent chunked, without a Content-Length, is cut at the limit too.
    let chunk = vec![b' '; 64 * 1024];
    let mut framed = Vec::new();
    framed.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
    framed.extend_from_slice(&chunk);
    framed.extend_from_slice(b"\r\n");
    let mut parts: Vec<&[u8]> = Vec::new();
    for _ in 0..20 {
        parts.push(&framed);
    }
    parts.push(b"0\r\n\r\n");
    let head = "POST /api/compute/tenants/list HTTP/1.1\r\nHost: x\r\n\
                Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\
                Connection: close\r\n\r\n";
    let (status, text) = tcp_request(&s.url, head, &parts, Duration::ZERO).await;
    assert_eq!(status, 413, "{text}");
    assert_eq!(response_body(&text)["error"]["code"], "PAYLOAD_TOO_LARGE");

    // A huge declared length is refused from the head alone.
    let head = "POST /api/compute/tenants/list HTTP/1.1\r\nHost: x\r\n\
                Content-Type: application/json\r\nContent-Length: 104857600\r\n\
                Connection: close\r\n\r\n";
    let (status, text) = tcp_request(&s.url, head, &[], Duration::ZERO).await;
    assert_eq!(status, 413, "{text}");
    assert_eq!(response_body(&text)["error"]["code"], "PAYLOAD_TOO_LARGE");
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_paths_are_not_found_envelopes() {
    let s = Server::start().await;
    for (method, path) in [
        ("POST", "/api/compute/nothing/list"),
        ("POST", "/api/compute/tenants/explode"),
        ("POST", "/api/compute/tenants"),
        ("GET", "/"),
        ("GET", "/api/compute/nothing/list"),
        ("POST", "/api/compute/tenants/list/extra"),
    ] {
        let a = s
            .raw(Some(ROOT_TOKEN), method, path, Some("{}".into()))
            .await;
        a.err(404, "NOT_FOUND");
        assert!(a.request_id.is_some(), "{path}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_http_methods_are_405_envelopes() {
    let s = Server::start().await;
    let client = reqwest::Client::new();
    for (method, path, allow) in [
        ("GET", "/api/compute/tenants/list", "POST"),
        ("PUT", "/api/compute/quotas/set", "POST"),
        ("DELETE", "/api/compute/pools/get", "POST"),
        ("GET", "/api/compute/events/list", "POST"),
        ("POST", "/healthz", "GET"),
        ("POST", "/api/compute/methods", "GET"),
        ("POST", "/api/openapi.json", "GET"),
    ] {
        let resp = client
            .request(
                reqwest::Method::from_bytes(method.as_bytes()).expect("method"),
                format!("{}{path}", s.url),
            )
            .bearer_auth(ROOT_TOKEN)
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status().as_u16(), 405, "{method} {path}");
        assert_eq!(resp.headers()["allow"], allow, "{method} {path}");
        assert!(resp.headers().contains_key("x-request-id"));
        let body: Value = resp.json().await.expect("json");
        assert_eq!(body["error"]["code"], "METHOD_NOT_ALLOWED", "{body}");
        assert!(body["error"]["details"].is_object());
        assert!(body["error"]["message"].is_string());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_bad_and_revoked_keys_are_unauthenticated() {
    let s = Server::start().await;
    let body = json!({ "tenantId": ROOT }).to_string();
    let path = "/api/compute/tenants/list";
    s.raw(None, "POST", path, Some(body.clone()))
        .await
        .err(401, "UNAUTHENTICATED");
    s.raw(Some("bck_unknown"), "POST", path, Some(body.clone()))
        .await
        .err(401, "UNAUTHENTICATED");
    // Not a bearer scheme, and an empty bearer.
    let client = reqwest::Client::new();
    for auth in [
        format!("Basic {ROOT_TOKEN}"),
        "Bearer ".to_owned(),
        ROOT_TOKEN.to_owned(),
    ] {
        let resp = client
            .post(format!("{}{path}", s.url))
            .header("authorization", auth.clone())
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status().as_u16(), 401, "{auth}");
        let v: Value = resp.json().await.expect("json");
        assert_eq!(v["error"]["code"], "UNAUTHENTICATED");
    }
    // The bearer scheme is case-insensitive.
    let resp = client
        .post(format!("{}{path}", s.url))
        .header("authorization", format!("bearer {ROOT_TOKEN}"))
        .body(body.clone())
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 200);

    // A revoked key stops working on its next request.
    let v = s
        .root("apiKeys/create", json!({ "name": "temp", "role": "admin" }))
        .await
        .ok();
    let secret = v["secret"].as_str().expect("secret").to_owned();
    let key_id = v["apiKey"]["keyId"].clone();
    s.call(&secret, "tenants/list", json!({ "tenantId": ROOT }))
        .await
        .ok();
    s.root("apiKeys/revoke", json!({ "keyId": key_id }))
        .await
        .ok();
    let a = s
        .call(&secret, "tenants/list", json!({ "tenantId": ROOT }))
        .await;
    a.err(401, "UNAUTHENTICATED");
    assert!(!a.body.to_string().contains(&secret));
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_json_and_non_object_bodies_are_invalid_input() {
    let s = Server::start().await;
    for body in [
        "{",
        "",
        "{\"tenantId\": \"root\",}",
        "not json",
        "{\"tenantId\": \"root\"} x",
    ] {
        let a = s
            .raw(
                Some(ROOT_TOKEN),
                "POST",
                "/api/compute/tenants/list",
                Some(body.into()),
            )
            .await;
        a.err(400, "INVALID_INPUT");
    }
    for body in [
        "[]",
        "[{\"tenantId\":\"root\"}]",
        "\"root\"",
        "42",
        "null",
        "true",
    ] {
        let a = s
            .raw(
                Some(ROOT_TOKEN),
                "POST",
                "/api/compute/tenants/list",
                Some(body.into()),
            )
            .await;
        let d = a.err(400, "INVALID_INPUT");
        assert_eq!(d["reason"], "type", "{body}: {d}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn request_ids_are_echoed_or_generated_on_every_response() {
    let s = Server::start().await;
    let client = reqwest::Client::new();
    let send = |method: &'static str, path: &'static str, rid: Option<&'static str>| {
        let mut req = client
            .request(
                reqwest::Method::from_bytes(method.as_bytes()).expect("method"),
                format!("{}{path}", s.url),
            )
            .bearer_auth(ROOT_TOKEN)
            .body(json!({ "tenantId": ROOT }).to_string());
        if let Some(r) = rid {
            req = req.header("x-request-id", r);
        }
        async move {
            let resp = req.send().await.expect("send");
            let status = resp.status().as_u16();
            let id = resp
                .headers()
                .get("x-request-id")
                .map(|v| v.to_str().expect("ascii").to_owned());
            (status, id)
        }
    };
    // Echoed, on success and on every kind of error.
    for (method, path, status) in [
        ("POST", "/api/compute/tenants/list", 200),
        ("POST", "/api/compute/nothing/here", 404),
        ("GET", "/api/compute/tenants/list", 405),
        ("GET", "/healthz", 200),
        ("GET", "/metrics", 200),
    ] {
        let (st, id) = send(method, path, Some("client-req-0001")).await;
        assert_eq!(st, status, "{method} {path}");
        assert_eq!(id.as_deref(), Some("client-req-0001"), "{method} {path}");
    }
    // Generated when absent: present, non-empty and distinct per request.
    let mut seen = BTreeSet::new();
    for _ in 0..5 {
        let (_, id) = send("POST", "/api/compute/tenants/list", None).await;
        let id = id.expect("generated x-request-id");
        assert!(!id.is_empty());
        assert!(seen.insert(id), "request ids must be distinct");
    }
    let a = s
        .raw(None, "POST", "/api/compute/tenants/list", Some("{}".into()))
        .await;
    a.err(401, "UNAUTHENTICATED");
    assert!(a.request_id.is_some_and(|r| !r.is_empty()));
    // An unusable client id (too long) is replaced by a generated one.
    let long = "x".repeat(300);
    let resp = client
        .post(format!("{}/healthz", s.url))
        .header("x-request-id", long.clone())
        .send()
        .await
        .expect("send");
    let id = resp.headers()["x-request-id"].to_str().expect("ascii");
    assert!(!id.is_empty() && id != long);
}

/// Contract 2.3 as data: (method, permission, scope).
const CONTRACT_2_3: &[(&str, &str, &str)] = &[
    ("quotas.get", "compute:quotas:read", "compute-tenant"),
    (
        "reservationGrants.get",
        "compute:quotas:read",
        "compute-tenant",
    ),
    (
        "reservationGrants.list",
        "compute:quotas:read",
        "compute-tenant",
    ),
    ("pools.get", "compute:quotas:read", "compute-tenant"),
    ("pools.list", "compute:quotas:read", "compute-tenant"),
    ("quotas.set", "compute:quotas:manage", "compute-fleet"),
    (
        "reservationGrants.create",
        "compute:providers:manage",
        "compute-provider-account",
    ),
    (
        "reservationGrants.end",
        "compute:providers:manage",
        "compute-provider-account",
    ),
    (
        "reservationGrants.preview",
        "compute:providers:manage",
        "compute-provider-account",
    ),
    (
        "providerAccounts.bindReservation",
        "compute:providers:manage",
        "compute-provider-account",
    ),
    (
        "providerAccounts.unbindReservation",
        "compute:providers:manage",
        "compute-provider-account",
    ),
    (
        "providerAccounts.delete",
        "compute:providers:manage",
        "compute-provider-account",
    ),
    (
        "providerAccounts.scan",
        "compute:providers:manage",
        "compute-provider-account",
    ),
    (
        "providerAccounts.get",
        "compute:providers:read",
        "compute-tenant",
    ),
    (
        "providerAccounts.list",
        "compute:providers:read",
        "compute-tenant",
    ),
    (
        "providerAccounts.listReservations",
        "compute:providers:read",
        "compute-tenant",
    ),
    (
        "reservations.timeline",
        "compute:providers:read",
        "compute-tenant",
    ),
    (
        "reservationGrants.usage",
        "compute:providers:read",
        "compute-tenant",
    ),
    ("pools.create", "compute:pools:manage", "compute-fleet"),
    ("pools.offer", "compute:pools:manage", "compute-fleet"),
    ("tenants.create", "compute:tenants:manage", "compute-fleet"),
    ("tenants.delete", "compute:tenants:manage", "compute-fleet"),
    ("tenants.list", "compute:tenants:manage", "compute-fleet"),
    ("instances.*", "compute:instances:manage", "compute-tenant"),
    (
        "projects.create",
        "compute:instances:manage",
        "compute-tenant",
    ),
    ("usage.list", "compute:usage:read", "compute-tenant"),
    ("events.list", "compute:events:read", "compute-tenant"),
    ("apiKeys.*", "compute:iam:manage", "compute-tenant"),
    (
        "providerAccounts.create",
        "compute:iam:manage",
        "compute-tenant",
    ),
    ("secrets.*", "compute:iam:manage", "compute-tenant"),
    ("audit.list", "compute:iam:manage", "compute-tenant"),
    ("clock.*", "compute:fleet:admin", "compute-fleet"),
];

/// The methods this release must serve.
const FOUNDATION: &[&str] = &[
    "tenants.create",
    "tenants.delete",
    "tenants.list",
    "projects.create",
    "projects.list",
    "apiKeys.create",
    "apiKeys.list",
    "apiKeys.revoke",
    "pools.create",
    "pools.offer",
    "pools.get",
    "pools.list",
    "quotas.get",
    "quotas.set",
    "events.list",
    "clock.get",
    "clock.set",
    "providerAccounts.create",
    "providerAccounts.get",
    "providerAccounts.list",
];

fn contract_entry(name: &str) -> Option<(&'static str, &'static str)> {
    let module = name.split('.').next().unwrap_or_default();
    CONTRACT_2_3
        .iter()
        .find(|(n, _, _)| *n == name)
        .or_else(|| {
            CONTRACT_2_3
                .iter()
                .find(|(n, _, _)| *n == format!("{module}.*"))
        })
        .map(|(_, p, s)| (*p, *s))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_method_list_matches_the_contract() {
    let s = Server::start().await;
    let (status, text) = s.get_text("/api/compute/methods").await;
    assert_eq!(status, 200);
    let list: Value = serde_json::from_str(&text).expect("json");
    let items = list["items"].as_array().expect("items");
    let mut names = BTreeSet::new();
    for m in items {
        let name = m["name"].as_str().expect("name");
        assert!(names.insert(name.to_owned()), "{name} listed twice");
        let (module, method) = name.split_once('.').expect("module.method");
        assert_eq!(m["module"], module, "{m}");
        assert_eq!(m["method"], method, "{m}");
        assert_eq!(m["status"], "registered", "{m}");
        let phase = m["phase"].as_str().expect("phase");
        let digits = phase.strip_prefix('v').expect("phase starts with v");
        let (maj, min) = digits.split_once('.').expect("vX.Y");
        assert!(
            maj.parse::<u32>().is_ok() && min.parse::<u32>().is_ok(),
            "{phase}"
        );
        let kind = if matches!(
            method,
            "get" | "list" | "listReservations" | "timeline" | "usage" | "preview" | "deliveries"
        ) {
            "read"
        } else {
            "mutation"
        };
        assert_eq!(m["kind"], kind, "{m}");
        let service = m["serviceModule"].as_str().expect("serviceModule");
        assert!(
            ["vps", "capacity", "iam", "billing", "events"].contains(&service),
            "{m}"
        );
        let expected_service = match module {
            "pools" | "quotas" => Some("capacity"),
            "providerAccounts" | "reservationGrants" | "instances" | "reservations" => Some("vps"),
            "tenants" | "projects" | "apiKeys" | "audit" => Some("iam"),
            "events" => Some("events"),
            "usage" => Some("billing"),
            _ => None,
        };
        if let Some(e) = expected_service {
            assert_eq!(service, e, "{m}");
        }
        // Every method of contract 2.3 has its permission and scope.
        if let Some((perm, scope)) = contract_entry(name) {
            assert_eq!(m["permission"], perm, "{m}");
            assert_eq!(m["scope"], scope, "{m}");
        } else {
            assert!(
                m["permission"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("compute:"))
            );
            assert!(
                m["scope"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("compute-"))
            );
        }
    }
    for name in FOUNDATION {
        assert!(names.contains(*name), "{name} is not served");
    }
    // The quota methods exactly as seed-quotas.md describes them.
    let find = |n: &str| {
        items
            .iter()
            .find(|m| m["name"] == n)
            .expect("listed")
            .clone()
    };
    assert_eq!(
        find("quotas.get"),
        json!({
            "name": "quotas.get",
            "module": "quotas",
            "method": "get",
            "serviceModule": "capacity",
            "kind": "read",
            "permission": "compute:quotas:read",
            "scope": "compute-tenant",
            "phase": "v0.1",
            "status": "registered",
        })
    );
    assert_eq!(
        find("quotas.set"),
        json!({
            "name": "quotas.set",
            "module": "quotas",
            "method": "set",
            "serviceModule": "capacity",
            "kind": "mutation",
            "permission": "compute:quotas:manage",
            "scope": "compute-fleet",
            "phase": "v0.2",
            "status": "registered",
        })
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn openapi_document_covers_every_registered_method() {
    let s = Server::start().await;
    let (status, text) = s.get_text("/api/openapi.json").await;
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_str(&text).expect("json");
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1")),
        "{}",
        doc["openapi"]
    );
    assert!(doc["info"]["title"].is_string());
    assert!(doc["info"]["version"].is_string());
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    let error = &doc["components"]["schemas"]["Error"];
    assert_eq!(error["type"], "object");

    let (_, text) = s.get_text("/api/compute/methods").await;
    let list: Value = serde_json::from_str(&text).expect("json");
    let items = list["items"].as_array().expect("items");
    let paths = doc["paths"].as_object().expect("paths");
    let posts = paths.values().filter(|p| p.get("post").is_some()).count();
    assert_eq!(posts, items.len(), "one POST path per method");
    for m in items {
        let path = format!(
            "/api/compute/{}/{}",
            m["module"].as_str().expect("module"),
            m["method"].as_str().expect("method")
        );
        let op = &paths.get(&path).unwrap_or_else(|| panic!("{path} missing"))["post"];
        assert_eq!(op["operationId"], m["name"], "{path}");
        assert_eq!(op["x-permission"], m["permission"], "{path}");
        assert_eq!(op["x-scope"], m["scope"], "{path}");
        let schema = &op["requestBody"]["content"]["application/json"]["schema"];
        assert_eq!(schema["type"], "object", "{path}");
        assert_eq!(schema["additionalProperties"], false, "{path}");
        assert!(schema["properties"]["tenantId"].is_object(), "{path}");
        assert!(
            schema["required"]
                .as_array()
                .is_some_and(|r| r.contains(&json!("tenantId"))),
            "{path}"
        );
        let responses = op["responses"].as_object().expect("responses");
        for code in ["200", "400", "401", "403", "413", "500", "503"] {
            assert!(responses.contains_key(code), "{path} lacks {code}");
        }
        // Each `$ref` names a schema of the document: the success response's
        // and the error envelope's.
        let ok_ref = &responses["200"]["content"]["application/json"]["schema"]["$ref"];
        let ok_name = ok_ref
            .as_str()
            .and_then(|r| r.strip_prefix("#/components/schemas/"))
            .expect("typed success response");
        assert_eq!(doc["components"]["schemas"][ok_name]["type"], "object");
        let err_schema = &responses["400"]["content"]["application/json"]["schema"];
        let err_ref = &err_schema["allOf"][0]["$ref"];
        let name = err_ref
            .as_str()
            .and_then(|r| r.strip_prefix("#/components/schemas/"))
            .expect("$ref");
        assert!(doc["components"]["schemas"][name].is_object());
    }
    // The quota fields carry the constraints of seed-quotas.md.
    let request_body = &paths["/api/compute/quotas/set"]["post"]["requestBody"];
    let set = &request_body["content"]["application/json"]["schema"];
    assert_eq!(set["properties"]["max"]["type"], "integer");
    assert_eq!(set["properties"]["max"]["minimum"], 0);
    assert_eq!(set["properties"]["resource"]["maxLength"], 64);
    assert_eq!(
        set["properties"]["resource"]["pattern"],
        "^[A-Za-z][A-Za-z0-9._-]{0,63}$"
    );
    assert_eq!(set["properties"]["poolId"]["maxLength"], 57);
    assert_eq!(
        set["properties"]["poolId"]["pattern"],
        "^pool_[0-9a-hjkmnp-tv-z]{26,52}$"
    );
    assert_eq!(set["properties"]["tenantId"]["maxLength"], 128);
    let mut required: Vec<&str> = set["required"]
        .as_array()
        .expect("required")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    required.sort_unstable();
    assert_eq!(required, ["max", "poolId", "resource", "tenantId"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn checks_run_in_the_contract_order() {
    let s = Server::start().await;
    let acme = s.tenant("acme").await;
    let viewer = s.key(&acme, "acme", "viewer", None).await;

    // 413 before 401: an oversized body without a key.
    s.raw(
        None,
        "POST",
        "/api/compute/tenants/list",
        Some(padded_body(MIB + 10)),
    )
    .await
    .err(413, "PAYLOAD_TOO_LARGE");
    // 401 before 400: no key and a body that is not JSON.
    s.raw(None, "POST", "/api/compute/tenants/list", Some("{".into()))
        .await
        .err(401, "UNAUTHENTICATED");
    s.raw(
        Some("bck_wrong"),
        "POST",
        "/api/compute/quotas/set",
        Some("[]".into()),
    )
    .await
    .err(401, "UNAUTHENTICATED");
    // 400 before 403: a viewer of another tenant with a malformed body.
    let d = s
        .call(
            &viewer,
            "tenants/create",
            json!({ "tenantId": "root", "name": "a b" }),
        )
        .await;
    let d = d.err(400, "INVALID_INPUT");
    assert_eq!(d["field"], "name");
    let d = s
        .call(
            &viewer,
            "quotas/set",
            QuotaBody::new("pool_x", "vcpus", 1).tenant("acme").json(),
        )
        .await;
    assert_eq!(d.err(400, "INVALID_INPUT")["field"], "poolId");
    // 403 before 404: objects that do not exist, asked by callers who may not act.
    let missing_pool = "pool_00000000000000000000000000";
    s.call(
        &acme,
        "pools/offer",
        json!({
            "tenantId": "acme",
            "poolId": missing_pool,
            "offerTenantId": "acme",
            "quotas": {},
        }),
    )
    .await
    .err(403, "ACCESS_DENIED");
    s.call(
        &acme,
        "quotas/set",
        QuotaBody::new(missing_pool, "vcpus", 1)
            .tenant("nobody")
            .json(),
    )
    .await
    .err(403, "ACCESS_DENIED");
    get_account(&s, &acme, "root", "pacct_00000000000000000000000000")
        .await
        .err(403, "ACCESS_DENIED");
    s.call(
        &acme,
        "tenants/delete",
        json!({ "tenantId": "acme", "targetTenantId": "nobody" }),
    )
    .await
    .err(403, "ACCESS_DENIED");
    // And with the permission: the 404.
    s.root(
        "pools/offer",
        json!({ "poolId": missing_pool, "offerTenantId": "acme", "quotas": {} }),
    )
    .await
    .err(404, "NOT_FOUND");
    get_account(&s, &acme, "acme", "pacct_00000000000000000000000000")
        .await
        .err(404, "NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_finishes_the_request_in_flight_and_exits_zero() {
    let s = Server::start().await;
    let body = json!({ "tenantId": ROOT }).to_string();
    let (first, rest) = body.split_at(5);
    let head = format!(
        "POST /api/compute/tenants/list HTTP/1.1\r\nHost: x\r\n\
         Authorization: Bearer {ROOT_TOKEN}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let url = s.url.clone();
    let (first, rest) = (first.as_bytes().to_vec(), rest.as_bytes().to_vec());
    // The request's head and part of its body are in when SIGTERM arrives; the
    // rest follows 700 ms later.
    let inflight = tokio::spawn(async move {
        tcp_request(&url, &head, &[&first, &rest], Duration::from_millis(700)).await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let status = s.stop().await;
    assert!(status.success(), "{status:?}");
    let (code, text) = inflight.await.expect("join");
    assert_eq!(code, 200, "{text}");
    assert_eq!(response_body(&text)["items"][0]["tenantId"], ROOT);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_database_is_unavailable_and_not_ready() {
    // The server runs on `real` (the env override wins over the harness's
    // own database), which the test then drops under it.
    let real = TestDatabase::new().await;
    let unused = TestDatabase::new().await;
    let s = Server::start_on(
        unused,
        Options {
            env: vec![("DATABASE_URL".into(), real.url().to_owned())],
            ..Options::default()
        },
    )
    .await;
    s.root("tenants/create", json!({ "name": "acme" }))
        .await
        .ok();
    assert_eq!(s.get_text("/readyz").await.0, 200);
    drop(real);
    for _ in 0..3 {
        let a = s.root("tenants/list", json!({})).await;
        a.err(503, "UNAVAILABLE");
        let text = a.body.to_string().to_lowercase();
        assert!(
            !text.contains("select") && !text.contains("postgres"),
            "{text}"
        );
    }
    assert_eq!(s.get_text("/readyz").await.0, 503);
    // The process itself is alive.
    assert_eq!(s.get_text("/healthz").await.0, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_id_appears_in_the_log_line_of_its_request() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    // The harness lets the server's log through to the test's stderr; here the
    // binary runs with its log captured.
    let db = TestDatabase::new().await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_api-server"))
        .env("DATABASE_URL", db.url())
        .env("BC_LISTEN", "127.0.0.1:0")
        .env("BC_CLOCK", "manual")
        .env("BC_BOOTSTRAP_TOKEN", ROOT_TOKEN)
        .env("RUST_LOG", "info")
        .env("RUST_LOG_FORMAT", "json")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let mut out = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut err = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let ready = tokio::time::timeout(Duration::from_secs(60), out.next_line())
        .await
        .expect("ready in time")
        .expect("read")
        .expect("ready line");
    let url = ready
        .strip_prefix("api-server listening on ")
        .expect("ready line")
        .to_owned();
    let resp = reqwest::Client::new()
        .post(format!("{url}/api/compute/tenants/list"))
        .bearer_auth(ROOT_TOKEN)
        .header("x-request-id", "trace-me-0042")
        .body(json!({ "tenantId": ROOT }).to_string())
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 200);
    let line = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(line) = err.next_line().await.expect("read") {
            if line.contains("trace-me-0042") {
                return line;
            }
        }
        panic!("the log ended without the request id");
    })
    .await
    .expect("a log line with the request id");
    let entry: Value = serde_json::from_str(&line).expect("a JSON log line");
    assert_eq!(entry["method"], "tenants.list", "{line}");
    assert_eq!(entry["status"], 200, "{line}");
    assert!(line.contains("trace-me-0042"));
    // The secret never reaches the log.
    assert!(!line.contains(ROOT_TOKEN));
}

/// Writes `request` on a fresh connection, half-closes the write side, and
/// reads the whole answer.
async fn half_closed_exchange(url: &str, request: &[u8]) -> (u16, String) {
    let addr = url.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request).await.expect("write");
    stream.shutdown().await.expect("half-close");
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut buf))
        .await
        .expect("answer within 20 s")
        .expect("read");
    let text = String::from_utf8_lossy(&buf).into_owned();
    (status_code(&text), text)
}

/// A raw `projects.create` request as root with `body`.
fn create_project(body: &str) -> String {
    format!(
        "POST /api/compute/projects/create HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        ROOT_TOKEN,
        body.len()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_half_closes_after_its_request_still_gets_the_answer() {
    let s = Server::start().await;
    // A large request body (just under 1 MiB), answered with an error.
    let filler = "x".repeat(1000 * 1000);
    let body = format!(r#"{{"tenantId":"root","name":"n","padding":"{filler}"}}"#);
    let (status, text) = half_closed_exchange(&s.url, create_project(&body).as_bytes()).await;
    assert_eq!(status, 400, "{}", &text[..text.len().min(300)]);
    let answer = response_body(&text);
    assert_eq!(answer["error"]["code"], "INVALID_INPUT", "{answer}");
    assert_eq!(answer["error"]["details"]["field"], "padding");

    // A large answer (the OpenAPI document) to a small request.
    let (status, text) = half_closed_exchange(
        &s.url,
        b"GET /api/openapi.json HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200);
    let doc = response_body(&text);
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1")),
        "{}",
        &text[..text.len().min(300)]
    );

    // A successful method call, half-closed too, with its answer.
    let body = r#"{"tenantId":"root","name":"half-closed"}"#;
    let (status, text) = half_closed_exchange(&s.url, create_project(body).as_bytes()).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(response_body(&text)["project"]["name"], "half-closed");
}

/// Sends a raw HTTP/1.1 request over TCP and returns the status line's code
/// and the whole response text. `head` is everything up to and including the
/// blank line; `body` is written after it in `chunks` with `pause` between.
async fn tcp_request(url: &str, head: &str, body: &[&[u8]], pause: Duration) -> (u16, String) {
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
fn status_code(text: &str) -> u16 {
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// The body of a raw HTTP response text.
fn response_body(text: &str) -> Value {
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or(Value::Null)
}
