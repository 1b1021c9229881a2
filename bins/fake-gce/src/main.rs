//! `fake-gce`: the Compute Engine reservations API double (see the library
//! docs for every endpoint).
//!
//! Env: `BC_FAKE_GCE_LISTEN` (default `127.0.0.1:8085`; port 0 picks a free
//! one), `BC_FAKE_GCE_TOKEN` (optional: accept this static bearer token on
//! Compute Engine calls), `BC_FAKE_GCE_REQUIRE_AUTH` (`1`/`true`: Compute
//! Engine calls need a token this fake issued, of the `compute` scope for VM
//! changes), `BC_FAKE_GCE_TOKEN_TTL_S` (issued tokens' lifetime, 1 to
//! 31536000 s, default 3600), `BC_FAKE_GCE_TLS_CERT` and `BC_FAKE_GCE_TLS_KEY`
//! (PEM files; both or neither: serve HTTPS), `BC_FAKE_GCE_OPERATION_POLLS`
//! (reads of a zone operation until it is `DONE`, 0 to 1000, default 1),
//! `RUST_LOG` (default `info`;
//! logs go to stderr). When ready it prints one line to stdout:
//! `fake-gce listening on http://ADDR` (`https://` with TLS).

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use fake_gce::{
    DEFAULT_LISTEN, DEFAULT_OPERATION_POLLS, DEFAULT_TOKEN_TTL, FakeGce, FakeGceConfig,
    MAX_TOKEN_TTL_S, TlsIdentity,
};
use tracing_subscriber::EnvFilter;

/// A variable's value, `None` when unset or empty.
fn var(name: &str) -> anyhow::Result<Option<String>> {
    match std::env::var(name) {
        Ok(v) if v.is_empty() => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => bail!("{name} is not valid UTF-8"),
    }
}

fn config_from_env() -> anyhow::Result<FakeGceConfig> {
    let require_auth = match var("BC_FAKE_GCE_REQUIRE_AUTH")?.as_deref() {
        None | Some("0" | "false") => false,
        Some("1" | "true") => true,
        Some(other) => bail!("BC_FAKE_GCE_REQUIRE_AUTH={other:?} must be 1, true, 0 or false"),
    };
    let token_ttl = match var("BC_FAKE_GCE_TOKEN_TTL_S")? {
        None => DEFAULT_TOKEN_TTL,
        Some(s) => match s.parse::<u64>() {
            Ok(n) if (1..=MAX_TOKEN_TTL_S).contains(&n) => Duration::from_secs(n),
            _ => bail!(
                "BC_FAKE_GCE_TOKEN_TTL_S={s:?} must be a whole number of seconds \
                 from 1 to {MAX_TOKEN_TTL_S}"
            ),
        },
    };
    let tls = match (var("BC_FAKE_GCE_TLS_CERT")?, var("BC_FAKE_GCE_TLS_KEY")?) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some(
            TlsIdentity::from_files(Path::new(&cert), Path::new(&key))
                .context("BC_FAKE_GCE_TLS_CERT / BC_FAKE_GCE_TLS_KEY")?,
        ),
        (Some(_), None) => bail!("BC_FAKE_GCE_TLS_CERT is set but BC_FAKE_GCE_TLS_KEY is not"),
        (None, Some(_)) => bail!("BC_FAKE_GCE_TLS_KEY is set but BC_FAKE_GCE_TLS_CERT is not"),
    };
    Ok(FakeGceConfig {
        required_token: var("BC_FAKE_GCE_TOKEN")?,
        require_auth,
        token_ttl,
        tls,
    })
}

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
    let config = config_from_env()?;
    let operation_polls = match var("BC_FAKE_GCE_OPERATION_POLLS")? {
        None => DEFAULT_OPERATION_POLLS,
        Some(s) => match s.parse::<u32>() {
            Ok(n) if n <= 1000 => n,
            _ => bail!("BC_FAKE_GCE_OPERATION_POLLS={s:?} must be a whole number from 0 to 1000"),
        },
    };

    let shutdown = fake_gce::shutdown_signal().context("installing signal handlers")?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let local = listener.local_addr().context("reading the bound address")?;
    if !local.ip().is_loopback() {
        tracing::warn!(%local, "fake-gce is meant for loopback; it has no real authentication");
    }
    let fake = FakeGce::new(config.clone()).with_operation_polls(operation_polls);
    tracing::info!(
        %local,
        token_required = config.required_token.is_some(),
        require_auth = config.require_auth,
        token_ttl_s = config.token_ttl.as_secs(),
        tls = config.tls.is_some(),
        operation_polls,
        "fake-gce ready"
    );
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "fake-gce listening on {}://{local}", fake.scheme())
        .context("writing the ready line")?;
    stdout.flush().context("writing the ready line")?;
    drop(stdout);

    fake_gce::serve(listener, fake, shutdown).await?;
    tracing::info!("fake-gce stopped");
    Ok(())
}
