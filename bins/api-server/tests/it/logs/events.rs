//! events.list (contract 1.6, 3.8 and 9): shape, paging, filters, validation,
//! tenant isolation, and a reader that never skips an event committed late.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::fixtures::{acme_and_pool, is_typeid, offer};
use crate::support::server::{ROOT, ROOT_TOKEN, Server};

async fn page(s: &Server, token: &str, body: Value) -> Value {
    s.call(token, "events/list", body).await.ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn events_page_with_next_cursor_and_has_more() {
    let (s, acme, pool) = acme_and_pool().await;
    let viewer = s.key(&acme, "acme", "viewer", None).await;
    // A log with nothing in it still gives a cursor to poll from.
    let empty = page(&s, &viewer, json!({ "tenantId": "acme" })).await;
    assert_eq!(empty["items"], json!([]));
    assert_eq!(empty["hasMore"], false);
    let start = empty["nextCursor"].as_str().expect("cursor").to_owned();

    let now = s.root("clock/get", json!({})).await.ok()["now"].clone();
    offer(
        &s,
        &pool,
        "acme",
        json!({ "a": 1, "b": 2, "c": 3, "d": 4, "e": 5 }),
    )
    .await;

    let mut seen = Vec::new();
    let mut after = start.clone();
    let mut pages = 0;
    loop {
        let p = page(
            &s,
            &viewer,
            json!({ "tenantId": "acme", "after": after, "limit": 2 }),
        )
        .await;
        let items = p["items"].as_array().expect("items").clone();
        pages += 1;
        assert!(items.len() <= 2);
        let next = p["nextCursor"].as_str().expect("nextCursor").to_owned();
        if items.is_empty() {
            // Nothing new: the cursor handed back is the one sent.
            assert_eq!(next, after);
            assert_eq!(p["hasMore"], false);
            break;
        }
        assert_eq!(p["hasMore"], seen.len() + items.len() < 5, "{p}");
        seen.extend(items);
        after = next;
    }
    assert_eq!(pages, 4);
    let resources: Vec<&Value> = seen.iter().map(|e| &e["data"]["resource"]).collect();
    assert_eq!(resources, ["a", "b", "c", "d", "e"]);
    let mut ids = BTreeSet::new();
    for e in &seen {
        assert!(is_typeid(&e["eventId"], "evt"), "{e}");
        assert!(ids.insert(e["eventId"].to_string()));
        assert_eq!(e["tenantId"], "acme");
        assert_eq!(e["type"], "quota.updated");
        assert_eq!(e["occurredAt"], now);
        let mut keys: Vec<&String> = e.as_object().expect("object").keys().collect();
        keys.sort();
        assert_eq!(keys, ["data", "eventId", "occurredAt", "tenantId", "type"]);
    }
    // Without `after`: from the start; the default limit takes all five.
    let all = page(&s, &viewer, json!({ "tenantId": "acme" })).await;
    assert_eq!(all["items"], json!(seen));
    assert_eq!(all["hasMore"], false);
    assert_eq!(all["nextCursor"], json!(after));
    // The cursor of an empty log polls from the start.
    let from_start = page(&s, &viewer, json!({ "tenantId": "acme", "after": start })).await;
    assert_eq!(from_start["items"], json!(seen));
    // limit 1 and limit 1000 are accepted.
    let one = page(&s, &viewer, json!({ "tenantId": "acme", "limit": 1 })).await;
    assert_eq!(one["items"], json!([seen[0]]));
    assert_eq!(one["hasMore"], true);
    let big = page(&s, &viewer, json!({ "tenantId": "acme", "limit": 1000 })).await;
    assert_eq!(big["items"], json!(seen));
}

#[tokio::test(flavor = "multi_thread")]
async fn events_filter_by_type() {
    let (s, acme, pool) = acme_and_pool().await;
    offer(&s, &pool, "acme", json!({ "a": 1, "b": 2 })).await;
    let all = s.events(&acme, "acme").await;
    assert_eq!(all.len(), 2);
    let only = page(
        &s,
        &acme,
        json!({ "tenantId": "acme", "types": ["quota.updated"] }),
    )
    .await;
    assert_eq!(only["items"], json!(all));
    let both = page(
        &s,
        &acme,
        json!({ "tenantId": "acme", "types": ["reservation-grant.created", "quota.updated"] }),
    )
    .await;
    assert_eq!(both["items"], json!(all));
    let none = page(
        &s,
        &acme,
        json!({ "tenantId": "acme", "types": ["reservation-grant.created"] }),
    )
    .await;
    assert_eq!(none["items"], json!([]));
    assert_eq!(none["hasMore"], false);
    assert!(none["nextCursor"].is_string());
    // Filter and page together.
    let first = page(
        &s,
        &acme,
        json!({ "tenantId": "acme", "types": ["quota.updated"], "limit": 1 }),
    )
    .await;
    assert_eq!(first["items"], json!([all[0]]));
    assert_eq!(first["hasMore"], true);
    let second = page(
        &s,
        &acme,
        json!({
            "tenantId": "acme",
            "types": ["quota.updated"],
            "limit": 1,
            "after": first["nextCursor"],
        }),
    )
    .await;
    assert_eq!(second["items"], json!([all[1]]));
    assert_eq!(second["hasMore"], false);
}

#[tokio::test(flavor = "multi_thread")]
async fn events_list_validates_limit_cursor_and_types() {
    let (s, acme, pool) = acme_and_pool().await;
    offer(&s, &pool, "acme", json!({ "a": 1 })).await;
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!({ "limit": 0 }), "limit", "range"),
        (json!({ "limit": 1001 }), "limit", "range"),
        (json!({ "limit": -5 }), "limit", "range"),
        (json!({ "limit": "10" }), "limit", "type"),
        (json!({ "limit": 10.0 }), "limit", "type"),
        (json!({ "limit": 10.5 }), "limit", "type"),
        (json!({ "after": "garbage" }), "after", "pattern"),
        (json!({ "after": "" }), "after", "length"),
        (json!({ "after": 5 }), "after", "type"),
        (json!({ "after": "c0" }), "after", "pattern"),
        (json!({ "after": "cvvvvvvvvvvvvv" }), "after", "pattern"),
        (json!({ "types": [] }), "types", "length"),
        (json!({ "types": "quota.updated" }), "types", "type"),
        (json!({ "types": ["Quota Updated"] }), "types[0]", "pattern"),
        (json!({ "types": [5] }), "types[0]", "type"),
        (json!({ "types": vec!["a"; 21] }), "types", "length"),
        (json!({ "cursor": "x" }), "cursor", "unknown"),
    ];
    for (extra, field, reason) in cases {
        let mut body = json!({ "tenantId": "acme" });
        for (k, v) in extra.as_object().expect("object") {
            body[k] = v.clone();
        }
        let a = s.call(&acme, "events/list", body.clone()).await;
        let d = a.err(400, "INVALID_INPUT");
        assert_eq!(
            (d["field"].as_str(), d["reason"].as_str()),
            (Some(field), Some(reason)),
            "{body}: {d}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn events_stay_in_their_tenant() {
    let (s, acme, pool) = acme_and_pool().await;
    let beta = s.tenant("beta").await;
    offer(&s, &pool, "acme", json!({ "a": 1 })).await;
    offer(&s, &pool, "beta", json!({ "b": 2 })).await;
    let a = s.events(&acme, "acme").await;
    let b = s.events(&beta, "beta").await;
    assert_eq!(a.len(), 1);
    assert_eq!(b.len(), 1);
    assert_eq!(a[0]["data"]["resource"], "a");
    assert_eq!(b[0]["data"]["resource"], "b");
    // Root's log holds root's own events only (those of pools.create).
    let r = s.events(ROOT_TOKEN, ROOT).await;
    assert!(r.iter().all(|e| e["tenantId"] == ROOT), "{r:?}");
    assert!(!r.iter().any(|e| e["eventId"] == a[0]["eventId"]));
    // A cursor of one tenant shows nothing of another.
    let cur = page(&s, &acme, json!({ "tenantId": "acme" })).await["nextCursor"].clone();
    let p = page(&s, &beta, json!({ "tenantId": "beta", "after": cur })).await;
    assert!(
        p["items"]
            .as_array()
            .expect("items")
            .iter()
            .all(|e| e["tenantId"] == "beta")
    );
    // Reading another tenant's log is denied.
    s.call(&beta, "events/list", json!({ "tenantId": "acme" }))
        .await
        .err(403, "ACCESS_DENIED");
}

/// Pages acme's log from the start until `done` is set and the log is drained.
/// Returns every event seen and how many non-empty pages came while writers ran.
async fn read_all(
    s: Arc<Server>,
    token: String,
    limit: i64,
    done: Arc<AtomicBool>,
) -> (Vec<Value>, usize) {
    let mut seen = Vec::new();
    let mut after: Option<Value> = None;
    let mut pages_during_writes = 0;
    loop {
        let finished = done.load(Ordering::SeqCst);
        let mut body = json!({ "tenantId": "acme", "limit": limit });
        if let Some(a) = &after {
            body["after"] = a.clone();
        }
        let p = s.call(&token, "events/list", body).await.ok();
        let items = p["items"].as_array().expect("items").clone();
        if !items.is_empty() && !finished {
            pages_during_writes += 1;
        }
        let empty = items.is_empty();
        seen.extend(items);
        after = Some(p["nextCursor"].clone());
        if empty {
            if finished {
                return (seen, pages_during_writes);
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reader_paging_during_concurrent_writes_sees_every_event_once_in_order() {
    let (s, acme, pool) = acme_and_pool().await;
    let s = Arc::new(s);
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = [1, 7]
        .into_iter()
        .map(|limit| tokio::spawn(read_all(s.clone(), acme.clone(), limit, done.clone())))
        .collect();

    // Writers: quotas.set (one event each) and pools.offer with three new
    // resources (three events each), all at once.
    const SETTERS: usize = 8;
    const SETS: usize = 25;
    const OFFERERS: usize = 2;
    const OFFERS: usize = 15;
    let mut writers = Vec::new();
    for w in 0..SETTERS {
        let (s, pool) = (s.clone(), pool.clone());
        writers.push(tokio::spawn(async move {
            for i in 0..SETS {
                s.root(
                    "quotas/set",
                    json!({
                        "tenantId": "acme",
                        "poolId": pool,
                        "resource": format!("r{}", i % 3),
                        "max": w * 1000 + i,
                    }),
                )
                .await
                .ok();
            }
        }));
    }
    for w in 0..OFFERERS {
        let (s, pool) = (s.clone(), pool.clone());
        writers.push(tokio::spawn(async move {
            for i in 0..OFFERS {
                let quotas = json!({
                    format!("o{w}x{i}a"): 1,
                    format!("o{w}x{i}b"): 2,
                    format!("o{w}x{i}c"): 3,
                });
                offer(&s, &pool, "acme", quotas).await;
            }
        }));
    }
    for w in writers {
        w.await.expect("writer");
    }
    done.store(true, Ordering::SeqCst);

    let expected = SETTERS * SETS + OFFERERS * OFFERS * 3;
    let truth = s.events(&acme, "acme").await;
    assert_eq!(truth.len(), expected);
    let truth_ids: Vec<&Value> = truth.iter().map(|e| &e["eventId"]).collect();
    for r in readers {
        let (seen, during) = r.await.expect("reader");
        let ids: Vec<&Value> = seen.iter().map(|e| &e["eventId"]).collect();
        let unique: BTreeSet<String> = ids.iter().map(ToString::to_string).collect();
        assert_eq!(unique.len(), ids.len(), "an event was seen twice");
        assert_eq!(
            ids.len(),
            truth_ids.len(),
            "the reader missed {} events",
            truth_ids.len().saturating_sub(ids.len())
        );
        assert_eq!(ids, truth_ids, "the reader saw the events out of order");
        assert!(during >= 1, "the reader never paged while writers ran");
    }
    // Each offer's three events are consecutive (one transaction).
    for w in 0..OFFERERS {
        for i in 0..OFFERS {
            let prefix = format!("o{w}x{i}");
            let pos: Vec<usize> = truth
                .iter()
                .enumerate()
                .filter(|(_, e)| {
                    e["data"]["resource"]
                        .as_str()
                        .is_some_and(|r| r.starts_with(&prefix) && r.len() == prefix.len() + 1)
                })
                .map(|(i, _)| i)
                .collect();
            assert_eq!(pos.len(), 3);
            assert_eq!(pos[2] - pos[0], 2, "{prefix} events are not consecutive");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_default_page_is_100_events() {
    let (s, acme, pool) = acme_and_pool().await;
    for batch in 0..2 {
        let quotas: serde_json::Map<String, Value> = (0..60)
            .map(|i| (format!("r{batch}x{i:02}"), json!(i)))
            .collect();
        offer(&s, &pool, "acme", Value::Object(quotas)).await;
    }
    let first = page(&s, &acme, json!({ "tenantId": "acme" })).await;
    assert_eq!(first["items"].as_array().expect("items").len(), 100);
    assert_eq!(first["hasMore"], true);
    let rest = page(
        &s,
        &acme,
        json!({ "tenantId": "acme", "after": first["nextCursor"] }),
    )
    .await;
    assert_eq!(rest["items"].as_array().expect("items").len(), 20);
    assert_eq!(rest["hasMore"], false);
    assert_eq!(rest["items"][19]["data"]["resource"], "r1x59");
}
