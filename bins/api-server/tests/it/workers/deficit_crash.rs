//! Deficit credits written by worker replicas SIGKILLed at random while the
//! clock walks through shortfalls (contract 5.4, 6): every credit is written
//! once, and each grant's records are exactly what its share of the
//! shortfall comes to, computed here minute by minute.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::crash::records;
use crate::billing::deficit::{DEFICIT, GRANTS, total_at};
use crate::support::builders::GrantBuilder;
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::db::db;
use crate::support::fixtures::{end_grant, get_grant, platform_at_t0};
use crate::support::meter::{fmt_micros, usage_all};
use crate::support::rng::Rng;
use crate::support::server::ROOT_TOKEN;
use crate::support::worker;

/// A common multiple of every possible commitment (1 to 8 slots): shares
/// are counted in 1/840 of a slot, so the sums below are exact integers.
const L: i64 = 840;
const ROUNDS: usize = 20;

/// A grant as the oracle sees it.
struct G {
    id: String,
    slots: i64,
    from: i64,
    to: i64,
}

/// The total at `t` from the changes seen (the first one before them all).
fn total(history: &[(i64, i64)], t: i64) -> i64 {
    history
        .iter()
        .take_while(|(at, _)| *at <= t)
        .last()
        .unwrap_or(&history[0])
        .1
}

/// The expected `(periodStart, quantity)` credits of `grants[k]` over the
/// hours ended by `now`: the share of each minute summed in 1/840
/// slot-milliseconds, the cumulative value rounded half-up at each hour.
fn expected(grants: &[G], k: usize, history: &[(i64, i64)], now: i64) -> Vec<(i64, String)> {
    let g = &grants[k];
    let ended = now - now.rem_euclid(HOUR);
    // micro-slot-hours of `n` / 840 slot-ms, rounded half-up.
    let round = |n: i128| (10 * n + 18 * i128::from(L)) / (36 * i128::from(L));
    let (mut cum, mut out) = (0i128, Vec::new());
    let mut bucket = g.from - g.from.rem_euclid(HOUR);
    while bucket < ended.min(g.to) {
        let mut used = 0i128;
        let mut t = bucket.max(g.from);
        while t < (bucket + HOUR).min(g.to) {
            let committed: i64 = grants
                .iter()
                .filter(|x| x.from <= t && t < x.to)
                .map(|x| x.slots)
                .sum();
            let short = (committed - total(history, t)).max(0);
            if short > 0 {
                used += i128::from(short * g.slots * (L / committed) * MIN);
            }
            t += MIN;
        }
        if used > 0 {
            let q = round(cum + used) - round(cum);
            out.push((bucket, fmt_micros(i64::try_from(q).expect("fits"))));
        }
        cum += used;
        bucket += HOUR;
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn credits_survive_killed_replicas_exactly_once() {
    let started = Instant::now();
    let (s, p) = platform_at_t0(8).await;
    let mut rng = Rng::from_env("deficit-crash");
    let mut grants = Vec::new();
    for (slots, from, to) in [
        (3, T0, T0 + 8 * HOUR),
        (2, T0 + 20 * MIN, T0 + 6 * HOUR),
        (1, T0, T0 + 5 * HOUR + 10 * MIN),
        (2, T0 + HOUR, T0 + 7 * HOUR),
    ] {
        let id = GrantBuilder::new(&p)
            .slots(slots)
            .term(from, to)
            .create(&s)
            .await;
        grants.push(G {
            id,
            slots,
            from,
            to,
        });
    }
    let mut history = vec![(T0, 8)];
    let mut conn = db(&s).await;
    let mut last_hour = T0 / HOUR;
    let (mut now, mut kills, mut ended_one) = (T0, 0, false);
    for round in 0..ROUNDS {
        now += rng.range(11, 37) * MIN;
        // The provider's total moves about (down to 3 of 8 committed).
        if round == 0 || rng.chance(60) {
            let t = [8, 7, 6, 5, 4, 3][rng.pick(6)];
            total_at(&s, &p, t, now).await;
            history.push((now, t));
        } else {
            s.set_clock(now).await;
        }
        // Root ends the last grant part-way: the others' shares change.
        if !ended_one && now > T0 + 3 * HOUR {
            end_grant(&s, &p.account, &grants[3].id).await.ok();
            grants[3].to = now;
            ended_one = true;
        }
        let before = records(&mut conn).await;
        let replicas: Vec<worker::Running> = (0..3)
            .map(|_| {
                let mut cmd = worker::command(&s);
                cmd.args(["--only", GRANTS]).env("BC_INTERVAL_MS", "5");
                worker::Running::spawn(cmd)
            })
            .collect();
        // Every third round that has an hour to meter waits for a replica to
        // have written something, however slow the machine is to start
        // them, so some kills land in or after a metering pass.
        if round % 3 == 2 && now / HOUR > last_hour {
            let deadline = Instant::now() + Duration::from_secs(20);
            while records(&mut conn).await == before && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        last_hour = now / HOUR;
        for w in replicas {
            let wait = u64::try_from(rng.range(5, 250)).expect("ms");
            tokio::time::sleep(Duration::from_millis(wait)).await;
            let err = w.kill().await;
            assert!(!err.contains("pass failed"), "{err}");
            kills += 1;
        }
    }
    assert!(ended_one, "the walk reached the grant's end");
    let everyone = json!({ "all": true, "meter": DEFICIT });
    let by_killed = usage_all(&s, ROOT_TOKEN, "root", everyone).await.len();
    // One clean pass finishes what the killed replicas left.
    worker::once(&s, &[GRANTS]).await;

    let mut credited = 0;
    for (k, g) in grants.iter().enumerate() {
        let filter = json!({ "grantId": g.id, "meter": DEFICIT });
        let got: Vec<(i64, String)> = usage_all(&s, &p.tenant_token, "acme", filter)
            .await
            .iter()
            .map(|r: &Value| {
                let ps = r["periodStart"].as_i64().expect("periodStart");
                (ps, r["quantity"].as_str().expect("quantity").to_owned())
            })
            .collect();
        let want = expected(&grants, k, &history, now);
        assert_eq!(got, want, "grant {k} ({}), history {history:?}", g.id);
        let sum: i64 = want
            .iter()
            .map(|(_, q)| crate::support::meter::micros(q))
            .sum();
        assert_eq!(
            get_grant(&s, &g.id).await["deficitSlotHours"],
            fmt_micros(sum)
        );
        credited += want.len();
    }
    eprintln!(
        "deficit crash test: {kills} SIGKILLs over {ROUNDS} rounds to {} h, {} total changes, \
         {credited} credit records ({by_killed} written by killed replicas), {:.1} s",
        (now - T0) / HOUR,
        history.len() - 1,
        started.elapsed().as_secs_f64()
    );
    assert!(credited > 0, "the walk never fell short: {history:?}");
    assert!(by_killed > 0, "the killed replicas never credited anything");
}
