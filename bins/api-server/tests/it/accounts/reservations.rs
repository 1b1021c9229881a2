//! providerAccounts around reservations (contract 3.5, 7): listReservations,
//! scan, bind/unbind, delete, config secrets, and the capacity-short event
//! (seed-reservation-grants.md).

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::support::bodies::GrantBody;
use crate::support::calls::{end_grant_as, list_reservations_as, scan_as};
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::fixtures::{
    bind, create_grant, create_grant_ok, create_pool, end_grant, gce_account, get_grant_as,
    grant_body, grant_id, items, list_grants, no_such, platform_at_t0, reservations, scan,
    second_account, unbind,
};
use crate::support::gce::{FLAVOR, Gce};
use crate::support::server::{ROOT_TOKEN, Server, of_type, rand_suffix};
use crate::support::worker;

const EU_ZONE: &str = "europe-west4-b";
const GPU: &str = "a2-highgpu-1g";

/// Creates a root pool in `region` with one flavor; returns its id.
async fn pool_in(s: &Server, account: &str, region: &str, flavor: &str) -> String {
    let v = s
        .root(
            "pools/create",
            json!({
                "name": format!("{region} {flavor}"),
                "region": region,
                "provider": "gce",
                "accountId": account,
                "flavors": [{ "name": flavor, "vcpus": 4, "memoryGib": 16, "gpus": 0 }],
                "idempotencyKey": format!("pool-{}", rand_suffix()),
            }),
        )
        .await
        .ok();
    v["pool"]["poolId"].as_str().expect("poolId").to_owned()
}

fn find<'a>(items: &'a [Value], reservation: &str) -> &'a Value {
    items
        .iter()
        .find(|r| r["reservationId"] == reservation)
        .unwrap_or_else(|| panic!("{reservation} not in {items:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn list_reservations_shows_every_field() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let fake = Gce::start().await;
    fake.put("res-a", 4, 1, "READY").await;
    fake.put_in(EU_ZONE, "res-eu", 2, 0, GPU, "CREATING").await;
    let account = gce_account(&s, &fake).await;
    // Nothing is known before a scan.
    assert!(reservations(&s, &account).await.is_empty());

    let scanned = items(&scan(&s, &account).await);
    let a_id = Gce::reservation_id("res-a");
    let eu_id = Gce::reservation_in(EU_ZONE, "res-eu");
    assert_eq!(scanned.len(), 2);
    assert_eq!(
        find(&scanned, &a_id),
        &json!({
            "accountId": account, "reservationId": a_id, "region": "us-central1",
            "zone": "us-central1-a", "flavor": FLAVOR, "total": 4, "providerInUse": 1,
            "status": "ready", "lastScannedAt": T0,
            "grantedSlots": 0, "heldInGrants": 0, "ordinaryInUse": 0, "ordinaryFree": 4,
            "physicalInUse": 1,
        })
    );
    assert_eq!(
        find(&scanned, &eu_id),
        &json!({
            "accountId": account, "reservationId": eu_id, "region": "europe-west4",
            "zone": EU_ZONE, "flavor": GPU, "total": 2, "providerInUse": 0,
            "status": "not-ready", "lastScannedAt": T0,
            "grantedSlots": 0, "heldInGrants": 0, "ordinaryInUse": 0, "ordinaryFree": 2,
            "physicalInUse": 0,
        })
    );
    assert_eq!(reservations(&s, &account).await, scanned);

    // Bound, it names its pool.
    let pool = create_pool(&s, &account).await;
    let bound = bind(&s, &account, &a_id, &pool).await.ok();
    assert_eq!(bound["reservation"]["poolId"], pool.as_str());
    let listed = reservations(&s, &account).await;
    assert_eq!(find(&listed, &a_id)["poolId"], pool.as_str());
    assert!(find(&listed, &eu_id).get("poolId").is_none());

    // Gone, it says since when.
    s.set_clock(T0 + MIN).await;
    fake.delete_in(EU_ZONE, "res-eu").await;
    scan(&s, &account).await;
    let listed = reservations(&s, &account).await;
    let eu = find(&listed, &eu_id);
    assert_eq!(eu["status"], "gone");
    assert_eq!(eu["goneAt"], T0 + MIN);
    assert_eq!(
        keys(eu),
        set(&[
            "accountId",
            "reservationId",
            "region",
            "zone",
            "flavor",
            "total",
            "providerInUse",
            "status",
            "lastScannedAt",
            "goneAt",
            "grantedSlots",
            "heldInGrants",
            "ordinaryInUse",
            "ordinaryFree",
            "physicalInUse"
        ])
    );

    // A tenant's own account and a viewer key of root read them too; another
    // tenant's account is NOT_FOUND.
    let viewer = s.key(ROOT_TOKEN, "root", "viewer", None).await;
    let v = list_reservations_as(&s, &viewer, "root", &account)
        .await
        .ok();
    assert_eq!(items(&v), listed);
    let acme = s.tenant("acme").await;
    list_reservations_as(&s, &acme, "acme", &account)
        .await
        .err(404, "NOT_FOUND");
    s.root(
        "providerAccounts/listReservations",
        json!({ "accountId": no_such("pacct") }),
    )
    .await
    .err(404, "NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread")]
async fn scan_updates_what_it_sees_and_marks_the_missing_gone() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let fake = Gce::start().await;
    fake.put("res-a", 4, 1, "READY").await;
    fake.put("res-b", 3, 0, "READY").await;
    let account = gce_account(&s, &fake).await;
    scan(&s, &account).await;
    let a_id = Gce::reservation_id("res-a");
    let b_id = Gce::reservation_id("res-b");
    let c_id = Gce::reservation_id("res-c");

    s.set_clock(T0 + MIN).await;
    fake.put("res-a", 6, 5, "UPDATING").await;
    fake.delete("res-b").await;
    fake.put("res-c", 1, 0, "READY").await;
    let scanned = items(&scan(&s, &account).await);
    let a = find(&scanned, &a_id);
    assert_eq!(
        (
            a["total"].clone(),
            a["providerInUse"].clone(),
            a["status"].clone()
        ),
        (json!(6), json!(5), json!("not-ready"))
    );
    assert_eq!(a["lastScannedAt"], T0 + MIN);
    assert!(a.get("goneAt").is_none());
    let b = find(&scanned, &b_id);
    assert_eq!(b["status"], "gone");
    assert_eq!(b["goneAt"], T0 + MIN);
    let c = find(&scanned, &c_id);
    assert_eq!(c["status"], "ready");
    assert_eq!(c["lastScannedAt"], T0 + MIN);
    assert_eq!(reservations(&s, &account).await, scanned);

    // Ready again; a gone one stays gone, with the instant it went.
    s.set_clock(T0 + 2 * MIN).await;
    fake.put("res-a", 6, 2, "READY").await;
    let scanned = items(&scan(&s, &account).await);
    let a = find(&scanned, &a_id);
    assert_eq!(
        (
            a["total"].clone(),
            a["providerInUse"].clone(),
            a["status"].clone()
        ),
        (json!(6), json!(2), json!("ready"))
    );
    let b = find(&scanned, &b_id);
    assert_eq!(b["status"], "gone");
    assert_eq!(b["goneAt"], T0 + MIN);

    // The scan is a root mutation on the account: a viewer may not run it,
    // a key scoped to the account may.
    let viewer = s.key(ROOT_TOKEN, "root", "viewer", None).await;
    scan_as(&s, &viewer, "root", &account)
        .await
        .err(403, "ACCESS_DENIED");
    let scoped = s
        .key(ROOT_TOKEN, "root", "provider-admin", Some(&account))
        .await;
    scan_as(&s, &scoped, "root", &account).await.ok();
    s.root(
        "providerAccounts/scan",
        json!({ "accountId": no_such("pacct") }),
    )
    .await
    .err(404, "NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_scan_changes_nothing() {
    let (s, p) = platform_at_t0(4).await;
    let g = grant_id(&create_grant_ok(&s, grant_body(&p, 4, T0, T0 + HOUR, "a")).await);
    let before = reservations(&s, &p.account).await;
    let events_before = s.events(ROOT_TOKEN, "root").await;
    // The provider would report a lower total, a new reservation and
    // nothing else; but it fails.
    s.set_clock(T0 + MIN).await;
    p.gce.put("res-a", 2, 0, "READY").await;
    p.gce.put("res-new", 2, 0, "READY").await;
    p.gce.fail(1).await;
    let r = s
        .root("providerAccounts/scan", json!({ "accountId": p.account }))
        .await;
    assert_eq!(r.err(503, "UNAVAILABLE")["reason"], "provider-error");
    assert_eq!(reservations(&s, &p.account).await, before);
    assert_eq!(s.events(ROOT_TOKEN, "root").await, events_before);
    let grant = get_grant_as(&s, ROOT_TOKEN, "root", &g).await.ok();
    assert_eq!(grant["grant"]["state"], "active");
    // The next scan applies it.
    let after = items(&scan(&s, &p.account).await);
    assert_eq!(after.len(), 2);
    assert_eq!(find(&after, &p.reservation)["total"], 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn bind_reservation_rules() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let fake = Gce::start().await;
    fake.put("res-a", 4, 0, "READY").await;
    fake.put("res-x", 4, 0, "READY").await;
    let account = gce_account(&s, &fake).await;
    scan(&s, &account).await;
    let a_id = Gce::reservation_id("res-a");
    let pool = create_pool(&s, &account).await;
    let pool2 = create_pool(&s, &account).await;
    let eu_pool = pool_in(&s, &account, "europe-west4", FLAVOR).await;
    let other_flavor = pool_in(&s, &account, "us-central1", "e2-standard-2").await;

    // Unknown reservation (never scanned), unknown pool.
    bind(&s, &account, &Gce::reservation_id("res-z"), &pool)
        .await
        .err(404, "NOT_FOUND");
    bind(&s, &account, &a_id, &no_such("pool"))
        .await
        .err(404, "NOT_FOUND");
    bind(&s, &no_such("pacct"), &a_id, &pool)
        .await
        .err(404, "NOT_FOUND");
    // A pool in another region, or without the reservation's flavor.
    bind(&s, &account, &a_id, &eu_pool)
        .await
        .err(400, "INVALID_INPUT");
    bind(&s, &account, &a_id, &other_flavor)
        .await
        .err(400, "INVALID_INPUT");
    assert!(
        find(&reservations(&s, &account).await, &a_id)
            .get("poolId")
            .is_none()
    );

    // Bound; binding again to the same pool returns it; another pool is refused.
    let first = bind(&s, &account, &a_id, &pool).await.ok();
    assert_eq!(first["reservation"]["poolId"], pool.as_str());
    let again = bind(&s, &account, &a_id, &pool).await.ok();
    assert_eq!(again, first);
    bind(&s, &account, &a_id, &pool2)
        .await
        .err(409, "INVALID_STATE");
    assert_eq!(
        find(&reservations(&s, &account).await, &a_id)["poolId"],
        pool.as_str()
    );

    // A reservation in Europe binds to the European pool.
    fake.put_in(EU_ZONE, "res-eu", 2, 0, FLAVOR, "READY").await;
    scan(&s, &account).await;
    let eu_id = Gce::reservation_in(EU_ZONE, "res-eu");
    bind(&s, &account, &eu_id, &pool)
        .await
        .err(400, "INVALID_INPUT");
    let eu = bind(&s, &account, &eu_id, &eu_pool).await.ok();
    assert_eq!(eu["reservation"]["region"], "europe-west4");

    // Gone.
    fake.delete("res-x").await;
    scan(&s, &account).await;
    bind(&s, &account, &Gce::reservation_id("res-x"), &pool)
        .await
        .err(409, "INVALID_STATE");

    // Only root's provider-admins bind.
    let viewer = s.key(ROOT_TOKEN, "root", "viewer", None).await;
    s.call(
        &viewer,
        "providerAccounts/bindReservation",
        json!({ "tenantId": "root", "accountId": account, "reservationId": a_id, "poolId": pool }),
    )
    .await
    .err(403, "ACCESS_DENIED");
}

#[tokio::test(flavor = "multi_thread")]
async fn unbind_is_refused_while_a_grant_is_scheduled_or_active() {
    let (s, p) = platform_at_t0(10).await;
    let scheduled =
        grant_id(&create_grant_ok(&s, grant_body(&p, 1, T0 + HOUR, T0 + 2 * HOUR, "a")).await);
    let active = grant_id(&create_grant_ok(&s, grant_body(&p, 1, T0, T0 + 3 * HOUR, "b")).await);
    let d = unbind(&s, &p.account, &p.reservation)
        .await
        .err(409, "INVALID_STATE")
        .clone();
    assert_eq!(
        string_set(&d["grantIds"]),
        set(&[scheduled.as_str(), active.as_str()])
    );
    // The one that was scheduled is active now; both still block.
    s.set_clock(T0 + HOUR + MIN).await;
    let d = unbind(&s, &p.account, &p.reservation)
        .await
        .err(409, "INVALID_STATE")
        .clone();
    assert_eq!(
        string_set(&d["grantIds"]),
        set(&[scheduled.as_str(), active.as_str()])
    );
    // The first's term passes on its own; the second is ended by root.
    s.set_clock(T0 + 2 * HOUR).await;
    let d = unbind(&s, &p.account, &p.reservation)
        .await
        .err(409, "INVALID_STATE")
        .clone();
    assert_eq!(string_set(&d["grantIds"]), set(&[active.as_str()]));
    // A cancelled grant does not block either.
    let cancelled =
        grant_id(&create_grant_ok(&s, grant_body(&p, 1, T0 + 5 * HOUR, T0 + 6 * HOUR, "c")).await);
    end_grant(&s, &p.account, &cancelled).await.ok();
    end_grant(&s, &p.account, &active).await.ok();
    let r = unbind(&s, &p.account, &p.reservation).await.ok();
    assert!(r["reservation"].get("poolId").is_none(), "{r}");
    assert_eq!(r["reservation"]["reservationId"], p.reservation.as_str());
    // Unbinding an unbound reservation returns it.
    let again = unbind(&s, &p.account, &p.reservation).await.ok();
    assert_eq!(again, r);
    // Its grants are kept; new ones are refused until it is bound again.
    let g = get_grant_as(&s, ROOT_TOKEN, "root", &active).await.ok();
    assert_eq!(g["grant"]["state"], "ended");
    create_grant(&s, grant_body(&p, 1, T0 + 2 * HOUR, T0 + 3 * HOUR, "d"))
        .await
        .err(409, "INVALID_STATE");
    unbind(&s, &p.account, &Gce::reservation_id("res-z"))
        .await
        .err(404, "NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread")]
async fn delete_is_refused_while_a_grant_is_scheduled_or_active() {
    let (s, p) = platform_at_t0(10).await;
    let (_fake, account_b, res_b) = second_account(&s, &p.pool, 4).await;
    let on_b = |slots, starts, ends, key: &str| {
        GrantBody::on(&p, slots)
            .term(starts, ends)
            .key(key)
            .on_reservation(&account_b, &res_b)
            .json()
    };
    let scheduled = grant_id(&create_grant_ok(&s, on_b(1, T0 + HOUR, T0 + 2 * HOUR, "a")).await);
    let delete = || s.root("providerAccounts/delete", json!({ "accountId": account_b }));
    let d = delete().await.err(409, "INVALID_STATE").clone();
    assert_eq!(string_set(&d["grantIds"]), set(&[scheduled.as_str()]));
    s.set_clock(T0 + HOUR).await;
    let d = delete().await.err(409, "INVALID_STATE").clone();
    assert_eq!(string_set(&d["grantIds"]), set(&[scheduled.as_str()]));
    // Grants on account A do not matter to B.
    create_grant_ok(&s, grant_body(&p, 1, T0 + HOUR, T0 + 9 * HOUR, "on-a")).await;
    let d = delete().await.err(409, "INVALID_STATE").clone();
    assert_eq!(string_set(&d["grantIds"]), set(&[scheduled.as_str()]));
    s.root("providerAccounts/get", json!({ "accountId": account_b }))
        .await
        .ok();
}

#[tokio::test(flavor = "multi_thread")]
async fn delete_is_refused_while_an_ended_grant_is_not_fully_metered() {
    let (s, p) = platform_at_t0(10).await;
    let (_fake, account_b, res_b) = second_account(&s, &p.pool, 4).await;
    let b = GrantBody::on(&p, 2)
        .term(T0, T0 + 2 * HOUR)
        .key("a")
        .on_reservation(&account_b, &res_b)
        .json();
    let ended = grant_id(&create_grant_ok(&s, b).await);
    s.set_clock(T0 + HOUR).await;
    end_grant(&s, &account_b, &ended).await.ok();
    // The api-server never meters slot-hours (that is the vps.grants
    // reconciler's job, not run here), so the ended grant keeps blocking,
    // however late.
    for at in [T0 + HOUR, T0 + 3 * HOUR, T0 + 30 * 24 * HOUR] {
        s.set_clock(at).await;
        let d = s
            .root("providerAccounts/delete", json!({ "accountId": account_b }))
            .await
            .err(409, "INVALID_STATE")
            .clone();
        assert_eq!(string_set(&d["grantIds"]), set(&[ended.as_str()]));
    }
    let g = get_grant_as(&s, ROOT_TOKEN, "root", &ended).await.ok();
    assert_eq!(g["grant"]["state"], "ended");
    assert_eq!(g["grant"]["meteredThrough"], T0);
    s.root("providerAccounts/get", json!({ "accountId": account_b }))
        .await
        .ok();
}

#[tokio::test(flavor = "multi_thread")]
async fn delete_succeeds_once_the_reconciler_has_metered_the_ended_grants() {
    let (s, p) = platform_at_t0(10).await;
    let (_fake, account_b, res_b) = second_account(&s, &p.pool, 4).await;
    let b = GrantBody::on(&p, 2)
        .term(T0, T0 + 5 * HOUR)
        .key("a")
        .on_reservation(&account_b, &res_b)
        .json();
    let ended = grant_id(&create_grant_ok(&s, b).await);
    s.set_clock(T0 + HOUR + 17 * MIN).await;
    end_grant(&s, &account_b, &ended).await.ok();
    let delete = || s.root("providerAccounts/delete", json!({ "accountId": account_b }));
    // A pass inside the hour the grant ended in meters only the whole hours.
    s.set_clock(T0 + HOUR + 30 * MIN).await;
    worker::once(&s, &["vps.grants"]).await;
    let g = get_grant_as(&s, ROOT_TOKEN, "root", &ended).await.ok();
    assert_eq!(g["grant"]["meteredThrough"], T0 + HOUR);
    let d = delete().await.err(409, "INVALID_STATE").clone();
    assert_eq!(string_set(&d["grantIds"]), set(&[ended.as_str()]));
    // The next pass past that hour meters the rest: now it can go.
    s.set_clock(T0 + 2 * HOUR).await;
    worker::once(&s, &["vps.grants"]).await;
    let g = get_grant_as(&s, ROOT_TOKEN, "root", &ended).await.ok();
    assert_eq!(g["grant"]["meteredThrough"], T0 + HOUR + 17 * MIN);
    let r = delete().await.ok();
    assert_eq!(r, json!({ "accountId": account_b, "deleted": true }));
    get_grant_as(&s, ROOT_TOKEN, "root", &ended)
        .await
        .err(404, "NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_an_account_forgets_it_its_grants_and_its_keys() {
    let (s, p) = platform_at_t0(10).await;
    let (_fake, account_b, res_b) = second_account(&s, &p.pool, 4).await;
    let body_b = GrantBody::on(&p, 2)
        .term(T0 + HOUR, T0 + 2 * HOUR)
        .key("kb")
        .on_reservation(&account_b, &res_b)
        .json();
    let cancelled = grant_id(&create_grant_ok(&s, body_b.clone()).await);
    end_grant(&s, &account_b, &cancelled).await.ok();
    let scoped = s
        .key(ROOT_TOKEN, "root", "provider-admin", Some(&account_b))
        .await;
    list_reservations_as(&s, &scoped, "root", &account_b)
        .await
        .err(403, "ACCESS_DENIED"); // providers:read is tenant scope
    scan_as(&s, &scoped, "root", &account_b).await.ok();

    // A cancelled-only account without pools is deleted.
    let r = s
        .root("providerAccounts/delete", json!({ "accountId": account_b }))
        .await
        .ok();
    assert_eq!(r, json!({ "accountId": account_b, "deleted": true }));

    // The account, its reservations and its grants are gone.
    for path in [
        "providerAccounts/get",
        "providerAccounts/listReservations",
        "providerAccounts/scan",
        "providerAccounts/delete",
    ] {
        s.root(path, json!({ "accountId": account_b }))
            .await
            .err(404, "NOT_FOUND");
    }
    bind(&s, &account_b, &res_b, &p.pool)
        .await
        .err(404, "NOT_FOUND");
    let listed = s.root("providerAccounts/list", json!({})).await.ok();
    assert!(
        items(&listed)
            .iter()
            .all(|a| a["accountId"] != account_b.as_str()),
        "{listed}"
    );
    get_grant_as(&s, ROOT_TOKEN, "root", &cancelled)
        .await
        .err(404, "NOT_FOUND");
    assert!(
        items(&list_grants(&s, ROOT_TOKEN, "root", Some(true)).await.ok())
            .iter()
            .all(|g| g["grantId"] != cancelled.as_str())
    );
    let mut again = body_b.clone();
    again["idempotencyKey"] = json!("kb2");
    create_grant(&s, again).await.err(404, "NOT_FOUND");

    // Its account-scoped key no longer authenticates.
    scan_as(&s, &scoped, "root", &account_b)
        .await
        .err(401, "UNAUTHENTICATED");
    end_grant_as(&s, &scoped, "root", &account_b, &cancelled)
        .await
        .err(401, "UNAUTHENTICATED");

    // Keys live as long as the object they created: the removed grant's key
    // is free again for another request.
    let reused = create_grant_ok(&s, grant_body(&p, 1, T0, T0 + HOUR, "kb")).await;
    assert_eq!(reused["accountId"], p.account.as_str());
    assert_ne!(grant_id(&reused), cancelled);

    // Account A, with its pool, is untouched.
    s.root("providerAccounts/get", json!({ "accountId": p.account }))
        .await
        .ok();
}

#[tokio::test(flavor = "multi_thread")]
async fn config_secret_values_are_invalid_input() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let secrets: Vec<(&str, Value)> = vec![
        (
            "config.credentials",
            json!({
                "project": "platform-prod",
                "credentials": "-----BEGIN PRIVATE KEY-----\n\
                                MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n\
                                -----END PRIVATE KEY-----\n",
            }),
        ),
        (
            "config.credentials",
            json!({
                "project": "platform-prod",
                "credentials": "ya29.a0AfH6SMBxkq9Zt7oLQ2vR8wHcYpJ4nE",
            }),
        ),
        (
            "config.credentials",
            json!({
                "project": "platform-prod",
                "credentials": "{\"type\":\"service_account\",\"private_key\":\"abc\"}",
            }),
        ),
        (
            "config.credentials",
            json!({
                "project": "platform-prod",
                "credentials": "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdoaWprbG1ub3A",
            }),
        ),
        (
            "config.endpoint",
            json!({
                "project": "platform-prod",
                "endpoint": "https://admin:hunter2secret@compute.googleapis.com",
                "credentials": "none",
            }),
        ),
        (
            "config.endpoint",
            json!({
                "project": "platform-prod",
                "endpoint": "https://compute.googleapis.com/\
                             ?key=AIzaSyA1234567890abcdefghijklmnopq",
                "credentials": "none",
            }),
        ),
    ];
    for (field, config) in &secrets {
        let r = s
            .root(
                "providerAccounts/create",
                json!({
                    "name": "gce",
                    "provider": "gce",
                    "config": config,
                    "idempotencyKey": "acct-1",
                }),
            )
            .await;
        let d = r.err(400, "INVALID_INPUT");
        assert_eq!(d["reason"], "secret-value", "{config}");
        assert_eq!(d["field"], *field, "{config}");
        // The error does not echo the secret back.
        let text = r.body.to_string();
        for word in [
            "MIIEvQIBADANBg",
            "ya29.a0AfH6",
            "hunter2secret",
            "AIzaSyA123",
            "Zm9vYmFy",
        ] {
            assert!(!text.contains(word), "{text}");
        }
    }
    // Nothing was created, and the key was not consumed.
    let listed = s.root("providerAccounts/list", json!({})).await.ok();
    assert!(items(&listed).is_empty(), "{listed}");
    let ok = s
        .root(
            "providerAccounts/create",
            json!({
                "name": "gce",
                "provider": "gce",
                "config": { "project": "platform-prod", "credentials": "env:GCE_TOKEN" },
                "idempotencyKey": "acct-1",
            }),
        )
        .await
        .ok();
    assert_eq!(ok["account"]["config"]["credentials"], "env:GCE_TOKEN");
    s.root(
        "providerAccounts/create",
        json!({
            "name": "gce",
            "provider": "gce",
            "config": { "project": "platform-prod", "credentials": "none" },
            "idempotencyKey": "k-none",
        }),
    )
    .await
    .ok();
    // A file reference outside BC_CREDENTIAL_DIR (unset here) is refused
    // even for root.
    let refused = s
        .root(
            "providerAccounts/create",
            json!({
                "name": "gce",
                "provider": "gce",
                "config": { "project": "platform-prod", "credentials": "file:/etc/gce/key.json" },
                "idempotencyKey": "k-file",
            }),
        )
        .await;
    assert_eq!(
        refused.err(400, "INVALID_INPUT")["reason"],
        "credential-not-allowed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn capacity_short_is_published_once_per_change_of_total() {
    let (s, p) = platform_at_t0(10).await;
    let a = grant_id(&create_grant_ok(&s, grant_body(&p, 4, T0, T0 + 5 * HOUR, "a")).await);
    let b = grant_id(&create_grant_ok(&s, grant_body(&p, 4, T0 + HOUR, T0 + 3 * HOUR, "b")).await);
    let c =
        grant_id(&create_grant_ok(&s, grant_body(&p, 2, T0 + 6 * HOUR, T0 + 7 * HOUR, "c")).await);
    // Neither an ended nor a cancelled grant counts.
    grant_id(&create_grant_ok(&s, grant_body(&p, 2, T0, T0 + 10 * MIN, "d")).await);
    let cancelled =
        grant_id(&create_grant_ok(&s, grant_body(&p, 2, T0 + 8 * HOUR, T0 + 9 * HOUR, "e")).await);
    end_grant(&s, &p.account, &cancelled).await.ok();
    let live = set(&[a.as_str(), b.as_str(), c.as_str()]);
    s.set_clock(T0 + 30 * MIN).await;

    // Peak of the live grants from now on: 8 over [T0+H, T0+3H).
    let short = "reservation-grant.capacity-short";
    p.gce.put("res-a", 8, 0, "READY").await;
    scan(&s, &p.account).await;
    assert!(
        s.events_of(ROOT_TOKEN, "root", short).await.is_empty(),
        "8 is not below 8"
    );

    p.gce.put("res-a", 7, 0, "READY").await;
    scan(&s, &p.account).await;
    scan(&s, &p.account).await;
    let evs = s.events_of(ROOT_TOKEN, "root", short).await;
    assert_eq!(evs.len(), 1, "{evs:?}");
    let d = &evs[0]["data"];
    assert_eq!(
        keys(d),
        set(&[
            "accountId",
            "reservationId",
            "total",
            "grantedSlots",
            "grantIds"
        ])
    );
    assert_eq!(d["accountId"], p.account.as_str());
    assert_eq!(d["reservationId"], p.reservation.as_str());
    assert_eq!(d["total"], 7);
    assert_eq!(d["grantedSlots"], 8);
    assert_eq!(string_set(&d["grantIds"]), live);
    assert_eq!(evs[0]["tenantId"], "root");

    // Lower again: a second event; the same total again: nothing.
    s.set_clock(T0 + 40 * MIN).await;
    p.gce.put("res-a", 5, 0, "READY").await;
    scan(&s, &p.account).await;
    scan(&s, &p.account).await;
    let evs = s.events_of(ROOT_TOKEN, "root", short).await;
    assert_eq!(evs.len(), 2, "{evs:?}");
    assert_eq!(evs[1]["data"]["total"], 5);
    assert_eq!(evs[1]["data"]["grantedSlots"], 8);

    // Back above the peak: nothing. In-use changes alone: nothing.
    p.gce.put("res-a", 12, 0, "READY").await;
    scan(&s, &p.account).await;
    p.gce.put("res-a", 12, 7, "READY").await;
    scan(&s, &p.account).await;
    assert_eq!(s.events_of(ROOT_TOKEN, "root", short).await.len(), 2);

    // The grants keep going: nothing ended.
    for id in [&a, &b, &c] {
        let g = get_grant_as(&s, ROOT_TOKEN, "root", id).await.ok();
        assert!(
            g["grant"]["state"] == "active" || g["grant"]["state"] == "scheduled",
            "{g}"
        );
    }
    // After the peak has passed, only what is still ahead counts.
    s.set_clock(T0 + 3 * HOUR).await;
    p.gce.put("res-a", 3, 0, "READY").await;
    scan(&s, &p.account).await;
    let evs = s.events_of(ROOT_TOKEN, "root", short).await;
    assert_eq!(evs.len(), 3, "{evs:?}");
    assert_eq!(evs[2]["data"]["total"], 3);
    assert_eq!(evs[2]["data"]["grantedSlots"], 4);
    assert_eq!(
        string_set(&evs[2]["data"]["grantIds"]),
        set(&[a.as_str(), c.as_str()])
    );
    // None of it is the grantee's business.
    let acme = s.events(&p.tenant_token, "acme").await;
    assert!(of_type(&acme, short).is_empty());
}

/// The set of strings in a JSON array.
fn string_set(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_str().expect("string").to_owned())
        .collect()
}

/// The keys of a JSON object.
fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().expect("object").keys().cloned().collect()
}

/// A set of string literals.
fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}
