//! The settings both servers read, with the same meaning: the database, the
//! clock, the provider policy and options, the secret store's keys, the
//! metrics listener and the webhooks' extra origins.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use providers::Origins;
use providers::gce::GceProviderOptions;
use providers::policy::{CREDENTIAL_DIR_VAR, CREDENTIAL_ENV_VAR, ENDPOINTS_VAR, ProviderPolicy};
use storage::Clock;
use storage::crypto::Keyring;
use storage::db::PreparedStatements;
use storage::ids::TenantId;

use super::values::{Checked, Durations};

/// `BC_WEBHOOK_ENDPOINTS`.
pub const WEBHOOK_ENDPOINTS_VAR: &str = providers::outbound::WEBHOOK_ENDPOINTS_VAR;

/// The settings both servers share, as given (`#[command(flatten)]` them).
#[derive(Clone, clap::Args)]
#[command(next_help_heading = "Shared by api-server and reconciler-worker")]
pub struct SharedArgs {
    /// PostgreSQL URL (required); `sslmode` (`disable`, `prefer`, `require`,
    /// `verify-ca`, `verify-full`) and `sslrootcert` as in libpq.
    #[arg(long, env = "DATABASE_URL", value_name = "URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// The platform operator's tenant.
    #[arg(long, env = "BC_ROOT_TENANT", value_name = "TENANT", default_value = "root",
          value_parser = Checked::new(tenant_id))]
    pub root_tenant: TenantId,
    /// `system`, or `manual`: "now" is read from the database (set with
    /// `clock.set`), for tests and demos.
    #[arg(long, env = "BC_CLOCK", value_name = "CLOCK", default_value = "system",
          value_parser = Checked::new(clock))]
    pub clock: Clock,
    /// `on`, or `off` behind a transaction-pooling PgBouncer: no statement
    /// cache, every statement in a transaction.
    #[arg(long, env = "BC_DB_PREPARED_STATEMENTS", value_name = "ON_OFF", default_value = "on",
          value_parser = Checked::new(prepared_statements))]
    pub db_prepared_statements: PreparedStatements,
    /// Serves `/metrics` on this address (for the api-server: instead of on
    /// the API's listener).
    #[arg(long, env = "BC_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<String>,
    /// Origins (`scheme://host[:port]`, `*` as the port; comma-separated)
    /// other tenants' provider accounts may name. Unset:
    /// `https://compute.googleapis.com`; empty: none.
    #[arg(long, env = "BC_PROVIDER_ENDPOINTS", value_name = "ORIGINS")]
    pub provider_endpoints: Option<String>,
    /// Environment variables root's accounts may use as `env:NAME`
    /// (comma-separated; a trailing `*` matches a prefix).
    #[arg(long, env = "BC_CREDENTIAL_ENV", value_name = "NAMES")]
    pub credential_env: Option<String>,
    /// The directory root's accounts may read `file:` credentials from.
    #[arg(long, env = "BC_CREDENTIAL_DIR", value_name = "DIR")]
    pub credential_dir: Option<String>,
    /// PEM certificates trusted for provider calls besides the Mozilla
    /// roots.
    #[arg(long, env = "BC_PROVIDER_CA_FILE", value_name = "FILE")]
    pub provider_ca_file: Option<String>,
    /// The first wait before retrying a provider request answered 429/5xx
    /// or not answered (doubling, with jitter), at most 60000 ms.
    /// [default: 500]
    #[arg(long, env = "BC_PROVIDER_RETRY_DELAY_MS", value_name = "DURATION",
          value_parser = Durations::millis().or_zero().at_most(Duration::from_secs(60)))]
    pub provider_retry_delay_ms: Option<Duration>,
    /// The metadata server `adc` credentials ask for tokens.
    /// [default: metadata.google.internal]
    #[arg(long, env = "GCE_METADATA_HOST", value_name = "HOST")]
    pub gce_metadata_host: Option<String>,
    /// The secret store's key: 32 bytes, base64. Without it `secrets.put` is
    /// refused. Prefer the environment: a flag shows in the process list.
    #[arg(
        long,
        env = "BC_SECRETS_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    pub secrets_key: Option<String>,
    /// Older keys still read during a rotation (comma-separated).
    #[arg(
        long,
        env = "BC_SECRETS_OLD_KEYS",
        value_name = "KEYS",
        hide_env_values = true
    )]
    pub secrets_old_keys: Option<String>,
    /// Origins (the syntax of `BC_PROVIDER_ENDPOINTS`) other tenants'
    /// webhooks may name over `http` or on internal addresses.
    #[arg(long, env = "BC_WEBHOOK_ENDPOINTS", value_name = "ORIGINS")]
    pub webhook_endpoints: Option<String>,
}

/// The shared settings, checked and built.
#[derive(Debug, Clone)]
pub struct Shared {
    /// `DATABASE_URL`.
    pub database_url: String,
    /// `BC_ROOT_TENANT`.
    pub root_tenant: TenantId,
    /// `BC_CLOCK`.
    pub clock: Clock,
    /// `BC_DB_PREPARED_STATEMENTS`.
    pub prepared_statements: PreparedStatements,
    /// `BC_METRICS_LISTEN`.
    pub metrics_listen: Option<String>,
    /// What provider accounts may reach (`BC_PROVIDER_ENDPOINTS`,
    /// `BC_CREDENTIAL_ENV`, `BC_CREDENTIAL_DIR`; contract 3.5).
    pub provider_policy: Arc<ProviderPolicy>,
    /// How adapters reach providers (`BC_PROVIDER_CA_FILE`,
    /// `BC_PROVIDER_RETRY_DELAY_MS`, `GCE_METADATA_HOST`; contract 7).
    pub provider_options: GceProviderOptions,
    /// The secret store's keys (`BC_SECRETS_KEY`, `BC_SECRETS_OLD_KEYS`;
    /// contract 3.9).
    pub keyring: Keyring,
    /// `BC_WEBHOOK_ENDPOINTS` (contract 3.13).
    pub webhook_endpoints: Origins,
}

impl SharedArgs {
    /// Checks the settings and builds what they describe (reads the CA file
    /// and resolves the credential directory).
    pub fn resolve(&self) -> anyhow::Result<Shared> {
        let policy = ProviderPolicy::from_lookup(|name| match name {
            ENDPOINTS_VAR => self.provider_endpoints.clone(),
            CREDENTIAL_ENV_VAR => self.credential_env.clone(),
            CREDENTIAL_DIR_VAR => self.credential_dir.clone(),
            _ => None,
        })
        .context("the provider policy")?;
        Ok(Shared {
            database_url: self
                .database_url
                .clone()
                .context("DATABASE_URL is required")?,
            root_tenant: self.root_tenant.clone(),
            clock: self.clock,
            prepared_statements: self.db_prepared_statements,
            metrics_listen: self.metrics_listen.clone(),
            provider_policy: Arc::new(policy),
            provider_options: GceProviderOptions::from_settings(
                self.provider_ca_file.as_deref(),
                self.provider_retry_delay_ms,
                self.gce_metadata_host.as_deref(),
            )
            .map_err(anyhow::Error::msg)?,
            keyring: Keyring::from_config(
                self.secrets_key.as_deref(),
                self.secrets_old_keys.as_deref(),
            )?,
            webhook_endpoints: Origins::parse(
                WEBHOOK_ENDPOINTS_VAR,
                self.webhook_endpoints.as_deref().unwrap_or_default(),
            )?,
        })
    }
}

fn tenant_id(name: &str, value: &str) -> Result<TenantId, String> {
    TenantId::parse(value).map_err(|e| format!("{name}: {e}"))
}

fn clock(name: &str, value: &str) -> Result<Clock, String> {
    Clock::parse(value).ok_or_else(|| format!("{name} must be system or manual, not {value:?}"))
}

fn prepared_statements(_: &str, value: &str) -> Result<PreparedStatements, String> {
    PreparedStatements::parse(value).map_err(|e| e.to_string())
}
