//! Concurrent admissions (contract 3.4, 4): many `instances.create`,
//! `stop`, `start` and `delete` at once never over-fill a reservation or a
//! grant, and every tenant's quota `used` is exactly the charges of its
//! instances that exist.

use std::collections::BTreeMap;

use serde_json::json;

use crate::support::builders::{GrantBuilder, InstanceBuilder};
use crate::support::calls::delete_tenant;
use crate::support::clock::{HOUR, T0};
use crate::support::db::{instances_in_db, quotas_in_db};
use crate::support::fixtures::{
    Platform, grant_of, id, instance_op, instance_op_ok, kind, offer, platform_at_t0, quotas,
    second_account, set_quota, tenant_with_pool,
};
use crate::support::server::{Answer, Server};

const TOTAL: i64 = 20;
/// (tenant, grant slots, instances quota)
const TENANTS: [(&str, i64, i64); 3] = [("acme", 4, 10), ("globex", 3, 10), ("initech", 2, 5)];

/// Checks the invariants on the stored rows: at most `TOTAL` running on the
/// reservation, no grant holding more than its slots, and each tenant's
/// `used` equal to the charges of its live instances. Returns the live
/// instance count per tenant.
async fn check_invariants(
    s: &Server,
    p: &Platform,
    tokens: &BTreeMap<&str, String>,
    grants: &BTreeMap<String, i64>,
) -> BTreeMap<String, i64> {
    let rows = instances_in_db(s).await;
    let live: Vec<_> = rows.iter().filter(|r| r.state != "deleted").collect();
    let running_on_res = live
        .iter()
        .filter(|r| {
            r.state == "running" && r.reservation_id.as_deref() == Some(p.reservation.as_str())
        })
        .count();
    assert!(
        i64::try_from(running_on_res).expect("count") <= TOTAL,
        "{running_on_res} running on a reservation of {TOTAL}"
    );
    for (g, slots) in grants {
        let held = live
            .iter()
            .filter(|r| r.grant_id.as_deref() == Some(g.as_str()))
            .count();
        assert!(
            i64::try_from(held).expect("count") <= *slots,
            "grant {g} holds {held} of {slots} slots"
        );
    }
    // Nothing live is anywhere but on the reservation (no on-demand here),
    // and deleted instances hold nothing.
    for r in &rows {
        if r.state == "deleted" {
            assert!(r.reservation_id.is_none() && r.grant_id.is_none(), "{r:?}");
        } else if r.state == "running" {
            assert!(r.reservation_id.is_some(), "{r:?}");
        }
    }
    let mut counts = BTreeMap::new();
    for (tenant, _, _) in TENANTS {
        let n =
            i64::try_from(live.iter().filter(|r| r.tenant_id == tenant).count()).expect("count");
        counts.insert(tenant.to_owned(), n);
        let q = quotas(s, &tokens[tenant], tenant, &p.pool).await;
        let used_of = |res: &str| {
            q.iter()
                .find(|(r, _, _)| r == res)
                .map(|(_, _, u)| *u)
                .expect("quota row")
        };
        assert_eq!(
            (used_of("instances"), used_of("vcpus"), used_of("memoryGib")),
            (n, 4 * n, 16 * n),
            "quota of {tenant}"
        );
        assert!(
            q.iter().all(|(_, max, used)| used <= max),
            "{tenant}: {q:?}"
        );
    }
    counts
}

fn classify(answers: &[Answer]) -> (usize, usize, usize) {
    let mut ok = 0;
    let mut capacity = 0;
    let mut quota = 0;
    for a in answers {
        match (a.status, a.code()) {
            (200, _) => ok += 1,
            (409, "CAPACITY_UNAVAILABLE") => capacity += 1,
            (429, "QUOTA_EXCEEDED") => quota += 1,
            _ => panic!("unexpected answer {} {}", a.status, a.body),
        }
    }
    (ok, capacity, quota)
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_creates_by_three_grantees_never_overfill_and_charge_exactly() {
    let (s, p) = platform_at_t0(TOTAL).await;
    let mut tokens: BTreeMap<&str, String> = BTreeMap::new();
    tokens.insert("acme", p.tenant_token.clone());
    for (tenant, _, _) in &TENANTS[1..] {
        tokens.insert(tenant, tenant_with_pool(&s, tenant, &p.pool).await);
    }
    let mut grants = BTreeMap::new();
    let mut grant_of_tenant = BTreeMap::new();
    for (tenant, slots, quota) in TENANTS {
        set_quota(&s, tenant, &p.pool, "instances", quota).await;
        let g = GrantBuilder::new(&p)
            .grantee(tenant)
            .slots(slots)
            .term(T0, T0 + 10 * HOUR)
            .create(&s)
            .await;
        grants.insert(g.clone(), slots);
        grant_of_tenant.insert(tenant, g);
    }

    // Phase 1: 64 concurrent creates, interleaved across the tenants.
    let requests: Vec<(&str, String)> = (0..64)
        .map(|i| (TENANTS[i % 3].0, format!("c{i}")))
        .collect();
    let answers = futures::future::join_all(requests.iter().map(|(tenant, key)| {
        InstanceBuilder::new(&p)
            .by(tenant, &tokens[tenant])
            .key(key)
            .send(&s)
    }))
    .await;
    let (ok, capacity, quota) = classify(&answers);
    // Demand (25 within quotas) exceeds the 20 slots: every grant and every
    // ordinary slot ends up taken, never more.
    assert_eq!(ok, 20, "capacity {capacity}, quota {quota}");
    assert!(capacity > 0);
    let counts = check_invariants(&s, &p, &tokens, &grants).await;
    assert_eq!(counts.values().sum::<i64>(), 20);
    assert!(counts["initech"] <= 5);
    let rows = instances_in_db(&s).await;
    for (tenant, slots, _) in TENANTS {
        let g = &grant_of_tenant[tenant];
        let held: Vec<_> = rows
            .iter()
            .filter(|r| r.grant_id.as_deref() == Some(g.as_str()))
            .collect();
        assert_eq!(
            i64::try_from(held.len()).expect("count"),
            slots,
            "{tenant}'s grant is full"
        );
        assert!(held.iter().all(|r| r.tenant_id == tenant));
    }
    // Every success is answered with a placement matching the stored one.
    for a in answers.iter().filter(|a| a.status == 200) {
        let inst = &a.body["instance"];
        let row = rows
            .iter()
            .find(|r| r.instance_id == id(inst))
            .expect("row");
        assert_eq!(row.placement_kind, kind(inst));
        assert_eq!(row.grant_id, grant_of(inst));
    }

    // Phase 2: a storm of stops, starts, deletes and creates at once.
    let live: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| {
            (
                r.tenant_id.clone(),
                r.instance_id.clone(),
                r.placement_kind.clone(),
            )
        })
        .collect();
    let mut ops = Vec::new();
    for (i, (tenant, inst, _)) in live.iter().enumerate() {
        let method = ["stop", "delete", "stop", "start"][i % 4];
        ops.push((tenant.clone(), method.to_owned(), Some(inst.clone())));
    }
    for i in 0..24 {
        ops.push((TENANTS[i % 3].0.to_owned(), "create".to_owned(), None));
    }
    let answers =
        futures::future::join_all(ops.iter().enumerate().map(|(i, (tenant, method, inst))| {
            let token = tokens[tenant.as_str()].clone();
            let s = &s;
            let p = &p;
            async move {
                match inst {
                    Some(inst) => instance_op(s, &token, tenant, method, inst).await,
                    None => {
                        InstanceBuilder::new(p)
                            .by(tenant, &token)
                            .key(&format!("d{i}"))
                            .send(s)
                            .await
                    }
                }
            }
        }))
        .await;
    for a in &answers {
        assert!(
            a.status == 200
                || (a.status == 409 && a.code() == "CAPACITY_UNAVAILABLE")
                || (a.status == 429 && a.code() == "QUOTA_EXCEEDED"),
            "unexpected answer {} {}",
            a.status,
            a.body
        );
    }
    check_invariants(&s, &p, &tokens, &grants).await;

    // Phase 3: everyone restarts what is stopped, concurrently; still sound.
    let rows = instances_in_db(&s).await;
    let stopped: Vec<_> = rows.iter().filter(|r| r.state == "stopped").collect();
    let answers = futures::future::join_all(stopped.iter().map(|r| {
        let token = tokens[r.tenant_id.as_str()].clone();
        let s = &s;
        async move { instance_op(s, &token, &r.tenant_id, "start", &r.instance_id).await }
    }))
    .await;
    classify(&answers);
    check_invariants(&s, &p, &tokens, &grants).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tenant_deletion_racing_creates_and_starts_leaves_nothing_of_the_tenant_behind() {
    let (s, p) = platform_at_t0(40).await;
    for round in 0..6 {
        let tenant = format!("racer{round}");
        let token = s.tenant(&tenant).await;
        offer(
            &s,
            &p.pool,
            &tenant,
            json!({ "instances": 40, "vcpus": 400, "memoryGib": 4000 }),
        )
        .await;
        GrantBuilder::new(&p)
            .grantee(&tenant)
            .term(T0, T0 + 10 * HOUR)
            .create(&s)
            .await;
        // One instance in the grant, and stopped instances without a slot.
        InstanceBuilder::new(&p)
            .by(&tenant, &token)
            .key("g")
            .create(&s)
            .await;
        let mut stopped = Vec::new();
        for k in 0..8 {
            let i = InstanceBuilder::new(&p)
                .by(&tenant, &token)
                .key(&format!("s{k}"))
                .create(&s)
                .await;
            instance_op_ok(&s, &token, &tenant, "stop", &id(&i)).await;
            stopped.push(id(&i));
        }
        let starts = stopped
            .iter()
            .map(|i| instance_op(&s, &token, &tenant, "start", i));
        let keys: Vec<String> = (0..16).map(|k| format!("c{k}")).collect();
        let creates = keys
            .iter()
            .map(|k| InstanceBuilder::new(&p).by(&tenant, &token).key(k).send(&s));
        let delete = delete_tenant(&s, &tenant);
        let (starts, creates, deleted) = tokio::join!(
            futures::future::join_all(starts),
            futures::future::join_all(creates),
            delete
        );
        deleted.ok();
        for a in starts.iter().chain(creates.iter()) {
            assert!(
                matches!(
                    (a.status, a.code()),
                    (200, _) | (401, "UNAUTHENTICATED") | (409, "INVALID_STATE")
                ),
                "round {round}: unexpected answer {} {}",
                a.status,
                a.body
            );
        }
        let rows = instances_in_db(&s).await;
        let left: Vec<_> = rows
            .iter()
            .filter(|r| r.tenant_id == tenant && r.state != "deleted")
            .collect();
        assert!(
            left.is_empty(),
            "round {round}: live instances of a deleted tenant: {left:?}"
        );
        let q = quotas_in_db(&s, &tenant).await;
        assert!(q.iter().all(|r| r.used == 0), "round {round}: {q:?}");
    }
}

/// `instances.start` of a stopped instance whose grant has just ended
/// races `instances.create` in the same pool, 50 times. Settlement moves
/// the instance off its reservation (`res-b`), so the start places it over
/// the pool, whose candidates `res-a` and `res-b` the create locks in id
/// order (it reaches `res-b` because the tenant holds a live, full grant
/// there). Each answers 200 every round: neither waits on a reservation
/// behind one it holds, so PostgreSQL never has to break a deadlock (which
/// would surface as a 500).
#[tokio::test(flavor = "multi_thread")]
async fn start_after_its_grant_ended_races_create_without_deadlock() {
    let (s, p) = platform_at_t0(8).await;
    let (_fake, account_b, res_b) = second_account(&s, &p.pool, 8).await;
    assert!(p.reservation < res_b, "res-a comes first in the lock order");
    let token = p.tenant_token.clone();
    let acme = p.tenant.as_str();
    // A live grant on res-b, full, so that creates visit res-b and an
    // ending grant's instances have no renewal to move into.
    let long = GrantBuilder::on(&account_b, &res_b)
        .grantee(acme)
        .term(T0, T0 + 1000 * HOUR)
        .create(&s)
        .await;
    let held = InstanceBuilder::new(&p)
        .by(acme, &token)
        .key("held")
        .create(&s)
        .await;
    assert_eq!(grant_of(&held).as_deref(), Some(long.as_str()));

    let mut now = T0;
    for round in 0..50 {
        let ending = GrantBuilder::on(&account_b, &res_b)
            .grantee(acme)
            .term(now, now + HOUR)
            .create(&s)
            .await;
        let key = format!("x{round}");
        let x = InstanceBuilder::new(&p)
            .by(acme, &token)
            .key(&key)
            .create(&s)
            .await;
        assert_eq!(
            grant_of(&x).as_deref(),
            Some(ending.as_str()),
            "round {round}"
        );
        instance_op_ok(&s, &token, acme, "stop", &id(&x)).await;
        now += 2 * HOUR;
        s.set_clock(now).await;

        let key = format!("y{round}");
        let x = id(&x);
        let (started, created) = tokio::join!(
            instance_op(&s, &token, acme, "start", &x),
            InstanceBuilder::new(&p).by(acme, &token).key(&key).send(&s),
        );
        assert_eq!(
            started.status, 200,
            "round {round}: start: {}",
            started.body
        );
        assert_eq!(
            created.status, 200,
            "round {round}: create: {}",
            created.body
        );
        let started = &started.body["instance"];
        assert_eq!(started["state"], "running", "round {round}");
        assert_eq!(grant_of(started), None, "round {round}: its grant ended");
        // Both landed on ordinary slots; delete them for the next round.
        for inst in [started.clone(), created.body["instance"].clone()] {
            instance_op_ok(&s, &token, acme, "delete", &id(&inst)).await;
        }
    }
}
