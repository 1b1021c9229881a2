//! The `providers` GCE adapter against the real `fake-gce` binary.

use std::sync::Arc;
use std::time::{Duration, Instant};

use providers::gce::{GceConfig, GceProvider, GceProviderOptions};
use providers::{ProviderError, ProviderReservation, ReservationProvider, ReservationStatus};
use serde_json::json;

use crate::common::{FakeGceProcess, PROJECT};

fn config(endpoint: &str, credentials: &str) -> GceConfig {
    GceConfig::from_json(
        &json!({ "project": PROJECT, "endpoint": endpoint, "credentials": credentials }),
    )
    .expect("valid config")
}

fn provider(endpoint: &str, credentials: &str, options: GceProviderOptions) -> GceProvider {
    GceProvider::new(config(endpoint, credentials), options).expect("provider")
}

fn sorted(mut reservations: Vec<ProviderReservation>) -> Vec<ProviderReservation> {
    reservations.sort_by(|a, b| a.reservation_id.cmp(&b.reservation_id));
    reservations
}

fn expected(
    zone: &str,
    name: &str,
    flavor: &str,
    total: i64,
    in_use: i64,
    status: ReservationStatus,
) -> ProviderReservation {
    ProviderReservation {
        reservation_id: format!("projects/{PROJECT}/zones/{zone}/reservations/{name}"),
        zone: zone.into(),
        region: providers::gce::region_of_zone(zone).expect("region").into(),
        flavor: flavor.into(),
        total,
        in_use,
        status,
    }
}

#[tokio::test]
async fn lists_every_page_with_counts_regions_and_statuses() {
    let fake = FakeGceProcess::start();
    let cases = [
        (
            "us-central1-a",
            "ready-1",
            "n2-standard-4",
            4,
            1,
            "READY",
            ReservationStatus::Ready,
        ),
        (
            "us-central1-a",
            "creating",
            "n2-standard-4",
            2,
            0,
            "CREATING",
            ReservationStatus::NotReady,
        ),
        (
            "us-central1-b",
            "updating",
            "n2-standard-8",
            8,
            8,
            "UPDATING",
            ReservationStatus::NotReady,
        ),
        (
            "europe-west4-b",
            "deleting",
            "a3-highgpu-8g",
            1,
            0,
            "DELETING",
            ReservationStatus::NotReady,
        ),
        (
            "europe-west4-b",
            "odd",
            "c3-standard-22",
            3,
            2,
            "SOMETHING_NEW",
            ReservationStatus::NotReady,
        ),
        (
            "asia-east1-c",
            "ready-2",
            "n2-standard-4",
            12,
            0,
            "READY",
            ReservationStatus::Ready,
        ),
        (
            "me-central2-a",
            "big",
            "n2-standard-4",
            9_000_000_000,
            1,
            "READY",
            ReservationStatus::Ready,
        ),
    ];
    let mut want = Vec::new();
    for (zone, name, flavor, total, in_use, gce_status, status) in cases {
        fake.put_reservation(
            zone,
            name,
            json!({ "count": total, "inUseCount": in_use, "machineType": flavor, "status": gce_status }),
        )
        .await;
        want.push(expected(zone, name, flavor, total, in_use, status));
    }

    // Page size 2: four pages for seven reservations.
    let paged = provider(
        &fake.base,
        "none",
        GceProviderOptions {
            page_size: Some(2),
            ..GceProviderOptions::default()
        },
    );
    let got = paged.list_reservations().await.expect("listing");
    assert_eq!(got.len(), 7, "no reservation lost or repeated across pages");
    assert_eq!(sorted(got), sorted(want.clone()));

    // Page size 1 and the default (one page) agree.
    let one = provider(
        &fake.base,
        "none",
        GceProviderOptions {
            page_size: Some(1),
            ..GceProviderOptions::default()
        },
    );
    assert_eq!(
        sorted(one.list_reservations().await.expect("listing")),
        sorted(want.clone())
    );
    let default = provider(&fake.base, "none", GceProviderOptions::default());
    assert_eq!(
        sorted(default.list_reservations().await.expect("listing")),
        sorted(want)
    );
}

#[tokio::test]
async fn usable_behind_a_trait_object_and_sees_changes() {
    let fake = FakeGceProcess::start();
    let provider: Arc<dyn ReservationProvider> =
        Arc::new(provider(&fake.base, "none", GceProviderOptions::default()));
    assert_eq!(
        provider.list_reservations().await.expect("empty project"),
        vec![]
    );

    fake.put_reservation(
        "us-central1-a",
        "r1",
        json!({ "count": 4, "machineType": "n2-standard-4" }),
    )
    .await;
    let got = provider.list_reservations().await.expect("listing");
    assert_eq!(
        got,
        vec![expected(
            "us-central1-a",
            "r1",
            "n2-standard-4",
            4,
            0,
            ReservationStatus::Ready
        )]
    );

    let (status, _) = fake
        .send(
            reqwest::Method::DELETE,
            &FakeGceProcess::reservation_path(PROJECT, "us-central1-a", "r1"),
            None,
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::OK);
    assert_eq!(provider.list_reservations().await.expect("listing"), vec![]);
}

#[tokio::test]
async fn injected_503_is_a_retryable_status_error() {
    let fake = FakeGceProcess::start();
    fake.put_reservation(
        "us-central1-a",
        "r1",
        json!({ "count": 1, "machineType": "n2" }),
    )
    .await;
    let provider = provider(&fake.base, "none", GceProviderOptions::default());
    fake.fail_next(1).await;
    let err = provider
        .list_reservations()
        .await
        .expect_err("injected failure");
    assert_eq!(err, ProviderError::Status { status: 503 });
    assert!(err.is_retryable());
    assert_eq!(err.to_string(), "the provider answered HTTP 503");
    assert_eq!(
        provider.list_reservations().await.expect("recovered").len(),
        1
    );
}

#[tokio::test]
async fn a_silent_server_times_out_quickly() {
    // Accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let provider = provider(
        &endpoint,
        "none",
        GceProviderOptions {
            request_timeout: Duration::from_millis(300),
            ..GceProviderOptions::default()
        },
    );
    let started = Instant::now();
    let err = provider.list_reservations().await.expect_err("no answer");
    assert_eq!(err, ProviderError::Timeout);
    assert!(err.is_retryable());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    holder.abort();
}

#[tokio::test]
async fn a_closed_port_is_a_transport_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind")
        .port();
    let provider = provider(
        &format!("http://127.0.0.1:{port}"),
        "none",
        GceProviderOptions::default(),
    );
    match provider.list_reservations().await {
        Err(ProviderError::Transport(message)) => {
            assert!(message.contains("connect"), "{message}");
            assert!(!message.contains("for url"), "{message}");
        }
        other => panic!("expected a transport error, got {other:?}"),
    }
}

#[tokio::test]
async fn bearer_token_from_a_file() {
    let fake = FakeGceProcess::start_with(&[("BC_FAKE_GCE_TOKEN", "file-token-1")]);
    let path = std::env::temp_dir().join(format!("fake-gce-it-token-{}", std::process::id()));
    std::fs::write(&path, "file-token-1\n").expect("write token");
    let credentials = format!("file:{}", path.display());
    let provider = provider(&fake.base, &credentials, GceProviderOptions::default());
    assert_eq!(provider.list_reservations().await, Ok(vec![]));
    // Read at each call: a rotated (here: wrong) token is used at once.
    std::fs::write(&path, "rotated").expect("write token");
    assert_eq!(
        provider.list_reservations().await,
        Err(ProviderError::Status { status: 401 })
    );
    std::fs::remove_file(&path).expect("remove token");
    assert!(matches!(
        provider.list_reservations().await,
        Err(ProviderError::Credentials(_))
    ));
    // Credentials `none` sends no header: refused by a fake that wants one.
    let anonymous = self::provider(&fake.base, "none", GceProviderOptions::default());
    assert_eq!(
        anonymous.list_reservations().await,
        Err(ProviderError::Status { status: 401 })
    );
}

const TOKEN_VAR: &str = "FAKE_GCE_IT_BEARER_TOKEN";
const WRONG_TOKEN_VAR: &str = "FAKE_GCE_IT_WRONG_TOKEN";

/// `env:NAME` credentials. Setting an environment variable in this process
/// needs `unsafe` (forbidden here), so the test runs itself again as a child
/// process with the variables set, and the child does the checks.
#[test]
fn bearer_token_from_env() {
    if std::env::var_os(TOKEN_VAR).is_none() {
        let output = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "gce_adapter::bearer_token_from_env",
                "--exact",
                "--test-threads=1",
            ])
            .env(TOKEN_VAR, "env-token-1")
            .env(WRONG_TOKEN_VAR, "not-the-token")
            .output()
            .expect("run the child test");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "child test failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let fake = FakeGceProcess::start_with(&[("BC_FAKE_GCE_TOKEN", "env-token-1")]);
        let right = provider(
            &fake.base,
            &format!("env:{TOKEN_VAR}"),
            GceProviderOptions::default(),
        );
        assert_eq!(right.list_reservations().await, Ok(vec![]));

        let wrong = provider(
            &fake.base,
            &format!("env:{WRONG_TOKEN_VAR}"),
            GceProviderOptions::default(),
        );
        let err = wrong.list_reservations().await.expect_err("wrong token");
        assert_eq!(err, ProviderError::Status { status: 401 });
        assert!(!err.to_string().contains("not-the-token"));

        let unset = provider(
            &fake.base,
            "env:FAKE_GCE_IT_UNSET_TOKEN",
            GceProviderOptions::default(),
        );
        let err = unset.list_reservations().await.expect_err("unset variable");
        assert_eq!(
            err,
            ProviderError::Credentials(
                "environment variable FAKE_GCE_IT_UNSET_TOKEN is not set".into()
            )
        );
    });
}
