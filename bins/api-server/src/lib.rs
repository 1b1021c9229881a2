//! The API server: hyper front, method registry, handlers.

pub mod app;
pub mod audit;
pub mod console;
pub mod error;
pub mod handlers;
pub mod metrics;
pub mod registry;
pub mod schema;
pub mod server;
pub mod views;

use std::sync::Arc;

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
    pub root_tenant: String,
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
    /// `BC_MAX_ACCOUNTS_PER_TENANT` (default 20): the most provider accounts
    /// a tenant other than root may have (contract 1.7).
    pub max_accounts_per_tenant: i64,
}

impl Config {
    /// Reads the configuration from the environment.
    pub fn from_env() -> anyhow::Result<Config> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let clock = var("BC_CLOCK").unwrap_or_else(|| "system".into());
        Ok(Config {
            database_url: var("DATABASE_URL").context("DATABASE_URL is required")?,
            listen: var("BC_LISTEN").unwrap_or_else(|| "127.0.0.1:8080".into()),
            root_tenant: var("BC_ROOT_TENANT").unwrap_or_else(|| "root".into()),
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
            max_accounts_per_tenant: match var("BC_MAX_ACCOUNTS_PER_TENANT") {
                None => 20,
                Some(v) => v.parse::<u32>().map(i64::from).with_context(|| {
                    format!("BC_MAX_ACCOUNTS_PER_TENANT must be a whole number, not {v:?}")
                })?,
            },
        })
    }
}

/// Sets up logging: `RUST_LOG` filters (default `info`), `RUST_LOG_FORMAT=json`
/// writes one JSON object per line.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let json = std::env::var("RUST_LOG_FORMAT").is_ok_and(|v| v == "json");
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init();
    } else {
        builder.init();
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
    {
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
    }
    let app = Arc::new(app::App {
        metrics: metrics::Metrics::new(pool.clone()),
        pool,
        clock: config.clock,
        root_tenant: config.root_tenant.clone(),
        registry: registry::Registry::new(),
        provider_policy: config.provider_policy.clone(),
        providers: providers::policy_factory(
            &config.root_tenant,
            config.provider_policy.clone(),
            config.provider_options.clone(),
        ),
        keyring: config.keyring.clone(),
        max_accounts_per_tenant: config.max_accounts_per_tenant,
    });
    config.keyring.log_at_start();
    let listener = TcpListener::bind(&config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let addr = listener.local_addr()?;
    tracing::info!(
        %addr,
        clock = config.clock.as_str(),
        root = %config.root_tenant,
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
        storage::ops::accounts::warn_disallowed(conn, &config.root_tenant, &config.provider_policy)
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
