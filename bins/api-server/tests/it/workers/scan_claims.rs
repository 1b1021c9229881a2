//! Replicas share scans, they do not repeat them (contract 6, r2): a scan
//! claims its account, so each account is listed by one replica at a time and
//! at most once per interval; a provider's answer is applied only if no scan
//! of the account claimed later has been applied meanwhile. Metering batches
//! are chosen per account and reservation.

use std::time::Duration;

use diesel_async::RunQueryDsl;
use serde_json::json;
use storage::model::states::ReservationStatus;
use storage::ops::scans::ListedReservation;

use crate::support::builders::GrantBuilder;
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::db::{hold_reservation, root_id};
use crate::support::fixtures::{
    bind, create_grant, create_pool, gce_account, get_grant, reservations, root_account, scan,
};
use crate::support::gce::{FLAVOR, Gce, PROJECT, ZONE};
use crate::support::meter::{total, usage};
use crate::support::server::{ROOT_TOKEN, Server};
use crate::support::worker;

const SCAN: &str = "vps.reservations";

#[tokio::test(flavor = "multi_thread")]
async fn three_replicas_list_each_account_once_per_interval_not_three_times() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    // Three accounts, each on its own fake so each fake counts one account's
    // listings; every listing takes 400 ms, so the replicas' passes overlap.
    let mut fakes = Vec::new();
    for i in 0..3 {
        let fake = Gce::start().await;
        fake.put(&format!("res-{i}"), 2, 0, "READY").await;
        fake.delay(400).await;
        let account = gce_account(&s, &fake).await;
        fakes.push((fake, account));
    }
    // Replicas with a long interval: within the test, one round each.
    let replicas: Vec<worker::Running> = (0..3)
        .map(|_| {
            let mut cmd = worker::command(&s);
            cmd.env("BC_INTERVAL_MS", "600000")
                .env("RUST_LOG", "info")
                .env("NO_COLOR", "1")
                .args(["--only", SCAN]);
            worker::Running::spawn(cmd)
        })
        .collect();
    // Until every account's reservation has been seen, then a little longer
    // so that a replica repeating the listing would have done so.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    for (_, account) in &fakes {
        while reservations(&s, account).await.is_empty() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no scan within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut logs = Vec::new();
    for r in replicas {
        let (status, err) = r.terminate().await;
        assert!(status.success(), "{err}");
        logs.push(err);
    }
    for (fake, account) in &fakes {
        assert_eq!(
            fake.listings().await,
            1,
            "listings of {account}; logs: {logs:?}"
        );
    }
    // Each replica ran its round: the accounts it did not list were claimed
    // elsewhere, and all three replicas together scanned each account once.
    let mut scanned = 0;
    let mut elsewhere = 0;
    for log in &logs {
        let c = worker::pass_counts(log, SCAN).unwrap_or_else(|| panic!("no pass line in {log}"));
        scanned += c["accountsScanned"];
        elsewhere += c["accountsClaimedElsewhere"];
    }
    assert_eq!((scanned, elsewhere), (3, 6), "{logs:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn once_workers_racing_do_not_list_an_account_twice_at_the_same_time() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let fake = Gce::start().await;
    fake.put("res-a", 2, 0, "READY").await;
    // Long enough that the three processes start within one listing.
    fake.delay(4000).await;
    let account = gce_account(&s, &fake).await;
    let (a, b, c) = tokio::join!(
        worker::once_logged(&s, &[SCAN]),
        worker::once_logged(&s, &[SCAN]),
        worker::once_logged(&s, &[SCAN]),
    );
    assert_eq!(fake.listings().await, 1, "{a}\n{b}\n{c}");
    assert_eq!(reservations(&s, &account).await.len(), 1);
    // A later one-shot run waits for no interval: it lists again.
    fake.delay(0).await;
    worker::once_logged(&s, &[SCAN]).await;
    assert_eq!(fake.listings().await, 2);
}

fn seen(name: &str, total: i64) -> ListedReservation {
    ListedReservation {
        reservation_id: format!("projects/{PROJECT}/zones/{ZONE}/reservations/{name}"),
        zone: ZONE.into(),
        region: "us-central1".into(),
        flavor: FLAVOR.into(),
        total,
        in_use: 0,
        status: ReservationStatus::Ready,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scan_claimed_earlier_never_overwrites_one_claimed_later() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let account = root_account(&s).await;
    let mut conn = storage::db::establish(s.db.url()).await.expect("db");
    let rules = storage::ops::scans::ClaimRules::EXPLICIT;
    let older = storage::ops::scans::claim_scan(&mut conn, "root", &account, rules)
        .await
        .expect("claim")
        .expect("claimed");
    let newer = storage::ops::scans::claim_scan(&mut conn, "root", &account, rules)
        .await
        .expect("claim")
        .expect("claimed");
    assert!(newer.ticket > older.ticket);
    // The later scan's answer lands first: 5 slots.
    let o = storage::ops::scans::apply_scan(&mut conn, &root_id(), &newer, &[seen("res-a", 5)], T0)
        .await
        .expect("apply newer");
    assert_eq!((o.appeared, o.stale), (1, false));
    // The earlier one arrives late, with an older total and without a
    // reservation the later one saw: it changes nothing.
    let o = storage::ops::scans::apply_scan(&mut conn, &root_id(), &older, &[], T0 + 1)
        .await
        .expect("apply older");
    assert!(o.stale);
    let items = reservations(&s, &account).await;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["total"], 5);
    assert_eq!(items[0]["status"], "ready");
    let o = storage::ops::scans::apply_scan(&mut conn, &root_id(), &older, &[seen("res-a", 3)], T0)
        .await
        .expect("apply older again");
    assert!(o.stale);
    assert_eq!(reservations(&s, &account).await[0]["total"], 5);
}

#[tokio::test(flavor = "multi_thread")]
async fn one_accounts_grants_never_crowd_another_accounts_out_of_a_metering_batch() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    // Two root accounts on one fake project: the same reservation id on both.
    let fake = Gce::start().await;
    fake.put("res-a", 2, 0, "READY").await;
    let reservation = Gce::reservation_id("res-a");
    let mut accounts = Vec::new();
    for _ in 0..2 {
        let account = gce_account(&s, &fake).await;
        let pool = create_pool(&s, &account).await;
        scan(&s, &account).await;
        bind(&s, &account, &reservation, &pool).await.ok();
        accounts.push(account);
    }
    let (busy, quiet) = (accounts[0].clone(), accounts[1].clone());
    // A full batch (1000) of short grants on the busy account, created first
    // so their ids sort first; one grant on the quiet account.
    for i in 0..1000i64 {
        create_grant(
            &s,
            json!({
                "accountId": busy, "reservationId": reservation, "grantTenantId": "root",
                "slots": 1, "startsAt": T0 + i * MIN, "endsAt": T0 + (i + 1) * MIN,
                "idempotencyKey": format!("busy-{i}"),
            }),
        )
        .await
        .ok();
    }
    s.set_clock(T0 + 1).await;
    let quiet_grant = GrantBuilder::on(&quiet, &reservation)
        .grantee("root")
        .term(T0 + 1, T0 + HOUR)
        .create(&s)
        .await;
    s.set_clock(T0 + 1000 * MIN + 2 * HOUR).await;

    // Another transaction holds the busy account's reservation row (a
    // replica settling it): metering skips it and must still meter the quiet
    // account's grant in this same pass.
    let mut holder = hold_reservation(&s, &busy, &reservation).await;
    worker::once_logged(&s, &["vps.grants"]).await;
    let quiet_view = get_grant(&s, &quiet_grant).await;
    assert_eq!(quiet_view["meteredThrough"], T0 + HOUR, "{quiet_view}");
    diesel::sql_query("ROLLBACK")
        .execute(&mut holder)
        .await
        .expect("rollback");
    // And the busy account's grants are metered once the lock is gone.
    worker::once_logged(&s, &["vps.grants"]).await;
    let slot = usage(&s, ROOT_TOKEN, "root", "vm.grant.slot.hours").await;
    // 1000 one-minute grants of 0.016667 slot-hours each, and the quiet
    // account's grant of (almost) one hour, rounded to 1.000000.
    assert_eq!(slot.len(), 1001);
    assert_eq!(total(&slot), 1000 * 16_667 + 1_000_000);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_left_by_a_dead_replica_is_taken_over_once_its_lease_expires() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let fake = Gce::start().await;
    fake.put("res-a", 2, 0, "READY").await;
    let account = gce_account(&s, &fake).await;
    // The worker binary is found (or the test fails at once) before the
    // clock of the lease starts.
    worker::path();
    // A replica claims the account with an 8 s lease and dies before
    // answering (nothing releases the claim).
    let mut conn = storage::db::establish(s.db.url()).await.expect("db");
    let rules = storage::ops::scans::ClaimRules::pass(0, 8000);
    storage::ops::scans::claim_scan(&mut conn, "root", &account, rules)
        .await
        .expect("claim")
        .expect("claimed");
    let claimed = std::time::Instant::now();
    let lease = [
        ("BC_SCAN_LEASE_MS", "8000"),
        ("RUST_LOG", "info"),
        ("NO_COLOR", "1"),
    ];
    // While the lease lives, other replicas leave the account alone.
    let (status, err) = worker::once_with(&s, &[SCAN], &lease).await;
    assert!(status.success(), "{err}");
    let c = worker::pass_counts(&err, SCAN).unwrap_or_else(|| panic!("no pass line in {err}"));
    assert_eq!(
        (c["accountsScanned"], c["accountsClaimedElsewhere"]),
        (0, 1),
        "{err}"
    );
    assert_eq!(fake.listings().await, 0);
    // Once it has expired, the next pass takes the account over.
    assert!(
        claimed.elapsed() < Duration::from_secs(8),
        "the first pass came too late"
    );
    tokio::time::sleep(Duration::from_secs(8).saturating_sub(claimed.elapsed())).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, err) = worker::once_with(&s, &[SCAN], &lease).await;
    assert!(status.success(), "{err}");
    let c = worker::pass_counts(&err, SCAN).unwrap_or_else(|| panic!("no pass line in {err}"));
    assert_eq!(c["accountsScanned"], 1, "{err}");
    assert_eq!(fake.listings().await, 1);
    assert_eq!(reservations(&s, &account).await.len(), 1);
}
