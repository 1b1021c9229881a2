//! The API server: hyper front, method registry, handlers.

pub mod app;
pub mod audit;
pub mod console;
pub mod error;
pub mod gate;
pub mod handlers;
pub mod metrics;
pub mod rate;
pub mod registry;
pub mod schema;
pub mod server;
pub mod wire;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use providers::policy::ProviderPolicy;
use storage::Clock;
use tokio::net::TcpListener;

/// Process configuration (contract 8.1), read from the environment.
#[derive(Debug, Clone)]
pub struct Config {
    /// `DATABASE_URL`.
    pub database_url: String,
    /// `BC_LISTEN` (default `127.0.0.1:8080`).
    pub listen: String,
    /// `BC_ROOT_TENANT` (default `root`).
    pub root_tenant: storage::ids::TenantId,
    /// `BC_CLOCK` (default `system`).
    pub clock: Clock,
    /// `BC_BOOTSTRAP_TOKEN` (optional).
    pub bootstrap_token: Option<String>,
    /// `BC_DB_POOL_SIZE` (default 16).
    pub pool_size: usize,
    /// `BC_DB_PREPARED_STATEMENTS` (`on` by default; `off` behind a pooler
    /// in transaction mode, docs/operations.md "PgBouncer").
    pub prepared_statements: storage::db::PreparedStatements,
    /// What provider accounts may reach (`BC_PROVIDER_ENDPOINTS`,
    /// `BC_CREDENTIAL_ENV`, `BC_CREDENTIAL_DIR`; contract 3.5).
    pub provider_policy: Arc<ProviderPolicy>,
    /// How adapters reach providers: `BC_PROVIDER_CA_FILE`,
    /// `GCE_METADATA_HOST` (contract 7).
    pub provider_options: providers::gce::GceProviderOptions,
    /// The secret store's keys: `BC_SECRETS_KEY`, `BC_SECRETS_OLD_KEYS`
    /// (contract 3.9).
    pub keyring: storage::crypto::Keyring,
    /// The HTTP limits (contract 1.7): `BC_HTTP_HEADER_TIMEOUT_MS`,
    /// `BC_HTTP_BODY_TIMEOUT_MS`, `BC_HTTP_WRITE_TIMEOUT_MS`,
    /// `BC_HTTP_MAX_CONNECTIONS`, `BC_HTTP_SHUTDOWN_GRACE_MS`.
    pub http: server::Limits,
    /// The request rates (contract 1.7 r4): `BC_TENANT_RATE`,
    /// `BC_TENANT_BURST`, `BC_ROOT_RATE`, `BC_ROOT_BURST`, `BC_ANON_RATE`,
    /// `BC_ANON_BURST`.
    pub rates: rate::Rates,
    /// `BC_METRICS_LISTEN`: when set, `/metrics` is served on this address
    /// and not on the API's (contract 8.1).
    pub metrics_listen: Option<String>,
    /// `BC_MAX_ACCOUNTS_PER_TENANT` (default 20): the most provider accounts
    /// a tenant other than root may have (contract 1.7).
    pub max_accounts_per_tenant: i64,
    /// `BC_WEBHOOK_ENDPOINTS`: origins other tenants' webhooks may name
    /// beyond the https rule and the address guard (contract 3.13).
    pub webhook_endpoints: providers::Origins,
    /// `BC_SCAN_TIMEOUT_MS` (default 60000): the longest an explicit
    /// `providerAccounts.scan` waits for its listing, as the worker's scans.
    pub scan_timeout: Duration,
}

/// A positive number of milliseconds from `name`, or `default`.
fn millis(name: &str, default: Duration) -> anyhow::Result<Duration> {
    match std::env::var(name).ok().filter(|v| !v.is_empty()) {
        None => Ok(default),
        Some(v) => match v.parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
            _ => anyhow::bail!("{name} must be a positive number of milliseconds, not {v:?}"),
        },
    }
}

impl server::Limits {
    /// The limits from the environment, defaults for what is not set.
    pub fn from_env() -> anyhow::Result<server::Limits> {
        let d = server::Limits::default();
        let max_connections = match std::env::var("BC_HTTP_MAX_CONNECTIONS")
            .ok()
            .filter(|v| !v.is_empty())
        {
            None => d.max_connections,
            Some(v) => match v.parse::<usize>() {
                Ok(n) if n > 0 => n,
                _ => anyhow::bail!("BC_HTTP_MAX_CONNECTIONS must be a positive number, not {v:?}"),
            },
        };
        Ok(server::Limits {
            header_timeout: millis("BC_HTTP_HEADER_TIMEOUT_MS", d.header_timeout)?,
            body_timeout: millis("BC_HTTP_BODY_TIMEOUT_MS", d.body_timeout)?,
            write_timeout: millis("BC_HTTP_WRITE_TIMEOUT_MS", d.write_timeout)?,
            max_connections,
            shutdown_grace: millis("BC_HTTP_SHUTDOWN_GRACE_MS", d.shutdown_grace)?,
        })
    }
}

impl Config {
    /// Reads the configuration from the environment.
    pub fn from_env() -> anyhow::Result<Config> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let clock = var("BC_CLOCK").unwrap_or_else(|| "system".into());
        Ok(Config {
            database_url: var("DATABASE_URL").context("DATABASE_URL is required")?,
            listen: var("BC_LISTEN").unwrap_or_else(|| "127.0.0.1:8080".into()),
            root_tenant: storage::ids::TenantId::parse(
                &var("BC_ROOT_TENANT").unwrap_or_else(|| "root".into()),
            )
            .context("BC_ROOT_TENANT")?,
            clock: Clock::parse(&clock)
                .with_context(|| format!("BC_CLOCK must be system or manual, not {clock:?}"))?,
            bootstrap_token: var("BC_BOOTSTRAP_TOKEN"),
            pool_size: var("BC_DB_POOL_SIZE")
                .map(|v| v.parse())
                .transpose()
                .context("BC_DB_POOL_SIZE")?
                .unwrap_or(16),
            prepared_statements: storage::db::PreparedStatements::from_env()?,
            provider_policy: Arc::new(ProviderPolicy::from_env().context("the provider policy")?),
            provider_options: providers::gce::GceProviderOptions::from_env()
                .map_err(anyhow::Error::msg)?,
            keyring: storage::crypto::Keyring::from_env()?,
            http: server::Limits::from_env()?,
            rates: rate::Rates::from_env()?,
            scan_timeout: millis("BC_SCAN_TIMEOUT_MS", Duration::from_secs(60))?,
            metrics_listen: var("BC_METRICS_LISTEN"),
            max_accounts_per_tenant: match var("BC_MAX_ACCOUNTS_PER_TENANT") {
                None => 20,
                Some(v) => v.parse::<u32>().map(i64::from).with_context(|| {
                    format!("BC_MAX_ACCOUNTS_PER_TENANT must be a whole number, not {v:?}")
                })?,
            },
            webhook_endpoints: providers::Origins::from_env("BC_WEBHOOK_ENDPOINTS")?,
        })
    }
}

/// Migrates, bootstraps, binds and serves until SIGTERM/SIGINT.
pub async fn run(config: Config) -> anyhow::Result<()> {
    storage::db::set_prepared_statements(config.prepared_statements);
    let applied = storage::db::migrate(&config.database_url)
        .await
        .context("applying migrations")?;
    tracing::info!(applied = applied.len(), "migrations up to date");
    let pool = storage::db::pool(&config.database_url, config.pool_size)?;
    let cursors = {
        let mut conn = pool.get().await.context("connecting to the database")?;
        let now = config
            .clock
            .now(&mut conn)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        storage::db::single_write(&mut conn, async |conn| {
            storage::ops::tenancy::bootstrap(
                conn,
                &config.root_tenant,
                config.bootstrap_token.as_deref(),
                now,
            )
            .await
        })
        .await
        .map_err(|e| anyhow::anyhow!("bootstrap: {e}"))?;
        log_disallowed_accounts(&mut conn, &config).await?;
        storage::db::read_only(&mut conn, async |conn| {
            storage::cursor::CursorSealer::load(conn).await
        })
        .await
        .map_err(|e| anyhow::anyhow!("reading the cursor key: {e}"))?
    };
    let fd_limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let limits = match fd_limit {
        Some(n) => config.http.fitted_to(n),
        None => config.http,
    };
    if limits.max_connections < config.http.max_connections {
        tracing::warn!(
            configured = config.http.max_connections,
            fd_limit = fd_limit.unwrap_or_default(),
            max_connections = limits.max_connections,
            "BC_HTTP_MAX_CONNECTIONS lowered to fit the file descriptor limit (raise ulimit -n)"
        );
    }
    let app = Arc::new(app::App {
        metrics: metrics::Metrics::new(pool.clone()),
        metrics_elsewhere: config.metrics_listen.is_some(),
        pool,
        clock: config.clock,
        root_tenant: config.root_tenant.clone(),
        registry: registry::Registry::new(),
        provider_policy: config.provider_policy.clone(),
        providers: providers::policy_factory(
            config.root_tenant.as_str(),
            config.provider_policy.clone(),
            config.provider_options.clone(),
        ),
        keyring: config.keyring.clone(),
        cursors,
        max_accounts_per_tenant: config.max_accounts_per_tenant,
        webhook_endpoints: config.webhook_endpoints.clone(),
        scan_timeout: config.scan_timeout,
        scans: gate::TenantGate::default(),
        http: limits,
        rates: rate::Limiter::new(config.rates),
    });
    config.keyring.log_at_start();
    let listener = TcpListener::bind(&config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let addr = listener.local_addr()?;
    if let Some(listen) = &config.metrics_listen {
        let bound = metrics::serve(listen, app.clone()).await?;
        tracing::info!(addr = %bound, "metrics listening");
    }
    tracing::info!(
        %addr,
        clock = config.clock.as_str(),
        root = %config.root_tenant,
        max_connections = limits.max_connections,
        header_timeout_ms = limits.header_timeout.as_millis() as u64,
        body_timeout_ms = limits.body_timeout.as_millis() as u64,
        write_timeout_ms = limits.write_timeout.as_millis() as u64,
        rates = ?config.rates,
        "api-server listening"
    );
    // Tests and scripts read this line to find an ephemeral port.
    #[expect(
        clippy::print_stdout,
        reason = "the ready line is part of the process interface"
    )]
    {
        println!("api-server listening on http://{addr}");
    }
    server::serve(app, listener, shutdown_signal()).await;
    Ok(())
}

/// Resolves on SIGTERM or SIGINT.
/// Logs every stored account the provider policy no longer allows: they
/// stay unusable (each scan fails as a provider error) until fixed.
async fn log_disallowed_accounts(
    conn: &mut storage::db::Conn,
    config: &Config,
) -> anyhow::Result<()> {
    let refused = storage::db::read_only(conn, async |conn| {
        control::accounts::warn_disallowed(
            conn,
            config.root_tenant.as_str(),
            &config.provider_policy,
        )
        .await
    })
    .await
    .map_err(|e| anyhow::anyhow!("checking provider accounts: {e}"))?;
    tracing::info!(
        policy = ?config.provider_policy,
        disallowed_accounts = refused,
        "provider policy"
    );
    Ok(())
}

pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
