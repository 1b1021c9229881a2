//! reservationGrants over HTTP with the fake GCE and the manual clock.

use serde_json::json;

use crate::support::clock::{HOUR, T0};
use crate::support::fixtures::{
    create_grant, end_grant, get_grant_as, grant_body, list_grants, platform_at_t0, scan,
};

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_is_scheduled_then_active_then_ended_with_its_events() {
    let (s, p) = platform_at_t0(4).await;
    let g = create_grant(&s, grant_body(&p, 2, T0 + HOUR, T0 + 3 * HOUR, "g1"))
        .await
        .ok();
    let grant = &g["grant"];
    assert_eq!(grant["state"], "scheduled");
    assert_eq!(grant["slots"], 2);
    assert_eq!(grant["tenantId"], "acme");
    assert_eq!(grant["poolId"], p.pool.as_str());
    assert_eq!(grant["meteredThrough"], T0 + HOUR);
    let id = grant["grantId"].as_str().unwrap().to_owned();

    // The truth at now, whether or not anything settled it.
    s.set_clock(T0 + HOUR).await;
    let got = get_grant_as(&s, &p.tenant_token, "acme", &id).await.ok();
    assert_eq!(got["grant"]["state"], "active");
    s.set_clock(T0 + 3 * HOUR).await;
    let got = get_grant_as(&s, &p.tenant_token, "acme", &id).await.ok();
    assert_eq!(got["grant"]["state"], "ended");
    assert_eq!(got["grant"]["reason"], "term-over");
    assert_eq!(got["grant"]["endedAt"], T0 + 3 * HOUR);

    // Settlement (here by a later create on the reservation) publishes each transition once.
    create_grant(&s, grant_body(&p, 1, T0 + 3 * HOUR, T0 + 4 * HOUR, "g2"))
        .await
        .ok();
    let types: Vec<String> = s
        .events(&p.tenant_token, "acme")
        .await
        .iter()
        .filter(|e| e["data"]["grantId"] == id.as_str())
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        types,
        [
            "reservation-grant.created",
            "reservation-grant.active",
            "reservation-grant.ended"
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn capacity_is_the_peak_overlap_of_non_cancelled_grants() {
    let (s, p) = platform_at_t0(4).await;
    create_grant(&s, grant_body(&p, 3, T0, T0 + 2 * HOUR, "a"))
        .await
        .ok();
    create_grant(&s, grant_body(&p, 1, T0 + HOUR, T0 + 3 * HOUR, "b"))
        .await
        .ok();
    // [T0+H, T0+2H) already holds 4.
    let r = create_grant(&s, grant_body(&p, 1, T0 + HOUR, T0 + HOUR + 1, "c")).await;
    let d = r.err(409, "CAPACITY_UNAVAILABLE");
    assert_eq!(d["total"], 4);
    assert_eq!(d["granted"], 4);
    // After the first grant's term there is room for 3.
    create_grant(&s, grant_body(&p, 3, T0 + 2 * HOUR, T0 + 5 * HOUR, "d"))
        .await
        .ok();
}

#[tokio::test(flavor = "multi_thread")]
async fn ending_an_active_grant_sets_ends_at_to_now_and_a_scheduled_one_is_cancelled() {
    let (s, p) = platform_at_t0(4).await;
    let a = create_grant(&s, grant_body(&p, 1, T0, T0 + 5 * HOUR, "a"))
        .await
        .ok();
    let b = create_grant(&s, grant_body(&p, 1, T0 + 2 * HOUR, T0 + 5 * HOUR, "b"))
        .await
        .ok();
    let a_id = a["grant"]["grantId"].as_str().unwrap();
    let b_id = b["grant"]["grantId"].as_str().unwrap();
    assert_eq!(a["grant"]["state"], "active");
    s.set_clock(T0 + HOUR + 17).await;
    let ended = end_grant(&s, &p.account, a_id).await.ok();
    assert_eq!(ended["grant"]["state"], "ended");
    assert_eq!(ended["grant"]["reason"], "ended");
    assert_eq!(ended["grant"]["endsAt"], T0 + HOUR + 17);
    let cancelled = end_grant(&s, &p.account, b_id).await.ok();
    assert_eq!(cancelled["grant"]["state"], "cancelled");
    assert_eq!(cancelled["grant"]["startsAt"], T0 + 2 * HOUR);
    assert_eq!(cancelled["grant"]["endsAt"], T0 + 5 * HOUR);
    assert_eq!(cancelled["grant"]["endedAt"], T0 + HOUR + 17);
    // Ending again returns them unchanged.
    s.set_clock(T0 + 2 * HOUR).await;
    let again = end_grant(&s, &p.account, a_id).await.ok();
    assert_eq!(again["grant"], ended["grant"]);
    let evs = s.events(&p.tenant_token, "acme").await;
    let ended_events: Vec<_> = evs
        .iter()
        .filter(|e| e["type"] == "reservation-grant.ended")
        .collect();
    assert_eq!(ended_events.len(), 1);
    assert_eq!(ended_events[0]["data"]["reason"], "ended");
    assert_eq!(ended_events[0]["data"]["endsAt"], T0 + HOUR + 17);
    let cancelled_events: Vec<_> = evs
        .iter()
        .filter(|e| e["type"] == "reservation-grant.cancelled")
        .collect();
    assert_eq!(cancelled_events.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gone_reservation_ends_and_cancels_its_grants() {
    let (s, p) = platform_at_t0(4).await;
    create_grant(&s, grant_body(&p, 1, T0, T0 + 5 * HOUR, "a"))
        .await
        .ok();
    create_grant(&s, grant_body(&p, 1, T0 + 2 * HOUR, T0 + 5 * HOUR, "b"))
        .await
        .ok();
    s.set_clock(T0 + 30 * 60_000).await;
    p.gce.delete("res-a").await;
    let scanned = scan(&s, &p.account).await;
    assert_eq!(scanned["items"][0]["status"], "gone");
    assert_eq!(scanned["items"][0]["goneAt"], T0 + 30 * 60_000);
    let list = list_grants(&s, &p.tenant_token, "acme", None).await.ok();
    let states: Vec<(&str, &str)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["state"].as_str().unwrap(), g["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        [
            ("cancelled", "reservation-gone"),
            ("ended", "reservation-gone")
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_provider_call_changes_nothing() {
    let (s, p) = platform_at_t0(4).await;
    let before = s
        .root(
            "providerAccounts/listReservations",
            json!({ "accountId": p.account }),
        )
        .await
        .ok();
    p.gce.delete("res-a").await;
    p.gce.fail(1).await;
    s.set_clock(T0 + 1000).await;
    let r = s
        .root("providerAccounts/scan", json!({ "accountId": p.account }))
        .await;
    assert_eq!(r.err(503, "UNAVAILABLE")["reason"], "provider-error");
    let after = s
        .root(
            "providerAccounts/listReservations",
            json!({ "accountId": p.account }),
        )
        .await
        .ok();
    assert_eq!(before, after);
}
