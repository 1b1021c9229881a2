//! Crash safety at the provider's real pace (contract 3.12 r4): three
//! worker replicas SIGKILLed at random during a burst of 120 creates and
//! then of their 120 deletes, against a fake whose operations take up to a
//! second and a half, which takes 80 mutating calls a minute and 30
//! operations in flight per project (so steps are paused, capped and handed
//! from a killed replica to another mid-operation). Afterwards, as in
//! `vm_crash`: no VM made twice, none left, billed time equal to what ran.

use std::time::{Duration, Instant};

use super::vm_crash::{check_books, unsettled};
use crate::support::builders::{InstanceBuilder, PlatformBuilder};
use crate::support::clock::{HOUR, T0};
use crate::support::db::db;
use crate::support::fixtures::{id, instance_op, set_quota};
use crate::support::gce::{Gce, PROJECT};
use crate::support::rng::Rng;
use crate::support::server::Server;
use crate::support::worker::{self, Running};

const INSTANCES: usize = 120;

fn replica(s: &Server) -> Running {
    let mut cmd = worker::command(s);
    cmd.args(["--only", "vps.instances"])
        .env("BC_INTERVAL_MS", "200")
        .env("BC_VM_LIST_INTERVAL", "1s")
        .env("BC_VM_LEASE", "3s")
        .env("BC_VM_MAX_BACKOFF", "2s")
        .env("BC_VM_STEP_TIMEOUT", "300");
    Running::spawn(cmd)
}

/// Kills a random replica every 100 to 700 ms, starting a new one each
/// time, until every step has ended (at most `patience`). Returns the kills.
async fn kill_until_settled(
    s: &Server,
    replicas: &mut Vec<Running>,
    rng: &mut Rng,
    patience: Duration,
) -> usize {
    let mut conn = db(s).await;
    let deadline = Instant::now() + patience;
    let mut kills = 0;
    let mut quiet_from = None;
    loop {
        if unsettled(&mut conn).await == 0 {
            return kills;
        }
        assert!(
            Instant::now() < deadline,
            "steps did not settle in {patience:?}"
        );
        // Kill for the first 20 s, then let the replicas finish.
        let killing = *quiet_from.get_or_insert_with(|| Instant::now() + Duration::from_secs(20));
        let wait = u64::try_from(rng.range(100, 700)).unwrap_or(300);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        if Instant::now() < killing {
            let victim = replicas.swap_remove(rng.pick(replicas.len()));
            victim.kill().await;
            kills += 1;
            replicas.push(replica(s));
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_killed_during_a_paced_burst_make_no_second_vm_and_bill_what_ran() {
    let started = Instant::now();
    let s = Server::start().await;
    s.set_clock(T0).await;
    let fake = fake_gce::FakeGce::new(fake_gce::FakeGceConfig::default())
        .with_operation_latency(200, 1500)
        .with_writes_per_min(80)
        .with_concurrent_operations(30);
    let total = i64::try_from(INSTANCES).unwrap_or(0);
    let p = PlatformBuilder::new()
        .slots(total)
        .managed()
        .gce(Gce::start_fake(fake).await)
        .build(&s)
        .await;
    p.gce.set_clock(T0).await;
    set_quota(&s, "acme", &p.pool, "instances", total).await;
    set_quota(&s, "acme", &p.pool, "vcpus", 4 * total).await;
    set_quota(&s, "acme", &p.pool, "memoryGib", 16 * total).await;
    let t = p.tenant_token.clone();
    let mut rng = Rng::from_env("vm-crash-paced");
    let mut replicas: Vec<Running> = (0..3).map(|_| replica(&s)).collect();

    // The burst of creates, with replicas killed while its steps run.
    let mut instances = Vec::new();
    for k in 0..INSTANCES {
        let a = InstanceBuilder::new(&p)
            .key(&format!("b-{k}"))
            .send(&s)
            .await;
        assert_eq!(a.status, 200, "{:?}", a.body);
        instances.push(id(&a.body["instance"]));
    }
    let patience = Duration::from_secs(400);
    let mut kills = kill_until_settled(&s, &mut replicas, &mut rng, patience).await;

    // An hour later, all deleted, with replicas killed again.
    let now = T0 + HOUR;
    s.set_clock(now).await;
    p.gce.set_clock(now).await;
    for inst in &instances {
        let a = instance_op(&s, &t, "acme", "delete", inst).await;
        assert_eq!(a.status, 200, "{:?}", a.body);
    }
    kills += kill_until_settled(&s, &mut replicas, &mut rng, patience).await;
    // A listing of the settled world, then the replicas stop.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for r in replicas {
        r.kill().await;
    }
    let mut conn = db(&s).await;
    assert_eq!(unsettled(&mut conn).await, 0);

    let checked = check_books(&s, &p, &t, &instances, now).await;
    assert!(checked >= INSTANCES / 2, "too few instances ran: {checked}");
    // The quotas were met: the worker was paced, not failed.
    let stats = p.gce.get("stats").await;
    let project = &stats["projects"][PROJECT];
    assert!(
        project["rateRefusals"].as_u64().unwrap_or(0) > 0
            || project["concurrentRefusals"].as_u64().unwrap_or(0) > 0,
        "the burst met a quota: {stats}"
    );
    eprintln!(
        "vm crash at the provider's pace: {} instances, {checked} ran, {kills} kills, {:.1} s, \
         {project}",
        instances.len(),
        started.elapsed().as_secs_f64()
    );
}
