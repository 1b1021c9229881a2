//! The API server: hyper front, method registry, handlers; its
//! configuration in [`config`].

pub mod app;
pub mod audit;
pub mod config;
pub mod console;
pub mod error;
pub mod gate;
pub mod handlers;
pub mod metrics;
pub mod openapi;
pub mod rate;
pub mod registry;
pub mod schema;
pub mod server;
pub mod wire;

use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;

pub use config::Config;

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
        telemetry::config::log_disallowed_accounts(
            &mut conn,
            &config.root_tenant,
            &config.provider_policy,
        )
        .await?;
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
    server::serve(app, listener, telemetry::signals::shutdown()).await;
    Ok(())
}
