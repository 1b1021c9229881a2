//! One tenant must not slow the platform for the others (contract 1.7):
//! provider accounts are limited per tenant (`BC_MAX_ACCOUNTS_PER_TENANT`),
//! a deleted tenant's accounts go with it, scans of different accounts run
//! concurrently with a time limit and never hold up the other passes, an
//! explicit scan coexists with a worker's live lease, and the worker's
//! metric labels stay bounded.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Text};
use diesel_async::RunQueryDsl;
use serde_json::{Value, json};
use storage::ops::gauges;
use storage::ops::scans::{self, ClaimRules};

use crate::accounts::google_auth::SECRETS_KEY;
use crate::support::builders::{GrantBuilder, InstanceBuilder, PlatformBuilder};
use crate::support::calls::{delete_tenant, list_accounts, put_secret, scan_as};
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::db::root_id;
use crate::support::fixtures::{
    account_body, bind, create_account, gce_account, items, platform_at_t0, reservations, scan,
};
use crate::support::gce::{Gce, PROJECT};
use crate::support::meter::usage;
use crate::support::server::{Options, ROOT, ROOT_TOKEN, Server, rand_suffix};
use crate::support::worker;
use crate::system::metrics::{Sample, scrape_until, value};

const SCAN: &str = "vps.reservations";

/// A server whose tenants may have `max` accounts (and a secrets key).
async fn server_with_max(max: u32) -> Server {
    Server::start_with(Options {
        env: vec![
            ("BC_MAX_ACCOUNTS_PER_TENANT".into(), max.to_string()),
            ("BC_SECRETS_KEY".into(), SECRETS_KEY.into()),
        ],
        ..Options::default()
    })
    .await
}

/// An account body of `tenant` whose endpoint is `url`.
fn account_on_url(tenant: &str, url: &str, project: &str, credentials: &str) -> Value {
    json!({
        "tenantId": tenant,
        "name": "gce",
        "provider": "gce",
        "config": { "project": project, "endpoint": url, "credentials": credentials },
        "idempotencyKey": format!("acct-{}", rand_suffix()),
    })
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// `SELECT count(*) FROM {table} WHERE tenant_id = $1` in the server's
/// database.
async fn rows_of_tenant(s: &Server, table: &str, tenant: &str) -> i64 {
    let mut conn = storage::db::establish(s.db.url()).await.expect("db");
    diesel::sql_query(format!(
        "SELECT count(*) AS n FROM {table} WHERE tenant_id = $1"
    ))
    .bind::<Text, _>(tenant)
    .get_result::<Count>(&mut conn)
    .await
    .expect("count")
    .n
}

// Accounts per tenant.

#[tokio::test(flavor = "multi_thread")]
async fn a_tenants_21st_account_is_refused_with_the_limit_and_root_is_not_limited() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let acme = s.tenant("acme").await;
    let mut first = None;
    for i in 0..20 {
        let body = account_body("acme", &format!("gce {i}"), &format!("acct-{i}"));
        let v = s
            .call(&acme, "providerAccounts/create", body.clone())
            .await
            .ok();
        first.get_or_insert((body, v["account"]["accountId"].clone()));
    }
    let refused = s
        .call(
            &acme,
            "providerAccounts/create",
            account_body("acme", "gce 21", "acct-21"),
        )
        .await;
    let details = refused.err(429, "QUOTA_EXCEEDED");
    assert_eq!(
        details,
        &json!({ "resource": "providerAccounts", "max": 20, "used": 20, "requested": 1 })
    );
    // Nothing was created, and the refused key was not consumed.
    let listed = list_accounts(&s, &acme, "acme").await.ok();
    assert_eq!(items(&listed).len(), 20);
    assert_eq!(rows_of_tenant(&s, "provider_accounts", "acme").await, 20);
    // A retry of an existing create still returns its account (1.5).
    let (body, id) = first.expect("first account");
    let again = s.call(&acme, "providerAccounts/create", body).await.ok();
    assert_eq!(again["account"]["accountId"], id);
    // The root tenant is not limited.
    for i in 0..25 {
        let body = account_body(ROOT, &format!("root gce {i}"), &format!("root-{i}"));
        create_account(&s, ROOT_TOKEN, body).await;
    }
    assert_eq!(rows_of_tenant(&s, "provider_accounts", ROOT).await, 25);
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_creates_at_the_limit_create_exactly_one_account() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let acme = s.tenant("acme").await;
    for i in 0..19 {
        let body = account_body("acme", &format!("gce {i}"), &format!("acct-{i}"));
        s.call(&acme, "providerAccounts/create", body).await.ok();
    }
    // Six creates under six keys at used = max - 1, released at once: a
    // transaction holds the tenant's row until all six wait behind it (as
    // behind any write of the tenant), so they race from the same instant.
    let mut holder = storage::db::establish(s.db.url()).await.expect("db");
    diesel::sql_query("BEGIN")
        .execute(&mut holder)
        .await
        .expect("begin");
    diesel::sql_query("SELECT 1 FROM tenants WHERE tenant_id = 'acme' FOR UPDATE")
        .execute(&mut holder)
        .await
        .expect("lock");
    let racing = futures::future::join_all((0..6).map(|i| {
        let (s, acme) = (&s, &acme);
        async move {
            let body = account_body("acme", &format!("racer {i}"), &format!("race-{i}"));
            s.call(acme, "providerAccounts/create", body).await
        }
    }));
    let release = async {
        let mut watcher = storage::db::establish(s.db.url()).await.expect("db");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let waiting: Count = diesel::sql_query(
                "SELECT count(*) AS n FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .get_result(&mut watcher)
            .await
            .expect("waiting");
            if waiting.n >= 6 {
                break;
            }
            assert!(Instant::now() < deadline, "{} creates waiting", waiting.n);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        diesel::sql_query("COMMIT")
            .execute(&mut holder)
            .await
            .expect("commit");
    };
    let (answers, ()) = tokio::join!(racing, release);
    let created = answers.iter().filter(|a| a.status == 200).count();
    for a in answers.iter().filter(|a| a.status != 200) {
        let details = a.err(429, "QUOTA_EXCEEDED");
        assert_eq!(details["used"], 20, "{details}");
        assert_eq!(details["max"], 20, "{details}");
    }
    assert_eq!(created, 1, "{answers:?}");
    assert_eq!(rows_of_tenant(&s, "provider_accounts", "acme").await, 20);
}

// A deleted tenant's accounts.

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_tenants_accounts_and_secrets_are_deleted_and_never_scanned_again() {
    let s = server_with_max(20).await;
    s.set_clock(T0).await;
    let fake = Gce::start().await;
    fake.put("res-a", 2, 0, "READY").await;
    let acme = s.tenant("acme").await;
    put_secret(&s, &acme, "acme", "gce-token", "ya29.a-token-for-tests")
        .await
        .ok();
    let mut accounts = Vec::new();
    for credentials in ["none", "secret:gce-token", "none"] {
        let body = account_on_url("acme", &fake.url, PROJECT, credentials);
        accounts.push(create_account(&s, &acme, body).await);
    }
    // The worker scans all three.
    let secrets = [("BC_SECRETS_KEY", SECRETS_KEY)];
    let (status, err) = worker::once_with(&s, &[SCAN], &secrets).await;
    assert!(status.success(), "{err}");
    assert_eq!(fake.listings().await, 3);
    assert_eq!(rows_of_tenant(&s, "secrets", "acme").await, 1);

    let deleted = delete_tenant(&s, "acme").await.ok();
    assert_eq!(deleted["tenant"]["state"], "deleted");
    // Gone from the database: accounts, their reservations, the secrets.
    assert_eq!(rows_of_tenant(&s, "provider_accounts", "acme").await, 0);
    assert_eq!(rows_of_tenant(&s, "secrets", "acme").await, 0);
    let mut conn = storage::db::establish(s.db.url()).await.expect("db");
    for account in &accounts {
        let n: Count =
            diesel::sql_query("SELECT count(*) AS n FROM reservations WHERE account_id = $1")
                .bind::<Text, _>(account)
                .get_result(&mut conn)
                .await
                .expect("count");
        assert_eq!(n.n, 0, "{account}");
    }
    // Not among what the scan pass walks.
    let candidates = scans::scan_candidates(&mut conn).await.expect("candidates");
    assert!(
        candidates.iter().all(|c| c.tenant_id != "acme"),
        "{candidates:?}"
    );
    // And never listed at the provider again, by a one-shot run or a loop.
    let (status, err) = worker::once_with(&s, &[SCAN], &secrets).await;
    assert!(status.success(), "{err}");
    assert_eq!(fake.listings().await, 3, "{err}");
    // A root account on another project of the fake shows the loop's rounds.
    let body = account_on_url(ROOT, &fake.url, "probe-project", "none");
    create_account(&s, ROOT_TOKEN, body).await;
    let mut cmd = worker::command(&s);
    cmd.env("BC_SECRETS_KEY", SECRETS_KEY)
        .args(["--only", SCAN]);
    let w = worker::Running::spawn(cmd);
    let deadline = Instant::now() + Duration::from_secs(60);
    while fake
        .calls()
        .await
        .get("probe-project")
        .copied()
        .unwrap_or(0)
        < 3
    {
        assert!(
            Instant::now() < deadline,
            "no three scan rounds within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, err) = w.terminate().await;
    assert!(status.success(), "{err}");
    assert_eq!(fake.listings().await, 3, "{err}");
}

// Scans never hold up the other passes.

/// A provider endpoint that never answers: it counts the requests it gets
/// and holds every connection open until the test ends.
struct Stall {
    url: String,
    requests: Arc<AtomicU64>,
}

impl Stall {
    async fn start() -> Stall {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let requests = Arc::new(AtomicU64::new(0));
        let counted = requests.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    continue;
                };
                let counted = counted.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    loop {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                        if head.windows(4).any(|w| w == b"\r\n\r\n") {
                            break;
                        }
                    }
                    counted.fetch_add(1, Ordering::SeqCst);
                    // Never answer; keep reading until the client gives up.
                    while let Ok(n) = stream.read(&mut buf).await {
                        if n == 0 {
                            return;
                        }
                    }
                });
            }
        });
        Stall { url, requests }
    }

    fn requests(&self) -> u64 {
        AtomicU64::load(&self.requests, Ordering::SeqCst)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn metering_and_notices_of_others_happen_while_200_stalled_accounts_are_being_scanned() {
    let s = server_with_max(200).await;
    s.set_clock(T0).await;
    // Acme holds a grant for two hours on the platform's reservation.
    let p = PlatformBuilder::new().slots(4).build(&s).await;
    let g = GrantBuilder::new(&p)
        .term(T0, T0 + 2 * HOUR)
        .create(&s)
        .await;
    // A hostile tenant's 200 accounts, all on an endpoint that never answers.
    let stall = Stall::start().await;
    let hostile = s.tenant("hostile").await;
    for _ in 0..200 {
        let body = account_on_url("hostile", &stall.url, "hostile-project", "none");
        create_account(&s, &hostile, body).await;
    }
    // Acme's first hour has ended, and its grant ends within the hour.
    s.set_clock(T0 + HOUR + 30 * MIN).await;
    let mut cmd = worker::command(&s);
    cmd.env("RUST_LOG", "info").env("NO_COLOR", "1");
    let w = worker::Running::spawn(cmd);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let records = usage(&s, &p.tenant_token, &p.tenant, "vm.grant.slot.hours").await;
        let expiring = s
            .events_of(&p.tenant_token, &p.tenant, "reservation-grant.expiring")
            .await;
        if !records.is_empty() && !expiring.is_empty() {
            assert_eq!(records.len(), 1, "{records:?}");
            assert_eq!(records[0]["grantId"], json!(g), "{records:?}");
            assert_eq!(expiring[0]["data"]["grantId"], json!(g), "{expiring:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "acme's hour was not metered or its notice not sent within 120 s while the \
             stalled endpoint had {} requests",
            stall.requests()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Written while the scan round was far from done: a round lists each
    // of the 200 accounts once.
    let seen = stall.requests();
    assert!(seen < 200, "the stalled endpoint saw {seen} requests first");
    let err = w.kill().await;
    assert!(!err.contains("pass failed"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_listing_longer_than_the_scan_timeout_fails_only_its_account() {
    let s = server_with_max(20).await;
    s.set_clock(T0).await;
    let stall = Stall::start().await;
    let hostile = s.tenant("hostile").await;
    let body = account_on_url("hostile", &stall.url, "hostile-project", "none");
    let slow = create_account(&s, &hostile, body).await;
    let fake = Gce::start().await;
    fake.put("res-a", 2, 0, "READY").await;
    let fine = gce_account(&s, &fake).await;
    // One scan slot: the stalled listing is given up after 3 s (long before
    // the adapter's own 30 s page timeout would retry it), then the other
    // account is listed in the same pass.
    let env = [
        ("BC_SCAN_CONCURRENCY", "1"),
        ("BC_SCAN_TIMEOUT_MS", "3000"),
        ("RUST_LOG", "info"),
        ("NO_COLOR", "1"),
    ];
    let (status, err) = worker::once_with(&s, &[SCAN], &env).await;
    assert!(status.success(), "{err}");
    let c = worker::pass_counts(&err, SCAN).unwrap_or_else(|| panic!("no pass line in {err}"));
    assert_eq!((c["accountsScanned"], c["accountsFailed"]), (1, 1), "{err}");
    assert_eq!(reservations(&s, &fine).await.len(), 1);
    // One request, abandoned at the limit: the listing was not retried.
    assert_eq!(stall.requests(), 1);
    // The slow account backs off as after any provider failure.
    let mut conn = storage::db::establish(s.db.url()).await.expect("db");
    let n: Count = diesel::sql_query(
        "SELECT count(*) AS n FROM provider_accounts \
         WHERE account_id = $1 AND scan_failures = 1 AND scan_retry_at IS NOT NULL",
    )
    .bind::<Text, _>(&slow)
    .get_result(&mut conn)
    .await
    .expect("count");
    assert_eq!(n.n, 1);
}

// An explicit scan beside a worker's live lease.

#[tokio::test(flavor = "multi_thread")]
async fn an_explicit_scan_beside_a_workers_live_lease_answers_fresh_and_leaves_the_lease() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let fake = Gce::start().await;
    fake.put("res-a", 2, 0, "READY").await;
    let account = gce_account(&s, &fake).await;
    worker::path();
    // A worker's scan holds the account: claimed with a 10-minute lease,
    // its listing still in flight.
    let mut conn = storage::db::establish(s.db.url()).await.expect("db");
    let held = scans::claim_scan(&mut conn, ROOT, &account, ClaimRules::pass(0, 600_000))
        .await
        .expect("claim")
        .expect("claimed");
    // The operator's scan lists now and answers what the provider has.
    let answer = scan(&s, &account).await;
    assert_eq!(items(&answer).len(), 1, "{answer}");
    assert_eq!(items(&answer)[0]["total"], 2);
    assert_eq!(fake.listings().await, 1);
    // The worker's lease still stands: another replica leaves the account
    // alone (no second listing while the first is in flight).
    let logged = [("RUST_LOG", "info"), ("NO_COLOR", "1")];
    let (status, err) = worker::once_with(&s, &[SCAN], &logged).await;
    assert!(status.success(), "{err}");
    let c = worker::pass_counts(&err, SCAN).unwrap_or_else(|| panic!("no pass line in {err}"));
    assert_eq!(
        (c["accountsScanned"], c["accountsClaimedElsewhere"]),
        (0, 1),
        "{err}"
    );
    assert_eq!(fake.listings().await, 1);
    // The worker's answer arrives: older than the operator's, it is dropped
    // (the reservation is not made gone) and its lease is given back.
    let late = scans::apply_scan(&mut conn, &root_id(), &held, &[], T0 + MIN)
        .await
        .expect("apply");
    assert!(late.stale);
    let now = reservations(&s, &account).await;
    assert_eq!(now[0]["status"], "ready", "{now:?}");
    let (status, err) = worker::once_with(&s, &[SCAN], &logged).await;
    assert!(status.success(), "{err}");
    assert_eq!(fake.listings().await, 2, "{err}");
}

// Bounded metric labels and the reservation gauges.

#[tokio::test(flavor = "multi_thread")]
async fn scans_of_150_accounts_name_at_most_100_accounts_in_the_metrics() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let fake = Gce::start().await;
    fake.put("res-a", 2, 0, "READY").await;
    for _ in 0..150 {
        gce_account(&s, &fake).await;
    }
    let port = worker::free_port();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let mut cmd = worker::command(&s);
    cmd.env("BC_METRICS_LISTEN", format!("127.0.0.1:{port}"))
        .env("BC_INTERVAL_MS", "600000")
        .args(["--only", SCAN]);
    let w = worker::Running::spawn(cmd);
    let scanned = |m: &[Sample]| {
        value(
            m,
            "bc_worker_pass_items_total",
            &[("item", "accountsScanned")],
        ) == Some(150.0)
    };
    let samples = scrape_until(&url, "a round of 150 scans", scanned).await;
    let series: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name == "bc_worker_account_scans_total")
        .collect();
    let accounts: BTreeSet<&str> = series
        .iter()
        .map(|s| s.labels["account"].as_str())
        .collect();
    assert_eq!(accounts.len(), 101, "{accounts:?}");
    assert!(accounts.contains("other"));
    let other = value(
        &samples,
        "bc_worker_account_scans_total",
        &[("account", "other"), ("result", "ok")],
    );
    assert_eq!(other, Some(50.0));
    let total: f64 = series.iter().map(|s| s.value).sum();
    assert_eq!(total, 150.0);
    let (status, err) = w.terminate().await;
    assert!(status.success(), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn reservation_gauges_beyond_the_cap_are_summed_under_other() {
    let (s, p) = platform_at_t0(4).await;
    p.gce.put("res-b", 3, 0, "READY").await;
    p.gce.put("res-c", 5, 0, "READY").await;
    scan(&s, &p.account).await;
    for name in ["res-b", "res-c"] {
        bind(&s, &p.account, &Gce::reservation_id(name), &p.pool)
            .await
            .ok();
    }
    let mut conn = storage::db::establish(s.db.url()).await.expect("db");
    let gauges = gauges::gauges(&mut conn, T0, 1).await.expect("gauges");
    assert_eq!(gauges.len(), 2, "{gauges:?}");
    assert_eq!(gauges[0].account_id, p.account);
    assert_eq!(gauges[0].reservation_id, p.reservation);
    assert_eq!(gauges[0].total, 4);
    assert_eq!(
        (
            gauges[1].account_id.as_str(),
            gauges[1].reservation_id.as_str()
        ),
        ("other", "other")
    );
    assert_eq!((gauges[1].total, gauges[1].bound), (8, 3));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ordinary_in_use_gauge_counts_instances_outside_grants() {
    let (s, p) = platform_at_t0(4).await;
    // Two instances of acme without a grant: on ordinary slots.
    InstanceBuilder::new(&p).create(&s).await;
    InstanceBuilder::new(&p).create(&s).await;
    let res = reservations(&s, &p.account).await[0].clone();
    assert_eq!(res["ordinaryInUse"], 2, "{res}");
    let port = worker::free_port();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let mut cmd = worker::command(&s);
    cmd.env("BC_METRICS_LISTEN", format!("127.0.0.1:{port}"))
        .args(["--only", "vps.grants"]);
    let w = worker::Running::spawn(cmd);
    let labels = [
        ("account", p.account.as_str()),
        ("reservation", p.reservation.as_str()),
        ("kind", "ordinaryInUse"),
    ];
    let samples = scrape_until(&url, "the ordinaryInUse gauge", |m| {
        value(m, "bc_reservation_slots", &labels).is_some()
    })
    .await;
    assert_eq!(value(&samples, "bc_reservation_slots", &labels), Some(2.0));
    let (status, err) = w.terminate().await;
    assert!(status.success(), "{err}");
}

/// Explicit scans of a tenant's stalling account: at most four of one
/// tenant run at once in a server (the fifth is 429 `QUOTA_EXCEEDED`,
/// resource `concurrentScans`, at once), each gives up after
/// `BC_SCAN_TIMEOUT_MS` as a provider error, and another tenant's scan is
/// answered meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn explicit_scans_of_a_stalling_account_are_few_and_time_limited() {
    let s = Server::start_with_env("BC_SCAN_TIMEOUT_MS", "3000").await;
    s.set_clock(T0).await;
    let stall = Stall::start().await;
    let hostile = s.tenant("hostile").await;
    let body = account_on_url("hostile", &stall.url, PROJECT, "none");
    let slow = create_account(&s, &hostile, body).await;
    let gce = Gce::start().await;
    gce.put("res-a", 2, 0, "READY").await;
    let acme = s.tenant("acme").await;
    let fine = create_account(&s, &acme, account_on_url("acme", &gce.url, PROJECT, "none")).await;

    let scan_of = |token: String, tenant: &'static str, account: String| {
        let s = &s;
        async move {
            let t = Instant::now();
            let a = scan_as(s, &token, tenant, &account).await;
            (a, t.elapsed())
        }
    };
    let held: Vec<_> = (0..4)
        .map(|_| scan_of(hostile.clone(), "hostile", slow.clone()))
        .collect();
    let held = futures::future::join_all(held);
    let others = async {
        // Once the four are in flight, a fifth is refused and acme is served.
        let deadline = Instant::now() + Duration::from_secs(30);
        while stall.requests() < 4 {
            assert!(
                Instant::now() < deadline,
                "the four scans never reached the endpoint"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (fifth, _) = scan_of(hostile.clone(), "hostile", slow.clone()).await;
        let d = fifth.err(429, "QUOTA_EXCEEDED").clone();
        assert_eq!(
            d,
            json!({ "resource": "concurrentScans", "max": 4, "used": 4, "requested": 1 })
        );
        let (ok, took) = scan_of(acme.clone(), "acme", fine.clone()).await;
        assert_eq!(items(&ok.ok()).len(), 1);
        took
    };
    let (held, acme_took) = tokio::join!(held, others);
    eprintln!("acme's scan beside four stalled ones took {acme_took:?}");
    for (a, took) in held {
        let d = a.err(503, "UNAVAILABLE");
        assert_eq!(d["reason"], "provider-error", "{d}");
        assert!(took >= Duration::from_millis(2900), "{took:?}");
        assert!(took < Duration::from_secs(60), "{took:?}");
    }
    // The permits are given back.
    let (again, _) = scan_of(hostile.clone(), "hostile", slow.clone()).await;
    again.err(503, "UNAVAILABLE");
}
