//! Serving on a listener (HTTP or HTTPS) and stopping gracefully.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::FakeGce;

/// How long in-flight requests may take to finish once shutdown starts.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How long a client may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `fake` on `listener` until `shutdown` completes, then stops
/// accepting and lets in-flight requests finish (for up to 10 s), then
/// writes its state file if it has one ([`FakeGce::with_state_file`]).
///
/// With [`FakeGceConfig::tls`](crate::FakeGceConfig::tls) set it speaks
/// HTTPS only; a connection whose handshake fails (or takes over 10 s) is
/// dropped and serving goes on.
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
    // With a state file: the world as it is at the stop.
    if let Err(e) = fake.save_state() {
        tracing::error!(error = %e, "the world at the stop is not kept for a restart");
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
