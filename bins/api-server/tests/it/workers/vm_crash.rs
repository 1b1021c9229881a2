//! Three worker replicas SIGKILLed at random while managed instances are
//! created, stopped, started and deleted, and fake-gce is slow (every
//! operation takes several reads), loses answers and refuses creates
//! (contract 3.12: "a worker that dies at any point loses nothing and
//! duplicates nothing"). Afterwards: no VM name was made twice, no labelled
//! VM is left without a live instance, every live instance's VM is in the
//! status its record says, and each instance's billed hours equal the
//! running intervals fake-gce saw, with one `instance.running` per run.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use diesel::QueryableByName;
use diesel::sql_types::BigInt;
use diesel_async::RunQueryDsl;
use serde_json::{Value, json};

use crate::support::builders::{InstanceBuilder, PlatformBuilder};
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::db::db;
use crate::support::fixtures::{id, instance_op};
use crate::support::gce::Gce;
use crate::support::meter::usage_of_instance;
use crate::support::rng::Rng;
use crate::support::server::Server;
use crate::support::worker::{self, Running};

/// Phases: each sets the clock, makes a few changes, kills replicas while
/// the steps run, then waits until every step has ended.
const PHASES: usize = 10;

/// A replica running only `vps.instances`, with short leases and backoffs.
pub(super) fn replica(s: &Server) -> Running {
    let mut cmd = worker::command(s);
    cmd.args(["--only", "vps.instances"])
        .env("BC_INTERVAL_MS", "200")
        .env("BC_VM_LIST_INTERVAL", "0.3s")
        .env("BC_VM_LEASE", "3s")
        .env("BC_VM_MAX_BACKOFF", "1s")
        .env("BC_VM_STEP_TIMEOUT", "300");
    Running::spawn(cmd)
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// Open steps and instances between states.
pub(super) async fn unsettled(conn: &mut diesel_async::AsyncPgConnection) -> i64 {
    let c: Count = diesel::sql_query(
        "SELECT (SELECT count(*) FROM vm_steps WHERE state = 'open') \
              + (SELECT count(*) FROM instances WHERE state IN \
                 ('provisioning', 'stopping', 'starting', 'deleting')) AS n",
    )
    .get_result(conn)
    .await
    .expect("count");
    c.n
}

/// Makes fake-gce lose the answers of the next one or two mutations half
/// the time, and answer slowly (150 ms) a third of the time.
pub(super) async fn shake(gce: &Gce, rng: &mut Rng) {
    if rng.chance(50) {
        gce.fail_mutations(u32::try_from(rng.range(1, 2)).unwrap_or(1))
            .await;
    }
    gce.delay(if rng.chance(30) { 150 } else { 0 }).await;
}

/// Kills a replica at random every 50 to 400 ms for 300 to 1500 ms while
/// the steps run, starting another (`spawn`) for each; returns the kills.
pub(super) async fn kill_while_steps_run(
    replicas: &mut Vec<Running>,
    rng: &mut Rng,
    spawn: impl Fn() -> Running,
) -> usize {
    let mut kills = 0;
    let until =
        Instant::now() + Duration::from_millis(u64::try_from(rng.range(300, 1500)).unwrap_or(500));
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(
            u64::try_from(rng.range(50, 400)).unwrap_or(100),
        ))
        .await;
        let k = rng.pick(replicas.len());
        let victim = replicas.swap_remove(k);
        victim.kill().await;
        kills += 1;
        replicas.push(spawn());
    }
    kills
}

/// Waits until every step has ended (a killed replica's lease runs out
/// first), at most 90 s.
pub(super) async fn settle(conn: &mut diesel_async::AsyncPgConnection, phase: usize) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while unsettled(conn).await > 0 {
        assert!(
            Instant::now() < deadline,
            "steps did not settle in phase {phase}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_killed_mid_step_make_no_second_vm_and_bill_what_ran() {
    let started = Instant::now();
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = PlatformBuilder::new()
        .slots(6)
        .managed()
        .gce(Gce::start_polls(3).await)
        .build(&s)
        .await;
    p.gce.set_clock(T0).await;
    let t = p.tenant_token.clone();
    let mut rng = Rng::from_env("vm-crash");
    let mut replicas: Vec<Running> = (0..3).map(|_| replica(&s)).collect();
    let mut conn = db(&s).await;
    let mut instances: Vec<String> = Vec::new();
    let (mut now, mut kills) = (T0, 0);
    for phase in 0..=PHASES {
        now += rng.range(5, 50) * MIN;
        s.set_clock(now).await;
        p.gce.set_clock(now).await;
        if rng.chance(30) {
            p.gce.fail_creates(1, "QUOTA_EXCEEDED").await;
        }
        shake(&p.gce, &mut rng).await;
        let last = phase == PHASES;
        let changes = if last {
            instances.len()
        } else {
            usize::try_from(rng.range(2, 5)).unwrap_or(2)
        };
        for k in 0..changes {
            let live = instances.len();
            if last && live == 0 {
                break;
            }
            let pick = if last { 4 } else { rng.pick(5) };
            if pick < 2 || live == 0 {
                let key = format!("c-{phase}-{k}");
                let a = InstanceBuilder::new(&p).key(&key).send(&s).await;
                if a.status == 200 {
                    instances.push(id(&a.body["instance"]));
                }
                continue;
            }
            let target = if last {
                instances[k].clone()
            } else {
                instances[rng.pick(live)].clone()
            };
            let method = ["stop", "start", "delete"][pick - 2];
            let a = instance_op(&s, &t, "acme", method, &target).await;
            assert!(
                a.status == 200 || a.status == 409,
                "{method}: {} {:?}",
                a.status,
                a.body
            );
        }
        kills += kill_while_steps_run(&mut replicas, &mut rng, || replica(&s)).await;
        settle(&mut conn, phase).await;
    }
    p.gce.delay(0).await;
    // A listing of the settled world, then the replicas stop.
    tokio::time::sleep(Duration::from_millis(800)).await;
    for r in replicas {
        r.kill().await;
    }
    assert!(unsettled(&mut conn).await == 0);

    let checked = check_books(&s, &p, &t, &instances, now).await;
    assert!(checked >= 3, "too few instances ran: {checked}");
    assert!(kills >= PHASES, "kills: {kills}");
    eprintln!(
        "vm crash: {} instances, {checked} ran, {kills} kills, {:.1} s",
        instances.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Every instance is deleted or failed: no VM remains, none was made twice,
/// and each instance's billed hours equal the running intervals the fake saw
/// (one `instance.running` per run). Returns how many instances ran.
pub(super) async fn check_books(
    s: &Server,
    p: &crate::support::fixtures::Platform,
    t: &str,
    instances: &[String],
    now: i64,
) -> usize {
    // Every instance is deleted or failed now: no VM remains, none was made twice.
    let vms = p.gce.vms().await;
    assert!(vms.is_empty(), "vms left without a live instance: {vms:?}");
    let (runs, created) = p.gce.vm_runs().await;
    for (name, n) in created.as_object().expect("created") {
        assert_eq!(n, 1, "vm {name} was made {n} times");
    }

    // Billed hours equal the running intervals the fake saw, per instance.
    s.set_clock(now + 2 * HOUR).await;
    worker::once(s, &["vps.usage"]).await;
    let running_events = s.events_of(t, "acme", "instance.running").await;
    let mut checked = 0;
    for inst in instances {
        let got = get_vm_name(s, t, inst).await;
        let Some(name) = got else { continue };
        let spans = runs[&name].as_array().cloned().unwrap_or_default();
        let ran_ms: i64 = spans
            .iter()
            .map(|span| {
                let from = span[0].as_i64().expect("from");
                let to = span[1].as_i64().expect("every run ended");
                to - from
            })
            .sum();
        let records = usage_of_instance(s, t, "acme", inst).await;
        let meters: BTreeMap<String, i64> = records.iter().fold(BTreeMap::new(), |mut m, r| {
            *m.entry(r["meter"].as_str().unwrap_or_default().to_owned())
                .or_default() += micros(&r["quantity"]);
            m
        });
        assert!(meters.len() <= 1, "{inst}: one series: {meters:?}");
        let billed: i64 = meters.values().sum();
        let expected = (i128::from(ran_ms) * 1_000_000 + 1_800_000) / 3_600_000;
        assert_eq!(
            i128::from(billed),
            expected,
            "{inst} ({name}): ran {ran_ms} ms per the fake"
        );
        let runs_seen = running_events
            .iter()
            .filter(|e| e["data"]["instanceId"] == json!(inst))
            .count();
        // A VM deleted in the phase it was made in ran for no time: its
        // create was confirmed after the delete was asked for, unseen.
        let runs = spans
            .iter()
            .filter(|span| span[1].as_i64() > span[0].as_i64())
            .count();
        assert_eq!(runs_seen, runs, "{inst}: one instance.running per run");
        checked += 1;
    }
    checked
}

/// An instance's VM name (every instance of a managed pool has one).
async fn get_vm_name(s: &Server, t: &str, inst: &str) -> Option<String> {
    let v = instance_op(s, t, "acme", "get", inst).await.ok();
    v["instance"]["vm"]["name"].as_str().map(str::to_owned)
}

/// A 6-decimal quantity in micros.
fn micros(q: &Value) -> i64 {
    let s = q.as_str().expect("quantity");
    let (whole, frac) = s.split_once('.').expect("decimal");
    whole.parse::<i64>().expect("whole") * 1_000_000 + frac.parse::<i64>().expect("fraction")
}
