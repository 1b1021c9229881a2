//! What the operations publish: each event in the right tenant's log, with
//! its typed payload.

use storage::model::event_data::{EventData, GrantChange, QuotaUpdated};
use storage::model::events::{self, Event};
use storage::ops::tenancy;

use crate::world::{HOUR, NOW, World, ok};

/// Every event of `tenant`'s log, oldest first.
async fn log(w: &mut World, tenant: &str) -> Vec<Event> {
    let page = ok(events::list(&mut w.conn, tenant, 0, 100, None).await);
    assert!(!page.has_more);
    page.items
}

/// The payloads of `events`.
fn payloads(events: &[Event]) -> Vec<EventData> {
    events.iter().map(|e| ok(e.payload())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_created_is_in_the_grantees_log_with_its_term() {
    let mut w = World::new(4).await;
    let project = ok(tenancy::create_project(&mut w.conn, &w.acme, "web", NOW).await);
    let (starts, ends) = (NOW + HOUR, NOW + 3 * HOUR);
    let at = NOW + 1000;
    let grant = ok(w
        .grant_in(2, starts, ends, Some(&project.project_id), at)
        .await);

    let types = [String::from("reservation-grant.created")];
    let page = ok(events::list(&mut w.conn, "acme", 0, 100, Some(&types)).await);
    let [created] = page.items.as_slice() else {
        panic!(
            "one reservation-grant.created in acme's log: {:?}",
            page.items
        );
    };
    assert_eq!(created.tenant_id, "acme");
    assert_eq!(created.event_type, "reservation-grant.created");
    assert_eq!(created.occurred_at, at);
    assert!(created.event_id.starts_with("evt_"), "{}", created.event_id);
    assert_eq!(
        ok(created.payload()),
        EventData::GrantCreated(GrantChange {
            grant_id: grant.row.grant_id.clone(),
            pool_id: w.pool.as_str().to_owned(),
            slots: 2,
            starts_at: starts,
            ends_at: ends,
            project_id: Some(project.project_id.clone()),
            reason: None,
        })
    );
    // The stored data is the payload alone, in the contract's names.
    assert_eq!(created.data["grantId"], grant.row.grant_id.as_str());
    assert_eq!(created.data["startsAt"], starts);
    assert!(created.data.get("reason").is_none(), "{}", created.data);

    // Neither root nor another tenant hears of it.
    for other in ["root", "globex"] {
        let theirs = ok(events::list(&mut w.conn, other, 0, 100, Some(&types)).await);
        assert!(theirs.items.is_empty(), "{other}: {:?}", theirs.items);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_starting_now_is_created_then_active_in_one_commit() {
    let mut w = World::new(4).await;
    let before = log(&mut w, "acme").await.len();
    let grant = ok(w.grant(1, NOW, NOW + HOUR).await);
    let all = log(&mut w, "acme").await;
    let new = all.get(before..).unwrap_or_default();
    let change = grant.row.change(None);
    assert_eq!(
        payloads(new),
        vec![
            EventData::GrantCreated(change.clone()),
            EventData::GrantActive(change),
        ]
    );
    // Positions follow the commit order, with no gap.
    let seqs: Vec<i64> = all.iter().map(|e| e.seq).collect();
    let expected: Vec<i64> = (1..).take(all.len()).collect();
    assert_eq!(seqs, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offer_publishes_each_quota_in_the_tenants_log() {
    let mut w = World::new(4).await;
    let pool = w.pool.as_str().to_owned();
    let quota = |resource: &str, max| {
        EventData::QuotaUpdated(QuotaUpdated {
            pool_id: pool.clone(),
            resource: resource.to_owned(),
            max,
        })
    };
    let expected = vec![
        quota("instances", 10),
        quota("memoryGib", 1000),
        quota("vcpus", 40),
    ];
    let acme = log(&mut w, "acme").await;
    assert_eq!(payloads(&acme), expected);
    assert!(acme.iter().all(|e| e.occurred_at == NOW));
    // The pool's own rows are root's, and globex was offered nothing.
    let root = payloads(&log(&mut w, "root").await);
    assert_eq!(root, vec![quota("instances", 100), quota("vcpus", 400)]);
    assert!(log(&mut w, "globex").await.is_empty());
}
