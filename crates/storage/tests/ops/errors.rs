//! Refusals and their typed details: capacity, the term, quotas and the
//! provider-account limit.

use serde_json::json;
use storage::error::Limited;
use storage::ops::accounts::{self, NewAccount};
use storage::ops::pools;
use storage::{Actor, Detail, ErrorKind, Field, Reason};

use crate::world::{FLAVOR_VCPUS, HOUR, Key, NOW, World, ok, refused};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_beyond_the_reservation_is_refused_with_total_and_granted() {
    let mut w = World::new(4).await;
    ok(w.grant(3, NOW, NOW + 10 * HOUR).await);
    // Two more slots over a term that overlaps the three granted: 3 + 2 > 4.
    let e = refused(w.grant(2, NOW + 5 * HOUR, NOW + 15 * HOUR).await);
    assert_eq!(e.kind, ErrorKind::CapacityUnavailable);
    assert_eq!(
        e.details,
        vec![Detail::Capacity {
            total: 4,
            granted: 3
        }]
    );
    // One fits exactly; then the peak over that term is 4 and nothing more fits.
    ok(w.grant(1, NOW + 5 * HOUR, NOW + 15 * HOUR).await);
    let e = refused(w.grant(1, NOW + 9 * HOUR, NOW + 11 * HOUR).await);
    assert_eq!(e.kind, ErrorKind::CapacityUnavailable);
    assert_eq!(
        e.details,
        vec![Detail::Capacity {
            total: 4,
            granted: 4
        }]
    );
    // After the first grant's term only the one slot is committed.
    let later = ok(w.grant(3, NOW + 10 * HOUR, NOW + 20 * HOUR).await);
    assert_eq!(later.row.slots, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_starting_too_far_in_the_past_is_refused() {
    let mut w = World::new(4).await;
    // The contract's bound: at most five minutes back.
    let five_minutes = 5 * 60 * 1000;
    let e = refused(w.grant(1, NOW - five_minutes - 1, NOW + HOUR).await);
    assert_eq!(e.kind, ErrorKind::InvalidInput);
    assert_eq!(
        e.details,
        vec![
            Detail::Field(Field::StartsAt),
            Detail::Reason(Reason::Past),
            Detail::Now(NOW),
        ]
    );
    assert_eq!(e.reason(), Some(Reason::Past));
    // Five minutes back is still accepted, and active at once.
    let grant = ok(w.grant(1, NOW - five_minutes, NOW + HOUR).await);
    assert_eq!(grant.row.starts_at, NOW - five_minutes);
    assert_eq!(grant.state, grants_core::GrantState::Active);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_term_that_ends_before_it_starts_is_refused() {
    let mut w = World::new(4).await;
    let e = refused(w.grant(1, NOW + HOUR, NOW + HOUR).await);
    assert_eq!(e.kind, ErrorKind::InvalidInput);
    assert_eq!(
        e.details,
        vec![Detail::Field(Field::EndsAt), Detail::Reason(Reason::Range)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_beyond_the_instances_quota_is_refused_with_its_limit() {
    let quotas = [("instances", 1), ("vcpus", 40), ("memoryGib", 1000)];
    let mut w = World::with_quotas(4, &quotas).await;
    ok(w.instance(NOW + 1000).await);
    let e = refused(w.instance(NOW + 2000).await);
    assert_eq!(e.kind, ErrorKind::QuotaExceeded);
    assert_eq!(
        e.details,
        vec![
            Detail::PoolId(w.pool.as_str().to_owned()),
            Detail::Limit {
                what: Limited::Quota("instances".to_owned()),
                max: 1,
                used: 1,
                requested: 1,
            },
        ]
    );
    // The refusal charged nothing.
    let acme = Actor::new(w.acme.clone(), w.root.clone());
    let rows = ok(pools::get_quotas(&mut w.conn, &acme, Some(&w.pool)).await);
    let used: Vec<(&str, i64, i64)> = rows
        .iter()
        .map(|q| (q.resource.as_str(), q.max, q.used))
        .collect();
    assert_eq!(
        used,
        vec![
            ("instances", 1, 1),
            ("memoryGib", 1000, 16),
            ("vcpus", 40, FLAVOR_VCPUS)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_beyond_the_vcpus_quota_names_that_resource() {
    let quotas = [("instances", 10), ("vcpus", 6), ("memoryGib", 1000)];
    let mut w = World::with_quotas(4, &quotas).await;
    ok(w.instance(NOW + 1000).await);
    let e = refused(w.instance(NOW + 2000).await);
    assert_eq!(e.kind, ErrorKind::QuotaExceeded);
    assert!(
        e.details.contains(&Detail::Limit {
            what: Limited::Quota("vcpus".to_owned()),
            max: 6,
            used: FLAVOR_VCPUS,
            requested: FLAVOR_VCPUS,
        }),
        "{:?}",
        e.details
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_account_beyond_the_tenants_limit_is_refused() {
    let mut w = World::new(4).await;
    let config = json!({ "project": "acme-project-2", "credentials": "none" });
    let new = NewAccount {
        tenant_id: w.acme.as_str(),
        name: "acme's own",
        provider: "gce",
        config: &config,
        max_accounts: Some(1),
    };
    let first = Key::new();
    let keyed = first.of(w.acme.as_str(), "providerAccounts.create");
    let account = ok(accounts::create(&mut w.conn, new.clone(), keyed, NOW).await);
    assert_eq!(account.value.tenant_id, "acme");
    let second = Key::new();
    let keyed = second.of(w.acme.as_str(), "providerAccounts.create");
    let e = refused(accounts::create(&mut w.conn, new.clone(), keyed, NOW).await);
    assert_eq!(e.kind, ErrorKind::QuotaExceeded);
    assert_eq!(
        e.details,
        vec![Detail::Limit {
            what: Limited::ProviderAccounts,
            max: 1,
            used: 1,
            requested: 1,
        }]
    );
    // A retry of the first create still answers its account.
    let keyed = first.of(w.acme.as_str(), "providerAccounts.create");
    let replay = ok(accounts::create(&mut w.conn, new, keyed, NOW).await);
    assert!(replay.replayed);
    assert_eq!(replay.value.account_id, account.value.account_id);
}
