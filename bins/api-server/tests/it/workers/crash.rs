//! Workers SIGKILLed at random moments, dozens of times, in the middle of
//! passes with plenty of work (contract 6: "safe ... with a worker killed at
//! any point: no usage record is lost or written twice, no event is lost or
//! published twice"). One `--once` finishes; an independent audit then finds
//! every record and event exactly once.

use std::time::{Duration, Instant};

use serde_json::json;

use diesel::QueryableByName;
use diesel::sql_types::BigInt;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::support::builders::{GrantBuilder, InstanceBuilder};
use crate::support::clock::{MIN, SEC, T0};
use crate::support::db::db;
use crate::support::fixtures::{id, offer, platform_at_t0};
use crate::support::meter::{Sim, audit, usage_everyone};
use crate::support::rng::Rng;
use crate::support::worker;

/// Kill rounds (each kills one or two workers).
const ROUNDS: usize = 40;

#[tokio::test(flavor = "multi_thread")]
async fn workers_killed_mid_pass_lose_and_duplicate_nothing() {
    let started = Instant::now();
    let (s, p) = platform_at_t0(400).await;
    offer(
        &s,
        &p.pool,
        "acme",
        json!({ "instances": 60, "vcpus": 240, "memoryGib": 960 }),
    )
    .await;
    let mut tenants = vec![("acme".to_owned(), p.tenant_token.clone())];
    for name in ["beta", "gamma"] {
        let token = s.tenant(name).await;
        offer(
            &s,
            &p.pool,
            name,
            json!({ "instances": 40, "vcpus": 160, "memoryGib": 640 }),
        )
        .await;
        tenants.push((name.to_owned(), token));
    }
    let mut rng = Rng::from_env("crash");
    let mut sim = Sim::new(tenants);

    // Plenty of work per pass: ~150 grants over 30 hours, ~70 instances.
    for i in 0..150 {
        let tenant = sim.tenants[i % 3].0.clone();
        let starts = T0 + rng.range(0, 30 * 60) * MIN;
        let ends = starts + rng.range(60, 20 * 60) * MIN + rng.range(0, 3599) * SEC;
        let g = GrantBuilder::new(&p)
            .grantee(&tenant)
            .slots(rng.range(1, 2))
            .term(starts, ends)
            .create(&s)
            .await;
        sim.grants.push(g);
    }
    for i in 0..70 {
        let (tenant, token) = sim.tenants[i % 3].clone();
        let id = id(&InstanceBuilder::new(&p)
            .by(&tenant, &token)
            .create(&s)
            .await);
        sim.log.started(&id, T0);
        sim.instances.push((i % 3, id, false));
    }
    let setup = started.elapsed();

    let mut now = T0;
    let (mut kills, mut kills_after_connect, mut passes_done) = (0, 0, 0);
    let mut conn = db(&s).await;
    for round in 0..ROUNDS {
        now += rng.range(60, 150) * MIN + rng.range(0, 3599) * SEC + rng.range(0, 999);
        s.set_clock(now).await;
        for _ in 0..rng.range(0, 3) {
            sim.step(&s, &p, &mut rng, now).await;
        }
        let replicas = if rng.chance(30) { 2 } else { 1 };
        let running: Vec<worker::Running> = (0..replicas)
            .map(|_| {
                let mut cmd = worker::command(&s);
                cmd.env("BC_INTERVAL_MS", "5")
                    .env("RUST_LOG", "info")
                    .env("NO_COLOR", "1");
                worker::Running::spawn(cmd)
            })
            .collect();
        // Every fourth round waits for the killed worker to have metered
        // something, however slow the machine is to start it, so that some
        // kills land in (or after) a metering pass and not only in the scan.
        if round % 4 == 3 {
            let before = records(&mut conn).await;
            let deadline = Instant::now() + Duration::from_secs(20);
            while records(&mut conn).await == before && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        let wait = u64::try_from(rng.range(5, 200)).expect("ms");
        tokio::time::sleep(Duration::from_millis(wait)).await;
        for w in running {
            let err = w.kill().await;
            kills += 1;
            if err.contains("reconciler-worker started") {
                kills_after_connect += 1;
            }
            passes_done += err.lines().filter(|l| l.contains("pass done")).count();
            assert!(!err.contains("pass failed"), "{err}");
        }
    }
    let killed_phase = started.elapsed();
    let written_by_killed = usage_everyone(&s).await.len();
    worker::once(&s, &[]).await;
    let summary = audit(&s, &sim.tenant_refs(), &sim.log).await;
    eprintln!(
        "crash test: {kills} SIGKILLs ({kills_after_connect} after the worker connected, \
         {passes_done} passes completed before them), \
         {} operations, {} of {} records written by killed workers, {summary:?}; \
         setup {:.1} s, kill rounds {:.1} s, total {:.1} s",
        sim.ops,
        written_by_killed,
        summary.records,
        setup.as_secs_f64(),
        (killed_phase - setup).as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    assert!(kills >= ROUNDS);
    assert!(
        written_by_killed > 0,
        "the killed workers never got anything done"
    );
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// The usage records written so far, read directly from the database.
pub(crate) async fn records(conn: &mut AsyncPgConnection) -> i64 {
    diesel::sql_query("SELECT count(*) AS n FROM usage_records")
        .get_result::<Count>(conn)
        .await
        .expect("count usage records")
        .n
}
