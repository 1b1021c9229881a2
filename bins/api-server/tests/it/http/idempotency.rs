//! Idempotency keys (contract 1.5) on pools.create and providerAccounts.create.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::support::fixtures::{account_body, offer, pool_body, root_account};
use crate::support::server::{ROOT, ROOT_TOKEN, Server};

async fn pool_count(s: &Server) -> usize {
    s.root("pools/list", json!({})).await.ok()["items"]
        .as_array()
        .expect("items")
        .len()
}

async fn account_count(s: &Server, token: &str, tenant: &str) -> usize {
    s.call(
        token,
        "providerAccounts/list",
        json!({ "tenantId": tenant }),
    )
    .await
    .ok()["items"]
        .as_array()
        .expect("items")
        .len()
}

#[tokio::test(flavor = "multi_thread")]
async fn pools_create_replays_the_same_request_and_conflicts_on_another() {
    let s = Server::start().await;
    let account = root_account(&s).await;
    let body = pool_body(&account, "gce eu", "pool-key-1");
    let first = s.root("pools/create", body.clone()).await.ok();
    let events = s.events_of(ROOT_TOKEN, ROOT, "quota.updated").await;
    let rows = s.root("quotas/get", json!({})).await.ok();

    // Same key and body, later: the same pool, nothing created.
    let t0 = s.root("clock/get", json!({})).await.ok()["now"]
        .as_i64()
        .expect("now");
    s.set_clock(t0 + 60_000).await;
    let again = s.root("pools/create", body.clone()).await.ok();
    assert_eq!(again, first);
    // The same body with its fields in another order is the same request.
    let reordered = format!(
        "{{\"idempotencyKey\":\"pool-key-1\",\"quotas\":{{\"vcpus\":40,\"instances\":10}},\
         \"flavors\":{},\"accountId\":\"{account}\",\"provider\":\"gce\",\
         \"region\":\"us-central1\",\"name\":\"gce eu\",\"tenantId\":\"root\"}}",
        body["flavors"]
    );
    let a = s
        .raw(
            Some(ROOT_TOKEN),
            "POST",
            "/api/compute/pools/create",
            Some(reordered),
        )
        .await
        .ok();
    assert_eq!(a, first);
    assert_eq!(pool_count(&s).await, 1);
    assert_eq!(s.events_of(ROOT_TOKEN, ROOT, "quota.updated").await, events);
    assert_eq!(s.root("quotas/get", json!({})).await.ok(), rows);

    // A replay returns the object as it is now.
    s.tenant("acme").await;
    let pool_id = first["pool"]["poolId"].as_str().expect("poolId");
    offer(&s, pool_id, "acme", json!({ "vcpus": 1 })).await;
    let now = s.root("pools/create", body.clone()).await.ok();
    assert_eq!(now["pool"]["poolId"], first["pool"]["poolId"]);
    assert_eq!(now["pool"]["offeredTo"], json!(["acme"]));

    // The same key with any other body is CONFLICT.
    for change in [
        json!({ "name": "gce eu 2" }),
        json!({ "quotas": { "instances": 11, "vcpus": 40 } }),
        json!({ "region": "europe-west4" }),
    ] {
        let mut other = body.clone();
        for (k, v) in change.as_object().expect("object") {
            other[k] = v.clone();
        }
        let a = s.root("pools/create", other).await;
        let d = a.err(409, "CONFLICT");
        assert_eq!(d["idempotencyKey"], "pool-key-1");
    }
    let mut no_quotas = body.clone();
    no_quotas.as_object_mut().expect("object").remove("quotas");
    s.root("pools/create", no_quotas).await.err(409, "CONFLICT");
    assert_eq!(pool_count(&s).await, 1);

    // Keys are scoped to the method: the same key creates an account.
    let acct = s
        .root(
            "providerAccounts/create",
            account_body(ROOT, "other", "pool-key-1"),
        )
        .await
        .ok();
    assert!(acct["account"]["accountId"].is_string());
    // A new key creates a new pool.
    s.root("pools/create", pool_body(&account, "gce eu", "pool-key-2"))
        .await
        .ok();
    assert_eq!(pool_count(&s).await, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_pools_create_does_not_consume_its_key() {
    let s = Server::start().await;
    let account = root_account(&s).await;
    // NOT_FOUND: an account that does not exist.
    let bad = pool_body("pacct_00000000000000000000000000", "gce eu", "k");
    s.root("pools/create", bad.clone())
        .await
        .err(404, "NOT_FOUND");
    // INVALID_INPUT: duplicate flavors (a rule of the handler).
    let mut dup = pool_body(&account, "gce eu", "k");
    dup["flavors"] = json!([
        { "name": "n2", "vcpus": 1, "memoryGib": 1, "gpus": 0 },
        { "name": "n2", "vcpus": 1, "memoryGib": 1, "gpus": 0 }
    ]);
    s.root("pools/create", dup).await.err(400, "INVALID_INPUT");
    // ACCESS_DENIED: a tenant admin with the same key.
    let acme = s.tenant("acme").await;
    let mut denied = pool_body(&account, "gce eu", "k");
    denied["tenantId"] = json!("acme");
    s.call(&acme, "pools/create", denied)
        .await
        .err(403, "ACCESS_DENIED");
    assert_eq!(pool_count(&s).await, 0);

    // The same key with a good body succeeds, and replays.
    let good = pool_body(&account, "gce eu", "k");
    let first = s.root("pools/create", good.clone()).await.ok();
    let again = s.root("pools/create", good).await.ok();
    assert_eq!(first, again);
    assert_eq!(pool_count(&s).await, 1);
    // Now the key is taken: the failed body is another request.
    s.root("pools/create", bad).await.err(409, "CONFLICT");
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_concurrent_pools_create_with_one_key_create_one_pool() {
    let s = Arc::new(Server::start().await);
    let account = root_account(&s).await;
    let body = pool_body(&account, "gce eu", "concurrent-pool");
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let (s, body) = (s.clone(), body.clone());
            tokio::spawn(async move { s.root("pools/create", body).await })
        })
        .collect();
    let mut ids = BTreeSet::new();
    let mut bodies = Vec::new();
    for t in tasks {
        let a = t.await.expect("join");
        let v = a.ok();
        ids.insert(v["pool"]["poolId"].as_str().expect("poolId").to_owned());
        bodies.push(v);
    }
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert!(bodies.iter().all(|b| *b == bodies[0]));
    assert_eq!(pool_count(&s).await, 1);
    // The root rows and their events exist once.
    assert_eq!(
        s.events_of(ROOT_TOKEN, ROOT, "quota.updated").await.len(),
        2
    );
    let rows = s.root("quotas/get", json!({})).await.ok();
    assert_eq!(rows["items"].as_array().expect("items").len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn provider_accounts_create_is_idempotent_per_tenant() {
    let s = Server::start().await;
    let acme = s.tenant("acme").await;
    let body = account_body("acme", "gce prod", "acct-key");
    let first = s
        .call(&acme, "providerAccounts/create", body.clone())
        .await
        .ok();
    let again = s
        .call(&acme, "providerAccounts/create", body.clone())
        .await
        .ok();
    assert_eq!(first, again);
    assert_eq!(account_count(&s, &acme, "acme").await, 1);
    // Another body: CONFLICT, with the key in the details.
    let mut other = body.clone();
    other["config"]["project"] = json!("acme-project-2");
    let a = s.call(&acme, "providerAccounts/create", other).await;
    assert_eq!(a.err(409, "CONFLICT")["idempotencyKey"], "acct-key");
    let mut other = body.clone();
    other["name"] = json!("gce prod 2");
    s.call(&acme, "providerAccounts/create", other)
        .await
        .err(409, "CONFLICT");
    assert_eq!(account_count(&s, &acme, "acme").await, 1);
    // Keys are scoped to the acting tenant: root's request with the same key
    // and an equivalent body creates root's own account.
    let root = s
        .root(
            "providerAccounts/create",
            account_body(ROOT, "gce prod", "acct-key"),
        )
        .await
        .ok();
    assert_ne!(root["account"]["accountId"], first["account"]["accountId"]);
    assert_eq!(root["account"]["tenantId"], ROOT);
    assert_eq!(account_count(&s, &acme, "acme").await, 1);
    assert_eq!(account_count(&s, ROOT_TOKEN, ROOT).await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_provider_accounts_create_does_not_consume_its_key() {
    let s = Server::start().await;
    let acme = s.tenant("acme").await;
    let mut secret = account_body("acme", "gce prod", "k1");
    secret["config"]["credentials"] = json!("ya29.a0AfH6SMBxxxxxxxxxxxxxxxx");
    let a = s.call(&acme, "providerAccounts/create", secret).await;
    assert_eq!(a.err(400, "INVALID_INPUT")["reason"], "secret-value");
    let mut unknown = account_body("acme", "gce prod", "k1");
    unknown["config"]["region"] = json!("us-central1");
    s.call(&acme, "providerAccounts/create", unknown)
        .await
        .err(400, "INVALID_INPUT");
    // A viewer (no compute:iam:manage) is denied with the same key.
    let viewer = s.key(&acme, "acme", "viewer", None).await;
    s.call(
        &viewer,
        "providerAccounts/create",
        account_body("acme", "gce prod", "k1"),
    )
    .await
    .err(403, "ACCESS_DENIED");
    assert_eq!(account_count(&s, &acme, "acme").await, 0);
    // The key is still free.
    let good = account_body("acme", "gce prod", "k1");
    let first = s
        .call(&acme, "providerAccounts/create", good.clone())
        .await
        .ok();
    let again = s.call(&acme, "providerAccounts/create", good).await.ok();
    assert_eq!(first, again);
    assert_eq!(account_count(&s, &acme, "acme").await, 1);
    // Without a key: INVALID_INPUT.
    let mut keyless = account_body("acme", "gce prod", "unused");
    keyless
        .as_object_mut()
        .expect("object")
        .remove("idempotencyKey");
    let a = s.call(&acme, "providerAccounts/create", keyless).await;
    let d = a.err(400, "INVALID_INPUT");
    assert_eq!(
        (d["field"].as_str(), d["reason"].as_str()),
        (Some("idempotencyKey"), Some("missing"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_provider_accounts_create_with_one_key_create_one_account() {
    let s = Arc::new(Server::start().await);
    let acme = s.tenant("acme").await;
    // Twenty identical requests...
    let body = account_body("acme", "gce prod", "same");
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let (s, body, acme) = (s.clone(), body.clone(), acme.clone());
            tokio::spawn(async move { s.call(&acme, "providerAccounts/create", body).await })
        })
        .collect();
    let mut answers: Vec<Value> = Vec::new();
    for t in tasks {
        answers.push(t.await.expect("join").ok());
    }
    assert!(answers.iter().all(|a| *a == answers[0]));
    assert_eq!(account_count(&s, &acme, "acme").await, 1);

    // ...and ten racing requests with two bodies under one key: one account;
    // the winner's body replays, the other conflicts.
    let a = account_body("acme", "body a", "race");
    let b = account_body("acme", "body b", "race");
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let body = if i % 2 == 0 { a.clone() } else { b.clone() };
            let (s, acme) = (s.clone(), acme.clone());
            tokio::spawn(async move {
                (
                    body.clone(),
                    s.call(&acme, "providerAccounts/create", body).await,
                )
            })
        })
        .collect();
    let mut created = BTreeSet::new();
    let mut results = Vec::new();
    for t in tasks {
        let (body, answer) = t.await.expect("join");
        if answer.status == 200 {
            created.insert(answer.body["account"]["accountId"].to_string());
            assert_eq!(answer.body["account"]["name"], body["name"]);
        } else {
            assert_eq!(answer.err(409, "CONFLICT")["idempotencyKey"], "race");
        }
        results.push((body["name"].clone(), answer.status));
    }
    assert_eq!(created.len(), 1, "{results:?}");
    // Every request with the winner's body succeeded, every other conflicted.
    let winner = results
        .iter()
        .find(|(_, st)| *st == 200)
        .map(|(n, _)| n.clone())
        .expect("a winner");
    for (name, status) in &results {
        assert_eq!(*status == 200, *name == winner, "{results:?}");
    }
    assert_eq!(account_count(&s, &acme, "acme").await, 2);
}
