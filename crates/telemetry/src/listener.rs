//! A listener of its own for `GET /metrics` (`BC_METRICS_LISTEN`, contract
//! 8.1), so operators can keep the exposition off the public API listener.
//! It keeps the limits of the API's (contract 1.7) at a smaller scale: a
//! head deadline, a write deadline, a connection cap and an accept loop
//! that backs off. [`prepare`] readies an accepted connection for either
//! listener.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_io_timeout::TimeoutStream;

use crate::Format;

/// Renders the exposition in the format asked.
pub type Render = Arc<dyn Fn(Format) -> String + Send + Sync>;

/// Scrapers connected at once; more wait in the backlog.
const MAX_SCRAPERS: usize = 64;
/// Time to send a request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Time an answer may make no progress before the scraper is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a connection is silent before TCP keep-alive probes it, how
/// often it probes, and how many unanswered probes close it: a client gone
/// without a word (a host powered off, a dropped route) gives its slot back
/// within about two minutes instead of never.
const KEEPALIVE: (Duration, Duration, u32) = (Duration::from_secs(60), Duration::from_secs(10), 6);

/// An accepted connection as a server speaks over it: see [`prepare`].
pub type Prepared = Pin<Box<TimeoutStream<TcpStream>>>;

/// Readies an accepted connection (contract 1.7 r4): TCP keep-alive on,
/// Nagle off, and a write deadline: a write that makes no progress for
/// `write_timeout` (a client that does not read its answer, so the kernel's
/// buffers fill) fails with `TimedOut`, and the server closes the
/// connection. A client that reads, however slowly, makes progress and
/// keeps it.
pub fn prepare(stream: TcpStream, write_timeout: Duration) -> Prepared {
    let _ = stream.set_nodelay(true);
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE.0)
        .with_interval(KEEPALIVE.1)
        .with_retries(KEEPALIVE.2);
    if let Err(e) = socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive) {
        tracing::debug!(error = %e, "TCP keep-alive could not be set");
    }
    let mut stream = TimeoutStream::new(stream);
    stream.set_write_timeout(Some(write_timeout));
    Box::pin(stream)
}

/// Whether a connection ended because its client did not read its answer
/// for the write deadline of [`prepare`].
pub fn is_write_timeout(e: &hyper::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::TimedOut;
        }
        source = s.source();
    }
    false
}

/// Binds `listen` and serves `GET /metrics` there in the background (any
/// other path is 404, any other method 405); the bound address.
pub async fn serve(listen: &str, render: Render) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let slots = Arc::new(Semaphore::new(MAX_SCRAPERS));
        loop {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let (stream, _) = accept(&listener, || {}).await;
            let render = render.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let resp = answer(&render, req.method(), req.uri().path(), req.headers());
                    async move { Ok::<_, Infallible>(resp) }
                });
                let _ = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEAD_TIMEOUT)
                    .serve_connection(TokioIo::new(prepare(stream, WRITE_TIMEOUT)), service)
                    .await;
                drop(slot);
            });
        }
    });
    Ok(addr)
}

/// How long accepting waits after an accept error, doubling from the first
/// to the last while errors go on.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(5), Duration::from_secs(1));

/// The next connection of `listener`. An accept that fails (out of file
/// descriptors or kernel buffers) is logged, reported to `failed`, and
/// tried again after a wait that doubles from 5 ms to 1 s: retrying at once
/// would spin and log without end, while waiting lets open connections
/// finish and give their descriptors back.
pub async fn accept(
    listener: &TcpListener,
    failed: impl Fn(),
) -> (tokio::net::TcpStream, SocketAddr) {
    let mut backoff = ACCEPT_BACKOFF.0;
    loop {
        match listener.accept().await {
            Ok(accepted) => return accepted,
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    retry_in_ms = backoff.as_millis() as u64,
                    "accept failed"
                );
                failed();
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(ACCEPT_BACKOFF.1);
            }
        }
    }
}

fn answer(
    render: &Render,
    method: &Method,
    path: &str,
    headers: &hyper::HeaderMap,
) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (method, path) {
        (&Method::GET, "/metrics") => {
            let accept = headers.get(ACCEPT).and_then(|v| v.to_str().ok());
            let format = Format::negotiate(accept);
            (StatusCode::OK, format.content_type(), render(format))
        }
        (_, "/metrics") => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "use GET on /metrics\n".to_owned(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "only /metrics is served here\n".to_owned(),
        ),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}
