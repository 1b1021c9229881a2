//! providerAccounts.create/get/list (contract 3.5) and clock.get/set (3.8, 8.3).

use serde_json::{Value, json};

use crate::support::fixtures::{account_body, account_in, is_typeid};
use crate::support::server::{Options, ROOT, ROOT_TOKEN, Server};

#[tokio::test(flavor = "multi_thread")]
async fn provider_accounts_are_created_with_a_normalized_config() {
    let s = Server::start().await;
    let acme = s.tenant("acme").await;
    let now = s.root("clock/get", json!({})).await.ok()["now"].clone();
    let v = s
        .call(
            &acme,
            "providerAccounts/create",
            account_body("acme", "gce prod", "a1"),
        )
        .await
        .ok();
    let account = &v["account"];
    assert!(is_typeid(&account["accountId"], "pacct"), "{account}");
    assert_eq!(
        *account,
        json!({
            "accountId": account["accountId"],
            "tenantId": "acme",
            "name": "gce prod",
            "provider": "gce",
            "config": {
                "project": "acme-project-1",
                "endpoint": "https://compute.googleapis.com",
                "credentials": "none",
            },
            "createdAt": now,
        })
    );
    // An explicit endpoint and the other credential references are kept
    // (a tenant may name only listed endpoints and `none`; root may name any
    // endpoint and the references the operator listed).
    for (i, (tenant, token, endpoint, credentials, stored)) in [
        (
            "acme",
            acme.as_str(),
            "http://127.0.0.1:8089",
            "none",
            "http://127.0.0.1:8089",
        ),
        (
            "acme",
            acme.as_str(),
            "https://compute.googleapis.com/",
            "none",
            "https://compute.googleapis.com",
        ),
        (
            ROOT,
            ROOT_TOKEN,
            "https://compute.example.com/",
            "env:GCE_TOKEN",
            "https://compute.example.com",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let mut body = account_body(tenant, "other", &format!("k-{i}"));
        body["config"] = json!({
            "project": "acme-project-1",
            "endpoint": endpoint,
            "credentials": credentials,
        });
        let v = s.call(token, "providerAccounts/create", body).await.ok();
        assert_eq!(v["account"]["config"]["endpoint"], stored);
        assert_eq!(v["account"]["config"]["credentials"], credentials);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn provider_accounts_get_and_list_are_per_tenant() {
    let s = Server::start().await;
    let acme = s.tenant("acme").await;
    let beta = s.tenant("beta").await;
    let t0 = s.root("clock/get", json!({})).await.ok()["now"]
        .as_i64()
        .expect("now");
    let first = account_in(&s, &acme, "acme").await;
    s.set_clock(t0 + 1_000).await;
    let second = account_in(&s, &acme, "acme").await;
    let theirs = account_in(&s, &beta, "beta").await;

    let viewer = s.key(&acme, "acme", "viewer", None).await;
    let list = s
        .call(
            &viewer,
            "providerAccounts/list",
            json!({ "tenantId": "acme" }),
        )
        .await
        .ok();
    let ids: Vec<&Value> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|a| &a["accountId"])
        .collect();
    assert_eq!(ids, [&json!(second), &json!(first)], "newest first");
    let got = s
        .call(
            &viewer,
            "providerAccounts/get",
            json!({ "tenantId": "acme", "accountId": first }),
        )
        .await
        .ok();
    assert_eq!(got["account"], list["items"][1]);
    // Another tenant's account is NOT_FOUND, exactly like a missing one.
    let a = s
        .call(
            &viewer,
            "providerAccounts/get",
            json!({ "tenantId": "acme", "accountId": theirs }),
        )
        .await;
    a.err(404, "NOT_FOUND");
    s.call(
        &viewer,
        "providerAccounts/get",
        json!({ "tenantId": "acme", "accountId": "pacct_00000000000000000000000000" }),
    )
    .await
    .err(404, "NOT_FOUND");
    // Root sees its own accounts only, not the tenants'.
    let root_list = s.root("providerAccounts/list", json!({})).await.ok();
    assert_eq!(root_list["items"], json!([]));
    s.root("providerAccounts/get", json!({ "accountId": first }))
        .await
        .err(404, "NOT_FOUND");
    // Validation of the id.
    let a = s
        .call(
            &viewer,
            "providerAccounts/get",
            json!({ "tenantId": "acme", "accountId": "pool_00000000000000000000000000" }),
        )
        .await;
    assert_eq!(a.err(400, "INVALID_INPUT")["field"], "accountId");
    // An account-scoped key reads nothing at tenant scope, even its own account.
    let scoped = s.key(&acme, "acme", "provider-admin", Some(&first)).await;
    s.call(
        &scoped,
        "providerAccounts/get",
        json!({ "tenantId": "acme", "accountId": first }),
    )
    .await
    .err(403, "ACCESS_DENIED");
    // A member may read; only compute:iam:manage creates.
    let member = s.key(&acme, "acme", "member", None).await;
    s.call(
        &member,
        "providerAccounts/list",
        json!({ "tenantId": "acme" }),
    )
    .await
    .ok();
    s.call(
        &member,
        "providerAccounts/create",
        account_body("acme", "x", "m1"),
    )
    .await
    .err(403, "ACCESS_DENIED");
    let pa = s.key(&acme, "acme", "provider-admin", None).await;
    s.call(
        &pa,
        "providerAccounts/create",
        account_body("acme", "x", "m2"),
    )
    .await
    .err(403, "ACCESS_DENIED");
}

#[tokio::test(flavor = "multi_thread")]
async fn provider_account_configs_hold_references_never_secrets() {
    let s = Server::start().await;
    let acme = s.tenant("acme").await;
    let pem = "-----BEGIN PRIVATE KEY-----\n\
               MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n\
               -----END PRIVATE KEY-----\n";
    let cases: Vec<(Value, &str, &str, Option<&str>)> = vec![
        // Secrets where a reference belongs.
        (
            json!({ "project": "acme-prod", "credentials": "ya29.xxxxx" }),
            "config.credentials",
            "secret-value",
            Some("ya29.xxxxx"),
        ),
        (
            json!({ "project": "acme-prod", "credentials": pem }),
            "config.credentials",
            "secret-value",
            Some("MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"),
        ),
        (
            json!({
                "project": "acme-prod",
                "credentials": { "type": "service_account", "private_key": pem },
            }),
            "config.credentials",
            "secret-value",
            Some("MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"),
        ),
        (
            json!({ "project": "acme-prod", "credentials": "hunter2-password" }),
            "config.credentials",
            "secret-value",
            Some("hunter2-password"),
        ),
        (
            json!({
                "project": "acme-prod",
                "credentials": "none",
                "endpoint": "https://admin:s3cr3tpass@compute.example.com",
            }),
            "config.endpoint",
            "secret-value",
            Some("s3cr3tpass"),
        ),
        (
            json!({
                "project": "acme-prod",
                "credentials": "none",
                "foo": "AIzaSyA1234567890abcdefghijklmnopqrstuv",
            }),
            "config.foo",
            "secret-value",
            Some("AIzaSyA1234567890abcdefghijklmnopqrstuv"),
        ),
        // The manifest's own rules.
        (
            json!({ "project": "acme-prod", "credentials": "none", "foo": "bar" }),
            "config.foo",
            "unknown",
            None,
        ),
        (
            json!({ "credentials": "none" }),
            "config.project",
            "missing",
            None,
        ),
        (
            json!({ "project": "acme-prod" }),
            "config.credentials",
            "missing",
            None,
        ),
        (
            json!({ "project": "Acme_Prod", "credentials": "none" }),
            "config.project",
            "pattern",
            None,
        ),
        (
            json!({ "project": 42, "credentials": "none" }),
            "config.project",
            "type",
            None,
        ),
        (
            json!({ "project": "acme-prod", "credentials": "env:lower-case" }),
            "config.credentials",
            "pattern",
            None,
        ),
        (
            json!({ "project": "acme-prod", "credentials": "file:relative/path" }),
            "config.credentials",
            "pattern",
            None,
        ),
        (
            json!({
                "project": "acme-prod",
                "credentials": "none",
                "endpoint": "ftp://compute.example.com",
            }),
            "config.endpoint",
            "pattern",
            None,
        ),
        (json!("project=acme"), "config", "type", None),
    ];
    for (i, (config, field, reason, secret)) in cases.into_iter().enumerate() {
        let mut body = account_body("acme", "gce", &format!("c-{i}"));
        body["config"] = config.clone();
        let a = s.call(&acme, "providerAccounts/create", body).await;
        let d = a.err(400, "INVALID_INPUT");
        assert_eq!(
            (d["field"].as_str(), d["reason"].as_str()),
            (Some(field), Some(reason)),
            "{config}: {d}"
        );
        // The answer never repeats the secret.
        if let Some(secret) = secret {
            assert!(
                !a.body.to_string().contains(secret),
                "the error echoes the secret: {}",
                a.body
            );
        }
    }
    // Nothing was stored.
    let list = s
        .call(
            &acme,
            "providerAccounts/list",
            json!({ "tenantId": "acme" }),
        )
        .await
        .ok();
    assert_eq!(list["items"], json!([]));
    // The other fields.
    for (field, value, reason) in [
        ("provider", json!("aws"), "enum"),
        ("name", json!("a/b"), "pattern"),
        ("idempotencyKey", json!(""), "length"),
    ] {
        let mut body = account_body("acme", "gce", "f");
        body[field] = value;
        let a = s.call(&acme, "providerAccounts/create", body).await;
        let d = a.err(400, "INVALID_INPUT");
        assert_eq!(
            (d["field"].as_str(), d["reason"].as_str()),
            (Some(field), Some(reason))
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_manual_clock_moves_forward_only() {
    let s = Server::start().await;
    let v = s.root("clock/get", json!({})).await.ok();
    assert_eq!(v["mode"], "manual");
    let t0 = v["now"].as_i64().expect("now");
    // The harness's template database was migrated recently.
    assert!(t0 > 1_600_000_000_000, "{t0}");

    let set = s
        .root("clock/set", json!({ "now": t0 + 3_600_000 }))
        .await
        .ok();
    assert_eq!(set, json!({ "now": t0 + 3_600_000, "mode": "manual" }));
    assert_eq!(
        s.root("clock/get", json!({})).await.ok(),
        json!({ "now": t0 + 3_600_000, "mode": "manual" })
    );
    // Setting the same instant is allowed.
    s.root("clock/set", json!({ "now": t0 + 3_600_000 }))
        .await
        .ok();
    // Backwards is INVALID_INPUT, and the clock stays.
    let a = s.root("clock/set", json!({ "now": t0 })).await;
    let d = a.err(400, "INVALID_INPUT");
    assert_eq!(d["field"], "now");
    assert_eq!(
        s.root("clock/get", json!({})).await.ok()["now"],
        t0 + 3_600_000
    );
    // Objects are stamped with the server's now.
    let v = s
        .root("tenants/create", json!({ "name": "acme" }))
        .await
        .ok();
    assert_eq!(v["tenant"]["createdAt"], t0 + 3_600_000);
    // Validation.
    for (now, reason) in [
        (json!(-1), "range"),
        (json!("soon"), "type"),
        (json!(1.5), "type"),
    ] {
        let a = s.root("clock/set", json!({ "now": now })).await;
        let d = a.err(400, "INVALID_INPUT");
        assert_eq!(
            (d["field"].as_str(), d["reason"].as_str()),
            (Some("now"), Some(reason))
        );
    }
    s.root("clock/set", json!({}))
        .await
        .err(400, "INVALID_INPUT");
    // Only root's fleet admins.
    let acme = v["adminKey"]["secret"].as_str().expect("secret").to_owned();
    for tenant in ["acme", ROOT] {
        s.call(&acme, "clock/get", json!({ "tenantId": tenant }))
            .await
            .err(403, "ACCESS_DENIED");
        s.call(
            &acme,
            "clock/set",
            json!({ "tenantId": tenant, "now": t0 + 7_200_000 }),
        )
        .await
        .err(403, "ACCESS_DENIED");
    }
    let root_viewer = s.key(ROOT_TOKEN, ROOT, "viewer", None).await;
    s.call(
        &root_viewer,
        "clock/set",
        json!({ "tenantId": ROOT, "now": t0 + 7_200_000 }),
    )
    .await
    .err(403, "ACCESS_DENIED");
    assert_eq!(
        s.root("clock/get", json!({})).await.ok()["now"],
        t0 + 3_600_000
    );
}

fn os_now() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    i64::try_from(since.as_millis()).expect("fits")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_system_clock_cannot_be_set() {
    let s = Server::start_with(Options {
        clock: "system",
        ..Options::default()
    })
    .await;
    let before = os_now();
    let v = s.root("clock/get", json!({})).await.ok();
    let after = os_now();
    assert_eq!(v["mode"], "system");
    let now = v["now"].as_i64().expect("now");
    assert!(
        before - 1_000 <= now && now <= after + 1_000,
        "{before} {now} {after}"
    );
    let a = s.root("clock/set", json!({ "now": now + 3_600_000 })).await;
    a.err(409, "INVALID_STATE");
    // Still the OS clock.
    let again = s.root("clock/get", json!({})).await.ok()["now"]
        .as_i64()
        .expect("now");
    assert!(again < now + 3_600_000);
    // Objects carry the OS time.
    let start = os_now();
    let t = s
        .root("tenants/create", json!({ "name": "acme" }))
        .await
        .ok();
    let created = t["tenant"]["createdAt"].as_i64().expect("createdAt");
    assert!(created >= start - 1_000 && created <= os_now() + 1_000);
}
