//! Managed instances (contract 3.12) against fake-gce with the real
//! binaries: VMs created, stopped, started and deleted by the worker's
//! steps, billed from the observed RUNNING, failures, drift and orphans, and
//! a ledger pool that never reaches the provider.

use serde_json::json;

use crate::support::builders::{InstanceBuilder, PlatformBuilder};
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::fixtures::{id, instance_op, instance_op_ok, used};
use crate::support::gce::{Gce, ZONE};
use crate::support::meter::usage_of_instance;
use crate::support::server::{ROOT, ROOT_TOKEN, Server};
use crate::support::vms::{
    IMAGE, acme_instance, managed_platform, managed_pool_body, state, vm_name, vm_pass,
};
use crate::support::worker;

/// `(meter, periodStart, quantity)` of an instance's records.
async fn meters(s: &Server, token: &str, inst: &str) -> Vec<(String, i64, String)> {
    let mut out: Vec<(String, i64, String)> = usage_of_instance(s, token, "acme", inst)
        .await
        .iter()
        .map(|r| {
            (
                r["meter"].as_str().unwrap_or_default().to_owned(),
                r["periodStart"].as_i64().unwrap_or_default(),
                r["quantity"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vm_is_billed_from_seen_running_to_the_stop_request_per_hour_bucket() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 2).await;
    let t = &p.tenant_token;
    let inst = InstanceBuilder::new(&p).key("vm-1").create(&s).await;
    assert_eq!(state(&inst), "provisioning");
    assert_eq!(inst["placement"]["kind"], "reservation");
    let name = vm_name(&inst);
    assert_eq!(
        name,
        format!("bc-{}", id(&inst).trim_start_matches("inst_"))
    );
    assert_eq!(inst["vm"]["zone"], ZONE);
    assert!(
        p.gce.vm(&name).await.is_none(),
        "the api-server calls no provider"
    );
    // The worker sees it running ten minutes later.
    s.set_clock(T0 + 10 * MIN).await;
    vm_pass(&s).await;
    let running = acme_instance(&s, t, &id(&inst)).await;
    assert_eq!(state(&running), "running");
    assert_eq!(running["vm"]["status"], "RUNNING");
    assert_eq!(running["vm"]["observedAt"], T0 + 10 * MIN);
    let vm = p.gce.vm(&name).await.expect("the vm exists");
    assert_eq!(vm.status, "RUNNING");
    assert_eq!(vm.labels["bc-instance"], id(&inst));
    assert_eq!(vm.labels["bc-pool"], json!(p.pool));
    assert_eq!(vm.labels["bc-managed"], "true");
    assert_eq!(vm.labels["team"], "infra");
    assert_eq!(
        vm.affinity["consumeReservationType"],
        "SPECIFIC_RESERVATION"
    );
    assert_eq!(vm.affinity["values"], json!(["res-a"]));
    let requests = p.gce.requests().await;
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(!requests[0].2.is_empty(), "the create carries a requestId");
    // Stopped at T0 + 70 min: billing ends at the request.
    s.set_clock(T0 + 70 * MIN).await;
    let stopping = instance_op_ok(&s, t, "acme", "stop", &id(&inst)).await;
    assert_eq!(state(&stopping), "stopping");
    s.set_clock(T0 + 75 * MIN).await;
    vm_pass(&s).await;
    let stopped = acme_instance(&s, t, &id(&inst)).await;
    assert_eq!(state(&stopped), "stopped");
    assert_eq!(p.gce.vm(&name).await.expect("vm").status, "TERMINATED");
    s.set_clock(T0 + 3 * HOUR).await;
    worker::once(&s, &["vps.usage"]).await;
    assert_eq!(
        meters(&s, t, &id(&inst)).await,
        vec![
            ("vm.reserved.hours".into(), T0, "0.833333".into()),
            ("vm.reserved.hours".into(), T0 + HOUR, "0.166667".into()),
        ],
        "exactly 60 minutes, split 50 + 10 over two hour buckets"
    );
    // Events: running at the observation, stopped (requested) at the confirmation.
    let events = s.events(t, "acme").await;
    let of: Vec<(&str, i64)> = events
        .iter()
        .filter(|e| {
            e["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("instance."))
        })
        .map(|e| {
            (
                e["type"].as_str().unwrap_or_default(),
                e["occurredAt"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        of,
        vec![
            ("instance.running", T0 + 10 * MIN),
            ("instance.stopped", T0 + 75 * MIN)
        ]
    );
    let stopped_event = events
        .iter()
        .find(|e| e["type"] == "instance.stopped")
        .expect("event");
    assert_eq!(stopped_event["data"]["reason"], "requested");
    assert_eq!(stopped_event["data"]["vm"]["name"], json!(name));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_vm_releases_its_slot_and_quota_only_when_the_provider_confirms() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 1).await;
    let t = &p.tenant_token;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    vm_pass(&s).await;
    // Deleting: the slot is still the old VM's, so a new instance of the
    // reservation's only slot is refused.
    let deleting = instance_op_ok(&s, t, "acme", "delete", &id(&a)).await;
    assert_eq!(state(&deleting), "deleting");
    assert_eq!(used(&s, t, "acme", &p.pool, "instances").await, Some(1));
    let b = InstanceBuilder::new(&p).key("b").send(&s).await;
    b.err(409, "CAPACITY_UNAVAILABLE");
    vm_pass(&s).await;
    let gone = acme_instance(&s, t, &id(&a)).await;
    assert_eq!(state(&gone), "deleted");
    assert_eq!(gone["deletedReason"], "requested");
    assert!(p.gce.vm(&vm_name(&a)).await.is_none(), "the vm is gone");
    // Deleting again changes nothing and sends nothing.
    let before = p.gce.requests().await.len();
    let again = instance_op_ok(&s, t, "acme", "delete", &id(&a)).await;
    assert_eq!(state(&again), "deleted");
    vm_pass(&s).await;
    assert_eq!(p.gce.requests().await.len(), before);
    let c = InstanceBuilder::new(&p).key("c").create(&s).await;
    assert_eq!(
        c["placement"]["kind"], "reservation",
        "the slot is free again"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_create_fails_with_the_providers_code_and_bills_nothing() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 2).await;
    let t = &p.tenant_token;
    p.gce.fail_creates(1, "QUOTA_EXCEEDED").await;
    let inst = InstanceBuilder::new(&p).key("f").create(&s).await;
    assert_eq!(used(&s, t, "acme", &p.pool, "instances").await, Some(1));
    s.set_clock(T0 + 5 * MIN).await;
    vm_pass(&s).await;
    let failed = acme_instance(&s, t, &id(&inst)).await;
    assert_eq!(state(&failed), "failed");
    assert_eq!(failed["failure"]["code"], "QUOTA_EXCEEDED");
    assert_eq!(
        used(&s, t, "acme", &p.pool, "instances").await,
        Some(0),
        "quota released"
    );
    // Stop or start of a failed instance is INVALID_STATE; delete returns it.
    instance_op(&s, t, "acme", "start", &id(&inst))
        .await
        .err(409, "INVALID_STATE");
    assert_eq!(
        state(&instance_op_ok(&s, t, "acme", "delete", &id(&inst)).await),
        "failed"
    );
    s.set_clock(T0 + 2 * HOUR).await;
    worker::once(&s, &["vps.usage"]).await;
    assert!(meters(&s, t, &id(&inst)).await.is_empty(), "nothing billed");
    let failed_events = s.events_of(t, "acme", "instance.failed").await;
    assert_eq!(failed_events.len(), 1);
    assert_eq!(failed_events[0]["data"]["code"], "QUOTA_EXCEEDED");
    // The provider's message stays in the log.
    assert!(!failed_events[0].to_string().contains("injected"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_physically_full_reservation_fails_the_create_with_condition_not_met() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 1).await;
    let t = &p.tenant_token;
    // A VM outside the platform takes the reservation's only slot after the
    // last scan: the platform admits, the provider refuses.
    p.gce.put("res-a", 1, 1, "READY").await;
    let inst = InstanceBuilder::new(&p).key("x").create(&s).await;
    vm_pass(&s).await;
    let failed = acme_instance(&s, t, &id(&inst)).await;
    assert_eq!(state(&failed), "failed", "{failed}");
    assert_eq!(failed["failure"]["code"], "CONDITION_NOT_MET");
    assert_eq!(used(&s, t, "acme", &p.pool, "instances").await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn drift_the_provider_view_wins_and_orphans_are_deleted() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 3).await;
    let t = &p.tenant_token;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    let b = InstanceBuilder::new(&p).key("b").create(&s).await;
    let c = InstanceBuilder::new(&p).key("c").create(&s).await;
    vm_pass(&s).await;
    for i in [&a, &b, &c] {
        assert_eq!(state(&acme_instance(&s, t, &id(i)).await), "running");
    }
    // a: stopped outside; b: deleted outside; an orphan labelled VM.
    p.gce.outside(ZONE, &vm_name(&a), "stop").await;
    p.gce.outside(ZONE, &vm_name(&b), "delete").await;
    p.gce
        .insert_outside(
            "bc-orphan",
            json!({ "bc-managed": "true", "bc-instance": "inst_gone" }),
        )
        .await;
    s.set_clock(T0 + 20 * MIN).await;
    vm_pass(&s).await;
    let a1 = acme_instance(&s, t, &id(&a)).await;
    assert_eq!(state(&a1), "stopped");
    let stopped = s.events_of(t, "acme", "instance.stopped").await;
    assert_eq!(stopped.len(), 1);
    assert_eq!(stopped[0]["data"]["reason"], "provider");
    assert_eq!(stopped[0]["occurredAt"], T0 + 20 * MIN);
    assert_eq!(
        state(&acme_instance(&s, t, &id(&b)).await),
        "running",
        "missed once is not lost"
    );
    assert!(
        p.gce.vm("bc-orphan").await.is_some(),
        "seen once is not deleted"
    );
    // a started outside while stopped: stopped again, unbilled.
    p.gce.outside(ZONE, &vm_name(&a), "start").await;
    s.set_clock(T0 + 40 * MIN).await;
    vm_pass(&s).await;
    let b2 = acme_instance(&s, t, &id(&b)).await;
    assert_eq!(state(&b2), "deleted");
    assert_eq!(b2["deletedReason"], "lost");
    let lost = s.events_of(t, "acme", "instance.lost").await;
    assert_eq!(lost.len(), 1);
    assert_eq!(
        lost[0]["occurredAt"],
        T0 + 20 * MIN,
        "lost at the first listing that missed it"
    );
    assert!(
        p.gce.vm("bc-orphan").await.is_none(),
        "the orphan is deleted"
    );
    let orphans = s
        .events_of(ROOT_TOKEN, ROOT, "instance.orphan-deleted")
        .await;
    assert_eq!(orphans.len(), 1);
    assert_eq!(orphans[0]["data"]["vmName"], "bc-orphan");
    assert_eq!(orphans[0]["data"]["instanceId"], "inst_gone");
    vm_pass(&s).await;
    assert_eq!(state(&acme_instance(&s, t, &id(&a)).await), "stopped");
    assert_eq!(
        p.gce.vm(&vm_name(&a)).await.expect("vm a").status,
        "TERMINATED"
    );
    assert!(
        p.gce.vm(&vm_name(&b)).await.is_none(),
        "a lost vm is never re-created"
    );
    s.set_clock(T0 + 2 * HOUR).await;
    worker::once(&s, &["vps.usage"]).await;
    // a ran from 0 to 20 min (seen stopped then), never after.
    assert_eq!(
        meters(&s, t, &id(&a)).await,
        vec![("vm.reserved.hours".into(), T0, "0.333333".into())]
    );
    assert_eq!(
        meters(&s, t, &id(&b)).await,
        vec![("vm.reserved.hours".into(), T0, "0.333333".into())]
    );
    assert_eq!(
        s.events_of(ROOT_TOKEN, ROOT, "instance.orphan-deleted")
            .await
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ledger_pool_never_reaches_the_provider() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = PlatformBuilder::new().slots(2).build(&s).await;
    let t = &p.tenant_token;
    let inst = InstanceBuilder::new(&p).key("l").create(&s).await;
    assert_eq!(state(&inst), "running");
    assert!(inst.get("vm").is_none());
    instance_op_ok(&s, t, "acme", "stop", &id(&inst)).await;
    instance_op_ok(&s, t, "acme", "start", &id(&inst)).await;
    instance_op_ok(&s, t, "acme", "delete", &id(&inst)).await;
    vm_pass(&s).await;
    assert!(p.gce.requests().await.is_empty(), "no mutating request");
    assert!(p.gce.vms().await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn pools_create_checks_vm_and_tenants_name_no_vm_settings() {
    let s = Server::start().await;
    let p = managed_platform(&s, 1).await;
    let bad = [
        (json!({ "image": "debian" }), "vm.image", "pattern"),
        (
            json!({ "image": IMAGE, "zones": ["us-east1-b"] }),
            "vm.zones",
            "region-mismatch",
        ),
        (json!({ "image": IMAGE, "diskGb": 5 }), "vm.diskGb", "range"),
        (
            json!({ "image": IMAGE, "labels": { "Bad": "x" } }),
            "vm.labels.Bad",
            "pattern",
        ),
        (
            json!({ "image": IMAGE, "labels": { "bc-pool": "x" } }),
            "vm.labels.bc-pool",
            "reserved",
        ),
        (
            json!({ "image": IMAGE, "serviceAccount": "not an email" }),
            "vm.serviceAccount",
            "pattern",
        ),
        (json!({ "zones": ["us-central1-a"] }), "vm.image", "missing"),
        (
            json!({ "image": IMAGE, "machine": "x" }),
            "vm.machine",
            "unknown",
        ),
    ];
    for (vm, field, reason) in bad {
        let a = s
            .root("pools/create", managed_pool_body(&p.account, vm.clone()))
            .await;
        let d = a.err(400, "INVALID_INPUT");
        assert_eq!(d["field"], field, "{vm}: {d}");
        assert_eq!(d["reason"], reason, "{vm}: {d}");
    }
    let ok = s
        .root(
            "pools/create",
            managed_pool_body(&p.account, json!({ "image": IMAGE })),
        )
        .await
        .ok();
    let vm = &ok["pool"]["vm"];
    assert_eq!(vm["zones"], json!(["us-central1-a"]));
    assert_eq!(vm["diskGb"], 20);
    assert_eq!(vm["network"], "global/networks/default");
    // A tenant can name no VM setting.
    let a = InstanceBuilder::new(&p)
        .key("k")
        .field("image", json!(IMAGE))
        .send(&s)
        .await;
    assert_eq!(a.err(400, "INVALID_INPUT")["field"], "image");
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_or_start_during_a_step_is_invalid_state_and_delete_waits_its_turn() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 2).await;
    let t = &p.tenant_token;
    let inst = InstanceBuilder::new(&p).key("s").create(&s).await;
    let d = instance_op(&s, t, "acme", "stop", &id(&inst)).await;
    assert_eq!(d.err(409, "INVALID_STATE")["state"], "provisioning");
    // A delete while the create is in flight deletes the VM once made.
    assert_eq!(
        state(&instance_op_ok(&s, t, "acme", "delete", &id(&inst)).await),
        "deleting"
    );
    vm_pass(&s).await;
    let gone = acme_instance(&s, t, &id(&inst)).await;
    assert_eq!(state(&gone), "deleted");
    assert!(p.gce.vm(&vm_name(&inst)).await.is_none());
    s.set_clock(T0 + 2 * HOUR).await;
    worker::once(&s, &["vps.usage"]).await;
    assert!(
        meters(&s, t, &id(&inst)).await.is_empty(),
        "never seen running: nothing billed"
    );
}

/// Waits until `inst` reaches `want`, polling every 10 ms; answers the time
/// it took from `since`.
async fn until_state(
    s: &Server,
    t: &str,
    inst: &str,
    want: &str,
    since: std::time::Instant,
) -> std::time::Duration {
    loop {
        let now = acme_instance(s, t, inst).await;
        if state(&now) == want {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < std::time::Duration::from_secs(30),
            "{inst} never reached {want}: {now}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_recorded_step_wakes_the_worker_at_once_not_an_interval_later() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 20).await;
    let t = &p.tenant_token;
    // An interval of ten minutes: only NOTIFY can start a step sooner.
    let mut cmd = worker::command(&s);
    cmd.args(["--only", "vps.instances"])
        .env("BC_INTERVAL_MS", "600000")
        .env("BC_VM_LIST_INTERVAL", "600");
    let w = worker::Running::spawn(cmd);
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let (mut running, mut deleted) = (Vec::new(), Vec::new());
    for k in 0..12 {
        let since = std::time::Instant::now();
        let inst = InstanceBuilder::new(&p)
            .key(&format!("n-{k}"))
            .create(&s)
            .await;
        running.push(until_state(&s, t, &id(&inst), "running", since).await);
        let since = std::time::Instant::now();
        instance_op_ok(&s, t, "acme", "delete", &id(&inst)).await;
        deleted.push(until_state(&s, t, &id(&inst), "deleted", since).await);
    }
    running.sort();
    deleted.sort();
    eprintln!(
        "api call to RUNNING: p50 {:?}, max {:?}; delete to deleted: p50 {:?}, max {:?}",
        running[running.len() / 2],
        running[running.len() - 1],
        deleted[deleted.len() / 2],
        deleted[deleted.len() - 1]
    );
    // Far below the ten-minute interval, with room for a loaded machine.
    assert!(running[running.len() / 2] < std::time::Duration::from_secs(10));
    assert!(deleted[deleted.len() / 2] < std::time::Duration::from_secs(10));
    w.terminate_clean().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_past_its_deadline_fails_with_timeout_and_its_vm_is_deleted() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    // Every operation ends on its 20th read (about 5 s of polling).
    let p = PlatformBuilder::new()
        .slots(2)
        .managed()
        .gce(Gce::start_polls(20).await)
        .build(&s)
        .await;
    let t = &p.tenant_token;
    let inst = InstanceBuilder::new(&p).key("slow").create(&s).await;
    let env = [("BC_VM_LIST_INTERVAL", "0"), ("BC_VM_STEP_TIMEOUT", "1s")];
    let (status, err) = worker::once_with(&s, &["vps.instances"], &env).await;
    assert!(status.success(), "{err}");
    let failed = acme_instance(&s, t, &id(&inst)).await;
    assert_eq!(state(&failed), "failed", "{failed}");
    assert_eq!(failed["failure"]["code"], "timeout");
    assert_eq!(used(&s, t, "acme", &p.pool, "instances").await, Some(0));
    // The provider made the VM (its create was sent) and the delete recorded
    // with the failure removed it.
    let name = vm_name(&inst);
    let (_, created) = p.gce.vm_runs().await;
    assert_eq!(created[&name], 1, "the create reached the provider");
    assert!(p.gce.vm(&name).await.is_none(), "a vm was left behind");
    s.set_clock(T0 + 2 * HOUR).await;
    worker::once(&s, &["vps.usage"]).await;
    assert!(meters(&s, t, &id(&inst)).await.is_empty(), "nothing billed");
}
