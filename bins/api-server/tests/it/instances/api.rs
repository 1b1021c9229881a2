//! The instances API (contract 1.2, 1.4, 1.5, 3.7): existence and input
//! rules of `create`, idempotency, stop/start/delete on every state,
//! visibility, listing, and field validation.

use serde_json::{Value, json};

use crate::support::builders::InstanceBuilder;
use crate::support::clock::{MIN, T0};
use crate::support::db::{seg_off, seg_res, segments};
use crate::support::fixtures::{
    default_quotas, get_instance, id, instance_op, instance_op_ok, list_instances, no_such, offer,
    placement, plain, platform_at_t0, project, tenant_with_pool, used,
};
use crate::support::gce::FLAVOR;

#[tokio::test(flavor = "multi_thread")]
async fn create_returns_the_instance_with_every_field() {
    let (s, p) = platform_at_t0(4).await;
    let t = &p.tenant_token;
    let web = project(&s, t, "acme", "web").await;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    let inst_id = id(&a);
    assert!(
        inst_id.starts_with("inst_")
            && inst_id.len() == 31
            && inst_id[5..]
                .chars()
                .all(|c| c.is_ascii_digit() || (c.is_ascii_lowercase() && !"ilou".contains(c))),
        "{inst_id}"
    );
    assert_eq!(a["tenantId"], "acme");
    assert_eq!(a["poolId"], p.pool.as_str());
    assert_eq!(a["flavor"], FLAVOR);
    assert!(a["name"].is_string());
    assert_eq!(a["billing"], "standard");
    assert_eq!(a["state"], "running");
    assert_eq!(a["createdAt"], T0);
    assert!(a.get("projectId").is_none(), "{a}");
    assert_eq!(
        a["placement"],
        json!({ "kind": "reservation", "reservationId": p.reservation })
    );
    let b = InstanceBuilder::new(&p)
        .key("b")
        .name("web 1")
        .project(&web)
        .billing("standard")
        .create(&s)
        .await;
    assert_eq!(b["name"], "web 1");
    assert_eq!(b["projectId"], web.as_str());
    // get returns the same object.
    assert_eq!(get_instance(&s, t, "acme", &id(&b)).await, b);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_not_offered_to_the_tenant_is_not_found() {
    let (s, p) = platform_at_t0(4).await;
    let globex = s.tenant("globex").await;
    let r = InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("x")
        .send(&s)
        .await;
    r.err(404, "NOT_FOUND");
    // Not even an unknown flavor is revealed.
    let r = InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("x")
        .field("flavor", json!("n2-standard-8"))
        .send(&s)
        .await;
    r.err(404, "NOT_FOUND");
    let r = InstanceBuilder::on(&no_such("pool"), "acme", &p.tenant_token)
        .key("x")
        .send(&s)
        .await;
    r.err(404, "NOT_FOUND");
    assert!(list_instances(&s, &globex, "globex", None).await.is_empty());
    // Once offered, it works.
    offer(&s, &p.pool, "globex", default_quotas()).await;
    InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("x")
        .create(&s)
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_flavor_or_a_project_of_another_tenant_is_invalid_input() {
    let (s, p) = platform_at_t0(4).await;
    let t = &p.tenant_token;
    let globex = tenant_with_pool(&s, "globex", &p.pool).await;
    let theirs = project(&s, &globex, "globex", "theirs").await;

    let r = InstanceBuilder::new(&p)
        .key("a")
        .field("flavor", json!("n2-standard-8"))
        .send(&s)
        .await;
    assert_eq!(r.err(400, "INVALID_INPUT")["field"], "flavor");
    let r = InstanceBuilder::new(&p)
        .key("a")
        .project(&theirs)
        .send(&s)
        .await;
    assert_eq!(r.err(400, "INVALID_INPUT")["field"], "projectId");
    let r = InstanceBuilder::new(&p)
        .key("a")
        .field("projectId", json!(no_such("prj")))
        .send(&s)
        .await;
    assert_eq!(r.err(400, "INVALID_INPUT")["field"], "projectId");
    assert!(list_instances(&s, t, "acme", None).await.is_empty());
    assert_eq!(used(&s, t, "acme", &p.pool, "instances").await, Some(0));
    // The key was not consumed.
    InstanceBuilder::new(&p).key("a").create(&s).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn create_is_idempotent_per_tenant_and_a_different_body_under_the_key_conflicts() {
    let (s, p) = platform_at_t0(2).await;
    let t = &p.tenant_token;
    let globex = tenant_with_pool(&s, "globex", &p.pool).await;
    let a = InstanceBuilder::new(&p)
        .key("k")
        .name("one")
        .create(&s)
        .await;

    // A replay returns the same instance, even though the reservation would
    // now have room for only one more, and charges nothing.
    s.set_clock(T0 + MIN).await;
    let again = InstanceBuilder::new(&p)
        .key("k")
        .name("one")
        .create(&s)
        .await;
    assert_eq!(again, a);
    assert_eq!(list_instances(&s, t, "acme", None).await.len(), 1);
    assert_eq!(used(&s, t, "acme", &p.pool, "instances").await, Some(1));

    // The same key in another tenant is another request.
    let x = InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("k")
        .name("one")
        .create(&s)
        .await;
    assert_ne!(id(&x), id(&a));
    // The reservation is now full, yet the replay still answers with the instance.
    InstanceBuilder::new(&p)
        .key("other")
        .send(&s)
        .await
        .err(409, "CAPACITY_UNAVAILABLE");
    let again = InstanceBuilder::new(&p)
        .key("k")
        .name("one")
        .create(&s)
        .await;
    assert_eq!(id(&again), id(&a));

    // A replay returns the instance as it is now.
    instance_op_ok(&s, t, "acme", "stop", &id(&a)).await;
    let again = InstanceBuilder::new(&p)
        .key("k")
        .name("one")
        .create(&s)
        .await;
    assert_eq!(
        (id(&again), again["state"].as_str()),
        (id(&a), Some("stopped"))
    );

    // Any other body under the key is a conflict.
    for other in [
        json!({ "name": "two" }),
        json!({}),
        json!({ "name": "one", "flavor": "n2-standard-8" }),
    ] {
        let r = InstanceBuilder::new(&p)
            .key("k")
            .fields(other.clone())
            .send(&s)
            .await;
        let d = r.err(409, "CONFLICT");
        assert_eq!(d["idempotencyKey"], "k", "{other}");
    }
    assert_eq!(list_instances(&s, t, "acme", None).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_creates_with_one_key_create_one_instance() {
    let (s, p) = platform_at_t0(10).await;
    let t = &p.tenant_token;
    let answers =
        futures::future::join_all((0..12).map(|_| InstanceBuilder::new(&p).key("same").send(&s)))
            .await;
    let ids: std::collections::BTreeSet<String> = answers
        .into_iter()
        .map(|a| id(&a.ok()["instance"]))
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(list_instances(&s, t, "acme", None).await.len(), 1);
    assert_eq!(used(&s, t, "acme", &p.pool, "instances").await, Some(1));
}

#[tokio::test(flavor = "multi_thread")]
async fn stopping_a_stopped_or_starting_a_running_instance_returns_it_unchanged() {
    let (s, p) = platform_at_t0(4).await;
    let t = &p.tenant_token;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    s.set_clock(T0 + MIN).await;
    let started = instance_op_ok(&s, t, "acme", "start", &id(&a)).await;
    assert_eq!(started, a);
    let stopped = instance_op_ok(&s, t, "acme", "stop", &id(&a)).await;
    assert_eq!(stopped["state"], "stopped");
    s.set_clock(T0 + 2 * MIN).await;
    let again = instance_op_ok(&s, t, "acme", "stop", &id(&a)).await;
    assert_eq!(again, stopped);
    // Neither repeated call wrote a segment.
    assert_eq!(
        segments(&s, &id(&a)).await,
        vec![
            seg_res(T0, Some(T0 + MIN), true, &p.reservation),
            seg_off(T0 + MIN, None, "none", false),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_instance_cannot_be_stopped_or_started_and_deleting_it_again_returns_it() {
    let (s, p) = platform_at_t0(4).await;
    let t = &p.tenant_token;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    s.set_clock(T0 + MIN).await;
    let deleted = instance_op_ok(&s, t, "acme", "delete", &id(&a)).await;
    assert_eq!(deleted["state"], "deleted");
    assert_eq!(placement(&deleted), plain("none"));
    for method in ["stop", "start"] {
        instance_op(&s, t, "acme", method, &id(&a))
            .await
            .err(409, "INVALID_STATE");
    }
    s.set_clock(T0 + 2 * MIN).await;
    assert_eq!(
        instance_op_ok(&s, t, "acme", "delete", &id(&a)).await,
        deleted
    );
    assert_eq!(get_instance(&s, t, "acme", &id(&a)).await, deleted);
    assert_eq!(
        segments(&s, &id(&a)).await,
        vec![seg_res(T0, Some(T0 + MIN), true, &p.reservation)]
    );
    // A stopped instance can be deleted too; its history ends there.
    let b = InstanceBuilder::new(&p).key("b").create(&s).await;
    s.set_clock(T0 + 3 * MIN).await;
    instance_op_ok(&s, t, "acme", "stop", &id(&b)).await;
    s.set_clock(T0 + 4 * MIN).await;
    assert_eq!(
        instance_op_ok(&s, t, "acme", "delete", &id(&b)).await["state"],
        "deleted"
    );
    assert_eq!(
        segments(&s, &id(&b)).await,
        vec![
            seg_res(T0 + 2 * MIN, Some(T0 + 3 * MIN), true, &p.reservation),
            seg_off(T0 + 3 * MIN, Some(T0 + 4 * MIN), "none", false),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn another_tenants_instance_is_not_found() {
    let (s, p) = platform_at_t0(4).await;
    let t = &p.tenant_token;
    let globex = tenant_with_pool(&s, "globex", &p.pool).await;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    for method in ["get", "stop", "start", "delete"] {
        instance_op(&s, &globex, "globex", method, &id(&a))
            .await
            .err(404, "NOT_FOUND");
        instance_op(&s, t, "acme", method, &no_such("inst"))
            .await
            .err(404, "NOT_FOUND");
    }
    assert!(list_instances(&s, &globex, "globex", None).await.is_empty());
    // Nothing happened to it.
    assert_eq!(get_instance(&s, t, "acme", &id(&a)).await, a);
    // acme's key acting in globex is denied before any lookup.
    instance_op(&s, t, "globex", "get", &id(&a))
        .await
        .err(403, "ACCESS_DENIED");
}

#[tokio::test(flavor = "multi_thread")]
async fn list_is_newest_first_and_filters_by_project() {
    let (s, p) = platform_at_t0(10).await;
    let t = &p.tenant_token;
    let web = project(&s, t, "acme", "web").await;
    let batch = project(&s, t, "acme", "batch").await;
    let mut made: Vec<(String, Option<&str>)> = Vec::new();
    for (i, pr) in [Some(&web), None, Some(&batch), Some(&web), None]
        .into_iter()
        .enumerate()
    {
        let now = T0 + MIN * i64::try_from(i).expect("small");
        s.set_clock(now).await;
        let mut extra = json!({});
        if let Some(pr) = pr {
            extra["projectId"] = json!(pr);
        }
        let v = InstanceBuilder::new(&p)
            .key(&format!("k{i}"))
            .fields(extra)
            .create(&s)
            .await;
        made.push((id(&v), pr.map(String::as_str)));
    }
    // Two more created in the same millisecond: newest first is then by id.
    for key in ["s1", "s2"] {
        let v = InstanceBuilder::new(&p).key(key).create(&s).await;
        made.push((id(&v), None));
    }
    let all = list_instances(&s, t, "acme", None).await;
    let got: Vec<(i64, String)> = all
        .iter()
        .map(|i| (i["createdAt"].as_i64().expect("createdAt"), id(i)))
        .collect();
    let mut expected = got.clone();
    expected.sort_by(|a, b| b.cmp(a));
    assert_eq!(got, expected, "newest first");
    assert_eq!(all.len(), made.len());
    assert_eq!(id(&all[all.len() - 1]), made[0].0);

    let webs: Vec<String> = list_instances(&s, t, "acme", Some(&web))
        .await
        .iter()
        .map(id)
        .collect();
    assert_eq!(webs, vec![made[3].0.clone(), made[0].0.clone()]);
    let batches: Vec<String> = list_instances(&s, t, "acme", Some(&batch))
        .await
        .iter()
        .map(id)
        .collect();
    assert_eq!(batches, vec![made[2].0.clone()]);
    // Deleted instances are still listed (with their state).
    instance_op_ok(&s, t, "acme", "delete", &made[0].0).await;
    let webs = list_instances(&s, t, "acme", Some(&web)).await;
    assert_eq!(webs.len(), 2);
    assert_eq!(webs[1]["state"], "deleted");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_field_is_validated() {
    let (s, p) = platform_at_t0(4).await;
    let t = &p.tenant_token;
    let base = || {
        json!({
            "tenantId": "acme",
            "poolId": p.pool,
            "flavor": FLAVOR,
            "idempotencyKey": "k",
        })
    };
    let with = |field: &str, v: Value| {
        let mut b = base();
        b[field] = v;
        b
    };
    let without = |field: &str| {
        let mut b = base();
        b.as_object_mut().expect("object").remove(field);
        b
    };
    let cases: Vec<(Value, &str, Option<&str>)> = vec![
        (without("poolId"), "poolId", Some("missing")),
        (without("flavor"), "flavor", Some("missing")),
        (without("idempotencyKey"), "idempotencyKey", Some("missing")),
        (without("tenantId"), "tenantId", Some("missing")),
        (with("poolId", json!("pool_XYZ")), "poolId", Some("pattern")),
        (with("poolId", json!(7)), "poolId", Some("type")),
        (with("flavor", json!(4)), "flavor", Some("type")),
        (
            with("flavor", json!("N2 Standard")),
            "flavor",
            Some("pattern"),
        ),
        (
            with("projectId", json!("prj_short")),
            "projectId",
            Some("pattern"),
        ),
        (
            with("projectId", json!(no_such("pool"))),
            "projectId",
            Some("pattern"),
        ),
        (with("name", json!("bad/name")), "name", Some("pattern")),
        (with("name", json!("n".repeat(129))), "name", Some("length")),
        (with("name", json!("")), "name", None),
        (with("billing", json!("free")), "billing", None),
        (with("billing", json!(true)), "billing", Some("type")),
        (
            with("idempotencyKey", json!("has space")),
            "idempotencyKey",
            Some("pattern"),
        ),
        (
            with("idempotencyKey", json!("k".repeat(129))),
            "idempotencyKey",
            Some("length"),
        ),
        (
            with("zone", json!("us-central1-a")),
            "zone",
            Some("unknown"),
        ),
    ];
    for (body, field, reason) in cases {
        let r = s.call(t, "instances/create", body.clone()).await;
        let d = r.err(400, "INVALID_INPUT");
        assert_eq!(d["field"], field, "{body}");
        if let Some(reason) = reason {
            assert_eq!(d["reason"], reason, "{body}");
        }
    }
    for method in ["stop", "start", "delete", "get"] {
        let r = s
            .call(
                t,
                &format!("instances/{method}"),
                json!({ "tenantId": "acme" }),
            )
            .await;
        let d = r.err(400, "INVALID_INPUT");
        assert_eq!(
            (d["field"].as_str(), d["reason"].as_str()),
            (Some("instanceId"), Some("missing"))
        );
        let r = s
            .call(
                t,
                &format!("instances/{method}"),
                json!({ "tenantId": "acme", "instanceId": no_such("rgrant") }),
            )
            .await;
        let d = r.err(400, "INVALID_INPUT");
        assert_eq!(
            (d["field"].as_str(), d["reason"].as_str()),
            (Some("instanceId"), Some("pattern"))
        );
        let r = s
            .call(
                t,
                &format!("instances/{method}"),
                json!({ "tenantId": "acme", "instanceId": no_such("inst"), "force": true }),
            )
            .await;
        assert_eq!(r.err(400, "INVALID_INPUT")["reason"], "unknown");
    }
    let r = s
        .call(
            t,
            "instances/list",
            json!({ "tenantId": "acme", "projectId": "web" }),
        )
        .await;
    assert_eq!(r.err(400, "INVALID_INPUT")["field"], "projectId");
    let r = s
        .call(
            t,
            "instances/list",
            json!({ "tenantId": "acme", "instanceId": no_such("inst") }),
        )
        .await;
    assert_eq!(r.err(400, "INVALID_INPUT")["reason"], "unknown");
    // Shape is checked before the tenant: acme's key acting in globex with a
    // bad body is INVALID_INPUT, with a good one ACCESS_DENIED.
    let mut foreign = without("poolId");
    foreign["tenantId"] = json!("globex");
    s.call(t, "instances/create", foreign)
        .await
        .err(400, "INVALID_INPUT");
    let mut foreign = base();
    foreign["tenantId"] = json!("globex");
    s.call(t, "instances/create", foreign)
        .await
        .err(403, "ACCESS_DENIED");
    // Nothing was created by any of it.
    assert!(list_instances(&s, t, "acme", None).await.is_empty());
    assert_eq!(used(&s, t, "acme", &p.pool, "instances").await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn instances_need_compute_instances_manage() {
    let (s, p) = platform_at_t0(4).await;
    let t = &p.tenant_token;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    let member = s.key(t, "acme", "member", None).await;
    let viewer = s.key(t, "acme", "viewer", None).await;
    let b = InstanceBuilder::new(&p)
        .by("acme", &member)
        .key("b")
        .create(&s)
        .await;
    assert_eq!(
        instance_op_ok(&s, &member, "acme", "stop", &id(&b)).await["state"],
        "stopped"
    );
    assert_eq!(list_instances(&s, &member, "acme", None).await.len(), 2);
    InstanceBuilder::new(&p)
        .by("acme", &viewer)
        .key("c")
        .send(&s)
        .await
        .err(403, "ACCESS_DENIED");
    for method in ["get", "stop", "start", "delete"] {
        instance_op(&s, &viewer, "acme", method, &id(&a))
            .await
            .err(403, "ACCESS_DENIED");
    }
    s.call(&viewer, "instances/list", json!({ "tenantId": "acme" }))
        .await
        .err(403, "ACCESS_DENIED");
    assert_eq!(get_instance(&s, t, "acme", &id(&a)).await, a);
}
