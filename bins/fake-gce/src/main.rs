//! `fake-gce`: the Compute Engine reservations API double (see the library docs).
//!
//! Env: `BC_FAKE_GCE_LISTEN` (default `127.0.0.1:8085`; port 0 picks a free
//! one), `BC_FAKE_GCE_TOKEN` (optional: require this bearer token on reads),
//! `RUST_LOG` (default `info`; logs go to stderr). When ready it prints one
//! line to stdout: `fake-gce listening on http://ADDR`.

use std::io::Write;
use std::net::SocketAddr;

use anyhow::Context;
use fake_gce::{DEFAULT_LISTEN, FakeGce, FakeGceConfig};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();

    let listen = std::env::var("BC_FAKE_GCE_LISTEN").unwrap_or_else(|_| DEFAULT_LISTEN.to_owned());
    let addr: SocketAddr = listen
        .parse()
        .with_context(|| format!("BC_FAKE_GCE_LISTEN={listen:?} is not an ip:port address"))?;
    let config = FakeGceConfig {
        required_token: std::env::var("BC_FAKE_GCE_TOKEN")
            .ok()
            .filter(|t| !t.is_empty()),
    };

    let shutdown = fake_gce::shutdown_signal().context("installing signal handlers")?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let local = listener.local_addr().context("reading the bound address")?;
    if !local.ip().is_loopback() {
        tracing::warn!(%local, "fake-gce is meant for loopback; it has no real authentication");
    }
    tracing::info!(%local, token_required = config.required_token.is_some(), "fake-gce ready");
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "fake-gce listening on http://{local}").context("writing the ready line")?;
    stdout.flush().context("writing the ready line")?;
    drop(stdout);

    fake_gce::serve(listener, FakeGce::new(config), shutdown).await?;
    tracing::info!("fake-gce stopped");
    Ok(())
}
