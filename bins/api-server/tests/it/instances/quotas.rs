//! Quota charges of instances (contract 3.4, seed-quotas.md): what
//! `instances.create` charges, `QUOTA_EXCEEDED`, failed admissions charging
//! nothing, stopped instances staying charged, delete releasing, and
//! `quotas.set` below `used`.

use serde_json::json;

use crate::support::builders::{GrantBuilder, InstanceBuilder};
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::db::instances_in_db;
use crate::support::fixtures::{
    create_pool, default_quotas, id, in_grant, instance_op_ok, list_instances, offer, placement,
    plain, platform_at_t0, quotas, set_quota, used,
};
use crate::support::server::Server;

#[tokio::test(flavor = "multi_thread")]
async fn create_charges_instances_vcpus_and_memory_of_the_flavor_and_no_zero_amount() {
    let (s, p) = platform_at_t0(10).await;
    let t = &p.tenant_token;
    // acme has no gpus row (a missing row grants 0): a zero amount is not
    // charged, so the create succeeds and no gpus row appears.
    InstanceBuilder::new(&p).key("a").create(&s).await;
    assert_eq!(
        quotas(&s, t, "acme", &p.pool).await,
        vec![
            ("instances".to_owned(), 10, 1),
            ("memoryGib".to_owned(), 1000, 16),
            ("vcpus".to_owned(), 40, 4),
        ]
    );
    InstanceBuilder::new(&p).key("b").create(&s).await;
    assert_eq!(
        quotas(&s, t, "acme", &p.pool).await,
        vec![
            ("instances".to_owned(), 10, 2),
            ("memoryGib".to_owned(), 1000, 32),
            ("vcpus".to_owned(), 40, 8),
        ]
    );
    // Nothing is charged in another pool.
    let pool2 = create_pool(&s, &p.account).await;
    offer(&s, &pool2, "acme", default_quotas()).await;
    assert!(
        quotas(&s, t, "acme", &pool2)
            .await
            .iter()
            .all(|(_, _, u)| *u == 0),
        "other pool untouched"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gpu_flavor_charges_gpus_and_a_missing_gpus_row_is_quota_exceeded() {
    let (s, p) = platform_at_t0(4).await;
    let t = &p.tenant_token;
    let pool = s
        .root(
            "pools/create",
            json!({
                "name": "gpu pool",
                "region": "us-central1",
                "provider": "gce",
                "accountId": p.account,
                "flavors": [{ "name": "a2-highgpu-1g", "vcpus": 12, "memoryGib": 85, "gpus": 1 }],
                "idempotencyKey": "gpu-pool",
            }),
        )
        .await
        .ok()["pool"]["poolId"]
        .as_str()
        .expect("poolId")
        .to_owned();
    offer(
        &s,
        &pool,
        "acme",
        json!({ "instances": 5, "vcpus": 100, "memoryGib": 1000 }),
    )
    .await;
    let gpu = json!({ "flavor": "a2-highgpu-1g" });
    let r = InstanceBuilder::on(&pool, "acme", t)
        .key("g1")
        .fields(gpu.clone())
        .send(&s)
        .await;
    assert_eq!(
        r.err(429, "QUOTA_EXCEEDED"),
        &json!({ "poolId": pool, "resource": "gpus", "max": 0, "used": 0, "requested": 1 })
    );
    assert!(
        quotas(&s, t, "acme", &pool)
            .await
            .iter()
            .all(|(_, _, u)| *u == 0)
    );
    set_quota(&s, "acme", &pool, "gpus", 1).await;
    let i = InstanceBuilder::on(&pool, "acme", t)
        .key("g1")
        .fields(gpu.clone())
        .create(&s)
        .await;
    assert_eq!(placement(&i), plain("ondemand"));
    assert_eq!(
        quotas(&s, t, "acme", &pool).await,
        vec![
            ("gpus".to_owned(), 1, 1),
            ("instances".to_owned(), 5, 1),
            ("memoryGib".to_owned(), 1000, 85),
            ("vcpus".to_owned(), 100, 12),
        ]
    );
    let r = InstanceBuilder::on(&pool, "acme", t)
        .key("g2")
        .fields(gpu)
        .send(&s)
        .await;
    assert_eq!(
        r.err(429, "QUOTA_EXCEEDED"),
        &json!({ "poolId": pool, "resource": "gpus", "max": 1, "used": 1, "requested": 1 })
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn quota_exceeded_charges_nothing_creates_nothing_and_keeps_the_key_free() {
    let (s, p) = platform_at_t0(10).await;
    let t = &p.tenant_token;
    set_quota(&s, "acme", &p.pool, "vcpus", 8).await;
    InstanceBuilder::new(&p).key("a").create(&s).await;
    InstanceBuilder::new(&p).key("b").create(&s).await;
    let before = quotas(&s, t, "acme", &p.pool).await;
    let r = InstanceBuilder::new(&p).key("c").send(&s).await;
    assert_eq!(
        r.err(429, "QUOTA_EXCEEDED"),
        &json!({ "poolId": p.pool, "resource": "vcpus", "max": 8, "used": 8, "requested": 4 })
    );
    assert_eq!(quotas(&s, t, "acme", &p.pool).await, before);
    assert_eq!(list_instances(&s, t, "acme", None).await.len(), 2);
    assert_eq!(
        instance_rows_of(&s, "acme").await,
        2,
        "no instance row was written"
    );
    // The failed request did not consume its key.
    set_quota(&s, "acme", &p.pool, "vcpus", 12).await;
    let c = InstanceBuilder::new(&p).key("c").create(&s).await;
    assert_eq!(placement(&c), plain("reservation"));
    assert_eq!(used(&s, t, "acme", &p.pool, "vcpus").await, Some(12));

    // The instance count is a quota too.
    set_quota(&s, "acme", &p.pool, "vcpus", 100).await;
    set_quota(&s, "acme", &p.pool, "instances", 3).await;
    let r = InstanceBuilder::new(&p).key("d").send(&s).await;
    assert_eq!(
        r.err(429, "QUOTA_EXCEEDED"),
        &json!({ "poolId": p.pool, "resource": "instances", "max": 3, "used": 3, "requested": 1 })
    );
}

async fn instance_rows_of(s: &Server, tenant: &str) -> usize {
    instances_in_db(s)
        .await
        .iter()
        .filter(|i| i.tenant_id == tenant)
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn capacity_unavailable_charges_nothing() {
    let (s, p) = platform_at_t0(1).await;
    let t = &p.tenant_token;
    InstanceBuilder::new(&p).key("a").create(&s).await;
    let before = quotas(&s, t, "acme", &p.pool).await;
    for key in ["b", "c", "d"] {
        InstanceBuilder::new(&p)
            .key(key)
            .send(&s)
            .await
            .err(409, "CAPACITY_UNAVAILABLE");
    }
    assert_eq!(quotas(&s, t, "acme", &p.pool).await, before);
    assert_eq!(used(&s, t, "acme", &p.pool, "instances").await, Some(1));
    assert_eq!(instance_rows_of(&s, "acme").await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn stopped_instances_stay_charged_and_delete_releases_once() {
    let (s, p) = platform_at_t0(4).await;
    let t = &p.tenant_token;
    let g = GrantBuilder::new(&p).term(T0, T0 + HOUR).create(&s).await;
    let a = InstanceBuilder::new(&p).key("a").create(&s).await; // in the grant
    let b = InstanceBuilder::new(&p).key("b").create(&s).await; // ordinary
    assert_eq!(placement(&a), in_grant(&g));
    let charged = quotas(&s, t, "acme", &p.pool).await;
    assert_eq!(used(&s, t, "acme", &p.pool, "vcpus").await, Some(8));

    s.set_clock(T0 + MIN).await;
    instance_op_ok(&s, t, "acme", "stop", &id(&a)).await;
    instance_op_ok(&s, t, "acme", "stop", &id(&b)).await;
    assert_eq!(
        quotas(&s, t, "acme", &p.pool).await,
        charged,
        "stopped instances stay charged"
    );
    instance_op_ok(&s, t, "acme", "start", &id(&b)).await;
    assert_eq!(
        quotas(&s, t, "acme", &p.pool).await,
        charged,
        "start charges nothing more"
    );

    instance_op_ok(&s, t, "acme", "delete", &id(&a)).await;
    assert_eq!(
        quotas(&s, t, "acme", &p.pool).await,
        vec![
            ("instances".to_owned(), 10, 1),
            ("memoryGib".to_owned(), 1000, 16),
            ("vcpus".to_owned(), 40, 4),
        ]
    );
    // Deleting again releases nothing more.
    let again = instance_op_ok(&s, t, "acme", "delete", &id(&a)).await;
    assert_eq!(again["state"], "deleted");
    assert_eq!(used(&s, t, "acme", &p.pool, "instances").await, Some(1));
    instance_op_ok(&s, t, "acme", "delete", &id(&b)).await;
    assert!(
        quotas(&s, t, "acme", &p.pool)
            .await
            .iter()
            .all(|(_, _, u)| *u == 0)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn quotas_set_below_used_is_raised_to_used() {
    let (s, p) = platform_at_t0(10).await;
    let t = &p.tenant_token;
    let mut ids = Vec::new();
    for key in ["a", "b", "c"] {
        ids.push(id(&InstanceBuilder::new(&p).key(key).create(&s).await));
    }
    let q = set_quota(&s, "acme", &p.pool, "vcpus", 4).await;
    assert_eq!(
        (
            q["max"].as_i64(),
            q["used"].as_i64(),
            q["available"].as_i64()
        ),
        (Some(12), Some(12), Some(0))
    );
    let r = InstanceBuilder::new(&p).key("d").send(&s).await;
    assert_eq!(
        r.err(429, "QUOTA_EXCEEDED"),
        &json!({ "poolId": p.pool, "resource": "vcpus", "max": 12, "used": 12, "requested": 4 })
    );
    // Releasing makes room under the raised max; the max itself stays.
    instance_op_ok(&s, t, "acme", "delete", &ids[0]).await;
    assert!(
        quotas(&s, t, "acme", &p.pool)
            .await
            .contains(&("vcpus".to_owned(), 12, 8))
    );
    InstanceBuilder::new(&p).key("d").create(&s).await;
    // Setting it again once released shrinks it to what was asked.
    for i in &ids[1..] {
        instance_op_ok(&s, t, "acme", "delete", i).await;
    }
    let q = set_quota(&s, "acme", &p.pool, "vcpus", 4).await;
    assert_eq!((q["max"].as_i64(), q["used"].as_i64()), (Some(4), Some(4)));
}
