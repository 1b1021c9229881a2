use serde_json::{Value, json};

use crate::accounts::google_auth::{SECRETS_KEY, server_with_key};
use crate::support::server::{Answer, Options, ROOT, Server, rand_suffix};

fn create_body(tenant: &str, url: &str) -> Value {
    json!({ "tenantId": tenant, "url": url, "idempotencyKey": format!("wh-{}", rand_suffix()) })
}

async fn create(s: &Server, token: &str, tenant: &str, url: &str) -> Answer {
    s.call(token, "webhooks/create", create_body(tenant, url))
        .await
}

async fn on(s: &Server, token: &str, tenant: &str, method: &str, id: &str) -> Answer {
    s.call(
        token,
        &format!("webhooks/{method}"),
        json!({ "tenantId": tenant, "webhookId": id }),
    )
    .await
}

fn secret_of(v: &Value) -> String {
    let secret = v["secret"].as_str().expect("secret").to_owned();
    let body = secret.strip_prefix("whsec_").expect("whsec_ prefix");
    assert_eq!(body.len(), 43, "{secret}");
    assert!(
        body.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
    );
    secret
}

#[tokio::test(flavor = "multi_thread")]
async fn the_secret_is_shown_once_and_nowhere_else() {
    let log = tempfile::NamedTempFile::new().expect("log file");
    let s = Server::start_with(Options {
        env: vec![
            ("BC_SECRETS_KEY".into(), SECRETS_KEY.into()),
            ("RUST_LOG".into(), "debug".into()),
        ],
        log: Some(log.path().to_owned()),
        ..Options::default()
    })
    .await;
    let acme = s.tenant("acme").await;
    let body = json!({
        "tenantId": "acme",
        "url": "https://hooks.example.com/x",
        "types": ["instance.failed", "webhook.test"],
        "description": "pager",
        "idempotencyKey": "wh-1",
    });
    let v = s.call(&acme, "webhooks/create", body.clone()).await.ok();
    let secret = secret_of(&v);
    let hook = &v["webhook"];
    let id = hook["webhookId"].as_str().expect("id").to_owned();
    assert!(id.starts_with("whk_"), "{id}");
    assert_eq!(hook["tenantId"], "acme");
    assert_eq!(hook["url"], "https://hooks.example.com/x");
    assert_eq!(hook["types"], json!(["instance.failed", "webhook.test"]));
    assert_eq!(hook["description"], "pager");
    assert_eq!(hook["state"], "enabled");

    // A replay answers the same webhook, and nothing more is created.
    let again = s.call(&acme, "webhooks/create", body.clone()).await.ok();
    assert_eq!(again["webhook"]["webhookId"], id.as_str());
    let mut other = body.clone();
    other["url"] = json!("https://hooks.example.com/y");
    let conflict = s.call(&acme, "webhooks/create", other).await;
    assert_eq!(
        conflict.err(409, "CONFLICT")["idempotencyKey"],
        json!("wh-1")
    );

    let got = on(&s, &acme, "acme", "get", &id).await.ok();
    assert_eq!(got["webhook"], *hook);
    let list = s
        .call(&acme, "webhooks/list", json!({ "tenantId": "acme" }))
        .await
        .ok();
    assert_eq!(list["items"], json!([hook]));
    let tested = on(&s, &acme, "acme", "test", &id).await.ok();
    let event_id = tested["eventId"].as_str().expect("eventId").to_owned();
    let events = s.events(&acme, "acme").await;
    let test_event = events
        .iter()
        .find(|e| e["eventId"] == event_id.as_str())
        .expect("the webhook.test event");
    assert_eq!(test_event["type"], "webhook.test");
    assert_eq!(test_event["data"], json!({ "webhookId": id }));

    let audit = s
        .call(&acme, "audit/list", json!({ "tenantId": "acme" }))
        .await
        .ok();
    let records: Vec<&Value> = audit["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|r| {
            r["method"]
                .as_str()
                .is_some_and(|m| m.starts_with("webhooks."))
        })
        .collect();
    assert_eq!(records.len(), 4, "{audit}");
    assert!(
        records
            .iter()
            .filter(|r| r["outcome"] != "failed")
            .all(|r| r["objectIds"].as_array().expect("ids").contains(&json!(id))),
        "{audit}"
    );
    let outcomes: Vec<&Value> = records.iter().map(|r| &r["outcome"]).collect();
    assert_eq!(
        outcomes,
        [
            &json!("ok"),
            &json!("replayed"),
            &json!("failed"),
            &json!("ok")
        ]
    );

    for shown in [&got, &list, &json!(events), &audit] {
        assert!(!shown.to_string().contains(&secret), "{shown}");
    }
    // The server's own log (at debug) never carries it.
    let logged = std::fs::read_to_string(log.path()).expect("log");
    assert!(logged.contains("webhook created"), "{logged}");
    assert!(!logged.contains(&secret));
    assert!(!logged.contains("whsec_"));
}

#[tokio::test(flavor = "multi_thread")]
async fn at_most_ten_webhooks_and_two_creates_at_nine_take_one_place() {
    let s = server_with_key().await;
    let acme = s.tenant("acme").await;
    for i in 0..9 {
        create(&s, &acme, "acme", &format!("https://h{i}.example.com/x"))
            .await
            .ok();
    }
    let (a, b) = tokio::join!(
        create(&s, &acme, "acme", "https://a.example.com/x"),
        create(&s, &acme, "acme", "https://b.example.com/x"),
    );
    let mut statuses = [a.status, b.status];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 429], "{:?} {:?}", a.body, b.body);
    let refused = create(&s, &acme, "acme", "https://c.example.com/x").await;
    let details = refused.err(429, "QUOTA_EXCEEDED");
    assert_eq!(
        *details,
        json!({ "resource": "webhooks", "max": 10, "used": 10, "requested": 1 })
    );
    // A deleted webhook frees its place.
    let list = s
        .call(&acme, "webhooks/list", json!({ "tenantId": "acme" }))
        .await
        .ok();
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 10);
    let first = items[9]["webhookId"].as_str().expect("id");
    assert_eq!(items[9]["url"], "https://h0.example.com/x", "newest first");
    let deleted = on(&s, &acme, "acme", "delete", first).await.ok();
    assert_eq!(deleted, json!({ "webhookId": first, "deleted": true }));
    on(&s, &acme, "acme", "get", first)
        .await
        .err(404, "NOT_FOUND");
    on(&s, &acme, "acme", "delete", first)
        .await
        .err(404, "NOT_FOUND");
    create(&s, &acme, "acme", "https://d.example.com/x")
        .await
        .ok();
}

#[tokio::test(flavor = "multi_thread")]
async fn urls_follow_the_endpoint_rules() {
    let s = server_with_key().await;
    let acme = s.tenant("acme").await;
    for url in [
        "http://example.com/x",
        "https://127.0.0.1/x",
        "https://10.0.0.1/x",
        "https://[::1]/x",
        "https://localhost/x",
        "https://169.254.169.254/x",
    ] {
        let a = create(&s, &acme, "acme", url).await;
        let details = a.err(400, "INVALID_INPUT");
        assert_eq!(details["field"], "url", "{url}");
        assert_eq!(details["reason"], "endpoint-not-allowed", "{url}");
    }
    let ok = create(&s, &acme, "acme", "https://hooks.example.com/x")
        .await
        .ok();
    let id = ok["webhook"]["webhookId"].as_str().expect("id");
    // update applies the same rules.
    let a = s
        .call(
            &acme,
            "webhooks/update",
            json!({ "tenantId": "acme", "webhookId": id, "url": "https://10.1.2.3/x" }),
        )
        .await;
    assert_eq!(
        a.err(400, "INVALID_INPUT")["reason"],
        "endpoint-not-allowed"
    );
    // Root's webhooks may name any http or https URL.
    let root = s
        .root("webhooks/create", create_body(ROOT, "http://127.0.0.1:9/x"))
        .await
        .ok();
    assert_eq!(root["webhook"]["url"], "http://127.0.0.1:9/x");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_listed_origin_is_allowed_to_tenants() {
    let s = Server::start_with(Options {
        env: vec![
            ("BC_SECRETS_KEY".into(), SECRETS_KEY.into()),
            ("BC_WEBHOOK_ENDPOINTS".into(), "http://127.0.0.1:9".into()),
        ],
        ..Options::default()
    })
    .await;
    let acme = s.tenant("acme").await;
    create(&s, &acme, "acme", "http://127.0.0.1:9/hook")
        .await
        .ok();
    let a = create(&s, &acme, "acme", "http://127.0.0.1:10/hook").await;
    assert_eq!(
        a.err(400, "INVALID_INPUT")["reason"],
        "endpoint-not-allowed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn another_tenants_webhook_is_not_found() {
    let s = server_with_key().await;
    let acme = s.tenant("acme").await;
    let evil = s.tenant("evil").await;
    let v = create(&s, &acme, "acme", "https://hooks.example.com/x")
        .await
        .ok();
    let id = v["webhook"]["webhookId"].as_str().expect("id");
    for method in ["get", "delete", "test", "deliveries", "rotateSecret"] {
        on(&s, &evil, "evil", method, id)
            .await
            .err(404, "NOT_FOUND");
    }
    let a = s
        .call(
            &evil,
            "webhooks/update",
            json!({ "tenantId": "evil", "webhookId": id, "state": "disabled" }),
        )
        .await;
    a.err(404, "NOT_FOUND");
    let list = s
        .call(&evil, "webhooks/list", json!({ "tenantId": "evil" }))
        .await
        .ok();
    assert_eq!(list["items"], json!([]));
    // Untouched.
    let got = on(&s, &acme, "acme", "get", id).await.ok();
    assert_eq!(got["webhook"]["state"], "enabled");
}

#[tokio::test(flavor = "multi_thread")]
async fn rotation_update_and_deliveries() {
    let s = server_with_key().await;
    let acme = s.tenant("acme").await;
    let v = create(&s, &acme, "acme", "https://hooks.example.com/x")
        .await
        .ok();
    let first = secret_of(&v);
    let id = v["webhook"]["webhookId"].as_str().expect("id").to_owned();

    let rotated = on(&s, &acme, "acme", "rotateSecret", &id).await.ok();
    let second = secret_of(&rotated);
    assert_ne!(first, second);
    assert_eq!(rotated["webhook"]["webhookId"], id.as_str());
    let keyring = storage::crypto::Keyring::from_config(Some(SECRETS_KEY), None).expect("keyring");
    let mut conn = storage::db::establish(s.db.url()).await.expect("connect");
    let clock = s.root("clock/get", json!({ "tenantId": ROOT })).await.ok();
    let now = clock["now"].as_i64().expect("now");
    let whk = storage::ids::WebhookId::parse(&id).expect("webhook id");
    let signing = storage::ops::webhooks::signing_secrets(&mut conn, &keyring, &whk, now)
        .await
        .expect("secrets");
    assert_eq!(signing, [second.clone(), first.clone()]);
    let later = now + 24 * 3_600_000 + 1;
    let signing = storage::ops::webhooks::signing_secrets(&mut conn, &keyring, &whk, later)
        .await
        .expect("secrets");
    assert_eq!(signing, [second]);

    // Disabled, then enabled again; types and description replaced.
    let update = |body: Value| s.call(&acme, "webhooks/update", body);
    let off = update(json!({ "tenantId": "acme", "webhookId": id, "state": "disabled" }))
        .await
        .ok();
    assert_eq!(off["webhook"]["state"], "disabled");
    let on_again = update(json!({
        "tenantId": "acme",
        "webhookId": id,
        "state": "enabled",
        "types": ["quota.updated"],
        "description": "ops",
    }))
    .await
    .ok();
    assert_eq!(on_again["webhook"]["state"], "enabled");
    assert_eq!(on_again["webhook"]["types"], json!(["quota.updated"]));
    assert_eq!(on_again["webhook"]["description"], "ops");
    let bad = update(json!({ "tenantId": "acme", "webhookId": id, "types": ["nope"] })).await;
    bad.err(400, "INVALID_INPUT");

    // No attempts yet: an empty page whose cursor polls on.
    let page = on(&s, &acme, "acme", "deliveries", &id).await.ok();
    assert_eq!(page["items"], json!([]));
    assert_eq!(page["hasMore"], false);
    let cursor = page["nextCursor"].as_str().expect("cursor");
    let again = s
        .call(
            &acme,
            "webhooks/deliveries",
            json!({ "tenantId": "acme", "webhookId": id, "after": cursor }),
        )
        .await
        .ok();
    assert_eq!(again["nextCursor"], cursor);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_secrets_key_create_is_invalid_state() {
    let s = Server::start().await;
    let acme = s.tenant("acme").await;
    let a = create(&s, &acme, "acme", "https://hooks.example.com/x").await;
    assert_eq!(a.err(409, "INVALID_STATE")["reason"], "no-secrets-key");
    let list = s
        .call(&acme, "webhooks/list", json!({ "tenantId": "acme" }))
        .await
        .ok();
    assert_eq!(list["items"], json!([]));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_viewer_key_is_denied() {
    let s = server_with_key().await;
    let acme = s.tenant("acme").await;
    let viewer = s.key(&acme, "acme", "viewer", None).await;
    create(&s, &viewer, "acme", "https://hooks.example.com/x")
        .await
        .err(403, "ACCESS_DENIED");
    s.call(&viewer, "webhooks/list", json!({ "tenantId": "acme" }))
        .await
        .err(403, "ACCESS_DENIED");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replayed_create_answers_the_webhook_without_its_secret() {
    let s = server_with_key().await;
    let acme = s.tenant("acme").await;
    let body = create_body("acme", "https://hooks.example.com/x");
    let first = s.call(&acme, "webhooks/create", body.clone()).await.ok();
    let secret = secret_of(&first);
    let again = s.call(&acme, "webhooks/create", body.clone()).await.ok();
    assert_eq!(again["webhook"], first["webhook"]);
    assert!(again.get("secret").is_none(), "{again}");
    assert!(!again.to_string().contains(&secret));
    // A client that lost the secret rotates it.
    let id = first["webhook"]["webhookId"].as_str().expect("id");
    let rotated = on(&s, &acme, "acme", "rotateSecret", id).await.ok();
    assert_ne!(secret_of(&rotated), secret);
}

#[tokio::test(flavor = "multi_thread")]
async fn webhooks_are_listed_newest_first() {
    let s = server_with_key().await;
    let acme = s.tenant("acme").await;
    let mut ids = Vec::new();
    for k in 0..3 {
        s.set_clock(1_893_456_000_000 + k * 1000).await;
        let v = create(&s, &acme, "acme", &format!("https://h{k}.example.com/x"))
            .await
            .ok();
        ids.push(v["webhook"]["webhookId"].clone());
    }
    let list = s
        .call(&acme, "webhooks/list", json!({ "tenantId": "acme" }))
        .await
        .ok();
    let listed: Vec<Value> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|w| w["webhookId"].clone())
        .collect();
    ids.reverse();
    assert_eq!(listed, ids);
}
