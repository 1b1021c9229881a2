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
//! `BC_FAKE_GCE_OPERATION_LATENCY_MS` (a zone operation is not `DONE` before
//! this much wall time: `20000`, or a range `10000-40000` drawn per
//! operation, each 0 to 3600000; default none), `BC_FAKE_GCE_WRITES_PER_MIN`
//! (mutating instance calls per project and wall-clock minute, 1 to
//! 1000000; default no limit), `BC_FAKE_GCE_CONCURRENT_OPERATIONS` (zone
//! operations not yet `DONE` per project, 1 to 1000000; default no limit;
//! beyond either limit a mutating call answers Google's `403
//! rateLimitExceeded`), `BC_FAKE_GCE_STATE` (a file the world is kept in
//! across restarts; unset: in memory only), `RUST_LOG` (default `info`; logs
//! go to stderr). When ready it prints one line to stdout: `fake-gce
//! listening on http://ADDR` (`https://` with TLS).

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use fake_gce::{
    DEFAULT_LISTEN, DEFAULT_OPERATION_POLLS, DEFAULT_TOKEN_TTL, FakeGce, FakeGceConfig,
    MAX_TOKEN_TTL_S, OperationLatency, TlsIdentity,
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

/// The most `BC_FAKE_GCE_WRITES_PER_MIN` and `BC_FAKE_GCE_CONCURRENT_OPERATIONS` take.
const MAX_QUOTA: u32 = 1_000_000;

/// A quota variable: unset or empty for none, else 1 to [`MAX_QUOTA`].
fn quota(name: &str) -> anyhow::Result<Option<u32>> {
    let Some(s) = var(name)? else {
        return Ok(None);
    };
    match s.parse::<u32>() {
        Ok(n) if (1..=MAX_QUOTA).contains(&n) && s.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(Some(n))
        }
        _ => bail!("{name}={s:?} must be a whole number from 1 to {MAX_QUOTA} (unset: no limit)"),
    }
}

/// The settings of the instances API: polls, latency and quotas.
fn instances_from_env(fake: FakeGce) -> anyhow::Result<FakeGce> {
    let operation_polls = match var("BC_FAKE_GCE_OPERATION_POLLS")? {
        None => DEFAULT_OPERATION_POLLS,
        Some(s) => match s.parse::<u32>() {
            Ok(n) if n <= 1000 => n,
            _ => bail!("BC_FAKE_GCE_OPERATION_POLLS={s:?} must be a whole number from 0 to 1000"),
        },
    };
    let mut fake = fake.with_operation_polls(operation_polls);
    let latency = match var("BC_FAKE_GCE_OPERATION_LATENCY_MS")? {
        None => None,
        Some(s) => Some(
            s.parse::<OperationLatency>()
                .map_err(|why| anyhow::anyhow!("BC_FAKE_GCE_OPERATION_LATENCY_MS={why}"))?,
        ),
    };
    if let Some(latency) = latency {
        fake = fake.with_operation_latency(latency.min_ms, latency.max_ms);
    }
    let writes_per_min = quota("BC_FAKE_GCE_WRITES_PER_MIN")?;
    if let Some(limit) = writes_per_min {
        fake = fake.with_writes_per_min(limit);
    }
    let concurrent_operations = quota("BC_FAKE_GCE_CONCURRENT_OPERATIONS")?;
    if let Some(limit) = concurrent_operations {
        fake = fake.with_concurrent_operations(limit);
    }
    tracing::info!(
        operation_polls,
        latency_ms = ?latency.map(|l| (l.min_ms, l.max_ms)),
        writes_per_min,
        concurrent_operations,
        "instances API settings"
    );
    Ok(fake)
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
    let fake = instances_from_env(FakeGce::new(config.clone()))?;
    // Before the listener: a world that cannot be read or kept stops the
    // start, with the variable named.
    let fake = match var("BC_FAKE_GCE_STATE")? {
        None => fake,
        Some(path) => fake.with_state_file(path).context("BC_FAKE_GCE_STATE")?,
    };

    let shutdown = fake_gce::shutdown_signal().context("installing signal handlers")?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let local = listener.local_addr().context("reading the bound address")?;
    if !local.ip().is_loopback() {
        tracing::warn!(%local, "fake-gce is meant for loopback; it has no real authentication");
    }
    tracing::info!(
        %local,
        token_required = config.required_token.is_some(),
        require_auth = config.require_auth,
        token_ttl_s = config.token_ttl.as_secs(),
        tls = config.tls.is_some(),
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
