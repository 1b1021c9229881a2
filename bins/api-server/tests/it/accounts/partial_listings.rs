//! Partial listings are failures (contract 6, 7, 3.12 r4): a zone the
//! provider could not reach fails the whole listing, which then changes
//! nothing, and a failed VM listing between two that missed a VM neither
//! breaks the pair nor moves the date the instance was lost.

use serde_json::{Value, json};

use crate::support::builders::{GrantBuilder, InstanceBuilder};
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::fixtures::{
    get_grant, get_instance, id, in_grant, placement, platform_at_t0, reservations, scan,
};
use crate::support::gce::ZONE;
use crate::support::meter::usage_of_instance;
use crate::support::server::{ROOT, ROOT_TOKEN, Server};
use crate::support::vms::{VM_ENV, managed_platform, vm_pass};
use crate::support::worker;
use crate::system::metrics::{scrape_until, value};

const SCAN: &str = "vps.reservations";
/// The managed pool's other zone.
const OTHER_ZONE: &str = "us-central1-b";

/// The log lines of `stderr` that contain `needle`.
fn lines_with<'a>(stderr: &'a str, needle: &str) -> Vec<&'a str> {
    stderr.lines().filter(|l| l.contains(needle)).collect()
}

/// What a scan must leave alone: the reservations, both grants' states,
/// the instance's placement and every event of root and the tenant.
struct Snapshot {
    reservations: Vec<Value>,
    grants: Vec<Value>,
    placement: (String, Option<String>),
    events: Vec<Value>,
}

async fn snapshot(s: &Server, account: &str, grants: &[&str], token: &str, inst: &str) -> Snapshot {
    let mut states = Vec::new();
    for g in grants {
        states.push(get_grant(s, g).await["state"].clone());
    }
    let mut events = s.events(ROOT_TOKEN, ROOT).await;
    events.extend(s.events(token, "acme").await);
    Snapshot {
        reservations: reservations(s, account).await,
        grants: states,
        placement: placement(&get_instance(s, token, "acme", inst).await),
        events,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_zone_fails_the_scan_and_changes_nothing() {
    let (s, p) = platform_at_t0(4).await;
    let t = &p.tenant_token;
    let active = GrantBuilder::new(&p)
        .slots(2)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    let scheduled = GrantBuilder::new(&p)
        .term(T0 + 20 * HOUR, T0 + 30 * HOUR)
        .create(&s)
        .await;
    let inst = id(&InstanceBuilder::new(&p).create(&s).await);
    s.set_clock(T0 + MIN).await;
    let grants = [active.as_str(), scheduled.as_str()];
    let before = snapshot(&s, &p.account, &grants, t, &inst).await;
    assert_eq!(before.reservations[0]["status"], "ready");
    assert_eq!(before.grants, [json!("active"), json!("scheduled")]);
    assert_eq!(before.placement, in_grant(&active));

    // The provider would report a new total, but the reservation's zone is
    // unreachable: the listing is partial.
    p.gce.put("res-a", 6, 0, "READY").await;
    p.gce.unreachable(&[ZONE]).await;
    let log = worker::once_logged(&s, &[SCAN]).await;
    let counts = worker::pass_counts(&log, SCAN).expect("pass line");
    assert_eq!(
        (counts["accountsScanned"], counts["accountsFailed"]),
        (0, 1),
        "{log}"
    );
    let failed = lines_with(&log, "scan failed");
    assert_eq!(failed.len(), 1, "{log}");
    assert!(failed[0].contains(&p.account), "{log}");
    assert!(failed[0].contains(ZONE), "the log names the zone: {log}");
    let after = snapshot(&s, &p.account, &grants, t, &inst).await;
    assert_eq!(after.reservations, before.reservations, "not gone");
    assert_eq!(after.grants, before.grants);
    assert_eq!(after.placement, before.placement);
    assert_eq!(after.events, before.events);

    // The explicit scan fails the same way.
    let r = s
        .root("providerAccounts/scan", json!({ "accountId": p.account }))
        .await;
    assert_eq!(r.err(503, "UNAVAILABLE")["reason"], "provider-error");
    let after = snapshot(&s, &p.account, &grants, t, &inst).await;
    assert_eq!(after.reservations, before.reservations);
    assert_eq!(after.grants, before.grants);
    assert_eq!(after.placement, before.placement);
    assert_eq!(after.events, before.events);

    // A running worker (past the backoff) counts it as a failed scan.
    s.set_clock(T0 + 5 * MIN).await;
    let port = worker::free_port();
    let mut cmd = worker::command(&s);
    cmd.env("BC_METRICS_LISTEN", format!("127.0.0.1:{port}"))
        .args(["--only", SCAN]);
    let w = worker::Running::spawn(cmd);
    let labels = [("account", p.account.as_str()), ("result", "error")];
    scrape_until(
        &format!("http://127.0.0.1:{port}/metrics"),
        "a scan counted as an error",
        |m| value(m, "bc_worker_account_scans_total", &labels) >= Some(1.0),
    )
    .await;
    w.terminate_clean().await;
    let after = snapshot(&s, &p.account, &grants, t, &inst).await;
    assert_eq!(after.reservations, before.reservations);
    assert_eq!(after.grants, before.grants);
    assert_eq!(after.events, before.events);

    // Reachable again (past the backoff): scans apply as before.
    p.gce.unreachable(&[]).await;
    s.set_clock(T0 + 30 * MIN).await;
    let log = worker::once_logged(&s, &[SCAN]).await;
    let counts = worker::pass_counts(&log, SCAN).expect("pass line");
    assert_eq!(counts["accountsScanned"], 1, "{log}");
    let listed = reservations(&s, &p.account).await;
    assert_eq!(
        (&listed[0]["status"], &listed[0]["total"]),
        (&json!("ready"), &json!(6))
    );
    assert_eq!(listed[0]["lastScannedAt"], T0 + 30 * MIN);
    s.set_clock(T0 + 31 * MIN).await;
    let scanned = scan(&s, &p.account).await;
    assert_eq!(scanned["items"][0]["lastScannedAt"], T0 + 31 * MIN);
    let after = snapshot(&s, &p.account, &grants, t, &inst).await;
    assert_eq!(after.grants, before.grants);
    assert_eq!(after.placement, before.placement);
}

fn vm_name(inst: &Value) -> String {
    inst["vm"]["name"].as_str().expect("vm.name").to_owned()
}

async fn state(s: &Server, token: &str, inst: &str) -> (String, Value) {
    let v = get_instance(s, token, "acme", inst).await;
    (
        v["state"].as_str().unwrap_or_default().to_owned(),
        v["deletedReason"].clone(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_vm_listing_neither_breaks_the_pair_nor_moves_the_lost_date() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 3).await;
    let t = &p.tenant_token;
    let a = id(&InstanceBuilder::new(&p).key("a").create(&s).await);
    let b = InstanceBuilder::new(&p).key("b").create(&s).await;
    let (b, b_vm) = (id(&b), vm_name(&b));
    vm_pass(&s).await;
    let running = ("running".to_owned(), Value::Null);
    assert_eq!(state(&s, t, &a).await, running);
    assert_eq!(state(&s, t, &b).await, running);
    // b's VM deleted outside; an orphan labelled VM in the other zone.
    p.gce.outside(ZONE, &b_vm, "delete").await;
    p.gce
        .insert_outside_in(
            OTHER_ZONE,
            "bc-orphan",
            json!({ "bc-managed": "true", "bc-instance": "inst_gone" }),
        )
        .await;

    // Listing 1 (succeeds): misses b, sees the orphan once.
    s.set_clock(T0 + 20 * MIN).await;
    vm_pass(&s).await;
    assert_eq!(state(&s, t, &b).await, running, "missed once is not lost");
    assert!(p.gce.vm("bc-orphan").await.is_some());

    // Listing 2 is partial (b's zone unreachable): had it counted, b would
    // be lost and the orphan, seen a second time, deleted.
    p.gce.unreachable(&[ZONE]).await;
    s.set_clock(T0 + 40 * MIN).await;
    let mut env = VM_ENV.to_vec();
    env.extend([("RUST_LOG", "info"), ("NO_COLOR", "1")]);
    let (status, log) = worker::once_with(&s, &["vps.instances"], &env).await;
    assert!(status.success(), "{log}");
    // The pass line leaves zero counts out.
    let counts = worker::pass_counts(&log, "vps.instances").expect("pass line");
    let count = |k: &str| counts.get(k).copied().unwrap_or(0);
    assert_eq!(
        (count("accountsListed"), count("listingsFailed")),
        (0, 1),
        "{log}"
    );
    let failed = lines_with(&log, "listing managed vms failed");
    assert_eq!(failed.len(), 1, "{log}");
    assert!(failed[0].contains(ZONE), "the log names the zone: {log}");
    assert_eq!(state(&s, t, &a).await, running);
    assert_eq!(
        state(&s, t, &b).await,
        running,
        "a partial listing loses nothing"
    );
    assert!(s.events_of(t, "acme", "instance.lost").await.is_empty());
    assert!(
        p.gce.vm("bc-orphan").await.is_some(),
        "nor deletes an orphan"
    );
    let orphans = s.events_of(ROOT_TOKEN, ROOT, "instance.orphan-deleted");
    assert!(orphans.await.is_empty());

    // Listing 3 (succeeds) misses b again: the pair is listings 1 and 3,
    // and b was lost at listing 1.
    p.gce.unreachable(&[]).await;
    s.set_clock(T0 + HOUR).await;
    vm_pass(&s).await;
    assert_eq!(
        state(&s, t, &b).await,
        ("deleted".to_owned(), json!("lost"))
    );
    let lost = s.events_of(t, "acme", "instance.lost").await;
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0]["data"]["instanceId"], b.as_str());
    assert_eq!(
        lost[0]["occurredAt"],
        T0 + 20 * MIN,
        "lost at the first successful listing that missed it"
    );
    assert_eq!(state(&s, t, &a).await, running);
    // The orphan, seen by listings 1 and 3, is deleted.
    assert!(p.gce.vm("bc-orphan").await.is_none());
    let orphans = s
        .events_of(ROOT_TOKEN, ROOT, "instance.orphan-deleted")
        .await;
    assert_eq!(orphans.len(), 1);
    assert_eq!(orphans[0]["data"]["zone"], OTHER_ZONE);

    // b is billed up to listing 1, not beyond.
    s.set_clock(T0 + 2 * HOUR).await;
    worker::once(&s, &["vps.usage"]).await;
    let records: Vec<(Value, Value, Value)> = usage_of_instance(&s, t, "acme", &b)
        .await
        .iter()
        .map(|r| {
            (
                r["meter"].clone(),
                r["periodStart"].clone(),
                r["quantity"].clone(),
            )
        })
        .collect();
    assert_eq!(
        records,
        [(json!("vm.reserved.hours"), json!(T0), json!("0.333333"))]
    );
}
