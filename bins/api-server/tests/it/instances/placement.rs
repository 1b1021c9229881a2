//! Placement of instances on a capacity reservation (seed-reservation-grants.md
//! paragraph 2 and the stopped-instance paragraph; contract 3.7 and 4): grants
//! first, then ordinary slots; granted slots are never anyone else's; project
//! grants; physical fullness; `billing: "none"`; on-demand; stop and start.

use serde_json::json;

use crate::support::bodies::{GrantBody, InstanceBody};
use crate::support::builders::{GrantBuilder, InstanceBuilder};
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::db::{seg_grant, seg_off, seg_res, segments};
use crate::support::fixtures::{
    bind, create_grant_ok, create_pool, gce_account, get_instance, grant_id, id, in_grant,
    instance_op, instance_op_ok, list_instances, placement, placement_of, plain, platform_at_t0,
    project, root_can_use, scan, tenant_with_pool, unbind, used,
};
use crate::support::gce::Gce;
use crate::support::server::Server;

#[tokio::test(flavor = "multi_thread")]
async fn the_grantee_enters_its_grant_while_its_instances_leave_a_slot_free_then_an_ordinary_slot()
{
    let (s, p) = platform_at_t0(5).await;
    let t = &p.tenant_token;
    let g = GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;

    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    assert_eq!(placement(&a), in_grant(&g));
    assert_eq!(a["placement"]["reservationId"], p.reservation.as_str());
    let b = InstanceBuilder::new(&p).key("b").create(&s).await;
    assert_eq!(placement(&b), in_grant(&g));
    // The grant is full: ordinary slots (5 - 2 granted = 3 of them).
    let mut ordinary = Vec::new();
    for key in ["c", "d", "e"] {
        let i = InstanceBuilder::new(&p).key(key).create(&s).await;
        ordinary.push(id(&i));
        assert_eq!(placement(&i), plain("reservation"), "{key}");
        assert_eq!(i["placement"]["reservationId"], p.reservation.as_str());
        assert!(i["placement"].get("grantId").is_none());
    }
    let full = InstanceBuilder::new(&p).key("f").send(&s).await;
    let d = full.err(409, "CAPACITY_UNAVAILABLE");
    assert_eq!(
        d,
        &json!({ "reservationId": p.reservation, "total": 5, "inUse": 5, "available": 0 })
    );

    // Deleting a grant instance frees a slot of the grant: the oldest
    // instance on an ordinary slot moves into it at once (contract 5.3
    // refill), and the next instance takes the ordinary slot it left.
    instance_op_ok(&s, t, "acme", "delete", &id(&a)).await;
    // All three were created at the same instant: oldest is then the
    // lowest instance id.
    ordinary.sort();
    for (k, instance) in ordinary.iter().enumerate() {
        let now = get_instance(&s, t, "acme", instance).await;
        let expected = if k == 0 {
            in_grant(&g)
        } else {
            plain("reservation")
        };
        assert_eq!(placement(&now), expected, "{instance}");
    }
    let g2 = InstanceBuilder::new(&p).key("g").create(&s).await;
    assert_eq!(placement(&g2), plain("reservation"));
}

#[tokio::test(flavor = "multi_thread")]
async fn others_share_total_minus_in_use_minus_unused_granted_slots() {
    let (s, p) = platform_at_t0(6).await;
    let globex = tenant_with_pool(&s, "globex", &p.pool).await;
    let g = GrantBuilder::new(&p)
        .slots(3)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    // acme uses one of its three granted slots.
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    assert_eq!(placement(&a), in_grant(&g));

    // Others get 6 - 1 in use - 2 unused granted slots = 3 ordinary slots.
    for key in ["x", "y", "z"] {
        let i = InstanceBuilder::new(&p)
            .by("globex", &globex)
            .key(key)
            .create(&s)
            .await;
        assert_eq!(placement(&i), plain("reservation"), "{key}");
    }
    let refused = InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("w")
        .send(&s)
        .await;
    assert_eq!(
        refused.err(409, "CAPACITY_UNAVAILABLE"),
        &json!({ "reservationId": p.reservation, "total": 6, "inUse": 4, "available": 0 })
    );
    // The idle granted slots are still acme's.
    for key in ["b", "c"] {
        let i = InstanceBuilder::new(&p).key(key).create(&s).await;
        assert_eq!(placement(&i), in_grant(&g), "{key}");
    }
    // Now the reservation is physically full for everyone.
    InstanceBuilder::new(&p)
        .key("d")
        .send(&s)
        .await
        .err(409, "CAPACITY_UNAVAILABLE");
    // An ordinary slot freed by globex is shared again, by anyone.
    let x = list_instances(&s, &globex, "globex", None).await;
    instance_op_ok(&s, &globex, "globex", "delete", &id(&x[0])).await;
    let d = InstanceBuilder::new(&p).key("d").create(&s).await;
    assert_eq!(placement(&d), plain("reservation"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_grant_slot_is_not_shared_even_while_the_grantee_holds_none() {
    let (s, p) = platform_at_t0(2).await;
    let globex = tenant_with_pool(&s, "globex", &p.pool).await;
    GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + HOUR)
        .create(&s)
        .await;
    // Every slot is granted to acme and idle: nobody else gets one.
    let r = InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("x")
        .send(&s)
        .await;
    assert_eq!(
        r.err(409, "CAPACITY_UNAVAILABLE"),
        &json!({ "reservationId": p.reservation, "total": 2, "inUse": 0, "available": 0 })
    );
    root_can_use(&s, &p.pool).await;
    s.root("instances/create", InstanceBody::new(&p.pool, "r").json())
        .await
        .err(409, "CAPACITY_UNAVAILABLE");
    // Once the term is over, the slots are ordinary again.
    s.set_clock(T0 + HOUR).await;
    let x = InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("x")
        .create(&s)
        .await;
    assert_eq!(placement(&x), plain("reservation"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_with_a_project_serves_only_that_projects_instances() {
    let (s, p) = platform_at_t0(6).await;
    let t = &p.tenant_token;
    let web = project(&s, t, "acme", "web").await;
    let batch = project(&s, t, "acme", "batch").await;
    let body = GrantBody::on(&p, 1)
        .term(T0, T0 + 10 * HOUR)
        .key("gw")
        .project(&web)
        .json();
    let gw = grant_id(&create_grant_ok(&s, body).await);

    // Another project's instance, and one without a project: ordinary slots,
    // although the web grant has a free slot.
    let b = InstanceBuilder::new(&p)
        .key("b")
        .project(&batch)
        .create(&s)
        .await;
    assert_eq!(placement(&b), plain("reservation"));
    let n = InstanceBuilder::new(&p).key("n").create(&s).await;
    assert_eq!(placement(&n), plain("reservation"));
    // The web project's instance enters it.
    let w = InstanceBuilder::new(&p)
        .key("w")
        .project(&web)
        .create(&s)
        .await;
    assert_eq!(placement(&w), in_grant(&gw));
    assert_eq!(w["projectId"], web.as_str());
    // Full: the next web instance takes an ordinary slot.
    let w2 = InstanceBuilder::new(&p)
        .key("w2")
        .project(&web)
        .create(&s)
        .await;
    assert_eq!(placement(&w2), plain("reservation"));

    // With a tenant-wide grant too (created once the ordinary instances are
    // gone, so it takes nothing in), the project-scoped grant is preferred
    // for its project, and the tenant-wide one serves every project.
    for i in [&b, &n, &w2, &w] {
        instance_op_ok(&s, t, "acme", "delete", &id(i)).await;
    }
    let wide = GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    let w3 = InstanceBuilder::new(&p)
        .key("w3")
        .project(&web)
        .create(&s)
        .await;
    assert_eq!(placement(&w3), in_grant(&gw));
    let b2 = InstanceBuilder::new(&p)
        .key("b2")
        .project(&batch)
        .create(&s)
        .await;
    assert_eq!(placement(&b2), in_grant(&wide));
    let w4 = InstanceBuilder::new(&p)
        .key("w4")
        .project(&web)
        .create(&s)
        .await;
    assert_eq!(placement(&w4), in_grant(&wide));
    let w5 = InstanceBuilder::new(&p)
        .key("w5")
        .project(&web)
        .create(&s)
        .await;
    assert_eq!(placement(&w5), plain("reservation"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_physically_full_reservation_refuses_everyone_the_grantee_included() {
    let (s, p) = platform_at_t0(3).await;
    let t = &p.tenant_token;
    let globex = tenant_with_pool(&s, "globex", &p.pool).await;
    let g = GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    root_can_use(&s, &p.pool).await;

    // The provider reports every slot in use (VMs that are not ours).
    p.gce.put("res-a", 3, 3, "READY").await;
    scan(&s, &p.account).await;
    let expected =
        json!({ "reservationId": p.reservation, "total": 3, "inUse": 3, "available": 0 });
    let refused = InstanceBuilder::new(&p).key("a").send(&s).await;
    assert_eq!(refused.err(409, "CAPACITY_UNAVAILABLE"), &expected);
    let refused = InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("x")
        .send(&s)
        .await;
    assert_eq!(refused.err(409, "CAPACITY_UNAVAILABLE"), &expected);
    let refused = s
        .root(
            "instances/create",
            InstanceBody::new(&p.pool, "r").billing("none").json(),
        )
        .await;
    assert_eq!(refused.err(409, "CAPACITY_UNAVAILABLE"), &expected);
    assert!(list_instances(&s, t, "acme", None).await.is_empty());

    // The provider's count drops: the grantee gets into its grant again.
    p.gce.put("res-a", 3, 0, "READY").await;
    scan(&s, &p.account).await;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    assert_eq!(placement(&a), in_grant(&g));
    // Full again by the provider's count, which includes VMs that are not
    // ours: `inUse` is the larger of the two counts, and `available` is
    // bounded by the physical room (ordinary slots: 3 - 2 granted = 1).
    p.gce.put("res-a", 3, 3, "READY").await;
    scan(&s, &p.account).await;
    let refused = InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("x")
        .send(&s)
        .await;
    assert_eq!(refused.err(409, "CAPACITY_UNAVAILABLE"), &expected);
    let refused = InstanceBuilder::new(&p).key("b").send(&s).await;
    assert_eq!(refused.err(409, "CAPACITY_UNAVAILABLE"), &expected);
    assert_eq!(list_instances(&s, t, "acme", None).await.len(), 1);
    assert_eq!(used(&s, t, "acme", &p.pool, "instances").await, Some(1));
}

#[tokio::test(flavor = "multi_thread")]
async fn billing_none_is_root_only_never_enters_a_grant_and_takes_an_ordinary_slot() {
    let (s, p) = platform_at_t0(4).await;
    let t = &p.tenant_token;
    root_can_use(&s, &p.pool).await;
    // Root is a grantee like any tenant.
    let g = GrantBuilder::new(&p)
        .grantee("root")
        .slots(2)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;

    // A tenant may not ask for billing "none".
    InstanceBuilder::new(&p)
        .key("n")
        .billing("none")
        .send(&s)
        .await
        .err(403, "ACCESS_DENIED");
    assert!(list_instances(&s, t, "acme", None).await.is_empty());
    assert_eq!(used(&s, t, "acme", &p.pool, "instances").await, Some(0));

    // Root's unbilled instance takes an ordinary slot although root's grant
    // has free slots.
    let none = s
        .root(
            "instances/create",
            InstanceBody::new(&p.pool, "n1").billing("none").json(),
        )
        .await
        .ok()["instance"]
        .clone();
    assert_eq!(none["billing"], "none");
    assert_eq!(placement(&none), plain("reservation"));
    assert_eq!(none["placement"]["reservationId"], p.reservation.as_str());
    // It bills nothing: its segment is of kind "none".
    let segs = segments(&s, &id(&none)).await;
    assert_eq!(segs.len(), 1, "{segs:?}");
    assert_eq!(
        (segs[0].kind.as_str(), segs[0].from_ms, segs[0].to_ms),
        ("none", T0, None)
    );
    // Root's billed instance enters root's grant.
    let std = s
        .root("instances/create", InstanceBody::new(&p.pool, "s1").json())
        .await
        .ok()["instance"]
        .clone();
    assert_eq!(std["billing"], "standard");
    assert_eq!(placement(&std), in_grant(&g));

    // The unbilled instance counts as running outside grants: 4 - 2 granted
    // - 1 = 1 ordinary slot left, which acme takes.
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    assert_eq!(placement(&a), plain("reservation"));
    let b = InstanceBuilder::new(&p).key("b").send(&s).await;
    assert_eq!(
        b.err(409, "CAPACITY_UNAVAILABLE"),
        &json!({ "reservationId": p.reservation, "total": 4, "inUse": 3, "available": 0 })
    );
    // A second unbilled instance is refused too: root's grant still has a
    // free slot, but an unbilled instance never enters a grant.
    s.root(
        "instances/create",
        InstanceBody::new(&p.pool, "n2").billing("none").json(),
    )
    .await
    .err(409, "CAPACITY_UNAVAILABLE");
    // Stopped and started again, the unbilled instance still avoids the grant.
    let stopped = s
        .root("instances/stop", json!({ "instanceId": id(&none) }))
        .await
        .ok();
    assert_eq!(placement(&stopped["instance"]), plain("none"));
    let started = s
        .root("instances/start", json!({ "instanceId": id(&none) }))
        .await
        .ok();
    assert_eq!(placement(&started["instance"]), plain("reservation"));
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_bound_ready_reservation_an_instance_is_ondemand() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let gce = Gce::start().await;
    let account = gce_account(&s, &gce).await;
    let pool = create_pool(&s, &account).await;
    let t = tenant_with_pool(&s, "acme", &pool).await;

    // No reservation at all.
    let a = InstanceBuilder::on(&pool, "acme", &t)
        .key("a")
        .create(&s)
        .await;
    assert_eq!(placement(&a), plain("ondemand"));
    assert!(a["placement"].get("reservationId").is_none());

    // A reservation known but not bound to the pool.
    gce.put("res-b", 4, 0, "READY").await;
    scan(&s, &account).await;
    let b = InstanceBuilder::on(&pool, "acme", &t)
        .key("b")
        .create(&s)
        .await;
    assert_eq!(placement(&b), plain("ondemand"));

    // Bound, but not ready.
    gce.put("res-b", 4, 0, "CREATING").await;
    scan(&s, &account).await;
    let rid = Gce::reservation_id("res-b");
    bind(&s, &account, &rid, &pool).await.ok();
    let c = InstanceBuilder::on(&pool, "acme", &t)
        .key("c")
        .create(&s)
        .await;
    assert_eq!(placement(&c), plain("ondemand"));

    // Ready: new instances take its slots; on-demand ones stay where they are.
    gce.put("res-b", 4, 0, "READY").await;
    scan(&s, &account).await;
    let d = InstanceBuilder::on(&pool, "acme", &t)
        .key("d")
        .create(&s)
        .await;
    assert_eq!(placement(&d), plain("reservation"));
    assert_eq!(d["placement"]["reservationId"], rid.as_str());
    assert_eq!(
        placement_of(&s, &t, "acme", &id(&a)).await,
        plain("ondemand")
    );

    // Unbound again: on-demand; the instance already on it keeps its slot.
    unbind(&s, &account, &rid).await.ok();
    let e = InstanceBuilder::on(&pool, "acme", &t)
        .key("e")
        .create(&s)
        .await;
    assert_eq!(placement(&e), plain("ondemand"));
    assert_eq!(
        placement_of(&s, &t, "acme", &id(&d)).await,
        plain("reservation")
    );

    // Stopping an on-demand instance releases its placement; starting places
    // it again.
    s.set_clock(T0 + MIN).await;
    let stopped = instance_op_ok(&s, &t, "acme", "stop", &id(&a)).await;
    assert_eq!(
        (stopped["state"].as_str(), placement(&stopped)),
        (Some("stopped"), plain("none"))
    );
    s.set_clock(T0 + 2 * MIN).await;
    let started = instance_op_ok(&s, &t, "acme", "start", &id(&a)).await;
    assert_eq!(
        (started["state"].as_str(), placement(&started)),
        (Some("running"), plain("ondemand"))
    );
    assert_eq!(
        segments(&s, &id(&a)).await,
        vec![
            seg_off(T0, Some(T0 + MIN), "ondemand", true),
            seg_off(T0 + MIN, Some(T0 + 2 * MIN), "none", false),
            seg_off(T0 + 2 * MIN, None, "ondemand", true),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_instance_keeps_its_grant_slot_from_everyone_and_start_returns_it_there() {
    let (s, p) = platform_at_t0(2).await;
    let t = &p.tenant_token;
    let globex = tenant_with_pool(&s, "globex", &p.pool).await;
    let g = GrantBuilder::new(&p)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    assert_eq!(placement(&a), in_grant(&g));

    s.set_clock(T0 + MIN).await;
    let stopped = instance_op_ok(&s, t, "acme", "stop", &id(&a)).await;
    assert_eq!(stopped["state"], "stopped");
    assert_eq!(placement(&stopped), in_grant(&g));
    assert_eq!(
        stopped["placement"]["reservationId"],
        p.reservation.as_str()
    );

    // Others get the one ordinary slot, never the slot the grant pays for.
    let x = InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("x")
        .create(&s)
        .await;
    assert_eq!(placement(&x), plain("reservation"));
    let expected =
        json!({ "reservationId": p.reservation, "total": 2, "inUse": 1, "available": 0 });
    let y = InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("y")
        .send(&s)
        .await;
    assert_eq!(y.err(409, "CAPACITY_UNAVAILABLE"), &expected);
    // Nor does the grantee's new instance: the stopped one holds the slot.
    let b = InstanceBuilder::new(&p).key("b").send(&s).await;
    assert_eq!(b.err(409, "CAPACITY_UNAVAILABLE"), &expected);

    s.set_clock(T0 + 2 * MIN).await;
    let started = instance_op_ok(&s, t, "acme", "start", &id(&a)).await;
    assert_eq!(started["state"], "running");
    assert_eq!(placement(&started), in_grant(&g));
    assert_eq!(
        segments(&s, &id(&a)).await,
        vec![
            seg_grant(T0, Some(T0 + MIN), true, &g, &p.reservation),
            seg_grant(T0 + MIN, Some(T0 + 2 * MIN), false, &g, &p.reservation),
            seg_grant(T0 + 2 * MIN, None, true, &g, &p.reservation),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn stopping_an_instance_on_an_ordinary_slot_releases_it_and_start_places_it_again() {
    let (s, p) = platform_at_t0(1).await;
    let t = &p.tenant_token;
    let globex = tenant_with_pool(&s, "globex", &p.pool).await;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    assert_eq!(placement(&a), plain("reservation"));

    s.set_clock(T0 + MIN).await;
    let stopped = instance_op_ok(&s, t, "acme", "stop", &id(&a)).await;
    assert_eq!(stopped["state"], "stopped");
    assert_eq!(placement(&stopped), plain("none"));
    assert!(stopped["placement"].get("reservationId").is_none());

    // The freed slot is anyone's.
    let x = InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("x")
        .create(&s)
        .await;
    assert_eq!(placement(&x), plain("reservation"));
    // Starting needs a slot again: none is free.
    s.set_clock(T0 + 2 * MIN).await;
    let refused = instance_op(&s, t, "acme", "start", &id(&a)).await;
    assert_eq!(
        refused.err(409, "CAPACITY_UNAVAILABLE"),
        &json!({ "reservationId": p.reservation, "total": 1, "inUse": 1, "available": 0 })
    );
    let still = get_instance(&s, t, "acme", &id(&a)).await;
    assert_eq!(
        (still["state"].as_str(), placement(&still)),
        (Some("stopped"), plain("none"))
    );

    s.set_clock(T0 + 3 * MIN).await;
    instance_op_ok(&s, &globex, "globex", "delete", &id(&x)).await;
    s.set_clock(T0 + 4 * MIN).await;
    let started = instance_op_ok(&s, t, "acme", "start", &id(&a)).await;
    assert_eq!(started["state"], "running");
    assert_eq!(placement(&started), plain("reservation"));
    assert_eq!(
        segments(&s, &id(&a)).await,
        vec![
            seg_res(T0, Some(T0 + MIN), true, &p.reservation),
            seg_off(T0 + MIN, Some(T0 + 4 * MIN), "none", false),
            seg_res(T0 + 4 * MIN, None, true, &p.reservation),
        ]
    );
    // globex's deleted instance: its history ends at the deletion.
    assert_eq!(
        segments(&s, &id(&x)).await,
        vec![seg_res(T0 + MIN, Some(T0 + 3 * MIN), true, &p.reservation)]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn grants_come_first_across_candidates_then_ordinary_slots_in_id_order() {
    let (s, p) = platform_at_t0(1).await;
    p.gce.put("res-b", 2, 0, "READY").await;
    scan(&s, &p.account).await;
    let res_b = Gce::reservation_id("res-b");
    bind(&s, &p.account, &res_b, &p.pool).await.ok();
    // acme has a grant on res-b only.
    let body = GrantBody::on(&p, 1)
        .term(T0, T0 + HOUR)
        .key("gb")
        .reservation(&res_b)
        .json();
    let gb = s.root("reservationGrants/create", body).await.ok()["grant"]["grantId"]
        .as_str()
        .expect("grantId")
        .to_owned();

    // Grants first across every candidate (contract 4, r2): acme's grant on
    // res-b takes the instance although res-a comes first and has room.
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    assert_eq!(placement(&a), in_grant(&gb));
    assert_eq!(a["placement"]["reservationId"], res_b.as_str());
    // The grant is full: ordinary slots in reservation id order, res-a first.
    let b = InstanceBuilder::new(&p).key("b").create(&s).await;
    assert_eq!(placement(&b), plain("reservation"));
    assert_eq!(b["placement"]["reservationId"], p.reservation.as_str());
    let c = InstanceBuilder::new(&p).key("c").create(&s).await;
    assert_eq!(placement(&c), plain("reservation"));
    assert_eq!(c["placement"]["reservationId"], res_b.as_str());
    // Both refuse: the details are res-a's.
    let d = InstanceBuilder::new(&p).key("d").send(&s).await;
    assert_eq!(
        d.err(409, "CAPACITY_UNAVAILABLE"),
        &json!({ "reservationId": p.reservation, "total": 1, "inUse": 1, "available": 0 })
    );
}
