//! Every endpoint of the real `fake-gce` binary, over plain HTTP.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::{FakeGceProcess, PROJECT};

/// Every reservation of a page, in the order listed.
fn reservations(page: &Value) -> Vec<Value> {
    page["items"]
        .as_object()
        .expect("items")
        .values()
        .flat_map(|scoped| {
            scoped["reservations"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect()
}

fn names(page: &Value) -> Vec<String> {
    reservations(page)
        .iter()
        .map(|r| r["name"].as_str().expect("name").to_owned())
        .collect()
}

#[test]
fn ready_line_names_an_ephemeral_loopback_port() {
    let fake = FakeGceProcess::start();
    let port = fake
        .base
        .strip_prefix("http://127.0.0.1:")
        .expect("loopback address")
        .parse::<u16>()
        .expect("port");
    assert_ne!(port, 0);
}

#[tokio::test]
async fn put_creates_and_replaces_in_the_gce_shape() {
    let fake = FakeGceProcess::start();
    let created = fake
        .put_reservation(
            "us-central1-a",
            "r1",
            json!({ "count": 4, "inUseCount": 1, "machineType": "n2-standard-4" }),
        )
        .await;
    assert_eq!(created["kind"], "compute#reservation");
    assert_eq!(created["name"], "r1");
    assert_eq!(
        created["zone"],
        "https://www.googleapis.com/compute/v1/projects/my-project/zones/us-central1-a"
    );
    assert_eq!(created["status"], "READY", "status defaults to READY");
    assert_eq!(
        created["specificReservation"],
        json!({
            "count": "4",
            "inUseCount": "1",
            "instanceProperties": { "machineType": "n2-standard-4" },
        }),
        "int64 counts travel as strings"
    );

    let replaced = fake
        .put_reservation(
            "us-central1-a",
            "r1",
            json!({ "count": 6, "machineType": "n2-standard-8", "status": "UPDATING" }),
        )
        .await;
    assert_eq!(replaced["id"], created["id"], "a replace keeps the id");
    assert_eq!(replaced["status"], "UPDATING");
    assert_eq!(replaced["specificReservation"]["count"], "6");
    assert_eq!(replaced["specificReservation"]["inUseCount"], "0");

    let path = FakeGceProcess::reservation_path(PROJECT, "us-central1-a", "r1");
    let (status, got) = fake.send(Method::GET, &path, None).await;
    assert_eq!((status, &got), (StatusCode::OK, &replaced));

    let (status, page) = fake.list_raw(PROJECT, "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["kind"], "compute#reservationAggregatedList");
    assert_eq!(
        page["items"]["zones/us-central1-a"]["reservations"],
        json!([replaced])
    );
    assert!(page.get("nextPageToken").is_none());
}

#[tokio::test]
async fn put_refuses_bad_input() {
    let fake = FakeGceProcess::start();
    let path = FakeGceProcess::reservation_path(PROJECT, "us-central1-a", "r1");
    for body in [
        json!({ "machineType": "n2" }),
        json!({ "count": "4", "machineType": "n2" }),
        json!({ "count": -1, "machineType": "n2" }),
        json!({ "count": 1, "inUseCount": 2, "machineType": "n2" }),
        json!({ "count": 1 }),
        json!({ "count": 1, "machineType": "n2", "status": "ready" }),
        json!({ "count": 1, "machineType": "n2", "extra": true }),
        json!([1]),
    ] {
        let (status, err) = fake.send(Method::PUT, &path, Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(err["error"]["code"], 400, "{err}");
    }
    let not_json = fake
        .http
        .put(fake.url(&path))
        .body("count=1")
        .send()
        .await
        .expect("request");
    assert_eq!(not_json.status(), StatusCode::BAD_REQUEST);
    for bad_path in [
        FakeGceProcess::reservation_path(PROJECT, "nozone", "r1"),
        FakeGceProcess::reservation_path(PROJECT, "us-central1-a", "Bad_Name"),
        FakeGceProcess::reservation_path("UPPER", "us-central1-a", "r1"),
    ] {
        let (status, _) = fake
            .send(
                Method::PUT,
                &bad_path,
                Some(json!({ "count": 1, "machineType": "n2" })),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad_path}");
    }
    let too_big = fake
        .http
        .put(fake.url(&path))
        .body(vec![b' '; 1024 * 1024 + 1024])
        .send()
        .await
        .expect("request");
    assert_eq!(too_big.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let (_, page) = fake.list_raw(PROJECT, "").await;
    assert!(reservations(&page).is_empty(), "nothing was stored");
}

#[tokio::test]
async fn delete_removes_and_then_404s() {
    let fake = FakeGceProcess::start();
    fake.put_reservation(
        "us-central1-a",
        "r1",
        json!({ "count": 1, "machineType": "n2" }),
    )
    .await;
    fake.put_reservation(
        "us-central1-a",
        "r2",
        json!({ "count": 1, "machineType": "n2" }),
    )
    .await;
    let path = FakeGceProcess::reservation_path(PROJECT, "us-central1-a", "r1");
    let (status, body) = fake.send(Method::DELETE, &path, None).await;
    assert_eq!((status, body), (StatusCode::OK, json!({ "deleted": true })));
    let (status, _) = fake.send(Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = fake.send(Method::GET, &path, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, page) = fake.list_raw(PROJECT, "").await;
    assert_eq!(names(&page), ["r2"]);
}

#[tokio::test]
async fn list_pages_with_max_results() {
    let fake = FakeGceProcess::start();
    let mut expected = Vec::new();
    for (zone, name) in [
        ("us-central1-a", "a1"),
        ("us-central1-a", "a2"),
        ("us-central1-b", "b1"),
        ("europe-west4-b", "e1"),
        ("europe-west4-b", "e2"),
    ] {
        fake.put_reservation(
            zone,
            name,
            json!({ "count": 2, "machineType": "n2-standard-4" }),
        )
        .await;
        expected.push(name.to_owned());
    }
    let mut seen = Vec::new();
    let mut query = "?maxResults=2".to_owned();
    let mut pages = 0;
    loop {
        let (status, page) = fake.list_raw(PROJECT, &query).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        pages += 1;
        let on_page = names(&page);
        assert!(on_page.len() <= 2, "{page}");
        // Every known zone appears on every page, with a warning if empty there.
        let items = page["items"].as_object().expect("items");
        assert_eq!(items.len(), 3, "{page}");
        for scoped in items.values() {
            assert!(
                scoped.get("reservations").is_some()
                    || scoped["warning"]["code"] == "NO_RESULTS_ON_PAGE",
                "{scoped}"
            );
        }
        seen.extend(on_page);
        match page["nextPageToken"].as_str() {
            Some(token) => query = format!("?maxResults=2&pageToken={token}"),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    seen.sort();
    expected.sort();
    assert_eq!(seen, expected);

    // Without maxResults, one page holds everything (default 500).
    let (_, page) = fake.list_raw(PROJECT, "").await;
    assert_eq!(names(&page).len(), 5);
    assert!(page.get("nextPageToken").is_none());
    // Another project sees none of them.
    let (status, page) = fake.list_raw("other-project", "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(reservations(&page).is_empty());

    let (status, _) = fake.list_raw(PROJECT, "?maxResults=many").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = fake.list_raw(PROJECT, "?pageToken=garbage").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn fail_makes_the_next_reads_answer_503() {
    let fake = FakeGceProcess::start();
    fake.fail_next(2).await;
    // Control calls are not read calls and do not consume failures.
    fake.put_reservation(
        "us-central1-a",
        "r1",
        json!({ "count": 1, "machineType": "n2" }),
    )
    .await;
    for _ in 0..2 {
        let (status, body) = fake.list_raw(PROJECT, "").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["error"]["code"], 503);
    }
    let (status, _) = fake.list_raw(PROJECT, "").await;
    assert_eq!(status, StatusCode::OK);

    // A new count replaces the one left.
    fake.fail_next(5).await;
    fake.fail_next(1).await;
    let (status, _) = fake.list_raw(PROJECT, "").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let (status, _) = fake.list_raw(PROJECT, "").await;
    assert_eq!(status, StatusCode::OK);
    fake.fail_next(3).await;
    fake.fail_next(0).await;
    let (status, _) = fake.list_raw(PROJECT, "").await;
    assert_eq!(status, StatusCode::OK);

    for body in [
        json!({ "count": -1 }),
        json!({ "count": "2" }),
        json!({}),
        json!({ "count": 1, "x": 1 }),
    ] {
        let (status, _) = fake
            .send(Method::POST, "/fake/fail", Some(body.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    }
}

#[tokio::test]
async fn unknown_paths_and_wrong_methods() {
    let fake = FakeGceProcess::start();
    let (status, body) = fake.send(Method::GET, "/nope", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], 404);
    let (status, _) = fake.send(Method::GET, "/fake/fail", None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (status, _) = fake
        .send(
            Method::POST,
            "/compute/v1/projects/my-project/aggregated/reservations",
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (status, _) = fake
        .send(
            Method::PATCH,
            &FakeGceProcess::reservation_path(PROJECT, "us-central1-a", "r1"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn a_configured_token_is_required_on_reads() {
    let fake = FakeGceProcess::start_with(&[("BC_FAKE_GCE_TOKEN", "tok-123")]);
    let url = fake.url("/compute/v1/projects/my-project/aggregated/reservations");
    let bare = fake.http.get(&url).send().await.expect("request");
    assert_eq!(bare.status(), StatusCode::UNAUTHORIZED);
    let wrong = fake
        .http
        .get(&url)
        .bearer_auth("nope")
        .send()
        .await
        .expect("request");
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let right = fake
        .http
        .get(&url)
        .bearer_auth("tok-123")
        .send()
        .await
        .expect("request");
    assert_eq!(right.status(), StatusCode::OK);
}

#[test]
fn stops_gracefully_on_sigterm_and_sigint() {
    for signal in ["TERM", "INT"] {
        let fake = FakeGceProcess::start();
        let status = fake.stop_with(signal);
        assert!(status.success(), "SIG{signal}: {status:?}");
    }
}

#[tokio::test]
async fn read_calls_are_counted_per_project_and_reset() {
    let fake = FakeGceProcess::start();
    assert_eq!(fake.calls().await, json!({}));
    fake.put_reservation(
        "us-central1-a",
        "r1",
        json!({ "count": 1, "machineType": "n2" }),
    )
    .await;
    fake.put_reservation(
        "us-central1-a",
        "r2",
        json!({ "count": 1, "machineType": "n2" }),
    )
    .await;
    // Control calls are not read calls.
    assert_eq!(fake.calls().await, json!({}));
    let (status, page) = fake.list_raw(PROJECT, "?maxResults=1").await;
    assert_eq!(status, StatusCode::OK);
    let token = page["nextPageToken"].as_str().expect("a second page");
    let (status, _) = fake
        .list_raw(PROJECT, &format!("?maxResults=1&pageToken={token}"))
        .await;
    assert_eq!(status, StatusCode::OK);
    // Failed reads count too: the call was made.
    fake.fail_next(1).await;
    let (status, _) = fake.list_raw("other-project", "").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let (status, _) = fake.list_raw(PROJECT, "?pageToken=garbage").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        fake.calls().await,
        json!({ PROJECT: 3, "other-project": 1 })
    );
    // A wrong method on the read path is not a read call.
    let (status, _) = fake
        .send(
            Method::POST,
            "/compute/v1/projects/my-project/aggregated/reservations",
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(fake.calls().await[PROJECT], 3);

    let (status, body) = fake.send(Method::DELETE, "/fake/calls", None).await;
    assert_eq!((status, body), (StatusCode::OK, json!({ "calls": {} })));
    assert_eq!(fake.calls().await, json!({}));
    fake.list_raw(PROJECT, "").await;
    assert_eq!(fake.calls().await, json!({ PROJECT: 1 }));

    for method in [Method::POST, Method::PUT] {
        let (status, _) = fake.send(method, "/fake/calls", Some(json!({}))).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    }
}

#[tokio::test]
async fn a_delay_holds_every_read_so_that_concurrent_reads_overlap() {
    use std::time::{Duration, Instant};

    let fake = FakeGceProcess::start();
    fake.put_reservation(
        "us-central1-a",
        "r1",
        json!({ "count": 1, "machineType": "n2" }),
    )
    .await;
    let delay = Duration::from_millis(2500);
    fake.set_delay(u64::try_from(delay.as_millis()).expect("ms"))
        .await;
    let started = Instant::now();
    let url = fake.url("/compute/v1/projects/my-project/aggregated/reservations");
    let reads: Vec<_> = (0..2)
        .map(|_| {
            let (http, url) = (fake.http.clone(), url.clone());
            tokio::spawn(async move {
                let response = http.get(url).send().await.expect("read");
                (response.status(), Instant::now())
            })
        })
        .collect();
    // Both reads arrive (they are counted on arrival) and are both held.
    let deadline = Instant::now() + Duration::from_secs(2);
    while fake.calls().await[PROJECT] != 2 {
        assert!(Instant::now() < deadline, "both reads should have arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        started.elapsed() < delay && reads.iter().all(|r| !r.is_finished()),
        "both reads are in flight at once"
    );
    // Control calls are not delayed.
    let control = Instant::now();
    fake.calls().await;
    assert!(control.elapsed() < delay);
    for read in reads {
        let (status, finished) = read.await.expect("task");
        assert_eq!(status, StatusCode::OK);
        assert!(finished - started >= delay, "answered after the delay");
    }

    // 0 turns it off.
    fake.set_delay(0).await;
    let quick = Instant::now();
    let (status, _) = fake.list_raw(PROJECT, "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(quick.elapsed() < delay, "{:?}", quick.elapsed());

    for body in [
        json!({ "ms": -1 }),
        json!({ "ms": "5" }),
        json!({ "ms": 1.5 }),
        json!({ "ms": 60_001 }),
        json!({}),
        json!({ "ms": 1, "x": 1 }),
    ] {
        let (status, _) = fake
            .send(Method::POST, "/fake/delay", Some(body.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    }
    let (status, _) = fake.send(Method::GET, "/fake/delay", None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
}
