//! Only its own VMs (contract 3.12 r4): every VM carries the label
//! `bc-installation` with the id its database keeps, and listings, orphan
//! deletion and adoption consider only this installation's VMs. Two
//! installations share one fake project here; a database "restored from a
//! backup" meets VMs made by instances it never heard of; an orphan's slow
//! delete is reported only once a read answers 404; and a managed pool binds
//! only reservations of its own account's project.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::builders::{InstanceBuilder, PlatformBuilder};
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::db::{installation, new_installation};
use crate::support::fixtures::{
    bind, create_account, create_pool, gce_account, id, instance_op_ok, scan, tenant_with_pool,
};
use crate::support::gce::{FLAVOR, Gce, PROJECT, ZONE};
use crate::support::server::{ROOT, ROOT_TOKEN, Server, rand_suffix};
use crate::support::vms::{IMAGE, VM_ENV, managed_platform, managed_pool_body, vm_name, vm_pass};
use crate::support::worker;
use crate::system::metrics::{scrape_until, value};

async fn state(s: &Server, token: &str, inst: &str) -> String {
    let v = instance_op_ok(s, token, "acme", "get", inst).await;
    v["state"].as_str().unwrap_or_default().to_owned()
}

/// The events of `ty` in the root tenant.
async fn root_events(s: &Server, ty: &str) -> Vec<Value> {
    s.events_of(ROOT_TOKEN, ROOT, ty).await
}

/// A managed pool on the shared fake `gce` (reservation `res-a` bound to it)
/// offered to tenant `acme`: the pool and acme's token.
async fn managed_on(s: &Server, gce: &Gce) -> (String, String) {
    let account = gce_account(s, gce).await;
    let body = managed_pool_body(&account, json!({ "image": IMAGE, "zones": [ZONE] }));
    let pool = s.root("pools/create", body).await.ok()["pool"]["poolId"]
        .as_str()
        .expect("poolId")
        .to_owned();
    scan(s, &account).await;
    bind(s, &account, &Gce::reservation_id("res-a"), &pool)
        .await
        .ok();
    let token = tenant_with_pool(s, "acme", &pool).await;
    (pool, token)
}

/// An instance id made at `at` (the product's clock), as a database makes
/// them, and the name of its VM.
fn made_at(at: i64) -> (String, String) {
    let id = storage::ids::new_id("inst", at);
    let name = format!("bc-{}", id.trim_start_matches("inst_"));
    (id, name)
}

/// Waits (real time, at most `within`) until the fake no longer holds the
/// VM `name`.
async fn wait_gone(gce: &Gce, name: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while gce.vm(name).await.is_some() {
        assert!(Instant::now() < deadline, "vm {name} never went away");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_installations_sharing_a_project_never_touch_each_others_vms() {
    let gce = Gce::start().await;
    gce.put("res-a", 4, 0, "READY").await;
    let (one, two) = (Server::start().await, Server::start().await);
    // Each database as the migration makes it: an installation of its own
    // (the test databases are copies of one template: the second gets its
    // own id here).
    let ids = [installation(&one).await, new_installation(&two).await];
    assert_ne!(ids[0], ids[1]);
    let mut made = Vec::new();
    for s in [&one, &two] {
        s.set_clock(T0).await;
        let (pool, token) = managed_on(s, &gce).await;
        let inst = InstanceBuilder::on(&pool, "acme", &token)
            .key("a")
            .create(s)
            .await;
        vm_pass(s).await;
        assert_eq!(state(s, &token, &id(&inst)).await, "running");
        made.push((id(&inst), vm_name(&inst), token));
    }
    // Each worker lists the shared project several times: the other's VM is
    // neither drift nor orphan to it.
    for k in 1..=4 {
        for s in [&one, &two] {
            s.set_clock(T0 + k * 20 * MIN).await;
            vm_pass(s).await;
        }
    }
    for ((inst, name, token), s) in made.iter().zip([&one, &two]) {
        let vm = gce.vm(name).await;
        assert_eq!(vm.map(|v| v.status), Some("RUNNING".to_owned()), "{name}");
        assert_eq!(state(s, token, inst).await, "running");
        for ty in [
            "instance.orphan-deleted",
            "instance.orphan-found",
            "instance.lost",
        ] {
            assert!(root_events(s, ty).await.is_empty(), "{ty}");
        }
        assert!(s.events_of(token, "acme", "instance.lost").await.is_empty());
    }
    // Each VM carries its own installation's label.
    for ((_, name, _), installation) in made.iter().zip(&ids) {
        let vm = gce.vm(name).await.expect("vm");
        assert_eq!(vm.labels["bc-installation"], json!(installation), "{name}");
        assert_eq!(vm.labels["bc-managed"], "true");
    }
    assert_eq!(gce.vms().await.len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vm_of_another_installation_is_never_adopted_nor_deleted() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 3).await;
    let t = &p.tenant_token;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    // Another installation's VM of the very name and instance (a copy of
    // this database made it): the create answers alreadyExists, and the VM
    // is not ours.
    let labels = json!({ "bc-managed": "true", "bc-instance": id(&a),
                         "bc-installation": "another-installation" });
    p.gce.insert_outside(&vm_name(&a), labels.clone()).await;
    vm_pass(&s).await;
    let a1 = instance_op_ok(&s, t, "acme", "get", &id(&a)).await;
    assert_eq!(a1["state"], "failed", "{a1}");
    assert_eq!(a1["failure"]["code"], "name-taken");
    for k in 1..=3 {
        s.set_clock(T0 + k * 20 * MIN).await;
        vm_pass(&s).await;
    }
    let other = p.gce.vm(&vm_name(&a)).await.expect("the other's VM stays");
    assert_eq!(other.labels, labels);
    assert!(root_events(&s, "instance.orphan-deleted").await.is_empty());
    let deletes = p.gce.requests().await;
    assert!(
        deletes.iter().all(|(method, ..)| method != "DELETE"),
        "{deletes:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_orphan_newer_than_every_instance_made_is_kept_and_reported_once() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 4).await;
    let t = &p.tenant_token;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    vm_pass(&s).await;
    assert_eq!(state(&s, t, &id(&a)).await, "running");
    // As after a restore from a backup: a VM of this installation made for
    // an instance after every one this database made; and one made for an
    // instance before them, unknown too (an ordinary orphan).
    let (newer, newer_vm) = made_at(T0 + HOUR);
    let (older, older_vm) = made_at(T0 - HOUR);
    for (inst, name) in [(&newer, &newer_vm), (&older, &older_vm)] {
        let labels = json!({ "bc-managed": "true", "bc-instance": inst });
        p.gce.insert_outside(name, labels).await;
    }
    let mut found_counts = Vec::new();
    for k in 1..=4 {
        s.set_clock(T0 + k * 10 * MIN).await;
        let mut env = VM_ENV.to_vec();
        env.extend([("RUST_LOG", "info"), ("NO_COLOR", "1")]);
        let (status, log) = worker::once_with(&s, &["vps.instances"], &env).await;
        assert!(status.success(), "{log}");
        let counts = worker::pass_counts(&log, "vps.instances").expect("pass line");
        found_counts.push(counts.get("orphansFound").copied().unwrap_or(0));
    }
    assert!(p.gce.vm(&newer_vm).await.is_some(), "never deleted");
    assert!(p.gce.vm(&older_vm).await.is_none(), "an ordinary orphan");
    assert_eq!(
        found_counts,
        [1, 0, 0, 0],
        "found by the first listing only"
    );
    let found = root_events(&s, "instance.orphan-found").await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found[0]["data"],
        json!({ "vmName": newer_vm, "zone": ZONE, "instanceId": newer })
    );
    assert_eq!(found[0]["occurredAt"], T0 + 10 * MIN);
    let deleted = root_events(&s, "instance.orphan-deleted").await;
    assert_eq!(deleted.len(), 1, "{deleted:?}");
    assert_eq!(deleted[0]["data"]["instanceId"], json!(older));

    // The database makes newer instances now: the VM found stays kept.
    s.set_clock(T0 + 2 * HOUR).await;
    let b = InstanceBuilder::new(&p).key("b").create(&s).await;
    assert!(id(&b) > newer);
    for k in 1..=3 {
        s.set_clock(T0 + 2 * HOUR + k * 10 * MIN).await;
        vm_pass(&s).await;
    }
    assert_eq!(state(&s, t, &id(&b)).await, "running");
    assert!(p.gce.vm(&newer_vm).await.is_some(), "still never deleted");
    assert_eq!(root_events(&s, "instance.orphan-found").await.len(), 1);
    assert_eq!(root_events(&s, "instance.orphan-deleted").await.len(), 1);

    // The worker's gauge counts it while listings see it (the alert's
    // input), and drops once the operator has deleted it.
    let port = worker::free_port();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let mut cmd = worker::command(&s);
    cmd.env("BC_METRICS_LISTEN", format!("127.0.0.1:{port}"))
        .envs(VM_ENV)
        .args(["--only", "vps.instances"]);
    let w = worker::Running::spawn(cmd);
    scrape_until(&url, "one orphan found", |m| {
        value(m, "bc_vm_orphans_found", &[]) == Some(1.0)
    })
    .await;
    p.gce.outside(ZONE, &newer_vm, "delete").await;
    s.set_clock(T0 + 3 * HOUR).await;
    scrape_until(&url, "no orphan found left", |m| {
        value(m, "bc_vm_orphans_found", &[]) == Some(0.0)
    })
    .await;
    w.terminate_clean().await;
    assert_eq!(root_events(&s, "instance.orphan-found").await.len(), 1);
    assert_eq!(
        root_events(&s, "instance.orphan-deleted").await.len(),
        1,
        "deleted by the operator, not by the platform"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_orphan_counts_as_deleted_only_once_a_read_answers_404() {
    // Operations take 10 s, more than a listing follows a delete (~4 s).
    const LATENCY_MS: u64 = 10_000;
    let fake = fake_gce::FakeGce::new(fake_gce::FakeGceConfig::default())
        .with_operation_latency(LATENCY_MS, LATENCY_MS);
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = PlatformBuilder::new()
        .slots(2)
        .managed()
        .gce(Gce::start_fake(fake).await)
        .build(&s)
        .await;
    let labels = json!({ "bc-managed": "true", "bc-instance": "inst_gone" });
    let op = p
        .gce
        .insert_outside_started(ZONE, "bc-orphan", labels)
        .await;
    let within = Duration::from_millis(LATENCY_MS + 20_000);
    let deadline = Instant::now() + within;
    while !p.gce.operation_done(ZONE, &op).await {
        assert!(Instant::now() < deadline, "the create never ended");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(p.gce.vm("bc-orphan").await.expect("vm").status, "RUNNING");

    // Listing 1 sees it; listing 2 sends its delete, which runs on.
    s.set_clock(T0 + 10 * MIN).await;
    vm_pass(&s).await;
    s.set_clock(T0 + 20 * MIN).await;
    vm_pass(&s).await;
    let deletes = |r: Vec<(String, String, String)>| {
        r.into_iter()
            .filter(|(method, ..)| method == "DELETE")
            .count()
    };
    assert_eq!(deletes(p.gce.requests().await), 1, "the delete was sent");
    assert!(
        root_events(&s, "instance.orphan-deleted").await.is_empty(),
        "not deleted while its delete runs"
    );
    assert!(
        p.gce.vm("bc-orphan").await.is_some(),
        "the fake still holds it"
    );

    // Its delete ends: listing 3 no longer sees it, and a read answers 404.
    wait_gone(&p.gce, "bc-orphan", within).await;
    s.set_clock(T0 + 30 * MIN).await;
    vm_pass(&s).await;
    let deleted = root_events(&s, "instance.orphan-deleted").await;
    assert_eq!(deleted.len(), 1, "{deleted:?}");
    assert_eq!(
        deleted[0]["data"],
        json!({ "vmName": "bc-orphan", "zone": ZONE, "instanceId": "inst_gone" })
    );
    assert_eq!(deleted[0]["occurredAt"], T0 + 30 * MIN);
    s.set_clock(T0 + 40 * MIN).await;
    vm_pass(&s).await;
    assert_eq!(root_events(&s, "instance.orphan-deleted").await.len(), 1);
    assert_eq!(deletes(p.gce.requests().await), 1, "sent once");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_managed_pool_binds_only_reservations_of_its_own_accounts_project() {
    const STAGING: &str = "platform-staging";
    let s = Server::start().await;
    s.set_clock(T0).await;
    let gce = Gce::start().await;
    gce.put("res-a", 2, 0, "READY").await;
    let resp = reqwest::Client::new()
        .put(format!(
            "{}/fake/projects/{STAGING}/zones/{ZONE}/reservations/res-s",
            gce.url
        ))
        .json(&json!({ "count": 2, "machineType": FLAVOR }))
        .send()
        .await
        .expect("put");
    assert!(resp.status().is_success(), "{}", resp.status());
    let prod = gce_account(&s, &gce).await;
    let prod_too = gce_account(&s, &gce).await;
    let staging = create_account(
        &s,
        ROOT_TOKEN,
        json!({
            "tenantId": ROOT,
            "name": "gce staging",
            "provider": "gce",
            "config": { "project": STAGING, "credentials": "none", "endpoint": gce.url },
            "idempotencyKey": format!("acct-{}", rand_suffix()),
        }),
    )
    .await;
    for account in [&prod, &prod_too, &staging] {
        scan(&s, account).await;
    }
    let managed = managed_pool_body(&prod, json!({ "image": IMAGE, "zones": [ZONE] }));
    let managed = s.root("pools/create", managed).await.ok()["pool"]["poolId"]
        .as_str()
        .expect("poolId")
        .to_owned();
    let ledger = create_pool(&s, &prod).await;
    let staged = format!("projects/{STAGING}/zones/{ZONE}/reservations/res-s");

    // Another project's reservation: refused for the managed pool.
    let refused = bind(&s, &staging, &staged, &managed).await;
    let details = refused.err(400, "INVALID_INPUT");
    assert_eq!(details["reason"], "other-project", "{details}");
    assert_eq!(details["field"], "poolId");
    // A ledger pool binds it as before.
    let bound = bind(&s, &staging, &staged, &ledger).await.ok();
    assert_eq!(bound["reservation"]["poolId"], json!(ledger), "{bound}");
    // The managed pool's own project, through its account or another one.
    let own = Gce::reservation_id("res-a");
    assert!(own.starts_with(&format!("projects/{PROJECT}/")));
    bind(&s, &prod_too, &own, &managed).await.ok();
    bind(&s, &prod, &own, &managed).await.ok();
}
