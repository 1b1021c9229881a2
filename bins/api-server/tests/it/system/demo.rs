//! The demo world `just run` seeds (`demo-seed`): what it holds, that its
//! past was played and metered, and that seeding again changes nothing.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::support::demo;
use crate::support::gce::Gce;
use crate::support::server::Server;

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;

#[tokio::test(flavor = "multi_thread")]
async fn the_demo_world_has_its_story_and_three_days_of_metered_history() {
    let s = Server::start().await;
    let gce = Gce::start().await;
    let summary = demo::seed(&s, &gce).await;
    assert_eq!(summary["seeded"], true);
    let t = summary["storyHour"].as_i64().expect("storyHour");

    let grants = s
        .root("reservationGrants/list", json!({ "all": true }))
        .await
        .ok();
    let mut seen: Vec<(String, i64, i64, i64, String)> = grants["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|g| {
            (
                g["tenantId"].as_str().expect("tenant").to_owned(),
                g["slots"].as_i64().expect("slots"),
                (g["startsAt"].as_i64().expect("startsAt") - t) / HOUR,
                (g["endsAt"].as_i64().expect("endsAt") - t) / HOUR,
                g["state"].as_str().expect("state").to_owned(),
            )
        })
        .collect();
    seen.sort();
    // The managed pool's grant: acme's 3 slots for 7 days, which acme lends
    // (contract 3.14); globex's interruptible instance is in its idle slot.
    let lending: Vec<&Value> = grants["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|g| g["lending"] == true)
        .collect();
    assert_eq!(lending.len(), 1, "{grants}");
    assert_eq!(lending[0]["tenantId"], "acme");
    assert_eq!(lending[0]["slots"], 3);
    assert_eq!(lending[0]["state"], "active");
    let lending_id = lending[0]["grantId"].as_str().expect("grantId").to_owned();
    assert_eq!(
        lending[0]["endsAt"].as_i64().expect("endsAt")
            - lending[0]["startsAt"].as_i64().expect("startsAt"),
        7 * DAY
    );
    seen.retain(|g| g.1 != 3);
    let hours = |d: i64| d * DAY / HOUR;
    let mut expected = vec![
        (
            "acme".to_owned(),
            4,
            hours(-3),
            hours(-1),
            "ended".to_owned(),
        ),
        (
            "acme".to_owned(),
            4,
            hours(-2),
            hours(12),
            "active".to_owned(),
        ),
        (
            "acme".to_owned(),
            4,
            hours(12),
            hours(26),
            "scheduled".to_owned(),
        ),
        (
            "globex".to_owned(),
            2,
            hours(-1),
            hours(6),
            "active".to_owned(),
        ),
        (
            "globex".to_owned(),
            2,
            hours(1),
            hours(8),
            "scheduled".to_owned(),
        ),
    ];
    expected.sort();
    assert_eq!(seen, expected);

    // Where each instance is.
    let instances = s.root("instances/list", json!({ "all": true })).await;
    let placements: BTreeMap<String, (String, String)> = if instances.status == 200 {
        instances.body["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| {
                (
                    i["name"].as_str().expect("name").to_owned(),
                    (
                        i["state"].as_str().expect("state").to_owned(),
                        i["placement"]["kind"].as_str().expect("kind").to_owned(),
                    ),
                )
            })
            .collect()
    } else {
        // Before `instances.list {all}` exists: each tenant's own list.
        let mut all = BTreeMap::new();
        for tenant in ["acme", "globex"] {
            let key = summary["keys"][tenant].as_str().expect("key");
            let v = s
                .call(key, "instances/list", json!({ "tenantId": tenant }))
                .await
                .ok();
            for i in v["items"].as_array().expect("items") {
                all.insert(
                    i["name"].as_str().expect("name").to_owned(),
                    (
                        i["state"].as_str().expect("state").to_owned(),
                        i["placement"]["kind"].as_str().expect("kind").to_owned(),
                    ),
                );
            }
        }
        all
    };
    // acme: five instances, one grant of four slots live now: four are in
    // it (the stopped one keeps its slot), the fifth overflowed onto an
    // ordinary slot when the first grant ended and handed its instances over.
    let count = |tenant: &str, state: &str, kind: &str| {
        placements
            .iter()
            .filter(|(name, (st, k))| name.starts_with(tenant) && st == state && k == kind)
            .count()
    };
    assert_eq!(count("acme", "running", "grant"), 3, "{placements:?}");
    assert_eq!(count("acme", "stopped", "grant"), 1, "{placements:?}");
    assert_eq!(count("acme", "running", "reservation"), 1, "{placements:?}");
    let at = |name: &str| placements.get(name).cloned().expect(name);
    assert_eq!(at("globex-db-1"), ("running".into(), "grant".into()));
    assert_eq!(at("globex-db-2"), ("running".into(), "grant".into()));
    assert_eq!(
        at("globex-overflow"),
        ("running".into(), "reservation".into())
    );
    assert_eq!(at("globex-batch"), ("running".into(), "ondemand".into()));
    // The managed pool: acme's two in its lending grant, globex's
    // interruptible one in the slot it lends.
    assert_eq!(at("managed-1").1, "grant");
    assert_eq!(at("spot-1").1, "lent");

    // The played past is metered: acme's ended grant billed its whole term
    // (48 slot-hour records), the active one every hour since it started.
    let acme_key = summary["keys"]["acme"].as_str().expect("key");
    let usage = s
        .list_all(
            acme_key,
            "usage/list",
            json!({ "tenantId": "acme", "meter": "vm.grant.slot.hours" }),
        )
        .await;
    let per_grant = usage
        .iter()
        .fold(BTreeMap::<String, usize>::new(), |mut m, u| {
            *m.entry(u["grantId"].as_str().expect("grantId").to_owned())
                .or_default() += 1;
            m
        });
    // The lending grant started at the end of the seeding: its hours are
    // the ones that ended since.
    let mut counts: Vec<usize> = per_grant
        .iter()
        .filter(|(id, _)| **id != lending_id)
        .map(|(_, n)| *n)
        .collect();
    counts.sort();
    // 49 when the wall clock crossed an hour while the world was seeded.
    assert!(
        counts.len() == 2 && counts[0] == 48 && (48..=49).contains(&counts[1]),
        "{per_grant:?}"
    );

    // Seeding again leaves the world as it is.
    let again = demo::run_seeder(&s, &gce).await;
    assert_eq!(again, json!({ "seeded": false }));
    let after = s
        .root("reservationGrants/list", json!({ "all": true }))
        .await
        .ok();
    assert_eq!(after["items"].as_array().map(Vec::len), Some(6));
}
