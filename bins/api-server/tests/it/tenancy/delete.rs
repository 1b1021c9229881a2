//! `tenants.delete` (contract 3.1, seed-reservation-grants.md paragraph 4):
//! active grants end now with `reason: "tenant-deleted"`, scheduled ones are
//! cancelled, the tenant's instances are deleted with their slots and quota
//! released, and its keys stop working.

use serde_json::json;

use crate::support::bodies::GrantBody;
use crate::support::builders::{GrantBuilder, InstanceBuilder};
use crate::support::calls::delete_tenant;
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::db::{
    events_in_db, instances_in_db, quotas_in_db, seg_grant, seg_off, seg_res, segments,
};
use crate::support::fixtures::{
    create_pool, default_quotas, get_grant, get_instance, grant_of, id, instance_op_ok, offer,
    placement, plain, platform_at_t0, tenant_with_pool,
};

#[tokio::test(flavor = "multi_thread")]
async fn deleting_a_tenant_ends_its_grants_deletes_its_instances_and_frees_their_slots() {
    let (s, p) = platform_at_t0(6).await;
    let t = p.tenant_token.clone();
    let member = s.key(&t, "acme", "member", None).await;
    let globex = tenant_with_pool(&s, "globex", &p.pool).await;

    // acme: G0 (1 slot, over before the deletion), G1 (3 slots, active),
    // G2 (1 slot, scheduled).
    let g0 = GrantBuilder::new(&p)
        .term(T0, T0 + 30 * MIN)
        .create(&s)
        .await;
    let g1 = GrantBuilder::new(&p)
        .slots(3)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    let g2 = GrantBuilder::new(&p)
        .term(T0 + 5 * HOUR, T0 + 10 * HOUR)
        .create(&s)
        .await;
    // G0 and G1 both start at T0, so which of the first instances lands in
    // G0 depends on the grant ids: exactly one does, three go to G1.
    let mut held = Vec::new();
    for key in ["a", "b", "e", "f"] {
        held.push(InstanceBuilder::new(&p).key(key).create(&s).await);
    }
    let c = InstanceBuilder::new(&p).key("c").create(&s).await;
    let d = InstanceBuilder::new(&p).key("d").create(&s).await;
    assert_eq!(placement(&c), plain("reservation"));
    assert_eq!(placement(&d), plain("reservation"));
    let in_g0: Vec<&serde_json::Value> = held
        .iter()
        .filter(|i| grant_of(i).as_deref() == Some(g0.as_str()))
        .collect();
    assert_eq!(in_g0.len(), 1);
    let f = in_g0[0].clone();
    let in_g1: Vec<String> = held
        .iter()
        .filter(|i| grant_of(i).as_deref() == Some(g1.as_str()))
        .map(id)
        .collect();
    assert_eq!(in_g1.len(), 3);
    s.set_clock(T0 + MIN).await;
    instance_op_ok(&s, &t, "acme", "stop", &in_g1[2]).await; // keeps its G1 slot
    instance_op_ok(&s, &t, "acme", "stop", &id(&d)).await; // releases its ordinary slot
    // globex takes the one ordinary slot left; the next one is refused.
    let x = InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("x")
        .create(&s)
        .await;
    assert_eq!(placement(&x), plain("reservation"));
    InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("y")
        .send(&s)
        .await
        .err(409, "CAPACITY_UNAVAILABLE");

    // Deleted an hour in, with nothing settled since: G0's term-over at
    // T0 + 30min is applied first (f goes to an ordinary slot, G1 being full).
    let at = T0 + HOUR;
    s.set_clock(at).await;
    let deleted = delete_tenant(&s, "acme").await.ok();
    assert_eq!(deleted["tenant"]["tenantId"], "acme");
    assert_eq!(deleted["tenant"]["state"], "deleted");

    // Grants.
    let v0 = get_grant(&s, &g0).await;
    assert_eq!(
        (
            v0["state"].as_str(),
            v0["reason"].as_str(),
            v0["endedAt"].as_i64()
        ),
        (Some("ended"), Some("term-over"), Some(T0 + 30 * MIN))
    );
    let v1 = get_grant(&s, &g1).await;
    assert_eq!(
        (
            v1["state"].as_str(),
            v1["reason"].as_str(),
            v1["endsAt"].as_i64(),
            v1["endedAt"].as_i64()
        ),
        (Some("ended"), Some("tenant-deleted"), Some(at), Some(at))
    );
    let v2 = get_grant(&s, &g2).await;
    assert_eq!(
        (
            v2["state"].as_str(),
            v2["reason"].as_str(),
            v2["startsAt"].as_i64(),
            v2["endedAt"].as_i64()
        ),
        (
            Some("cancelled"),
            Some("tenant-deleted"),
            Some(T0 + 5 * HOUR),
            Some(at)
        )
    );

    // Events, in the deleted tenant.
    let events = events_in_db(&s, "acme").await;
    let about = |g: &str| -> Vec<(String, Option<String>, i64)> {
        events
            .iter()
            .filter(|(_, d, _)| d["grantId"] == g)
            .map(|(ty, d, at)| (ty.clone(), d["reason"].as_str().map(str::to_owned), *at))
            .collect()
    };
    assert_eq!(
        about(&g0),
        vec![
            ("reservation-grant.created".into(), None, T0),
            ("reservation-grant.active".into(), None, T0),
            (
                "reservation-grant.ended".into(),
                Some("term-over".into()),
                T0 + 30 * MIN
            ),
        ]
    );
    assert_eq!(
        about(&g1).last(),
        Some(&(
            "reservation-grant.ended".into(),
            Some("tenant-deleted".into()),
            at
        ))
    );
    assert_eq!(
        about(&g2),
        vec![
            ("reservation-grant.created".into(), None, T0),
            (
                "reservation-grant.cancelled".into(),
                Some("tenant-deleted".into()),
                at
            ),
        ]
    );
    let ended = events
        .iter()
        .find(|(ty, d, _)| ty == "reservation-grant.ended" && d["grantId"] == g1.as_str())
        .expect("ended event");
    assert_eq!(ended.1["endsAt"], at);

    // Instances: all deleted at the instant, histories closed there.
    let rows = instances_in_db(&s).await;
    let acme_rows: Vec<_> = rows.iter().filter(|r| r.tenant_id == "acme").collect();
    assert_eq!(acme_rows.len(), 6);
    for r in &acme_rows {
        assert_eq!(
            (r.state.as_str(), r.placement_kind.as_str(), r.deleted_at),
            ("deleted", "none", Some(at)),
            "{r:?}"
        );
        assert!(r.reservation_id.is_none() && r.grant_id.is_none(), "{r:?}");
        let segs = segments(&s, &r.instance_id).await;
        assert!(segs.iter().all(|sg| sg.to_ms.is_some()), "{segs:?}");
        assert_eq!(segs.last().and_then(|sg| sg.to_ms), Some(at), "{segs:?}");
    }
    assert_eq!(
        segments(&s, &id(&f)).await,
        vec![
            seg_grant(T0, Some(T0 + 30 * MIN), true, &g0, &p.reservation),
            seg_res(T0 + 30 * MIN, Some(at), true, &p.reservation),
        ]
    );
    assert_eq!(
        segments(&s, &in_g1[2]).await,
        vec![
            seg_grant(T0, Some(T0 + MIN), true, &g1, &p.reservation),
            seg_grant(T0 + MIN, Some(at), false, &g1, &p.reservation),
        ]
    );
    assert_eq!(
        segments(&s, &id(&d)).await,
        vec![
            seg_res(T0, Some(T0 + MIN), true, &p.reservation),
            seg_off(T0 + MIN, Some(at), "none", false),
        ]
    );
    // Quota released.
    let q = quotas_in_db(&s, "acme").await;
    assert!(!q.is_empty());
    assert!(q.iter().all(|r| r.used == 0), "{q:?}");
    // globex's instance is untouched.
    assert_eq!(get_instance(&s, &globex, "globex", &id(&x)).await, x);

    // Keys stop working.
    for key in [&t, &member] {
        s.call(key, "instances/list", json!({ "tenantId": "acme" }))
            .await
            .err(401, "UNAUTHENTICATED");
    }

    // Every slot but globex's is free again, for anyone.
    for key in ["y", "z1", "z2", "z3", "z4"] {
        let i = InstanceBuilder::new(&p)
            .by("globex", &globex)
            .key(key)
            .create(&s)
            .await;
        assert_eq!(placement(&i), plain("reservation"), "{key}");
    }
    let full = InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("z5")
        .send(&s)
        .await;
    assert_eq!(
        full.err(409, "CAPACITY_UNAVAILABLE"),
        &json!({ "reservationId": p.reservation, "total": 6, "inUse": 6, "available": 0 })
    );

    // A deleted tenant is no grantee.
    let body = GrantBody::on(&p, 1)
        .term(at + HOUR, at + 2 * HOUR)
        .key("after")
        .grantee("acme")
        .json();
    s.root("reservationGrants/create", body)
        .await
        .err(404, "NOT_FOUND");
    // Deleting it again returns it unchanged.
    s.set_clock(at + MIN).await;
    let again = delete_tenant(&s, "acme").await.ok();
    assert_eq!(again, deleted);
    assert_eq!(events_in_db(&s, "acme").await.len(), events.len());
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_a_tenant_without_grants_releases_its_ordinary_and_ondemand_instances() {
    let (s, p) = platform_at_t0(1).await;
    let globex = tenant_with_pool(&s, "globex", &p.pool).await;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    assert_eq!(placement(&a), plain("reservation"));
    // A second pool with no reservation: on-demand.
    let pool2 = create_pool(&s, &p.account).await;
    offer(&s, &pool2, "acme", default_quotas()).await;
    let o = InstanceBuilder::new(&p)
        .pool(&pool2)
        .key("o")
        .create(&s)
        .await;
    assert_eq!(placement(&o), plain("ondemand"));
    InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("x")
        .send(&s)
        .await
        .err(409, "CAPACITY_UNAVAILABLE");

    s.set_clock(T0 + MIN).await;
    delete_tenant(&s, "acme").await.ok();
    assert!(quotas_in_db(&s, "acme").await.iter().all(|r| r.used == 0));
    assert_eq!(
        segments(&s, &id(&o)).await,
        vec![seg_off(T0, Some(T0 + MIN), "ondemand", true)]
    );
    let x = InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("x")
        .create(&s)
        .await;
    assert_eq!(placement(&x), plain("reservation"));
}
