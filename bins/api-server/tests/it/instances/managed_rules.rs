//! Managed instances' rules (contract 3.1, 3.5, 3.7, 3.12, 4) end to end
//! against fake-gce: a deleted tenant's VMs deleted, an account that cannot
//! go while its managed instances live, idempotent creates that make one
//! VM, starts that never move a VM, on-demand zones tried in order,
//! adoption of a VM already made and a name taken by another, and racing
//! requests that never open two steps of a kind.

use diesel::QueryableByName;
use diesel::sql_types::{Nullable, Text};
use diesel_async::RunQueryDsl;
use serde_json::{Value, json};

use crate::support::builders::{GrantBuilder, InstanceBuilder};
use crate::support::calls::delete_tenant;
use crate::support::clock::{HOUR, T0};
use crate::support::db::{db, open_steps, quotas_in_db};
use crate::support::fixtures::{
    bind, default_quotas, id, in_grant, instance_op, instance_op_ok, offer, placement, plain,
    root_can_use, scan, used,
};
use crate::support::gce::{FLAVOR, Gce};
use crate::support::server::{ROOT, ROOT_TOKEN, Server};
use crate::support::vms::{
    IMAGE, acme_instance, managed_platform, managed_pool_body, state, vm_name, vm_pass,
};

const ZONE_B: &str = "us-central1-b";

#[derive(Debug, QueryableByName)]
struct StepRow {
    #[diesel(sql_type = Text)]
    kind: String,
    #[diesel(sql_type = Text)]
    state: String,
}

/// The steps of an instance as `(kind, state)`, in the order recorded.
async fn steps(s: &Server, inst: &str) -> Vec<(String, String)> {
    let mut conn = db(s).await;
    let rows: Vec<StepRow> = diesel::sql_query(
        "SELECT kind, state FROM vm_steps WHERE instance_id = $1 ORDER BY step_id",
    )
    .bind::<Text, _>(inst)
    .load(&mut conn)
    .await
    .expect("steps");
    rows.into_iter().map(|r| (r.kind, r.state)).collect()
}

#[derive(Debug, QueryableByName)]
struct Stored {
    #[diesel(sql_type = Text)]
    state: String,
    #[diesel(sql_type = Nullable<Text>)]
    deleted_reason: Option<String>,
}

/// `(state, deleted_reason)` of an instance row, whoever owns it.
async fn stored(s: &Server, inst: &str) -> (String, Option<String>) {
    let mut conn = db(s).await;
    let r: Stored =
        diesel::sql_query("SELECT state, deleted_reason FROM instances WHERE instance_id = $1")
            .bind::<Text, _>(inst)
            .get_result(&mut conn)
            .await
            .expect("instance row");
    (r.state, r.deleted_reason)
}

/// How many VMs of `name` the fake ever made.
async fn made(gce: &Gce, name: &str) -> u64 {
    gce.vm_runs().await.1[name].as_u64().unwrap_or(0)
}

/// Runs `vps.instances` passes until no step is open (at most 5).
async fn settle_steps(s: &Server) {
    for _ in 0..5 {
        vm_pass(s).await;
        if open_steps(s).await == 0 {
            return;
        }
    }
    panic!("steps still open after five passes");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_tenants_vms_are_deleted_at_the_provider_and_its_slots_freed() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 3).await;
    let t = &p.tenant_token;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    let b = InstanceBuilder::new(&p).key("b").create(&s).await;
    vm_pass(&s).await;
    instance_op_ok(&s, t, "acme", "stop", &id(&b)).await;
    vm_pass(&s).await;
    assert_eq!(state(&acme_instance(&s, t, &id(&b)).await), "stopped");
    // One still provisioning when the tenant goes.
    let c = InstanceBuilder::new(&p).key("c").create(&s).await;
    assert_eq!(p.gce.vms().await.len(), 2);
    delete_tenant(&s, "acme").await.ok();
    for i in [&a, &b, &c] {
        assert_eq!(
            stored(&s, &id(i)).await,
            ("deleting".to_owned(), Some("tenant-deleted".to_owned())),
            "the VM is not confirmed gone yet"
        );
    }
    settle_steps(&s).await;
    assert!(p.gce.vms().await.is_empty(), "no VM is left");
    let all = s
        .list_all(
            ROOT_TOKEN,
            "instances/list",
            json!({ "tenantId": ROOT, "all": true }),
        )
        .await;
    for i in [&a, &b, &c] {
        let seen = all
            .iter()
            .find(|x| x["instanceId"] == id(i))
            .expect("listed");
        assert_eq!(state(seen), "deleted", "{seen}");
        assert_eq!(seen["deletedReason"], "tenant-deleted");
    }
    for q in quotas_in_db(&s, "acme").await {
        assert_eq!(q.used, 0, "{q:?}");
    }
    // The reservation's three slots are free again.
    root_can_use(&s, &p.pool).await;
    for k in 0..3 {
        let r = InstanceBuilder::new(&p)
            .by(ROOT, ROOT_TOKEN)
            .key(&format!("r{k}"))
            .create(&s)
            .await;
        assert_eq!(r["placement"]["kind"], "reservation", "{r}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_account_behind_live_managed_instances_cannot_be_deleted() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 2).await;
    let t = &p.tenant_token;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    vm_pass(&s).await;
    let b = InstanceBuilder::new(&p).key("b").create(&s).await;
    let del = || s.root("providerAccounts/delete", json!({ "accountId": p.account }));
    let mut want = vec![id(&a), id(&b)];
    want.sort();
    let refused = del().await;
    assert_eq!(
        refused.err(409, "INVALID_STATE")["instanceIds"],
        json!(want)
    );
    instance_op_ok(&s, t, "acme", "delete", &id(&a)).await;
    instance_op_ok(&s, t, "acme", "delete", &id(&b)).await;
    // Deleting is not deleted: the provider has not confirmed yet.
    del().await.err(409, "INVALID_STATE");
    settle_steps(&s).await;
    assert!(p.gce.vms().await.is_empty());
    assert_eq!(del().await.ok()["deleted"], true);
    let d = InstanceBuilder::new(&p).key("late").send(&s).await;
    assert_eq!(d.err(409, "INVALID_STATE")["reason"], "no-account");
    assert_eq!(used(&s, t, "acme", &p.pool, "instances").await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replayed_create_records_one_step_and_makes_one_vm() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 4).await;
    let t = &p.tenant_token;
    let first = InstanceBuilder::new(&p).key("same").create(&s).await;
    let again =
        futures::future::join_all((0..5).map(|_| InstanceBuilder::new(&p).key("same").create(&s)))
            .await;
    for a in &again {
        assert_eq!(id(a), id(&first));
    }
    assert_eq!(
        steps(&s, &id(&first)).await,
        vec![("create".to_owned(), "open".to_owned())]
    );
    vm_pass(&s).await;
    let replay = InstanceBuilder::new(&p).key("same").create(&s).await;
    assert_eq!(id(&replay), id(&first));
    vm_pass(&s).await;
    assert_eq!(
        steps(&s, &id(&first)).await,
        vec![("create".to_owned(), "done".to_owned())]
    );
    assert_eq!(p.gce.vms().await.len(), 1);
    assert_eq!(made(&p.gce, &vm_name(&first)).await, 1);
    assert_eq!(used(&s, t, "acme", &p.pool, "instances").await, Some(1));
}

/// A VM's zone and reservation affinity as the fake holds it.
async fn where_is(gce: &Gce, name: &str) -> (String, Value) {
    let vm = gce.vm(name).await.expect("the vm");
    (vm.zone, vm.affinity)
}

#[tokio::test(flavor = "multi_thread")]
async fn start_stays_on_the_vms_reservation() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 2).await;
    let t = &p.tenant_token;
    // A second reservation of the pool in another zone, with room: a start
    // that placed anew would land there.
    p.gce.put_in(ZONE_B, "res-c", 4, 0, FLAVOR, "READY").await;
    scan(&s, &p.account).await;
    let res_c = Gce::reservation_in(ZONE_B, "res-c");
    bind(&s, &p.account, &res_c, &p.pool).await.ok();
    let g = GrantBuilder::new(&p)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    let b = InstanceBuilder::new(&p).key("b").create(&s).await;
    assert_eq!(placement(&a), in_grant(&g));
    assert_eq!(placement(&b), plain("reservation"));
    vm_pass(&s).await;
    let before_a = where_is(&p.gce, &vm_name(&a)).await;
    let before_b = where_is(&p.gce, &vm_name(&b)).await;
    assert_eq!(before_a.1["values"], json!(["res-a"]));
    instance_op_ok(&s, t, "acme", "stop", &id(&a)).await;
    instance_op_ok(&s, t, "acme", "stop", &id(&b)).await;
    vm_pass(&s).await;
    // b's ordinary slot went with its stop; c takes it.
    let c = InstanceBuilder::new(&p).key("c").create(&s).await;
    assert_eq!(placement(&c), plain("reservation"));
    assert_eq!(c["placement"]["reservationId"], json!(p.reservation));
    vm_pass(&s).await;
    let refused = instance_op(&s, t, "acme", "start", &id(&b)).await;
    let d = refused.err(409, "CAPACITY_UNAVAILABLE");
    assert_eq!(d["reservationId"], json!(p.reservation), "{d}");
    let b1 = acme_instance(&s, t, &id(&b)).await;
    assert_eq!(state(&b1), "stopped");
    assert_eq!(b1["vm"]["zone"], "us-central1-a");
    assert_eq!(steps(&s, &id(&b)).await.len(), 2, "create and stop only");
    // a held its grant slot while stopped: back into its grant.
    let starting = instance_op_ok(&s, t, "acme", "start", &id(&a)).await;
    assert_eq!(state(&starting), "starting");
    assert_eq!(placement(&starting), in_grant(&g));
    vm_pass(&s).await;
    let a1 = acme_instance(&s, t, &id(&a)).await;
    assert_eq!(state(&a1), "running");
    assert_eq!(placement(&a1), in_grant(&g));
    assert_eq!(a1["vm"]["zone"], a["vm"]["zone"]);
    assert_eq!(where_is(&p.gce, &vm_name(&a)).await, before_a);
    assert_eq!(where_is(&p.gce, &vm_name(&b)).await, before_b);
    for i in [&a, &b] {
        assert_eq!(made(&p.gce, &vm_name(i)).await, 1);
    }
    assert!(
        p.gce.vms().await.iter().all(|v| v.zone == "us-central1-a"),
        "nothing went to res-c's zone"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn on_demand_vms_try_the_pools_zones_in_order() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 1).await;
    let t = &p.tenant_token;
    // A managed pool with no reservation bound: every VM is on-demand.
    let body = managed_pool_body(
        &p.account,
        json!({ "image": IMAGE, "zones": ["us-central1-a", ZONE_B] }),
    );
    let pool = s.root("pools/create", body).await.ok()["pool"]["poolId"]
        .as_str()
        .expect("poolId")
        .to_owned();
    offer(&s, &pool, "acme", default_quotas()).await;
    let x = InstanceBuilder::on(&pool, "acme", t)
        .key("x")
        .create(&s)
        .await;
    assert_eq!(placement(&x), plain("ondemand"));
    assert_eq!(x["vm"]["zone"], "us-central1-a");
    vm_pass(&s).await;
    assert_eq!(state(&acme_instance(&s, t, &id(&x)).await), "running");
    let vm = p.gce.vm(&vm_name(&x)).await.expect("x's vm");
    assert_eq!(vm.zone, "us-central1-a");
    assert_eq!(vm.affinity["consumeReservationType"], "NO_RESERVATION");
    // The first zone exhausted: the next one.
    p.gce.fail_creates(1, "ZONE_RESOURCE_POOL_EXHAUSTED").await;
    let y = InstanceBuilder::on(&pool, "acme", t)
        .key("y")
        .create(&s)
        .await;
    settle_steps(&s).await;
    let y1 = acme_instance(&s, t, &id(&y)).await;
    assert_eq!(state(&y1), "running", "{y1}");
    assert_eq!(y1["vm"]["zone"], ZONE_B);
    let vm = p.gce.vm(&vm_name(&y)).await.expect("y's vm");
    assert_eq!(vm.zone, ZONE_B);
    assert_eq!(vm.affinity["consumeReservationType"], "NO_RESERVATION");
    // Its later steps go to the zone it is in.
    instance_op_ok(&s, t, "acme", "delete", &id(&y)).await;
    settle_steps(&s).await;
    assert_eq!(state(&acme_instance(&s, t, &id(&y)).await), "deleted");
    assert!(p.gce.vm(&vm_name(&y)).await.is_none(), "y's VM is deleted");
    // Both exhausted: it fails with the code.
    p.gce.fail_creates(2, "ZONE_RESOURCE_POOL_EXHAUSTED").await;
    let z = InstanceBuilder::on(&pool, "acme", t)
        .key("z")
        .create(&s)
        .await;
    settle_steps(&s).await;
    let z1 = acme_instance(&s, t, &id(&z)).await;
    assert_eq!(state(&z1), "failed", "{z1}");
    assert_eq!(z1["failure"]["code"], "ZONE_RESOURCE_POOL_EXHAUSTED");
    assert!(p.gce.vm(&vm_name(&z)).await.is_none());
    assert_eq!(used(&s, t, "acme", &pool, "instances").await, Some(1));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vm_already_made_for_the_instance_is_adopted_and_anothers_name_fails_it() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 3).await;
    let t = &p.tenant_token;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    let b = InstanceBuilder::new(&p).key("b").create(&s).await;
    // Made before the worker ran (as by a replica that died after sending).
    p.gce
        .insert_outside(
            &vm_name(&a),
            json!({ "bc-managed": "true", "bc-instance": id(&a) }),
        )
        .await;
    // b's name taken by a VM of another instance.
    p.gce
        .insert_outside(&vm_name(&b), json!({ "bc-instance": "inst_someoneelse" }))
        .await;
    vm_pass(&s).await;
    let a1 = acme_instance(&s, t, &id(&a)).await;
    assert_eq!(state(&a1), "running", "{a1}");
    assert_eq!(
        made(&p.gce, &vm_name(&a)).await,
        1,
        "adopted, not made again"
    );
    let b1 = acme_instance(&s, t, &id(&b)).await;
    assert_eq!(state(&b1), "failed", "{b1}");
    assert_eq!(b1["failure"]["code"], "name-taken");
    assert_eq!(used(&s, t, "acme", &p.pool, "instances").await, Some(1));
    vm_pass(&s).await;
    let other = p.gce.vm(&vm_name(&b)).await.expect("the other's VM stays");
    assert_eq!(other.labels["bc-instance"], "inst_someoneelse");
    assert_eq!(made(&p.gce, &vm_name(&b)).await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn racing_stop_delete_and_start_open_no_two_steps_of_a_kind() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 2).await;
    let t = &p.tenant_token;
    let inst = InstanceBuilder::new(&p).key("r").create(&s).await;
    vm_pass(&s).await;
    let ops = ["stop", "start", "stop", "delete", "stop"];
    let iid = id(&inst);
    let answers = futures::future::join_all(
        (0..20).map(|k| instance_op(&s, t, "acme", ops[k % ops.len()], &iid)),
    )
    .await;
    for a in &answers {
        assert!(
            a.status == 200 || a.code() == "INVALID_STATE",
            "{} {}",
            a.status,
            a.body
        );
    }
    let recorded = steps(&s, &id(&inst)).await;
    let open: Vec<&str> = recorded
        .iter()
        .filter(|(_, st)| st == "open")
        .map(|(k, _)| k.as_str())
        .collect();
    assert!(
        open == ["stop", "delete"] || open == ["delete"],
        "steps in order, one of each: {recorded:?}"
    );
    assert_eq!(recorded.len(), open.len() + 1, "{recorded:?}");
    settle_steps(&s).await;
    let end = acme_instance(&s, t, &id(&inst)).await;
    assert_eq!(state(&end), "deleted", "{end}");
    assert!(p.gce.vms().await.is_empty());
    assert_eq!(made(&p.gce, &vm_name(&inst)).await, 1);
    assert!(
        steps(&s, &id(&inst))
            .await
            .iter()
            .all(|(_, st)| st == "done")
    );
    assert_eq!(used(&s, t, "acme", &p.pool, "instances").await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn another_tenant_cannot_see_or_touch_a_managed_instance() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 2).await;
    let t = &p.tenant_token;
    let inst = InstanceBuilder::new(&p).key("mine").create(&s).await;
    vm_pass(&s).await;
    let beta = s.tenant("beta").await;
    offer(&s, &p.pool, "beta", default_quotas()).await;
    let sent = p.gce.requests().await.len();
    for method in ["get", "stop", "delete", "start"] {
        let a = instance_op(&s, &beta, "beta", method, &id(&inst)).await;
        a.err(404, "NOT_FOUND");
    }
    vm_pass(&s).await;
    assert_eq!(p.gce.requests().await.len(), sent, "nothing sent");
    assert_eq!(steps(&s, &id(&inst)).await.len(), 1);
    let mine = acme_instance(&s, t, &id(&inst)).await;
    assert_eq!(state(&mine), "running");
    assert_eq!(
        p.gce.vm(&vm_name(&inst)).await.expect("vm").status,
        "RUNNING"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vm_confirmed_running_is_recorded_while_the_tenants_quota_rows_are_held() {
    // A confirmed create changes no quota, so its outcome does not queue on
    // the quota rows every create of the tenant in the pool takes.
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = managed_platform(&s, 2).await;
    let t = &p.tenant_token;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await;
    let mut holder = db(&s).await;
    diesel::sql_query("BEGIN")
        .execute(&mut holder)
        .await
        .expect("begin");
    let held = diesel::sql_query(
        "SELECT resource FROM quotas WHERE tenant_id = 'acme' AND pool_id = $1 FOR UPDATE",
    )
    .bind::<Text, _>(&p.pool)
    .execute(&mut holder)
    .await
    .expect("lock the quota rows");
    assert!(held > 0, "acme has quota rows in the pool");
    // The rows stay held until the pass is done: a pass that waited for
    // them would never end. The bound is for a slow, loaded machine, where
    // starting the worker and its pass has taken over a minute.
    tokio::time::timeout(std::time::Duration::from_secs(240), vm_pass(&s))
        .await
        .expect("the worker's pass does not wait for the quota rows");
    assert_eq!(state(&acme_instance(&s, t, &id(&a)).await), "running");
    diesel::sql_query("ROLLBACK")
        .execute(&mut holder)
        .await
        .expect("rollback");
    // The running VM keeps its quota charged.
    assert_eq!(used(&s, t, "acme", &p.pool, "instances").await, Some(1));
}
