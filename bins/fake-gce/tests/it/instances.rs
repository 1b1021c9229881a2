//! The Compute Engine instances API of the real `fake-gce` binary: creates,
//! stops, starts and deletes through zone operations, `requestId`
//! idempotency, reservation counts, injected failures and the hooks.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::{FakeGceProcess, PROJECT};

const ZONE: &str = "us-central1-a";
const RID_1: &str = "00000000-0000-4000-8000-000000000001";
const RID_2: &str = "00000000-0000-4000-8000-000000000002";
const RID_3: &str = "00000000-0000-4000-8000-000000000003";
const RID_4: &str = "00000000-0000-4000-8000-000000000004";

fn zone_path(rest: &str) -> String {
    format!("/compute/v1/projects/{PROJECT}/zones/{ZONE}/{rest}")
}

/// A create body on `reservation` (or on-demand when `None`).
fn vm(name: &str, reservation: Option<&str>) -> Value {
    let affinity = match reservation {
        Some(r) => json!({
            "consumeReservationType": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": [r],
        }),
        None => json!({ "consumeReservationType": "NO_RESERVATION" }),
    };
    json!({
        "name": name,
        "machineType": format!("zones/{ZONE}/machineTypes/n2-standard-4"),
        "labels": { "bc-managed": "true", "bc-instance": format!("inst_{name}") },
        "reservationAffinity": affinity,
        "disks": [{ "boot": true, "autoDelete": true, "initializeParams": {
            "sourceImage": "projects/debian-cloud/global/images/family/debian-12",
            "diskSizeGb": "20" } }],
        "networkInterfaces": [{ "network": "global/networks/default" }],
    })
}

async fn create(fake: &FakeGceProcess, rid: &str, body: Value) -> (StatusCode, Value) {
    fake.send(
        Method::POST,
        &zone_path(&format!("instances?requestId={rid}")),
        Some(body),
    )
    .await
}

/// Reads the operation until it is `DONE`; answers it.
async fn wait(fake: &FakeGceProcess, op: &Value) -> Value {
    let name = op["name"].as_str().expect("operation name");
    for _ in 0..10 {
        let (status, op) = fake
            .send(Method::GET, &zone_path(&format!("operations/{name}")), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{op}");
        if op["status"] == "DONE" {
            return op;
        }
    }
    panic!("operation {name} never finished");
}

async fn instance(fake: &FakeGceProcess, name: &str) -> (StatusCode, Value) {
    fake.send(Method::GET, &zone_path(&format!("instances/{name}")), None)
        .await
}

async fn in_use(fake: &FakeGceProcess, reservation: &str) -> String {
    let path = FakeGceProcess::reservation_path(PROJECT, ZONE, reservation);
    let (status, body) = fake.send(Method::GET, &path, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["specificReservation"]["inUseCount"]
        .as_str()
        .expect("inUseCount")
        .to_owned()
}

async fn reservation(fake: &FakeGceProcess, name: &str, count: u64) {
    fake.put_reservation(
        ZONE,
        name,
        json!({ "count": count, "machineType": "n2-standard-4" }),
    )
    .await;
}

#[tokio::test]
async fn create_runs_then_finishes_and_the_vm_runs_with_its_labels() {
    let fake = FakeGceProcess::start_with(&[("BC_FAKE_GCE_OPERATION_POLLS", "2")]);
    reservation(&fake, "r1", 2).await;
    let (status, op) = create(&fake, RID_1, vm("bc-one", Some("r1"))).await;
    assert_eq!(status, StatusCode::OK, "{op}");
    assert_eq!(op["kind"], "compute#operation");
    assert_eq!(op["operationType"], "insert");
    assert_eq!(op["status"], "RUNNING");
    assert!(
        op["targetLink"]
            .as_str()
            .expect("targetLink")
            .ends_with("/instances/bc-one")
    );
    let op_path = zone_path(&format!(
        "operations/{}",
        op["name"].as_str().expect("name")
    ));
    let (_, first) = fake.send(Method::GET, &op_path, None).await;
    assert_eq!(first["status"], "RUNNING", "{first}");
    let (_, vm_now) = instance(&fake, "bc-one").await;
    assert_eq!(vm_now["status"], "PROVISIONING");
    let (_, second) = fake.send(Method::GET, &op_path, None).await;
    assert_eq!(second["status"], "DONE", "{second}");
    assert_eq!(second["progress"], 100);
    assert!(second.get("error").is_none(), "{second}");
    assert!(second["endTime"].is_string());

    let (status, vm) = instance(&fake, "bc-one").await;
    assert_eq!(status, StatusCode::OK, "{vm}");
    assert_eq!(vm["kind"], "compute#instance");
    assert_eq!(vm["status"], "RUNNING");
    assert_eq!(vm["labels"]["bc-managed"], "true");
    assert_eq!(vm["labels"]["bc-instance"], "inst_bc-one");
    assert_eq!(
        vm["zone"],
        format!("https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{ZONE}")
    );
    assert!(
        vm["machineType"]
            .as_str()
            .expect("machineType")
            .ends_with("/machineTypes/n2-standard-4")
    );
    assert_eq!(vm["reservationAffinity"]["values"], json!(["r1"]));

    let (status, body) = instance(&fake, "bc-none").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["errors"][0]["reason"], "notFound");
}

#[tokio::test]
async fn in_use_count_follows_create_stop_start_and_delete() {
    let fake = FakeGceProcess::start();
    reservation(&fake, "r1", 2).await;
    let (_, op) = create(&fake, RID_1, vm("bc-one", Some("r1"))).await;
    wait(&fake, &op).await;
    assert_eq!(in_use(&fake, "r1").await, "1");

    let stop = zone_path(&format!("instances/bc-one/stop?requestId={RID_2}"));
    let (status, op) = fake.send(Method::POST, &stop, None).await;
    assert_eq!(status, StatusCode::OK, "{op}");
    assert_eq!(op["operationType"], "stop");
    wait(&fake, &op).await;
    assert_eq!(instance(&fake, "bc-one").await.1["status"], "TERMINATED");
    assert_eq!(in_use(&fake, "r1").await, "0");

    let start = zone_path(&format!("instances/bc-one/start?requestId={RID_3}"));
    let (_, op) = fake.send(Method::POST, &start, None).await;
    wait(&fake, &op).await;
    assert_eq!(instance(&fake, "bc-one").await.1["status"], "RUNNING");
    assert_eq!(in_use(&fake, "r1").await, "1");

    let delete = zone_path(&format!("instances/bc-one?requestId={RID_4}"));
    let (_, op) = fake.send(Method::DELETE, &delete, None).await;
    assert_eq!(op["operationType"], "delete");
    wait(&fake, &op).await;
    assert_eq!(instance(&fake, "bc-one").await.0, StatusCode::NOT_FOUND);
    assert_eq!(in_use(&fake, "r1").await, "0");
}

#[tokio::test]
async fn a_request_id_repeated_answers_the_same_operation_and_a_name_taken_is_409() {
    let fake = FakeGceProcess::start();
    reservation(&fake, "r1", 3).await;
    let (_, first) = create(&fake, RID_1, vm("bc-one", Some("r1"))).await;
    let (status, again) = create(&fake, RID_1, vm("bc-one", Some("r1"))).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["name"], first["name"]);
    assert_eq!(again["id"], first["id"]);
    wait(&fake, &first).await;
    let (_, after) = create(&fake, RID_1, vm("bc-one", Some("r1"))).await;
    assert_eq!(after["name"], first["name"]);
    assert_eq!(after["status"], "DONE");
    assert_eq!(in_use(&fake, "r1").await, "1");

    let list = format!("/compute/v1/projects/{PROJECT}/aggregated/instances");
    let (_, page) = fake.send(Method::GET, &list, None).await;
    assert_eq!(
        page["items"][format!("zones/{ZONE}")]["instances"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );

    let (status, body) = create(&fake, RID_2, vm("bc-one", Some("r1"))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], 409);
    assert_eq!(body["error"]["errors"][0]["reason"], "alreadyExists");
    assert_eq!(in_use(&fake, "r1").await, "1");
}

#[tokio::test]
async fn a_full_or_missing_reservation_fails_the_operation() {
    let fake = FakeGceProcess::start();
    reservation(&fake, "r1", 1).await;
    let (_, op) = create(&fake, RID_1, vm("bc-one", Some("r1"))).await;
    assert!(wait(&fake, &op).await.get("error").is_none());
    let (status, op) = create(&fake, RID_2, vm("bc-two", Some("r1"))).await;
    assert_eq!(status, StatusCode::OK, "{op}");
    let done = wait(&fake, &op).await;
    assert_eq!(
        done["error"]["errors"][0]["code"], "CONDITION_NOT_MET",
        "{done}"
    );
    assert!(done["httpErrorStatusCode"].is_u64());
    assert_eq!(instance(&fake, "bc-two").await.0, StatusCode::NOT_FOUND);
    assert_eq!(in_use(&fake, "r1").await, "1");

    let (_, op) = create(&fake, RID_3, vm("bc-three", Some("nope"))).await;
    let done = wait(&fake, &op).await;
    assert_eq!(
        done["error"]["errors"][0]["code"], "RESOURCE_NOT_FOUND",
        "{done}"
    );
}

#[tokio::test]
async fn injected_failures_fail_the_next_creates_only() {
    let fake = FakeGceProcess::start();
    let (status, body) = fake
        .send(
            Method::POST,
            "/fake/fail-instances",
            Some(json!({ "count": 1, "code": "ZONE_RESOURCE_POOL_EXHAUSTED" })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, op) = create(&fake, RID_1, vm("bc-one", None)).await;
    let done = wait(&fake, &op).await;
    assert_eq!(
        done["error"]["errors"][0]["code"],
        "ZONE_RESOURCE_POOL_EXHAUSTED"
    );
    assert_eq!(instance(&fake, "bc-one").await.0, StatusCode::NOT_FOUND);
    let (_, op) = create(&fake, RID_2, vm("bc-one", None)).await;
    assert!(wait(&fake, &op).await.get("error").is_none());
    assert_eq!(instance(&fake, "bc-one").await.1["status"], "RUNNING");

    let (status, _) = fake
        .send(
            Method::POST,
            "/fake/fail-instances",
            Some(json!({ "count": -1 })),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn outside_changes_show_in_the_vm_and_the_reservation() {
    let fake = FakeGceProcess::start();
    reservation(&fake, "r1", 1).await;
    let (_, op) = create(&fake, RID_1, vm("bc-one", Some("r1"))).await;
    wait(&fake, &op).await;
    let (status, body) = fake
        .send(
            Method::POST,
            &format!("/fake/instances/{ZONE}/bc-one/stop"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(instance(&fake, "bc-one").await.1["status"], "TERMINATED");
    assert_eq!(in_use(&fake, "r1").await, "0");
    fake.send(
        Method::POST,
        &format!("/fake/instances/{ZONE}/bc-one/start"),
        None,
    )
    .await;
    assert_eq!(instance(&fake, "bc-one").await.1["status"], "RUNNING");
    assert_eq!(in_use(&fake, "r1").await, "1");
    let (status, _) = fake
        .send(
            Method::POST,
            &format!("/fake/instances/{ZONE}/bc-one/delete"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(instance(&fake, "bc-one").await.0, StatusCode::NOT_FOUND);
    assert_eq!(in_use(&fake, "r1").await, "0");
    let (status, _) = fake
        .send(
            Method::POST,
            &format!("/fake/instances/{ZONE}/bc-one/stop"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

fn listed(page: &Value) -> Vec<String> {
    page["items"]
        .as_object()
        .expect("items")
        .values()
        .flat_map(|s| s["instances"].as_array().cloned().unwrap_or_default())
        .map(|vm| vm["name"].as_str().expect("name").to_owned())
        .collect()
}

#[tokio::test]
async fn the_aggregated_list_filters_by_label_and_pages() {
    let fake = FakeGceProcess::start();
    let rids = [RID_1, RID_2, RID_3];
    for (rid, name) in rids.iter().zip(["bc-a", "bc-b", "bc-c"]) {
        let (_, op) = create(&fake, rid, vm(name, None)).await;
        wait(&fake, &op).await;
    }
    let mut other = vm("other", None);
    other["labels"] = json!({ "team": "x" });
    let (_, op) = create(&fake, RID_4, other).await;
    wait(&fake, &op).await;

    let list = format!(
        "/compute/v1/projects/{PROJECT}/aggregated/instances\
         ?filter=labels.bc-managed%3Dtrue&maxResults=2"
    );
    let (status, first) = fake.send(Method::GET, &list, None).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["kind"], "compute#instanceAggregatedList");
    assert_eq!(listed(&first), ["bc-a", "bc-b"]);
    let token = first["nextPageToken"].as_str().expect("nextPageToken");
    let (_, second) = fake
        .send(Method::GET, &format!("{list}&pageToken={token}"), None)
        .await;
    assert_eq!(listed(&second), ["bc-c"]);
    assert!(second.get("nextPageToken").is_none(), "{second}");

    let all = format!("/compute/v1/projects/{PROJECT}/aggregated/instances");
    assert_eq!(
        fake.send(Method::GET, &all, None).await.1["items"][format!("zones/{ZONE}")]["instances"]
            .as_array()
            .map(Vec::len),
        Some(4)
    );
}

#[tokio::test]
async fn mutating_requests_are_listed_with_their_request_ids() {
    let fake = FakeGceProcess::start();
    let (_, op) = create(&fake, RID_1, vm("bc-one", None)).await;
    wait(&fake, &op).await;
    create(&fake, RID_1, vm("bc-one", None)).await;
    let stop = zone_path(&format!("instances/bc-one/stop?requestId={RID_2}"));
    fake.send(Method::POST, &stop, None).await;
    let (status, body) = fake.send(Method::GET, "/fake/requests", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let seen: Vec<(String, String)> = body["requests"]
        .as_array()
        .expect("requests")
        .iter()
        .map(|r| {
            (
                r["method"].as_str().expect("method").to_owned(),
                r["requestId"].as_str().expect("requestId").to_owned(),
            )
        })
        .collect();
    let expected = [("POST", RID_1), ("POST", RID_1), ("POST", RID_2)];
    assert_eq!(seen, expected.map(|(m, r)| (m.to_owned(), r.to_owned())));
    assert_eq!(
        body["requests"][2]["path"],
        zone_path("instances/bc-one/stop")
    );
}

#[tokio::test]
async fn instance_calls_need_an_issued_token_when_auth_is_required() {
    let fake = FakeGceProcess::start_with(&[("BC_FAKE_GCE_REQUIRE_AUTH", "1")]);
    let (status, body) = create(&fake, RID_1, vm("bc-one", None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["error"]["status"], "UNAUTHENTICATED");
    assert_eq!(instance(&fake, "bc-one").await.0, StatusCode::UNAUTHORIZED);

    let token = fake
        .http
        .get(fake.url("/computeMetadata/v1/instance/service-accounts/default/token"))
        .header("Metadata-Flavor", "Google")
        .send()
        .await
        .expect("metadata token")
        .json::<Value>()
        .await
        .expect("token JSON")["access_token"]
        .as_str()
        .expect("access_token")
        .to_owned();
    let response = fake
        .http
        .post(fake.url(&zone_path(&format!("instances?requestId={RID_1}"))))
        .bearer_auth(&token)
        .json(&vm("bc-one", None))
        .send()
        .await
        .expect("create");
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_read_only_token_reads_vms_and_may_not_change_them() {
    let fake = FakeGceProcess::start_with(&[("BC_FAKE_GCE_REQUIRE_AUTH", "1")]);
    crate::auth::register(&fake, crate::auth::EMAIL, crate::auth::key()).await;
    let token = crate::auth::access_token(&fake).await;
    let response = fake
        .http
        .post(fake.url(&zone_path(&format!("instances?requestId={RID_1}"))))
        .bearer_auth(&token)
        .json(&vm("bc-one", None))
        .send()
        .await
        .expect("create");
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let challenge = response
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(
        challenge.contains("error=\"insufficient_scope\""),
        "{challenge}"
    );
    let body: Value = response.json().await.expect("JSON");
    assert_eq!(body["error"]["code"], 403);
    assert_eq!(body["error"]["status"], "PERMISSION_DENIED");
    assert_eq!(
        body["error"]["errors"][0]["reason"],
        "insufficientPermissions"
    );
    assert_eq!(
        body["error"]["details"][0]["reason"],
        "ACCESS_TOKEN_SCOPE_INSUFFICIENT"
    );
    let read = fake
        .http
        .get(fake.url(&zone_path("instances/bc-one")))
        .bearer_auth(&token)
        .send()
        .await
        .expect("get");
    assert_eq!(read.status(), StatusCode::NOT_FOUND, "reads are allowed");

    // The metadata server narrows its token to the scopes asked for.
    let metadata = "/computeMetadata/v1/instance/service-accounts/default/token";
    let readonly = fake
        .http
        .get(fake.url(&format!(
            "{metadata}?scopes=https://www.googleapis.com/auth/compute.readonly"
        )))
        .header("Metadata-Flavor", "Google")
        .send()
        .await
        .expect("metadata token")
        .json::<Value>()
        .await
        .expect("token JSON")["access_token"]
        .as_str()
        .expect("access_token")
        .to_owned();
    let response = fake
        .http
        .delete(fake.url(&zone_path(&format!("instances/bc-one?requestId={RID_2}"))))
        .bearer_auth(&readonly)
        .send()
        .await
        .expect("delete");
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let (status, scopes) = fake.send(Method::GET, "/fake/token-scopes", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        scopes,
        json!({ "scopes": { "https://www.googleapis.com/auth/compute.readonly": 2 } })
    );
}

#[tokio::test]
async fn lost_answers_delays_and_read_failures_reach_the_instances_api() {
    let fake = FakeGceProcess::start();
    let (status, body) = fake
        .send(
            Method::POST,
            "/fake/fail-mutations",
            Some(json!({ "count": 1, "status": 502, "retryAfterS": 1 })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({ "count": 1, "status": 502, "retryAfterS": 1 }));
    let (status, body) = create(&fake, RID_1, vm("bc-one", None)).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    // It was applied: the same requestId answers its operation.
    let (status, op) = create(&fake, RID_1, vm("bc-one", None)).await;
    assert_eq!(status, StatusCode::OK, "{op}");
    wait(&fake, &op).await;
    assert_eq!(instance(&fake, "bc-one").await.1["status"], "RUNNING");

    fake.fail_next(1).await;
    assert_eq!(
        instance(&fake, "bc-one").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(instance(&fake, "bc-one").await.0, StatusCode::OK);
    assert_eq!(fake.calls().await, json!({}), "not counted as listings");

    fake.set_delay(300).await;
    let started = std::time::Instant::now();
    assert_eq!(instance(&fake, "bc-one").await.0, StatusCode::OK);
    assert!(started.elapsed() >= std::time::Duration::from_millis(300));
    fake.set_delay(0).await;

    for bad in [json!({ "count": -1 }), json!({ "count": 1, "code": "X" })] {
        let (status, _) = fake
            .send(Method::POST, "/fake/fail-mutations", Some(bad))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
    }
}
