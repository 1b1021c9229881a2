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
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use iam_check::{AccessRequest, Decision};
use serde_json::Value;
use tokio::net::TcpListener;
use tracing::{Instrument, info, info_span, warn};

use crate::app::App;
use crate::registry::{Call, Method, Reply};
use crate::schema::validate_object;

/// Request bodies above this are refused with 413.
pub const MAX_BODY: usize = 1024 * 1024;

type Resp = Response<Full<Bytes>>;

/// Serves until `shutdown` resolves, then finishes in-flight requests.
pub async fn serve(
    app: Arc<App>,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // A client that half-closes its side after sending its request (some
    // HTTP/1 clients and scripts do) still gets its answer (contract 8.1).
    builder.http1().half_close(true);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(v) => v,
                    Err(e) => { warn!(error = %e, "accept failed"); continue; }
                };
                let _ = stream.set_nodelay(true);
                let app = app.clone();
                let service = service_fn(move |req| {
                    let app = app.clone();
                    async move { Ok::<_, Infallible>(handle(app, req, peer).await) }
                });
                let conn = builder.serve_connection(TokioIo::new(stream), service).into_owned();
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => {
                info!("shutting down: finishing in-flight requests");
                break;
            }
        }
    }
    drop(listener);
    graceful.shutdown().await;
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
        let (label, mut resp, log) = route(&app, req, &rid).await;
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
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// The JSON envelope of an error, with the code kept for metrics.
pub fn error_response(e: &ApiError) -> Resp {
    let status =
        StatusCode::from_u16(e.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = json_response(status, &e.to_json());
    resp.extensions_mut().insert(ErrorCode(e.code));
    resp
}

async fn route(app: &Arc<App>, req: Request<Incoming>, rid: &str) -> (String, Resp, LogFields) {
    let path = req.uri().path().to_owned();
    let is_get = req.method() == HttpMethod::GET;
    let fixed = |label: &str, resp: Resp| (label.to_owned(), resp, LogFields::default());
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
        "/metrics" if is_get => {
            let mut resp = Response::new(Full::new(Bytes::from(app.metrics.render())));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(telemetry::CONTENT_TYPE),
            );
            fixed("metrics", resp)
        }
        "/api/openapi.json" if is_get => fixed(
            "openapi",
            json_response(StatusCode::OK, &app.registry.openapi()),
        ),
        "/api/compute/methods" if is_get => fixed(
            "methods",
            json_response(StatusCode::OK, &app.registry.list()),
        ),
        "/healthz" | "/readyz" | "/metrics" | "/api/openapi.json" | "/api/compute/methods" => {
            not_allowed(&path, "GET")
        }
        p if crate::console::owns(p) => fixed("console", crate::console::serve(req.method(), p)),
        _ => match app.registry.get(&path) {
            Some(m) if req.method() == HttpMethod::POST => {
                let mut log = LogFields::default();
                let mut trail = crate::audit::Trail::of(m);
                let result = call(app, m, req, &mut log, &mut trail).await;
                trail.record(app, rid, &result).await;
                let resp = match result {
                    Ok(reply) => raw_json_response(StatusCode::OK, reply.0),
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

/// Bodies between [`MAX_BODY`] and this are read and discarded before the 413
/// is sent, for at most [`DRAIN_TIME`]: closing a connection with unread
/// request bytes resets it, and the client would lose the answer.
const DRAIN_LIMIT: u64 = 16 * 1024 * 1024;
const DRAIN_TIME: Duration = Duration::from_secs(2);

/// Reads a request body of at most [`MAX_BODY`] bytes; `None` when it is
/// larger (declared or sent).
async fn read_body(mut body: Incoming, declared: Option<u64>) -> Result<Option<Bytes>, ApiError> {
    let mut over = declared.is_some_and(|n| n > MAX_BODY as u64);
    if declared.is_some_and(|n| n > DRAIN_LIMIT) {
        return Ok(None);
    }
    let mut out = Vec::new();
    let mut seen: u64 = 0;
    let drain_until = tokio::time::Instant::now() + DRAIN_TIME;
    loop {
        let frame = if over {
            if seen > DRAIN_LIMIT {
                break;
            }
            match tokio::time::timeout_at(drain_until, body.frame()).await {
                Ok(f) => f,
                Err(_) => break,
            }
        } else {
            body.frame().await
        };
        match frame {
            None => break,
            Some(Err(_)) if over => break,
            Some(Err(_)) => {
                return Err(ApiError::invalid(
                    "",
                    "body",
                    "the request body could not be read",
                ));
            }
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    seen += data.len() as u64;
                    if !over {
                        if out.len() + data.len() > MAX_BODY {
                            over = true;
                            out = Vec::new();
                        } else {
                            out.extend_from_slice(&data);
                        }
                    }
                }
            }
        }
    }
    Ok((!over).then(|| Bytes::from(out)))
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

/// The checks of contract 1.2 in order: size, authentication, shape,
/// permission; then the handler (existence and the method's own rules).
async fn call(
    app: &Arc<App>,
    m: &Method,
    req: Request<Incoming>,
    log: &mut LogFields,
    trail: &mut crate::audit::Trail,
) -> Result<Reply, ApiError> {
    let too_large = || {
        ApiError::new(Code::PayloadTooLarge, "the request body is over 1 MiB")
            .with("limit", MAX_BODY)
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let secret = bearer(&req);
    let body = read_body(req.into_body(), declared)
        .await?
        .ok_or_else(too_large)?;

    let secret = secret.ok_or_else(|| {
        ApiError::new(
            Code::Unauthenticated,
            "missing credentials: send Authorization: Bearer <api key>",
        )
    })?;
    // The key's lookup and the clock's read (a row under the manual clock)
    // go in one round trip: pipelined on one connection (between BEGIN and
    // COMMIT behind a transaction pooler, `storage::db::read_only`).
    let (caller, now) = {
        let mut conn = app.conn().await?;
        storage::db::read_only(&mut conn, async |conn| {
            let conn = &*conn;
            futures::try_join!(
                storage::ops::tenancy::authenticate(conn, &secret),
                app.clock.now_shared(conn)
            )
        })
        .await?
    };
    let caller =
        caller.ok_or_else(|| ApiError::new(Code::Unauthenticated, "unknown or revoked API key"))?;
    log.key_id = Some(caller.key_id.clone());
    trail.caller(&caller);

    let input: Value = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            Code::InvalidInput,
            format!("the body is not valid JSON: {e}"),
        )
        .with("reason", "json")
    })?;
    validate_object(&input, m.fields(), "")?;
    trail.input(&input);
    let tenant = input
        .get("tenantId")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    log.tenant = Some(tenant.clone());

    let account = input.get("accountId").and_then(Value::as_str);
    let decision = iam_check::decide(
        &caller.principal,
        &AccessRequest {
            tenant_id: &tenant,
            root_tenant: &app.root_tenant,
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
        input,
        name: m.name(),
        audit: trail.marks(),
    })
    .await
}
