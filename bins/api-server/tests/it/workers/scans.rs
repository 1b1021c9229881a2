//! The `vps.reservations` pass of the real reconciler-worker (contract 6):
//! reservations gone, capacity-short once per change of total, and a failing
//! provider retried with backoff without failing the pass.

use serde_json::{Value, json};

use crate::support::builders::{GrantBuilder, InstanceBuilder};
use crate::support::clock::{HOUR, MIN, SEC, T0};
use crate::support::fixtures::{
    gce_account, get_grant, instance_op_ok, platform_at_t0, reservations,
};
use crate::support::gce::Gce;
use crate::support::meter::{at, of_meter, q, usage, usage_all, usage_of_instance};
use crate::support::server::{ROOT_TOKEN, Server};
use crate::support::worker;

const SCAN: &str = "vps.reservations";

async fn reservation(s: &Server, account: &str, id: &str) -> Value {
    reservations(s, account)
        .await
        .into_iter()
        .find(|r| r["reservationId"] == id)
        .expect("reservation listed")
}

fn counts(stderr: &str) -> std::collections::BTreeMap<String, u64> {
    worker::pass_counts(stderr, SCAN).unwrap_or_else(|| panic!("no pass line in {stderr}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reservation_no_longer_reported_is_gone_and_its_grants_end_as_reservation_gone() {
    let (s, p) = platform_at_t0(4).await;
    let t = p.tenant_token.clone();
    let active = GrantBuilder::new(&p)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    let scheduled = GrantBuilder::new(&p)
        .term(T0 + 2 * HOUR, T0 + 4 * HOUR)
        .create(&s)
        .await;
    let x = InstanceBuilder::new(&p).create(&s).await;
    assert_eq!(x["placement"]["grantId"], active.as_str());
    let x = x["instanceId"].as_str().expect("id").to_owned();
    let y = InstanceBuilder::new(&p).create(&s).await;
    assert_eq!(y["placement"]["kind"], "reservation");
    let y = y["instanceId"].as_str().expect("id").to_owned();

    s.set_clock(T0 + 15 * MIN).await;
    p.gce.delete("res-a").await;
    let err = worker::once_logged(&s, &[SCAN]).await;
    let c = counts(&err);
    assert_eq!(c["accountsScanned"], 1, "{err}");
    assert_eq!(c["reservationsGone"], 1, "{err}");
    assert_eq!(c["grantsClosed"], 2, "{err}");

    let r = reservation(&s, &p.account, &p.reservation).await;
    assert_eq!(r["status"], "gone");
    assert_eq!(r["goneAt"], T0 + 15 * MIN);
    let a = get_grant(&s, &active).await;
    assert_eq!(a["state"], "ended");
    assert_eq!(a["reason"], "reservation-gone");
    assert_eq!(a["endsAt"], T0 + 15 * MIN);
    assert_eq!(a["endedAt"], T0 + 15 * MIN);
    let c = get_grant(&s, &scheduled).await;
    assert_eq!(c["state"], "cancelled");
    assert_eq!(c["reason"], "reservation-gone");
    assert_eq!(c["startsAt"], T0 + 2 * HOUR);
    assert_eq!(c["endsAt"], T0 + 4 * HOUR);
    assert_eq!(c["endedAt"], T0 + 15 * MIN);
    for id in [&x, &y] {
        assert_eq!(
            instance_op_ok(&s, &t, "acme", "get", id).await["placement"]["kind"],
            "ondemand"
        );
    }
    let ended = s.events_of(&t, "acme", "reservation-grant.ended").await;
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0]["data"]["grantId"], active.as_str());
    assert_eq!(ended[0]["data"]["reason"], "reservation-gone");
    assert_eq!(ended[0]["data"]["endsAt"], T0 + 15 * MIN);
    assert_eq!(ended[0]["occurredAt"], T0 + 15 * MIN);
    let cancelled = s.events_of(&t, "acme", "reservation-grant.cancelled").await;
    assert_eq!(cancelled.len(), 1);
    assert_eq!(cancelled[0]["data"]["grantId"], scheduled.as_str());
    assert_eq!(cancelled[0]["data"]["reason"], "reservation-gone");

    // Scanning again changes nothing and publishes nothing.
    s.set_clock(T0 + 20 * MIN).await;
    let err = worker::once_logged(&s, &[SCAN]).await;
    assert_eq!(counts(&err)["reservationsGone"], 0, "{err}");
    assert_eq!(counts(&err)["grantsClosed"], 0, "{err}");
    assert_eq!(
        reservation(&s, &p.account, &p.reservation).await["goneAt"],
        T0 + 15 * MIN
    );
    let evs = s.events(&t, "acme").await;
    assert_eq!(
        evs.iter()
            .filter(|e| e["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("reservation-grant.")))
            .count(),
        5,
        "created x2, active, ended, cancelled: {evs:?}"
    );

    // Billing: the grant up to the scan, its instance on-demand from then.
    s.set_clock(T0 + 2 * HOUR).await;
    worker::once(&s, &[]).await;
    assert_eq!(
        q(&usage(&s, &t, "acme", "vm.grant.slot.hours").await),
        at(&[(0, "0.250000")])
    );
    let rx = usage_of_instance(&s, &t, "acme", &x).await;
    assert_eq!(
        q(&of_meter(&rx, "vm.grant.usage.hours")),
        at(&[(0, "0.250000")])
    );
    assert_eq!(
        q(&of_meter(&rx, "vm.ondemand.hours")),
        at(&[(0, "0.750000"), (1, "1.000000")])
    );
    let ry = usage_of_instance(&s, &t, "acme", &y).await;
    assert_eq!(
        q(&of_meter(&ry, "vm.reserved.hours")),
        at(&[(0, "0.250000")])
    );
    assert_eq!(
        q(&of_meter(&ry, "vm.ondemand.hours")),
        at(&[(0, "0.750000"), (1, "1.000000")])
    );
    // New instances are on-demand: the pool has no usable reservation.
    assert_eq!(
        InstanceBuilder::new(&p).create(&s).await["placement"]["kind"],
        "ondemand"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn capacity_short_is_published_once_per_change_of_total() {
    let (s, p) = platform_at_t0(4).await;
    let t = p.tenant_token.clone();
    let g1 = GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    let g2 = GrantBuilder::new(&p)
        .slots(2)
        .term(T0 + HOUR, T0 + 5 * HOUR)
        .create(&s)
        .await;
    let mut ids = vec![g1.clone(), g2.clone()];
    ids.sort();
    let short = async || {
        s.events_of(ROOT_TOKEN, "root", "reservation-grant.capacity-short")
            .await
    };
    let data_ids = |e: &Value| -> Vec<String> {
        let mut v: Vec<String> = e["data"]["grantIds"]
            .as_array()
            .expect("grantIds")
            .iter()
            .map(|g| g.as_str().expect("id").to_owned())
            .collect();
        v.sort();
        v
    };

    // Same total, nothing to say.
    worker::once_logged(&s, &[SCAN]).await;
    assert!(short().await.is_empty());
    // 3 < 4 slots at the peak: one event, however many scans see it.
    s.set_clock(T0 + MIN).await;
    p.gce.put("res-a", 3, 0, "READY").await;
    let err = worker::once_logged(&s, &[SCAN]).await;
    assert_eq!(counts(&err)["capacityShort"], 1, "{err}");
    for _ in 0..2 {
        worker::once_logged(&s, &[SCAN]).await;
    }
    p.gce.put("res-a", 3, 1, "READY").await;
    worker::once_logged(&s, &[SCAN]).await;
    let evs = short().await;
    assert_eq!(evs.len(), 1, "{evs:?}");
    let e = &evs[0];
    assert_eq!(e["tenantId"], "root");
    assert_eq!(e["data"]["accountId"], p.account.as_str());
    assert_eq!(e["data"]["reservationId"], p.reservation.as_str());
    assert_eq!(e["data"]["total"], 3);
    assert_eq!(e["data"]["grantedSlots"], 4);
    assert_eq!(data_ids(e), ids);
    assert_eq!(e["occurredAt"], T0 + MIN);
    // A new total below the peak: one more.
    p.gce.put("res-a", 2, 0, "READY").await;
    worker::once_logged(&s, &[SCAN]).await;
    worker::once_logged(&s, &[SCAN]).await;
    let evs = short().await;
    assert_eq!(evs.len(), 2);
    assert_eq!(evs[1]["data"]["total"], 2);
    assert_eq!(evs[1]["data"]["grantedSlots"], 4);
    // Back to enough slots: nothing; short again: one more.
    p.gce.put("res-a", 4, 0, "READY").await;
    worker::once_logged(&s, &[SCAN]).await;
    assert_eq!(short().await.len(), 2);
    p.gce.put("res-a", 3, 0, "READY").await;
    worker::once_logged(&s, &[SCAN]).await;
    worker::once_logged(&s, &[SCAN]).await;
    let evs = short().await;
    assert_eq!(evs.len(), 3);
    assert_eq!(evs[2]["data"]["total"], 3);
    // The grantee is told nothing, and the grants keep billing.
    assert!(
        s.events_of(&t, "acme", "reservation-grant.capacity-short")
            .await
            .is_empty()
    );
    s.set_clock(T0 + 2 * HOUR).await;
    worker::once(&s, &["vps.grants"]).await;
    let slots = usage(&s, &t, "acme", "vm.grant.slot.hours").await;
    let of_g1 = |meter: &str| json!({ "grantId": g1, "meter": meter });
    assert_eq!(
        q(&usage_all(&s, &t, "acme", of_g1("vm.grant.slot.hours")).await),
        at(&[(0, "2.000000"), (1, "2.000000")])
    );
    assert_eq!(slots.len(), 3);
    // And are credited (contract 5.4) for what the last total, 3 from
    // T0+MIN, leaves out once g2 starts: 1 slot of 4, half of it g1's.
    assert_eq!(
        q(&usage_all(&s, &t, "acme", of_g1("vm.grant.deficit.hours")).await),
        at(&[(1, "0.500000")])
    );
    assert_eq!(get_grant(&s, &g1).await["state"], "active");
    assert_eq!(get_grant(&s, &g2).await["state"], "active");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_provider_changes_nothing_and_is_retried_with_backoff() {
    let (s, p) = platform_at_t0(4).await;
    // A second, healthy account is scanned whatever the first one does.
    let healthy = Gce::start().await;
    healthy.put("res-h", 2, 0, "READY").await;
    let other = gce_account(&s, &healthy).await;
    let err = worker::once_logged(&s, &[SCAN]).await;
    assert_eq!(counts(&err)["accountsScanned"], 2, "{err}");
    let before = reservation(&s, &p.account, &p.reservation).await;
    assert_eq!(before["lastScannedAt"], T0);

    // The provider fails once; a scan would otherwise find res-a gone and
    // the new res-z.
    let t1 = T0 + MIN;
    s.set_clock(t1).await;
    p.gce.delete("res-a").await;
    p.gce.put("res-z", 1, 0, "READY").await;
    p.gce.fail(1).await;
    let err = worker::once_logged(&s, &[SCAN]).await;
    let c = counts(&err);
    assert_eq!((c["accountsFailed"], c["accountsScanned"]), (1, 1), "{err}");
    assert!(err.contains("scan failed"), "{err}");
    let after = reservation(&s, &p.account, &p.reservation).await;
    assert_eq!(after, before, "a failed scan changes nothing");
    let listed = s
        .root(
            "providerAccounts/listReservations",
            json!({ "accountId": p.account }),
        )
        .await
        .ok();
    assert_eq!(listed["items"].as_array().expect("items").len(), 1);
    assert_eq!(
        reservation(&s, &other, &Gce::reservation_id("res-h")).await["lastScannedAt"],
        t1
    );

    // Until its retry time (10 s later) the account is skipped.
    for at in [t1, t1 + 10 * SEC - 1] {
        s.set_clock(at).await;
        let err = worker::once_logged(&s, &[SCAN]).await;
        let c = counts(&err);
        assert_eq!(
            (
                c["accountsBackingOff"],
                c["accountsScanned"],
                c["accountsFailed"]
            ),
            (1, 1, 0),
            "{err}"
        );
        assert_eq!(
            reservation(&s, &p.account, &p.reservation).await["status"],
            "ready"
        );
    }
    s.set_clock(t1 + 10 * SEC).await;
    let err = worker::once_logged(&s, &[SCAN]).await;
    let c = counts(&err);
    assert_eq!(
        (
            c["accountsBackingOff"],
            c["accountsScanned"],
            c["reservationsGone"],
            c["reservationsAppeared"]
        ),
        (0, 2, 1, 1),
        "{err}"
    );
    let gone = reservation(&s, &p.account, &p.reservation).await;
    assert_eq!(gone["status"], "gone");
    assert_eq!(gone["goneAt"], t1 + 10 * SEC);

    // Consecutive failures back off longer: 10 s, then 20 s.
    let t2 = t1 + HOUR;
    s.set_clock(t2).await;
    p.gce.put("res-y", 1, 0, "READY").await;
    p.gce.fail(2).await;
    let err = worker::once_logged(&s, &[SCAN]).await;
    assert_eq!(counts(&err)["accountsFailed"], 1, "{err}");
    s.set_clock(t2 + 10 * SEC).await;
    let err = worker::once_logged(&s, &[SCAN]).await;
    assert_eq!(counts(&err)["accountsFailed"], 1, "{err}");
    s.set_clock(t2 + 30 * SEC - 1).await;
    let err = worker::once_logged(&s, &[SCAN]).await;
    assert_eq!(counts(&err)["accountsBackingOff"], 1, "{err}");
    s.set_clock(t2 + 30 * SEC).await;
    let err = worker::once_logged(&s, &[SCAN]).await;
    let c = counts(&err);
    assert_eq!(
        (
            c["accountsBackingOff"],
            c["accountsFailed"],
            c["reservationsAppeared"]
        ),
        (0, 0, 1),
        "{err}"
    );
    // After a success the next failure starts over at 10 s.
    s.set_clock(t2 + HOUR).await;
    p.gce.fail(1).await;
    worker::once_logged(&s, &[SCAN]).await;
    s.set_clock(t2 + HOUR + 10 * SEC).await;
    let err = worker::once_logged(&s, &[SCAN]).await;
    assert_eq!(counts(&err)["accountsBackingOff"], 0, "{err}");
    assert_eq!(counts(&err)["accountsScanned"], 2, "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_scan_method_answers_unavailable_when_the_provider_fails() {
    let (s, p) = platform_at_t0(4).await;
    p.gce.delete("res-a").await;
    p.gce.fail(1).await;
    let a = s
        .root("providerAccounts/scan", json!({ "accountId": p.account }))
        .await;
    assert_eq!(a.err(503, "UNAVAILABLE")["reason"], "provider-error");
    assert_eq!(
        reservation(&s, &p.account, &p.reservation).await["status"],
        "ready"
    );
}
