//! Concurrent reservationGrants.create: decided one at a time under the
//! reservation's row lock, so a reservation is never over-committed, and one
//! idempotency key creates one grant (seed-reservation-grants.md "Capacity",
//! contract 1.5, 3.6).

use std::collections::{BTreeMap, BTreeSet};

use futures::future::join_all;
use serde_json::Value;

use crate::support::clock::{HOUR, MIN, T0};
use crate::support::fixtures::{
    create_grant, create_grant_ok, grant_body, grant_id, grant_ids, items, list_grants, platform,
    types_of,
};
use crate::support::rng::Rng;
use crate::support::server::{ROOT_TOKEN, Server, of_type};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Term {
    slots: i64,
    starts: i64,
    ends: i64,
}

/// The peak of live slots of `grants` over `[starts, ends)` (half-open terms).
fn peak(grants: &[Term], starts: i64, ends: i64) -> i64 {
    let mut edges: Vec<(i64, i64)> = Vec::new();
    for g in grants {
        let (s, e) = (g.starts.max(starts), g.ends.min(ends));
        if s < e {
            edges.push((s, g.slots));
            edges.push((e, -g.slots));
        }
    }
    // Ends before starts at the same instant.
    edges.sort();
    let (mut live, mut max) = (0, 0);
    for (_, d) in edges {
        live += d;
        max = max.max(live);
    }
    max
}

async fn run_batch(seed: u64, total: i64, requests: usize) {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = platform(&s, total).await;
    let mut rng = Rng::new(seed);
    let asks: Vec<Term> = (0..requests)
        .map(|_| {
            let starts = T0 + rng.range(0, 240) * MIN;
            Term {
                slots: rng.range(1, 4),
                starts,
                ends: starts + rng.range(15, 180) * MIN,
            }
        })
        .collect();
    let answers = join_all(asks.iter().enumerate().map(|(i, t)| {
        create_grant(
            &s,
            grant_body(&p, t.slots, t.starts, t.ends, &format!("c{seed}-{i}")),
        )
    }))
    .await;

    let mut accepted: BTreeMap<String, Term> = BTreeMap::new();
    let mut rejected: Vec<(Term, Value)> = Vec::new();
    for (t, a) in asks.iter().zip(answers) {
        if a.status == 200 {
            let g = &a.body["grant"];
            assert_eq!(
                (
                    g["slots"].as_i64(),
                    g["startsAt"].as_i64(),
                    g["endsAt"].as_i64()
                ),
                (Some(t.slots), Some(t.starts), Some(t.ends))
            );
            assert!(accepted.insert(grant_id(g), *t).is_none(), "duplicate id");
        } else {
            let d = a.err(409, "CAPACITY_UNAVAILABLE").clone();
            rejected.push((*t, d));
        }
    }
    assert!(
        !accepted.is_empty() && !rejected.is_empty(),
        "seed {seed}: {} accepted, {} rejected; choose a seed that exercises both",
        accepted.len(),
        rejected.len()
    );

    // What the server holds is exactly what it accepted.
    let listed = items(&list_grants(&s, &p.tenant_token, "acme", None).await.ok());
    let held: BTreeMap<String, Term> = listed
        .iter()
        .map(|g| {
            (
                grant_id(g),
                Term {
                    slots: g["slots"].as_i64().expect("slots"),
                    starts: g["startsAt"].as_i64().expect("startsAt"),
                    ends: g["endsAt"].as_i64().expect("endsAt"),
                },
            )
        })
        .collect();
    assert_eq!(held, accepted);
    let terms: Vec<Term> = accepted.values().copied().collect();

    // At no instant do the live granted slots exceed the total.
    for t in &terms {
        let live: i64 = terms
            .iter()
            .filter(|g| g.starts <= t.starts && t.starts < g.ends)
            .map(|g| g.slots)
            .sum();
        assert!(
            live <= total,
            "seed {seed}: {live} slots live at {}",
            t.starts
        );
    }
    assert!(peak(&terms, i64::MIN, i64::MAX) <= total);

    // Every refusal was right: it did not fit next to the grants accepted
    // before it, a subset of all the accepted ones, which only add up.
    for (t, d) in &rejected {
        assert_eq!(d["total"], total);
        let granted = d["granted"].as_i64().expect("granted");
        assert!(granted + t.slots > total, "seed {seed}: {t:?} {d}");
        let all = peak(&terms, t.starts, t.ends);
        assert!(
            granted <= all,
            "seed {seed}: {t:?} granted {granted} > {all}"
        );
        assert!(all + t.slots > total, "seed {seed}: {t:?} would fit");
    }

    // One created event per accepted grant.
    let evs = s.events(&p.tenant_token, "acme").await;
    let created: BTreeSet<String> = of_type(&evs, "reservation-grant.created")
        .iter()
        .map(|e| e["data"]["grantId"].as_str().expect("grantId").to_owned())
        .collect();
    assert_eq!(
        created.len(),
        of_type(&evs, "reservation-grant.created").len()
    );
    assert_eq!(created, accepted.keys().cloned().collect());
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_creates_never_over_commit_a_reservation() {
    run_batch(0x9e37_79b9_7f4a_7c15, 10, 64).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_creates_never_over_commit_a_small_reservation() {
    run_batch(0x0123_4567_89ab_cdef, 3, 64).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_identical_creates_make_one_grant() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = platform(&s, 10).await;
    let body = grant_body(&p, 3, T0, T0 + 2 * HOUR, "one-key");
    let answers = join_all((0..20).map(|_| create_grant(&s, body.clone()))).await;
    let grants: Vec<Value> = answers
        .into_iter()
        .map(|a| a.ok()["grant"].clone())
        .collect();
    let first = grant_id(&grants[0]);
    for g in &grants {
        assert_eq!(grant_id(g), first);
        assert_eq!(g["slots"], 3);
    }
    let listed = items(&list_grants(&s, ROOT_TOKEN, "root", Some(true)).await.ok());
    assert_eq!(grant_ids(&listed), std::slice::from_ref(&first));
    let evs = s.events(&p.tenant_token, "acme").await;
    assert_eq!(
        types_of(&evs, &first),
        ["reservation-grant.created", "reservation-grant.active"]
    );
    let grant_events = evs
        .iter()
        .filter(|e| {
            e["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("reservation-grant."))
        })
        .count();
    assert_eq!(grant_events, 2, "{evs:?}");
    // Capacity was charged once: 7 slots are left.
    create_grant_ok(&s, grant_body(&p, 7, T0, T0 + 2 * HOUR, "rest")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_different_requests_under_one_key_create_one_grant() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = platform(&s, 100).await;
    let answers = join_all(
        (1..=10).map(|slots| create_grant(&s, grant_body(&p, slots, T0, T0 + HOUR, "contested"))),
    )
    .await;
    let mut winners = Vec::new();
    for a in &answers {
        if a.status == 200 {
            winners.push(a.body["grant"].clone());
        } else {
            assert_eq!(a.err(409, "CONFLICT")["idempotencyKey"], "contested");
        }
    }
    assert_eq!(winners.len(), 1, "{answers:?}");
    let listed = items(&list_grants(&s, ROOT_TOKEN, "root", Some(true)).await.ok());
    assert_eq!(grant_ids(&listed), [grant_id(&winners[0])]);
    // The winner's own body replays it.
    let slots = winners[0]["slots"].as_i64().expect("slots");
    let again = create_grant_ok(&s, grant_body(&p, slots, T0, T0 + HOUR, "contested")).await;
    assert_eq!(grant_id(&again), grant_id(&winners[0]));
}
