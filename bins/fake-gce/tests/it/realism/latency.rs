//! `BC_FAKE_GCE_OPERATION_LATENCY_MS`: operations take wall time, their VMs
//! stay in between until then, every observer sees them finish together,
//! and bad settings stop the binary.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::{DEADLINE, Fake, ZONE, counts, rid, vm};
use crate::common::{FakeGceProcess, PROJECT};

/// The VM `name` as the aggregated list shows it.
async fn listed(fake: &Fake, name: &str) -> Value {
    let (status, page) = fake.list(PROJECT, "instances", "").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page["items"][format!("zones/{ZONE}")]["instances"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|vm| vm["name"] == name)
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_long_latency_keeps_operations_running_and_vms_in_between() {
    let fake = Fake::binary(&[
        ("BC_FAKE_GCE_OPERATION_LATENCY_MS", "60000"),
        ("BC_FAKE_GCE_OPERATION_POLLS", "0"),
    ]);
    let (status, op) = fake.create_in(PROJECT, ZONE, &rid(1), vm("bc-one")).await;
    assert_eq!(status, StatusCode::OK, "{op}");
    assert_eq!(op["status"], "RUNNING", "{op}");
    for _ in 0..5 {
        let read = fake.operation(&op).await;
        assert_eq!(
            read["status"], "RUNNING",
            "however often it is read: {read}"
        );
        assert!(read.get("endTime").is_none(), "{read}");
    }
    let (_, one) = fake.instance_in(PROJECT, ZONE, "bc-one").await;
    assert_eq!(one["status"], "PROVISIONING", "{one}");
    assert_eq!(listed(&fake, "bc-one").await["status"], "PROVISIONING");
    let (status, body) = fake.change(PROJECT, "bc-one", "stop", &rid(2)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["errors"][0]["reason"], "resourceNotReady");

    let (status, delete) = fake.change(PROJECT, "bc-one", "delete", &rid(3)).await;
    assert_eq!(status, StatusCode::OK, "{delete}");
    assert_eq!(delete["status"], "RUNNING", "{delete}");
    assert_eq!(fake.operation(&delete).await["status"], "RUNNING");
    let (status, one) = fake.instance_in(PROJECT, ZONE, "bc-one").await;
    assert_eq!(status, StatusCode::OK, "not gone before its delete is done");
    assert_eq!(one["status"], "STOPPING", "{one}");
    assert_eq!(fake.stats(PROJECT).await, counts(3, 0, 0, 2, 2));
}

#[tokio::test]
async fn a_short_latency_ends_operations_on_time_without_a_read() {
    let latency = Duration::from_millis(300);
    let fake = Fake::binary(&[
        ("BC_FAKE_GCE_OPERATION_LATENCY_MS", "300"),
        ("BC_FAKE_GCE_OPERATION_POLLS", "0"),
    ]);
    let sent = Instant::now();
    let (status, op) = fake.create_in(PROJECT, ZONE, &rid(1), vm("bc-one")).await;
    assert_eq!(status, StatusCode::OK, "{op}");
    // Only the VM is read: the operation finishes on its own.
    loop {
        let (_, one) = fake.instance_in(PROJECT, ZONE, "bc-one").await;
        let seen_by = sent.elapsed();
        if one["status"] == "RUNNING" {
            assert!(seen_by >= latency, "RUNNING after {seen_by:?}");
            break;
        }
        assert_eq!(one["status"], "PROVISIONING", "{one}");
        assert!(seen_by < DEADLINE, "never RUNNING");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Every other observer agrees at once.
    let done = fake.operation(&op).await;
    assert_eq!(done["status"], "DONE", "{done}");
    assert_eq!(done["progress"], 100);
    assert!(done["endTime"].is_string(), "{done}");
    assert!(done.get("error").is_none(), "{done}");
    assert_eq!(listed(&fake, "bc-one").await["status"], "RUNNING");
    assert_eq!(fake.stats(PROJECT).await, counts(1, 0, 0, 0, 1));

    // A stop likewise, watched through the aggregated list only.
    let sent = Instant::now();
    let (status, stop) = fake.change(PROJECT, "bc-one", "stop", &rid(2)).await;
    assert_eq!(status, StatusCode::OK, "{stop}");
    loop {
        let status = listed(&fake, "bc-one").await["status"].clone();
        let seen_by = sent.elapsed();
        if status == "TERMINATED" {
            assert!(seen_by >= latency, "TERMINATED after {seen_by:?}");
            break;
        }
        assert_eq!(status, "STOPPING");
        assert!(seen_by < DEADLINE, "never TERMINATED");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(fake.operation(&stop).await["status"], "DONE");
}

#[tokio::test]
async fn the_poll_count_still_applies_on_top_of_a_latency_range() {
    let fake = Fake::binary(&[
        ("BC_FAKE_GCE_OPERATION_LATENCY_MS", "100-200"),
        ("BC_FAKE_GCE_OPERATION_POLLS", "2"),
    ]);
    let (_, op) = fake.create_in(PROJECT, ZONE, &rid(1), vm("bc-one")).await;
    let first = fake.operation(&op).await;
    assert_eq!(first["status"], "RUNNING", "one read of two: {first}");
    tokio::time::sleep(Duration::from_millis(400)).await;
    // The latency has passed, but one of the two reads is still owed.
    let (_, one) = fake.instance_in(PROJECT, ZONE, "bc-one").await;
    assert_eq!(one["status"], "PROVISIONING", "{one}");
    assert_eq!(fake.stats(PROJECT).await["operationsInFlight"], 1);
    assert_eq!(fake.operation(&op).await["status"], "DONE");
    assert_eq!(
        fake.instance_in(PROJECT, ZONE, "bc-one").await.1["status"],
        "RUNNING"
    );

    // Reads made before the latency count: the op is done once it passes.
    let sent = Instant::now();
    let (_, stop) = fake.change(PROJECT, "bc-one", "stop", &rid(2)).await;
    let mut reads = 0;
    loop {
        let read = fake.operation(&stop).await;
        reads += 1;
        if read["status"] == "DONE" {
            assert!(sent.elapsed() >= Duration::from_millis(100), "{read}");
            assert!(reads >= 2, "{reads} reads");
            break;
        }
        assert!(sent.elapsed() < DEADLINE, "never DONE");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn a_latency_of_zero_or_a_range_starts_and_zero_changes_nothing() {
    for good in ["0", "0-0", "10000-40000", "3600000"] {
        drop(FakeGceProcess::start_with(&[(
            "BC_FAKE_GCE_OPERATION_LATENCY_MS",
            good,
        )]));
    }
    let fake = Fake::binary(&[
        ("BC_FAKE_GCE_OPERATION_LATENCY_MS", "0"),
        ("BC_FAKE_GCE_OPERATION_POLLS", "0"),
    ]);
    let (_, op) = fake.create_in(PROJECT, ZONE, &rid(1), vm("bc-one")).await;
    assert_eq!(op["status"], "DONE", "{op}");
}

/// Starts the binary with `env` and answers its exit code and stderr; it
/// must exit by itself within [`DEADLINE`].
fn refused_start(env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_fake-gce"));
    command
        .env("BC_FAKE_GCE_LISTEN", "127.0.0.1:0")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().expect("spawn fake-gce");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("fake-gce started with {env:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("piped stderr")
        .read_to_string(&mut stderr)
        .expect("stderr");
    (status.code(), stderr)
}

#[test]
fn bad_latencies_and_quotas_stop_the_binary_with_a_message() {
    let cases = [
        ("BC_FAKE_GCE_OPERATION_LATENCY_MS", "abc"),
        ("BC_FAKE_GCE_OPERATION_LATENCY_MS", "40000-10000"),
        ("BC_FAKE_GCE_OPERATION_LATENCY_MS", "3600001"),
        ("BC_FAKE_GCE_OPERATION_LATENCY_MS", "10000-"),
        ("BC_FAKE_GCE_OPERATION_LATENCY_MS", "-5"),
        ("BC_FAKE_GCE_OPERATION_LATENCY_MS", "1.5"),
        ("BC_FAKE_GCE_WRITES_PER_MIN", "0"),
        ("BC_FAKE_GCE_WRITES_PER_MIN", "many"),
        ("BC_FAKE_GCE_WRITES_PER_MIN", "1000001"),
        ("BC_FAKE_GCE_CONCURRENT_OPERATIONS", "0"),
        ("BC_FAKE_GCE_CONCURRENT_OPERATIONS", "+3"),
    ];
    for (name, value) in cases {
        let (code, stderr) = refused_start(&[(name, value)]);
        assert_eq!(code, Some(1), "{name}={value}: {stderr}");
        assert!(stderr.contains(name), "{name}={value}: {stderr}");
    }
}

#[tokio::test]
async fn the_list_the_operations_and_the_stats_agree_once_operations_end() {
    let fake = Fake::binary(&[
        ("BC_FAKE_GCE_OPERATION_LATENCY_MS", "200"),
        ("BC_FAKE_GCE_OPERATION_POLLS", "0"),
    ]);
    let (_, a) = fake.create_in(PROJECT, ZONE, &rid(1), vm("bc-a")).await;
    let (_, b) = fake.create_in(PROJECT, ZONE, &rid(2), vm("bc-b")).await;
    let started = Instant::now();
    loop {
        let (status, page) = fake
            .send(
                Method::GET,
                &format!("/compute/v1/projects/{PROJECT}/aggregated/instances"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        let running = page["items"][format!("zones/{ZONE}")]["instances"]
            .as_array()
            .expect("instances")
            .iter()
            .filter(|vm| vm["status"] == "RUNNING")
            .count();
        if running == 2 {
            break;
        }
        assert!(started.elapsed() < DEADLINE, "{page}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(fake.operation(&a).await["status"], "DONE");
    assert_eq!(fake.operation(&b).await["status"], "DONE");
    assert_eq!(fake.stats(PROJECT).await["operationsInFlight"], 0);
}
