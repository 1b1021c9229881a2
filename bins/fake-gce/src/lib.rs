//! A development and test double of the Compute Engine reservations API and
//! of the Google authentication in front of it.
//!
//! It holds reservations, service-account keys and access tokens in memory
//! and serves, on loopback, plain HTTP or (given a certificate) HTTPS on the
//! one listen address. Errors of the GCE paths have Google's API shape
//! `{ "error": { "code", "message", "errors": [{ "domain", "reason",
//! "message" }] } }`; errors of `POST /token` have Google's OAuth shape
//! `{ "error", "error_description" }`.
//!
//! # The Compute Engine read path
//!
//! - `GET /compute/v1/projects/{project}/aggregated/reservations?maxResults=&pageToken=`:
//!   the GCE read path (int64 counts as JSON strings, zones as full URLs,
//!   `NO_RESULTS_ON_PAGE` warnings, pages of `maxResults`, default and cap 500).
//!   Every request to it is a *read call*. In order: it is counted, waits the
//!   delay, answers an injected failure if one is due, then checks
//!   authentication (below), then answers the page (400 on a bad
//!   `maxResults` or `pageToken`).
//!
//! Authentication of read calls, off unless configured:
//! - a static token (`BC_FAKE_GCE_TOKEN`): `Authorization: Bearer <token>` with
//!   exactly that token is accepted;
//! - `BC_FAKE_GCE_REQUIRE_AUTH=1`: `Authorization: Bearer <t>` is accepted
//!   when `t` was issued by `POST /token` or the metadata endpoint, has not
//!   expired and was not revoked.
//!
//! When either is configured, anything else answers 401 with `status`
//! `UNAUTHENTICATED` in the error and `WWW-Authenticate: Bearer
//! realm="https://accounts.google.com/"`; without an `Authorization` header
//! the error's reason is `required`, with a refused one it is `authError` and
//! the header also carries `, error="invalid_token"`.
//!
//! # Google authentication
//!
//! - `POST /token`: the OAuth 2.0 JWT bearer grant (RFC 7523) as Google's
//!   token endpoint. Body `application/x-www-form-urlencoded`:
//!   `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=<JWT>`.
//!   The JWT must be RS256 (header `alg`), signed by the key registered for
//!   its `iss`, with `aud` exactly `<scheme>://<Host header>/token` (`https`
//!   when serving TLS, else `http`), `exp` in the future, `iat` at most 60 s
//!   ahead, `exp - iat` from 1 to 3600 s, and a space-separated `scope`
//!   holding `https://www.googleapis.com/auth/compute.readonly`. Answers 200
//!   `{ "access_token": "fake-ya29.<48 hex>", "expires_in": <TTL s>,
//!   "token_type": "Bearer" }`, the token valid for the TTL from now.
//!   Refusals answer 400 `{ "error", "error_description" }` with `error`:
//!   `unsupported_grant_type` (grant_type missing or other), `invalid_request`
//!   (Content-Type not form-encoded, a body that is not a valid form or names
//!   a parameter twice, no `assertion`, no Host header) or `invalid_grant`
//!   (everything about the JWT: not a JWT, not RS256, no or unregistered
//!   `iss`, bad signature, wrong `aud`, bad times, missing scope). A body
//!   over 1 MiB answers 413 `invalid_request`; another method 405.
//! - `GET /computeMetadata/v1/instance/service-accounts/default/token`: the
//!   metadata server's token endpoint. With `Metadata-Flavor: Google` it
//!   answers 200 with the same JSON as `POST /token` and a fresh token (and
//!   the `Metadata-Flavor: Google` response header); without that header,
//!   403 (plain text). Query parameters are ignored; another method 405.
//!
//! # Test and demo hooks
//!
//! - `PUT /fake/projects/{project}/zones/{zone}/reservations/{name}` with
//!   `{ count, inUseCount?, machineType, status? }`: create or replace (200, the
//!   stored reservation); `GET` and `DELETE` (200 `{ "deleted": true }`, 404
//!   when absent) on the same path.
//! - `PUT /fake/service-accounts/{email}` with `{ "publicKeyPem": "-----BEGIN
//!   PUBLIC KEY-----..." }` (SPKI `PUBLIC KEY` or PKCS#1 `RSA PUBLIC KEY`):
//!   registers or replaces the account's RSA key (200 `{ "email",
//!   "publicKeyPem" }`; 400 for a bad key, an unknown field or an email
//!   without `@`). `GET` answers the same (404 when absent); `DELETE`
//!   answers 200 `{ "deleted": true }` (404 when absent). The email may be
//!   percent-encoded (`%40`). Tokens already issued stay valid.
//! - `POST /fake/revoke-tokens`: every token issued so far stops working;
//!   200 `{ "revoked": n }`, n the tokens that were still live. Later tokens
//!   work.
//! - `GET /fake/tokens` → `{ "issued": n, "metadataIssued": m }`: tokens
//!   issued by `POST /token` (n) and by the metadata endpoint (m) since start
//!   or the last reset; `DELETE /fake/tokens` resets both (answers them,
//!   zero) and leaves the tokens valid.
//! - `POST /fake/fail { count, status?, retryAfterS? }`: the next `count`
//!   read calls answer `status` (default 503; any of 400 to 599) in the
//!   Google error shape, with `Retry-After: <retryAfterS>` when that is given
//!   (0 to 86400). A new call replaces the count left and the way they fail;
//!   `count` 0 cancels. Answers 200 with the values in effect (`retryAfterS`
//!   only when set).
//! - `GET /fake/calls` → `{ "calls": { "<project>": n } }`: how many read
//!   calls (requests to the list path above, one per page, whatever they
//!   answered: 200, 503, 401, ...) each project received since start or the
//!   last reset; `DELETE /fake/calls` resets the counts (answers
//!   `{ "calls": {} }`).
//! - `POST /fake/delay { ms }`: every later read call waits `ms`
//!   milliseconds (at most 60000) before it is answered, so that concurrent
//!   scans overlap; `0` turns the delay off. A call is counted when it
//!   arrives, before its delay.
//!
//! Hook bodies are JSON objects; unknown fields are refused (400). Unknown
//! paths answer 404, a known path with another method 405.
//!
//! # The binary
//!
//! `fake-gce` wraps [`serve`]; embed it the same way in a test harness if a
//! process is not wanted ([`FakeGceConfig`] holds the same settings). Its
//! environment:
//!
//! - `BC_FAKE_GCE_LISTEN`: `ip:port` (default `127.0.0.1:8085`; port 0 picks
//!   a free one).
//! - `BC_FAKE_GCE_TOKEN`: a static bearer token accepted on read calls.
//! - `BC_FAKE_GCE_REQUIRE_AUTH`: `1`/`true` to require an issued token on
//!   read calls, `0`/`false`/empty (the default) not to.
//! - `BC_FAKE_GCE_TOKEN_TTL_S`: issued tokens' lifetime in seconds, an
//!   integer from 1 to 31536000 (default 3600).
//! - `BC_FAKE_GCE_TLS_CERT`, `BC_FAKE_GCE_TLS_KEY`: PEM files of the
//!   certificate chain (leaf first) and its private key; both or neither.
//!   With them it serves HTTPS only (TLS 1.2/1.3, HTTP/1.1); a failed
//!   handshake drops that connection only.
//! - `RUST_LOG` (default `info`; logs go to stderr).
//!
//! When ready it prints one line to stdout: `fake-gce listening on
//! http://ADDR` (`https://ADDR` with TLS). A bad setting makes it exit with
//! status 1 and a message on stderr naming the variable.

mod auth;
mod store;
mod tls;

use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{
    AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, HOST, HeaderName, HeaderValue, RETRY_AFTER,
    WWW_AUTHENTICATE,
};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Body;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

pub use auth::{ACCESS_TOKEN_PREFIX, COMPUTE_READONLY_SCOPE, JWT_BEARER_GRANT};
use auth::{Auth, Issuer};
use store::{Failure, PageError, Store};
pub use store::{MAX_PAGE_SIZE, ReservationSpec};
pub use tls::{TlsError, TlsIdentity};

/// Where the binary listens when `BC_FAKE_GCE_LISTEN` is not set.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8085";
/// How long issued access tokens live unless configured otherwise.
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(3600);
/// The longest token lifetime the binary accepts (`BC_FAKE_GCE_TOKEN_TTL_S`).
pub const MAX_TOKEN_TTL_S: u64 = 365 * 86_400;
/// The path of the metadata server's token endpoint.
pub const METADATA_TOKEN_PATH: &str = "/computeMetadata/v1/instance/service-accounts/default/token";

const MAX_BODY_BYTES: usize = 1024 * 1024;
/// The longest delay `POST /fake/delay` accepts.
const MAX_DELAY_MS: u64 = 60_000;
/// The longest `retryAfterS` `POST /fake/fail` accepts.
const MAX_RETRY_AFTER_S: u64 = 86_400;
/// How long in-flight requests may take to finish once shutdown starts.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How long a client may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const METADATA_FLAVOR: HeaderName = HeaderName::from_static("metadata-flavor");

/// How the fake behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeGceConfig {
    /// When set, read calls carrying `Authorization: Bearer <token>` with
    /// this token are accepted, and read calls without it answer 401 (unless
    /// they carry a token [`require_auth`](Self::require_auth) accepts).
    pub required_token: Option<String>,
    /// When true, read calls must carry a token issued by `POST /token` or
    /// the metadata endpoint, unexpired and not revoked (else 401).
    pub require_auth: bool,
    /// How long an issued token is valid; `expires_in` is its whole seconds.
    /// Default [`DEFAULT_TOKEN_TTL`].
    pub token_ttl: Duration,
    /// When set, [`serve`] speaks HTTPS with this identity instead of HTTP,
    /// and `POST /token` expects an `https://` audience.
    pub tls: Option<TlsIdentity>,
}

impl Default for FakeGceConfig {
    fn default() -> Self {
        FakeGceConfig {
            required_token: None,
            require_auth: false,
            token_ttl: DEFAULT_TOKEN_TTL,
            tls: None,
        }
    }
}

/// The fake's state and request handling; clones share the state.
#[derive(Debug, Clone)]
pub struct FakeGce {
    store: Arc<Mutex<Store>>,
    auth: Arc<Mutex<Auth>>,
    required_authorization: Option<Arc<str>>,
    require_auth: bool,
    token_ttl: Duration,
    tls: Option<TlsIdentity>,
}

impl Default for FakeGce {
    fn default() -> Self {
        FakeGce::new(FakeGceConfig::default())
    }
}

/// Why a read call's credentials were refused.
enum Unauthenticated {
    Missing,
    Invalid,
}

impl FakeGce {
    /// An empty fake.
    pub fn new(config: FakeGceConfig) -> Self {
        FakeGce {
            store: Arc::default(),
            auth: Arc::default(),
            required_authorization: config.required_token.map(|t| format!("Bearer {t}").into()),
            require_auth: config.require_auth,
            token_ttl: config.token_ttl,
            tls: config.tls,
        }
    }

    /// `https` when the fake is configured with TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        // The store is left consistent by every critical section, so a panic
        // elsewhere does not make it unusable.
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn auth(&self) -> MutexGuard<'_, Auth> {
        // As for the store: every critical section leaves it consistent.
        self.auth.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Answers one request.
    pub async fn handle<B>(&self, request: Request<B>) -> Response<Full<Bytes>>
    where
        B: Body<Data = Bytes>,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let response = self.route(request).await;
        tracing::info!(%method, %path, status = response.status().as_u16(), "request");
        response
    }

    async fn route<B>(&self, request: Request<B>) -> Response<Full<Bytes>>
    where
        B: Body<Data = Bytes>,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let path = request.uri().path().to_owned();
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match segments.as_slice() {
            [
                "compute",
                "v1",
                "projects",
                project,
                "aggregated",
                "reservations",
            ] => {
                if request.method() != Method::GET {
                    return method_not_allowed();
                }
                let delay = self.store().count_call(project);
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                self.list(project, &request)
            }
            ["token"] => {
                if request.method() != Method::POST {
                    return method_not_allowed();
                }
                self.token_grant(request).await
            }
            [
                "computeMetadata",
                "v1",
                "instance",
                "service-accounts",
                "default",
                "token",
            ] => {
                if request.method() != Method::GET {
                    return method_not_allowed();
                }
                self.metadata_token(&request)
            }
            [
                "fake",
                "projects",
                project,
                "zones",
                zone,
                "reservations",
                name,
            ] => {
                if let Some(bad) = [("project", *project), ("zone", *zone), ("name", *name)]
                    .into_iter()
                    .find(|(what, v)| !valid_segment(what, v))
                {
                    return error(
                        StatusCode::BAD_REQUEST,
                        "invalid",
                        &format!("invalid {} in path", bad.0),
                    );
                }
                let (project, zone, name) =
                    (project.to_string(), zone.to_string(), name.to_string());
                match *request.method() {
                    Method::PUT => match read_json(request).await {
                        Ok(body) => self.put(&project, &zone, &name, &body),
                        Err(response) => response,
                    },
                    Method::GET => match self.store().get(&project, &zone, &name) {
                        Some(r) => json_response(StatusCode::OK, &r),
                        None => not_found(),
                    },
                    Method::DELETE => {
                        if self.store().delete(&project, &zone, &name) {
                            json_response(StatusCode::OK, &json!({ "deleted": true }))
                        } else {
                            not_found()
                        }
                    }
                    _ => method_not_allowed(),
                }
            }
            ["fake", "service-accounts", email] => {
                let Some(email) = auth::percent_decode(email).filter(|e| valid_email(e)) else {
                    return error(
                        StatusCode::BAD_REQUEST,
                        "invalid",
                        "invalid service-account email in path",
                    );
                };
                match *request.method() {
                    Method::PUT => match read_json(request).await {
                        Ok(body) => self.put_service_account(&email, &body),
                        Err(response) => response,
                    },
                    Method::GET => match self.auth().public_key(&email) {
                        Some(pem) => json_response(
                            StatusCode::OK,
                            &json!({ "email": email, "publicKeyPem": pem }),
                        ),
                        None => not_found(),
                    },
                    Method::DELETE => {
                        if self.auth().unregister(&email) {
                            json_response(StatusCode::OK, &json!({ "deleted": true }))
                        } else {
                            not_found()
                        }
                    }
                    _ => method_not_allowed(),
                }
            }
            ["fake", "revoke-tokens"] => {
                if request.method() != Method::POST {
                    return method_not_allowed();
                }
                let revoked = self.auth().revoke_all(Instant::now());
                json_response(StatusCode::OK, &json!({ "revoked": revoked }))
            }
            ["fake", "tokens"] => {
                let mut auth = self.auth();
                match *request.method() {
                    Method::GET => {}
                    Method::DELETE => auth.reset_counts(),
                    _ => return method_not_allowed(),
                }
                let (issued, metadata_issued) = auth.counts();
                json_response(
                    StatusCode::OK,
                    &json!({ "issued": issued, "metadataIssued": metadata_issued }),
                )
            }
            ["fake", "fail"] => {
                if request.method() != Method::POST {
                    return method_not_allowed();
                }
                match read_json(request).await {
                    Ok(body) => self.fail(&body),
                    Err(response) => response,
                }
            }
            ["fake", "calls"] => match *request.method() {
                Method::GET => {
                    json_response(StatusCode::OK, &json!({ "calls": self.store().calls() }))
                }
                Method::DELETE => {
                    self.store().reset_calls();
                    json_response(StatusCode::OK, &json!({ "calls": {} }))
                }
                _ => method_not_allowed(),
            },
            ["fake", "delay"] => {
                if request.method() != Method::POST {
                    return method_not_allowed();
                }
                match read_json(request).await {
                    Ok(body) => self.delay(&body),
                    Err(response) => response,
                }
            }
            _ => not_found(),
        }
    }

    fn list<B>(&self, project: &str, request: &Request<B>) -> Response<Full<Bytes>> {
        let failure = self.store().take_failure();
        if let Some(failure) = failure {
            return injected_failure(failure);
        }
        if let Err(why) = self.authenticate(request) {
            return unauthenticated(&why);
        }
        let mut page_size = MAX_PAGE_SIZE;
        let mut page_token = None;
        for (key, value) in request
            .uri()
            .query()
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').unwrap_or((p, "")))
        {
            match key {
                "maxResults" => match value.parse::<usize>() {
                    Ok(0) => page_size = MAX_PAGE_SIZE,
                    Ok(n) => page_size = n.min(MAX_PAGE_SIZE),
                    Err(_) => {
                        return error(
                            StatusCode::BAD_REQUEST,
                            "invalid",
                            "Invalid value for field 'maxResults'.",
                        );
                    }
                },
                "pageToken" => page_token = Some(value).filter(|t| !t.is_empty()),
                // Other GCE parameters (filter, orderBy, returnPartialSuccess, ...) are ignored.
                _ => {}
            }
        }
        match self.store().aggregated_page(project, page_size, page_token) {
            Ok(page) => json_response(StatusCode::OK, &page),
            Err(PageError::BadToken) => error(
                StatusCode::BAD_REQUEST,
                "invalid",
                "Invalid value for field 'pageToken'.",
            ),
        }
    }

    /// Checks a read call's `Authorization` against what is configured.
    fn authenticate<B>(&self, request: &Request<B>) -> Result<(), Unauthenticated> {
        if self.required_authorization.is_none() && !self.require_auth {
            return Ok(());
        }
        let sent = request
            .headers()
            .get(AUTHORIZATION)
            .ok_or(Unauthenticated::Missing)?;
        if let Some(expected) = &self.required_authorization
            && sent.as_bytes() == expected.as_bytes()
        {
            return Ok(());
        }
        if self.require_auth {
            let token = sent
                .to_str()
                .ok()
                .and_then(|v| v.split_once(' '))
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .map(|(_, token)| token.trim());
            if let Some(token) = token
                && self.auth().is_live(token, Instant::now())
            {
                return Ok(());
            }
        }
        Err(Unauthenticated::Invalid)
    }

    async fn token_grant<B>(&self, request: Request<B>) -> Response<Full<Bytes>>
    where
        B: Body<Data = Bytes>,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let host = request
            .headers()
            .get(HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned)
            .or_else(|| request.uri().authority().map(|a| a.to_string()));
        let Some(host) = host else {
            return oauth_error("invalid_request", "the request has no Host header");
        };
        let expected_aud = format!("{}://{host}/token", self.scheme());
        let form_encoded = request
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| {
                v.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            });
        if !form_encoded {
            return oauth_error(
                "invalid_request",
                "Content-Type must be application/x-www-form-urlencoded",
            );
        }
        let body = match read_bytes(request).await {
            Ok(body) => body,
            Err(BodyError::TooLarge) => {
                let mut response = oauth_error("invalid_request", "body over 1 MiB");
                *response.status_mut() = StatusCode::PAYLOAD_TOO_LARGE;
                return response;
            }
            Err(BodyError::Unreadable) => {
                return oauth_error("invalid_request", "could not read the body");
            }
        };
        let form = match auth::parse_form(&body) {
            Ok(form) => form,
            Err(why) => return oauth_error("invalid_request", &why),
        };
        match form.get("grant_type").map(String::as_str) {
            Some(JWT_BEARER_GRANT) => {}
            other => {
                return oauth_error(
                    "unsupported_grant_type",
                    &format!("Invalid grant_type: {}", other.unwrap_or("")),
                );
            }
        }
        let Some(assertion) = form.get("assertion") else {
            return oauth_error("invalid_request", "Missing required parameter: assertion");
        };
        let now_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let checked = auth::check_assertion(assertion, &expected_aud, now_s, |iss| {
            self.auth().public_key(iss).map(str::to_owned)
        });
        if let Err(why) = checked {
            return oauth_error("invalid_grant", &why);
        }
        self.issue(Issuer::Grant)
    }

    fn metadata_token<B>(&self, request: &Request<B>) -> Response<Full<Bytes>> {
        if request
            .headers()
            .get(METADATA_FLAVOR)
            .is_none_or(|v| v.as_bytes() != b"Google")
        {
            let mut response = Response::new(Full::new(Bytes::from_static(
                b"Missing required header \"Metadata-Flavor\": \"Google\"\n",
            )));
            *response.status_mut() = StatusCode::FORBIDDEN;
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            return response;
        }
        let mut response = self.issue(Issuer::Metadata);
        response
            .headers_mut()
            .insert(METADATA_FLAVOR, HeaderValue::from_static("Google"));
        response
    }

    /// Issues a fresh token and answers it in the token endpoints' shape.
    fn issue(&self, issuer: Issuer) -> Response<Full<Bytes>> {
        let token = match auth::new_access_token() {
            Ok(token) => token,
            Err(why) => return error(StatusCode::INTERNAL_SERVER_ERROR, "backendError", &why),
        };
        self.auth()
            .issue(issuer, token.clone(), Instant::now(), self.token_ttl);
        let mut response = json_response(
            StatusCode::OK,
            &json!({
                "access_token": token,
                "expires_in": self.token_ttl.as_secs(),
                "token_type": "Bearer",
            }),
        );
        response
            .headers_mut()
            .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        response
    }

    fn put_service_account(&self, email: &str, body: &Map<String, Value>) -> Response<Full<Bytes>> {
        if let Some(key) = body.keys().find(|k| k.as_str() != "publicKeyPem") {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid",
                &format!("unknown field '{key}'"),
            );
        }
        let Some(pem) = body.get("publicKeyPem").and_then(Value::as_str) else {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid",
                "'publicKeyPem' must be a PEM string",
            );
        };
        match self.auth().register(email, pem) {
            Ok(()) => json_response(
                StatusCode::OK,
                &json!({ "email": email, "publicKeyPem": pem }),
            ),
            Err(why) => error(StatusCode::BAD_REQUEST, "invalid", &why),
        }
    }

    fn put(
        &self,
        project: &str,
        zone: &str,
        name: &str,
        body: &Map<String, Value>,
    ) -> Response<Full<Bytes>> {
        let spec = match parse_spec(body) {
            Ok(spec) => spec,
            Err(message) => return error(StatusCode::BAD_REQUEST, "invalid", &message),
        };
        let shown = self.store().put(project, zone, name, spec);
        json_response(StatusCode::OK, &shown)
    }

    fn delay(&self, body: &Map<String, Value>) -> Response<Full<Bytes>> {
        if let Some(key) = body.keys().find(|k| k.as_str() != "ms") {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid",
                &format!("unknown field '{key}'"),
            );
        }
        let Some(ms) = body
            .get("ms")
            .and_then(Value::as_u64)
            .filter(|ms| *ms <= MAX_DELAY_MS)
        else {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid",
                &format!("'ms' must be an integer from 0 to {MAX_DELAY_MS}"),
            );
        };
        self.store().set_delay(Duration::from_millis(ms));
        json_response(StatusCode::OK, &json!({ "ms": ms }))
    }

    fn fail(&self, body: &Map<String, Value>) -> Response<Full<Bytes>> {
        let (count, failure) = match parse_fail(body) {
            Ok(parsed) => parsed,
            Err(message) => return error(StatusCode::BAD_REQUEST, "invalid", &message),
        };
        self.store().fail_next(count, failure);
        let mut shown = json!({ "count": count, "status": failure.status });
        if let Some(s) = failure.retry_after_s {
            shown["retryAfterS"] = s.into();
        }
        json_response(StatusCode::OK, &shown)
    }
}

fn parse_fail(body: &Map<String, Value>) -> Result<(u64, Failure), String> {
    if let Some(key) = body
        .keys()
        .find(|k| !matches!(k.as_str(), "count" | "status" | "retryAfterS"))
    {
        return Err(format!("unknown field '{key}'"));
    }
    let count = body
        .get("count")
        .and_then(Value::as_u64)
        .ok_or("'count' must be a non-negative integer")?;
    let mut failure = Failure::default();
    match body.get("status") {
        None | Some(Value::Null) => {}
        Some(v) => {
            failure.status = v
                .as_u64()
                .filter(|s| (400..=599).contains(s))
                .and_then(|s| u16::try_from(s).ok())
                .ok_or("'status' must be an HTTP error status from 400 to 599")?;
        }
    }
    match body.get("retryAfterS") {
        None | Some(Value::Null) => {}
        Some(v) => {
            let s = v
                .as_u64()
                .filter(|s| *s <= MAX_RETRY_AFTER_S)
                .ok_or_else(|| {
                    format!("'retryAfterS' must be an integer from 0 to {MAX_RETRY_AFTER_S}")
                })?;
            failure.retry_after_s = Some(s);
        }
    }
    Ok((count, failure))
}

/// The answer to a read call that must fail.
fn injected_failure(failure: Failure) -> Response<Full<Bytes>> {
    let status = StatusCode::from_u16(failure.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    let reason = match status.as_u16() {
        400 => "invalid",
        401 => "authError",
        403 => "forbidden",
        404 => "notFound",
        429 => "rateLimitExceeded",
        500..=599 => "backendError",
        _ => "invalid",
    };
    let mut response = error(
        status,
        reason,
        "fake-gce: injected failure (POST /fake/fail)",
    );
    if let Some(s) = failure.retry_after_s {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(s));
    }
    response
}

/// 401 in Google's shape, with the challenge.
fn unauthenticated(why: &Unauthenticated) -> Response<Full<Bytes>> {
    const SEE: &str = "Expected OAuth 2 access token, login cookie or other valid \
                       authentication credential. See \
                       https://developers.google.com/identity/sign-in/web/devconsole-project.";
    let (message, reason, challenge) = match why {
        Unauthenticated::Missing => (
            format!("Request is missing required authentication credential. {SEE}"),
            "required",
            "Bearer realm=\"https://accounts.google.com/\"",
        ),
        Unauthenticated::Invalid => (
            format!("Request had invalid authentication credentials. {SEE}"),
            "authError",
            "Bearer realm=\"https://accounts.google.com/\", error=\"invalid_token\"",
        ),
    };
    let mut response = json_response(
        StatusCode::UNAUTHORIZED,
        &json!({
            "error": {
                "code": 401,
                "message": message,
                "errors": [{
                    "message": message,
                    "domain": "global",
                    "reason": reason,
                    "location": "Authorization",
                    "locationType": "header",
                }],
                "status": "UNAUTHENTICATED",
            }
        }),
    );
    response
        .headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
    response
}

/// A refusal of `POST /token` in Google's OAuth shape (400).
fn oauth_error(code: &str, description: &str) -> Response<Full<Bytes>> {
    json_response(
        StatusCode::BAD_REQUEST,
        &json!({ "error": code, "error_description": description }),
    )
}

/// A service-account email as a path names it: `local@domain`, no spaces,
/// slashes or control characters.
fn valid_email(s: &str) -> bool {
    (3..=254).contains(&s.len())
        && s.split_once('@')
            .is_some_and(|(local, domain)| !local.is_empty() && !domain.is_empty())
        && !s
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '/')
}

fn parse_spec(body: &Map<String, Value>) -> Result<ReservationSpec, String> {
    if let Some(key) = body.keys().find(|k| {
        !matches!(
            k.as_str(),
            "count" | "inUseCount" | "machineType" | "status"
        )
    }) {
        return Err(format!("unknown field '{key}'"));
    }
    let count = |key: &str| match body.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_i64()
            .filter(|n| *n >= 0)
            .map(Some)
            .ok_or_else(|| format!("'{key}' must be a non-negative integer")),
    };
    let total = count("count")?.ok_or("'count' is required")?;
    let in_use_count = count("inUseCount")?.unwrap_or(0);
    if in_use_count > total {
        return Err("'inUseCount' must not exceed 'count'".into());
    }
    let machine_type = match body.get("machineType") {
        Some(Value::String(s)) if !s.is_empty() && !s.contains(char::is_whitespace) => s.clone(),
        Some(_) => return Err("'machineType' must be a non-empty string".into()),
        None => return Err("'machineType' is required".into()),
    };
    let status = match body.get("status") {
        None => "READY".to_owned(),
        Some(Value::String(s))
            if !s.is_empty() && s.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') =>
        {
            s.clone()
        }
        Some(_) => {
            return Err("'status' must be an upper-case word such as READY or CREATING".into());
        }
    };
    Ok(ReservationSpec {
        count: total,
        in_use_count,
        machine_type,
        status,
    })
}

/// GCE resource names: `[a-z]([-a-z0-9]{0,61}[a-z0-9])?`; a zone also needs
/// its region part (`us-central1-a`).
fn valid_segment(what: &str, s: &str) -> bool {
    let b = s.as_bytes();
    let name = (1..=63).contains(&b.len())
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && b.last().is_some_and(|&c| c != b'-');
    name && (what != "zone" || s.contains('-'))
}

/// Why a body could not be read.
enum BodyError {
    TooLarge,
    Unreadable,
}

async fn read_bytes<B>(request: Request<B>) -> Result<Bytes, BodyError>
where
    B: Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    match Limited::new(request.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge),
        Err(_) => Err(BodyError::Unreadable),
    }
}

async fn read_json<B>(request: Request<B>) -> Result<Map<String, Value>, Response<Full<Bytes>>>
where
    B: Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let bytes = match read_bytes(request).await {
        Ok(bytes) => bytes,
        Err(BodyError::TooLarge) => {
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid",
                "body over 1 MiB",
            ));
        }
        Err(BodyError::Unreadable) => {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "invalid",
                "could not read the body",
            ));
        }
    };
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(error(
            StatusCode::BAD_REQUEST,
            "invalid",
            "the body must be a JSON object",
        )),
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=UTF-8"),
    );
    response
}

/// An error in the Google API shape.
fn error(status: StatusCode, reason: &str, message: &str) -> Response<Full<Bytes>> {
    json_response(
        status,
        &json!({
            "error": {
                "code": status.as_u16(),
                "message": message,
                "errors": [{ "domain": "global", "reason": reason, "message": message }]
            }
        }),
    )
}

fn not_found() -> Response<Full<Bytes>> {
    error(
        StatusCode::NOT_FOUND,
        "notFound",
        "The resource was not found.",
    )
}

fn method_not_allowed() -> Response<Full<Bytes>> {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "httpMethodNotAllowed",
        "Method not allowed.",
    )
}

/// Serves `fake` on `listener` until `shutdown` completes, then stops
/// accepting and lets in-flight requests finish (for up to 10 s).
///
/// With [`FakeGceConfig::tls`] set it speaks HTTPS only; a connection whose
/// handshake fails (or takes over 10 s) is dropped and serving goes on.
pub async fn serve(
    listener: TcpListener,
    fake: FakeGce,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new());
    let acceptor = fake
        .tls
        .as_ref()
        .map(|tls| TlsAcceptor::from(tls.server_config()));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of descriptors and the like: back off, keep serving.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let fake = fake.clone();
                let service = service_fn(move |request| {
                    let fake = fake.clone();
                    async move { Ok::<_, Infallible>(fake.handle(request).await) }
                });
                let Some(acceptor) = &acceptor else {
                    let connection =
                        graceful.watch(http.serve_connection(TokioIo::new(stream), service));
                    tokio::spawn(async move {
                        if let Err(e) = connection.await {
                            tracing::debug!(%peer, error = %e, "connection ended with an error");
                        }
                    });
                    continue;
                };
                // The handshake runs in the connection's task, so a slow or
                // failing client holds up no one else.
                let handshake = acceptor.accept(stream);
                let watcher = graceful.watcher();
                let http = http.clone();
                tokio::spawn(async move {
                    let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            return;
                        }
                    };
                    let connection =
                        watcher.watch(http.serve_connection(TokioIo::new(stream), service));
                    if let Err(e) = connection.await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    tracing::info!("shutting down: finishing in-flight requests");
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("in-flight requests did not finish in time; stopping anyway");
    }
    Ok(())
}

/// Resolves on SIGTERM or SIGINT. The handlers are installed when this is
/// called, not when the future is first polled, so call it before announcing
/// readiness.
#[cfg(unix)]
pub fn shutdown_signal() -> std::io::Result<impl Future<Output = ()> + Send> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        let name = tokio::select! {
            _ = terminate.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
        };
        tracing::info!(signal = name, "shutdown requested");
    })
}

/// Resolves on Ctrl-C.
#[cfg(not(unix))]
pub fn shutdown_signal() -> std::io::Result<impl Future<Output = ()> + Send> {
    Ok(async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments() {
        assert!(valid_segment("zone", "us-central1-a"));
        assert!(!valid_segment("zone", "uscentral1a"));
        assert!(valid_segment("name", "r1"));
        for bad in ["", "R1", "1r", "r-", "r_1", &"a".repeat(64)] {
            assert!(!valid_segment("name", bad), "{bad}");
        }
    }

    #[test]
    fn specs() {
        let parse = |v: Value| parse_spec(v.as_object().expect("object"));
        assert_eq!(
            parse(json!({ "count": 4, "machineType": "n2-standard-4" })),
            Ok(ReservationSpec {
                count: 4,
                in_use_count: 0,
                machine_type: "n2-standard-4".into(),
                status: "READY".into()
            })
        );
        for bad in [
            json!({ "machineType": "n2" }),
            json!({ "count": "4", "machineType": "n2" }),
            json!({ "count": -1, "machineType": "n2" }),
            json!({ "count": 1.5, "machineType": "n2" }),
            json!({ "count": 1, "inUseCount": 2, "machineType": "n2" }),
            json!({ "count": 1 }),
            json!({ "count": 1, "machineType": "" }),
            json!({ "count": 1, "machineType": "n2", "status": "ready" }),
            json!({ "count": 1, "machineType": "n2", "zone": "x" }),
        ] {
            assert!(parse(bad.clone()).is_err(), "{bad}");
        }
    }
}
