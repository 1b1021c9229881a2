use super::*;
use serde_json::json;

fn parse(v: Value) -> Result<Page, ProviderError> {
    parse_page(v.to_string().as_bytes(), "my-project")
}

fn reservation(name: &str, zone: &str, status: &str, count: Value, in_use: Value) -> Value {
    json!({
        "kind": "compute#reservation",
        "name": name,
        "zone": format!(
            "https://www.googleapis.com/compute/v1/projects/my-project/zones/{zone}"
        ),
        "status": status,
        "specificReservation": {
            "count": count,
            "inUseCount": in_use,
            "instanceProperties": { "machineType": "n2-standard-4" }
        }
    })
}

#[test]
fn regions() {
    assert_eq!(region_of_zone("us-central1-a"), Some("us-central1"));
    assert_eq!(region_of_zone("europe-west4-b"), Some("europe-west4"));
    assert_eq!(region_of_zone("me-central2-c"), Some("me-central2"));
    assert_eq!(region_of_zone("nozone"), None);
    assert_eq!(region_of_zone("-a"), None);
    assert_eq!(region_of_zone("us-"), None);
}

#[test]
fn statuses() {
    assert_eq!(status_from_gce("READY"), ReservationStatus::Ready);
    for s in ["CREATING", "UPDATING", "DELETING", "INVALID", "ready", ""] {
        assert_eq!(status_from_gce(s), ReservationStatus::NotReady, "{s}");
    }
}

#[test]
fn zones_from_urls() {
    assert_eq!(
        zone_from_url("https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a"),
        Some("us-central1-a")
    );
    assert_eq!(zone_from_url("zones/us-east1-b"), Some("us-east1-b"));
    assert_eq!(zone_from_url("projects/p/regions/us-east1"), None);
    assert_eq!(zone_from_url("us-east1-b"), None);
    assert_eq!(zone_from_url("https://x/ozones/us-east1-b"), None);
}

#[test]
fn maps_a_page() {
    let page = parse(json!({
        "kind": "compute#reservationAggregatedList",
        "items": {
            "zones/us-central1-a": {
                "reservations": [
                    reservation("r1", "us-central1-a", "READY", json!("4"), json!("1")),
                    reservation("r2", "us-central1-a", "UPDATING", json!(2), json!(0)),
                ]
            },
            "zones/us-east1-b": {
                "warning": { "code": "NO_RESULTS_ON_PAGE", "message": "none" }
            },
            "zones/europe-west4-b": {
                "reservations": [
                    reservation("r3", "europe-west4-b", "CREATING", json!("8"), json!("0"))
                ]
            }
        },
        "nextPageToken": "next"
    }))
    .expect("valid page");
    assert_eq!(page.next_page_token.as_deref(), Some("next"));
    assert_eq!(page.reservations.len(), 3);
    let r1 = page
        .reservations
        .iter()
        .find(|r| r.reservation_id.ends_with("/r1"))
        .expect("r1");
    assert_eq!(
        *r1,
        ProviderReservation {
            reservation_id: "projects/my-project/zones/us-central1-a/reservations/r1".into(),
            zone: "us-central1-a".into(),
            region: "us-central1".into(),
            flavor: "n2-standard-4".into(),
            total: 4,
            in_use: 1,
            status: ReservationStatus::Ready,
        }
    );
    let r3 = page
        .reservations
        .iter()
        .find(|r| r.reservation_id.ends_with("/r3"))
        .expect("r3");
    assert_eq!(
        (r3.region.as_str(), r3.total, r3.status),
        ("europe-west4", 8, ReservationStatus::NotReady)
    );
}

#[test]
fn empty_answers_and_last_page() {
    let page = parse(json!({ "kind": "compute#reservationAggregatedList" })).expect("valid");
    assert!(page.reservations.is_empty());
    assert_eq!(page.next_page_token, None);
    let page = parse(json!({ "items": {}, "nextPageToken": "" })).expect("valid");
    assert_eq!(page.next_page_token, None);
}

fn unreachable(scope: &str) -> Value {
    json!({ "warning": {
        "code": "UNREACHABLE",
        "message": format!("Scope '{scope}' is unreachable."),
        "data": [{ "key": "scope", "value": scope }]
    } })
}

fn partial(zones: &[&str]) -> ProviderError {
    ProviderError::Partial {
        unreachable: zones.iter().map(|z| (*z).to_owned()).collect(),
    }
}

#[test]
fn an_unreachable_scope_fails_the_whole_page() {
    let r1 = reservation("r1", "us-central1-a", "READY", json!("4"), json!("1"));
    let err = parse(json!({ "items": {
        "zones/us-central1-a": { "reservations": [r1.clone()] },
        "zones/us-east1-b": unreachable("zones/us-east1-b"),
        "zones/europe-west4-b": { "warning": { "code": "NO_RESULTS_ON_PAGE" } }
    }}))
    .expect_err("a partial page");
    assert_eq!(err, partial(&["us-east1-b"]));
    assert!(err.is_retryable());
    assert_eq!(err.status(), None);
    assert_eq!(
        err.to_string(),
        "the provider could not reach every zone (UNREACHABLE: us-east1-b); \
         the listing is incomplete"
    );
    // Several, on the next page too: each is named once, sorted.
    let err = parse(json!({ "items": {
        "zones/us-central1-b": unreachable("zones/us-central1-b"),
        "zones/asia-east1-a": unreachable("zones/asia-east1-a"),
    }, "nextPageToken": "t2" }))
    .expect_err("a partial page");
    assert_eq!(err, partial(&["asia-east1-a", "us-central1-b"]));
}

#[test]
fn unreachables_fail_the_whole_page() {
    let r1 = reservation("r1", "us-central1-a", "READY", json!("4"), json!("1"));
    let err = parse(json!({
        "items": { "zones/us-central1-a": { "reservations": [r1.clone()] } },
        "unreachables": ["zones/us-east1-b", "zones/asia-east1-a", "zones/us-east1-b"]
    }))
    .expect_err("a partial page");
    assert_eq!(err, partial(&["asia-east1-a", "us-east1-b"]));
    // Both forms at once; a name that is not a plain word is not logged.
    let err = parse(json!({
        "items": { "zones/us-east1-c": unreachable("zones/us-east1-c") },
        "unreachables": ["regions/us-west1", "zones/<b>ya29.x y</b>"]
    }))
    .expect_err("a partial page");
    assert_eq!(err, partial(&["unknown", "us-east1-c", "us-west1"]));
    assert!(!err.to_string().contains("ya29"), "{err}");
    // Many: the first 16 are named, the rest counted.
    let scopes: Vec<String> = (0..20).map(|i| format!("zones/z{i:02}-a")).collect();
    let Err(ProviderError::Partial { unreachable }) = parse(json!({ "unreachables": scopes }))
    else {
        panic!("a partial page");
    };
    assert_eq!(unreachable.len(), 17);
    assert_eq!(unreachable[0], "z00-a");
    assert_eq!(unreachable[16], "4 more");
}

#[test]
fn other_warnings_and_empty_unreachables_are_harmless() {
    let r1 = reservation("r1", "us-central1-a", "READY", json!("4"), json!("1"));
    for unreachables in [json!([]), Value::Null] {
        let page = parse(json!({
            "items": {
                "zones/us-central1-a": { "reservations": [r1.clone()] },
                "zones/us-east1-b": { "warning": {
                    "code": "NO_RESULTS_ON_PAGE",
                    "message": "There are no results for scope 'zones/us-east1-b' on this page."
                } },
                "zones/us-east1-c": { "warning": { "code": "DEPRECATED_RESOURCE_USED" } },
                "zones/us-east1-d": { "warning": {} }
            },
            "unreachables": unreachables
        }))
        .expect("a complete page");
        assert_eq!(page.reservations.len(), 1);
    }
    // An `unreachables` that is not a list of scopes is malformed, not
    // ignored.
    assert!(matches!(
        parse(json!({ "unreachables": "zones/us-east1-b" })),
        Err(ProviderError::Malformed(_))
    ));
}

#[test]
fn machine_type_url_and_missing_fields() {
    let page = parse(
        json!({ "items": { "zones/us-central1-a": { "reservations": [{
            "name": "r",
            "specificReservation": {
                "count": "3",
                "instanceProperties": {
                    "machineType": concat!(
                        "https://www.googleapis.com/compute/v1/projects/p/zones/",
                        "us-central1-a/machineTypes/a3-highgpu-8g"
                    )
                }
            }
        }]}}}),
    )
    .expect("valid");
    let r = &page.reservations[0];
    assert_eq!(r.flavor, "a3-highgpu-8g");
    assert_eq!(r.zone, "us-central1-a", "zone falls back to the scope key");
    assert_eq!(
        (r.total, r.in_use, r.status),
        (3, 0, ReservationStatus::NotReady)
    );
}

#[test]
fn template_based_reservations_are_skipped() {
    let page = parse(
        json!({ "items": { "zones/us-central1-a": { "reservations": [
            { "name": "t", "zone": "zones/us-central1-a", "status": "READY",
              "specificReservation": { "count": "2", "sourceInstanceTemplate": "x" } },
            { "name": "a", "zone": "zones/us-central1-a", "status": "READY" }
        ]}}}),
    )
    .expect("valid");
    assert!(page.reservations.is_empty());
}

#[test]
fn malformed_answers() {
    let bad = |v: Value| match parse(v) {
        Err(ProviderError::Malformed(m)) => m,
        other => panic!("expected malformed, got {other:?}"),
    };
    bad(json!([]));
    bad(json!({ "items": [] }));
    assert!(
        bad(
            json!({ "items": { "zones/us-central1-a": { "reservations": [
                reservation("r", "us-central1-a", "READY", json!("four"), json!("0"))
            ]}}})
        )
        .contains("count")
    );
    bad(
        json!({ "items": { "zones/us-central1-a": { "reservations": [
            reservation("r", "us-central1-a", "READY", json!("-1"), json!("0"))
        ]}}}),
    );
    bad(
        json!({ "items": { "zones/us-central1-a": { "reservations": [
            reservation("r", "us-central1-a", "READY", json!(1.5), json!("0"))
        ]}}}),
    );
    bad(
        json!({ "items": { "zones/us-central1-a": { "reservations": [
            reservation("r", "us-central1-a", "READY", json!("1"), json!(true))
        ]}}}),
    );
    bad(
        json!({ "items": { "zones/us-central1-a": { "reservations": [
            { "zone": "zones/us-central1-a", "specificReservation": { "count": "1" } }
        ]}}}),
    );
    bad(
        json!({ "items": { "regions/us-central1": { "reservations": [
            {
                "name": "r",
                "specificReservation": {
                    "count": "1",
                    "instanceProperties": { "machineType": "n2" }
                }
            }
        ]}}}),
    );
    bad(
        json!({ "items": { "zones/us-central1-a": { "reservations": [
            {
                "name": "r",
                "specificReservation": { "instanceProperties": { "machineType": "n2" } }
            }
        ]}}}),
    );
    assert!(parse_page(b"<html>", "p").is_err());
}
