//! reservationGrants.create: every rule and error path, idempotency and
//! field validation (seed-reservation-grants.md "create", contract 1.2, 1.5,
//! 2.4, 3.6).

use serde_json::{Value, json};

use crate::support::bodies::GrantBody;
use crate::support::calls::delete_tenant;
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::fixtures::{
    bind, create_grant, create_grant_ok, end_grant, get_grant_as, grant_body, grant_body_for,
    grant_id, grant_ids, items, list_grants, no_such, offer, platform_at_t0, project, root_account,
    scan, second_account, tenant_own_account, types_of, unbind,
};
use crate::support::gce::Gce;
use crate::support::server::{ROOT_TOKEN, Server, of_type};

#[tokio::test(flavor = "multi_thread")]
async fn create_is_root_only() {
    let (s, p) = platform_at_t0(10).await;
    let other_account = root_account(&s).await;
    let body = |key: &str| grant_body(&p, 1, T0 + HOUR, T0 + 2 * HOUR, key);

    // A tenant admin acting in its own tenant, or claiming the root tenant.
    let mut own = body("t1");
    own["tenantId"] = json!("acme");
    s.call(&p.tenant_token, "reservationGrants/create", own)
        .await
        .err(403, "ACCESS_DENIED");
    let mut claimed = body("t2");
    claimed["tenantId"] = json!("root");
    s.call(&p.tenant_token, "reservationGrants/create", claimed)
        .await
        .err(403, "ACCESS_DENIED");
    // Denied before any lookup: an unknown account is still ACCESS_DENIED.
    let mut unknown = body("t3");
    unknown["tenantId"] = json!("acme");
    unknown["accountId"] = json!(no_such("pacct"));
    s.call(&p.tenant_token, "reservationGrants/create", unknown)
        .await
        .err(403, "ACCESS_DENIED");

    // Root keys without compute:providers:manage.
    for role in ["viewer", "member"] {
        let key = s.key(ROOT_TOKEN, "root", role, None).await;
        let mut b = body(&format!("r-{role}"));
        b["tenantId"] = json!("root");
        s.call(&key, "reservationGrants/create", b)
            .await
            .err(403, "ACCESS_DENIED");
    }

    // A provider-admin key scoped to another account.
    let elsewhere = s
        .key(ROOT_TOKEN, "root", "provider-admin", Some(&other_account))
        .await;
    let mut b = body("elsewhere");
    b["tenantId"] = json!("root");
    s.call(&elsewhere, "reservationGrants/create", b)
        .await
        .err(403, "ACCESS_DENIED");
    assert!(items(&list_grants(&s, ROOT_TOKEN, "root", Some(true)).await.ok()).is_empty());

    // A provider-admin key scoped to the account, and a tenant-wide one.
    let scoped = s
        .key(ROOT_TOKEN, "root", "provider-admin", Some(&p.account))
        .await;
    let mut b = body("scoped");
    b["tenantId"] = json!("root");
    let g = s.call(&scoped, "reservationGrants/create", b).await.ok();
    assert_eq!(g["grant"]["tenantId"], "acme");
    assert_eq!(g["grant"]["accountId"], p.account.as_str());
    let wide = s.key(ROOT_TOKEN, "root", "provider-admin", None).await;
    let mut b = body("wide");
    b["tenantId"] = json!("root");
    s.call(&wide, "reservationGrants/create", b).await.ok();
    assert_eq!(
        items(&list_grants(&s, ROOT_TOKEN, "root", Some(true)).await.ok()).len(),
        2
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_or_foreign_account_is_not_found() {
    let (s, p) = platform_at_t0(10).await;
    let b = GrantBody::on(&p, 1)
        .term(T0, T0 + HOUR)
        .key("k1")
        .account(&no_such("pacct"))
        .json();
    create_grant(&s, b).await.err(404, "NOT_FOUND");

    // acme's own provider account, named by root.
    let acme_account = tenant_own_account(&s, &p).await;
    let b = GrantBody::on(&p, 1)
        .term(T0, T0 + HOUR)
        .key("k2")
        .account(&acme_account)
        .json();
    create_grant(&s, b).await.err(404, "NOT_FOUND");
    assert!(items(&list_grants(&s, ROOT_TOKEN, "root", Some(true)).await.ok()).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reservation_not_on_the_account_is_not_found() {
    let (s, p) = platform_at_t0(10).await;
    let b = GrantBody::on(&p, 1)
        .term(T0, T0 + HOUR)
        .key("k1")
        .reservation(&Gce::reservation_id("no-such"))
        .json();
    create_grant(&s, b).await.err(404, "NOT_FOUND");

    // A reservation that exists, bound, on another account.
    let (_fake, account_b, res_b) = second_account(&s, &p.pool, 4).await;
    let b = GrantBody::on(&p, 1)
        .term(T0, T0 + HOUR)
        .key("k2")
        .reservation(&res_b)
        .json();
    create_grant(&s, b).await.err(404, "NOT_FOUND");
    // ...which is fine on its own account.
    let b = GrantBody::on(&p, 1)
        .term(T0, T0 + HOUR)
        .key("k3")
        .on_reservation(&account_b, &res_b)
        .json();
    let g = create_grant_ok(&s, b).await;
    assert_eq!(g["reservationId"], res_b.as_str());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reservation_that_is_not_ready_is_invalid_state() {
    let (s, p) = platform_at_t0(10).await;
    p.gce.put("res-a", 10, 0, "CREATING").await;
    let scanned = scan(&s, &p.account).await;
    assert_eq!(scanned["items"][0]["status"], "not-ready");
    create_grant(&s, grant_body(&p, 1, T0, T0 + HOUR, "k1"))
        .await
        .err(409, "INVALID_STATE");
    // UPDATING is not ready either.
    p.gce.put("res-a", 10, 0, "UPDATING").await;
    scan(&s, &p.account).await;
    create_grant(&s, grant_body(&p, 1, T0, T0 + HOUR, "k1"))
        .await
        .err(409, "INVALID_STATE");
    // Ready again: the same key was not consumed.
    p.gce.put("res-a", 10, 0, "READY").await;
    scan(&s, &p.account).await;
    create_grant_ok(&s, grant_body(&p, 1, T0, T0 + HOUR, "k1")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gone_reservation_is_invalid_state() {
    let (s, p) = platform_at_t0(10).await;
    p.gce.delete("res-a").await;
    let scanned = scan(&s, &p.account).await;
    assert_eq!(scanned["items"][0]["status"], "gone");
    create_grant(&s, grant_body(&p, 1, T0, T0 + HOUR, "k1"))
        .await
        .err(409, "INVALID_STATE");
    assert!(items(&list_grants(&s, ROOT_TOKEN, "root", Some(true)).await.ok()).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unbound_reservation_is_invalid_state() {
    let (s, p) = platform_at_t0(10).await;
    let r = unbind(&s, &p.account, &p.reservation).await.ok();
    assert!(r["reservation"].get("poolId").is_none(), "{r}");
    create_grant(&s, grant_body(&p, 1, T0, T0 + HOUR, "k1"))
        .await
        .err(409, "INVALID_STATE");
    bind(&s, &p.account, &p.reservation, &p.pool).await.ok();
    create_grant_ok(&s, grant_body(&p, 1, T0, T0 + HOUR, "k1")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_not_offered_to_the_grantee_is_invalid_input() {
    let (s, p) = platform_at_t0(10).await;
    s.tenant("beta").await;
    let r = create_grant(&s, grant_body_for(&p, "beta", 1, T0, T0 + HOUR, "k1")).await;
    r.err(400, "INVALID_INPUT");
    assert!(items(&list_grants(&s, ROOT_TOKEN, "root", Some(true)).await.ok()).is_empty());
    // Once offered, the same request (and key) works.
    offer(&s, &p.pool, "beta", json!({ "instances": 10 })).await;
    let g = create_grant_ok(&s, grant_body_for(&p, "beta", 1, T0, T0 + HOUR, "k1")).await;
    assert_eq!(g["tenantId"], "beta");
    // The root tenant may use every pool, so it may be a grantee.
    let g = create_grant_ok(&s, grant_body_for(&p, "root", 1, T0, T0 + HOUR, "k2")).await;
    assert_eq!(g["tenantId"], "root");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_or_deleted_grantee_is_not_found() {
    let (s, p) = platform_at_t0(10).await;
    create_grant(&s, grant_body_for(&p, "nobody", 1, T0, T0 + HOUR, "k1"))
        .await
        .err(404, "NOT_FOUND");
    s.tenant("beta").await;
    offer(&s, &p.pool, "beta", json!({ "instances": 10 })).await;
    delete_tenant(&s, "beta").await.ok();
    create_grant(&s, grant_body_for(&p, "beta", 1, T0, T0 + HOUR, "k2"))
        .await
        .err(404, "NOT_FOUND");
    assert!(items(&list_grants(&s, ROOT_TOKEN, "root", Some(true)).await.ok()).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_project_must_be_the_grantees() {
    let (s, p) = platform_at_t0(10).await;
    let beta_token = s.tenant("beta").await;
    let beta_project = project(&s, &beta_token, "beta", "web").await;
    let root_project = project(&s, ROOT_TOKEN, "root", "ops").await;
    for (i, prj) in [beta_project, root_project, no_such("prj")]
        .into_iter()
        .enumerate()
    {
        let b = GrantBody::on(&p, 1)
            .term(T0, T0 + HOUR)
            .key(&format!("k{i}"))
            .project(&prj)
            .json();
        let r = create_grant(&s, b).await;
        let d = r.err(400, "INVALID_INPUT");
        assert_eq!(d["reason"], "project-not-grantee", "{prj}");
        assert_eq!(d["field"], "projectId");
    }
    assert!(items(&list_grants(&s, ROOT_TOKEN, "root", Some(true)).await.ok()).is_empty());

    let acme_project = project(&s, &p.tenant_token, "acme", "batch").await;
    let b = GrantBody::on(&p, 1)
        .term(T0, T0 + HOUR)
        .key("k0")
        .project(&acme_project)
        .json();
    let g = create_grant_ok(&s, b).await;
    assert_eq!(g["projectId"], acme_project.as_str());
    let got = get_grant_as(&s, &p.tenant_token, "acme", &grant_id(&g))
        .await
        .ok();
    assert_eq!(got["grant"]["projectId"], acme_project.as_str());
    // Without a project, the field is absent.
    let g = create_grant_ok(&s, grant_body(&p, 1, T0, T0 + HOUR, "k9")).await;
    assert!(g.get("projectId").is_none(), "{g}");
}

#[tokio::test(flavor = "multi_thread")]
async fn starts_at_may_be_at_most_five_minutes_in_the_past() {
    let (s, p) = platform_at_t0(10).await;
    let r = create_grant(&s, grant_body(&p, 1, T0 - 5 * MIN - 1, T0 + HOUR, "k1")).await;
    assert_eq!(r.err(400, "INVALID_INPUT")["field"], "startsAt");
    let g = create_grant_ok(&s, grant_body(&p, 1, T0 - 5 * MIN, T0 + HOUR, "k2")).await;
    assert_eq!(g["startsAt"], T0 - 5 * MIN);
    assert_eq!(g["state"], "active");
    assert_eq!(g["meteredThrough"], T0 - 5 * MIN);
    assert_eq!(g["createdAt"], T0);
    // Far in the future is fine.
    let g = create_grant_ok(
        &s,
        grant_body(&p, 1, T0 + 400 * 24 * HOUR, T0 + 401 * 24 * HOUR, "k3"),
    )
    .await;
    assert_eq!(g["state"], "scheduled");
}

#[tokio::test(flavor = "multi_thread")]
async fn ends_at_must_be_after_starts_at() {
    let (s, p) = platform_at_t0(10).await;
    for (i, ends) in [T0 + HOUR, T0 + HOUR - 1, T0].into_iter().enumerate() {
        let r = create_grant(&s, grant_body(&p, 1, T0 + HOUR, ends, &format!("k{i}"))).await;
        assert_eq!(r.err(400, "INVALID_INPUT")["field"], "endsAt");
    }
    let g = create_grant_ok(&s, grant_body(&p, 1, T0 + HOUR, T0 + HOUR + 1, "k9")).await;
    assert_eq!(g["endsAt"], T0 + HOUR + 1);
    assert!(items(&list_grants(&s, ROOT_TOKEN, "root", Some(true)).await.ok()).len() == 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn capacity_unavailable_carries_total_and_granted() {
    let (s, p) = platform_at_t0(4).await;
    // Alone over the total.
    let r = create_grant(&s, grant_body(&p, 5, T0, T0 + HOUR, "k0")).await;
    let d = r.err(409, "CAPACITY_UNAVAILABLE");
    assert_eq!(
        (d["total"].clone(), d["granted"].clone()),
        (json!(4), json!(0))
    );

    create_grant_ok(&s, grant_body(&p, 3, T0, T0 + 2 * HOUR, "a")).await;
    let r = create_grant(&s, grant_body(&p, 2, T0 + HOUR, T0 + 3 * HOUR, "b")).await;
    let d = r.err(409, "CAPACITY_UNAVAILABLE");
    assert_eq!(
        (d["total"].clone(), d["granted"].clone()),
        (json!(4), json!(3))
    );
    // Exactly the rest fits.
    create_grant_ok(&s, grant_body(&p, 1, T0 + HOUR, T0 + 3 * HOUR, "c")).await;
    // Terms are half-open: starting at the first grant's endsAt, 3 more fit.
    create_grant_ok(&s, grant_body(&p, 3, T0 + 2 * HOUR, T0 + 4 * HOUR, "d")).await;
    let r = create_grant(&s, grant_body(&p, 1, T0 + 3 * HOUR - 1, T0 + 3 * HOUR, "e")).await;
    let d = r.err(409, "CAPACITY_UNAVAILABLE");
    assert_eq!(
        (d["total"].clone(), d["granted"].clone()),
        (json!(4), json!(4))
    );
    // A request that fails is not recorded.
    assert_eq!(
        items(&list_grants(&s, &p.tenant_token, "acme", None).await.ok()).len(),
        3
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelled_grants_free_capacity_and_ended_ones_keep_their_final_term() {
    let (s, p) = platform_at_t0(4).await;
    // A scheduled grant of every slot, then cancelled: its term is free again.
    let a = create_grant_ok(&s, grant_body(&p, 4, T0 + 10 * HOUR, T0 + 12 * HOUR, "a")).await;
    create_grant(&s, grant_body(&p, 1, T0 + 11 * HOUR, T0 + 13 * HOUR, "x1"))
        .await
        .err(409, "CAPACITY_UNAVAILABLE");
    let cancelled = end_grant(&s, &p.account, &grant_id(&a)).await.ok();
    assert_eq!(cancelled["grant"]["state"], "cancelled");
    create_grant_ok(&s, grant_body(&p, 4, T0 + 10 * HOUR, T0 + 12 * HOUR, "a2")).await;

    // An active grant of every slot, ended after an hour: it keeps
    // [T0, T0+H) and releases the rest.
    let b = create_grant_ok(&s, grant_body(&p, 4, T0, T0 + 5 * HOUR, "b")).await;
    s.set_clock(T0 + HOUR).await;
    let ended = end_grant(&s, &p.account, &grant_id(&b)).await.ok();
    assert_eq!(ended["grant"]["endsAt"], T0 + HOUR);
    let r = create_grant(
        &s,
        grant_body(&p, 1, T0 + HOUR - MIN, T0 + HOUR + MIN, "x2"),
    )
    .await;
    let d = r.err(409, "CAPACITY_UNAVAILABLE");
    assert_eq!(
        (d["total"].clone(), d["granted"].clone()),
        (json!(4), json!(4))
    );
    create_grant_ok(&s, grant_body(&p, 4, T0 + HOUR, T0 + 5 * HOUR, "c")).await;

    // A grant ended by its term counts for its whole term as well.
    s.set_clock(T0 + 5 * HOUR + 2 * MIN).await;
    let r = create_grant(
        &s,
        grant_body(&p, 1, T0 + 5 * HOUR - 3 * MIN, T0 + 6 * HOUR, "x3"),
    )
    .await;
    let d = r.err(409, "CAPACITY_UNAVAILABLE");
    assert_eq!(d["granted"], 4);
    create_grant_ok(&s, grant_body(&p, 4, T0 + 5 * HOUR, T0 + 6 * HOUR, "d")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idempotent_retry_returns_the_grant_as_it_is_now() {
    let (s, p) = platform_at_t0(4).await;
    let body = grant_body(&p, 2, T0, T0 + 2 * HOUR, "once");
    let first = create_grant_ok(&s, body.clone()).await;
    assert_eq!(first["state"], "active");
    // Later, startsAt is more than 5 minutes in the past: the retry still
    // returns the grant, as it is now, and creates nothing.
    s.set_clock(T0 + HOUR).await;
    let again = create_grant_ok(&s, body.clone()).await;
    assert_eq!(again["grantId"], first["grantId"]);
    assert_eq!(again, first);
    s.set_clock(T0 + 3 * HOUR).await;
    let later = create_grant_ok(&s, body.clone()).await;
    assert_eq!(later["grantId"], first["grantId"]);
    assert_eq!(later["state"], "ended");
    assert_eq!(later["reason"], "term-over");
    // Even though the reservation would not take it any more.
    p.gce.delete("res-a").await;
    scan(&s, &p.account).await;
    let gone = create_grant_ok(&s, body.clone()).await;
    assert_eq!(gone["grantId"], first["grantId"]);
    // The same body with its keys in another order is the same request.
    let mut text = String::from("{");
    let obj = body.as_object().unwrap();
    let mut entries: Vec<_> = obj.iter().collect();
    entries.reverse();
    for (i, (k, v)) in entries.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(&format!("{}:{}", json!(k), v));
    }
    text.push_str(",\"tenantId\":\"root\"}");
    let raw = s
        .raw(
            Some(ROOT_TOKEN),
            "POST",
            "/api/compute/reservationGrants/create",
            Some(text),
        )
        .await
        .ok();
    assert_eq!(raw["grant"]["grantId"], first["grantId"]);

    let all = items(&list_grants(&s, ROOT_TOKEN, "root", Some(true)).await.ok());
    assert_eq!(all.len(), 1);
    let evs = s.events(&p.tenant_token, "acme").await;
    assert_eq!(
        of_type(&evs, "reservation-grant.created").len(),
        1,
        "{evs:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn another_request_under_the_key_is_conflict() {
    let (s, p) = platform_at_t0(4).await;
    create_grant_ok(&s, grant_body(&p, 2, T0, T0 + 2 * HOUR, "shared")).await;
    for other in [
        grant_body(&p, 1, T0, T0 + 2 * HOUR, "shared"),
        grant_body(&p, 2, T0, T0 + 3 * HOUR, "shared"),
        grant_body_for(&p, "root", 2, T0, T0 + 2 * HOUR, "shared"),
        GrantBody::on(&p, 2)
            .term(T0, T0 + 2 * HOUR)
            .key("shared")
            .project(&no_such("prj"))
            .json(),
    ] {
        let r = create_grant(&s, other).await;
        assert_eq!(r.err(409, "CONFLICT")["idempotencyKey"], "shared");
    }
    assert_eq!(
        items(&list_grants(&s, ROOT_TOKEN, "root", Some(true)).await.ok()).len(),
        1
    );
    // Keys are scoped to the method: pools.create may use the same key.
    s.root(
        "pools/create",
        json!({
            "name": "another", "region": "us-central1", "provider": "gce", "accountId": p.account,
            "flavors": [{ "name": "n2-standard-4", "vcpus": 4, "memoryGib": 16, "gpus": 0 }],
            "idempotencyKey": "shared",
        }),
    )
    .await
    .ok();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_create_does_not_consume_its_key() {
    let (s, p) = platform_at_t0(4).await;
    let viewer = s.key(ROOT_TOKEN, "root", "viewer", None).await;
    // Failures of every kind under the key "k".
    let denied = GrantBody::on(&p, 1)
        .term(T0, T0 + HOUR)
        .key("k")
        .acting("root")
        .json();
    s.call(&viewer, "reservationGrants/create", denied)
        .await
        .err(403, "ACCESS_DENIED");
    let mut bad = grant_body(&p, 1, T0, T0 + HOUR, "k");
    bad["slots"] = json!(0);
    create_grant(&s, bad).await.err(400, "INVALID_INPUT");
    let missing = GrantBody::on(&p, 1)
        .term(T0, T0 + HOUR)
        .key("k")
        .account(&no_such("pacct"))
        .json();
    create_grant(&s, missing).await.err(404, "NOT_FOUND");
    create_grant(&s, grant_body(&p, 1, T0 + HOUR, T0 + HOUR, "k"))
        .await
        .err(400, "INVALID_INPUT");
    create_grant(&s, grant_body(&p, 5, T0, T0 + HOUR, "k"))
        .await
        .err(409, "CAPACITY_UNAVAILABLE");
    // The key is still free for any request.
    let g = create_grant_ok(&s, grant_body(&p, 2, T0, T0 + HOUR, "k")).await;
    let again = create_grant_ok(&s, grant_body(&p, 2, T0, T0 + HOUR, "k")).await;
    assert_eq!(again["grantId"], g["grantId"]);
    // Now the earlier failing body is a different request under a used key.
    let r = create_grant(&s, grant_body(&p, 5, T0, T0 + HOUR, "k")).await;
    assert_eq!(r.err(409, "CONFLICT")["idempotencyKey"], "k");

    // A request refused for capacity succeeds under the same key once
    // capacity is freed.
    let blocker = create_grant_ok(&s, grant_body(&p, 2, T0 + HOUR, T0 + 2 * HOUR, "blocker")).await;
    create_grant(&s, grant_body(&p, 3, T0 + HOUR, T0 + 2 * HOUR, "retry"))
        .await
        .err(409, "CAPACITY_UNAVAILABLE");
    end_grant(&s, &p.account, &grant_id(&blocker)).await.ok();
    create_grant_ok(&s, grant_body(&p, 3, T0 + HOUR, T0 + 2 * HOUR, "retry")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_starting_at_or_before_now_is_active_at_once() {
    let (s, p) = platform_at_t0(4).await;
    for (key, starts) in [("now", T0), ("past", T0 - 2 * MIN)] {
        let g = create_grant_ok(&s, grant_body(&p, 1, starts, T0 + HOUR, key)).await;
        assert_eq!(g["state"], "active");
        assert!(
            g.get("reason").is_none() && g.get("endedAt").is_none(),
            "{g}"
        );
        let evs = s.events(&p.tenant_token, "acme").await;
        assert_eq!(
            types_of(&evs, &grant_id(&g)),
            ["reservation-grant.created", "reservation-grant.active"]
        );
    }
    // The root tenant's events hold none of them.
    let root_evs = s.events(ROOT_TOKEN, "root").await;
    assert!(
        root_evs.iter().all(|e| !e["type"]
            .as_str()
            .unwrap()
            .starts_with("reservation-grant.")),
        "{root_evs:?}"
    );
}

/// A valid create body plus a field changed (or removed when `value` is None).
fn with(base: &Value, field: &str, value: Option<Value>) -> Value {
    let mut b = base.clone();
    match value {
        Some(v) => b[field] = v,
        None => {
            b.as_object_mut().expect("object").remove(field);
        }
    }
    b
}

async fn expect_invalid(s: &Server, path: &str, body: Value, field: &str, reason: &str) {
    let r = s.call(ROOT_TOKEN, path, body.clone()).await;
    let d = r.err(400, "INVALID_INPUT");
    assert_eq!(
        (d["field"].as_str(), d["reason"].as_str()),
        (Some(field), Some(reason)),
        "{path} {body}: {}",
        r.body
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn create_validates_every_field() {
    let (s, p) = platform_at_t0(4).await;
    let base = GrantBody::on(&p, 1)
        .term(T0, T0 + HOUR)
        .key("valid")
        .acting("root")
        .json();
    let path = "reservationGrants/create";
    let long = |n: usize| "a".repeat(n);
    let b32 = |n: usize| "0".repeat(n);
    let cases: Vec<(&str, Option<Value>, &str)> = vec![
        // tenantId
        ("tenantId", None, "missing"),
        ("tenantId", Some(Value::Null), "missing"),
        ("tenantId", Some(json!(7)), "type"),
        ("tenantId", Some(json!("")), "length"),
        ("tenantId", Some(json!(long(129))), "length"),
        ("tenantId", Some(json!("root tenant")), "pattern"),
        ("tenantId", Some(json!("root/x")), "pattern"),
        // accountId
        ("accountId", None, "missing"),
        ("accountId", Some(json!(1)), "type"),
        (
            "accountId",
            Some(json!(format!("pacct_{}", b32(53)))),
            "length",
        ),
        (
            "accountId",
            Some(json!(format!("pacct_{}", b32(25)))),
            "pattern",
        ),
        (
            "accountId",
            Some(json!(format!("acct_{}", b32(26)))),
            "pattern",
        ),
        (
            "accountId",
            Some(json!(format!("pacct_{}", "i".repeat(26)))),
            "pattern",
        ),
        (
            "accountId",
            Some(json!(format!("pacct_{}", "A".repeat(26)))),
            "pattern",
        ),
        (
            "accountId",
            Some(json!(format!("pool_{}", b32(26)))),
            "pattern",
        ),
        // reservationId
        ("reservationId", None, "missing"),
        ("reservationId", Some(json!(["r"])), "type"),
        ("reservationId", Some(json!("")), "length"),
        ("reservationId", Some(json!(long(301))), "length"),
        ("reservationId", Some(json!("res a")), "pattern"),
        ("reservationId", Some(json!("res?a")), "pattern"),
        // grantTenantId
        ("grantTenantId", None, "missing"),
        ("grantTenantId", Some(json!(true)), "type"),
        ("grantTenantId", Some(json!("")), "length"),
        ("grantTenantId", Some(json!(long(129))), "length"),
        ("grantTenantId", Some(json!("ac me")), "pattern"),
        // projectId (optional)
        ("projectId", Some(json!(3)), "type"),
        (
            "projectId",
            Some(json!(format!("prj_{}", b32(53)))),
            "length",
        ),
        ("projectId", Some(json!("prj_short")), "pattern"),
        (
            "projectId",
            Some(json!(format!("proj_{}", b32(26)))),
            "pattern",
        ),
        // slots
        ("slots", None, "missing"),
        ("slots", Some(json!("1")), "type"),
        ("slots", Some(json!(1.0)), "type"),
        ("slots", Some(json!(1.5)), "type"),
        ("slots", Some(json!(0)), "range"),
        ("slots", Some(json!(-1)), "range"),
        ("slots", Some(json!(100_001)), "range"),
        ("slots", Some(json!(u64::MAX)), "range"),
        // startsAt
        ("startsAt", None, "missing"),
        ("startsAt", Some(json!("1893456000000")), "type"),
        ("startsAt", Some(json!(1.5)), "type"),
        ("startsAt", Some(json!(-1)), "range"),
        // endsAt
        ("endsAt", None, "missing"),
        ("endsAt", Some(json!({})), "type"),
        ("endsAt", Some(json!(1_893_459_600_000.0)), "type"),
        ("endsAt", Some(json!(-5)), "range"),
        // idempotencyKey
        ("idempotencyKey", None, "missing"),
        ("idempotencyKey", Some(json!(42)), "type"),
        ("idempotencyKey", Some(json!("")), "length"),
        ("idempotencyKey", Some(json!(long(129))), "length"),
        ("idempotencyKey", Some(json!("a key")), "pattern"),
        ("idempotencyKey", Some(json!("ключ")), "pattern"),
        // unknown fields
        ("foo", Some(json!(1)), "unknown"),
        ("grantId", Some(json!(no_such("rgrant"))), "unknown"),
        ("tenantid", Some(json!("root")), "unknown"),
    ];
    for (field, value, reason) in cases {
        expect_invalid(&s, path, with(&base, field, value), field, reason).await;
    }
    // Not an object, not JSON.
    for text in ["[]", "\"x\"", "1", "null", "{", "not json"] {
        let r = s
            .raw(
                Some(ROOT_TOKEN),
                "POST",
                "/api/compute/reservationGrants/create",
                Some(text.to_owned()),
            )
            .await;
        r.err(400, "INVALID_INPUT");
    }
    // Shape is checked before authorization, authentication before shape.
    let mut bad = with(&base, "slots", Some(json!(0)));
    bad["tenantId"] = json!("acme");
    let r = s.call(&p.tenant_token, path, bad.clone()).await;
    assert_eq!(r.err(400, "INVALID_INPUT")["field"], "slots");
    s.raw(
        None,
        "POST",
        "/api/compute/reservationGrants/create",
        Some(bad.to_string()),
    )
    .await
    .err(401, "UNAUTHENTICATED");
    assert!(items(&list_grants(&s, ROOT_TOKEN, "root", Some(true)).await.ok()).is_empty());

    // The bounds themselves pass validation.
    let r = create_grant(&s, with(&base, "slots", Some(json!(100_000)))).await;
    r.err(409, "CAPACITY_UNAVAILABLE");
    let r = create_grant(
        &s,
        with(
            &base,
            "accountId",
            Some(json!(format!("pacct_{}", b32(52)))),
        ),
    )
    .await;
    r.err(404, "NOT_FOUND");
    let r = create_grant(
        &s,
        with(
            &base,
            "reservationId",
            Some(json!(format!("p/{}:x-y.z_", long(291)))),
        ),
    )
    .await;
    r.err(404, "NOT_FOUND");
    let r = create_grant(&s, with(&base, "grantTenantId", Some(json!(long(128))))).await;
    r.err(404, "NOT_FOUND");
    let r = create_grant(
        &s,
        with(&base, "projectId", Some(json!(format!("prj_{}", b32(52))))),
    )
    .await;
    assert_eq!(r.err(400, "INVALID_INPUT")["reason"], "project-not-grantee");
    let r = s
        .call(
            ROOT_TOKEN,
            path,
            with(&base, "tenantId", Some(json!(long(128)))),
        )
        .await;
    r.err(403, "ACCESS_DENIED");
    let key = format!("A.b_c:d-{}", long(120));
    assert_eq!(key.len(), 128);
    let g = create_grant_ok(&s, with(&base, "idempotencyKey", Some(json!(key)))).await;
    assert_eq!(g["slots"], 1);
    // An optional field sent as null is as if absent.
    let g2 = create_grant_ok(
        &s,
        with(
            &with(&base, "idempotencyKey", Some(json!("nul"))),
            "projectId",
            Some(Value::Null),
        ),
    )
    .await;
    assert!(g2.get("projectId").is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn get_list_and_end_validate_their_fields() {
    let (s, p) = platform_at_t0(4).await;
    let g = create_grant_ok(&s, grant_body(&p, 1, T0, T0 + HOUR, "k")).await;
    let gid = grant_id(&g);
    let b32 = |n: usize| "0".repeat(n);

    let get_base = json!({ "tenantId": "root", "grantId": gid });
    let get_cases: Vec<(&str, Option<Value>, &str)> = vec![
        ("tenantId", None, "missing"),
        ("tenantId", Some(json!(1)), "type"),
        ("tenantId", Some(json!("a b")), "pattern"),
        ("grantId", None, "missing"),
        ("grantId", Some(json!(1)), "type"),
        ("grantId", Some(json!("rgrant_x")), "pattern"),
        (
            "grantId",
            Some(json!(format!("grant_{}", b32(26)))),
            "pattern",
        ),
        (
            "grantId",
            Some(json!(format!("rgrant_{}", b32(53)))),
            "length",
        ),
        ("accountId", Some(json!(p.account)), "unknown"),
    ];
    for (field, value, reason) in get_cases {
        expect_invalid(
            &s,
            "reservationGrants/get",
            with(&get_base, field, value),
            field,
            reason,
        )
        .await;
    }

    let list_base = json!({ "tenantId": "root" });
    let list_cases: Vec<(&str, Option<Value>, &str)> = vec![
        ("tenantId", None, "missing"),
        ("tenantId", Some(json!(long_name(129))), "length"),
        ("all", Some(json!("true")), "type"),
        ("all", Some(json!(1)), "type"),
        ("limit", Some(json!(0)), "range"),
        ("limit", Some(json!(1001)), "range"),
        ("after", Some(json!("c0000000000000")), "pattern"),
        ("activeAt", Some(json!("now")), "type"),
        ("reservationId", Some(json!("")), "length"),
        ("accountId", Some(json!("pacct_x")), "pattern"),
        ("states", Some(json!([])), "length"),
        ("offset", Some(json!(10)), "unknown"),
    ];
    for (field, value, reason) in list_cases {
        expect_invalid(
            &s,
            "reservationGrants/list",
            with(&list_base, field, value),
            field,
            reason,
        )
        .await;
    }

    let end_base = json!({ "tenantId": "root", "accountId": p.account, "grantId": gid });
    let end_cases: Vec<(&str, Option<Value>, &str)> = vec![
        ("tenantId", None, "missing"),
        ("accountId", None, "missing"),
        ("accountId", Some(json!(false)), "type"),
        ("accountId", Some(json!("pacct_")), "pattern"),
        (
            "accountId",
            Some(json!(format!("pacct_{}", b32(53)))),
            "length",
        ),
        ("grantId", None, "missing"),
        ("grantId", Some(json!([gid])), "type"),
        (
            "grantId",
            Some(json!(format!("rgrant_{}", b32(25)))),
            "pattern",
        ),
        ("reason", Some(json!("ended")), "unknown"),
        ("endsAt", Some(json!(T0)), "unknown"),
    ];
    for (field, value, reason) in end_cases {
        expect_invalid(
            &s,
            "reservationGrants/end",
            with(&end_base, field, value),
            field,
            reason,
        )
        .await;
    }
    // None of that touched the grant.
    let now = get_grant_as(&s, ROOT_TOKEN, "root", &gid).await.ok();
    assert_eq!(now["grant"], g);
    // `all: false` is the plain list.
    let plain = list_grants(&s, &p.tenant_token, "acme", Some(false))
        .await
        .ok();
    assert_eq!(grant_ids(&items(&plain)), [gid]);
}

fn long_name(n: usize) -> String {
    "t".repeat(n)
}
