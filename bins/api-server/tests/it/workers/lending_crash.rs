//! Three worker replicas SIGKILLed at random while a grantee lends its
//! grant's idle slots, borrowers come and go and the grantee takes slots
//! back, with fake-gce slow (every operation takes several reads) and
//! losing answers (contract 3.14: crash at any point, nothing lost, nothing
//! billed twice, no slot lent twice, no borrower left running in a slot the
//! grantee needs). After every phase: the VMs in the grant never exceed its
//! slots and no borrower is in a grant that does not lend. At the end: no
//! VM was made twice, none is left, and every instance's billed hours equal
//! the running intervals fake-gce saw, borrowers' as interruptible.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Text};
use diesel_async::RunQueryDsl;
use serde_json::json;

use super::vm_crash::{kill_while_steps_run, replica, settle, shake, unsettled};
use crate::support::builders::{GrantBuilder, InstanceBuilder, PlatformBuilder};
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::db::db;
use crate::support::fixtures::{id, instance_op, tenant_with_pool};
use crate::support::gce::Gce;
use crate::support::meter::{micros, usage_of_instance};
use crate::support::rng::Rng;
use crate::support::server::Server;
use crate::support::worker::{self, Running};

/// Phases: each sets the clock, makes a few changes, kills replicas while
/// the steps run, then waits until every step has ended.
const PHASES: usize = 10;

/// The grant's slots (of the reservation's 4).
const SLOTS: i64 = 3;

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// The live instances in the grant (the grantee's and the borrowers'),
/// and the borrowers in it while it does not lend and that are not being
/// interrupted.
async fn grant_books(conn: &mut diesel_async::AsyncPgConnection, grant: &str) -> (i64, i64) {
    let live: Count = diesel::sql_query(
        "SELECT count(*) AS n FROM instances WHERE grant_id = $1 \
         AND state NOT IN ('deleted', 'failed')",
    )
    .bind::<Text, _>(grant)
    .get_result(conn)
    .await
    .expect("count");
    let stray: Count = diesel::sql_query(
        "SELECT count(*) AS n FROM instances i JOIN grants g ON g.grant_id = i.grant_id \
         WHERE i.grant_id = $1 AND i.placement_kind = 'lent' AND NOT g.lending \
           AND i.interrupt_at IS NULL AND i.state NOT IN ('deleted', 'failed')",
    )
    .bind::<Text, _>(grant)
    .get_result(conn)
    .await
    .expect("count");
    (live.n, stray.n)
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_killed_while_slots_are_lent_and_reclaimed_lose_and_duplicate_nothing() {
    let started = Instant::now();
    let s = Server::start().await;
    s.set_clock(T0).await;
    // No notice: an interruption is due at once, so each phase settles.
    let p = PlatformBuilder::new()
        .slots(4)
        .managed()
        .lending(json!({ "noticeSeconds": 0 }))
        .gce(Gce::start_polls(3).await)
        .build(&s)
        .await;
    p.gce.set_clock(T0).await;
    let grant = GrantBuilder::new(&p)
        .slots(SLOTS)
        .term(T0, T0 + 100 * HOUR)
        .create(&s)
        .await;
    let acme = p.tenant_token.clone();
    let globex = tenant_with_pool(&s, "globex", &p.pool).await;
    let lend = |on: bool| json!({ "tenantId": "acme", "grantId": grant, "lend": on });
    s.call(&acme, "reservationGrants/setLending", lend(true))
        .await
        .ok();
    let tokens = BTreeMap::from([("acme", acme.clone()), ("globex", globex.clone())]);
    let mut rng = Rng::from_env("lending-crash");
    let mut replicas: Vec<Running> = (0..3).map(|_| replica(&s)).collect();
    let mut conn = db(&s).await;
    let mut instances: Vec<(&str, String)> = Vec::new();
    let (mut now, mut kills) = (T0, 0);
    for phase in 0..=PHASES {
        now += rng.range(5, 50) * MIN;
        s.set_clock(now).await;
        p.gce.set_clock(now).await;
        shake(&p.gce, &mut rng).await;
        let last = phase == PHASES;
        if last {
            for (tenant, inst) in &instances {
                let a = instance_op(&s, &tokens[tenant], tenant, "delete", inst).await;
                assert!(a.status == 200 || a.status == 409, "{:?}", a.body);
            }
        } else {
            if phase == 0 {
                // Borrowers fill the grant, then the grantee needs a slot:
                // at least one reclaim runs among the kills.
                for k in 0..SLOTS {
                    let a = InstanceBuilder::new(&p)
                        .by("globex", &globex)
                        .field("interruptible", json!(true))
                        .key(&format!("b-{k}"))
                        .create(&s)
                        .await;
                    instances.push(("globex", id(&a)));
                }
                let a = InstanceBuilder::new(&p).key("a-0").create(&s).await;
                assert_eq!(a["placement"]["kind"], "grant");
                instances.push(("acme", id(&a)));
            }
            if rng.chance(15) {
                let on = rng.chance(50);
                s.call(&acme, "reservationGrants/setLending", lend(on))
                    .await
                    .ok();
            }
            for k in 0..rng.range(3, 7) {
                let live = instances.len();
                match rng.pick(7) {
                    // A borrower, or the grantee (which may take a slot back).
                    pick @ (0..=3) => {
                        let (tenant, body) = if pick < 2 {
                            ("acme", InstanceBuilder::new(&p))
                        } else {
                            (
                                "globex",
                                InstanceBuilder::new(&p)
                                    .by("globex", &globex)
                                    .field("interruptible", json!(true)),
                            )
                        };
                        let a = body.key(&format!("c-{phase}-{k}")).send(&s).await;
                        if a.status == 200 {
                            instances.push((tenant, id(&a.body["instance"])));
                        } else {
                            a.err(409, "CAPACITY_UNAVAILABLE");
                        }
                    }
                    pick if live > 0 => {
                        let (tenant, inst) = instances[rng.pick(live)].clone();
                        let method = ["stop", "start", "delete"][pick - 4];
                        let a = instance_op(&s, &tokens[tenant], tenant, method, &inst).await;
                        assert!(
                            a.status == 200 || a.status == 409,
                            "{method}: {} {:?}",
                            a.status,
                            a.body
                        );
                    }
                    _ => {}
                }
            }
        }
        kills += kill_while_steps_run(&mut replicas, &mut rng, || replica(&s)).await;
        // Interruptions are due at once: they end with the steps.
        settle(&mut conn, phase).await;
        let (live, stray) = grant_books(&mut conn, &grant).await;
        assert!(live <= SLOTS, "phase {phase}: {live} VMs in {SLOTS} slots");
        assert_eq!(
            stray, 0,
            "phase {phase}: a borrower in a grant that does not lend"
        );
    }
    p.gce.delay(0).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    for r in replicas {
        r.kill().await;
    }
    assert!(unsettled(&mut conn).await == 0);

    // No VM remains, none was made twice.
    let vms = p.gce.vms().await;
    assert!(vms.is_empty(), "vms left without a live instance: {vms:?}");
    let (runs, created) = p.gce.vm_runs().await;
    for (name, n) in created.as_object().expect("created") {
        assert_eq!(n, 1, "vm {name} was made {n} times");
    }
    // Each one interrupted at most once.
    let interrupting = s
        .events_of(&globex, "globex", "instance.interrupting")
        .await;
    let mut once = BTreeMap::<String, usize>::new();
    for e in &interrupting {
        *once
            .entry(
                e["data"]["instanceId"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
            .or_default() += 1;
    }
    assert!(once.values().all(|n| *n == 1), "{once:?}");
    assert!(!once.is_empty(), "no borrower was interrupted");
    // Billed hours equal the running intervals the fake saw, per instance,
    // borrowers' as interruptible in the lending grant.
    s.set_clock(now + 2 * HOUR).await;
    worker::once(&s, &["vps.usage"]).await;
    let mut checked = 0;
    for (tenant, inst) in &instances {
        let token = &tokens[tenant];
        let v = instance_op(&s, token, tenant, "get", inst).await.ok();
        let Some(name) = v["instance"]["vm"]["name"].as_str() else {
            continue;
        };
        let ran_ms: i64 = runs[name]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|span| {
                span[1].as_i64().expect("every run ended") - span[0].as_i64().expect("from")
            })
            .sum();
        let records = usage_of_instance(&s, token, tenant, inst).await;
        let billed: i64 = records
            .iter()
            .map(|r| micros(r["quantity"].as_str().expect("quantity")))
            .sum();
        for r in &records {
            if *tenant == "globex" {
                assert_eq!(r["meter"], "vm.interruptible.hours", "{r}");
                assert_eq!(r["grantId"], json!(grant), "{r}");
            } else {
                assert_ne!(r["meter"], "vm.interruptible.hours", "{r}");
            }
        }
        let expected = (i128::from(ran_ms) * 1_000_000 + 1_800_000) / 3_600_000;
        // Several series (an acme instance moved between its grant and an
        // ordinary slot) round each on its own: within a micro per series.
        let series = records
            .iter()
            .map(|r| r["meter"].as_str().unwrap_or_default())
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let slack = i128::try_from(series).unwrap_or(1);
        assert!(
            (i128::from(billed) - expected).abs() <= slack,
            "{tenant} {inst} ({name}): billed {billed}, ran {ran_ms} ms per the fake"
        );
        checked += 1;
    }
    assert!(checked >= 3, "too few instances ran: {checked}");
    assert!(kills >= PHASES, "kills: {kills}");
    eprintln!(
        "lending crash: {} instances, {checked} ran, {} interrupted, {kills} kills, {:.1} s",
        instances.len(),
        interrupting.len(),
        started.elapsed().as_secs_f64()
    );
}
