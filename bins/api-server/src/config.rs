//! The api-server's configuration (contract 8.1): its command line and
//! environment as one `clap` derive ([`Args`], the settings it shares with
//! the worker flattened in from [`telemetry::config::SharedArgs`]), checked
//! and built into a [`Config`].

use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use providers::policy::ProviderPolicy;
use storage::Clock;
use telemetry::config::{Durations, SharedArgs, Whole};

use crate::rate::{self, RateSetting};
use crate::server;

/// The api-server: the API of reservation grants and quotas over HTTP.
///
/// At start it applies the pending migrations, makes sure the root tenant
/// exists, then serves until SIGTERM or SIGINT. Every setting is a flag or
/// its environment variable; a duration takes `30s`, `1500ms` or `2m`, or a
/// bare number: milliseconds for the names ending in `_MS`.
#[derive(Clone, Parser)]
#[command(name = "api-server", version)]
pub struct Args {
    /// What to do instead of serving.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Listen address (`127.0.0.1:0` picks a port; the ready line on stdout
    /// says which).
    #[arg(
        long,
        env = "BC_LISTEN",
        value_name = "ADDR",
        default_value = "127.0.0.1:8080"
    )]
    pub listen: String,
    /// Makes sure a root `admin` key with this secret exists. Prefer the
    /// environment: a flag shows in the process list.
    #[arg(
        long,
        env = "BC_BOOTSTRAP_TOKEN",
        value_name = "SECRET",
        hide_env_values = true
    )]
    pub bootstrap_token: Option<String>,
    /// Database connections.
    #[arg(long, env = "BC_DB_POOL_SIZE", value_name = "N", default_value = "16",
          value_parser = Whole::any())]
    pub db_pool_size: u64,
    /// The most provider accounts a tenant other than root may have.
    #[arg(long, env = "BC_MAX_ACCOUNTS_PER_TENANT", value_name = "N", default_value = "20",
          value_parser = U32)]
    pub max_accounts_per_tenant: u64,
    /// The longest an explicit `providerAccounts.scan` waits for its
    /// listing, as the worker's scans.
    #[arg(long, env = "BC_SCAN_TIMEOUT_MS", value_name = "DURATION", default_value = "60000",
          value_parser = Durations::millis())]
    pub scan_timeout_ms: Duration,
    /// The HTTP limits.
    #[command(flatten)]
    pub http: HttpArgs,
    /// The request rates.
    #[command(flatten)]
    pub rates: RateArgs,
    /// The settings shared with the worker.
    #[command(flatten)]
    pub shared: SharedArgs,
}

/// What the api-server can do instead of serving.
#[derive(Debug, Clone, Copy, Subcommand)]
pub enum Command {
    /// Prints the OpenAPI document generated from the method registry and
    /// exits (no database needed).
    Openapi,
}

/// The HTTP limits (contract 1.7).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "HTTP limits")]
pub struct HttpArgs {
    /// Time to send a request head, from the accept or the end of the
    /// previous answer. [default: 10000]
    #[arg(long, env = "BC_HTTP_HEADER_TIMEOUT_MS", value_name = "DURATION",
          value_parser = Durations::millis())]
    pub http_header_timeout_ms: Option<Duration>,
    /// Time to send the body once the head is in. [default: 30000]
    #[arg(long, env = "BC_HTTP_BODY_TIMEOUT_MS", value_name = "DURATION",
          value_parser = Durations::millis())]
    pub http_body_timeout_ms: Option<Duration>,
    /// Time an answer may make no progress (a client not reading it) before
    /// the connection is closed. [default: 30000]
    #[arg(long, env = "BC_HTTP_WRITE_TIMEOUT_MS", value_name = "DURATION",
          value_parser = Durations::millis())]
    pub http_write_timeout_ms: Option<Duration>,
    /// Client connections open at once; more wait in the listen backlog
    /// (lowered to fit `ulimit -n`). [default: 4096]
    #[arg(long, env = "BC_HTTP_MAX_CONNECTIONS", value_name = "N",
          value_parser = Whole::range(1, u64::MAX))]
    pub http_max_connections: Option<u64>,
    /// How long SIGTERM waits for in-flight requests before closing the
    /// rest. [default: 10000]
    #[arg(long, env = "BC_HTTP_SHUTDOWN_GRACE_MS", value_name = "DURATION",
          value_parser = Durations::millis())]
    pub http_shutdown_grace_ms: Option<Duration>,
}

/// The request rates (contract 1.7 r4). A rate of `0` turns its limit off;
/// a burst left unset is 4 times the rate (twice for addresses).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Request rates")]
pub struct RateArgs {
    /// Requests a second of each tenant other than root. [default: 50]
    #[arg(long, env = "BC_TENANT_RATE", value_name = "N", value_parser = U32)]
    pub tenant_rate: Option<u64>,
    /// How many of them at once. [default: 200]
    #[arg(long, env = "BC_TENANT_BURST", value_name = "N", value_parser = U32)]
    pub tenant_burst: Option<u64>,
    /// Root's rate; none unless set.
    #[arg(long, env = "BC_ROOT_RATE", value_name = "N", value_parser = U32)]
    pub root_rate: Option<u64>,
    /// Root's burst.
    #[arg(long, env = "BC_ROOT_BURST", value_name = "N", value_parser = U32)]
    pub root_burst: Option<u64>,
    /// Unauthenticated requests a second per client address. [default: 20]
    #[arg(long, env = "BC_ANON_RATE", value_name = "N", value_parser = U32)]
    pub anon_rate: Option<u64>,
    /// How many of them at once. [default: 40]
    #[arg(long, env = "BC_ANON_BURST", value_name = "N", value_parser = U32)]
    pub anon_burst: Option<u64>,
}

/// A number of requests.
const U32: Whole = Whole::range(0, u32::MAX as u64);

/// Process configuration (contract 8.1), checked and built.
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
    /// `BC_PROVIDER_RETRY_DELAY_MS`, `GCE_METADATA_HOST` (contract 7).
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

impl Config {
    /// Reads the configuration from the environment alone (no flags), as
    /// an in-process server does.
    pub fn from_env() -> anyhow::Result<Config> {
        let args = telemetry::config::parse_from::<Args, _, _>(["api-server"])
            .map_err(|e| anyhow::anyhow!("{}", e.render()))?;
        Config::from_args(&args)
    }

    /// Checks the settings and builds what they describe.
    pub fn from_args(args: &Args) -> anyhow::Result<Config> {
        let shared = args.shared.resolve()?;
        Ok(Config {
            database_url: shared.database_url,
            listen: args.listen.clone(),
            root_tenant: shared.root_tenant,
            clock: shared.clock,
            bootstrap_token: args.bootstrap_token.clone(),
            pool_size: args.db_pool_size as usize,
            prepared_statements: shared.prepared_statements,
            provider_policy: shared.provider_policy,
            provider_options: shared.provider_options,
            keyring: shared.keyring,
            http: args.http.limits(),
            rates: args.rates.rates()?,
            metrics_listen: shared.metrics_listen,
            max_accounts_per_tenant: i64::try_from(args.max_accounts_per_tenant)?,
            webhook_endpoints: shared.webhook_endpoints,
            scan_timeout: args.scan_timeout_ms,
        })
    }
}

impl HttpArgs {
    /// The limits, defaults for what is not set.
    pub fn limits(&self) -> server::Limits {
        let d = server::Limits::default();
        server::Limits {
            header_timeout: self.http_header_timeout_ms.unwrap_or(d.header_timeout),
            body_timeout: self.http_body_timeout_ms.unwrap_or(d.body_timeout),
            write_timeout: self.http_write_timeout_ms.unwrap_or(d.write_timeout),
            max_connections: self
                .http_max_connections
                .map_or(d.max_connections, |n| n as usize),
            shutdown_grace: self.http_shutdown_grace_ms.unwrap_or(d.shutdown_grace),
        }
    }
}

impl RateArgs {
    /// The rates, defaults for what is not set.
    pub fn rates(&self) -> anyhow::Result<rate::Rates> {
        let set = |rate: Option<u64>, burst: Option<u64>| RateSetting {
            rate: rate.map(saturated),
            burst: burst.map(saturated),
        };
        rate::Rates::from_settings(
            set(self.tenant_rate, self.tenant_burst),
            set(self.root_rate, self.root_burst),
            set(self.anon_rate, self.anon_burst),
        )
    }
}

/// `n` (at most [`u32::MAX`] by its parser) as a `u32`.
fn saturated(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, String> {
        let argv = std::iter::once("api-server").chain(args.iter().copied());
        telemetry::config::parse_from::<Args, _, _>(argv).map_err(|e| e.render().to_string())
    }

    #[test]
    fn help_lists_every_setting_with_its_variable() {
        let e = parse(&["--help"]).err().expect("help");
        for var in [
            "DATABASE_URL",
            "BC_LISTEN",
            "BC_HTTP_WRITE_TIMEOUT_MS",
            "BC_TENANT_BURST",
            "BC_SECRETS_KEY",
            "BC_WEBHOOK_ENDPOINTS",
            "BC_PROVIDER_RETRY_DELAY_MS",
            "openapi",
        ] {
            assert!(e.contains(var), "{var} missing from\n{e}");
        }
    }

    #[test]
    fn durations_take_units_or_bare_milliseconds() {
        let args = parse(&[
            "--http-write-timeout-ms",
            "1500",
            "--http-header-timeout-ms",
            "2s",
            "--scan-timeout-ms",
            "1m",
        ])
        .expect("valid");
        let limits = args.http.limits();
        assert_eq!(limits.write_timeout, Duration::from_millis(1500));
        assert_eq!(limits.header_timeout, Duration::from_secs(2));
        assert_eq!(limits.body_timeout, server::Limits::default().body_timeout);
        assert_eq!(args.scan_timeout_ms, Duration::from_secs(60));
    }

    #[test]
    fn a_bad_value_is_refused_naming_its_variable() {
        for (flag, value, var) in [
            ("--http-write-timeout-ms", "abc", "BC_HTTP_WRITE_TIMEOUT_MS"),
            ("--http-body-timeout-ms", "0", "BC_HTTP_BODY_TIMEOUT_MS"),
            ("--http-max-connections", "0", "BC_HTTP_MAX_CONNECTIONS"),
            ("--tenant-rate", "-1", "BC_TENANT_RATE"),
            ("--clock", "sundial", "BC_CLOCK"),
            (
                "--db-prepared-statements",
                "maybe",
                "BC_DB_PREPARED_STATEMENTS",
            ),
            (
                "--max-accounts-per-tenant",
                "many",
                "BC_MAX_ACCOUNTS_PER_TENANT",
            ),
        ] {
            let e = parse(&[&format!("{flag}={value}")]).err().expect(flag);
            assert!(e.contains(var) && e.contains(value), "{flag}: {e}");
        }
    }

    #[test]
    fn rates_keep_their_rules() {
        let rates = |args: &[&str]| parse(args).expect("valid").rates.rates();
        let d = rate::Rates::default();
        assert_eq!(rates(&[]).expect("defaults"), d);
        assert_eq!(rates(&["--tenant-rate", "0"]).expect("off").tenant, None);
        let root = rates(&["--root-rate", "5"])
            .expect("root")
            .root
            .expect("set");
        assert_eq!((root.per_second.get(), root.burst.get()), (5, 20));
        let e = rates(&["--root-burst", "5"]).expect_err("burst alone");
        assert_eq!(e.to_string(), "BC_ROOT_BURST is set without BC_ROOT_RATE");
        let e = rates(&["--anon-rate", "5", "--anon-burst", "0"]).expect_err("burst 0");
        assert_eq!(e.to_string(), "BC_ANON_BURST must be at least 1");
    }
}
