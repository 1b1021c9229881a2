//! A development and test double of the Compute Engine reservations API.
//!
//! It holds reservations in memory and serves, on loopback:
//!
//! - `GET /compute/v1/projects/{project}/aggregated/reservations?maxResults=&pageToken=`:
//!   the GCE read path (int64 counts as JSON strings, zones as full URLs,
//!   `NO_RESULTS_ON_PAGE` warnings, pages of `maxResults`, default and cap 500).
//!   When a token is configured, it requires `Authorization: Bearer <token>`.
//! - `PUT /fake/projects/{project}/zones/{zone}/reservations/{name}` with
//!   `{ count, inUseCount?, machineType, status? }`: create or replace (200, the
//!   stored reservation); `GET` and `DELETE` on the same path.
//! - `POST /fake/fail { count }`: the next `count` read calls answer 503.
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
//! The binary (`fake-gce`) wraps [`serve`]; embed it the same way in a test
//! harness if a process is not wanted.

mod store;

use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Body;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;

pub use store::{MAX_PAGE_SIZE, ReservationSpec};
use store::{PageError, Store};

/// Where the binary listens when `BC_FAKE_GCE_LISTEN` is not set.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8085";

const MAX_BODY_BYTES: usize = 1024 * 1024;
/// The longest delay `POST /fake/delay` accepts.
const MAX_DELAY_MS: u64 = 60_000;
/// How long in-flight requests may take to finish once shutdown starts.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How the fake behaves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FakeGceConfig {
    /// When set, read calls must carry `Authorization: Bearer <token>` (else 401).
    pub required_token: Option<String>,
}

/// The fake's state and request handling; clones share the state.
#[derive(Debug, Clone, Default)]
pub struct FakeGce {
    store: Arc<Mutex<Store>>,
    required_authorization: Option<Arc<str>>,
}

impl FakeGce {
    /// An empty fake.
    pub fn new(config: FakeGceConfig) -> Self {
        FakeGce {
            store: Arc::default(),
            required_authorization: config.required_token.map(|t| format!("Bearer {t}").into()),
        }
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        // The store is left consistent by every critical section, so a panic
        // elsewhere does not make it unusable.
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
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
        let mut store = self.store();
        if store.take_failure() {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "backendError",
                "fake-gce: injected failure (POST /fake/fail)",
            );
        }
        if let Some(expected) = &self.required_authorization {
            let sent = request
                .headers()
                .get(AUTHORIZATION)
                .map(HeaderValue::as_bytes);
            if sent != Some(expected.as_bytes()) {
                return error(
                    StatusCode::UNAUTHORIZED,
                    "authError",
                    "Request had invalid authentication credentials.",
                );
            }
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
        match store.aggregated_page(project, page_size, page_token) {
            Ok(page) => json_response(StatusCode::OK, &page),
            Err(PageError::BadToken) => error(
                StatusCode::BAD_REQUEST,
                "invalid",
                "Invalid value for field 'pageToken'.",
            ),
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
        if let Some(key) = body.keys().find(|k| k.as_str() != "count") {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid",
                &format!("unknown field '{key}'"),
            );
        }
        let Some(count) = body.get("count").and_then(Value::as_u64) else {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid",
                "'count' must be a non-negative integer",
            );
        };
        self.store().fail_next(count);
        json_response(StatusCode::OK, &json!({ "count": count }))
    }
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

async fn read_json<B>(request: Request<B>) -> Result<Map<String, Value>, Response<Full<Bytes>>>
where
    B: Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let bytes = match Limited::new(request.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid",
                "body over 1 MiB",
            ));
        }
        Err(_) => {
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
pub async fn serve(
    listener: TcpListener,
    fake: FakeGce,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new());
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
                let connection =
                    graceful.watch(http.serve_connection(TokioIo::new(stream), service));
                tokio::spawn(async move {
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
