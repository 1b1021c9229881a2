//! HTTPS: the binary given `BC_FAKE_GCE_TLS_CERT` and `BC_FAKE_GCE_TLS_KEY`,
//! with a certificate for `localhost` and `127.0.0.1` from a CA made here.

use std::path::PathBuf;

use fake_gce::TlsIdentity;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::auth::{EMAIL, claims, key, refused_start, register, sign};
use crate::common::FakeGceProcess;

/// A CA and a leaf certificate it signed, as PEM.
struct Pki {
    ca_pem: String,
    leaf_pem: String,
    leaf_key_pem: String,
}

fn pki() -> Pki {
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "fake-gce test CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = ca.self_signed(&ca_key).expect("CA certificate");
    let leaf_key = KeyPair::generate().expect("leaf key");
    let mut leaf = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .expect("leaf params");
    leaf.distinguished_name
        .push(DnType::CommonName, "localhost");
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = leaf
        .signed_by(&leaf_key, &ca, &ca_key)
        .expect("leaf certificate");
    Pki {
        ca_pem: ca.pem(),
        leaf_pem: leaf.pem(),
        leaf_key_pem: leaf_key.serialize_pem(),
    }
}

/// Writes the leaf and its key into `dir`; answers their paths.
fn write_identity(dir: &tempfile::TempDir, pki: &Pki) -> (PathBuf, PathBuf) {
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&cert, &pki.leaf_pem).expect("write cert");
    std::fs::write(&key, &pki.leaf_key_pem).expect("write key");
    (cert, key)
}

fn trusting(ca_pem: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("CA"))
        .build()
        .expect("client")
}

#[tokio::test]
async fn serves_https_to_clients_that_trust_the_ca() {
    let pki = pki();
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert, key_path) = write_identity(&dir, &pki);
    let fake = FakeGceProcess::start_with(&[
        ("BC_FAKE_GCE_TLS_CERT", cert.to_str().expect("utf-8")),
        ("BC_FAKE_GCE_TLS_KEY", key_path.to_str().expect("utf-8")),
        ("BC_FAKE_GCE_REQUIRE_AUTH", "1"),
    ])
    .with_http(trusting(&pki.ca_pem));
    let port = fake
        .base
        .strip_prefix("https://127.0.0.1:")
        .expect("an https ready line")
        .to_owned();

    let (status, body) = fake.send(Method::GET, "/fake/calls", None).await;
    assert_eq!((status, body), (StatusCode::OK, json!({ "calls": {} })));
    let by_name = fake
        .http
        .get(format!("https://localhost:{port}/fake/calls"))
        .send()
        .await
        .expect("https by name");
    assert_eq!(by_name.status(), StatusCode::OK);

    // Not trusting the CA, or speaking plain HTTP: refused.
    let untrusting = reqwest::Client::new();
    let err = untrusting
        .get(fake.url("/fake/calls"))
        .send()
        .await
        .expect_err("an unknown CA");
    assert!(err.is_connect() || err.is_request(), "{err:?}");
    let plain = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/fake/calls"))
        .timeout(std::time::Duration::from_secs(10))
        .send()
        .await;
    assert!(plain.is_err(), "plain HTTP to the TLS port: {plain:?}");

    // ... and the server goes on serving. The audience is https.
    register(&fake, EMAIL, key()).await;
    let aud = fake.url("/token");
    assert!(aud.starts_with("https://"), "{aud}");
    let (status, body) = crate::auth::grant(&fake, &sign(key(), &claims(&aud))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let token = body["access_token"].as_str().expect("token").to_owned();
    let http_aud = aud.replace("https://", "http://");
    let (status, body) = crate::auth::grant(&fake, &sign(key(), &claims(&http_aud))).await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::BAD_REQUEST, &json!("invalid_grant"))
    );
    let read = fake
        .http
        .get(fake.url("/compute/v1/projects/my-project/aggregated/reservations"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("read over https");
    assert_eq!(read.status(), StatusCode::OK);
    assert_eq!(fake.calls().await, json!({ "my-project": 1 }));
}

#[test]
fn bad_tls_settings_stop_the_binary_with_a_clear_message() {
    let pki = pki();
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert, key_path) = write_identity(&dir, &pki);
    let (cert, key_path) = (
        cert.to_str().expect("utf-8").to_owned(),
        key_path.to_str().expect("utf-8").to_owned(),
    );
    let missing = dir.path().join("missing.pem");
    let missing = missing.to_str().expect("utf-8");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a pem").expect("write");
    let garbage = garbage.to_str().expect("utf-8");
    for (env, says) in [
        (
            vec![("BC_FAKE_GCE_TLS_CERT", cert.as_str())],
            "BC_FAKE_GCE_TLS_KEY is not",
        ),
        (
            vec![("BC_FAKE_GCE_TLS_KEY", key_path.as_str())],
            "BC_FAKE_GCE_TLS_CERT is not",
        ),
        (
            vec![
                ("BC_FAKE_GCE_TLS_CERT", missing),
                ("BC_FAKE_GCE_TLS_KEY", key_path.as_str()),
            ],
            "missing.pem",
        ),
        (
            vec![
                ("BC_FAKE_GCE_TLS_CERT", garbage),
                ("BC_FAKE_GCE_TLS_KEY", key_path.as_str()),
            ],
            "no CERTIFICATE",
        ),
        (
            vec![
                ("BC_FAKE_GCE_TLS_CERT", cert.as_str()),
                ("BC_FAKE_GCE_TLS_KEY", garbage),
            ],
            "private key",
        ),
    ] {
        let stderr = refused_start(&env);
        assert!(stderr.contains(says), "{env:?}: {stderr}");
        assert!(stderr.contains("BC_FAKE_GCE_TLS"), "{env:?}: {stderr}");
    }
}

#[test]
fn identities_are_checked_when_made() {
    let pki = pki();
    let other = pki_key_only();
    let made = TlsIdentity::from_pem(pki.leaf_pem.as_bytes(), pki.leaf_key_pem.as_bytes())
        .expect("a good identity");
    assert_eq!(made.cert_pem(), pki.leaf_pem.as_bytes());
    assert!(
        !format!("{made:?}").contains("PRIVATE"),
        "the key stays out of Debug"
    );
    let again = TlsIdentity::from_pem(pki.leaf_pem.as_bytes(), pki.leaf_key_pem.as_bytes())
        .expect("a good identity");
    assert_eq!(made, again);
    for (cert, key) in [
        (pki.leaf_pem.as_bytes(), other.as_bytes()),
        (b"garbage".as_slice(), pki.leaf_key_pem.as_bytes()),
        (pki.leaf_pem.as_bytes(), pki.leaf_pem.as_bytes()),
    ] {
        assert!(TlsIdentity::from_pem(cert, key).is_err());
    }
}

/// A private key that belongs to no certificate above.
fn pki_key_only() -> String {
    KeyPair::generate().expect("key").serialize_pem()
}
