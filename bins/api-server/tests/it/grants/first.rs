//! A grantee never pays the reservation rate while its own grant has an idle
//! slot (contract 4 and 5.3, r2): placement fills grants first across every
//! candidate reservation of the pool, and a grant slot freed by a delete is
//! refilled at that instant from the grantee's instances on ordinary slots,
//! oldest first. Billed end to end with the real worker.

use std::time::Duration;

use futures::future::join_all;
use serde_json::{Value, json};

use crate::support::bodies::{GrantBody, InstanceBody};
use crate::support::builders::{GrantBuilder, InstanceBuilder};
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::db::hold_reservation;
use crate::support::fixtures::{
    Platform, bind, create_grant_ok, get_instance, grant_id, id, instance_op_ok, offer,
    platform_at_t0, project, scan, set_quota,
};
use crate::support::gce::{FLAVOR, Gce};
use crate::support::meter::{at, of_meter, q, round_micros, total, usage, usage_of_instance};
use crate::support::server::{ROOT, ROOT_TOKEN, Server};
use crate::support::worker;

/// A second reservation `res-b` of `total` slots bound to the platform's pool.
async fn second_reservation(s: &Server, p: &Platform, total: i64) -> String {
    p.gce.put("res-b", total, 0, "READY").await;
    scan(s, &p.account).await;
    let res_b = Gce::reservation_id("res-b");
    bind(s, &p.account, &res_b, &p.pool).await.ok();
    res_b
}

fn records_of(records: &[Value], meter: &str) -> Vec<(i64, String)> {
    q(&of_meter(records, meter))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_on_a_later_candidate_is_filled_before_an_ordinary_slot_of_an_earlier_one() {
    let (s, p) = platform_at_t0(2).await;
    let t = p.tenant_token.clone();
    let res_b = second_reservation(&s, &p, 2).await;
    // acme's grant is on res-b; res-a comes first in id order and has room.
    let g = GrantBuilder::new(&p)
        .reservation(&res_b)
        .term(T0, T0 + 2 * HOUR)
        .create(&s)
        .await;
    let x = InstanceBuilder::new(&p).create(&s).await;
    assert_eq!(
        x["placement"],
        json!({ "kind": "grant", "grantId": g, "reservationId": res_b })
    );
    // The grant is full: the next one takes the first ordinary slot (res-a).
    let y = InstanceBuilder::new(&p).create(&s).await;
    assert_eq!(
        y["placement"],
        json!({ "kind": "reservation", "reservationId": p.reservation })
    );
    // Billed once: two hours in the grant, no reservation-rate hour for x.
    s.set_clock(T0 + 2 * HOUR).await;
    worker::once(&s, &[]).await;
    let xr = usage_of_instance(&s, &t, "acme", &id(&x)).await;
    assert_eq!(
        records_of(&xr, "vm.grant.usage.hours"),
        at(&[(0, "1.000000"), (1, "1.000000")])
    );
    assert!(of_meter(&xr, "vm.reserved.hours").is_empty(), "{xr:?}");
    let slot = usage(&s, &t, "acme", "vm.grant.slot.hours").await;
    assert_eq!(q(&slot), at(&[(0, "1.000000"), (1, "1.000000")]));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slot_freed_by_a_delete_is_refilled_at_that_instant_and_billed_split_there() {
    let (s, p) = platform_at_t0(4).await;
    let t = p.tenant_token.clone();
    let g = GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + 3 * HOUR)
        .create(&s)
        .await;
    let a = id(&InstanceBuilder::new(&p).create(&s).await);
    let b = id(&InstanceBuilder::new(&p).create(&s).await);
    s.set_clock(T0 + MIN).await;
    let c = InstanceBuilder::new(&p).create(&s).await;
    assert_eq!(c["placement"]["kind"], "reservation");
    let c = id(&c);

    // a is deleted 80 minutes in: c moves into the grant at that instant.
    let freed = T0 + 80 * MIN;
    s.set_clock(freed).await;
    instance_op_ok(&s, &t, "acme", "delete", &a).await;
    assert_eq!(
        get_instance(&s, &t, "acme", &c).await["placement"],
        json!({ "kind": "grant", "grantId": g, "reservationId": p.reservation })
    );
    assert_eq!(
        get_instance(&s, &t, "acme", &b).await["placement"]["grantId"],
        g.as_str()
    );

    s.set_clock(T0 + 3 * HOUR).await;
    worker::once(&s, &[]).await;
    let cr = usage_of_instance(&s, &t, "acme", &c).await;
    // Reservation rate from its creation to the refill, grant from then on,
    // the hour of the refill split exactly at 80 minutes.
    assert_eq!(
        records_of(&cr, "vm.reserved.hours"),
        at(&[(0, "0.983333"), (1, "0.333334")])
    );
    assert_eq!(
        records_of(&cr, "vm.grant.usage.hours"),
        at(&[(1, "0.666667"), (2, "1.000000")])
    );
    let reserved_total = total(&of_meter(&cr, "vm.reserved.hours"));
    assert_eq!(reserved_total, round_micros(i128::from(79 * MIN)));
    // The grant's two slots bill three hours, used or not; nothing twice.
    let slot = usage(&s, &t, "acme", "vm.grant.slot.hours").await;
    assert_eq!(
        q(&slot),
        at(&[(0, "2.000000"), (1, "2.000000"), (2, "2.000000")])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_oldest_overflow_is_refilled_first_and_only_up_to_the_freed_slots() {
    let (s, p) = platform_at_t0(4).await;
    let t = p.tenant_token.clone();
    let g = GrantBuilder::new(&p)
        .term(T0, T0 + 3 * HOUR)
        .create(&s)
        .await;
    let a = id(&InstanceBuilder::new(&p).create(&s).await);
    s.set_clock(T0 + MIN).await;
    let older = id(&InstanceBuilder::new(&p).create(&s).await);
    s.set_clock(T0 + 2 * MIN).await;
    let newer = id(&InstanceBuilder::new(&p).create(&s).await);
    s.set_clock(T0 + 10 * MIN).await;
    instance_op_ok(&s, &t, "acme", "delete", &a).await;
    assert_eq!(
        get_instance(&s, &t, "acme", &older).await["placement"]["grantId"],
        g.as_str()
    );
    assert_eq!(
        get_instance(&s, &t, "acme", &newer).await["placement"]["kind"],
        "reservation"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_project_grant_refills_only_from_its_project() {
    let (s, p) = platform_at_t0(4).await;
    let t = p.tenant_token.clone();
    let prj = project(&s, &t, "acme", "web").await;
    let body = GrantBody::on(&p, 1)
        .term(T0, T0 + 3 * HOUR)
        .key("gp")
        .project(&prj)
        .json();
    let g = grant_id(&create_grant_ok(&s, body).await);
    let in_project = |key: &str| {
        json!({ "tenantId": "acme", "poolId": p.pool, "flavor": FLAVOR,
                "projectId": prj, "idempotencyKey": key })
    };
    let a = s.call(&t, "instances/create", in_project("a")).await.ok()["instance"].clone();
    assert_eq!(a["placement"]["grantId"], g.as_str());
    // An older instance outside the project, then a newer one in it.
    s.set_clock(T0 + MIN).await;
    let outside = id(&InstanceBuilder::new(&p).create(&s).await);
    s.set_clock(T0 + 2 * MIN).await;
    let inside = s.call(&t, "instances/create", in_project("b")).await.ok()["instance"].clone();
    assert_eq!(inside["placement"]["kind"], "reservation");
    s.set_clock(T0 + 10 * MIN).await;
    instance_op_ok(&s, &t, "acme", "delete", &id(&a)).await;
    assert_eq!(
        get_instance(&s, &t, "acme", &id(&inside)).await["placement"]["grantId"],
        g.as_str()
    );
    assert_eq!(
        get_instance(&s, &t, "acme", &outside).await["placement"]["kind"],
        "reservation"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn billing_none_never_refills_and_a_stop_keeps_the_slot_and_refills_nothing() {
    let (s, p) = platform_at_t0(4).await;
    // Root as grantee, with an unbilled instance waiting on an ordinary slot.
    set_quota(&s, "root", &p.pool, "memoryGib", 1000).await;
    let g = GrantBuilder::new(&p)
        .grantee("root")
        .term(T0, T0 + 3 * HOUR)
        .create(&s)
        .await;
    let a = id(&InstanceBuilder::new(&p)
        .by(ROOT, ROOT_TOKEN)
        .create(&s)
        .await);
    let unbilled = InstanceBuilder::new(&p)
        .by(ROOT, ROOT_TOKEN)
        .key("none-1")
        .billing("none")
        .create(&s)
        .await;
    assert_eq!(unbilled["placement"]["kind"], "reservation");
    s.set_clock(T0 + MIN).await;
    let waiting = id(&InstanceBuilder::new(&p)
        .by(ROOT, ROOT_TOKEN)
        .create(&s)
        .await);
    // The grant is full (a); waiting is on an ordinary slot.
    assert_eq!(
        get_instance(&s, ROOT_TOKEN, "root", &waiting).await["placement"]["kind"],
        "reservation"
    );

    // A stop keeps a's slot: nothing moves.
    s.set_clock(T0 + 5 * MIN).await;
    instance_op_ok(&s, ROOT_TOKEN, "root", "stop", &a).await;
    assert_eq!(
        get_instance(&s, ROOT_TOKEN, "root", &a).await["placement"]["grantId"],
        g.as_str()
    );
    assert_eq!(
        get_instance(&s, ROOT_TOKEN, "root", &waiting).await["placement"]["kind"],
        "reservation"
    );

    // Deleting the stopped a frees the slot: the standard instance is
    // refilled, the older unbilled one never is.
    s.set_clock(T0 + 10 * MIN).await;
    instance_op_ok(&s, ROOT_TOKEN, "root", "delete", &a).await;
    assert_eq!(
        get_instance(&s, ROOT_TOKEN, "root", &waiting).await["placement"]["grantId"],
        g.as_str()
    );
    assert_eq!(
        get_instance(&s, ROOT_TOKEN, "root", &id(&unbilled)).await["placement"]["kind"],
        "reservation"
    );
    // With only the unbilled one left outside, a freed slot stays idle.
    s.set_clock(T0 + 20 * MIN).await;
    instance_op_ok(&s, ROOT_TOKEN, "root", "delete", &waiting).await;
    assert_eq!(
        get_instance(&s, ROOT_TOKEN, "root", &id(&unbilled)).await["placement"]["kind"],
        "reservation"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_over_two_reservations_never_deadlock_or_over_fill() {
    let (s, p) = platform_at_t0(10).await;
    let res_b = second_reservation(&s, &p, 10).await;
    let globex = s.tenant("globex").await;
    let quotas = json!({ "instances": 40, "vcpus": 400, "memoryGib": 1000 });
    offer(&s, &p.pool, "globex", quotas).await;
    set_quota(&s, "acme", &p.pool, "instances", 40).await;
    set_quota(&s, "acme", &p.pool, "vcpus", 400).await;
    // Grants on both reservations for both tenants: every decision locks both.
    let ga = GrantBuilder::new(&p)
        .slots(3)
        .term(T0, T0 + 5 * HOUR)
        .create(&s)
        .await;
    let gb = GrantBuilder::new(&p)
        .reservation(&res_b)
        .grantee("globex")
        .slots(3)
        .term(T0, T0 + 5 * HOUR)
        .create(&s)
        .await;
    let gc = GrantBuilder::new(&p)
        .reservation(&res_b)
        .slots(2)
        .term(T0, T0 + 5 * HOUR)
        .create(&s)
        .await;
    let tokens = [(p.tenant_token.clone(), "acme"), (globex.clone(), "globex")];
    let creates = (0..32).map(|i| {
        let (token, tenant) = tokens[i % 2].clone();
        let s = &s;
        let pool = p.pool.clone();
        async move {
            s.call(
                &token,
                "instances/create",
                InstanceBody::new(&pool, &format!("c-{i}"))
                    .tenant(tenant)
                    .json(),
            )
            .await
        }
    });
    let answers = tokio::time::timeout(Duration::from_secs(60), join_all(creates))
        .await
        .expect("every create answered within 60 s (no deadlock)");
    let mut ok = 0;
    for a in &answers {
        match a.status {
            200 => ok += 1,
            409 => assert_eq!(a.code(), "CAPACITY_UNAVAILABLE", "{}", a.body),
            other => panic!("unexpected answer {other}: {}", a.body),
        }
    }
    // 20 slots in all: exactly 20 fit.
    assert_eq!(ok, 20, "{answers:?}");
    let placements: Vec<Value> = answers
        .iter()
        .filter(|a| a.status == 200)
        .map(|a| a.body["instance"]["placement"].clone())
        .collect();
    let count = |f: &dyn Fn(&Value) -> bool| placements.iter().filter(|v| f(v)).count();
    assert_eq!(count(&|v| v["reservationId"] == p.reservation.as_str()), 10);
    assert_eq!(count(&|v| v["reservationId"] == res_b.as_str()), 10);
    // Every grant is full before anyone took the ordinary slots it could
    // have used: each grant holds exactly its slots.
    for (g, slots) in [(&ga, 3), (&gb, 3), (&gc, 2)] {
        assert_eq!(count(&|v| v["grantId"] == g.as_str()), slots, "{g}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_placement_looks_past_the_first_ordinary_slot_only_for_the_tenants_grants() {
    use diesel_async::RunQueryDsl;
    let (s, p) = platform_at_t0(2).await;
    let t = p.tenant_token.clone();
    let res_b = second_reservation(&s, &p, 2).await;
    let globex = s.tenant("globex").await;
    let quotas = json!({ "instances": 4, "vcpus": 40, "memoryGib": 100 });
    offer(&s, &p.pool, "globex", quotas).await;
    let g = GrantBuilder::new(&p)
        .reservation(&res_b)
        .term(T0, T0 + HOUR)
        .create(&s)
        .await;
    // Another transaction holds res-b's row.
    let mut holder = hold_reservation(&s, &p.account, &res_b).await;
    // globex has no grant there: res-a's ordinary slot decides, at once.
    let x = tokio::time::timeout(
        Duration::from_secs(10),
        InstanceBuilder::new(&p).by("globex", &globex).create(&s),
    )
    .await
    .expect("placed without waiting for res-b");
    assert_eq!(x["placement"]["reservationId"], p.reservation.as_str());
    // acme's grant is on res-b: its placement must look there, and waits.
    // (The same idempotency key below: the abandoned request may still
    // complete once the lock is gone.)
    let body = json!({ "tenantId": "acme", "poolId": p.pool, "flavor": FLAVOR,
                       "idempotencyKey": "acme-wait" });
    let waiting = tokio::time::timeout(
        Duration::from_millis(1500),
        s.call(&t, "instances/create", body.clone()),
    )
    .await;
    assert!(waiting.is_err(), "acme's placement did not wait for res-b");
    diesel::sql_query("ROLLBACK")
        .execute(&mut holder)
        .await
        .expect("rollback");
    let y = s.call(&t, "instances/create", body).await.ok();
    assert_eq!(y["instance"]["placement"]["grantId"], g.as_str());
}
