//! Google authentication against the real binary: service-account keys, the
//! JWT bearer grant, the metadata token endpoint, `BC_FAKE_GCE_REQUIRE_AUTH`,
//! revocation and expiry, the token counts and the richer `POST /fake/fail`.

use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::header::{CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::{FakeGceProcess, PROJECT};

pub const EMAIL: &str = "scanner@my-project.iam.gserviceaccount.com";
pub const SCOPE: &str = "https://www.googleapis.com/auth/compute.readonly";
const GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
const LIST: &str = "/compute/v1/projects/my-project/aggregated/reservations";
const METADATA: &str = "/computeMetadata/v1/instance/service-accounts/default/token";

/// An RSA key pair as PEM: (PKCS#8 private key, SPKI public key).
pub struct RsaKey {
    pub private_pem: String,
    pub public_pem: String,
}

fn generate_rsa_key() -> RsaKey {
    let dir = tempfile::tempdir().expect("temp dir");
    let private = dir.path().join("k.pem");
    let public = dir.path().join("pub.pem");
    let run = |args: &[&str]| {
        let status = Command::new("openssl")
            .args(args)
            .status()
            .expect("run openssl");
        assert!(status.success(), "openssl {args:?}: {status:?}");
    };
    let private_arg = private.to_str().expect("utf-8 path");
    run(&[
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        private_arg,
    ]);
    run(&[
        "pkey",
        "-in",
        private_arg,
        "-pubout",
        "-out",
        public.to_str().expect("utf-8 path"),
    ]);
    RsaKey {
        private_pem: std::fs::read_to_string(&private).expect("read key"),
        public_pem: std::fs::read_to_string(&public).expect("read public key"),
    }
}

/// The account's key, made once per test binary.
pub fn key() -> &'static RsaKey {
    static KEY: OnceLock<RsaKey> = OnceLock::new();
    KEY.get_or_init(generate_rsa_key)
}

/// Another key, registered nowhere.
fn other_key() -> &'static RsaKey {
    static KEY: OnceLock<RsaKey> = OnceLock::new();
    KEY.get_or_init(generate_rsa_key)
}

pub fn now_s() -> i64 {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    i64::try_from(secs).expect("seconds fit i64")
}

/// The claims a Google client library sends, for `aud`.
pub fn claims(aud: &str) -> Value {
    let now = now_s();
    json!({ "iss": EMAIL, "scope": SCOPE, "aud": aud, "iat": now, "exp": now + 3600 })
}

pub fn sign(key: &RsaKey, claims: &Value) -> String {
    jsonwebtoken::encode(
        &Header::new(Algorithm::RS256),
        claims,
        &EncodingKey::from_rsa_pem(key.private_pem.as_bytes()).expect("RSA private key"),
    )
    .expect("sign the JWT")
}

/// `PUT /fake/service-accounts/{email}`, asserting success.
pub async fn register(fake: &FakeGceProcess, email: &str, key: &RsaKey) {
    let (status, body) = fake
        .send(
            Method::PUT,
            &format!("/fake/service-accounts/{email}"),
            Some(json!({ "publicKeyPem": key.public_pem })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// `POST /token` with a raw form body.
async fn post_token(fake: &FakeGceProcess, form: &str) -> (StatusCode, Value) {
    let response = fake
        .http
        .post(fake.url("/token"))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form.to_owned())
        .send()
        .await
        .expect("POST /token");
    let status = response.status();
    (status, response.json().await.expect("a JSON body"))
}

/// The JWT bearer grant with `assertion` (the grant type percent-encoded,
/// as form encoders send it).
pub async fn grant(fake: &FakeGceProcess, assertion: &str) -> (StatusCode, Value) {
    let grant_type = "urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer";
    post_token(
        fake,
        &format!("grant_type={grant_type}&assertion={assertion}"),
    )
    .await
}

/// A token from a valid grant.
pub async fn access_token(fake: &FakeGceProcess) -> String {
    let assertion = sign(key(), &claims(&fake.url("/token")));
    let (status, body) = grant(fake, &assertion).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["access_token"]
        .as_str()
        .expect("access_token")
        .to_owned()
}

/// A read call with an optional bearer token; answers the response.
async fn read(fake: &FakeGceProcess, token: Option<&str>) -> reqwest::Response {
    let mut request = fake.http.get(fake.url(LIST));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("read call")
}

async fn tokens(fake: &FakeGceProcess) -> Value {
    let (status, body) = fake.send(Method::GET, "/fake/tokens", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

#[tokio::test]
async fn a_granted_token_reads_when_auth_is_required() {
    let fake = FakeGceProcess::start_with(&[("BC_FAKE_GCE_REQUIRE_AUTH", "1")]);
    fake.put_reservation(
        "us-central1-a",
        "r1",
        json!({ "count": 2, "machineType": "n2" }),
    )
    .await;
    register(&fake, EMAIL, key()).await;
    assert_eq!(
        tokens(&fake).await,
        json!({ "issued": 0, "metadataIssued": 0 })
    );

    let mut claims = claims(&fake.url("/token"));
    // Other scopes may come along, space-separated.
    claims["scope"] = json!(format!(
        "https://www.googleapis.com/auth/cloud-platform {SCOPE}"
    ));
    let (status, body) = grant(&fake, &sign(key(), &claims)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["expires_in"], 3600, "the default TTL");
    let token = body["access_token"].as_str().expect("access_token");
    assert!(token.starts_with("fake-ya29."), "{token}");
    assert_eq!(
        body.as_object().expect("object").len(),
        3,
        "exactly access_token, expires_in and token_type: {body}"
    );

    let response = read(&fake, Some(token)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let page: Value = response.json().await.expect("page");
    assert_eq!(
        page["items"]["zones/us-central1-a"]["reservations"][0]["name"],
        "r1"
    );
    // Each grant is a new token; both work.
    let second = access_token(&fake).await;
    assert_ne!(second, token);
    assert_eq!(read(&fake, Some(&second)).await.status(), StatusCode::OK);
    assert_eq!(read(&fake, Some(token)).await.status(), StatusCode::OK);
    assert_eq!(
        tokens(&fake).await,
        json!({ "issued": 2, "metadataIssued": 0 })
    );
    assert_eq!(fake.calls().await, json!({ PROJECT: 3 }));
}

#[tokio::test]
async fn the_scope_of_vm_changes_is_granted_too() {
    let fake = FakeGceProcess::start_with(&[("BC_FAKE_GCE_REQUIRE_AUTH", "1")]);
    register(&fake, EMAIL, key()).await;
    let mut claims = claims(&fake.url("/token"));
    claims["scope"] = json!("https://www.googleapis.com/auth/compute");
    let (status, body) = grant(&fake, &sign(key(), &claims)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let token = body["access_token"].as_str().expect("access_token");
    assert_eq!(read(&fake, Some(token)).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn bad_grants_are_refused_in_googles_shape() {
    let fake = FakeGceProcess::start();
    register(&fake, EMAIL, key()).await;
    let aud = fake.url("/token");
    let now = now_s();
    let with = |changes: Value| {
        let mut c = claims(&aud);
        for (k, v) in changes.as_object().expect("object") {
            c[k] = v.clone();
        }
        c
    };
    let without = |field: &str| {
        let mut c = claims(&aud);
        c.as_object_mut().expect("object").remove(field);
        c
    };
    let cases: Vec<(&str, String)> = vec![
        ("wrong signature", sign(other_key(), &claims(&aud))),
        (
            "unregistered iss",
            sign(
                key(),
                &with(json!({ "iss": "nobody@x.iam.gserviceaccount.com" })),
            ),
        ),
        ("no iss", sign(key(), &without("iss"))),
        (
            "expired",
            sign(key(), &with(json!({ "iat": now - 3700, "exp": now - 100 }))),
        ),
        (
            "iat ahead",
            sign(key(), &with(json!({ "iat": now + 120, "exp": now + 600 }))),
        ),
        (
            "over an hour",
            sign(key(), &with(json!({ "iat": now, "exp": now + 3601 }))),
        ),
        ("no exp", sign(key(), &without("exp"))),
        (
            "Google's aud",
            sign(
                key(),
                &with(json!({ "aud": "https://oauth2.googleapis.com/token" })),
            ),
        ),
        (
            "https aud on http",
            sign(
                key(),
                &with(json!({ "aud": aud.replace("http://", "https://") })),
            ),
        ),
        ("no aud", sign(key(), &without("aud"))),
        (
            "other scope",
            sign(
                key(),
                &with(json!({ "scope": "https://www.googleapis.com/auth/cloud-platform" })),
            ),
        ),
        (
            "scope prefix only",
            sign(key(), &with(json!({ "scope": format!("{SCOPE}x") }))),
        ),
        ("no scope", sign(key(), &without("scope"))),
        (
            "HS256",
            jsonwebtoken::encode(
                &Header::new(Algorithm::HS256),
                &claims(&aud),
                &EncodingKey::from_secret(b"secret"),
            )
            .expect("sign"),
        ),
        ("not a JWT", "garbage".to_owned()),
        ("tampered claims", {
            let good = sign(key(), &claims(&aud));
            let other = sign(key(), &with(json!({ "iss": "x@y" })));
            let parts: Vec<&str> = good.split('.').collect();
            let other_parts: Vec<&str> = other.split('.').collect();
            format!("{}.{}.{}", parts[0], other_parts[1], parts[2])
        }),
    ];
    for (case, assertion) in &cases {
        let (status, body) = grant(&fake, assertion).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{case}: {body}");
        assert_eq!(body["error"], "invalid_grant", "{case}: {body}");
        assert!(
            body["error_description"]
                .as_str()
                .is_some_and(|d| !d.is_empty()),
            "{case}: {body}"
        );
    }

    let good = sign(key(), &claims(&aud));
    for (case, form, error) in [
        (
            "other grant type",
            format!("grant_type=client_credentials&assertion={good}"),
            "unsupported_grant_type",
        ),
        (
            "no grant type",
            format!("assertion={good}"),
            "unsupported_grant_type",
        ),
        (
            "no assertion",
            format!("grant_type={GRANT}"),
            "invalid_request",
        ),
        (
            "grant type twice",
            format!("grant_type={GRANT}&grant_type={GRANT}&assertion={good}"),
            "invalid_request",
        ),
    ] {
        let (status, body) = post_token(&fake, &form).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{case}: {body}");
        assert_eq!(body["error"], error, "{case}: {body}");
    }
    let as_json = fake
        .http
        .post(fake.url("/token"))
        .json(&json!({ "grant_type": GRANT, "assertion": good }))
        .send()
        .await
        .expect("POST /token");
    assert_eq!(as_json.status(), StatusCode::BAD_REQUEST);
    let body: Value = as_json.json().await.expect("JSON");
    assert_eq!(body["error"], "invalid_request", "{body}");
    let (status, _) = fake.send(Method::GET, "/token", None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(
        tokens(&fake).await,
        json!({ "issued": 0, "metadataIssued": 0 })
    );

    // The same good assertion is granted (unencoded grant type too), until
    // its key is deleted.
    let (status, body) = post_token(&fake, &format!("grant_type={GRANT}&assertion={good}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = fake
        .send(
            Method::DELETE,
            &format!("/fake/service-accounts/{EMAIL}"),
            None,
        )
        .await;
    assert_eq!((status, body), (StatusCode::OK, json!({ "deleted": true })));
    let (status, body) = grant(&fake, &good).await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::BAD_REQUEST, &json!("invalid_grant"))
    );
    assert_eq!(
        tokens(&fake).await,
        json!({ "issued": 1, "metadataIssued": 0 })
    );
}

#[tokio::test]
async fn reads_without_a_live_token_answer_401() {
    let fake = FakeGceProcess::start_with(&[("BC_FAKE_GCE_REQUIRE_AUTH", "1")]);
    register(&fake, EMAIL, key()).await;

    let bare = read(&fake, None).await;
    assert_eq!(bare.status(), StatusCode::UNAUTHORIZED);
    let challenge = bare.headers()[WWW_AUTHENTICATE]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert_eq!(challenge, "Bearer realm=\"https://accounts.google.com/\"");
    let body: Value = bare.json().await.expect("JSON");
    assert_eq!(body["error"]["code"], 401, "{body}");
    assert_eq!(body["error"]["status"], "UNAUTHENTICATED", "{body}");
    assert_eq!(body["error"]["errors"][0]["reason"], "required", "{body}");

    for garbage in ["garbage", "fake-ya29.0000", ""] {
        let response = read(&fake, Some(garbage)).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{garbage:?}");
        let challenge = response.headers()[WWW_AUTHENTICATE]
            .to_str()
            .expect("ascii")
            .to_owned();
        assert!(
            challenge.starts_with("Bearer ") && challenge.contains("error=\"invalid_token\""),
            "{challenge}"
        );
        let body: Value = response.json().await.expect("JSON");
        assert_eq!(body["error"]["errors"][0]["reason"], "authError", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Request had invalid authentication credentials.")),
            "{body}"
        );
    }
    let token = access_token(&fake).await;
    // The token in another scheme is not a bearer token.
    let basic = fake
        .http
        .get(fake.url(LIST))
        .header("Authorization", format!("Basic {token}"))
        .send()
        .await
        .expect("read");
    assert_eq!(basic.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(read(&fake, Some(&token)).await.status(), StatusCode::OK);

    let (status, body) = fake.send(Method::POST, "/fake/revoke-tokens", None).await;
    assert_eq!((status, body), (StatusCode::OK, json!({ "revoked": 1 })));
    assert_eq!(
        read(&fake, Some(&token)).await.status(),
        StatusCode::UNAUTHORIZED
    );
    let (status, body) = fake.send(Method::POST, "/fake/revoke-tokens", None).await;
    assert_eq!((status, body), (StatusCode::OK, json!({ "revoked": 0 })));
    // Tokens issued after a revocation work.
    let fresh = access_token(&fake).await;
    assert_eq!(read(&fake, Some(&fresh)).await.status(), StatusCode::OK);
    let (status, _) = fake.send(Method::GET, "/fake/revoke-tokens", None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);

    // Every read call counted, refused or not.
    assert_eq!(fake.calls().await, json!({ PROJECT: 8 }));
    // Revocation does not touch the issue counts.
    assert_eq!(tokens(&fake).await["issued"], 2);
}

#[tokio::test]
async fn tokens_expire_after_the_ttl() {
    let fake = FakeGceProcess::start_with(&[
        ("BC_FAKE_GCE_REQUIRE_AUTH", "1"),
        ("BC_FAKE_GCE_TOKEN_TTL_S", "1"),
    ]);
    register(&fake, EMAIL, key()).await;
    let assertion = sign(key(), &claims(&fake.url("/token")));
    // Each token is used at once: it lives only a second.
    let (status, body) = grant(&fake, &assertion).await;
    let token = body["access_token"].as_str().unwrap_or_default().to_owned();
    assert_eq!(read(&fake, Some(&token)).await.status(), StatusCode::OK);
    assert_eq!((status, &body["expires_in"]), (StatusCode::OK, &json!(1)));
    let (status, body) = metadata(&fake, Some("Google")).await;
    let from_metadata = body["access_token"].as_str().unwrap_or_default().to_owned();
    assert_eq!(
        read(&fake, Some(&from_metadata)).await.status(),
        StatusCode::OK
    );
    assert_eq!((status, &body["expires_in"]), (StatusCode::OK, &json!(1)));
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        read(&fake, Some(&token)).await.status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        read(&fake, Some(&from_metadata)).await.status(),
        StatusCode::UNAUTHORIZED
    );
    // Expired tokens are not counted as revoked.
    let (_, body) = fake.send(Method::POST, "/fake/revoke-tokens", None).await;
    assert_eq!(body, json!({ "revoked": 0 }));
}

/// `GET` the metadata token endpoint with an optional `Metadata-Flavor`.
async fn metadata(fake: &FakeGceProcess, flavor: Option<&str>) -> (StatusCode, Value) {
    let mut request = fake.http.get(fake.url(METADATA));
    if let Some(flavor) = flavor {
        request = request.header("Metadata-Flavor", flavor);
    }
    let response = request.send().await.expect("metadata request");
    let status = response.status();
    if status == StatusCode::OK {
        assert_eq!(response.headers()["metadata-flavor"], "Google");
    }
    let text = response.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test]
async fn the_metadata_server_issues_tokens_to_callers_that_say_google() {
    let fake = FakeGceProcess::start_with(&[("BC_FAKE_GCE_REQUIRE_AUTH", "1")]);
    for flavor in [None, Some("google"), Some("")] {
        let (status, _) = metadata(&fake, flavor).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{flavor:?}");
    }
    let (status, body) = metadata(&fake, Some("Google")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["expires_in"], 3600);
    let token = body["access_token"].as_str().expect("token").to_owned();
    assert!(token.starts_with("fake-ya29."));
    assert_eq!(body.as_object().expect("object").len(), 3, "{body}");
    assert_eq!(read(&fake, Some(&token)).await.status(), StatusCode::OK);

    // Query parameters (scopes=...) are ignored.
    let response = fake
        .http
        .get(fake.url(&format!("{METADATA}?scopes={SCOPE}")))
        .header("Metadata-Flavor", "Google")
        .send()
        .await
        .expect("metadata request");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        tokens(&fake).await,
        json!({ "issued": 0, "metadataIssued": 2 })
    );

    // A reset zeroes the counts and keeps the tokens.
    let (status, body) = fake.send(Method::DELETE, "/fake/tokens", None).await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, json!({ "issued": 0, "metadataIssued": 0 }))
    );
    assert_eq!(
        tokens(&fake).await,
        json!({ "issued": 0, "metadataIssued": 0 })
    );
    assert_eq!(read(&fake, Some(&token)).await.status(), StatusCode::OK);

    let (status, _) = fake.send(Method::POST, METADATA, Some(json!({}))).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (status, _) = fake
        .send(Method::POST, "/fake/tokens", Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn service_account_keys_are_registered_read_and_deleted() {
    let fake = FakeGceProcess::start();
    let path = format!("/fake/service-accounts/{EMAIL}");
    let (status, _) = fake.send(Method::GET, &path, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = fake
        .send(
            Method::PUT,
            &path,
            Some(json!({ "publicKeyPem": key().public_pem })),
        )
        .await;
    let shown = json!({ "email": EMAIL, "publicKeyPem": key().public_pem });
    assert_eq!((status, &body), (StatusCode::OK, &shown));
    // The @ may come percent-encoded.
    let encoded = path.replace('@', "%40");
    let (status, body) = fake.send(Method::GET, &encoded, None).await;
    assert_eq!((status, &body), (StatusCode::OK, &shown));

    for bad in [
        json!({ "publicKeyPem": key().private_pem }),
        json!({ "publicKeyPem": "not a key" }),
        json!({
            "publicKeyPem": "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"
        }),
        json!({ "publicKeyPem": 1 }),
        json!({}),
        json!({ "publicKeyPem": key().public_pem, "extra": 1 }),
    ] {
        let (status, body) = fake.send(Method::PUT, &path, Some(bad.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_eq!(body["error"]["code"], 400, "{body}");
    }
    let (status, _) = fake
        .send(
            Method::PUT,
            "/fake/service-accounts/no-at-sign",
            Some(json!({ "publicKeyPem": key().public_pem })),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // A refused replacement keeps the key there was.
    let (_, body) = fake.send(Method::GET, &path, None).await;
    assert_eq!(body, shown);

    let (status, body) = fake.send(Method::DELETE, &encoded, None).await;
    assert_eq!((status, body), (StatusCode::OK, json!({ "deleted": true })));
    let (status, _) = fake.send(Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = fake.send(Method::POST, &path, Some(json!({}))).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn the_static_token_and_issued_tokens_both_work() {
    let fake = FakeGceProcess::start_with(&[
        ("BC_FAKE_GCE_REQUIRE_AUTH", "true"),
        ("BC_FAKE_GCE_TOKEN", "static-1"),
    ]);
    register(&fake, EMAIL, key()).await;
    let token = access_token(&fake).await;
    for good in ["static-1", token.as_str()] {
        assert_eq!(
            read(&fake, Some(good)).await.status(),
            StatusCode::OK,
            "{good}"
        );
    }
    for bad in [None, Some("static-2")] {
        assert_eq!(
            read(&fake, bad).await.status(),
            StatusCode::UNAUTHORIZED,
            "{bad:?}"
        );
    }
}

#[tokio::test]
async fn without_require_auth_issued_tokens_are_not_needed() {
    let fake = FakeGceProcess::start();
    assert_eq!(read(&fake, None).await.status(), StatusCode::OK);
    assert_eq!(read(&fake, Some("anything")).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn fail_answers_the_status_and_retry_after_asked_for() {
    let fake = FakeGceProcess::start();
    let (status, body) = fake
        .send(
            Method::POST,
            "/fake/fail",
            Some(json!({ "count": 2, "status": 500, "retryAfterS": 2 })),
        )
        .await;
    assert_eq!(
        (status, body),
        (
            StatusCode::OK,
            json!({ "count": 2, "status": 500, "retryAfterS": 2 })
        )
    );
    for _ in 0..2 {
        let response = read(&fake, None).await;
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(response.headers()[RETRY_AFTER], "2");
        let body: Value = response.json().await.expect("JSON");
        assert_eq!(body["error"]["code"], 500, "{body}");
    }
    assert_eq!(read(&fake, None).await.status(), StatusCode::OK);

    // 429 with Retry-After 0; then `{ count }` alone is 503 without it.
    let (status, _) = fake
        .send(
            Method::POST,
            "/fake/fail",
            Some(json!({ "count": 1, "status": 429, "retryAfterS": 0 })),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let response = read(&fake, None).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()[RETRY_AFTER], "0");
    let (status, body) = fake
        .send(Method::POST, "/fake/fail", Some(json!({ "count": 1 })))
        .await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, json!({ "count": 1, "status": 503 }))
    );
    let response = read(&fake, None).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().get(RETRY_AFTER).is_none());
    assert_eq!(read(&fake, None).await.status(), StatusCode::OK);

    for bad in [
        json!({ "count": 1, "status": 200 }),
        json!({ "count": 1, "status": 399 }),
        json!({ "count": 1, "status": 600 }),
        json!({ "count": 1, "status": "500" }),
        json!({ "count": 1, "retryAfterS": -1 }),
        json!({ "count": 1, "retryAfterS": 1.5 }),
        json!({ "count": 1, "retryAfterS": 86_401 }),
        json!({ "status": 500 }),
    ] {
        let (status, _) = fake
            .send(Method::POST, "/fake/fail", Some(bad.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    }
    assert_eq!(
        read(&fake, None).await.status(),
        StatusCode::OK,
        "nothing armed"
    );
}

/// Runs the binary with `env`, expecting it to refuse to start; answers its
/// stderr.
pub fn refused_start(env: &[(&str, &str)]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fake-gce"))
        .env("BC_FAKE_GCE_LISTEN", "127.0.0.1:0")
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn fake-gce");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("fake-gce started with {env:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().expect("output");
    assert!(!output.status.success(), "{env:?}: {:?}", output.status);
    assert!(output.stdout.is_empty(), "no ready line for {env:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn bad_auth_settings_stop_the_binary_with_a_clear_message() {
    for (env, says) in [
        (
            ("BC_FAKE_GCE_TOKEN_TTL_S", "0"),
            "BC_FAKE_GCE_TOKEN_TTL_S=\"0\"",
        ),
        (("BC_FAKE_GCE_TOKEN_TTL_S", "abc"), "must be a whole number"),
        (("BC_FAKE_GCE_TOKEN_TTL_S", "-5"), "BC_FAKE_GCE_TOKEN_TTL_S"),
        (
            ("BC_FAKE_GCE_TOKEN_TTL_S", "1.5"),
            "BC_FAKE_GCE_TOKEN_TTL_S",
        ),
        (
            ("BC_FAKE_GCE_TOKEN_TTL_S", "31536001"),
            "BC_FAKE_GCE_TOKEN_TTL_S",
        ),
        (
            ("BC_FAKE_GCE_REQUIRE_AUTH", "yes"),
            "BC_FAKE_GCE_REQUIRE_AUTH",
        ),
    ] {
        let stderr = refused_start(&[env]);
        assert!(stderr.contains(says), "{env:?}: {stderr}");
    }
}
