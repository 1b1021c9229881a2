//! The state file (`BC_FAKE_GCE_STATE`): the real binary stopped (SIGTERM
//! or SIGKILL) and started again on the same file has the same world:
//! reservations with their ids and counts, VMs, operations (one in flight
//! at the stop finishes after the start), the `requestId`s seen, the running
//! intervals and the service accounts' keys; the file is mode 0600 and a
//! file it cannot read stops the start.

use std::path::Path;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::auth::{key, refused_start, register};
use crate::common::{FakeGceProcess, PROJECT};

const ZONE: &str = "us-central1-a";
const RID_1: &str = "00000000-0000-4000-8000-00000000a001";
const RID_2: &str = "00000000-0000-4000-8000-00000000a002";
const RID_3: &str = "00000000-0000-4000-8000-00000000a003";
const EMAIL: &str = "kept@my-project.iam.gserviceaccount.com";

fn zone_path(rest: &str) -> String {
    format!("/compute/v1/projects/{PROJECT}/zones/{ZONE}/{rest}")
}

fn start(state: &Path, latency_ms: &str) -> FakeGceProcess {
    FakeGceProcess::start_with(&[
        ("BC_FAKE_GCE_STATE", state.to_str().expect("utf-8 path")),
        ("BC_FAKE_GCE_OPERATION_LATENCY_MS", latency_ms),
    ])
}

async fn create(fake: &FakeGceProcess, rid: &str, name: &str) -> Value {
    let body = json!({
        "name": name,
        "machineType": format!("zones/{ZONE}/machineTypes/n2-standard-4"),
        "labels": { "bc-managed": "true" },
        "reservationAffinity": {
            "consumeReservationType": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": ["kept"],
        },
    });
    let path = zone_path(&format!("instances?requestId={rid}"));
    let (status, op) = fake.send(Method::POST, &path, Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{op}");
    op
}

async fn get(fake: &FakeGceProcess, path: &str) -> Value {
    let (status, body) = fake.send(Method::GET, path, None).await;
    assert_eq!(status, StatusCode::OK, "{path}: {body}");
    body
}

/// Reads the operation until it is `DONE` (its latency passed); answers it.
async fn done(fake: &FakeGceProcess, op: &Value) -> Value {
    let path = zone_path(&format!(
        "operations/{}",
        op["name"].as_str().expect("name")
    ));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let op = get(fake, &path).await;
        if op["status"] == "DONE" {
            return op;
        }
        assert!(std::time::Instant::now() < deadline, "never done: {op}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

fn reservation_path() -> String {
    FakeGceProcess::reservation_path(PROJECT, ZONE, "kept")
}

#[tokio::test]
async fn a_restart_on_the_state_file_keeps_the_world() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("fake-gce.json");
    let fake = start(&state, "300");
    fake.put_reservation(
        ZONE,
        "kept",
        json!({ "count": 3, "machineType": "n2-standard-4" }),
    )
    .await;
    register(&fake, EMAIL, key()).await;
    let first = create(&fake, RID_1, "vm-1").await;
    let first = done(&fake, &first).await;
    // The second VM's create is still in flight at the stop.
    let _ = create(&fake, RID_2, "vm-2").await;
    let reservation = get(&fake, &reservation_path()).await;
    let vm_1 = get(&fake, &zone_path("instances/vm-1")).await;
    assert_eq!(vm_1["status"], "RUNNING");
    let runs = get(&fake, "/fake/vm-runs").await;
    assert_eq!(reservation["specificReservation"]["inUseCount"], "2");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&state)
            .expect("the file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let status = fake.stop_with("TERM");
    assert!(status.success(), "{status:?}");
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["fake-gce.json"], "no temporary file left");

    let fake = start(&state, "300");
    assert_eq!(get(&fake, &reservation_path()).await, reservation);
    assert_eq!(get(&fake, &zone_path("instances/vm-1")).await, vm_1);
    assert_eq!(get(&fake, "/fake/vm-runs").await, runs);
    assert_eq!(
        get(&fake, &format!("/fake/service-accounts/{EMAIL}")).await["publicKeyPem"],
        key().public_pem
    );
    // The requestId seen before answers its operation and makes nothing.
    let again = create(&fake, RID_1, "vm-1").await;
    assert_eq!(again, first);
    // The create in flight at the stop finishes after the start.
    let second = create(&fake, RID_2, "vm-2").await;
    let second = done(&fake, &second).await;
    assert!(second.get("error").is_none(), "{second}");
    assert_eq!(
        get(&fake, &zone_path("instances/vm-2")).await["status"],
        "RUNNING"
    );
    let created = get(&fake, "/fake/vm-runs").await["created"].clone();
    assert_eq!(created, json!({ "vm-1": 1, "vm-2": 1 }));

    // Killed outright right after a change was answered: the change is
    // kept (written before the answer left).
    let path = zone_path(&format!("instances/vm-1/stop?requestId={RID_3}"));
    let (status, stop) = fake.send(Method::POST, &path, None).await;
    assert_eq!(status, StatusCode::OK, "{stop}");
    let killed = fake.stop_with("KILL");
    assert!(!killed.success());
    let fake = start(&state, "0");
    let stop = done(&fake, &stop).await;
    assert!(stop.get("error").is_none(), "{stop}");
    assert_eq!(
        get(&fake, &zone_path("instances/vm-1")).await["status"],
        "TERMINATED"
    );
    let reservation = get(&fake, &reservation_path()).await;
    assert_eq!(reservation["specificReservation"]["inUseCount"], "1");
}

#[tokio::test]
async fn without_a_file_it_starts_empty_and_makes_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("new.json");
    let fake = start(&state, "0");
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(&state).expect("written at start"))
            .expect("JSON");
    assert_eq!(written["format"], fake_gce::STATE_FORMAT);
    assert_eq!(written["version"], fake_gce::STATE_VERSION);
    let (status, _) = fake.send(Method::GET, &reservation_path(), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[test]
fn a_state_file_it_cannot_read_stops_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("broken.json");
    for broken in [
        "{ not json",
        r#"{ "format": "something-else", "version": 1 }"#,
    ] {
        std::fs::write(&state, broken).expect("write");
        let stderr = refused_start(&[("BC_FAKE_GCE_STATE", state.to_str().expect("path"))]);
        assert!(stderr.contains("BC_FAKE_GCE_STATE"), "{stderr}");
        assert!(stderr.contains("move it away"), "{stderr}");
        assert_eq!(std::fs::read_to_string(&state).expect("kept"), broken);
    }
    let missing_dir = dir.path().join("no-such-dir").join("state.json");
    let stderr = refused_start(&[("BC_FAKE_GCE_STATE", missing_dir.to_str().expect("path"))]);
    assert!(stderr.contains("cannot write it"), "{stderr}");
}
