//! reservation-grant.* events: in the grantee's tenant, with
//! `{ grantId, poolId, projectId?, slots, startsAt, endsAt }` (and `reason` on
//! ended/cancelled), each published exactly once however often the grant is
//! read, ended, retried or settled (seed-reservation-grants.md "States",
//! contract 3.6, 9).

use futures::future::join_all;
use serde_json::{Value, json};

use crate::support::bodies::GrantBody;
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::fixtures::{
    Platform, create_grant, create_grant_ok, end_grant, get_grant_as, grant_body, grant_body_for,
    grant_id, list_grants, platform, project, scan, types_of,
};
use crate::support::server::{ROOT_TOKEN, Server, of_type};

/// Reads, retries and settles everything it can at the current instant.
async fn churn(s: &Server, p: &Platform, bodies: &[Value], grants: &[String], filler: &str) {
    for id in grants {
        let g = get_grant_as(s, ROOT_TOKEN, "root", id).await.ok();
        let mine = get_grant_as(s, &p.tenant_token, "acme", id).await;
        if g["grant"]["tenantId"] == "acme" {
            mine.ok();
        } else {
            mine.err(404, "NOT_FOUND");
        }
    }
    list_grants(s, &p.tenant_token, "acme", None).await.ok();
    list_grants(s, ROOT_TOKEN, "root", Some(true)).await.ok();
    for b in bodies {
        create_grant(s, b.clone()).await.ok();
    }
    // A new grant on the reservation settles its timeline up to now.
    let now = s.root("clock/get", json!({})).await.ok()["now"]
        .as_i64()
        .expect("now");
    create_grant_ok(s, grant_body(p, 1, now, now + MIN, filler)).await;
    // Scans settle too (only when the total changes) and must not republish.
    scan(s, &p.account).await;
}

fn data(
    p: &Platform,
    id: &str,
    project: Option<&str>,
    slots: i64,
    starts: i64,
    ends: i64,
) -> Value {
    let mut d = json!({
        "grantId": id,
        "poolId": p.pool,
        "slots": slots,
        "startsAt": starts,
        "endsAt": ends,
    });
    if let Some(prj) = project {
        d["projectId"] = json!(prj);
    }
    d
}

fn with_reason(mut d: Value, reason: &str) -> Value {
    d["reason"] = json!(reason);
    d
}

/// The (type, data) of one grant's events, in order.
fn trail(evs: &[Value], id: &str) -> Vec<(String, Value)> {
    evs.iter()
        .filter(|e| e["data"]["grantId"] == id)
        .map(|e| {
            (
                e["type"].as_str().expect("type").to_owned(),
                e["data"].clone(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn each_transition_is_published_once_with_its_data() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = platform(&s, 10).await;
    let prj = project(&s, &p.tenant_token, "acme", "web").await;

    let b1 = GrantBody::on(&p, 2)
        .term(T0 + HOUR, T0 + 3 * HOUR)
        .key("g1")
        .project(&prj)
        .json();
    let b2 = grant_body(&p, 1, T0 + 4 * HOUR, T0 + 5 * HOUR, "g2");
    let b3 = grant_body(&p, 3, T0, T0 + HOUR, "g3");
    let b4 = grant_body_for(&p, "root", 1, T0 + HOUR, T0 + 2 * HOUR, "g4");
    let bodies = vec![b1.clone(), b2.clone(), b3.clone(), b4.clone()];
    let g1 = grant_id(&create_grant_ok(&s, b1).await);
    let g2 = grant_id(&create_grant_ok(&s, b2).await);
    let g3 = grant_id(&create_grant_ok(&s, b3).await);
    let g4 = grant_id(&create_grant_ok(&s, b4).await);
    let all = [g1.clone(), g2.clone(), g3.clone(), g4.clone()];

    churn(&s, &p, &bodies, &all, "f0").await;
    churn(&s, &p, &bodies, &all, "f1").await;
    // g1 and g4 start, g3's term is over.
    s.set_clock(T0 + HOUR).await;
    churn(&s, &p, &bodies, &all, "f2").await;
    churn(&s, &p, &bodies, &all, "f3").await;
    // Root ends g1 and cancels g2, twice each.
    s.set_clock(T0 + 2 * HOUR).await;
    for _ in 0..2 {
        end_grant(&s, &p.account, &g1).await.ok();
        end_grant(&s, &p.account, &g2).await.ok();
        end_grant(&s, &p.account, &g3).await.ok();
        churn(&s, &p, &bodies, &all, "f4").await;
    }
    s.set_clock(T0 + 6 * HOUR).await;
    churn(&s, &p, &bodies, &all, "f5").await;
    for id in &all {
        end_grant(&s, &p.account, id).await.ok();
    }
    churn(&s, &p, &bodies, &all, "f6").await;

    let evs = s.events(&p.tenant_token, "acme").await;
    assert!(evs.iter().all(|e| e["tenantId"] == "acme"));
    let d1 = data(&p, &g1, Some(&prj), 2, T0 + HOUR, T0 + 3 * HOUR);
    assert_eq!(
        trail(&evs, &g1),
        [
            ("reservation-grant.created".to_owned(), d1.clone()),
            ("reservation-grant.active".to_owned(), d1),
            (
                "reservation-grant.ended".to_owned(),
                with_reason(
                    data(&p, &g1, Some(&prj), 2, T0 + HOUR, T0 + 2 * HOUR),
                    "ended"
                )
            ),
        ]
    );
    let d2 = data(&p, &g2, None, 1, T0 + 4 * HOUR, T0 + 5 * HOUR);
    assert_eq!(
        trail(&evs, &g2),
        [
            ("reservation-grant.created".to_owned(), d2.clone()),
            (
                "reservation-grant.cancelled".to_owned(),
                with_reason(d2, "ended")
            ),
        ]
    );
    let d3 = data(&p, &g3, None, 3, T0, T0 + HOUR);
    assert_eq!(
        trail(&evs, &g3),
        [
            ("reservation-grant.created".to_owned(), d3.clone()),
            ("reservation-grant.active".to_owned(), d3.clone()),
            (
                "reservation-grant.ended".to_owned(),
                with_reason(d3, "term-over")
            ),
        ]
    );
    // Every filler grant too: created, active, ended by its term, once each.
    let fillers: Vec<String> = of_type(&evs, "reservation-grant.created")
        .iter()
        .map(|e| e["data"]["grantId"].as_str().unwrap().to_owned())
        .filter(|id| !all.contains(id))
        .collect();
    assert_eq!(fillers.len(), 7);
    let mut over = 0;
    for f in &fillers {
        let t = types_of(&evs, f);
        assert_eq!(
            t[..2],
            ["reservation-grant.created", "reservation-grant.active"],
            "{f}"
        );
        match t.len() {
            2 => {}
            3 if t[2] == "reservation-grant.ended" => over += 1,
            _ => panic!("{f}: {t:?}"),
        }
    }
    // f0..f4 are over by T0+6H; f5 and f6 are still in their term.
    assert_eq!(over, 5);
    // Nothing of root's grant in acme, and nothing of acme's in root.
    assert!(trail(&evs, &g4).is_empty());
    let root_evs = s.events(ROOT_TOKEN, "root").await;
    let d4 = data(&p, &g4, None, 1, T0 + HOUR, T0 + 2 * HOUR);
    assert_eq!(
        trail(&root_evs, &g4),
        [
            ("reservation-grant.created".to_owned(), d4.clone()),
            ("reservation-grant.active".to_owned(), d4.clone()),
            (
                "reservation-grant.ended".to_owned(),
                with_reason(d4, "term-over")
            ),
        ]
    );
    let root_grant_events: Vec<&Value> = root_evs
        .iter()
        .filter(|e| {
            e["type"]
                .as_str()
                .unwrap()
                .starts_with("reservation-grant.")
        })
        .collect();
    assert_eq!(root_grant_events.len(), 3, "{root_grant_events:?}");
    assert!(root_evs.iter().all(|e| e["tenantId"] == "root"));
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_settlement_and_ends_publish_each_transition_once() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = platform(&s, 1000).await;
    let later =
        grant_id(&create_grant_ok(&s, grant_body(&p, 1, T0 + HOUR, T0 + 2 * HOUR, "later")).await);
    let now = grant_id(&create_grant_ok(&s, grant_body(&p, 1, T0, T0 + 3 * HOUR, "now")).await);

    // At T0+H: `later` is due to start while 16 creates settle the
    // reservation and 16 ends of `now` race each other.
    s.set_clock(T0 + HOUR).await;
    let creates = (0..16).map(|i| {
        create_grant(
            &s,
            grant_body(&p, 1, T0 + HOUR, T0 + HOUR + MIN, &format!("a{i}")),
        )
    });
    let ends = (0..16).map(|_| end_grant(&s, &p.account, &now));
    let (created, ended) = futures::join!(join_all(creates), join_all(ends));
    for c in created {
        c.ok();
    }
    let ended: Vec<Value> = ended.into_iter().map(|e| e.ok()["grant"].clone()).collect();
    for e in &ended {
        assert_eq!(e, &ended[0]);
    }
    assert_eq!(ended[0]["state"], "ended");
    assert_eq!(ended[0]["reason"], "ended");
    assert_eq!(ended[0]["endsAt"], T0 + HOUR);

    // At T0+2H: `later`'s term is over while 16 creates and 16 ends race.
    s.set_clock(T0 + 2 * HOUR).await;
    let creates = (0..16).map(|i| {
        create_grant(
            &s,
            grant_body(&p, 1, T0 + 2 * HOUR, T0 + 2 * HOUR + MIN, &format!("b{i}")),
        )
    });
    let ends = (0..16).map(|_| end_grant(&s, &p.account, &later));
    let (created, ended) = futures::join!(join_all(creates), join_all(ends));
    for c in created {
        c.ok();
    }
    for e in ended {
        let g = e.ok()["grant"].clone();
        assert_eq!(g["state"], "ended");
        assert_eq!(g["reason"], "term-over");
        assert_eq!(g["endsAt"], T0 + 2 * HOUR);
    }

    let evs = s.events(&p.tenant_token, "acme").await;
    assert_eq!(
        types_of(&evs, &later),
        [
            "reservation-grant.created",
            "reservation-grant.active",
            "reservation-grant.ended"
        ]
    );
    assert_eq!(
        types_of(&evs, &now),
        [
            "reservation-grant.created",
            "reservation-grant.active",
            "reservation-grant.ended"
        ]
    );
    let ended_now: Vec<Value> = of_type(&evs, "reservation-grant.ended")
        .into_iter()
        .filter(|e| e["data"]["grantId"] == now.as_str())
        .collect();
    assert_eq!(ended_now[0]["data"]["reason"], "ended");
    // 2 + 32 grants, each created once.
    assert_eq!(of_type(&evs, "reservation-grant.created").len(), 34);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gone_reservation_publishes_its_ends_once_with_the_reason() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = platform(&s, 10).await;
    let active = grant_id(&create_grant_ok(&s, grant_body(&p, 2, T0, T0 + 5 * HOUR, "a")).await);
    let scheduled =
        grant_id(&create_grant_ok(&s, grant_body(&p, 1, T0 + 2 * HOUR, T0 + 5 * HOUR, "b")).await);
    let over = grant_id(&create_grant_ok(&s, grant_body(&p, 1, T0, T0 + 10 * MIN, "c")).await);
    s.set_clock(T0 + 30 * MIN).await;
    p.gce.delete("res-a").await;
    // Several scans (and a concurrent pair) see it gone.
    let (a, b) = futures::join!(scan(&s, &p.account), scan(&s, &p.account));
    assert_eq!(a["items"][0]["status"], "gone");
    assert_eq!(b["items"][0]["status"], "gone");
    s.set_clock(T0 + HOUR).await;
    scan(&s, &p.account).await;
    for id in [&active, &scheduled, &over] {
        end_grant(&s, &p.account, id).await.ok();
    }

    let evs = s.events(&p.tenant_token, "acme").await;
    let ended: Vec<Value> = of_type(&evs, "reservation-grant.ended");
    let cancelled: Vec<Value> = of_type(&evs, "reservation-grant.cancelled");
    assert_eq!(ended.len(), 2, "{evs:?}");
    assert_eq!(cancelled.len(), 1, "{evs:?}");
    let of = |list: &[Value], id: &str| -> Value {
        list.iter()
            .find(|e| e["data"]["grantId"] == id)
            .expect("event")["data"]
            .clone()
    };
    assert_eq!(
        of(&ended, &active),
        with_reason(
            data(&p, &active, None, 2, T0, T0 + 30 * MIN),
            "reservation-gone"
        )
    );
    assert_eq!(
        of(&ended, &over),
        with_reason(data(&p, &over, None, 1, T0, T0 + 10 * MIN), "term-over")
    );
    assert_eq!(
        of(&cancelled, &scheduled),
        with_reason(
            data(&p, &scheduled, None, 1, T0 + 2 * HOUR, T0 + 5 * HOUR),
            "reservation-gone"
        )
    );
    let g = get_grant_as(&s, &p.tenant_token, "acme", &active)
        .await
        .ok();
    assert_eq!(g["grant"]["endedAt"], T0 + 30 * MIN);
    let c = get_grant_as(&s, &p.tenant_token, "acme", &scheduled)
        .await
        .ok();
    assert_eq!(c["grant"]["endedAt"], T0 + 30 * MIN);
    assert_eq!(c["grant"]["endsAt"], T0 + 5 * HOUR);
}
