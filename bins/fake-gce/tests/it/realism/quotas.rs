//! `BC_FAKE_GCE_WRITES_PER_MIN`, `BC_FAKE_GCE_CONCURRENT_OPERATIONS` and
//! `/fake/stats`: Google's `403 rateLimitExceeded`, what it counts and what
//! it leaves unchanged.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reqwest::{Method, StatusCode};
use serde_json::json;

use super::{DEADLINE, Fake, ZONE, assert_quota_403, counts, rid, vm};
use crate::common::PROJECT;

const WRITES: (&str, &str) = (
    "RATE_LIMIT_EXCEEDED",
    "compute.googleapis.com/write_requests",
);
const CONCURRENT: (&str, &str) = (
    "CONCURRENT_OPERATIONS_QUOTA_EXCEEDED",
    "compute.googleapis.com/concurrent_operations",
);

fn wall_minute() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
        / 60
}

#[tokio::test]
async fn writes_beyond_the_minute_quota_answer_google_rate_limit_403() {
    let fake = Fake::binary(&[("BC_FAKE_GCE_WRITES_PER_MIN", "2")]);
    // The quota's minute is the wall clock's: an attempt that straddles one
    // proves nothing and is made again, in a fresh project.
    for attempt in 1..=3 {
        let project = format!("rate-{attempt}");
        let p = project.as_str();
        let minute = wall_minute();
        let (status, a) = fake.create_in(p, ZONE, &rid(1), vm("bc-a")).await;
        assert_eq!(status, StatusCode::OK, "{a}");
        let (status, b) = fake.create_in(p, ZONE, &rid(2), vm("bc-b")).await;
        assert_eq!(status, StatusCode::OK, "{b}");
        let (c_status, c) = fake.create_in(p, ZONE, &rid(3), vm("bc-c")).await;
        // The same requestId again is a write as well.
        let (again_status, again) = fake.create_in(p, ZONE, &rid(1), vm("bc-a")).await;
        let (stop_status, stop) = fake.change(p, "bc-a", "stop", &rid(4)).await;
        if wall_minute() != minute {
            continue;
        }
        for (status, body) in [(c_status, &c), (again_status, &again), (stop_status, &stop)] {
            assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
            let message = assert_quota_403(body, p, WRITES.0, WRITES.1);
            assert!(
                message.contains("'Write requests' and limit 'Write requests per minute'"),
                "{message}"
            );
            let metadata = &body["error"]["details"][0]["metadata"];
            assert_eq!(metadata["quota_limit"], "WriteRequestsPerMinutePerProject");
            assert_eq!(metadata["quota_limit_value"], "2");
        }
        // Refused calls changed nothing; reads are not limited.
        let (status, _) = fake.instance_in(p, ZONE, "bc-c").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (_, a_now) = fake.instance_in(p, ZONE, "bc-a").await;
        assert_ne!(a_now["status"], "STOPPING", "{a_now}");
        assert_eq!(fake.stats(p).await, counts(5, 3, 0, 2, 2));
        // Another project has its own quota.
        let (status, other) = fake.create_in(PROJECT, ZONE, &rid(5), vm("bc-a")).await;
        assert_eq!(status, StatusCode::OK, "{other}");
        return;
    }
    panic!("every attempt straddled a minute");
}

#[tokio::test]
async fn the_write_quota_refills_at_the_next_minute_of_its_clock() {
    let minute = 29_000_000 * 60_000;
    let now = Arc::new(AtomicU64::new(minute + 1_000));
    let clock = Arc::clone(&now);
    let fake = Fake::in_process(
        fake_gce::FakeGce::default()
            .with_writes_per_min(2)
            .with_quota_clock(move || clock.load(Ordering::SeqCst)),
    )
    .await;
    let create = async |n: u32, name: &str| fake.create_in(PROJECT, ZONE, &rid(n), vm(name)).await;
    assert_eq!(create(1, "bc-a").await.0, StatusCode::OK);
    assert_eq!(create(2, "bc-b").await.0, StatusCode::OK);
    let (status, body) = create(3, "bc-c").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_quota_403(&body, PROJECT, WRITES.0, WRITES.1);
    now.store(minute + 59_999, Ordering::SeqCst);
    assert_eq!(create(3, "bc-c").await.0, StatusCode::FORBIDDEN);
    assert_eq!(
        fake.instance_in(PROJECT, ZONE, "bc-c").await.0,
        StatusCode::NOT_FOUND
    );

    now.store(minute + 60_000, Ordering::SeqCst);
    // The refused requestId started nothing: it is a new create now.
    let (status, op) = create(3, "bc-c").await;
    assert_eq!(status, StatusCode::OK, "{op}");
    assert_eq!(op["operationType"], "insert");
    assert_eq!(create(4, "bc-d").await.0, StatusCode::OK);
    assert_eq!(create(5, "bc-e").await.0, StatusCode::FORBIDDEN);
    assert_eq!(fake.stats(PROJECT).await["mutatingCalls"], 7);
    assert_eq!(fake.stats(PROJECT).await["rateRefusals"], 3);
}

#[tokio::test]
async fn authentication_is_checked_before_the_write_quota() {
    let config = fake_gce::FakeGceConfig {
        required_token: Some("secret".to_owned()),
        ..fake_gce::FakeGceConfig::default()
    };
    let fake = Fake::in_process(
        fake_gce::FakeGce::new(config)
            .with_writes_per_min(1)
            .with_quota_clock(|| 29_000_000 * 60_000),
    )
    .await;
    let path = |n: u32| {
        format!(
            "/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances?requestId={}",
            rid(n)
        )
    };
    let create = async |n: u32, token: Option<&str>| {
        let body = vm(&format!("bc-{n}"));
        fake.call(Method::POST, &path(n), Some(body), token).await
    };
    let (status, body) = create(1, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(create(2, Some("wrong")).await.0, StatusCode::UNAUTHORIZED);
    // Unauthenticated calls used none of the quota.
    assert_eq!(create(3, Some("secret")).await.0, StatusCode::OK);
    let (status, body) = create(4, Some("secret")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_quota_403(&body, PROJECT, WRITES.0, WRITES.1);
    // Quota spent, authentication still answers first.
    assert_eq!(create(5, None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(fake.stats(PROJECT).await, counts(2, 1, 0, 1, 1));
}

#[tokio::test]
async fn operations_beyond_the_concurrent_quota_answer_403_until_one_is_done() {
    // With the default poll count an operation is in flight until read.
    let fake = Fake::binary(&[("BC_FAKE_GCE_CONCURRENT_OPERATIONS", "1")]);
    let (status, a) = fake.create_in(PROJECT, ZONE, &rid(1), vm("bc-a")).await;
    assert_eq!(status, StatusCode::OK, "{a}");
    let (status, body) = fake.create_in(PROJECT, ZONE, &rid(2), vm("bc-b")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let message = assert_quota_403(&body, PROJECT, CONCURRENT.0, CONCURRENT.1);
    assert!(message.contains("'Concurrent operations'"), "{message}");
    let metadata = &body["error"]["details"][0]["metadata"];
    assert_eq!(metadata["quota_limit_value"], "1");
    assert_eq!(
        fake.instance_in(PROJECT, ZONE, "bc-b").await.0,
        StatusCode::NOT_FOUND
    );
    // A retried requestId is its existing operation, not a new one.
    let (status, again) = fake.create_in(PROJECT, ZONE, &rid(1), vm("bc-a")).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["name"], a["name"]);
    // Another project has its own operations.
    let (status, other) = fake.create_in("other-p", ZONE, &rid(1), vm("bc-a")).await;
    assert_eq!(status, StatusCode::OK, "{other}");
    assert_eq!(fake.stats(PROJECT).await, counts(3, 0, 1, 1, 1));

    assert_eq!(fake.operation(&a).await["status"], "DONE");
    assert_eq!(fake.stats(PROJECT).await["operationsInFlight"], 0);
    // The refused requestId started nothing: it is a new create now.
    let (status, b) = fake.create_in(PROJECT, ZONE, &rid(2), vm("bc-b")).await;
    assert_eq!(status, StatusCode::OK, "{b}");
    let (status, body) = fake.change(PROJECT, "bc-a", "stop", &rid(3)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "stops count too: {body}");
    assert_quota_403(&body, PROJECT, CONCURRENT.0, CONCURRENT.1);
    assert_eq!(
        fake.instance_in(PROJECT, ZONE, "bc-a").await.1["status"],
        "RUNNING"
    );
    assert_eq!(fake.stats(PROJECT).await, counts(5, 0, 2, 1, 1));
}

#[tokio::test]
async fn an_operation_whose_latency_passed_frees_its_slot_unread() {
    let fake = Fake::binary(&[
        ("BC_FAKE_GCE_CONCURRENT_OPERATIONS", "1"),
        ("BC_FAKE_GCE_OPERATION_LATENCY_MS", "300"),
        ("BC_FAKE_GCE_OPERATION_POLLS", "0"),
    ]);
    let sent = Instant::now();
    let (status, a) = fake.create_in(PROJECT, ZONE, &rid(1), vm("bc-a")).await;
    assert_eq!(status, StatusCode::OK, "{a}");
    loop {
        let (status, body) = fake.create_in(PROJECT, ZONE, &rid(2), vm("bc-b")).await;
        let seen_by = sent.elapsed();
        if status == StatusCode::OK {
            assert!(
                seen_by >= Duration::from_millis(300),
                "admitted after {seen_by:?}"
            );
            break;
        }
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert!(seen_by < DEADLINE, "never admitted");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(fake.operation(&a).await["status"], "DONE");
    assert_eq!(
        fake.instance_in(PROJECT, ZONE, "bc-a").await.1["status"],
        "RUNNING"
    );
}

#[tokio::test]
async fn stats_reset_zeroes_counts_but_keeps_operations_in_flight() {
    let fake = Fake::binary(&[
        ("BC_FAKE_GCE_CONCURRENT_OPERATIONS", "2"),
        ("BC_FAKE_GCE_OPERATION_LATENCY_MS", "60000"),
        ("BC_FAKE_GCE_OPERATION_POLLS", "0"),
    ]);
    assert_eq!(
        fake.send(Method::GET, "/fake/stats", None).await,
        (StatusCode::OK, json!({ "projects": {} }))
    );
    for (n, name) in [(1, "bc-a"), (2, "bc-b"), (3, "bc-c")] {
        fake.create_in(PROJECT, ZONE, &rid(n), vm(name)).await;
    }
    fake.create_in("other-p", ZONE, &rid(1), vm("bc-a")).await;
    let (status, all) = fake.send(Method::GET, "/fake/stats", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        all,
        json!({ "projects": {
            PROJECT: counts(3, 0, 1, 2, 2),
            "other-p": counts(1, 0, 0, 1, 1),
        } })
    );
    let (status, reset) = fake.send(Method::DELETE, "/fake/stats", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        reset,
        json!({ "projects": {
            PROJECT: counts(0, 0, 0, 2, 2),
            "other-p": counts(0, 0, 0, 1, 1),
        } })
    );
    assert_eq!(fake.send(Method::GET, "/fake/stats", None).await.1, reset);
    assert_eq!(
        fake.send(Method::PUT, "/fake/stats", None).await.0,
        StatusCode::METHOD_NOT_ALLOWED
    );
}
