//! The `providers` GCE adapter against the real `fake-gce` binary.

use std::sync::Arc;
use std::time::{Duration, Instant};

use providers::gce::{GceConfig, GceProvider, GceProviderOptions};
use providers::{
    AccountOwner, ProviderAccess, ProviderError, ProviderPolicy, ProviderReservation,
    ReservationProvider, ReservationStatus,
};
use serde_json::json;

use crate::common::{FakeGceProcess, PROJECT};

fn config(endpoint: &str, credentials: &str) -> GceConfig {
    GceConfig::from_json(
        &json!({ "project": PROJECT, "endpoint": endpoint, "credentials": credentials }),
    )
    .expect("valid config")
}

fn policy(vars: &[(&str, &str)]) -> Arc<ProviderPolicy> {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let lookup = |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    Arc::new(ProviderPolicy::from_lookup(lookup).expect("policy"))
}

/// A root tenant's account under the default policy (any endpoint).
fn provider(endpoint: &str, credentials: &str, options: GceProviderOptions) -> GceProvider {
    provider_as(
        AccountOwner::Root,
        Arc::default(),
        endpoint,
        credentials,
        options,
    )
}

fn provider_as(
    owner: AccountOwner,
    policy: Arc<ProviderPolicy>,
    endpoint: &str,
    credentials: &str,
    options: GceProviderOptions,
) -> GceProvider {
    GceProvider::new(
        config(endpoint, credentials),
        options,
        ProviderAccess::new(owner, policy),
    )
    .expect("provider")
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
            json!({
                "count": total,
                "inUseCount": in_use,
                "machineType": flavor,
                "status": gce_status,
            }),
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
    let fast = GceProviderOptions {
        retry_delay: Duration::from_millis(10),
        ..GceProviderOptions::default()
    };
    let provider = provider(&fake.base, "none", fast);
    // Three failures are retried away (contract 7: up to 3 retries).
    fake.fail_next(3).await;
    assert_eq!(
        provider.list_reservations().await.expect("retried").len(),
        1
    );
    // A fourth is the listing's answer.
    fake.fail_next(4).await;
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
            retry_delay: Duration::from_millis(10),
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
    let dir = std::env::temp_dir().join(format!("fake-gce-it-creds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("credential dir");
    let path = dir.join("token");
    std::fs::write(&path, "file-token-1\n").expect("write token");
    let credentials = format!("file:{}", path.display());
    let dir_policy = policy(&[("BC_CREDENTIAL_DIR", dir.to_str().expect("utf-8"))]);
    let provider = provider_as(
        AccountOwner::Root,
        Arc::clone(&dir_policy),
        &fake.base,
        &credentials,
        GceProviderOptions::default(),
    );
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
    // Outside BC_CREDENTIAL_DIR (or without one): refused before any call.
    fake.send(reqwest::Method::DELETE, "/fake/calls", None)
        .await;
    let outside = dir.with_extension("outside");
    std::fs::write(&outside, "file-token-1").expect("write token");
    for (policy, path) in [
        (Arc::clone(&dir_policy), outside.clone()),
        (
            Arc::clone(&dir_policy),
            dir.join("../").join(outside.file_name().expect("name")),
        ),
        (Arc::default(), outside.clone()),
    ] {
        let refused = provider_as(
            AccountOwner::Root,
            policy,
            &fake.base,
            &format!("file:{}", path.display()),
            GceProviderOptions::default(),
        );
        let err = refused
            .list_reservations()
            .await
            .expect_err("outside the dir");
        assert!(matches!(err, ProviderError::NotAllowed(_)), "{err:?}");
        assert!(!err.to_string().contains("file-token-1"), "{err}");
    }
    assert_eq!(fake.calls().await, json!({}), "no call reached the fake");
    std::fs::remove_file(&outside).expect("remove");
    std::fs::remove_dir_all(&dir).expect("remove dir");
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
        let listed = policy(&[("BC_CREDENTIAL_ENV", "FAKE_GCE_IT_*")]);
        let provider = |credentials: &str| {
            provider_as(
                AccountOwner::Root,
                Arc::clone(&listed),
                &fake.base,
                credentials,
                GceProviderOptions::default(),
            )
        };
        let right = provider(&format!("env:{TOKEN_VAR}"));
        assert_eq!(right.list_reservations().await, Ok(vec![]));

        let wrong = provider(&format!("env:{WRONG_TOKEN_VAR}"));
        let err = wrong.list_reservations().await.expect_err("wrong token");
        assert_eq!(err, ProviderError::Status { status: 401 });
        assert!(!err.to_string().contains("not-the-token"));

        let unset = provider("env:FAKE_GCE_IT_UNSET_TOKEN");
        let err = unset.list_reservations().await.expect_err("unset variable");
        assert_eq!(
            err,
            ProviderError::Credentials(
                "environment variable FAKE_GCE_IT_UNSET_TOKEN is not set".into()
            )
        );
        assert_eq!(fake.calls().await, json!({ PROJECT: 2 }));

        // Set, holding the right token, but not listed: refused, no call made.
        for (owner, policy) in [
            (AccountOwner::Root, Arc::default()),
            (
                AccountOwner::Root,
                self::policy(&[("BC_CREDENTIAL_ENV", "OTHER_*")]),
            ),
            (AccountOwner::Tenant, Arc::clone(&listed)),
        ] {
            let refused = provider_as(
                owner,
                policy,
                &fake.base,
                &format!("env:{TOKEN_VAR}"),
                GceProviderOptions::default(),
            );
            let err = refused.list_reservations().await.expect_err("not allowed");
            let ProviderError::NotAllowed(message) = &err else {
                panic!("{owner:?}: expected NotAllowed, got {err:?}");
            };
            assert!(message.contains("credential-not-allowed"), "{message}");
            assert!(!err.to_string().contains("env-token-1"), "{err}");
        }
        assert_eq!(
            fake.calls().await,
            json!({ PROJECT: 2 }),
            "no call reached the fake"
        );
    });
}

#[tokio::test]
async fn a_tenant_account_reaches_only_listed_endpoints() {
    let fake = FakeGceProcess::start();
    fake.put_reservation(
        "us-central1-a",
        "r1",
        json!({ "count": 2, "machineType": "n2-standard-4" }),
    )
    .await;
    let port = fake.base.rsplit(':').next().expect("a port").to_owned();
    let localhost = format!("http://localhost:{port}");

    // Listed by IP (with any port) or as localhost: reached.
    for (listed, endpoint) in [
        ("http://127.0.0.1:*", fake.base.clone()),
        (fake.base.as_str(), fake.base.clone()),
        ("http://localhost:*", localhost.clone()),
    ] {
        let tenant = provider_as(
            AccountOwner::Tenant,
            policy(&[("BC_PROVIDER_ENDPOINTS", listed)]),
            &endpoint,
            "none",
            GceProviderOptions::default(),
        );
        let got = tenant.list_reservations().await.expect(listed);
        assert_eq!(got.len(), 1, "{listed}");
    }
    assert_eq!(fake.calls().await, json!({ PROJECT: 3 }));

    // Not listed (the default lists only Google), another port, or a name
    // listed but resolving to loopback: refused, and nothing reaches the fake.
    let other_port = "http://127.0.0.1:1".to_owned();
    let options = GceProviderOptions {
        dns_overrides: [(
            "gce.example".to_owned(),
            vec!["127.0.0.1".parse().expect("ip")],
        )]
        .into_iter()
        .collect(),
        ..GceProviderOptions::default()
    };
    for (listed, endpoint) in [
        (None, fake.base.clone()),
        (Some(other_port.as_str()), fake.base.clone()),
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
        let err = tenant.list_reservations().await.expect_err(&endpoint);
        assert!(
            matches!(err, ProviderError::NotAllowed(_)),
            "{endpoint}: {err:?}"
        );
        assert!(!err.is_retryable());
    }
    assert_eq!(
        fake.calls().await,
        json!({ PROJECT: 3 }),
        "no call reached the fake"
    );

    // The same endpoints for the root tenant's account: reached.
    let root = provider_as(
        AccountOwner::Root,
        Arc::default(),
        &format!("http://gce.example:{port}"),
        "none",
        options,
    );
    assert_eq!(root.list_reservations().await.expect("root").len(), 1);
}

#[tokio::test]
async fn build_makes_a_provider_from_a_stored_account() {
    let fake = FakeGceProcess::start();
    let stored = json!({ "project": PROJECT, "endpoint": fake.base, "credentials": "none" });
    let access = ProviderAccess::new(
        AccountOwner::Tenant,
        policy(&[("BC_PROVIDER_ENDPOINTS", "http://127.0.0.1:*")]),
    );
    let provider = providers::build("gce", &stored, access, GceProviderOptions::default())
        .unwrap_or_else(|e| panic!("build: {e}"));
    assert_eq!(provider.list_reservations().await, Ok(vec![]));
    assert_eq!(fake.calls().await, json!({ PROJECT: 1 }));
}
