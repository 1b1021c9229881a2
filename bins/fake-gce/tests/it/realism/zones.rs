//! Unreachable zones in both aggregated lists, stocked-out zones, missing
//! images, and the `AND` syntax of the instances list's filter.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{Fake, ZONE, ZONE_B, rid, vm, vm_from};
use crate::common::PROJECT;

const FAR: &str = "europe-west1-c";

/// The names listed under each scope that has any.
fn names(page: &Value, kind: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (scope, scoped) in page["items"].as_object().expect("items") {
        for item in scoped[kind].as_array().into_iter().flatten() {
            let name = item["name"].as_str().expect("name");
            out.push((scope.clone(), name.to_owned()));
        }
    }
    out
}

fn unreachable_scope(zone: &str) -> Value {
    let scope = format!("zones/{zone}");
    json!({ "warning": {
        "code": "UNREACHABLE",
        "message": format!("Scope '{scope}' is unreachable."),
        "data": [{ "key": "scope", "value": scope }],
    } })
}

async fn set_zones(fake: &Fake, hook: &str, zones: &[&str]) {
    let (status, body) = fake
        .send(Method::POST, hook, Some(json!({ "zones": zones })))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut sorted = zones.to_vec();
    sorted.sort_unstable();
    assert_eq!(body, json!({ "zones": sorted }));
}

#[tokio::test]
async fn unreachable_zones_are_left_out_of_both_aggregated_lists() {
    let fake = Fake::binary(&[("BC_FAKE_GCE_OPERATION_POLLS", "0")]);
    for zone in [ZONE, ZONE_B] {
        let path = format!("/fake/projects/{PROJECT}/zones/{zone}/reservations/r-{zone}");
        let body = json!({ "count": 1, "machineType": "n2-standard-4" });
        assert_eq!(
            fake.send(Method::PUT, &path, Some(body)).await.0,
            StatusCode::OK
        );
    }
    fake.create_in(PROJECT, ZONE, &rid(1), vm("bc-a1")).await;
    fake.create_in(PROJECT, ZONE, &rid(2), vm("bc-a2")).await;
    fake.create_in(PROJECT, ZONE_B, &rid(3), vm("bc-b1")).await;
    set_zones(&fake, "/fake/unreachable", &[ZONE_B, FAR]).await;
    let a = format!("zones/{ZONE}");

    let (status, page) = fake.list(PROJECT, "reservations", "").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(
        names(&page, "reservations"),
        [(a.clone(), format!("r-{ZONE}"))]
    );
    assert_eq!(
        page["items"][format!("zones/{ZONE_B}")],
        unreachable_scope(ZONE_B)
    );
    assert_eq!(
        page["items"][format!("zones/{FAR}")],
        unreachable_scope(FAR)
    );
    assert!(page.get("unreachables").is_none(), "{page}");

    let (_, page) = fake
        .list(PROJECT, "reservations", "?returnPartialSuccess=true")
        .await;
    assert_eq!(
        page["items"].as_object().map(serde_json::Map::len),
        Some(1),
        "{page}"
    );
    assert_eq!(
        page["unreachables"],
        json!([format!("zones/{FAR}"), format!("zones/{ZONE_B}")])
    );

    // Paged, every page leaves them out the same way.
    let query = "?filter=labels.bc-managed%3Dtrue%20AND%20labels.bc-instance%3Dinst_bc-a1";
    let (status, page) = fake.list(PROJECT, "instances", query).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(names(&page, "instances"), [(a.clone(), "bc-a1".to_owned())]);
    let mut token = String::new();
    for expected in ["bc-a1", "bc-a2"] {
        let (_, page) = fake
            .list(
                PROJECT,
                "instances",
                &format!("?maxResults=1&pageToken={token}"),
            )
            .await;
        assert_eq!(
            names(&page, "instances"),
            [(a.clone(), expected.to_owned())]
        );
        assert_eq!(
            page["items"][format!("zones/{ZONE_B}")],
            unreachable_scope(ZONE_B)
        );
        assert_eq!(
            page["items"][format!("zones/{FAR}")],
            unreachable_scope(FAR)
        );
        token = page["nextPageToken"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
    }
    assert!(
        token.is_empty(),
        "the VM in the unreachable zone is not paged to"
    );
    let (_, page) = fake
        .list(PROJECT, "instances", "?returnPartialSuccess=true")
        .await;
    assert_eq!(
        page["items"].as_object().map(serde_json::Map::len),
        Some(1),
        "{page}"
    );
    assert_eq!(
        page["unreachables"],
        json!([format!("zones/{FAR}"), format!("zones/{ZONE_B}")])
    );

    // A project with nothing anywhere still hears of them.
    let (_, page) = fake.list("empty-p", "instances", "").await;
    assert_eq!(
        page["items"][format!("zones/{FAR}")],
        unreachable_scope(FAR)
    );

    // The zone's own paths keep working.
    let (status, b1) = fake.instance_in(PROJECT, ZONE_B, "bc-b1").await;
    assert_eq!(status, StatusCode::OK, "{b1}");
    let (status, _) = fake.create_in(PROJECT, ZONE_B, &rid(4), vm("bc-b2")).await;
    assert_eq!(status, StatusCode::OK);

    let (_, current) = fake.send(Method::GET, "/fake/unreachable", None).await;
    assert_eq!(current, json!({ "zones": [FAR, ZONE_B] }));
    set_zones(&fake, "/fake/unreachable", &[]).await;
    let (_, page) = fake
        .list(PROJECT, "instances", "?returnPartialSuccess=true")
        .await;
    assert_eq!(names(&page, "instances").len(), 4, "{page}");
    assert!(page.get("unreachables").is_none(), "{page}");
    assert!(
        page["items"].get(format!("zones/{FAR}")).is_none(),
        "{page}"
    );
    let (_, page) = fake.list(PROJECT, "reservations", "").await;
    assert_eq!(names(&page, "reservations").len(), 2, "{page}");
}

#[tokio::test]
async fn zone_hooks_refuse_bad_bodies() {
    let fake = Fake::binary(&[]);
    for hook in ["/fake/unreachable", "/fake/stockout"] {
        for bad in [
            json!({}),
            json!({ "zones": "us-central1-a" }),
            json!({ "zones": ["Not-A-Zone"] }),
            json!({ "zones": ["nodash"] }),
            json!({ "zones": [], "extra": 1 }),
        ] {
            let (status, body) = fake.send(Method::POST, hook, Some(bad.clone())).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{hook} {bad}: {body}");
        }
        let (status, _) = fake.send(Method::DELETE, hook, None).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    }
}

#[tokio::test]
async fn creates_in_a_stocked_out_zone_fail_until_it_ends() {
    let fake = Fake::binary(&[]);
    let path = format!("/fake/projects/{PROJECT}/zones/{ZONE}/reservations/r1");
    let body = json!({ "count": 2, "machineType": "n2-standard-4" });
    fake.send(Method::PUT, &path, Some(body)).await;
    let mut on_r1 = vm("bc-a");
    on_r1["reservationAffinity"] = json!({
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": ["r1"],
    });
    set_zones(&fake, "/fake/stockout", &[ZONE]).await;

    let (status, op) = fake.create_in(PROJECT, ZONE, &rid(1), on_r1.clone()).await;
    assert_eq!(status, StatusCode::OK, "{op}");
    let done = fake.wait(&op).await;
    assert_eq!(
        done["error"],
        json!({ "errors": [{
            "code": "ZONE_RESOURCE_POOL_EXHAUSTED",
            "message": format!(
                "The zone 'projects/{PROJECT}/zones/{ZONE}' does not have enough resources \
                 available to fulfill the request. Try a different zone, or try again later."
            ),
        }] })
    );
    assert_eq!(done["httpErrorStatusCode"], 503);
    assert_eq!(
        fake.instance_in(PROJECT, ZONE, "bc-a").await.0,
        StatusCode::NOT_FOUND
    );
    let (_, r1) = fake.send(Method::GET, &path, None).await;
    assert_eq!(r1["specificReservation"]["inUseCount"], "0", "{r1}");
    // Other zones are fine.
    let (_, op) = fake.create_in(PROJECT, ZONE_B, &rid(2), vm("bc-b")).await;
    assert!(fake.wait(&op).await.get("error").is_none());

    set_zones(&fake, "/fake/stockout", &[]).await;
    let (_, op) = fake.create_in(PROJECT, ZONE, &rid(3), on_r1).await;
    assert!(fake.wait(&op).await.get("error").is_none());
    assert_eq!(
        fake.instance_in(PROJECT, ZONE, "bc-a").await.1["status"],
        "RUNNING"
    );
}

#[tokio::test]
async fn a_create_from_a_missing_image_answers_404_and_makes_nothing() {
    let fake = Fake::binary(&[("BC_FAKE_GCE_CONCURRENT_OPERATIONS", "1")]);
    for image in [
        "projects/missing/global/images/x".to_owned(),
        "https://www.googleapis.com/compute/v1/projects/missing/global/images/x".to_owned(),
    ] {
        for _ in 0..2 {
            let (status, body) = fake
                .create_in(PROJECT, ZONE, &rid(1), vm_from("bc-a", &image))
                .await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
            let message = "The resource 'projects/missing/global/images/x' was not found";
            assert_eq!(
                body,
                json!({ "error": {
                    "code": 404,
                    "message": message,
                    "errors": [{ "domain": "global", "reason": "notFound", "message": message }],
                } })
            );
        }
    }
    assert_eq!(
        fake.instance_in(PROJECT, ZONE, "bc-a").await.0,
        StatusCode::NOT_FOUND
    );
    let stats = fake.stats(PROJECT).await;
    assert_eq!(stats["operationsInFlight"], 0, "{stats}");
    assert_eq!(stats["peakOperationsInFlight"], 0, "{stats}");
    // No operation started under that requestId, nor took the one slot.
    let (status, op) = fake.create_in(PROJECT, ZONE, &rid(1), vm("bc-a")).await;
    assert_eq!(status, StatusCode::OK, "{op}");
    assert_eq!(op["operationType"], "insert");
}

/// A filter as a query parameter.
fn filtered(filter: &str) -> String {
    let encoded: String = filter
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    format!("?filter={encoded}")
}

#[tokio::test]
async fn the_instances_filter_takes_google_and_syntax() {
    let fake = Fake::binary(&[("BC_FAKE_GCE_OPERATION_POLLS", "0")]);
    for (n, name, installation) in [(1, "bc-a", "abc"), (2, "bc-b", "other")] {
        let mut body = vm(name);
        body["labels"]["bc-installation"] = json!(installation);
        fake.create_in(PROJECT, ZONE, &rid(n), body).await;
    }
    let mut other = vm("team-x");
    other["labels"] = json!({ "team": "x" });
    fake.create_in(PROJECT, ZONE, &rid(3), other).await;

    let listed = async |filter: &str| {
        let (status, page) = fake.list(PROJECT, "instances", &filtered(filter)).await;
        assert_eq!(status, StatusCode::OK, "{filter}: {page}");
        names(&page, "instances")
            .into_iter()
            .map(|(_, name)| name)
            .collect::<Vec<_>>()
    };
    for filter in [
        "labels.bc-managed=true AND labels.bc-installation=abc",
        "(labels.bc-managed=true) AND (labels.bc-installation=abc)",
        "labels.bc-managed = \"true\" AND labels.bc-installation = \"abc\"",
    ] {
        assert_eq!(listed(filter).await, ["bc-a"], "{filter}");
    }
    assert_eq!(listed("labels.bc-managed=true").await, ["bc-a", "bc-b"]);
    assert_eq!(listed("labels.team=x").await, ["team-x"]);
    for bad in [
        "labels.bc-managed=true OR labels.team=x",
        "labels.bc-managed!=true",
        "(labels.bc-managed=true",
        "labels.bc-managed=true AND",
        "status=RUNNING",
    ] {
        let (status, body) = fake.list(PROJECT, "instances", &filtered(bad)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_eq!(body["error"]["errors"][0]["reason"], "invalid");
    }
}
