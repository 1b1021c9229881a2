//! The HTTP front: request ids, body limit, routing, authentication,
//! validation, authorization, dispatch to a handler, errors as JSON, metrics
//! and one log line per request.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{ApiError, Code};
use bytes::Bytes;
use http::{HeaderValue, Method as HttpMethod, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use iam_check::{AccessRequest, Decision};
use serde_json::Value;
use storage::Actor;
use storage::ids::TenantId;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::{Instrument, info, info_span, warn};

use crate::app::App;
use crate::metrics::Refused;
use crate::rate::RetryAfter;
use crate::registry::{Call, Method, Reply};

/// Request bodies above this are refused with 413.
pub const MAX_BODY: usize = 1024 * 1024;

type Resp = Response<Full<Bytes>>;

/// The HTTP limits of contract 1.7: what one client may hold of the
/// server, so that a stalled or flooding client cannot starve the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Time to send the request head, from the connection's accept or the
    /// end of its previous answer (`BC_HTTP_HEADER_TIMEOUT_MS`, 10 s).
    pub header_timeout: Duration,
    /// Time to send the body once the head is in
    /// (`BC_HTTP_BODY_TIMEOUT_MS`, 30 s).
    pub body_timeout: Duration,
    /// Time an answer may make no progress (a client that does not read
    /// it) before the connection is closed (`BC_HTTP_WRITE_TIMEOUT_MS`,
    /// 30 s; contract 1.7 r4).
    pub write_timeout: Duration,
    /// Connections open at once; the next ones wait in the listen backlog
    /// (`BC_HTTP_MAX_CONNECTIONS`, 4096, lowered to fit the process's file
    /// descriptor limit).
    pub max_connections: usize,
    /// How long a shutdown waits for in-flight requests before it closes
    /// the connections left (`BC_HTTP_SHUTDOWN_GRACE_MS`, 10 s).
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            max_connections: 4096,
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// File descriptors kept out of the connection cap: the database pool, the
/// listener, logs, provider calls and the runtime's own.
const RESERVED_FDS: u64 = 128;

impl Limits {
    /// The connection cap that fits `fd_limit` (the soft `RLIMIT_NOFILE`):
    /// a cap above it would fail accepts with `EMFILE` and starve the
    /// database pool of sockets instead of leaving clients in the backlog.
    pub fn fitted_to(mut self, fd_limit: u64) -> Limits {
        let room = fd_limit.saturating_sub(RESERVED_FDS).max(16);
        self.max_connections = self
            .max_connections
            .min(usize::try_from(room).unwrap_or(usize::MAX));
        self
    }
}

/// Serves until `shutdown` resolves, then finishes in-flight requests for at
/// most [`Limits::shutdown_grace`] and closes the connections left.
pub async fn serve(
    app: Arc<App>,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let limits = app.http;
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        // A client that half-closes its side after sending its request (some
        // HTTP/1 clients and scripts do) still gets its answer (contract 8.1).
        .half_close(true)
        // The head's deadline runs from the start of each read of a head: a
        // client that connects and sends nothing, or half a head, is closed.
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    app.metrics.set_max_connections(limits.max_connections);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        // A slot first: at the cap, new clients wait in the listen backlog
        // rather than take file descriptors the open ones need.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            () = &mut shutdown => break,
        };
        // An accept error backs off instead of spinning (contract 1.7).
        let (stream, peer) = tokio::select! {
            accepted = telemetry::listener::accept(&listener, || app.metrics.accept_failed()) => {
                accepted
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            () = &mut shutdown => break,
        };
        let stream = telemetry::listener::prepare(stream, limits.write_timeout);
        let served = app.clone();
        let service = service_fn(move |req| {
            let app = served.clone();
            async move { Ok::<_, Infallible>(handle(app, req, peer).await) }
        });
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        let app = app.clone();
        connections.spawn(async move {
            let _open = app.metrics.connection();
            match conn.await {
                Err(e) if e.is_timeout() => {
                    app.metrics.client_timeout("head");
                    info!(%peer, "client closed: no request head within the header timeout");
                }
                Err(e) if telemetry::listener::is_write_timeout(&e) => {
                    app.metrics.client_timeout("write");
                    info!(
                        %peer,
                        "client closed: it did not read its answer within the write timeout"
                    );
                }
                Err(e) => tracing::debug!(error = %e, %peer, "connection ended with an error"),
                Ok(()) => {}
            }
            drop(slot);
        });
    }
    drop(listener);
    info!(
        open_connections = connections.len(),
        grace_ms = limits.shutdown_grace.as_millis() as u64,
        "shutting down: finishing in-flight requests"
    );
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        warn!(
            closed = connections.len(),
            "connections still open after the shutdown grace period: closed"
        );
    }
    connections.shutdown().await;
    info!("stopped");
}

fn request_id(req: &Request<Incoming>) -> String {
    req.headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
        .unwrap_or_else(storage::ids::new_request_id)
}

/// Handles one request.
pub async fn handle(app: Arc<App>, req: Request<Incoming>, peer: SocketAddr) -> Resp {
    let start = Instant::now();
    let rid = request_id(&req);
    let path = req.uri().path().to_owned();
    let span = info_span!("request", request_id = %rid, path = %path);
    async move {
        let in_flight = app.metrics.in_flight();
        let (label, mut resp, log) = route(&app, req, &rid, peer).await;
        drop(in_flight);
        let code = resp
            .extensions()
            .get::<ErrorCode>()
            .map_or("OK", |c| c.0.as_str());
        let elapsed = start.elapsed();
        app.metrics.observe(&label, code, elapsed);
        if let Ok(v) = HeaderValue::from_str(&rid) {
            resp.headers_mut().insert("x-request-id", v);
        }
        if !matches!(label.as_str(), "healthz" | "readyz" | "metrics") {
            info!(
                method = %label,
                status = resp.status().as_u16(),
                code,
                elapsed_ms = elapsed.as_secs_f64() * 1000.0,
                tenant = log.tenant.as_deref().unwrap_or(""),
                key = log.key_id.as_deref().unwrap_or(""),
                peer = %peer,
                "request"
            );
        }
        resp
    }
    .instrument(span)
    .await
}

#[derive(Clone, Copy)]
struct ErrorCode(Code);

#[derive(Default)]
struct LogFields {
    tenant: Option<String>,
    key_id: Option<String>,
}

fn json_response(status: StatusCode, body: &Value) -> Resp {
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn raw_json_response(status: StatusCode, body: String) -> Resp {
    bytes_json_response(status, Bytes::from(body))
}

fn bytes_json_response(status: StatusCode, body: Bytes) -> Resp {
    let mut resp = Response::new(Full::new(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// The JSON envelope of an error, with the code kept for metrics; a
/// `RATE_LIMITED` answer carries `Retry-After` (whole seconds, rounded up).
pub fn error_response(e: &ApiError) -> Resp {
    let status =
        StatusCode::from_u16(e.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = json_response(status, &e.to_json());
    resp.extensions_mut().insert(ErrorCode(e.code));
    if e.code == Code::RateLimited
        && let Some(ms) = e.details.get("retryAfterMs").and_then(Value::as_u64)
    {
        resp.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(ms.div_ceil(1000).max(1)),
        );
    }
    resp
}

/// `RATE_LIMITED` (contract 1.2 r4): how long to wait, in whole ms.
fn rate_limited(retry: RetryAfter) -> ApiError {
    ApiError::new(
        Code::RateLimited,
        format!(
            "too many requests: the rate allows the next one in {} ms",
            retry.millis()
        ),
    )
    .with("retryAfterMs", retry.millis())
}

/// The paths anyone may GET (contract 1.1), limited per client address,
/// and their labels in the request metrics.
const OPEN_PATHS: [(&str, &str); 5] = [
    ("/healthz", "healthz"),
    ("/readyz", "readyz"),
    ("/metrics", "metrics"),
    ("/api/openapi.json", "openapi"),
    ("/api/compute/methods", "methods"),
];

async fn route(
    app: &Arc<App>,
    req: Request<Incoming>,
    rid: &str,
    peer: SocketAddr,
) -> (String, Resp, LogFields) {
    let path = req.uri().path().to_owned();
    let is_get = req.method() == HttpMethod::GET;
    let fixed = |label: &str, resp: Resp| (label.to_owned(), resp, LogFields::default());
    if is_get
        && let Some((_, label)) = OPEN_PATHS.iter().find(|(p, _)| *p == path)
        && let Err(retry) = app.rates.anonymous(peer.ip())
    {
        app.metrics.rate_limited(Refused::Anonymous);
        return fixed(label, error_response(&rate_limited(retry)));
    }
    let not_allowed = |label: &str, allowed: &'static str| {
        let mut r = error_response(&ApiError::new(
            Code::MethodNotAllowed,
            format!("use {allowed} on {label}"),
        ));
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(allowed));
        (label.to_owned(), r, LogFields::default())
    };
    match path.as_str() {
        "/healthz" if is_get => fixed(
            "healthz",
            json_response(StatusCode::OK, &serde_json::json!({ "status": "ok" })),
        ),
        "/readyz" if is_get => {
            let ready = storage::db::ready(&app.pool).await;
            let (status, body) = if ready {
                (StatusCode::OK, serde_json::json!({ "status": "ready" }))
            } else {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    serde_json::json!({ "status": "not ready" }),
                )
            };
            fixed("readyz", json_response(status, &body))
        }
        // With a listener of its own, the exposition is not on the API's.
        "/metrics" if app.metrics_elsewhere => fixed(
            "unknown",
            error_response(&ApiError::new(
                Code::NotFound,
                format!("no such path: {path}"),
            )),
        ),
        "/metrics" if is_get => {
            let accept = req
                .headers()
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok());
            let format = telemetry::Format::negotiate(accept);
            let mut resp = Response::new(Full::new(Bytes::from(app.metrics.render(format))));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(format.content_type()),
            );
            fixed("metrics", resp)
        }
        "/api/openapi.json" if is_get => fixed(
            "openapi",
            bytes_json_response(StatusCode::OK, app.registry.openapi_json()),
        ),
        "/api/compute/methods" if is_get => fixed(
            "methods",
            bytes_json_response(StatusCode::OK, app.registry.list_json()),
        ),
        "/healthz" | "/readyz" | "/metrics" | "/api/openapi.json" | "/api/compute/methods" => {
            not_allowed(&path, "GET")
        }
        p if crate::console::owns(p) => fixed("console", crate::console::serve(req.method(), p)),
        _ => match app.registry.get(&path) {
            Some(m) if req.method() == HttpMethod::POST => {
                let mut log = LogFields::default();
                let mut trail = crate::audit::Trail::of(m);
                let result = call(app, m, req, peer, &mut log, &mut trail).await;
                trail.record(app, rid, &result).await;
                let resp = match result {
                    Ok(reply) => raw_json_response(StatusCode::OK, reply.0),
                    Err(e)
                        if e.details.get("reason").and_then(Value::as_str)
                            == Some(BODY_TIMEOUT) =>
                    {
                        // The rest of the body may never come: answer and
                        // close rather than wait to read past it.
                        let mut r = error_response(&e);
                        r.headers_mut()
                            .insert(header::CONNECTION, HeaderValue::from_static("close"));
                        r
                    }
                    Err(e) => error_response(&e),
                };
                (m.name(), resp, log)
            }
            Some(m) => not_allowed(&m.name(), "POST"),
            None => fixed(
                "unknown",
                error_response(&ApiError::new(
                    Code::NotFound,
                    format!("no such path: {path}"),
                )),
            ),
        },
    }
}

/// `details.reason` of a body that did not arrive within its deadline.
const BODY_TIMEOUT: &str = "timeout";

/// Bodies between [`MAX_BODY`] and this are read and discarded before the 413
/// is sent, for at most [`DRAIN_TIME`]: closing a connection with unread
/// request bytes resets it, and the client would lose the answer.
const DRAIN_LIMIT: u64 = 16 * 1024 * 1024;
const DRAIN_TIME: Duration = Duration::from_secs(2);

/// Reads a request body of at most [`MAX_BODY`] bytes (its declared length
/// was checked before); `None` when more is sent, the rest discarded by
/// [`drain`].
async fn read_body(mut body: Incoming) -> Result<Option<Bytes>, ApiError> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|_| ApiError::invalid("", "body", "the request body could not be read"))?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > MAX_BODY {
                drain(body).await;
                return Ok(None);
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(Some(Bytes::from(out)))
}

fn bearer(req: &Request<Incoming>) -> Option<String> {
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, secret) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let secret = secret.trim();
    (!secret.is_empty()).then(|| secret.to_owned())
}

/// Reads and discards what comes of a body not to be read, for at most
/// [`DRAIN_TIME`] and [`DRAIN_LIMIT`] bytes: closing a connection with
/// unread request bytes resets it, and the client would lose the answer.
/// Nothing is kept; returns whether more than [`MAX_BODY`] came (the
/// answer is then 413, the size being checked first, contract 1.2).
async fn drain(mut body: Incoming) -> bool {
    let until = tokio::time::Instant::now() + DRAIN_TIME;
    let mut seen: u64 = 0;
    while seen <= DRAIN_LIMIT {
        match tokio::time::timeout_at(until, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                seen += frame.data_ref().map_or(0, |d| d.len() as u64);
            }
            _ => break,
        }
    }
    seen > MAX_BODY as u64
}

fn too_large() -> ApiError {
    ApiError::new(Code::PayloadTooLarge, "the request body is over 1 MiB").with("limit", MAX_BODY)
}

/// A request refused before its body is read (no key, or an unknown one):
/// counted against its client address's rate (`RATE_LIMITED` once over
/// it, contract 1.7 r4), its body discarded, never buffered.
async fn refuse_unauthenticated(
    app: &App,
    peer: SocketAddr,
    body: Incoming,
    refusal: ApiError,
) -> ApiError {
    let refusal = match app.rates.anonymous(peer.ip()) {
        Ok(()) => refusal,
        Err(retry) => {
            app.metrics.rate_limited(Refused::Anonymous);
            rate_limited(retry)
        }
    };
    if drain(body).await {
        return too_large();
    }
    refusal
}

/// The checks of contract 1.2 in order: size, authentication, the rate,
/// shape, permission; then the handler (existence and the method's own
/// rules). The body is read only once the key is known valid and its
/// tenant within its rate (contract 1.7 r4), and without holding a
/// database connection while it comes.
async fn call(
    app: &Arc<App>,
    m: &Method,
    req: Request<Incoming>,
    peer: SocketAddr,
    log: &mut LogFields,
    trail: &mut crate::audit::Trail,
) -> Result<Reply, ApiError> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let secret = bearer(&req);
    let body = req.into_body();
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        if declared.is_some_and(|n| n <= DRAIN_LIMIT) {
            drain(body).await;
        }
        return Err(too_large());
    }
    let Some(secret) = secret else {
        let missing = ApiError::new(
            Code::Unauthenticated,
            "missing credentials: send Authorization: Bearer <api key>",
        );
        return Err(refuse_unauthenticated(app, peer, body, missing).await);
    };
    // The key's lookup and the clock's read (a row under the manual clock)
    // go in one round trip: pipelined on one connection (between BEGIN and
    // COMMIT behind a transaction pooler, `storage::db::read_only`).
    let mut conn = app.conn().await?;
    let (caller, now) = storage::db::read_only(&mut conn, async |conn| {
        let conn = &*conn;
        futures::try_join!(
            storage::ops::tenancy::authenticate(conn, &secret),
            app.clock.now_shared(conn)
        )
    })
    .await?;
    let Some(caller) = caller else {
        drop(conn);
        let unknown = ApiError::new(Code::Unauthenticated, "unknown or revoked API key");
        return Err(refuse_unauthenticated(app, peer, body, unknown).await);
    };
    log.key_id = Some(caller.key_id.clone());
    trail.caller(&caller);
    let caller_tenant = caller.principal.tenant_id.as_str();
    let is_root = caller_tenant == app.root_tenant.as_str();
    if let Err(retry) = app.rates.tenant(caller_tenant, is_root) {
        drop(conn);
        app.metrics.rate_limited(if is_root {
            Refused::Root
        } else {
            Refused::Tenant(caller_tenant)
        });
        log.tenant = Some(caller_tenant.to_owned());
        if drain(body).await {
            return Err(too_large());
        }
        return Err(rate_limited(retry));
    }
    // The body's deadline; the connection goes back to the pool while a
    // body still on its way comes (a slow upload never holds the
    // database), and the handler takes another.
    let reading = tokio::time::timeout(app.http.body_timeout, read_body(body));
    tokio::pin!(reading);
    let mut held = Some(conn);
    let read = match futures::poll!(&mut reading) {
        std::task::Poll::Ready(read) => read,
        std::task::Poll::Pending => {
            held = None;
            reading.await
        }
    };
    let body = read
        .map_err(|_| {
            app.metrics.client_timeout("body");
            ApiError::invalid(
                "body",
                BODY_TIMEOUT,
                format!(
                    "the request body was not received within {} ms",
                    app.http.body_timeout.as_millis()
                ),
            )
        })??
        .ok_or_else(too_large)?;

    let input: Value = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            Code::InvalidInput,
            format!("the body is not valid JSON: {e}"),
        )
        .with("reason", "json")
    })?;
    m.input().check(&input)?;
    trail.input(&input);
    // The schema checked it; parsed once here, the acting tenant is typed
    // from now on.
    let tenant = input
        .get("tenantId")
        .and_then(Value::as_str)
        .and_then(|t| TenantId::parse(t).ok())
        .ok_or_else(|| ApiError::invalid("tenantId", "pattern", "not a tenant id"))?;
    log.tenant = Some(tenant.to_string());

    let account = input.get("accountId").and_then(Value::as_str);
    let decision = iam_check::decide(
        &caller.principal,
        &AccessRequest {
            tenant_id: tenant.as_str(),
            root_tenant: app.root_tenant.as_str(),
            permission: m.permission,
            tenant_rule: m.tenant_rule,
            account_id: account,
        },
    );
    if let Decision::Deny(reason) = decision {
        app.metrics.denied(reason.class());
        warn!(method = %m.name(), key = %caller.key_id, %reason, "access denied");
        return Err(ApiError::access_denied(format!(
            "{} is not allowed to call {}",
            caller.key_id,
            m.name()
        )));
    }
    (m.endpoint.handler)(Call {
        app: app.clone(),
        caller,
        now,
        actor: Actor::new(tenant, app.root_tenant.clone()),
        input,
        name: m.name(),
        audit: trail.marks(),
        held: std::sync::Mutex::new(held),
    })
    .await
}
