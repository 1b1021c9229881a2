//! `providerAccounts.delete` and grants (contract 3.5, source document
//! "deleting the account removes its ended and cancelled grants, once
//! `vps.grants` has metered every committed slot-hour of the ended ones").

use serde_json::{Value, json};

use crate::support::builders::{GrantBuilder, InstanceBuilder};
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::fixtures::{
    Platform, end_grant, get_grant, get_grant_as, instance_op, instance_op_ok, platform_at_t0,
    second_account, unbind,
};
use crate::support::gce::Gce;
use crate::support::meter::{
    at, of_meter, q, total, usage, usage_all, usage_everyone, usage_of_instance,
};
use crate::support::server::{Answer, Server};
use crate::support::worker;

/// A second root account on its own fake with reservation `res-b` bound to
/// the platform's pool (the pool belongs to the first account, so the second
/// has no pool built on it). The platform's own reservation is unbound so
/// `res-b` is the pool's only candidate.
struct Doomed {
    _gce: Gce,
    account: String,
    reservation: String,
}

async fn doomed_account(s: &Server, p: &Platform) -> Doomed {
    unbind(s, &p.account, &p.reservation).await.ok();
    let (gce, account, reservation) = second_account(s, &p.pool, 4).await;
    Doomed {
        _gce: gce,
        account,
        reservation,
    }
}

async fn delete(s: &Server, account: &str) -> Answer {
    s.root("providerAccounts/delete", json!({ "accountId": account }))
        .await
}

fn detail_grant_ids(details: &Value) -> Vec<String> {
    let mut v: Vec<String> = details["grantIds"]
        .as_array()
        .expect("details.grantIds")
        .iter()
        .map(|g| g.as_str().expect("id").to_owned())
        .collect();
    v.sort();
    v
}

/// `delete` of `account`, refused (`INVALID_STATE`) for `grant` alone.
async fn refused_for(s: &Server, account: &str, grant: &str) -> Answer {
    let a = delete(s, account).await;
    assert_eq!(
        detail_grant_ids(a.err(409, "INVALID_STATE")),
        vec![grant.to_owned()]
    );
    a
}

#[tokio::test(flavor = "multi_thread")]
async fn delete_waits_for_ended_grants_slot_hours_then_removes_them_and_sends_instances_on_demand()
{
    let (s, p) = platform_at_t0(4).await;
    let t = p.tenant_token.clone();
    let d = doomed_account(&s, &p).await;
    let g = GrantBuilder::on(&d.account, &d.reservation)
        .grantee("acme")
        .term(T0, T0 + 90 * MIN)
        .create(&s)
        .await;
    let sched = GrantBuilder::on(&d.account, &d.reservation)
        .grantee("acme")
        .term(T0 + 5 * HOUR, T0 + 6 * HOUR)
        .create(&s)
        .await;
    let x = InstanceBuilder::new(&p).create(&s).await;
    assert_eq!(x["placement"]["grantId"], g.as_str());
    let y = InstanceBuilder::new(&p).create(&s).await;
    assert_eq!(y["placement"]["kind"], "reservation");
    assert_eq!(y["placement"]["reservationId"], d.reservation.as_str());
    let (x, y) = (
        x["instanceId"].as_str().expect("id").to_owned(),
        y["instanceId"].as_str().expect("id").to_owned(),
    );

    // Scheduled and active grants refuse the delete.
    s.set_clock(T0 + 30 * MIN).await;
    let a = delete(&s, &d.account).await;
    let mut both = vec![g.clone(), sched.clone()];
    both.sort();
    assert_eq!(detail_grant_ids(a.err(409, "INVALID_STATE")), both);
    let cancelled = end_grant(&s, &d.account, &sched).await.ok();
    assert_eq!(cancelled["grant"]["state"], "cancelled");
    refused_for(&s, &d.account, &g).await;

    // Ended at 01:30 but not metered: refused until vps.grants has run past 02:00.
    s.set_clock(T0 + 100 * MIN).await;
    refused_for(&s, &d.account, &g).await;
    worker::once(&s, &["vps.grants"]).await;
    assert_eq!(get_grant(&s, &g).await["meteredThrough"], T0 + HOUR);
    refused_for(&s, &d.account, &g).await;
    s.set_clock(T0 + 2 * HOUR).await;
    refused_for(&s, &d.account, &g).await;
    worker::once(&s, &["vps.grants"]).await;
    assert_eq!(get_grant(&s, &g).await["meteredThrough"], T0 + 90 * MIN);
    s.set_clock(T0 + 2 * HOUR + 10 * MIN).await;
    let ok = delete(&s, &d.account).await.ok();
    assert_eq!(ok, json!({ "accountId": d.account, "deleted": true }));

    // The account, its reservations and its ended and cancelled grants are gone...
    for id in [&g, &sched] {
        s.root("reservationGrants/get", json!({ "grantId": id }))
            .await
            .err(404, "NOT_FOUND");
        get_grant_as(&s, &t, "acme", id).await.err(404, "NOT_FOUND");
    }
    let listed = s
        .root("reservationGrants/list", json!({ "all": true }))
        .await
        .ok();
    assert_eq!(listed["items"], json!([]));
    s.root("providerAccounts/get", json!({ "accountId": d.account }))
        .await
        .err(404, "NOT_FOUND");
    s.root(
        "providerAccounts/listReservations",
        json!({ "accountId": d.account }),
    )
    .await
    .err(404, "NOT_FOUND");
    // ...but the usage records stay.
    assert_eq!(
        q(&usage_all(
            &s,
            &t,
            "acme",
            json!({ "grantId": g, "meter": "vm.grant.slot.hours" })
        )
        .await),
        at(&[(0, "1.000000"), (1, "0.500000")])
    );

    // Its instances are on-demand from the delete on.
    for id in [&x, &y] {
        let i = instance_op_ok(&s, &t, "acme", "get", id).await;
        assert_eq!(i["placement"]["kind"], "ondemand", "{i}");
        assert!(i["placement"].get("reservationId").is_none(), "{i}");
    }
    s.set_clock(T0 + 4 * HOUR).await;
    worker::once(&s, &[]).await;
    let rx = usage_of_instance(&s, &t, "acme", &x).await;
    assert_eq!(
        q(&of_meter(&rx, "vm.grant.usage.hours")),
        at(&[(0, "1.000000"), (1, "0.500000")])
    );
    assert_eq!(
        q(&of_meter(&rx, "vm.reserved.hours")),
        at(&[(1, "0.500000"), (2, "0.166667")])
    );
    assert_eq!(
        q(&of_meter(&rx, "vm.ondemand.hours")),
        at(&[(2, "0.833333"), (3, "1.000000")])
    );
    let ry = usage_of_instance(&s, &t, "acme", &y).await;
    assert_eq!(
        q(&of_meter(&ry, "vm.reserved.hours")),
        at(&[(0, "1.000000"), (1, "1.000000"), (2, "0.166667")])
    );
    assert_eq!(
        q(&of_meter(&ry, "vm.ondemand.hours")),
        at(&[(2, "0.833333"), (3, "1.000000")])
    );
    for r in of_meter(&ry, "vm.ondemand.hours") {
        assert_eq!(r["tags"]["region"], "us-central1");
        assert_eq!(r["tags"]["poolId"], p.pool.as_str());
    }
    // Nothing about the grant was published twice.
    let evs: Vec<Value> = s
        .events(&t, "acme")
        .await
        .into_iter()
        .filter(|e| e["data"]["grantId"] == g.as_str())
        .collect();
    let types: Vec<&str> = evs
        .iter()
        .map(|e| e["type"].as_str().expect("type"))
        .collect();
    assert_eq!(
        types,
        [
            "reservation-grant.created",
            "reservation-grant.active",
            "reservation-grant.ended"
        ]
    );
    // Nothing is left on the pool: a new instance is on-demand.
    let z = InstanceBuilder::new(&p).create(&s).await;
    assert_eq!(z["placement"]["kind"], "ondemand");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_account_whose_grants_were_only_cancelled_is_deleted_at_once() {
    let (s, p) = platform_at_t0(4).await;
    let d = doomed_account(&s, &p).await;
    let g = GrantBuilder::on(&d.account, &d.reservation)
        .grantee("acme")
        .slots(2)
        .term(T0 + HOUR, T0 + 3 * HOUR)
        .create(&s)
        .await;
    end_grant(&s, &d.account, &g).await.ok();
    delete(&s, &d.account).await.ok();
    s.root("reservationGrants/get", json!({ "grantId": g }))
        .await
        .err(404, "NOT_FOUND");
    s.set_clock(T0 + 4 * HOUR).await;
    worker::once(&s, &[]).await;
    assert!(usage_everyone(&s).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_outlives_its_account_once_the_accounts_grants_are_metered() {
    let (s, p) = platform_at_t0(4).await;
    let t = p.tenant_token.clone();
    let g = GrantBuilder::new(&p).term(T0, T0 + HOUR).create(&s).await;
    let x = InstanceBuilder::new(&p).create(&s).await;
    assert_eq!(x["placement"]["grantId"], g.as_str());
    let x = x["instanceId"].as_str().expect("id").to_owned();

    // The pool built on the account does not block it; the live grant does.
    s.set_clock(T0 + 30 * MIN).await;
    let a = refused_for(&s, &p.account, &g).await;
    assert!(
        a.body["error"]["details"].get("poolIds").is_none(),
        "{}",
        a.body
    );
    // Over and metered: the account goes, the pool stays with its accountId.
    s.set_clock(T0 + 2 * HOUR).await;
    worker::once(&s, &["vps.grants"]).await;
    assert_eq!(
        delete(&s, &p.account).await.ok(),
        json!({ "accountId": p.account, "deleted": true })
    );
    s.root("providerAccounts/get", json!({ "accountId": p.account }))
        .await
        .err(404, "NOT_FOUND");
    let pool = s.root("pools/get", json!({ "poolId": p.pool })).await.ok();
    assert_eq!(pool["pool"]["accountId"], p.account.as_str());
    let listed = s.root("pools/list", json!({})).await.ok();
    assert!(
        listed["items"]
            .as_array()
            .expect("items")
            .iter()
            .any(|i| i["poolId"] == p.pool.as_str()),
        "{listed}"
    );
    // Its instances are on-demand from the delete on, new ones too, and the
    // pool can still be offered.
    let got = instance_op(&s, &t, "acme", "get", &x).await.ok();
    assert_eq!(got["instance"]["placement"], json!({ "kind": "ondemand" }));
    let z = InstanceBuilder::new(&p).create(&s).await;
    assert_eq!(z["placement"]["kind"], "ondemand");
    s.tenant("globex").await;
    s.root(
        "pools/offer",
        json!({ "poolId": p.pool, "offerTenantId": "globex", "quotas": { "instances": 1 } }),
    )
    .await
    .ok();
}

/// Meters the grants of the server's database up to `now` without settling
/// any timeline first, as a `vps.grants` replica whose settlement skipped a
/// reservation (locked by another transaction) would.
async fn meter_without_settling(s: &Server, now: i64) {
    let pool = storage::db::pool(s.db.url(), 1).expect("pool");
    let mut conn = pool.get().await.expect("connection");
    while storage::ops::metering::meter_grant_batch(&mut conn, now)
        .await
        .expect("meter grants")
        .more
    {}
}

#[tokio::test(flavor = "multi_thread")]
async fn delete_applies_a_due_term_end_first_with_its_event_once_and_exact_meters() {
    let (s, p) = platform_at_t0(4).await;
    let t = p.tenant_token.clone();
    let g = GrantBuilder::new(&p)
        .term(T0, T0 + 90 * MIN)
        .create(&s)
        .await;
    let x = InstanceBuilder::new(&p).create(&s).await;
    assert_eq!(x["placement"]["grantId"], g.as_str());
    let x = x["instanceId"].as_str().expect("id").to_owned();

    // The term ended at T0 + 90 min; its slot-hours are metered, but nothing
    // has applied the end yet when the account is deleted at T0 + 3 h.
    let at = T0 + 3 * HOUR;
    s.set_clock(at).await;
    meter_without_settling(&s, at).await;
    assert!(
        s.events_of(&t, "acme", "reservation-grant.ended")
            .await
            .is_empty()
    );
    delete(&s, &p.account).await.ok();

    // The end took effect at its own instant, before the delete, once.
    let ended = s.events_of(&t, "acme", "reservation-grant.ended").await;
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!(ended[0]["occurredAt"], T0 + 90 * MIN);
    assert_eq!(ended[0]["data"]["grantId"], g.as_str());
    assert_eq!(ended[0]["data"]["reason"], "term-over");
    // x: in the grant to its end, then on an ordinary slot, then on-demand.
    s.set_clock(at + 2 * HOUR).await;
    worker::once(&s, &[]).await;
    worker::once(&s, &[]).await;
    assert_eq!(
        s.events_of(&t, "acme", "reservation-grant.ended")
            .await
            .len(),
        1
    );
    let records = usage_of_instance(&s, &t, "acme", &x).await;
    let by_meter = |m: &str| total(&of_meter(&records, m));
    assert_eq!(by_meter("vm.grant.usage.hours"), 1_500_000);
    assert_eq!(by_meter("vm.reserved.hours"), 1_500_000);
    assert_eq!(by_meter("vm.ondemand.hours"), 2_000_000);
    let slot = usage(&s, &t, "acme", "vm.grant.slot.hours").await;
    assert_eq!(total(&slot), 1_500_000);
}
