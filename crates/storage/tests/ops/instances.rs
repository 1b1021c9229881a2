//! `instances.create`, `.stop`, `.start` and `.delete`: where an instance
//! sits, what it holds of its quota, and what a deleted one refuses.

use storage::model::instance::InstanceRow;
use storage::model::states::InstanceState;
use storage::ops::{instances, pools};
use storage::{Actor, Detail, ErrorKind};

use crate::world::{FLAVOR, FLAVOR_VCPUS, HOUR, NOW, RESERVATION, World, ok, refused};

/// Where an instance sits: its placement kind, grant and reservation.
fn seat(row: &InstanceRow) -> (&str, Option<&str>, Option<&str>) {
    (
        row.placement_kind.as_str(),
        row.grant_id.as_deref(),
        row.reservation_id.as_deref(),
    )
}

/// `acme`'s `used` of the pool's `instances` and `vcpus` quotas.
async fn used(w: &mut World) -> (i64, i64) {
    let acme = Actor::new(w.acme.clone(), w.root.clone());
    let rows = ok(pools::get_quotas(&mut w.conn, &acme, Some(&w.pool)).await);
    let of = |resource: &str| {
        rows.iter()
            .find(|q| q.resource == resource)
            .map_or(-1, |q| q.used)
    };
    (of("instances"), of("vcpus"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_in_a_grant_stops_starts_and_is_deleted() {
    let mut w = World::new(4).await;
    let grant = ok(w.grant(2, NOW, NOW + 24 * HOUR).await);
    let g = grant.row.grant_id.as_str();

    let created = ok(w.instance(NOW + 1000).await);
    assert!(
        created.instance_id.starts_with("inst_"),
        "{}",
        created.instance_id
    );
    assert_eq!(created.tenant_id, "acme");
    assert_eq!(created.pool_id, w.pool.as_str());
    assert_eq!(created.flavor, FLAVOR);
    assert_eq!(created.name, created.instance_id);
    assert_eq!(created.state, InstanceState::Running);
    assert_eq!(seat(&created), ("grant", Some(g), Some(RESERVATION)));
    assert_eq!(created.account_id.as_deref(), Some(w.account.as_str()));
    assert_eq!((created.created_at, created.deleted_at), (NOW + 1000, None));
    assert_eq!(used(&mut w).await, (1, FLAVOR_VCPUS));

    let id = World::instance_id(&created);
    // Stopped in a grant, it keeps its slot (and its quota).
    let stopped = ok(instances::stop(&mut w.conn, &w.acme, &id, NOW + 2000).await);
    assert_eq!(stopped.state, InstanceState::Stopped);
    assert_eq!(seat(&stopped), ("grant", Some(g), Some(RESERVATION)));
    assert_eq!(used(&mut w).await, (1, FLAVOR_VCPUS));
    // Stopping a stopped instance returns it unchanged.
    let again = ok(instances::stop(&mut w.conn, &w.acme, &id, NOW + 2500).await);
    assert_eq!(again.state, InstanceState::Stopped);

    let started = ok(instances::start(&mut w.conn, &w.acme, &id, NOW + 3000).await);
    assert_eq!(started.state, InstanceState::Running);
    assert_eq!(seat(&started), ("grant", Some(g), Some(RESERVATION)));

    let deleted = ok(instances::delete(&mut w.conn, &w.acme, &id, NOW + 4000).await);
    assert_eq!(deleted.state, InstanceState::Deleted);
    assert_eq!(seat(&deleted), ("none", None, None));
    assert_eq!(deleted.deleted_at, Some(NOW + 4000));
    assert_eq!(used(&mut w).await, (0, 0));

    // A deleted instance can be neither stopped nor started.
    for e in [
        refused(instances::stop(&mut w.conn, &w.acme, &id, NOW + 5000).await),
        refused(instances::start(&mut w.conn, &w.acme, &id, NOW + 5000).await),
    ] {
        assert_eq!(e.kind, ErrorKind::InvalidState);
        assert_eq!(
            e.details,
            vec![Detail::InstanceState(InstanceState::Deleted)]
        );
    }
    // Deleting it again returns it as it was deleted.
    let again = ok(instances::delete(&mut w.conn, &w.acme, &id, NOW + 6000).await);
    assert_eq!(
        (again.state, again.deleted_at),
        (InstanceState::Deleted, Some(NOW + 4000))
    );
    assert_eq!(used(&mut w).await, (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_grant_an_instance_takes_an_ordinary_slot_and_gives_it_back_stopped() {
    let mut w = World::new(4).await;
    let created = ok(w.instance(NOW + 1000).await);
    assert_eq!(seat(&created), ("reservation", None, Some(RESERVATION)));
    let id = World::instance_id(&created);
    let stopped = ok(instances::stop(&mut w.conn, &w.acme, &id, NOW + 2000).await);
    assert_eq!(stopped.state, InstanceState::Stopped);
    assert_eq!(seat(&stopped), ("none", None, None));
    // Started again, it is placed again.
    let started = ok(instances::start(&mut w.conn, &w.acme, &id, NOW + 3000).await);
    assert_eq!(seat(&started), ("reservation", None, Some(RESERVATION)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_reservation_refuses_the_next_instance_with_its_slots() {
    let mut w = World::new(1).await;
    let first = ok(w.instance(NOW + 1000).await);
    assert_eq!(seat(&first), ("reservation", None, Some(RESERVATION)));
    let e = refused(w.instance(NOW + 2000).await);
    assert_eq!(e.kind, ErrorKind::CapacityUnavailable);
    assert_eq!(
        e.details,
        vec![
            Detail::ReservationId(RESERVATION.to_owned()),
            Detail::Slots {
                total: 1,
                in_use: 1,
                available: 0,
            },
        ]
    );
    // The refused instance charged nothing.
    assert_eq!(used(&mut w).await, (1, FLAVOR_VCPUS));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_instance_is_not_found() {
    let mut w = World::new(4).await;
    let created = ok(w.instance(NOW + 1000).await);
    let id = World::instance_id(&created);
    let e = refused(instances::get(&mut w.conn, &w.globex, &id).await);
    assert_eq!(e.kind, ErrorKind::NotFound);
    let e = refused(instances::stop(&mut w.conn, &w.globex, &id, NOW + 2000).await);
    assert_eq!(e.kind, ErrorKind::NotFound);
    // Still running, as its owner sees it.
    let mine = ok(instances::get(&mut w.conn, &w.acme, &id).await);
    assert_eq!(mine.state, InstanceState::Running);
}
