//! Billing with the manual clock and the real `reconciler-worker --once`.

use crate::support::bodies::InstanceBody;
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::fixtures::{create_grant, get_grant_as, grant_body, platform_at_t0};
use crate::support::gce::FLAVOR;
use crate::support::meter::{q, usage};
use crate::support::worker;

#[tokio::test(flavor = "multi_thread")]
async fn committed_slots_bill_every_ended_hour_used_or_not() {
    let (s, p) = platform_at_t0(4).await;
    // 3 slots from 00:30 to 02:15, nobody uses them.
    let g = create_grant(
        &s,
        grant_body(&p, 3, T0 + 30 * MIN, T0 + 2 * HOUR + 15 * MIN, "g"),
    )
    .await
    .ok();
    let gid = g["grant"]["grantId"].as_str().expect("id").to_owned();
    // 01:10: only the first hour has ended.
    s.set_clock(T0 + HOUR + 10 * MIN).await;
    worker::once(&s, &["vps.grants"]).await;
    let recs = usage(&s, &p.tenant_token, "acme", "vm.grant.slot.hours").await;
    assert_eq!(q(&recs), [(T0, "1.500000".to_owned())]);
    let r = &recs[0];
    assert_eq!(r["unit"], "slot-hours");
    assert_eq!(r["periodEnd"], T0 + HOUR);
    assert_eq!(r["grantId"], gid.as_str());
    assert_eq!(r["tags"]["region"], "us-central1");
    assert_eq!(r["tags"]["poolId"], p.pool.as_str());
    assert_eq!(r["tags"]["provider"], "gce");
    assert_eq!(r["tags"]["reservationId"], p.reservation.as_str());
    // Nothing is written twice, and the rest comes once each hour has ended.
    worker::once(&s, &["vps.grants"]).await;
    s.set_clock(T0 + 5 * HOUR).await;
    worker::once(&s, &["vps.grants"]).await;
    worker::once(&s, &["vps.grants"]).await;
    let recs = usage(&s, &p.tenant_token, "acme", "vm.grant.slot.hours").await;
    assert_eq!(
        q(&recs),
        [
            (T0, "1.500000".to_owned()),
            (T0 + HOUR, "3.000000".to_owned()),
            (T0 + 2 * HOUR, "0.750000".to_owned())
        ]
    );
    let got = get_grant_as(&s, &p.tenant_token, "acme", &gid).await.ok();
    assert_eq!(got["grant"]["meteredThrough"], T0 + 2 * HOUR + 15 * MIN);
}

#[tokio::test(flavor = "multi_thread")]
async fn instances_in_the_grant_record_only_grant_usage_and_beyond_it_the_reserved_rate() {
    let (s, p) = platform_at_t0(4).await;
    create_grant(&s, grant_body(&p, 1, T0, T0 + 10 * HOUR, "g"))
        .await
        .ok();
    let t = &p.tenant_token;
    for key in ["a", "b"] {
        s.call(
            t,
            "instances/create",
            InstanceBody::new(&p.pool, key).tenant("acme").json(),
        )
        .await
        .ok();
    }
    s.set_clock(T0 + HOUR + 20 * MIN).await;
    worker::once(&s, &[]).await;
    let grant_usage = usage(&s, t, "acme", "vm.grant.usage.hours").await;
    let reserved = usage(&s, t, "acme", "vm.reserved.hours").await;
    let ondemand = usage(&s, t, "acme", "vm.ondemand.hours").await;
    assert_eq!(q(&grant_usage), [(T0, "1.000000".to_owned())]);
    assert_eq!(q(&reserved), [(T0, "1.000000".to_owned())]);
    assert!(ondemand.is_empty());
    assert_ne!(grant_usage[0]["instanceId"], reserved[0]["instanceId"]);
    assert_eq!(grant_usage[0]["tags"]["flavor"], FLAVOR);
    assert!(grant_usage[0]["tags"]["grantId"].is_string());
    assert_eq!(reserved[0]["tags"]["reservationId"], p.reservation.as_str());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gone_reservation_bills_its_instances_on_demand_from_the_scan() {
    let (s, p) = platform_at_t0(4).await;
    let t = &p.tenant_token;
    s.call(
        t,
        "instances/create",
        InstanceBody::new(&p.pool, "a").tenant("acme").json(),
    )
    .await
    .ok();
    s.set_clock(T0 + 15 * MIN).await;
    p.gce.delete("res-a").await;
    worker::once(&s, &["vps.reservations"]).await;
    s.set_clock(T0 + HOUR).await;
    worker::once(&s, &[]).await;
    assert_eq!(
        q(&usage(&s, t, "acme", "vm.reserved.hours").await),
        [(T0, "0.250000".to_owned())]
    );
    assert_eq!(
        q(&usage(&s, t, "acme", "vm.ondemand.hours").await),
        [(T0, "0.750000".to_owned())]
    );
}
