//! Three reconciler-worker replicas running at once over two simulated days
//! of grants and instances coming and going (contract 6: "safe with any
//! number of worker replicas running at once"): afterwards every usage record
//! and every grant event exists exactly once.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::builders::GrantBuilder;
use crate::support::clock::{HOUR, MIN, SEC, T0};
use crate::support::fixtures::{Platform, offer, platform_at_t0, reservations};
use crate::support::meter::{Sim, audit, round_micros, total, usage, usage_everyone};
use crate::support::rng::Rng;
use crate::support::server::{ROOT_TOKEN, Server};
use crate::support::worker;

async fn total_seen(s: &Server, p: &Platform) -> i64 {
    reservations(s, &p.account).await[0]["total"]
        .as_i64()
        .expect("total")
}

#[tokio::test(flavor = "multi_thread")]
async fn three_replicas_write_every_record_and_event_exactly_once() {
    let started = Instant::now();
    let (s, p) = platform_at_t0(12).await;
    let beta = s.tenant("beta").await;
    offer(
        &s,
        &p.pool,
        "beta",
        json!({ "instances": 8, "vcpus": 32, "memoryGib": 128 }),
    )
    .await;
    let mut rng = Rng::from_env("three_replicas");
    let mut sim = Sim::new(vec![
        ("acme".to_owned(), p.tenant_token.clone()),
        ("beta".to_owned(), beta),
    ]);
    // A grant over the whole run, so a drop of total below it is "short".
    // It is kept out of `sim.grants`: the simulation ends grants at random,
    // and with this one ended the shrink might find nothing short.
    GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + 50 * HOUR)
        .create(&s)
        .await;

    let workers: Vec<worker::Running> = (0..3)
        .map(|_| {
            let mut cmd = worker::command(&s);
            cmd.env("BC_INTERVAL_MS", "10");
            worker::Running::spawn(cmd)
        })
        .collect();

    eprintln!("setup done at {:.1} s", started.elapsed().as_secs_f64());
    let mut now = T0;
    let mut steps = 0;
    let mut shorted = false;
    while now < T0 + 48 * HOUR {
        now += rng.range(17, 47) * MIN + rng.range(0, 59) * SEC + rng.range(0, 999);
        s.set_clock(now).await;
        steps += 1;
        for _ in 0..rng.range(0, 3) {
            sim.step(&s, &p, &mut rng, now).await;
        }
        if !shorted && now >= T0 + 24 * HOUR {
            // The provider shrinks the reservation below the long grant for a
            // while: the replicas publish capacity-short once.
            shorted = true;
            p.gce.put("res-a", 1, 0, "READY").await;
            let deadline = Instant::now() + Duration::from_secs(30);
            while total_seen(&s, &p).await != 1 {
                assert!(Instant::now() < deadline, "no scan saw the new total");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            p.gce.put("res-a", 12, 0, "READY").await;
            while total_seen(&s, &p).await != 12 {
                assert!(Instant::now() < deadline, "no scan saw the new total");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(
            u64::try_from(rng.range(5, 60)).expect("ms"),
        ))
        .await;
    }
    // Let the replicas catch up with the last step before stopping them.
    tokio::time::sleep(Duration::from_millis(500)).await;
    eprintln!(
        "simulation done at {:.1} s",
        started.elapsed().as_secs_f64()
    );
    for w in workers {
        let err = w.terminate_clean().await;
        assert!(!err.contains("ERROR"), "{err}");
    }
    let by_replicas = usage_everyone(&s).await.len();
    worker::once(&s, &[]).await;
    eprintln!(
        "final pass done at {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let summary = audit(&s, &sim.tenant_refs(), &sim.log).await;
    let short = s
        .events_of(ROOT_TOKEN, "root", "reservation-grant.capacity-short")
        .await;
    assert_eq!(short.len(), 1, "{short:?}");
    assert_eq!(short[0]["data"]["total"], 1);
    eprintln!(
        "three replicas: {steps} clock steps, {} operations, {} grants, {} instances, \
         {by_replicas} records by the replicas, {summary:?}, {:.1} s",
        sim.ops,
        sim.grants.len() + 1,
        sim.instances.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(summary.slot_records > 20, "{summary:?}");
    assert!(
        by_replicas * 10 > summary.records * 9,
        "the replicas wrote {by_replicas} of {} records",
        summary.records
    );
    assert!(summary.instance_records > 50, "{summary:?}");
    // Grants ending during the run had their 1h notices, once each.
    assert!(summary.notices > 0, "{summary:?}");
}

/// `reservationGrants.end` reads "now" before it takes the reservation's
/// lock. A metering pass running while the end waits must not bill the hour
/// the end cuts short: `vps.grants` claims a grant's reservation (skipping
/// locked ones) before metering it. The test holds the reservation's row lock
/// to make the interleaving certain; with the system clock it needs only an
/// `end` in flight across an hour boundary while a worker meters.
#[tokio::test(flavor = "multi_thread")]
async fn an_end_racing_a_metering_pass_bills_nothing_past_ends_at() {
    use diesel::sql_types::{BigInt, Text};
    use diesel_async::RunQueryDsl;

    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }

    let (s, p) = platform_at_t0(4).await;
    let g = GrantBuilder::new(&p)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    s.set_clock(T0 + HOUR - SEC).await;

    let mut lock = storage::db::establish(s.db.url()).await.expect("connect");
    diesel::sql_query("BEGIN")
        .execute(&mut lock)
        .await
        .expect("begin");
    diesel::sql_query("SELECT 1 FROM reservations WHERE reservation_id = $1 FOR UPDATE")
        .bind::<Text, _>(&p.reservation)
        .execute(&mut lock)
        .await
        .expect("lock the reservation");
    // The end reads now (00:59:59) and waits for the reservation.
    let (url, account, grant_id) = (s.url.clone(), p.account.clone(), g.clone());
    let ending = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("{url}/api/compute/reservationGrants/end"))
            .bearer_auth(ROOT_TOKEN)
            .json(&json!({ "tenantId": "root", "accountId": account, "grantId": grant_id }))
            .send()
            .await
            .expect("end")
            .json::<serde_json::Value>()
            .await
            .expect("body")
    });
    let mut watch = storage::db::establish(s.db.url()).await.expect("connect");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let c: Count = diesel::sql_query(
            "SELECT count(*) AS n FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .get_result(&mut watch)
        .await
        .expect("pg_stat_activity");
        if c.n > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the end never waited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Meanwhile the hour ends and a pass meters it.
    s.set_clock(T0 + HOUR).await;
    worker::once(&s, &["vps.grants"]).await;
    diesel::sql_query("COMMIT")
        .execute(&mut lock)
        .await
        .expect("commit");
    let ended = ending.await.expect("end task");
    assert_eq!(ended["grant"]["endsAt"], T0 + HOUR - SEC, "{ended}");
    s.set_clock(T0 + 3 * HOUR).await;
    worker::once(&s, &[]).await;
    let recs = usage(&s, &p.tenant_token, "acme", "vm.grant.slot.hours").await;
    assert_eq!(
        total(&recs),
        round_micros(i128::from(HOUR - SEC)),
        "billed past endsAt: {recs:?}"
    );
}
