//! Lending idle granted slots (contract 3.14, 5.5) with the real binaries
//! and fake-gce: a pool's lending, a grant lent by its grantee's admin,
//! interruptible instances placed only in lent slots, the reclaim with
//! notice (the grantee's VM made only once the borrower's is gone), the
//! meters of both sides, and the races and hostile tenants around them.

use serde_json::{Value, json};

use crate::support::builders::{GrantBuilder, InstanceBuilder, PlatformBuilder};
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::fixtures::{
    Platform, create_pool, default_quotas, id, instance_op_ok, offer, tenant_with_pool,
};
use crate::support::meter::usage_of_instance;
use crate::support::server::{Answer, ROOT_TOKEN, Server};
use crate::support::vms::{IMAGE, acme_instance, managed_pool_body, state, vm_name, vm_pass};
use crate::support::worker;

/// The notice of the test pools: one minute.
const NOTICE_S: i64 = 60;

/// A managed platform whose pool lends with [`NOTICE_S`], a reservation
/// of `total` slots, acme's grant of `slots` over [T0, T0 + 10 h) and
/// globex offered the pool: `(platform, grant, globex's token)`.
async fn lending_world(s: &Server, total: i64, slots: i64) -> (Platform, String, String) {
    s.set_clock(T0).await;
    let p = PlatformBuilder::new()
        .slots(total)
        .managed()
        .lending(json!({ "noticeSeconds": NOTICE_S }))
        .build(s)
        .await;
    let grant = GrantBuilder::new(&p)
        .slots(slots)
        .term(T0, T0 + 10 * HOUR)
        .create(s)
        .await;
    let globex = tenant_with_pool(s, "globex", &p.pool).await;
    (p, grant, globex)
}

/// `reservationGrants.setLending` by `token` in `tenant`.
async fn set_lending(s: &Server, token: &str, tenant: &str, grant: &str, lend: bool) -> Answer {
    s.call(
        token,
        "reservationGrants/setLending",
        json!({ "tenantId": tenant, "grantId": grant, "lend": lend }),
    )
    .await
}

/// The grant as its grantee reads it.
async fn grant_of(s: &Server, p: &Platform, grant: &str) -> Value {
    s.call(
        &p.tenant_token,
        "reservationGrants/get",
        json!({ "tenantId": "acme", "grantId": grant }),
    )
    .await
    .ok()["grant"]
        .clone()
}

/// An interruptible instance of globex in the platform's pool.
fn borrower(p: &Platform, globex: &str, key: &str) -> InstanceBuilder {
    InstanceBuilder::new(p)
        .by("globex", globex)
        .key(key)
        .field("interruptible", json!(true))
}

/// An instance of globex as `instances.get` answers it.
async fn globex_instance(s: &Server, token: &str, inst: &str) -> Value {
    instance_op_ok(s, token, "globex", "get", inst).await
}

#[tokio::test(flavor = "multi_thread")]
async fn only_a_managed_pool_lends_and_it_shows_its_notice() {
    let s = Server::start().await;
    let p = PlatformBuilder::new().managed().build(&s).await;
    // A ledger pool cannot lend: INVALID_INPUT on `lending`, nothing made.
    let mut ledger = managed_pool_body(&p.account, json!({ "image": IMAGE }));
    ledger.as_object_mut().expect("body").remove("vm");
    ledger["lending"] = json!({ "noticeSeconds": 30 });
    let refused = s.root("pools/create", ledger).await;
    let details = &refused.err(400, "INVALID_INPUT");
    assert_eq!(details["field"], "lending");
    assert_eq!(details["reason"], "ledger-pool");
    // Out of range.
    let mut long = managed_pool_body(&p.account, json!({ "image": IMAGE }));
    long["lending"] = json!({ "noticeSeconds": 3601 });
    s.root("pools/create", long).await.err(400, "INVALID_INPUT");
    // The default notice is two minutes, shown as given.
    let mut lends = managed_pool_body(&p.account, json!({ "image": IMAGE }));
    lends["lending"] = json!({});
    let pool = s.root("pools/create", lends).await.ok()["pool"].clone();
    assert_eq!(pool["lending"], json!({ "noticeSeconds": 120 }));
    // A pool without it shows none.
    let plain = s.root("pools/get", json!({ "poolId": p.pool })).await.ok();
    assert!(plain["pool"].get("lending").is_none(), "{plain}");
}

#[tokio::test(flavor = "multi_thread")]
async fn only_the_grantees_admin_and_root_set_lending_and_only_where_the_pool_lends() {
    let s = Server::start().await;
    let (p, grant, globex) = lending_world(&s, 3, 2).await;
    // Another tenant: NOT_FOUND, as for a grant that does not exist.
    set_lending(&s, &globex, "globex", &grant, true)
        .await
        .err(404, "NOT_FOUND");
    // A member key of the grantee: ACCESS_DENIED (the role is checked first).
    let member = s.key(&p.tenant_token, "acme", "member", None).await;
    set_lending(&s, &member, "acme", &grant, true)
        .await
        .err(403, "ACCESS_DENIED");
    assert_eq!(grant_of(&s, &p, &grant).await["lending"], false);
    // The grantee's admin lends; again is unchanged; root stops it.
    let lent = set_lending(&s, &p.tenant_token, "acme", &grant, true)
        .await
        .ok();
    assert_eq!(lent["grant"]["lending"], true);
    assert_eq!(lent["grant"]["lentSlots"], 0);
    assert_eq!(lent["grant"]["lentSlotHours"], "0.000000");
    let again = set_lending(&s, &p.tenant_token, "acme", &grant, true)
        .await
        .ok();
    assert_eq!(again["grant"], lent["grant"]);
    let stopped = set_lending(&s, ROOT_TOKEN, "root", &grant, false)
        .await
        .ok();
    assert_eq!(stopped["grant"]["lending"], false);
    assert!(stopped["grant"].get("lentSlots").is_none());
    // An ended grant: INVALID_STATE.
    s.set_clock(T0 + 11 * HOUR).await;
    set_lending(&s, &p.tenant_token, "acme", &grant, true)
        .await
        .err(409, "INVALID_STATE");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_of_a_pool_without_lending_cannot_lend() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let plain = PlatformBuilder::new().managed().build(&s).await;
    let other = GrantBuilder::new(&plain)
        .term(T0, T0 + HOUR)
        .create(&s)
        .await;
    let refused = set_lending(&s, &plain.tenant_token, "acme", &other, true).await;
    assert_eq!(
        refused.err(409, "INVALID_STATE")["reason"],
        "pool-does-not-lend"
    );
    assert_eq!(
        s.call(
            &plain.tenant_token,
            "reservationGrants/get",
            json!({ "tenantId": "acme", "grantId": other }),
        )
        .await
        .ok()["grant"]["lending"],
        false
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interruptible_instance_takes_only_a_lent_slot_of_another_tenant() {
    let s = Server::start().await;
    let (p, grant, globex) = lending_world(&s, 3, 2).await;
    // Not lending yet: no lent slot, though an ordinary slot is free.
    let refused = borrower(&p, &globex, "b0").send(&s).await;
    assert_eq!(
        refused.err(409, "CAPACITY_UNAVAILABLE")["reason"],
        "no-lent-slot"
    );
    set_lending(&s, &p.tenant_token, "acme", &grant, true)
        .await
        .ok();
    let b = borrower(&p, &globex, "b1").create(&s).await;
    assert_eq!(b["interruptible"], true);
    assert_eq!(
        b["placement"],
        json!({ "kind": "lent", "grantId": grant, "reservationId": p.reservation })
    );
    assert!(b.get("interruptAt").is_none());
    // The grantee never borrows from its own grant.
    let own = InstanceBuilder::new(&p)
        .key("own")
        .field("interruptible", json!(true))
        .send(&s)
        .await;
    assert_eq!(
        own.err(409, "CAPACITY_UNAVAILABLE")["reason"],
        "no-lent-slot"
    );
    // The second lent slot, then none: the ordinary slot is never taken.
    borrower(&p, &globex, "b2").create(&s).await;
    let third = borrower(&p, &globex, "b3").send(&s).await;
    assert_eq!(
        third.err(409, "CAPACITY_UNAVAILABLE")["reason"],
        "no-lent-slot"
    );
    assert_eq!(grant_of(&s, &p, &grant).await["lentSlots"], 2);
    // The borrower sees the lending grant's id, never its grantee.
    let seen = globex_instance(&s, &globex, &id(&b)).await;
    assert!(!seen.to_string().contains("acme"), "{seen}");
    // Billed "none" or in a pool that does not lend: INVALID_INPUT.
    let none = InstanceBuilder::new(&p)
        .by("root", ROOT_TOKEN)
        .billing("none")
        .field("interruptible", json!(true))
        .send(&s)
        .await;
    assert_eq!(none.err(400, "INVALID_INPUT")["field"], "interruptible");
    let ledger = create_pool(&s, &p.account).await;
    offer(&s, &ledger, "acme", default_quotas()).await;
    let no_lending = InstanceBuilder::on(&ledger, "acme", &p.tenant_token)
        .field("interruptible", json!(true))
        .send(&s)
        .await;
    let details = &no_lending.err(400, "INVALID_INPUT");
    assert_eq!(details["field"], "interruptible");
    assert_eq!(details["reason"], "pool-does-not-lend");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_grantee_takes_its_slot_back_with_notice_and_its_vm_waits_for_the_borrowers() {
    let s = Server::start().await;
    let (p, grant, globex) = lending_world(&s, 2, 1).await;
    let t = &p.tenant_token;
    set_lending(&s, t, "acme", &grant, true).await.ok();
    let b = borrower(&p, &globex, "b").create(&s).await;
    s.set_clock(T0 + 10 * MIN).await;
    vm_pass(&s).await;
    assert_eq!(
        state(&globex_instance(&s, &globex, &id(&b)).await),
        "running"
    );
    // The grantee needs its slot: admitted at once, into its grant.
    s.set_clock(T0 + 20 * MIN).await;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    assert_eq!(a["placement"]["kind"], "grant");
    assert_eq!(a["placement"]["grantId"], json!(grant));
    let interrupted = globex_instance(&s, &globex, &id(&b)).await;
    let interrupt_at = T0 + 20 * MIN + NOTICE_S * 1000;
    assert_eq!(interrupted["interruptAt"], interrupt_at);
    assert_eq!(state(&interrupted), "running");
    let events = s
        .events_of(&globex, "globex", "instance.interrupting")
        .await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["data"]["instanceId"], json!(id(&b)));
    assert_eq!(events[0]["data"]["interruptAt"], interrupt_at);
    assert!(!events[0].to_string().contains("acme"), "{events:?}");
    assert_eq!(grant_of(&s, &p, &grant).await["lentSlots"], 0);
    // During the notice the borrower runs on and the grantee's VM waits.
    s.set_clock(T0 + 20 * MIN + 30_000).await;
    vm_pass(&s).await;
    assert!(
        p.gce.vm(&vm_name(&a)).await.is_none(),
        "sent before the slot was free"
    );
    assert!(p.gce.vm(&vm_name(&b)).await.is_some());
    // At interruptAt the borrower's VM is deleted, then the grantee's made.
    s.set_clock(interrupt_at).await;
    vm_pass(&s).await;
    vm_pass(&s).await;
    let gone = globex_instance(&s, &globex, &id(&b)).await;
    assert_eq!(state(&gone), "deleted");
    assert_eq!(gone["deletedReason"], "reclaimed");
    assert!(p.gce.vm(&vm_name(&b)).await.is_none());
    let deleted = s.events_of(&globex, "globex", "instance.deleted").await;
    assert_eq!(deleted.len(), 1);
    assert_eq!(deleted[0]["data"]["reason"], "reclaimed");
    assert!(p.gce.vm(&vm_name(&a)).await.is_some(), "the grantee's VM");
    assert_eq!(state(&acme_instance(&s, t, &id(&a)).await), "running");
    // Meters: the borrower ran 10 min to interruptAt (+1 min) as
    // interruptible, in the lending grant; the grant lent the same.
    s.set_clock(T0 + 2 * HOUR).await;
    worker::once(&s, &["vps.grants", "vps.usage"]).await;
    let records = usage_of_instance(&s, &globex, "globex", &id(&b)).await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["meter"], "vm.interruptible.hours");
    assert_eq!(records[0]["quantity"], "0.183333");
    assert_eq!(records[0]["grantId"], json!(grant));
    let g = grant_of(&s, &p, &grant).await;
    assert_eq!(g["lentSlotHours"], "0.183333");
    let rows = s
        .call(
            t,
            "reservationGrants/usage",
            json!({ "tenantId": "acme", "grantId": grant, "from": T0, "to": T0 + HOUR }),
        )
        .await
        .ok();
    assert_eq!(rows["items"][0]["lentHours"], "0.183333", "{rows}");
    assert_eq!(rows["items"][0]["slotHours"], "1.000000");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_borrowers_racing_for_the_last_lent_slot_get_one_slot() {
    let s = Server::start().await;
    let (p, grant, globex) = lending_world(&s, 2, 1).await;
    set_lending(&s, &p.tenant_token, "acme", &grant, true)
        .await
        .ok();
    let initech = tenant_with_pool(&s, "initech", &p.pool).await;
    let a = InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("race")
        .field("interruptible", json!(true));
    let b = InstanceBuilder::new(&p)
        .by("initech", &initech)
        .key("race")
        .field("interruptible", json!(true));
    let (x, y) = tokio::join!(a.send(&s), b.send(&s));
    let statuses = {
        let mut v = vec![x.status, y.status];
        v.sort_unstable();
        v
    };
    assert_eq!(statuses, vec![200, 409], "{x:?} {y:?}");
    assert_eq!(grant_of(&s, &p, &grant).await["lentSlots"], 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_borrower_deleted_by_its_tenant_during_the_notice_frees_the_slot_once() {
    let s = Server::start().await;
    let (p, grant, globex) = lending_world(&s, 2, 1).await;
    set_lending(&s, &p.tenant_token, "acme", &grant, true)
        .await
        .ok();
    let b = borrower(&p, &globex, "b").create(&s).await;
    vm_pass(&s).await;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    // The borrower's own delete during the notice: billed to the request,
    // deleted as requested, not reclaimed; the reclaim then finds nothing.
    s.set_clock(T0 + 10 * MIN).await;
    instance_op_ok(&s, &globex, "globex", "delete", &id(&b)).await;
    vm_pass(&s).await;
    s.set_clock(T0 + 10 * MIN + NOTICE_S * 1000).await;
    vm_pass(&s).await;
    let gone = globex_instance(&s, &globex, &id(&b)).await;
    assert_eq!(state(&gone), "deleted");
    assert_eq!(gone["deletedReason"], "requested");
    assert_eq!(
        s.events_of(&globex, "globex", "instance.deleted")
            .await
            .len(),
        1
    );
    assert_eq!(
        state(&acme_instance(&s, &p.tenant_token, &id(&a)).await),
        "running"
    );
    // A new borrower finds no slot: the grantee holds the only one.
    let late = borrower(&p, &globex, "late").send(&s).await;
    late.err(409, "CAPACITY_UNAVAILABLE");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_that_stops_lending_or_ends_interrupts_each_borrower_once() {
    let s = Server::start().await;
    let (p, grant, globex) = lending_world(&s, 3, 2).await;
    let t = &p.tenant_token;
    set_lending(&s, t, "acme", &grant, true).await.ok();
    let b1 = borrower(&p, &globex, "b1").create(&s).await;
    let b2 = borrower(&p, &globex, "b2").create(&s).await;
    vm_pass(&s).await;
    // The grantee needs one slot: the borrower that came last goes.
    s.set_clock(T0 + MIN).await;
    InstanceBuilder::new(&p).key("a").create(&s).await;
    let first = s
        .events_of(&globex, "globex", "instance.interrupting")
        .await;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0]["data"]["instanceId"], json!(id(&b2)));
    // It stops lending: the other one too, once each.
    s.set_clock(T0 + 2 * MIN).await;
    set_lending(&s, t, "acme", &grant, false).await.ok();
    // And root ends the grant while both reclaims are pending: nothing more.
    s.root(
        "reservationGrants/end",
        json!({ "accountId": p.account, "grantId": grant }),
    )
    .await
    .ok();
    let all = s
        .events_of(&globex, "globex", "instance.interrupting")
        .await;
    let ids: Vec<&Value> = all.iter().map(|e| &e["data"]["instanceId"]).collect();
    assert_eq!(ids, vec![&json!(id(&b2)), &json!(id(&b1))], "{all:?}");
    assert_eq!(
        globex_instance(&s, &globex, &id(&b1)).await["interruptAt"],
        T0 + 2 * MIN + NOTICE_S * 1000
    );
    // Both VMs are deleted when their notice is over, and nothing else.
    s.set_clock(T0 + 2 * MIN + NOTICE_S * 1000).await;
    vm_pass(&s).await;
    vm_pass(&s).await;
    for b in [&b1, &b2] {
        let gone = globex_instance(&s, &globex, &id(b)).await;
        assert_eq!(gone["deletedReason"], "reclaimed", "{gone}");
        assert!(p.gce.vm(&vm_name(b)).await.is_none());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_borrower_holds_nothing_and_starts_only_into_a_lent_slot() {
    let s = Server::start().await;
    let (p, grant, globex) = lending_world(&s, 2, 1).await;
    set_lending(&s, &p.tenant_token, "acme", &grant, true)
        .await
        .ok();
    let b = borrower(&p, &globex, "b").create(&s).await;
    vm_pass(&s).await;
    instance_op_ok(&s, &globex, "globex", "stop", &id(&b)).await;
    vm_pass(&s).await;
    let stopped = globex_instance(&s, &globex, &id(&b)).await;
    assert_eq!(state(&stopped), "stopped");
    assert_eq!(stopped["placement"]["kind"], "none");
    assert_eq!(grant_of(&s, &p, &grant).await["lentSlots"], 0);
    // The grantee takes the slot without interrupting anyone.
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    assert!(
        s.events_of(&globex, "globex", "instance.interrupting")
            .await
            .is_empty()
    );
    // No lent slot left: start is refused; once the grantee leaves, it starts.
    let refused = s
        .call(
            &globex,
            "instances/start",
            json!({ "tenantId": "globex", "instanceId": id(&b) }),
        )
        .await;
    assert_eq!(
        refused.err(409, "CAPACITY_UNAVAILABLE")["reason"],
        "no-lent-slot"
    );
    instance_op_ok(&s, &p.tenant_token, "acme", "delete", &id(&a)).await;
    vm_pass(&s).await;
    let started = instance_op_ok(&s, &globex, "globex", "start", &id(&b)).await;
    assert_eq!(started["placement"]["kind"], "lent");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grantee_is_admitted_on_a_reservation_its_borrowers_fill() {
    // One slot, granted to acme and lent: the provider holds the
    // borrower's VM, yet acme's create is admitted into its grant.
    let s = Server::start().await;
    let (p, grant, globex) = lending_world(&s, 1, 1).await;
    set_lending(&s, &p.tenant_token, "acme", &grant, true)
        .await
        .ok();
    let b = borrower(&p, &globex, "b").create(&s).await;
    vm_pass(&s).await;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    assert_eq!(a["placement"]["kind"], "grant");
    assert!(globex_instance(&s, &globex, &id(&b)).await["interruptAt"].is_i64());
    // Anyone else is refused: the reservation is full.
    let other = InstanceBuilder::new(&p)
        .by("globex", &globex)
        .key("o")
        .send(&s)
        .await;
    other.err(409, "CAPACITY_UNAVAILABLE");
}
