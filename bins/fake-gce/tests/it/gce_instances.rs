//! The `providers` GCE adapter's managed-instance calls against the real
//! `fake-gce` binary: creates on a reservation followed to `DONE`,
//! `requestId` idempotency, lost answers retried inside the call, the
//! provider's refusals, paged listings, tokens per scope and the policy.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use providers::auth::{ResolvedSecret, SecretKind, fingerprint};
use providers::gce::{GceConfig, GceProvider, GceProviderOptions};
use providers::{
    AccountOwner, InstanceProvider, OperationStatus, ProviderAccess, ProviderError, ProviderPolicy,
    ReservationProvider, VmOperation, VmSpec, VmStatus,
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::auth::{EMAIL, access_token, key, register};
use crate::common::{FakeGceProcess, PROJECT};

const ZONE: &str = "us-central1-a";
const FLAVOR: &str = "n2-standard-4";
const RID_1: &str = "4b0c7a5e-1f2d-4c3b-9a8e-000000000001";
const RID_2: &str = "4b0c7a5e-1f2d-4c3b-9a8e-000000000002";
const RID_3: &str = "4b0c7a5e-1f2d-4c3b-9a8e-000000000003";
const RID_4: &str = "4b0c7a5e-1f2d-4c3b-9a8e-000000000004";
const READONLY: &str = "https://www.googleapis.com/auth/compute.readonly";
const COMPUTE: &str = "https://www.googleapis.com/auth/compute";

fn fast() -> GceProviderOptions {
    GceProviderOptions {
        retry_delay: Duration::from_millis(10),
        ..GceProviderOptions::default()
    }
}

fn policy(vars: &[(&str, &str)]) -> Arc<ProviderPolicy> {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let lookup = |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    Arc::new(ProviderPolicy::from_lookup(lookup).expect("policy"))
}

fn provider_as(
    owner: AccountOwner,
    policy: Arc<ProviderPolicy>,
    endpoint: &str,
    credentials: &str,
    options: GceProviderOptions,
) -> GceProvider {
    let config = GceConfig::from_json(
        &json!({ "project": PROJECT, "endpoint": endpoint, "credentials": credentials }),
    )
    .expect("valid config");
    GceProvider::new(config, options, ProviderAccess::new(owner, policy)).expect("provider")
}

/// A root account without credentials on `fake`.
fn provider(fake: &FakeGceProcess) -> GceProvider {
    provider_as(
        AccountOwner::Root,
        Arc::default(),
        &fake.base,
        "none",
        fast(),
    )
}

/// A managed VM's create request, on `reservation` or on-demand.
fn spec(name: &str, reservation: Option<&str>) -> VmSpec {
    VmSpec {
        name: name.into(),
        zone: ZONE.into(),
        machine_type: FLAVOR.into(),
        labels: BTreeMap::from([
            ("bc-managed".into(), "true".into()),
            ("bc-instance".into(), format!("inst_{name}")),
        ]),
        reservation: reservation.map(str::to_owned),
        image: "projects/debian-cloud/global/images/family/debian-12".into(),
        disk_gb: 20,
        network: "global/networks/default".into(),
        subnetwork: None,
        service_account: Some("vm@my-project.iam.gserviceaccount.com".into()),
    }
}

async fn reservation(fake: &FakeGceProcess, name: &str, count: u64) {
    fake.put_reservation(ZONE, name, json!({ "count": count, "machineType": FLAVOR }))
        .await;
}

async fn in_use(fake: &FakeGceProcess, name: &str) -> String {
    let path = FakeGceProcess::reservation_path(PROJECT, ZONE, name);
    let (status, body) = fake.send(Method::GET, &path, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["specificReservation"]["inUseCount"]
        .as_str()
        .expect("inUseCount")
        .to_owned()
}

/// `GET /fake/requests`: `(method, requestId)` of every mutating call.
async fn requests(fake: &FakeGceProcess) -> Vec<(String, String)> {
    let (status, body) = fake.send(Method::GET, "/fake/requests", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["requests"]
        .as_array()
        .expect("requests")
        .iter()
        .map(|r| {
            (
                r["method"].as_str().expect("method").to_owned(),
                r["requestId"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

async fn post(fake: &FakeGceProcess, path: &str, body: Value) {
    let (status, answer) = fake.send(Method::POST, path, Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{path}: {answer}");
}

/// Polls the operation until it is `DONE` (at most 10 reads).
async fn wait(p: &GceProvider, op: &VmOperation) -> VmOperation {
    for _ in 0..10 {
        let read = p
            .get_operation(&op.zone, &op.name)
            .await
            .expect("operation");
        assert_eq!(read.name, op.name);
        if read.status == OperationStatus::Done {
            return read;
        }
    }
    panic!("operation {} never finished", op.name);
}

async fn vm_status(p: &GceProvider, name: &str) -> Option<String> {
    p.get_vm(ZONE, name)
        .await
        .expect("get")
        .map(|vm| vm.status.as_str().to_owned())
}

#[tokio::test]
async fn a_create_on_a_reservation_is_followed_to_done_and_runs() {
    let fake = FakeGceProcess::start_with(&[("BC_FAKE_GCE_OPERATION_POLLS", "2")]);
    reservation(&fake, "res-a", 2).await;
    let p = provider(&fake);
    let op = p.create_vm(&spec("bc-one", Some("res-a")), RID_1).await;
    let op = op.expect("create");
    assert_eq!(op.status, OperationStatus::Running);
    assert_eq!(op.zone, ZONE);
    assert_eq!(
        vm_status(&p, "bc-one").await.as_deref(),
        Some("PROVISIONING")
    );

    let done = wait(&p, &op).await;
    assert!(done.succeeded(), "{done:?}");
    assert!(done.error_codes.is_empty() && done.error_messages.is_empty());
    let vm = p
        .get_vm(ZONE, "bc-one")
        .await
        .expect("get")
        .expect("the VM");
    assert_eq!(vm.name, "bc-one");
    assert_eq!(vm.zone, ZONE);
    assert_eq!(vm.status, VmStatus::Running);
    assert_eq!(vm.labels["bc-instance"], "inst_bc-one");
    assert_eq!(in_use(&fake, "res-a").await, "1");
    assert_eq!(p.get_vm(ZONE, "bc-none").await, Ok(None));
}

#[tokio::test]
async fn the_same_request_id_makes_one_vm_and_a_taken_name_is_already_exists() {
    let fake = FakeGceProcess::start();
    reservation(&fake, "res-a", 3).await;
    let p = provider(&fake);
    let first = p.create_vm(&spec("bc-one", Some("res-a")), RID_1).await;
    let again = p.create_vm(&spec("bc-one", Some("res-a")), RID_1).await;
    let (first, again) = (first.expect("create"), again.expect("create again"));
    assert_eq!(again.name, first.name, "the same operation");
    assert!(wait(&p, &first).await.succeeded());
    assert_eq!(
        requests(&fake).await,
        [("POST".into(), RID_1.into()), ("POST".into(), RID_1.into())]
    );
    let vms = p.list_managed_vms().await.expect("listing");
    assert_eq!(vms.len(), 1, "{vms:?}");
    assert_eq!(in_use(&fake, "res-a").await, "1");

    let taken = p.create_vm(&spec("bc-one", Some("res-a")), RID_2).await;
    assert_eq!(taken, Err(ProviderError::AlreadyExists));
    assert!(!ProviderError::AlreadyExists.is_retryable());
    assert_eq!(in_use(&fake, "res-a").await, "1");
}

#[tokio::test]
async fn a_full_reservation_or_another_machine_type_ends_in_condition_not_met() {
    let fake = FakeGceProcess::start();
    reservation(&fake, "res-a", 1).await;
    let p = provider(&fake);
    let op = p.create_vm(&spec("bc-one", Some("res-a")), RID_1).await;
    assert!(wait(&p, &op.expect("create")).await.succeeded());

    let op = p.create_vm(&spec("bc-two", Some("res-a")), RID_2).await;
    let done = wait(&p, &op.expect("create")).await;
    assert_eq!(done.error_codes, ["CONDITION_NOT_MET"]);
    assert_eq!(done.error_messages.len(), 1);
    assert!(!done.succeeded());
    assert_eq!(p.get_vm(ZONE, "bc-two").await, Ok(None));

    reservation(&fake, "res-b", 4).await;
    let mut bigger = spec("bc-three", Some("res-b"));
    bigger.machine_type = "n2-standard-8".into();
    let done = wait(&p, &p.create_vm(&bigger, RID_3).await.expect("create")).await;
    assert_eq!(done.error_codes, ["CONDITION_NOT_MET"]);
    assert!(done.error_messages[0].contains("n2-standard-8"), "{done:?}");
    assert_eq!(in_use(&fake, "res-b").await, "0");

    post(&fake, "/fake/fail-instances", json!({ "count": 1 })).await;
    let done = wait(
        &p,
        &p.create_vm(&spec("bc-four", None), RID_4)
            .await
            .expect("create"),
    )
    .await;
    assert_eq!(done.error_codes, ["ZONE_RESOURCE_POOL_EXHAUSTED"]);
}

#[tokio::test]
async fn stop_start_and_delete_round_trip() {
    let fake = FakeGceProcess::start();
    reservation(&fake, "res-a", 1).await;
    let p = provider(&fake);
    let op = p.create_vm(&spec("bc-one", Some("res-a")), RID_1).await;
    assert!(wait(&p, &op.expect("create")).await.succeeded());

    let stop = p.stop_vm(ZONE, "bc-one", RID_2).await.expect("stop");
    assert!(wait(&p, &stop).await.succeeded());
    assert_eq!(vm_status(&p, "bc-one").await.as_deref(), Some("TERMINATED"));
    assert_eq!(in_use(&fake, "res-a").await, "0");

    let start = p.start_vm(ZONE, "bc-one", RID_3).await.expect("start");
    assert!(wait(&p, &start).await.succeeded());
    assert_eq!(vm_status(&p, "bc-one").await.as_deref(), Some("RUNNING"));
    assert_eq!(in_use(&fake, "res-a").await, "1");

    let delete = p.delete_vm(ZONE, "bc-one", RID_4).await.expect("delete");
    assert!(wait(&p, &delete).await.succeeded());
    assert_eq!(vm_status(&p, "bc-one").await, None);
    assert_eq!(in_use(&fake, "res-a").await, "0");

    let rid = "4b0c7a5e-1f2d-4c3b-9a8e-000000000005";
    assert_eq!(
        p.stop_vm(ZONE, "bc-one", rid).await,
        Err(ProviderError::NotFound)
    );
    assert_eq!(
        p.delete_vm(ZONE, "bc-one", rid).await,
        Err(ProviderError::NotFound)
    );
    assert_eq!(
        p.get_operation(ZONE, "operation-404").await,
        Err(ProviderError::NotFound)
    );
}

#[tokio::test]
async fn the_managed_vms_are_listed_across_pages() {
    let fake = FakeGceProcess::start();
    let p = provider_as(
        AccountOwner::Root,
        Arc::default(),
        &fake.base,
        "none",
        GceProviderOptions {
            page_size: Some(2),
            ..fast()
        },
    );
    let names = ["bc-a", "bc-b", "bc-c", "bc-d", "bc-e"];
    for (i, name) in names.iter().enumerate() {
        let rid = format!("4b0c7a5e-1f2d-4c3b-9a8e-1000000000{i:02}");
        let op = p.create_vm(&spec(name, None), &rid).await.expect("create");
        assert!(wait(&p, &op).await.succeeded());
    }
    let mut other = spec("other", None);
    other.labels = BTreeMap::from([("team".into(), "x".into())]);
    let op = p.create_vm(&other, RID_1).await.expect("create");
    wait(&p, &op).await;

    let mut listed: Vec<String> = p
        .list_managed_vms()
        .await
        .expect("listing")
        .into_iter()
        .map(|vm| {
            assert_eq!(vm.zone, ZONE);
            assert_eq!(vm.status, VmStatus::Running);
            vm.name
        })
        .collect();
    listed.sort();
    assert_eq!(listed, names);
}

#[tokio::test]
async fn a_lost_answer_is_retried_inside_the_call_and_makes_one_vm() {
    let fake = FakeGceProcess::start();
    let p = provider(&fake);
    // Applied, then answered 503: the retry with the same requestId gets
    // the operation the first one started.
    post(&fake, "/fake/fail-mutations", json!({ "count": 1 })).await;
    let op = p
        .create_vm(&spec("bc-one", None), RID_1)
        .await
        .expect("create");
    assert_eq!(
        requests(&fake).await,
        [("POST".into(), RID_1.into()), ("POST".into(), RID_1.into())]
    );
    assert!(wait(&p, &op).await.succeeded());
    assert_eq!(p.list_managed_vms().await.expect("listing").len(), 1);

    // More lost answers than retries: a retryable error, and the same step
    // sent again later answers the same operation.
    post(&fake, "/fake/fail-mutations", json!({ "count": 4 })).await;
    let err = p
        .stop_vm(ZONE, "bc-one", RID_2)
        .await
        .expect_err("all lost");
    assert_eq!(err, ProviderError::Status { status: 503 });
    assert!(err.is_retryable());
    let stop = p.stop_vm(ZONE, "bc-one", RID_2).await.expect("stop again");
    assert!(wait(&p, &stop).await.succeeded());
    assert_eq!(vm_status(&p, "bc-one").await.as_deref(), Some("TERMINATED"));
    let stops = requests(&fake)
        .await
        .into_iter()
        .filter(|(_, r)| r == RID_2);
    assert_eq!(stops.count(), 5);

    // Reads fail as /fake/fail says, and are retried too.
    fake.fail_next(3).await;
    assert_eq!(vm_status(&p, "bc-one").await.as_deref(), Some("TERMINATED"));
    fake.fail_next(4).await;
    assert_eq!(
        p.get_vm(ZONE, "bc-one").await,
        Err(ProviderError::Status { status: 503 })
    );
}

/// A service-account key for [`EMAIL`] that exchanges at `fake`'s `/token`,
/// as a tenant's secret holds it.
async fn secret(fake: &FakeGceProcess) -> ResolvedSecret {
    register(fake, EMAIL, key()).await;
    let value = json!({
        "type": "service_account",
        "project_id": PROJECT,
        "private_key_id": "k1",
        "private_key": key().private_pem,
        "client_email": EMAIL,
        "token_uri": fake.url("/token"),
    })
    .to_string();
    ResolvedSecret {
        name: "gce-key".into(),
        kind: SecretKind::ServiceAccount,
        fingerprint: fingerprint(&value),
        value,
    }
}

async fn scopes(fake: &FakeGceProcess) -> Value {
    let (status, body) = fake.send(Method::GET, "/fake/token-scopes", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["scopes"].clone()
}

#[tokio::test]
async fn vm_changes_use_a_compute_token_and_listings_a_read_only_one() {
    let fake = FakeGceProcess::start_with(&[("BC_FAKE_GCE_REQUIRE_AUTH", "1")]);
    let p = provider_as(
        AccountOwner::Root,
        Arc::default(),
        &fake.base,
        "secret:gce-key",
        fast(),
    )
    .for_account("pacct_1", Some(secret(&fake).await));

    assert_eq!(p.list_reservations().await, Ok(vec![]));
    assert_eq!(scopes(&fake).await, json!({ READONLY: 1 }));
    let op = p
        .create_vm(&spec("bc-one", None), RID_1)
        .await
        .expect("create");
    assert_eq!(scopes(&fake).await, json!({ READONLY: 1, COMPUTE: 1 }));
    assert!(wait(&p, &op).await.succeeded());
    // Each scope's token is cached and reused.
    p.list_reservations().await.expect("listing");
    assert_eq!(p.list_managed_vms().await.expect("listing").len(), 1);
    assert_eq!(scopes(&fake).await, json!({ READONLY: 1, COMPUTE: 1 }));

    // Revoked at the provider: a 401, one fresh compute token, success.
    let (status, _) = fake.send(Method::POST, "/fake/revoke-tokens", None).await;
    assert_eq!(status, StatusCode::OK);
    let stop = p.stop_vm(ZONE, "bc-one", RID_2).await.expect("stop");
    assert!(wait(&p, &stop).await.succeeded());
    assert_eq!(scopes(&fake).await, json!({ READONLY: 1, COMPUTE: 2 }));

    // A token granted compute.readonly only reads VMs and may not change
    // them: Google's 403, not retried.
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("token");
    std::fs::write(&path, access_token(&fake).await).expect("write token");
    let readonly = provider_as(
        AccountOwner::Root,
        policy(&[("BC_CREDENTIAL_DIR", dir.path().to_str().expect("utf-8"))]),
        &fake.base,
        &format!("file:{}", path.display()),
        fast(),
    );
    assert_eq!(
        vm_status(&readonly, "bc-one").await.as_deref(),
        Some("TERMINATED")
    );
    let err = readonly
        .start_vm(ZONE, "bc-one", RID_3)
        .await
        .expect_err("read-only");
    assert_eq!(
        err,
        ProviderError::Rejected {
            status: 403,
            reason: "insufficientPermissions".into()
        }
    );
    assert!(!err.is_retryable());
    assert!(!err.to_string().contains("fake-ya29"), "{err}");
    let starts = requests(&fake)
        .await
        .into_iter()
        .filter(|(_, r)| r == RID_3);
    assert_eq!(starts.count(), 1, "a refusal is not retried");

    // adc on the metadata server asks for the compute scope by name.
    let port = fake.base.rsplit(':').next().expect("port");
    let adc = provider_as(
        AccountOwner::Root,
        Arc::default(),
        &fake.base,
        "adc",
        GceProviderOptions {
            metadata_host: format!("127.0.0.1:{port}"),
            ..fast()
        },
    );
    let start = adc.start_vm(ZONE, "bc-one", RID_4).await.expect("start");
    assert!(wait(&adc, &start).await.succeeded());
    assert_eq!(scopes(&fake).await[COMPUTE], 3);
}

#[tokio::test]
async fn a_tenant_account_with_an_internal_endpoint_is_refused_before_connecting() {
    let fake = FakeGceProcess::start();
    let port = fake.base.rsplit(':').next().expect("port").to_owned();
    let options = GceProviderOptions {
        dns_overrides: [(
            "gce.example".to_owned(),
            vec!["127.0.0.1".parse().expect("ip")],
        )]
        .into_iter()
        .collect(),
        ..fast()
    };
    // Not listed (the default lists only Google), or listed by a name that
    // resolves to loopback: refused, and nothing reaches the fake.
    for (listed, endpoint) in [
        (None, fake.base.clone()),
        (
            Some("http://gce.example:*"),
            format!("http://gce.example:{port}"),
        ),
    ] {
        let policy = match listed {
            Some(listed) => policy(&[("BC_PROVIDER_ENDPOINTS", listed)]),
            None => Arc::default(),
        };
        let tenant = provider_as(
            AccountOwner::Tenant,
            policy,
            &endpoint,
            "none",
            options.clone(),
        );
        let err = tenant
            .create_vm(&spec("bc-one", None), RID_1)
            .await
            .expect_err(&endpoint);
        assert!(
            matches!(err, ProviderError::NotAllowed(_)),
            "{endpoint}: {err:?}"
        );
        assert!(!err.is_retryable());
        for result in [
            tenant.get_vm(ZONE, "bc-one").await.map(|_| ()),
            tenant.list_managed_vms().await.map(|_| ()),
        ] {
            assert!(
                matches!(result, Err(ProviderError::NotAllowed(_))),
                "{result:?}"
            );
        }
    }
    assert_eq!(requests(&fake).await, []);
    // The same name for the root tenant's account: reached.
    let root = provider_as(
        AccountOwner::Root,
        Arc::default(),
        &format!("http://gce.example:{port}"),
        "none",
        options,
    );
    root.create_vm(&spec("bc-one", None), RID_1)
        .await
        .expect("root reaches it");
    assert_eq!(requests(&fake).await.len(), 1);
}
