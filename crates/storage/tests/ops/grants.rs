//! `reservationGrants.create` and `.get`: what a grant holds, who may read
//! it, and its state along its term.

use grants_core::GrantState;
use storage::model::states::SettledState;
use storage::ops::grants;
use storage::{Actor, ErrorKind};

use crate::world::{HOUR, NOW, RESERVATION, World, ok, refused};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_is_read_back_by_its_grantee_and_by_root_only() {
    let mut w = World::new(4).await;
    let grant = ok(w.grant(2, NOW, NOW + 24 * HOUR).await);
    let row = &grant.row;
    assert!(row.grant_id.starts_with("rgrant_"), "{}", row.grant_id);
    assert_eq!(row.tenant_id, "acme");
    assert_eq!(row.account_id, w.account.as_str());
    assert_eq!(row.reservation_id, RESERVATION);
    assert_eq!(row.pool_id, w.pool.as_str());
    assert_eq!(row.project_id, None);
    assert_eq!(row.slots, 2);
    assert_eq!((row.starts_at, row.ends_at), (NOW, NOW + 24 * HOUR));
    assert_eq!(row.created_at, NOW);
    // It starts now: created active, and settled so.
    assert_eq!(grant.state, GrantState::Active);
    assert_eq!(row.settled_state, SettledState::Active);
    assert_eq!((grant.reason.as_deref(), grant.ended_at), (None, None));

    let id = World::grant_id(&grant);
    let at = NOW + 1000;
    let by_grantee = ok(grants::get(
        &mut w.conn,
        &Actor::new(w.acme.clone(), w.root.clone()),
        &id,
        at,
    )
    .await);
    let by_root = ok(grants::get(&mut w.conn, &Actor::root_of(w.root.clone()), &id, at).await);
    for read in [&by_grantee, &by_root] {
        assert_eq!(read.row.grant_id, row.grant_id);
        assert_eq!(read.row.tenant_id, "acme");
        assert_eq!(read.row.slots, 2);
        assert_eq!(
            (read.row.starts_at, read.row.ends_at),
            (NOW, NOW + 24 * HOUR)
        );
        assert_eq!(read.state, GrantState::Active);
    }

    // Another tenant is told it does not exist, as for an unknown id.
    let third = Actor::new(w.globex.clone(), w.root.clone());
    let e = refused(grants::get(&mut w.conn, &third, &id, at).await);
    assert_eq!(e.kind, ErrorKind::NotFound);
    assert_eq!(e.message, format!("grant {} not found", row.grant_id));
    assert!(e.details.is_empty(), "{:?}", e.details);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_grant_is_scheduled_then_active_then_ended_by_its_term() {
    let mut w = World::new(4).await;
    let (starts, ends) = (NOW + 2 * HOUR, NOW + 5 * HOUR);
    let grant = ok(w.grant(1, starts, ends).await);
    assert_eq!(grant.state, GrantState::Scheduled);
    assert_eq!(grant.row.settled_state, SettledState::Scheduled);

    let id = World::grant_id(&grant);
    let acme = Actor::new(w.acme.clone(), w.root.clone());
    let before = ok(grants::get(&mut w.conn, &acme, &id, starts - 1).await);
    assert_eq!(before.state, GrantState::Scheduled);
    let during = ok(grants::get(&mut w.conn, &acme, &id, starts).await);
    assert_eq!(during.state, GrantState::Active);
    assert_eq!((during.reason.as_deref(), during.ended_at), (None, None));
    // Ended at its `endsAt` even before settlement records it.
    let after = ok(grants::get(&mut w.conn, &acme, &id, ends).await);
    assert_eq!(after.state, GrantState::Ended);
    assert_eq!(after.reason.as_deref(), Some("term-over"));
    assert_eq!(after.ended_at, Some(ends));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_a_scheduled_grant_cancels_it() {
    let mut w = World::new(4).await;
    let grant = ok(w.grant(1, NOW + HOUR, NOW + 2 * HOUR).await);
    let id = World::grant_id(&grant);
    let at = NOW + 1000;
    let ended = ok(grants::end(&mut w.conn, &w.root, &w.account, &id, at).await);
    assert_eq!(ended.state, GrantState::Cancelled);
    assert_eq!(ended.row.settled_state, SettledState::Cancelled);
    assert_eq!(ended.reason.as_deref(), Some("ended"));
    assert_eq!(ended.ended_at, Some(at));
    // Ending it again returns it unchanged.
    let again = ok(grants::end(&mut w.conn, &w.root, &w.account, &id, at + 1000).await);
    assert_eq!(
        (again.state, again.ended_at),
        (GrantState::Cancelled, Some(at))
    );
    // Its slot is free again for the same term.
    let refill = ok(w.grant(4, NOW + HOUR, NOW + 2 * HOUR).await);
    assert_eq!(refill.row.slots, 4);
}
