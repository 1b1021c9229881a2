//! No state without a step (contract 3.12 r4): every way a step can end
//! moves its instance on. A create refused with `404` fails with the
//! provider's reason and gives its quota back; a VM found gone by a stop
//! makes its instance lost; a delete refused by the provider is sent again
//! until the VM is gone. None of them leaves an instance `provisioning`,
//! `stopping` or `deleting` with no open step (it would hold its slot and
//! quota for good).

use std::time::{Duration, Instant};

use diesel::QueryableByName;
use diesel::sql_types::BigInt;
use diesel_async::RunQueryDsl;
use serde_json::json;

use crate::support::builders::InstanceBuilder;
use crate::support::clock::T0;
use crate::support::db::{db, open_steps};
use crate::support::fixtures::{default_quotas, id, instance_op_ok, offer, used};
use crate::support::gce::ZONE;
use crate::support::server::Server;
use crate::support::vms::{acme_instance, managed_platform, managed_pool_body};
use crate::support::worker;

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// Managed instances in a state that waits for a step, with no open step.
async fn stuck(s: &Server) -> i64 {
    let mut conn = db(s).await;
    let c: Count = diesel::sql_query(
        "SELECT count(*) AS n FROM instances i \
         WHERE i.managed AND i.state IN ('provisioning', 'stopping', 'starting', 'deleting') \
           AND NOT EXISTS (SELECT 1 FROM vm_steps s \
                           WHERE s.instance_id = i.instance_id AND s.state = 'open')",
    )
    .get_result(&mut conn)
    .await
    .expect("count");
    c.n
}

/// `vps.instances` passes (`--once`) until no step is open; a step put off
/// with backoff (at most a second here) is due again after a pause.
async fn settle(s: &Server) {
    let env = [
        ("BC_VM_LIST_INTERVAL", "0"),
        ("BC_VM_STEP_TIMEOUT", "60"),
        ("BC_VM_MAX_BACKOFF", "1s"),
    ];
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, err) = worker::once_with(s, &["vps.instances"], &env).await;
        assert!(status.success(), "worker failed: {err}");
        if open_steps(s).await == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "steps still open after 60 s");
        tokio::time::sleep(Duration::from_millis(1200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_refused_with_404_fails_with_the_providers_reason_and_holds_nothing() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 2).await;
    let t = &p.tenant_token;
    // A pool whose image is gone at the provider (no reservation: on-demand).
    let body = managed_pool_body(
        &p.account,
        json!({ "image": "projects/missing/global/images/deleted-image",
                "zones": ["us-central1-a"] }),
    );
    let pool = s.root("pools/create", body).await.ok()["pool"]["poolId"]
        .as_str()
        .expect("poolId")
        .to_owned();
    offer(&s, &pool, "acme", default_quotas()).await;
    let inst = InstanceBuilder::on(&pool, "acme", t)
        .key("img")
        .create(&s)
        .await;
    assert_eq!(used(&s, t, "acme", &pool, "instances").await, Some(1));
    settle(&s).await;
    let failed = acme_instance(&s, t, &id(&inst)).await;
    assert_eq!(failed["state"], "failed", "{failed}");
    assert_eq!(failed["failure"]["code"], "notFound");
    assert_eq!(used(&s, t, "acme", &pool, "instances").await, Some(0));
    assert_eq!(stuck(&s).await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vm_gone_during_a_stop_makes_its_instance_lost() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 2).await;
    let t = &p.tenant_token;
    let inst = InstanceBuilder::new(&p).key("gone").create(&s).await;
    settle(&s).await;
    let running = acme_instance(&s, t, &id(&inst)).await;
    assert_eq!(running["state"], "running");
    let name = running["vm"]["name"].as_str().expect("vm.name").to_owned();
    // Deleted behind the platform's back, then stopped before any listing
    // noticed.
    p.gce.outside(ZONE, &name, "delete").await;
    let stopping = instance_op_ok(&s, t, "acme", "stop", &id(&inst)).await;
    assert_eq!(stopping["state"], "stopping");
    settle(&s).await;
    let lost = acme_instance(&s, t, &id(&inst)).await;
    assert_eq!(lost["state"], "deleted", "{lost}");
    assert_eq!(lost["deletedReason"], "lost");
    assert_eq!(used(&s, t, "acme", &p.pool, "instances").await, Some(0));
    assert_eq!(stuck(&s).await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_delete_refused_by_the_provider_is_sent_again_until_the_vm_is_gone() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 2).await;
    let t = &p.tenant_token;
    let inst = InstanceBuilder::new(&p).key("del").create(&s).await;
    settle(&s).await;
    let name = acme_instance(&s, t, &id(&inst)).await["vm"]["name"]
        .as_str()
        .expect("vm.name")
        .to_owned();
    // The next mutating call is answered 400, a refusal for good.
    let answer = reqwest::Client::new()
        .post(format!("{}/fake/fail-mutations", p.gce.url))
        .json(&json!({ "count": 1, "status": 400 }))
        .send()
        .await
        .expect("fail-mutations");
    assert!(answer.status().is_success(), "{answer:?}");
    let deleting = instance_op_ok(&s, t, "acme", "delete", &id(&inst)).await;
    assert_eq!(deleting["state"], "deleting");
    settle(&s).await;
    let gone = acme_instance(&s, t, &id(&inst)).await;
    assert_eq!(gone["state"], "deleted", "{gone}");
    assert_eq!(gone["deletedReason"], "requested");
    assert!(p.gce.vm(&name).await.is_none(), "the vm is gone");
    assert_eq!(used(&s, t, "acme", &p.pool, "instances").await, Some(0));
    assert_eq!(stuck(&s).await, 0);
    // The operator's gauge of the same rule reads the same: 0, and 1 for an
    // instance left waiting by hand.
    let mut conn = db(&s).await;
    let gauges = storage::ops::gauges::vm_gauges(&mut conn)
        .await
        .expect("gauges");
    assert_eq!(gauges.without_step, 0);
    diesel::sql_query("UPDATE instances SET state = 'stopping' WHERE instance_id = $1")
        .bind::<diesel::sql_types::Text, _>(id(&inst))
        .execute(&mut conn)
        .await
        .expect("by hand");
    let gauges = storage::ops::gauges::vm_gauges(&mut conn)
        .await
        .expect("gauges");
    assert_eq!(gauges.without_step, 1);
    // Two deletes reached the provider: the refused one and the one after it.
    let deletes = p
        .gce
        .requests()
        .await
        .into_iter()
        .filter(|(method, path, _)| method == "DELETE" && path.ends_with(&name))
        .count();
    assert!(deletes >= 2, "{deletes} deletes sent");
}
