//! Every field of the quota tables of seed-quotas.md: type, required, range,
//! pattern, length, unknown fields, and the boundaries that pass.

use serde_json::{Value, json};

use crate::support::bodies::QuotaBody;
use crate::support::fixtures::{create_pool, offer, root_account};
use crate::support::server::{ROOT, ROOT_TOKEN, Server};

/// A 26..=52 character TypeID suffix of `n` characters.
fn suffix(n: usize) -> String {
    "0".repeat(n)
}

fn merged(base: &Value, change: &Value) -> Value {
    let mut out = base.clone();
    for (k, v) in change.as_object().expect("object") {
        if v.is_null() && k.starts_with('-') {
            out.as_object_mut().expect("object").remove(&k[1..]);
        } else {
            out[k] = v.clone();
        }
    }
    out
}

/// (change to a valid body, field, reason). A key `-name` removes `name`.
fn common_cases() -> Vec<(Value, &'static str, &'static str)> {
    vec![
        (json!({ "-tenantId": null }), "tenantId", "missing"),
        (json!({ "tenantId": null }), "tenantId", "missing"),
        (json!({ "tenantId": 5 }), "tenantId", "type"),
        (json!({ "tenantId": ["root"] }), "tenantId", "type"),
        (json!({ "tenantId": "" }), "tenantId", "length"),
        (json!({ "tenantId": "a".repeat(129) }), "tenantId", "length"),
        (json!({ "tenantId": "a b" }), "tenantId", "pattern"),
        (json!({ "tenantId": "root/x" }), "tenantId", "pattern"),
        (json!({ "tenantId": "röot" }), "tenantId", "pattern"),
        (json!({ "poolId": 5 }), "poolId", "type"),
        (json!({ "poolId": { "id": "x" } }), "poolId", "type"),
        (
            json!({ "poolId": format!("pool_{}", suffix(53)) }),
            "poolId",
            "length",
        ),
        (
            json!({ "poolId": format!("pool_{}", suffix(25)) }),
            "poolId",
            "pattern",
        ),
        (
            json!({ "poolId": format!("pool_{}", "u".repeat(26)) }),
            "poolId",
            "pattern",
        ),
        (
            json!({ "poolId": format!("pool_{}", "A".repeat(26)) }),
            "poolId",
            "pattern",
        ),
        (
            json!({ "poolId": format!("pacct_{}", suffix(26)) }),
            "poolId",
            "pattern",
        ),
        (json!({ "poolId": "" }), "poolId", "length"),
        (json!({ "poolID": "x" }), "poolID", "unknown"),
        (json!({ "extra": true }), "extra", "unknown"),
    ]
}

async fn check(s: &Server, method: &str, base: &Value, cases: &[(Value, &str, &str)]) {
    for (change, field, reason) in cases {
        let body = merged(base, change);
        // `call`, not `root`: the body is sent exactly as built.
        let a = s.call(ROOT_TOKEN, method, body.clone()).await;
        let d = a.err(400, "INVALID_INPUT");
        assert_eq!(
            (d["field"].as_str(), d["reason"].as_str()),
            (Some(*field), Some(*reason)),
            "{method} {body}: {d}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn quotas_get_validates_every_field() {
    let s = Server::start().await;
    let account = root_account(&s).await;
    let pool = create_pool(&s, &account).await;
    let base = json!({ "tenantId": ROOT, "poolId": pool });
    // The valid body passes; so does one without the optional poolId, or null.
    s.root("quotas/get", base.clone()).await.ok();
    s.root("quotas/get", json!({})).await.ok();
    s.root("quotas/get", json!({ "poolId": null })).await.ok();
    let cases: Vec<_> = common_cases()
        .into_iter()
        .filter(|(c, _, _)| c.get("-poolId").is_none())
        .collect();
    check(&s, "quotas/get", &base, &cases).await;
    // Boundaries: 128-character tenant ids and 26/52-character pool suffixes
    // pass validation (and then are not found / not the caller's).
    let a = s
        .root("quotas/get", json!({ "tenantId": "a".repeat(128) }))
        .await;
    a.err(403, "ACCESS_DENIED");
    for n in [26, 52] {
        s.root(
            "quotas/get",
            json!({ "poolId": format!("pool_{}", suffix(n)) }),
        )
        .await
        .err(404, "NOT_FOUND");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn quotas_set_validates_every_field() {
    let s = Server::start().await;
    let acme = s.tenant("acme").await;
    let account = root_account(&s).await;
    let pool = create_pool(&s, &account).await;
    offer(&s, &pool, "acme", json!({ "vcpus": 1 })).await;
    let base = QuotaBody::new(&pool, "vcpus", 8).tenant("acme").json();
    let mut cases = common_cases();
    cases.extend([
        (json!({ "-poolId": null }), "poolId", "missing"),
        (json!({ "poolId": null }), "poolId", "missing"),
        (json!({ "-resource": null }), "resource", "missing"),
        (json!({ "resource": 5 }), "resource", "type"),
        (json!({ "resource": "" }), "resource", "length"),
        (json!({ "resource": "a".repeat(65) }), "resource", "length"),
        (json!({ "resource": "1vcpus" }), "resource", "pattern"),
        (json!({ "resource": "-vcpus" }), "resource", "pattern"),
        (json!({ "resource": "v cpus" }), "resource", "pattern"),
        (json!({ "resource": "vcpus/x" }), "resource", "pattern"),
        (json!({ "-max": null }), "max", "missing"),
        (json!({ "max": null }), "max", "missing"),
        (json!({ "max": "8" }), "max", "type"),
        (json!({ "max": 8.0 }), "max", "type"),
        (json!({ "max": 8.5 }), "max", "type"),
        (json!({ "max": true }), "max", "type"),
        (json!({ "max": [8] }), "max", "type"),
        (json!({ "max": -1 }), "max", "range"),
        (json!({ "max": i64::MIN }), "max", "range"),
        (
            json!({ "max": 9_223_372_036_854_775_808_u64 }),
            "max",
            "range",
        ),
        (json!({ "min": 1 }), "min", "unknown"),
    ]);
    check(&s, "quotas/set", &base, &cases).await;
    // Numbers written as exponents are not integers.
    let a = s
        .raw(
            Some(ROOT_TOKEN),
            "POST",
            "/api/compute/quotas/set",
            Some(format!(
                r#"{{"tenantId":"acme","poolId":"{pool}","resource":"vcpus","max":1e3}}"#
            )),
        )
        .await;
    let d = a.err(400, "INVALID_INPUT");
    assert_eq!(
        (d["field"].as_str(), d["reason"].as_str()),
        (Some("max"), Some("type"))
    );

    // Nothing above changed the row or emitted an event.
    let rows = s
        .call(&acme, "quotas/get", json!({ "tenantId": "acme" }))
        .await
        .ok();
    assert_eq!(rows["items"][0]["max"], 1);
    assert_eq!(s.events(&acme, "acme").await.len(), 1);
    let v = s.root("quotas/set", base.clone()).await.ok();
    assert_eq!(v["quota"]["max"], 8);

    // Boundaries that pass: max 0 and i64::MAX, a 64-character resource
    // starting with a capital, and a 128-character unknown target tenant
    // (validated, then NOT_FOUND).
    let v = s
        .root("quotas/set", merged(&base, &json!({ "max": 0 })))
        .await
        .ok();
    assert_eq!(v["quota"]["available"], 0);
    let v = s
        .root("quotas/set", merged(&base, &json!({ "max": i64::MAX })))
        .await
        .ok();
    assert_eq!(v["quota"]["max"], i64::MAX);
    assert_eq!(v["quota"]["available"], i64::MAX);
    let long = format!("R{}", "a._-".repeat(16).get(..63).expect("63"));
    assert_eq!(long.len(), 64);
    let v = s
        .root("quotas/set", merged(&base, &json!({ "resource": long })))
        .await
        .ok();
    assert_eq!(v["quota"]["resource"], json!(long));
    s.root(
        "quotas/set",
        merged(&base, &json!({ "tenantId": "t".repeat(128) })),
    )
    .await
    .err(404, "NOT_FOUND");
    s.root(
        "quotas/set",
        merged(&base, &json!({ "poolId": format!("pool_{}", suffix(52)) })),
    )
    .await
    .err(404, "NOT_FOUND");
}
