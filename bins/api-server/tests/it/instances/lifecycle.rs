//! instances over HTTP: placement into grants and ordinary slots, take-in
//! and hand-over at exact instants.

use serde_json::json;

use crate::support::builders::InstanceBuilder;
use crate::support::calls::get_quotas;
use crate::support::clock::{HOUR, T0};
use crate::support::fixtures::{create_grant, grant_body, instance_op, placement, platform_at_t0};

#[tokio::test(flavor = "multi_thread")]
async fn the_grantee_fills_its_grant_then_ordinary_slots_and_a_full_reservation_refuses_everyone() {
    let (s, p) = platform_at_t0(3).await;
    let g = create_grant(&s, grant_body(&p, 2, T0, T0 + 10 * HOUR, "g"))
        .await
        .ok();
    let gid = g["grant"]["grantId"].as_str().unwrap().to_owned();
    let t = &p.tenant_token;
    let a = InstanceBuilder::new(&p).key("a").send(&s).await.ok();
    assert_eq!(
        placement(&a["instance"]),
        ("grant".into(), Some(gid.clone()))
    );
    let b = InstanceBuilder::new(&p).key("b").send(&s).await.ok();
    assert_eq!(
        placement(&b["instance"]),
        ("grant".into(), Some(gid.clone()))
    );
    let c = InstanceBuilder::new(&p).key("c").send(&s).await.ok();
    assert_eq!(placement(&c["instance"]).0, "reservation");
    // Physically full: 3 running on 3 slots.
    let d = InstanceBuilder::new(&p).key("d").send(&s).await;
    let details = d.err(409, "CAPACITY_UNAVAILABLE");
    assert_eq!(details["total"], 3);
    assert_eq!(details["inUse"], 3);
    assert_eq!(details["available"], 0);
    // Quota: 3 instances charged, the refused one charged nothing.
    let q = get_quotas(&s, t, "acme", Some(&p.pool)).await.ok();
    let instances = q["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "instances")
        .unwrap()
        .clone();
    assert_eq!(instances["used"], 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn others_never_take_an_unused_granted_slot() {
    let (s, p) = platform_at_t0(2).await;
    create_grant(&s, grant_body(&p, 1, T0, T0 + 10 * HOUR, "g"))
        .await
        .ok();
    let other = s.tenant("globex").await;
    s.root(
        "pools/offer",
        json!({
            "poolId": p.pool,
            "offerTenantId": "globex",
            "quotas": { "instances": 5, "vcpus": 40, "memoryGib": 1000 },
        }),
    )
    .await
    .ok();
    let x = InstanceBuilder::new(&p)
        .by("globex", &other)
        .key("x")
        .send(&s)
        .await
        .ok();
    assert_eq!(placement(&x["instance"]).0, "reservation");
    // The one free slot left is granted to acme and idle: globex is refused.
    let y = InstanceBuilder::new(&p)
        .by("globex", &other)
        .key("y")
        .send(&s)
        .await;
    assert_eq!(y.err(409, "CAPACITY_UNAVAILABLE")["available"], 0);
    let a = InstanceBuilder::new(&p).key("a").send(&s).await.ok();
    assert_eq!(placement(&a["instance"]).0, "grant");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_takes_in_running_instances_at_its_start_and_hands_them_over_at_its_end() {
    let (s, p) = platform_at_t0(4).await;
    let t = &p.tenant_token;
    let a = InstanceBuilder::new(&p).key("a").send(&s).await.ok();
    let a_id = a["instance"]["instanceId"].as_str().unwrap().to_owned();
    assert_eq!(placement(&a["instance"]).0, "reservation");
    let g = create_grant(&s, grant_body(&p, 1, T0 + HOUR, T0 + 2 * HOUR, "g"))
        .await
        .ok();
    let gid = g["grant"]["grantId"].as_str().unwrap().to_owned();
    let renewal = create_grant(&s, grant_body(&p, 1, T0 + 2 * HOUR, T0 + 3 * HOUR, "r"))
        .await
        .ok();
    let rid = renewal["grant"]["grantId"].as_str().unwrap().to_owned();
    // Nothing has settled; reading the instance after the start settles nothing by itself,
    // but any decision on the reservation does. A get reports the stored placement.
    s.set_clock(T0 + HOUR + 5).await;
    InstanceBuilder::new(&p).key("b").send(&s).await.ok();
    let got = instance_op(&s, t, "acme", "get", &a_id).await.ok();
    assert_eq!(placement(&got["instance"]), ("grant".into(), Some(gid)));
    s.set_clock(T0 + 2 * HOUR + 5).await;
    InstanceBuilder::new(&p).key("c").send(&s).await.ok();
    let got = instance_op(&s, t, "acme", "get", &a_id).await.ok();
    assert_eq!(placement(&got["instance"]), ("grant".into(), Some(rid)));
    s.set_clock(T0 + 3 * HOUR + 5).await;
    InstanceBuilder::new(&p).key("d").send(&s).await.ok();
    let got = instance_op(&s, t, "acme", "get", &a_id).await.ok();
    assert_eq!(placement(&got["instance"]).0, "reservation");
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_keeps_a_grant_slot_start_returns_to_it_and_delete_releases_quota() {
    let (s, p) = platform_at_t0(2).await;
    let t = &p.tenant_token;
    let g = create_grant(&s, grant_body(&p, 1, T0, T0 + 10 * HOUR, "g"))
        .await
        .ok();
    let gid = g["grant"]["grantId"].as_str().unwrap().to_owned();
    let a = InstanceBuilder::new(&p).key("a").send(&s).await.ok();
    let a_id = a["instance"]["instanceId"].as_str().unwrap().to_owned();
    let stopped = instance_op(&s, t, "acme", "stop", &a_id).await.ok();
    assert_eq!(stopped["instance"]["state"], "stopped");
    assert_eq!(
        placement(&stopped["instance"]),
        ("grant".into(), Some(gid.clone()))
    );
    // The stopped instance still holds the grant: a new one goes to the ordinary slot.
    let b = InstanceBuilder::new(&p).key("b").send(&s).await.ok();
    assert_eq!(placement(&b["instance"]).0, "reservation");
    let started = instance_op(&s, t, "acme", "start", &a_id).await.ok();
    assert_eq!(started["instance"]["state"], "running");
    assert_eq!(placement(&started["instance"]), ("grant".into(), Some(gid)));
    for id in [a_id.as_str(), b["instance"]["instanceId"].as_str().unwrap()] {
        let d = instance_op(&s, t, "acme", "delete", id).await.ok();
        assert_eq!(d["instance"]["state"], "deleted");
    }
    let q = get_quotas(&s, t, "acme", Some(&p.pool)).await.ok();
    assert!(
        q["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["used"] == 0),
        "{q}"
    );
}
