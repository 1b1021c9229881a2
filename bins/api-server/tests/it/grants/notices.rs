//! Grant notices (contract 9, r2) with three reconciler-worker replicas
//! running at once: `reservation-grant.expiring` once per grant and notice,
//! at the instant the clock passes `endsAt - notice`, none for an instant
//! before the grant's start, none once it has ended, `renewal` set when the
//! tenant's next grant is live at `endsAt`; `reservation-grant.underused`
//! once per 24-hour window at most. Each goes to the grantee's log and the
//! root tenant's, with `utilisation` and `suggestedSlots` from the grant's
//! placement history.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Text};
use diesel_async::RunQueryDsl;
use serde_json::{Value, json};

use crate::support::builders::{GrantBuilder, InstanceBuilder};
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::db::db;
use crate::support::fixtures::platform_at_t0;
use crate::support::fixtures::{Platform, end_grant, id, instance_op_ok, offer};
use crate::support::server::{ROOT_TOKEN, Server};
use crate::support::worker;

const DAY: i64 = 24 * HOUR;
const EXPIRING: &str = "reservation-grant.expiring";
const UNDERUSED: &str = "reservation-grant.underused";

/// Three replicas polling every 10 ms.
fn replicas(s: &Server) -> Vec<worker::Running> {
    (0..3)
        .map(|_| {
            let mut cmd = worker::command(s);
            cmd.env("BC_INTERVAL_MS", "10");
            worker::Running::spawn(cmd)
        })
        .collect()
}

async fn stop(replicas: Vec<worker::Running>) {
    for w in replicas {
        w.terminate_clean().await;
    }
}

/// The notices of type `ty` in `tenant`'s log.
async fn notices(s: &Server, token: &str, tenant: &str, ty: &str) -> Vec<Value> {
    s.events_of(token, tenant, ty).await
}

/// Waits until root's log holds `n` events of `ty`.
async fn wait_for(s: &Server, ty: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = notices(s, ROOT_TOKEN, "root", ty).await.len();
        assert!(got <= n, "{got} {ty} events, expected {n}");
        if got == n {
            return;
        }
        assert!(Instant::now() < deadline, "{got} {ty} events, expected {n}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Beta, offered the platform's pool.
async fn beta(s: &Server, p: &Platform) -> String {
    let token = s.tenant("beta").await;
    offer(
        s,
        &p.pool,
        "beta",
        json!({ "instances": 8, "vcpus": 32, "memoryGib": 128 }),
    )
    .await;
    token
}

#[tokio::test(flavor = "multi_thread")]
async fn expiry_notices_go_out_once_at_their_instant_with_three_replicas() {
    let (s, p) = platform_at_t0(8).await;
    let beta_token = beta(&s, &p).await;
    // A: acme's 2 slots for 10 days, one instance held all along; R renews it.
    let a = GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + 10 * DAY)
        .create(&s)
        .await;
    InstanceBuilder::new(&p).create(&s).await;
    let r = GrantBuilder::new(&p)
        .slots(2)
        .term(T0 + 9 * DAY, T0 + 20 * DAY)
        .create(&s)
        .await;
    // C: beta's 26-hour grant from day 2: its 7d notice would come before
    // its start. E: ended by root on day 1, before any of its notices.
    let c = GrantBuilder::new(&p)
        .grantee("beta")
        .term(T0 + 2 * DAY, T0 + 3 * DAY + 2 * HOUR)
        .create(&s)
        .await;
    let e = GrantBuilder::new(&p)
        .grantee("beta")
        .term(T0, T0 + 5 * DAY)
        .create(&s)
        .await;

    // (instant, grant, notice), in time order.
    let mut expected = [
        (T0 + 3 * DAY, a.clone(), "7d"),
        (T0 + 9 * DAY, a.clone(), "1d"),
        (T0 + 10 * DAY - HOUR, a.clone(), "1h"),
        (T0 + 2 * DAY + 2 * HOUR, c.clone(), "1d"),
        (T0 + 3 * DAY + HOUR, c.clone(), "1h"),
        (T0 + 13 * DAY, r.clone(), "7d"),
        (T0 + 19 * DAY, r.clone(), "1d"),
        (T0 + 20 * DAY - HOUR, r.clone(), "1h"),
    ];
    expected.sort();

    let workers = replicas(&s);
    s.set_clock(T0 + DAY).await;
    end_grant(&s, &p.account, &e).await.ok();
    for (k, (at, grant, notice)) in expected.iter().enumerate() {
        // Just before the instant: nothing new, even after a whole pass.
        s.set_clock(at - 1).await;
        worker::once(&s, &["vps.grants"]).await;
        wait_for(&s, EXPIRING, k).await;
        // At it: exactly this one.
        s.set_clock(*at).await;
        worker::once(&s, &["vps.grants"]).await;
        wait_for(&s, EXPIRING, k + 1).await;
        let last = notices(&s, ROOT_TOKEN, "root", EXPIRING).await[k].clone();
        assert_eq!(
            (&last["data"]["grantId"], &last["data"]["notice"]),
            (&json!(grant), &json!(notice)),
            "{last}"
        );
    }
    // Past every end: nothing more.
    s.set_clock(T0 + 21 * DAY).await;
    worker::once(&s, &["vps.grants"]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop(workers).await;
    worker::once(&s, &["vps.grants"]).await;

    let root_log = notices(&s, ROOT_TOKEN, "root", EXPIRING).await;
    let seen: Vec<(i64, String, String)> = root_log
        .iter()
        .map(|e| {
            (
                e["occurredAt"].as_i64().expect("occurredAt"),
                e["data"]["grantId"].as_str().expect("grantId").to_owned(),
                e["data"]["notice"].as_str().expect("notice").to_owned(),
            )
        })
        .collect();
    let want: Vec<(i64, String, String)> = expected
        .iter()
        .map(|(t, g, n)| (*t, g.clone(), (*n).to_owned()))
        .collect();
    assert_eq!(seen, want, "each notice once, at its instant");

    // The grantees' logs hold their own notices, with the same data.
    let acme_log = notices(&s, &p.tenant_token, "acme", EXPIRING).await;
    let beta_log = notices(&s, &beta_token, "beta", EXPIRING).await;
    assert_eq!(acme_log.len(), 6);
    assert_eq!(beta_log.len(), 2);
    for e in acme_log.iter().chain(&beta_log) {
        let twin = root_log
            .iter()
            .find(|r| r["data"] == e["data"])
            .unwrap_or_else(|| panic!("no root twin of {e}"));
        assert_eq!(twin["occurredAt"], e["occurredAt"]);
    }
    assert!(beta_log.iter().all(|e| e["data"]["grantId"] == c.as_str()));

    // The data: A held one instance on two slots all along, R renews it;
    // R and C have no renewal, and C never held anything.
    let of = |g: &str, n: &str| {
        root_log
            .iter()
            .find(|e| e["data"]["grantId"] == g && e["data"]["notice"] == n)
            .map(|e| e["data"].clone())
            .expect("notice")
    };
    let a7 = of(&a, "7d");
    assert_eq!(a7["renewal"], r.as_str(), "{a7}");
    assert_eq!(
        (&a7["utilisation"], &a7["suggestedSlots"]),
        (&json!("0.500000"), &json!(1))
    );
    assert_eq!(
        (&a7["slots"], &a7["startsAt"], &a7["endsAt"], &a7["poolId"]),
        (&json!(2), &json!(T0), &json!(T0 + 10 * DAY), &json!(p.pool))
    );
    assert_eq!(of(&a, "1h")["renewal"], r.as_str());
    let r1 = of(&r, "1h");
    assert!(r1.get("renewal").is_none(), "{r1}");
    let c1 = of(&c, "1d");
    assert_eq!(
        (&c1["utilisation"], &c1["suggestedSlots"]),
        (&json!("0.000000"), &json!(1))
    );
    assert!(
        c1.get("renewal").is_none() && c1.get("projectId").is_none(),
        "{c1}"
    );
    // None for the grant ended early.
    assert!(
        root_log
            .iter()
            .all(|ev| ev["data"]["grantId"] != e.as_str())
    );
}

#[derive(QueryableByName)]
struct Checked {
    #[diesel(sql_type = BigInt)]
    checked_to: i64,
}

/// The end of the last 24-hour window judged for `grant` (0 before any).
async fn judged_to(s: &Server, grant: &str) -> i64 {
    let mut conn = db(s).await;
    let rows: Vec<Checked> =
        diesel::sql_query("SELECT checked_to FROM grant_underuse_checks WHERE grant_id = $1")
            .bind::<Text, _>(grant)
            .load(&mut conn)
            .await
            .expect("checks");
    rows.iter().map(|r| r.checked_to).next().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_underused_grant_is_reported_at_most_once_a_day_with_three_replicas() {
    let (s, p) = platform_at_t0(8).await;
    let beta_token = beta(&s, &p).await;
    // G: acme's 2 slots for 4 days; one instance held for the first 12 hours.
    let g = GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + 4 * DAY)
        .create(&s)
        .await;
    let vm = id(&InstanceBuilder::new(&p).create(&s).await);
    // H: beta's 1 slot, held all along: never underused.
    let h = GrantBuilder::new(&p)
        .grantee("beta")
        .term(T0, T0 + 4 * DAY)
        .create(&s)
        .await;
    InstanceBuilder::new(&p)
        .by("beta", &beta_token)
        .create(&s)
        .await;
    s.set_clock(T0 + 12 * HOUR).await;
    instance_op_ok(&s, &p.tenant_token, "acme", "delete", &vm).await;

    let workers = replicas(&s);
    // Every hour from 23 h to 53 h after the start, a minute in.
    let mut reports_at = Vec::new();
    for hour in 23..=53 {
        s.set_clock(T0 + hour * HOUR + MIN).await;
        worker::once(&s, &["vps.grants"]).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        // Windows are judged once the grant has been active for 24 whole hours.
        if hour >= 24 {
            for grant in [&g, &h] {
                while judged_to(&s, grant).await != T0 + hour * HOUR {
                    assert!(Instant::now() < deadline, "hour {hour} not judged");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        } else {
            assert_eq!(judged_to(&s, &g).await, 0, "judged before a whole day");
        }
        let now = notices(&s, ROOT_TOKEN, "root", UNDERUSED).await;
        if now.len() > reports_at.len() {
            reports_at.push(hour);
        }
    }
    stop(workers).await;
    // 12 of 48 slot-hours held over [0, 24 h): 0.25; from [3 h, 27 h) on,
    // below 0.2. Reported then, and next a day later.
    assert_eq!(reports_at, [27, 51]);
    let root_log = notices(&s, ROOT_TOKEN, "root", UNDERUSED).await;
    let acme_log = notices(&s, &p.tenant_token, "acme", UNDERUSED).await;
    assert!(notices(&s, &beta_token, "beta", UNDERUSED).await.is_empty());
    assert_eq!(root_log.len(), 2, "{root_log:?}");
    let data: Vec<Value> = root_log.iter().map(|e| e["data"].clone()).collect();
    assert_eq!(
        acme_log
            .iter()
            .map(|e| e["data"].clone())
            .collect::<Vec<_>>(),
        data
    );
    let at: Vec<i64> = root_log
        .iter()
        .map(|e| e["occurredAt"].as_i64().expect("occurredAt"))
        .collect();
    assert_eq!(at, [T0 + 27 * HOUR + MIN, T0 + 51 * HOUR + MIN]);
    let windows: BTreeMap<i64, (Value, Value, Value)> = data
        .iter()
        .map(|d| {
            (
                d["window"]["from"].as_i64().expect("from"),
                (
                    d["window"]["to"].clone(),
                    d["utilisation"].clone(),
                    d["suggestedSlots"].clone(),
                ),
            )
        })
        .collect();
    assert_eq!(
        windows,
        BTreeMap::from([
            (
                T0 + 3 * HOUR,
                (json!(T0 + 27 * HOUR), json!("0.187500"), json!(1))
            ),
            (
                T0 + 27 * HOUR,
                (json!(T0 + 51 * HOUR), json!("0.000000"), json!(1))
            ),
        ])
    );
    assert!(
        data.iter()
            .all(|d| d["grantId"] == g.as_str() && d["slots"] == 2)
    );
    assert!(data.iter().all(|d| d["poolId"] == p.pool.as_str()));
}

#[tokio::test(flavor = "multi_thread")]
async fn notices_follow_the_configured_durations_and_ratio() {
    let (s, p) = platform_at_t0(4).await;
    let g = GrantBuilder::new(&p)
        .term(T0, T0 + 3 * DAY)
        .create(&s)
        .await;
    let env = [("BC_EXPIRY_NOTICES", "36h"), ("BC_UNDERUSE_RATIO", "0")];
    // Underuse is off, and 36 h before the end is day 1.5.
    s.set_clock(T0 + DAY + 12 * HOUR - 1).await;
    let (ok, _) = worker::once_with(&s, &["vps.grants"], &env).await;
    assert!(ok.success());
    assert!(notices(&s, ROOT_TOKEN, "root", EXPIRING).await.is_empty());
    s.set_clock(T0 + DAY + 12 * HOUR).await;
    worker::once_with(&s, &["vps.grants"], &env).await;
    let sent = notices(&s, ROOT_TOKEN, "root", EXPIRING).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(
        (&sent[0]["data"]["grantId"], &sent[0]["data"]["notice"]),
        (&json!(g), &json!("36h"))
    );
    assert!(notices(&s, ROOT_TOKEN, "root", UNDERUSED).await.is_empty());
    assert_eq!(judged_to(&s, &g).await, 0);

    // A bad setting stops the worker before it connects, naming it.
    for (k, v) in [("BC_EXPIRY_NOTICES", "7d,soon"), ("BC_UNDERUSE_RATIO", "2")] {
        let (status, err) = worker::once_with(&s, &[], &[(k, v)]).await;
        assert!(!status.success(), "{k}={v} accepted");
        assert!(
            err.contains(k) && err.contains(v.split(',').next_back().unwrap_or(v)),
            "{err}"
        );
    }
}
