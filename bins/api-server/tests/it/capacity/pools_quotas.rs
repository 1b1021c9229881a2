//! pools (contract 3.3) and quotas (seed-quotas.md, contract 3.4).

use serde_json::{Value, json};

use crate::support::bodies::QuotaBody;
use crate::support::calls::{delete_tenant, get_pool, get_quotas, list_pools};
use crate::support::fixtures::{
    account_in, acme_and_pool, create_pool, each, is_typeid, offer, offer_answer, pool_body,
    root_account, set_quota_answer,
};
use crate::support::server::{ROOT, ROOT_TOKEN, Server};

const MISSING_POOL: &str = "pool_00000000000000000000000000";

fn quota(pool: &str, resource: &str, max: i64, used: i64) -> Value {
    json!({
        "poolId": pool,
        "resource": resource,
        "max": max,
        "used": used,
        "available": (max - used).max(0),
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn pools_create_returns_the_pool_and_creates_root_quota_rows() {
    let s = Server::start().await;
    let account = root_account(&s).await;
    let now = s.root("clock/get", json!({})).await.ok()["now"].clone();
    let v = s
        .root(
            "pools/create",
            pool_body(&account, "gce us-central1", "p-1"),
        )
        .await
        .ok();
    let pool = &v["pool"];
    assert!(is_typeid(&pool["poolId"], "pool"), "{pool}");
    let id = pool["poolId"].as_str().expect("poolId").to_owned();
    assert_eq!(
        *pool,
        json!({
            "poolId": id,
            "name": "gce us-central1",
            "region": "us-central1",
            "provider": "gce",
            "accountId": account,
            "flavors": [
                { "name": "n2-standard-4", "vcpus": 4, "memoryGib": 16, "gpus": 0 },
                { "name": "a2-highgpu-1g", "vcpus": 12, "memoryGib": 85, "gpus": 1 }
            ],
            "offeredTo": [],
            "createdAt": now,
        })
    );
    // The root tenant's rows, and one quota.updated per row in root.
    let rows = s.root("quotas/get", json!({ "poolId": id })).await.ok();
    assert_eq!(
        rows["items"],
        json!([quota(&id, "instances", 10, 0), quota(&id, "vcpus", 40, 0)])
    );
    let events = s.events_of(ROOT_TOKEN, ROOT, "quota.updated").await;
    let data: Vec<&Value> = events.iter().map(|e| &e["data"]).collect();
    assert_eq!(
        data,
        [
            &json!({ "poolId": id, "resource": "instances", "max": 10 }),
            &json!({ "poolId": id, "resource": "vcpus", "max": 40 }),
        ]
    );
    for e in &events {
        assert_eq!(e["tenantId"], ROOT);
        assert_eq!(e["occurredAt"], now);
        assert!(is_typeid(&e["eventId"], "evt"));
    }
    // get returns the same pool; without quotas, no rows.
    let got = s.root("pools/get", json!({ "poolId": id })).await.ok();
    assert_eq!(got["pool"], *pool);
    let mut body = pool_body(&account, "no quotas", "p-2");
    body.as_object_mut().expect("object").remove("quotas");
    let bare = s.root("pools/create", body).await.ok()["pool"]["poolId"].clone();
    let rows = s.root("quotas/get", json!({ "poolId": bare })).await.ok();
    assert_eq!(rows["items"], json!([]));
}

#[tokio::test(flavor = "multi_thread")]
async fn pools_create_refuses_bad_input_and_accounts_it_cannot_see() {
    let s = Server::start().await;
    let account = root_account(&s).await;
    let acme = s.tenant("acme").await;
    let acme_account = account_in(&s, &acme, "acme").await;
    let before = s.root("pools/list", json!({})).await.ok();

    // An account that does not exist, or that is not root's.
    for (i, a) in [acme_account.as_str(), "pacct_00000000000000000000000000"]
        .into_iter()
        .enumerate()
    {
        s.root("pools/create", pool_body(a, "x", &format!("k-{i}")))
            .await
            .err(404, "NOT_FOUND");
    }
    // Field by field.
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        ("name", json!("a/b"), "name", "pattern"),
        ("region", json!("US-central1"), "region", "pattern"),
        ("provider", json!("aws"), "provider", "enum"),
        ("accountId", json!("acct_1"), "accountId", "pattern"),
        ("flavors", json!([]), "flavors", "length"),
        ("flavors", json!({}), "flavors", "type"),
        (
            "flavors",
            json!([{ "name": "n2", "vcpus": 0, "memoryGib": 1, "gpus": 0 }]),
            "flavors[0].vcpus",
            "range",
        ),
        (
            "flavors",
            json!([{ "name": "n2", "vcpus": 1, "memoryGib": 1 }]),
            "flavors[0].gpus",
            "missing",
        ),
        (
            "flavors",
            json!([{ "name": "n2", "vcpus": 1, "memoryGib": 1, "gpus": 0, "disk": 10 }]),
            "flavors[0].disk",
            "unknown",
        ),
        (
            "flavors",
            json!([
                { "name": "n2", "vcpus": 1, "memoryGib": 1, "gpus": 0 },
                { "name": "n2", "vcpus": 2, "memoryGib": 1, "gpus": 0 },
            ]),
            "flavors[1].name",
            "duplicate",
        ),
        ("quotas", json!({ "1cpu": 1 }), "quotas.1cpu", "pattern"),
        ("quotas", json!({ "vcpus": -1 }), "quotas.vcpus", "range"),
        ("quotas", json!({ "vcpus": "1" }), "quotas.vcpus", "type"),
        ("quotas", json!([1]), "quotas", "type"),
        (
            "idempotencyKey",
            json!("a key"),
            "idempotencyKey",
            "pattern",
        ),
    ];
    for (i, (field, value, want_field, reason)) in cases.into_iter().enumerate() {
        let mut body = pool_body(&account, "x", &format!("v-{i}"));
        body[field] = value;
        let a = s.root("pools/create", body).await;
        let d = a.err(400, "INVALID_INPUT");
        assert_eq!(
            (d["field"].as_str(), d["reason"].as_str()),
            (Some(want_field), Some(reason)),
            "{d}"
        );
    }
    let mut body = pool_body(&account, "x", "v-missing");
    body.as_object_mut()
        .expect("object")
        .remove("idempotencyKey");
    let d = s.root("pools/create", body).await;
    assert_eq!(d.err(400, "INVALID_INPUT")["field"], "idempotencyKey");
    // Nothing was created.
    assert_eq!(s.root("pools/list", json!({})).await.ok(), before);
    assert!(
        s.events_of(ROOT_TOKEN, ROOT, "quota.updated")
            .await
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn pools_offer_creates_and_updates_rows_with_events_in_that_tenant() {
    let (s, acme, pool) = acme_and_pool().await;
    let root_events = s.events(ROOT_TOKEN, ROOT).await;

    let p = offer(&s, &pool, "acme", json!({ "instances": 5, "vcpus": 20 })).await;
    assert_eq!(p["poolId"], pool);
    assert_eq!(p["offeredTo"], json!(["acme"]));
    let rows = get_quotas(&s, &acme, "acme", None).await.ok();
    assert_eq!(
        rows["items"],
        json!([
            quota(&pool, "instances", 5, 0),
            quota(&pool, "vcpus", 20, 0)
        ])
    );
    let ev = s.events_of(&acme, "acme", "quota.updated").await;
    let data: Vec<Value> = ev.iter().map(|e| e["data"].clone()).collect();
    assert_eq!(
        data,
        [
            json!({ "poolId": pool, "resource": "instances", "max": 5 }),
            json!({ "poolId": pool, "resource": "vcpus", "max": 20 }),
        ]
    );
    assert!(ev.iter().all(|e| e["tenantId"] == "acme"));
    // Root's log is not where the tenant's quota events go.
    assert_eq!(s.events(ROOT_TOKEN, ROOT).await, root_events);

    // Offering again with the same values changes nothing and emits nothing.
    let again = offer(&s, &pool, "acme", json!({ "instances": 5, "vcpus": 20 })).await;
    assert_eq!(again["offeredTo"], json!(["acme"]));
    assert_eq!(s.events_of(&acme, "acme", "quota.updated").await.len(), 2);
    // One changed row and one new row: two events; the row not named stays.
    offer(&s, &pool, "acme", json!({ "vcpus": 30, "gpus": 2 })).await;
    let ev = s.events_of(&acme, "acme", "quota.updated").await;
    let data: Vec<Value> = ev.iter().map(|e| e["data"].clone()).collect();
    assert_eq!(
        data[2..],
        [
            json!({ "poolId": pool, "resource": "gpus", "max": 2 }),
            json!({ "poolId": pool, "resource": "vcpus", "max": 30 }),
        ]
    );
    let rows = get_quotas(&s, &acme, "acme", Some(&pool)).await.ok();
    assert_eq!(
        rows["items"],
        json!([
            quota(&pool, "gpus", 2, 0),
            quota(&pool, "instances", 5, 0),
            quota(&pool, "vcpus", 30, 0)
        ])
    );
    // Root's own rows are untouched by offers.
    let root_rows = s.root("quotas/get", json!({ "poolId": pool })).await.ok();
    assert_eq!(
        root_rows["items"],
        json!([
            quota(&pool, "instances", 100, 0),
            quota(&pool, "vcpus", 400, 0)
        ])
    );
    // An empty offer just offers.
    let beta = s.tenant("beta").await;
    let p = offer(&s, &pool, "beta", json!({})).await;
    assert_eq!(p["offeredTo"], json!(["acme", "beta"]));
    assert!(s.events(&beta, "beta").await.is_empty());

    // Unknown pool, unknown or deleted tenant.
    offer_answer(&s, MISSING_POOL, "acme", json!({}))
        .await
        .err(404, "NOT_FOUND");
    offer_answer(&s, &pool, "nobody", json!({ "vcpus": 1 }))
        .await
        .err(404, "NOT_FOUND");
    s.root("tenants/create", json!({ "name": "gone" }))
        .await
        .ok();
    delete_tenant(&s, "gone").await.ok();
    offer_answer(&s, &pool, "gone", json!({ "vcpus": 1 }))
        .await
        .err(404, "NOT_FOUND");
    let root_pool = s.root("pools/get", json!({ "poolId": pool })).await.ok();
    assert_eq!(root_pool["pool"]["offeredTo"], json!(["acme", "beta"]));
    // Validation.
    for (body, field) in [
        (
            json!({ "poolId": pool, "offerTenantId": "a b", "quotas": {} }),
            "offerTenantId",
        ),
        (json!({ "poolId": pool, "offerTenantId": "acme" }), "quotas"),
        (
            json!({ "poolId": pool, "offerTenantId": "acme", "quotas": { "vcpus": 1.5 } }),
            "quotas.vcpus",
        ),
        (
            json!({ "poolId": "pool_X", "offerTenantId": "acme", "quotas": {} }),
            "poolId",
        ),
    ] {
        let a = s.root("pools/offer", body).await;
        assert_eq!(a.err(400, "INVALID_INPUT")["field"], field);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn root_sees_every_pool_and_a_tenant_only_those_offered_to_it() {
    let s = Server::start().await;
    let acme = s.tenant("acme").await;
    s.tenant("beta").await;
    let viewer = s.key(&acme, "acme", "viewer", None).await;
    let account = root_account(&s).await;
    let t0 = s.now().await;
    let a = create_pool(&s, &account).await;
    s.set_clock(t0 + 1_000).await;
    let b = create_pool(&s, &account).await;
    offer(&s, &a, "acme", json!({ "instances": 1 })).await;
    offer(&s, &a, "beta", json!({ "instances": 1 })).await;

    let all = s.root("pools/list", json!({})).await.ok();
    let ids = each(&all, "poolId");
    assert_eq!(ids, [&json!(b), &json!(a)], "newest first");
    assert_eq!(all["items"][1]["offeredTo"], json!(["acme", "beta"]));
    assert_eq!(all["items"][0]["offeredTo"], json!([]));

    // acme sees pool a only, and not whom else it is offered to.
    let mine = list_pools(&s, &viewer, "acme").await.ok();
    let items = mine["items"].as_array().expect("items");
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["poolId"], a);
    assert_eq!(items[0]["offeredTo"], json!(["acme"]));
    let got = get_pool(&s, &viewer, "acme", &a).await.ok();
    assert_eq!(got["pool"], items[0]);
    // Another pool, whether it exists or not, is NOT_FOUND alike.
    let hidden = get_pool(&s, &viewer, "acme", &b).await;
    hidden.err(404, "NOT_FOUND");
    let missing = get_pool(&s, &viewer, "acme", MISSING_POOL).await;
    missing.err(404, "NOT_FOUND");
    assert_eq!(
        hidden.body["error"]["details"],
        missing.body["error"]["details"]
    );
    // A tenant with no offers sees nothing.
    let gamma = s.tenant("gamma").await;
    let none = list_pools(&s, &gamma, "gamma").await.ok();
    assert_eq!(none["items"], json!([]));
    get_pool(&s, &gamma, "gamma", &a)
        .await
        .err(404, "NOT_FOUND");
    // Root gets any pool.
    get_pool(&s, ROOT_TOKEN, ROOT, &b).await.ok();
    get_pool(&s, ROOT_TOKEN, ROOT, MISSING_POOL)
        .await
        .err(404, "NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread")]
async fn quotas_get_orders_rows_by_pool_then_resource() {
    let s = Server::start().await;
    let acme = s.tenant("acme").await;
    let member = s.key(&acme, "acme", "member", None).await;
    let account = root_account(&s).await;
    let p1 = create_pool(&s, &account).await;
    let p2 = create_pool(&s, &account).await;
    // Offer the later-sorting pool first, with resources in no order.
    let (lo, hi) = if p1 < p2 { (p1, p2) } else { (p2, p1) };
    offer(&s, &hi, "acme", json!({ "vcpus": 8, "Zeta": 1, "a-b": 3 })).await;
    offer(
        &s,
        &lo,
        "acme",
        json!({ "memoryGib": 64, "gpus": 0, "a.b": 2, "a_b": 4, "aB": 5 }),
    )
    .await;
    set_quota_answer(&s, "acme", &lo, "instances", 7).await.ok();
    let rows = get_quotas(&s, &member, "acme", None).await.ok();
    assert_eq!(
        rows["items"],
        json!([
            quota(&lo, "a.b", 2, 0),
            quota(&lo, "aB", 5, 0),
            quota(&lo, "a_b", 4, 0),
            quota(&lo, "gpus", 0, 0),
            quota(&lo, "instances", 7, 0),
            quota(&lo, "memoryGib", 64, 0),
            quota(&hi, "Zeta", 1, 0),
            quota(&hi, "a-b", 3, 0),
            quota(&hi, "vcpus", 8, 0),
        ])
    );
    // One pool only.
    let one = get_quotas(&s, &member, "acme", Some(&hi)).await.ok();
    assert_eq!(
        one["items"],
        json!([
            quota(&hi, "Zeta", 1, 0),
            quota(&hi, "a-b", 3, 0),
            quota(&hi, "vcpus", 8, 0)
        ])
    );
    // Every row: available = max - used, never below 0.
    for r in rows["items"].as_array().expect("items") {
        let (max, used, avail) = (
            r["max"].as_i64().expect("max"),
            r["used"].as_i64().expect("used"),
            r["available"].as_i64().expect("available"),
        );
        assert_eq!(avail, (max - used).max(0), "{r}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn quotas_get_of_a_pool_the_tenant_cannot_see_is_not_found() {
    let s = Server::start().await;
    let acme = s.tenant("acme").await;
    let account = root_account(&s).await;
    let offered = create_pool(&s, &account).await;
    let hidden = create_pool(&s, &account).await;
    offer(&s, &offered, "acme", json!({})).await;
    // Offered without rows: an empty list, not an error.
    let rows = get_quotas(&s, &acme, "acme", Some(&offered)).await.ok();
    assert_eq!(rows["items"], json!([]));
    for pool in [hidden.as_str(), MISSING_POOL] {
        get_quotas(&s, &acme, "acme", Some(pool))
            .await
            .err(404, "NOT_FOUND");
    }
    // Root sees every pool, with or without rows of its own.
    get_quotas(&s, ROOT_TOKEN, ROOT, Some(&hidden)).await.ok();
    get_quotas(&s, ROOT_TOKEN, ROOT, Some(MISSING_POOL))
        .await
        .err(404, "NOT_FOUND");
    // A tenant without rows gets an empty list.
    let beta = s.tenant("beta").await;
    let rows = get_quotas(&s, &beta, "beta", None).await.ok();
    assert_eq!(rows["items"], json!([]));
}

#[tokio::test(flavor = "multi_thread")]
async fn quotas_set_sets_the_target_tenants_row_and_emits_there() {
    let (s, acme, pool) = acme_and_pool().await;
    offer(&s, &pool, "acme", json!({ "vcpus": 10 })).await;
    let root_before = s.events(ROOT_TOKEN, ROOT).await;
    let acme_before = s.events(&acme, "acme").await;
    let now = s.root("clock/get", json!({})).await.ok()["now"].clone();

    // Changing a row.
    let v = set_quota_answer(&s, "acme", &pool, "vcpus", 64).await.ok();
    assert_eq!(v, json!({ "quota": quota(&pool, "vcpus", 64, 0) }));
    // Creating a row; 0 is a valid maximum.
    let v = set_quota_answer(&s, "acme", &pool, "gpus", 0).await.ok();
    assert_eq!(v["quota"], quota(&pool, "gpus", 0, 0));
    // Setting the same value again still reports the requested max.
    set_quota_answer(&s, "acme", &pool, "vcpus", 64).await.ok();
    let rows = get_quotas(&s, &acme, "acme", None).await.ok();
    assert_eq!(
        rows["items"],
        json!([quota(&pool, "gpus", 0, 0), quota(&pool, "vcpus", 64, 0)])
    );
    // quota.updated with the requested max, in the target tenant only.
    let acme_after = s.events(&acme, "acme").await;
    let new: Vec<&Value> = acme_after[acme_before.len()..].iter().collect();
    assert_eq!(new.len(), 3);
    let data: Vec<&Value> = new.iter().map(|e| &e["data"]).collect();
    assert_eq!(
        data,
        [
            &json!({ "poolId": pool, "resource": "vcpus", "max": 64 }),
            &json!({ "poolId": pool, "resource": "gpus", "max": 0 }),
            &json!({ "poolId": pool, "resource": "vcpus", "max": 64 }),
        ]
    );
    for e in new {
        assert_eq!(e["type"], "quota.updated");
        assert_eq!(e["tenantId"], "acme");
        assert_eq!(e["occurredAt"], now);
    }
    assert_eq!(s.events(ROOT_TOKEN, ROOT).await, root_before);

    // Root may set its own rows.
    let v = set_quota_answer(&s, ROOT, &pool, "instances", 3).await.ok();
    assert_eq!(v["quota"], quota(&pool, "instances", 3, 0));
    let root_after = s.events(ROOT_TOKEN, ROOT).await;
    assert_eq!(root_after.len(), root_before.len() + 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn quotas_set_errors() {
    let (s, acme, pool) = acme_and_pool().await;
    offer(&s, &pool, "acme", json!({ "vcpus": 10 })).await;
    let set = |tenant: &str, pool: &str| QuotaBody::new(pool, "vcpus", 99).tenant(tenant).json();
    // NOT_FOUND: the pool, or the target tenant.
    s.root("quotas/set", set("acme", MISSING_POOL))
        .await
        .err(404, "NOT_FOUND");
    s.root("quotas/set", set("nobody", &pool))
        .await
        .err(404, "NOT_FOUND");
    // Only callers in the root tenant: a tenant admin for itself, or for
    // another tenant, is ACCESS_DENIED.
    s.call(&acme, "quotas/set", set("acme", &pool))
        .await
        .err(403, "ACCESS_DENIED");
    s.call(&acme, "quotas/set", set(ROOT, &pool))
        .await
        .err(403, "ACCESS_DENIED");
    // In root, only a role with compute:quotas:manage.
    let root_viewer = s.key(ROOT_TOKEN, ROOT, "viewer", None).await;
    s.call(&root_viewer, "quotas/set", set("acme", &pool))
        .await
        .err(403, "ACCESS_DENIED");
    // Nothing changed, nothing emitted.
    let rows = get_quotas(&s, &acme, "acme", None).await.ok();
    assert_eq!(rows["items"], json!([quota(&pool, "vcpus", 10, 0)]));
    assert_eq!(s.events_of(&acme, "acme", "quota.updated").await.len(), 1);
}
