//! Real Google authentication against fake-gce requiring it (contract 7):
//! a tenant's service-account secret exchanged for tokens that are cached,
//! refreshed when they expire or are revoked; `adc` through the metadata
//! server; HTTPS with an operator's CA; retries of 429/5xx.

use std::time::Duration;

use fake_gce::{FakeGceConfig, TlsIdentity};
use serde_json::{Value, json};

use crate::support::calls::{put_secret, scan_as};
use crate::support::fixtures::{create_account, scan};
use crate::support::gce::{ATTEMPTS, Gce, PROJECT};
use crate::support::server::{Options, ROOT, ROOT_TOKEN, Server, rand_suffix};
use crate::support::worker;

/// A development key for the secret store (32 bytes, base64).
pub const SECRETS_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
/// Another key, for rotation.
pub const SECRETS_KEY_2: &str = "HxwdHhsaGRgXFhUUExIREA8ODQwLCgkIBwYFBAMCAQA=";

/// A fresh RSA key pair as `(private PKCS#8 PEM, public PEM)`, from the
/// `openssl` command line.
pub fn rsa_key() -> (String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let private = dir.path().join("key.pem");
    let public = dir.path().join("pub.pem");
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl");
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    };
    let (private_s, public_s) = (
        private.to_str().expect("path"),
        public.to_str().expect("path"),
    );
    run(&[
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        private_s,
    ]);
    run(&["pkey", "-in", private_s, "-pubout", "-out", public_s]);
    (
        std::fs::read_to_string(&private).expect("read key"),
        std::fs::read_to_string(&public).expect("read pub"),
    )
}

/// A service account registered with the fake: its key file's JSON.
pub async fn service_account(gce: &Gce, email: &str) -> String {
    let (private, public) = rsa_key();
    gce.register_key(email, &public).await;
    json!({
        "type": "service_account",
        "project_id": PROJECT,
        "private_key_id": "k1",
        "private_key": private,
        "client_email": email,
        "token_uri": format!("{}/token", gce.url),
    })
    .to_string()
}

/// A server whose secret store has [`SECRETS_KEY`].
pub async fn server_with_key() -> Server {
    Server::start_with_env("BC_SECRETS_KEY", SECRETS_KEY).await
}

/// A `providerAccounts.create` body: an account of `tenant` on the fake
/// with `credentials`, under a fresh key.
pub fn account_body_on(tenant: &str, gce: &Gce, credentials: &str) -> Value {
    json!({
        "tenantId": tenant,
        "name": "gce",
        "provider": "gce",
        "config": { "project": PROJECT, "endpoint": gce.url, "credentials": credentials },
        "idempotencyKey": format!("acct-{}", rand_suffix()),
    })
}

/// An account of `tenant` on the fake with `credentials`.
pub async fn account_on(
    s: &Server,
    token: &str,
    tenant: &str,
    gce: &Gce,
    credentials: &str,
) -> String {
    create_account(s, token, account_body_on(tenant, gce, credentials)).await
}

fn authenticated() -> FakeGceConfig {
    FakeGceConfig {
        require_auth: true,
        ..FakeGceConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_service_account_secret_scans_and_its_token_is_reused() {
    let s = server_with_key().await;
    let gce = Gce::start_with(authenticated()).await;
    gce.put("res-a", 3, 1, "READY").await;
    let acme = s.tenant("acme").await;
    let key = service_account(&gce, "reader@acme.iam.gserviceaccount.com").await;
    let put = put_secret(&s, &acme, "acme", "gce-key", &key).await.ok();
    assert_eq!(put["secret"]["kind"], "service-account");
    let account = account_on(&s, &acme, "acme", &gce, "secret:gce-key").await;

    let found = scan_as(&s, &acme, "acme", &account).await.ok();
    assert_eq!(found["items"][0]["total"], 3, "{found}");
    // Two more scans within the token's lifetime ask for no new token.
    scan_as(&s, &acme, "acme", &account).await.ok();
    scan_as(&s, &acme, "acme", &account).await.ok();
    assert_eq!(gce.tokens().await, (1, 0));
    assert_eq!(gce.listings().await, 3);

    // Revoked at the provider: the next listing gets 401, drops the token,
    // takes exactly one fresh one and succeeds.
    gce.revoke_tokens().await;
    let found = scan_as(&s, &acme, "acme", &account).await.ok();
    assert_eq!(found["items"][0]["total"], 3);
    assert_eq!(gce.tokens().await, (2, 0));
    assert_eq!(gce.listings().await, 5, "the 401 and its one retry");

    // The worker, another process, decrypts the same secret with the same
    // key and logs neither the key nor the token it got.
    let err = worker::once_logged_with(
        &s,
        &["vps.reservations"],
        &[("BC_SECRETS_KEY", SECRETS_KEY), ("RUST_LOG", "debug")],
    )
    .await;
    assert!(err.contains("gce access token obtained"), "{err}");
    assert_eq!(gce.tokens().await, (3, 0));
    for leaked in ["PRIVATE KEY", "fake-ya29.", "MII"] {
        assert!(!err.contains(leaked), "{leaked} in the worker's log");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_root_key_file_is_exchanged_for_tokens() {
    let gce = Gce::start_with(authenticated()).await;
    gce.put("res-a", 5, 0, "READY").await;
    let key = service_account(&gce, "platform@root.iam.gserviceaccount.com").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let canonical = dir.path().canonicalize().expect("canonical");
    std::fs::write(canonical.join("key.json"), key).expect("write key");
    let s = Server::start_with_env("BC_CREDENTIAL_DIR", canonical.display().to_string()).await;
    let reference = format!("file:{}", canonical.join("key.json").display());
    let account = account_on(&s, ROOT_TOKEN, ROOT, &gce, &reference).await;
    assert_eq!(scan(&s, &account).await["items"][0]["total"], 5);
    assert_eq!(gce.tokens().await, (1, 0));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_token_is_refreshed_before_use() {
    // Tokens live 61 s: cached until 60 s before that, so for 1 s.
    let s = server_with_key().await;
    let gce = Gce::start_with(FakeGceConfig {
        token_ttl: Duration::from_secs(61),
        ..authenticated()
    })
    .await;
    gce.put("res-a", 2, 0, "READY").await;
    let acme = s.tenant("acme").await;
    let key = service_account(&gce, "reader@acme.iam.gserviceaccount.com").await;
    put_secret(&s, &acme, "acme", "gce-key", &key).await.ok();
    let account = account_on(&s, &acme, "acme", &gce, "secret:gce-key").await;
    scan_as(&s, &acme, "acme", &account).await.ok();
    assert_eq!(gce.tokens().await, (1, 0));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    scan_as(&s, &acme, "acme", &account).await.ok();
    assert_eq!(
        gce.tokens().await,
        (2, 0),
        "a token near its expiry is not sent"
    );
    assert_eq!(gce.listings().await, 2, "no listing was refused");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_key_may_not_send_its_assertion_inside_the_platform() {
    // The tenant's key names a token endpoint on an address that is not
    // listed (the fake is listed as 127.0.0.1:*; localhost is not).
    let s = server_with_key().await;
    let gce = Gce::start_with(authenticated()).await;
    gce.put("res-a", 2, 0, "READY").await;
    let acme = s.tenant("acme").await;
    let (private, public) = rsa_key();
    gce.register_key("reader@acme.iam.gserviceaccount.com", &public)
        .await;
    let port = gce.url.rsplit(':').next().expect("port");
    let key = json!({
        "type": "service_account",
        "private_key": private,
        "client_email": "reader@acme.iam.gserviceaccount.com",
        "token_uri": format!("http://localhost:{port}/token"),
    })
    .to_string();
    put_secret(&s, &acme, "acme", "gce-key", &key).await.ok();
    let account = account_on(&s, &acme, "acme", &gce, "secret:gce-key").await;
    let a = scan_as(&s, &acme, "acme", &account).await;
    assert_eq!(a.err(503, "UNAVAILABLE")["reason"], "provider-error");
    assert_eq!(gce.tokens().await, (0, 0), "no assertion was sent");
    assert_eq!(gce.listings().await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn adc_takes_its_token_from_the_metadata_server() {
    let gce = Gce::start_with(authenticated()).await;
    gce.put("res-a", 4, 0, "READY").await;
    let s = Server::start_with_env("GCE_METADATA_HOST", gce.host()).await;
    let account = account_on(&s, ROOT_TOKEN, ROOT, &gce, "adc").await;
    let found = scan(&s, &account).await;
    assert_eq!(found["items"][0]["total"], 4);
    scan(&s, &account).await;
    assert_eq!(gce.tokens().await, (0, 1), "one metadata token, reused");

    // The worker, a process of its own, asks once for itself.
    let err = worker::once_logged_with(
        &s,
        &["vps.reservations"],
        &[("GCE_METADATA_HOST", gce.host())],
    )
    .await;
    assert!(err.contains("accountsScanned"), "{err}");
    assert_eq!(gce.tokens().await, (0, 2));
}

#[tokio::test(flavor = "multi_thread")]
async fn adc_uses_the_key_file_named_by_google_application_credentials() {
    let gce = Gce::start_with(authenticated()).await;
    gce.put("res-a", 4, 0, "READY").await;
    let key = service_account(&gce, "platform@root.iam.gserviceaccount.com").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("key.json");
    std::fs::write(&path, key).expect("write key");
    let s = Server::start_with(Options {
        env: vec![(
            "GOOGLE_APPLICATION_CREDENTIALS".into(),
            path.display().to_string(),
        )],
        ..Options::default()
    })
    .await;
    let account = account_on(&s, ROOT_TOKEN, ROOT, &gce, "adc").await;
    assert_eq!(scan(&s, &account).await["items"][0]["total"], 4);
    assert_eq!(gce.tokens().await, (1, 0));
}

/// A CA and a leaf certificate for `localhost` and 127.0.0.1 signed by it,
/// as PEM `(ca, leaf, leaf key)`.
fn certificates() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().expect("ca key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca.self_signed(&ca_key).expect("ca");
    let leaf_key = KeyPair::generate().expect("leaf key");
    let leaf = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .expect("leaf params")
        .signed_by(&leaf_key, &ca, &ca_key)
        .expect("leaf");
    (ca.pem(), leaf.pem(), leaf_key.serialize_pem())
}

#[tokio::test(flavor = "multi_thread")]
async fn https_to_the_provider_needs_the_operators_ca_file() {
    let (ca, leaf, key) = certificates();
    let tls = TlsIdentity::from_pem(leaf.as_bytes(), key.as_bytes()).expect("identity");
    let gce = Gce::start_with(FakeGceConfig {
        tls: Some(tls),
        ..FakeGceConfig::default()
    })
    .await;
    assert!(gce.url.starts_with("https://"));
    gce.put("res-a", 2, 0, "READY").await;

    // Without the CA the certificate is not trusted: a provider error.
    let s = Server::start().await;
    let account = account_on(&s, ROOT_TOKEN, ROOT, &gce, "none").await;
    let a = s
        .root("providerAccounts/scan", json!({ "accountId": account }))
        .await;
    assert_eq!(a.err(503, "UNAVAILABLE")["reason"], "provider-error");
    assert_eq!(gce.listings().await, 0, "no request got past the handshake");
    s.stop().await;

    // With BC_PROVIDER_CA_FILE the same account scans.
    let dir = tempfile::tempdir().expect("tempdir");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca).expect("write ca");
    let s = Server::start_with_env("BC_PROVIDER_CA_FILE", ca_file.display().to_string()).await;
    let account = account_on(&s, ROOT_TOKEN, ROOT, &gce, "none").await;
    assert_eq!(scan(&s, &account).await["items"][0]["total"], 2);
    assert_eq!(gce.listings().await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_listing_retries_429_and_5xx_then_succeeds() {
    let s = Server::start().await;
    let gce = Gce::start().await;
    gce.put("res-a", 2, 0, "READY").await;
    let account = account_on(&s, ROOT_TOKEN, ROOT, &gce, "none").await;
    gce.fail_calls(2, 503, None).await;
    assert_eq!(scan(&s, &account).await["items"][0]["total"], 2);
    assert_eq!(gce.listings().await, 3, "503, 503, 200");
    // A 429 with Retry-After 1 s is waited for (at least that long).
    gce.fail_calls(1, 429, Some(1)).await;
    let start = std::time::Instant::now();
    assert_eq!(scan(&s, &account).await["items"][0]["total"], 2);
    assert!(
        start.elapsed() >= Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(gce.listings().await, 5);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_that_always_fails_is_a_provider_error_without_its_body() {
    let s = Server::start().await;
    let gce = Gce::start().await;
    gce.put("res-a", 2, 0, "READY").await;
    let account = account_on(&s, ROOT_TOKEN, ROOT, &gce, "none").await;
    gce.fail_calls(100, 500, None).await;
    let a = s
        .root("providerAccounts/scan", json!({ "accountId": account }))
        .await;
    let details = a.err(503, "UNAVAILABLE");
    assert_eq!(details["reason"], "provider-error");
    assert_eq!(details["status"], 500);
    let text = a.body.to_string();
    assert!(!text.contains("backendError"), "{text}");
    assert_eq!(
        gce.listings().await,
        u64::from(ATTEMPTS),
        "the call and 3 retries"
    );
    // A 4xx other than 429 is not retried.
    gce.fail_calls(100, 403, None).await;
    let a = s
        .root("providerAccounts/scan", json!({ "accountId": account }))
        .await;
    assert_eq!(a.err(503, "UNAVAILABLE")["status"], 403);
    assert_eq!(gce.listings().await, u64::from(ATTEMPTS) + 1);
}
