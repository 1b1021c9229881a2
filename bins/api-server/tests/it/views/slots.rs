//! The slot accounts of a reservation (contract 3.10, 4) in
//! `listReservations`, `scan`, `bindReservation` and `unbindReservation`,
//! at the server's now, for a scenario worked out by hand: computed from the
//! grants' terms whether or not the reservation has been settled, and
//! without settling it.

use serde_json::{Value, json};

use crate::support::builders::{GrantBuilder, InstanceBuilder, PlatformBuilder};
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::fixtures::{
    Platform, bind, get_grant, id, instance_op_ok, placement_of, plain, platform_at_t0,
    reservations, scan, tenant_with_pool, unbind,
};
use crate::support::gce::Gce;
use crate::support::server::Server;

/// `(grantedSlots, heldInGrants, ordinaryInUse, ordinaryFree, physicalInUse)`.
fn accounts(r: &Value) -> [i64; 5] {
    [
        "grantedSlots",
        "heldInGrants",
        "ordinaryInUse",
        "ordinaryFree",
        "physicalInUse",
    ]
    .map(|k| r[k].as_i64().unwrap_or_else(|| panic!("{k} in {r}")))
}

/// The reservation `reservation` among `items`.
fn one<'a>(items: &'a [Value], reservation: &str) -> &'a Value {
    items
        .iter()
        .find(|r| r["reservationId"] == reservation)
        .unwrap_or_else(|| panic!("{reservation} not in {items:?}"))
}

/// The accounts of the platform's reservation in `listReservations`.
async fn listed(s: &Server, p: &Platform) -> [i64; 5] {
    accounts(one(&reservations(s, &p.account).await, &p.reservation))
}

#[tokio::test(flavor = "multi_thread")]
async fn slot_accounts_follow_the_grants_terms_and_the_instances_at_now() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    // 6 slots; globex holds a grant of 1 from now, acme one of 2 from T0+1h.
    let p = PlatformBuilder::new().slots(6).build(&s).await;
    let t = &p.tenant_token;
    let globex = tenant_with_pool(&s, "globex", &p.pool).await;
    let g_acme = GrantBuilder::new(&p)
        .slots(2)
        .term(T0 + HOUR, T0 + 10 * HOUR)
        .create(&s)
        .await;
    GrantBuilder::new(&p)
        .grantee("globex")
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    // Nothing runs yet: globex's slot is granted, the rest free.
    assert_eq!(listed(&s, &p).await, [1, 0, 0, 5, 0]);

    // T0+10m: acme runs three on ordinary slots, globex one in its grant.
    s.set_clock(T0 + 10 * MIN).await;
    let a1 = id(&InstanceBuilder::new(&p).key("a1").create(&s).await);
    let a2 = id(&InstanceBuilder::new(&p).key("a2").create(&s).await);
    let a3 = id(&InstanceBuilder::new(&p).key("a3").create(&s).await);
    InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("x1")
        .create(&s)
        .await;
    // granted 1, held 1, ordinary 3, free 6 - 1 - 3 = 2, physical 4.
    assert_eq!(listed(&s, &p).await, [1, 1, 3, 2, 4]);

    // T0+2h: acme's grant started at T0+1h and nothing has settled the
    // reservation since. The figures are those at now all the same: it took
    // in a1 and a2 (oldest first, 2 slots): granted 3, held 3, ordinary 1
    // (a3), free 6 - 3 - 1 = 2, physical 4.
    s.set_clock(T0 + 2 * HOUR).await;
    assert_eq!(listed(&s, &p).await, [3, 3, 1, 2, 4]);
    // Reading settled nothing: the stored placement is still the old one.
    assert_eq!(placement_of(&s, t, "acme", &a1).await, plain("reservation"));
    assert_eq!(get_grant(&s, &g_acme).await["state"], "active");

    // A stop settles: a1 keeps its grant slot stopped. held 3 still,
    // physical 3 (a2, a3 and globex's run).
    instance_op_ok(&s, t, "acme", "stop", &a1).await;
    assert_eq!(listed(&s, &p).await, [3, 3, 1, 2, 3]);

    // The provider reports 5 in use: physical is the larger, and the scan's
    // answer carries the accounts too; ordinaryFree does not change.
    p.gce.put("res-a", 6, 5, "READY").await;
    let scanned = scan(&s, &p.account).await;
    let r = one(scanned["items"].as_array().expect("items"), &p.reservation);
    assert_eq!(r["providerInUse"], 5);
    assert_eq!(accounts(r), [3, 3, 1, 2, 5]);

    // T0+10h30m: both grants ended at T0+10h, unsettled. a1 (stopped) lost
    // its slot, a2 and globex's went to ordinary slots: granted 0, held 0,
    // ordinary 3 (a2, a3, x1), free 3, physical max(3, 5).
    s.set_clock(T0 + 10 * HOUR + 30 * MIN).await;
    assert_eq!(listed(&s, &p).await, [0, 0, 3, 3, 5]);
    assert_eq!(
        placement_of(&s, t, "acme", &a2).await,
        ("grant".into(), Some(g_acme))
    );
    assert_eq!(placement_of(&s, t, "acme", &a3).await, plain("reservation"));

    // unbind and bind answer the reservation with its accounts.
    let unbound = unbind(&s, &p.account, &p.reservation).await.ok();
    assert!(unbound["reservation"].get("poolId").is_none());
    assert_eq!(accounts(&unbound["reservation"]), [0, 0, 3, 3, 5]);
    let bound = bind(&s, &p.account, &p.reservation, &p.pool).await.ok();
    assert_eq!(bound["reservation"]["poolId"], json!(p.pool));
    assert_eq!(accounts(&bound["reservation"]), [0, 0, 3, 3, 5]);
    let again = bind(&s, &p.account, &p.reservation, &p.pool).await.ok();
    assert_eq!(accounts(&again["reservation"]), [0, 0, 3, 3, 5]);

    // A reservation nothing uses: all of it is free.
    p.gce.put("res-c", 3, 0, "READY").await;
    scan(&s, &p.account).await;
    let res_c = Gce::reservation_id("res-c");
    let fresh = bind(&s, &p.account, &res_c, &p.pool).await.ok();
    assert_eq!(accounts(&fresh["reservation"]), [0, 0, 0, 3, 0]);
    let all = reservations(&s, &p.account).await;
    assert_eq!(all.len(), 2);
    assert_eq!(accounts(one(&all, &res_c)), [0, 0, 0, 3, 0]);
    assert_eq!(accounts(one(&all, &p.reservation)), [0, 0, 3, 3, 5]);
}

#[tokio::test(flavor = "multi_thread")]
async fn ordinary_free_is_floored_at_zero_when_the_provider_shrinks_the_reservation() {
    let (s, p) = platform_at_t0(4).await;
    GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + 5 * HOUR)
        .create(&s)
        .await;
    for key in ["a", "b", "c", "d"] {
        InstanceBuilder::new(&p).key(key).create(&s).await;
    }
    // 2 in the grant, 2 on ordinary slots: nothing free.
    let listed = reservations(&s, &p.account).await;
    assert_eq!(accounts(one(&listed, &p.reservation)), [2, 2, 2, 0, 4]);
    // The provider now reports 3 slots: 3 - 2 - 2 is floored at 0.
    p.gce.put("res-a", 3, 3, "READY").await;
    let scanned = scan(&s, &p.account).await;
    let r = one(scanned["items"].as_array().expect("items"), &p.reservation);
    assert_eq!(r["total"], 3);
    assert_eq!(accounts(r), [2, 2, 2, 0, 4]);
}
