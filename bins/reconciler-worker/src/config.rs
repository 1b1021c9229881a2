//! The worker's configuration (contract 8.2): its command line and
//! environment as one `clap` derive ([`Args`], the settings it shares with
//! the api-server flattened in from [`telemetry::config::SharedArgs`]),
//! checked and built into a [`Config`].

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use providers::policy::ProviderPolicy;
use storage::Clock;
use telemetry::config::{Durations, SharedArgs, WEBHOOK_ENDPOINTS_VAR, Whole};

use crate::passes;
use crate::runner::select;

/// The reconciler-worker: runs the reconciler passes on an interval, or
/// once.
///
/// Each pass runs in its own loop: a run, then the interval, again. Every
/// setting is a flag or its environment variable; a duration takes `30s`,
/// `1500ms` or `2m`, or a bare number: milliseconds for the names ending in
/// `_MS`, seconds for the others.
#[derive(Clone, Parser)]
#[command(name = "reconciler-worker", version)]
pub struct Args {
    /// Runs one round, the passes one after another, and exits: 0, or 1 if
    /// a pass failed.
    #[arg(long)]
    pub once: bool,
    /// Runs only this pass (repeatable): vps.reservations, vps.grants,
    /// vps.instances, vps.usage or events.webhooks. Default: every pass.
    #[arg(long, value_name = "PASS")]
    pub only: Vec<String>,
    /// The pause between two runs of each pass.
    #[arg(long, env = "BC_INTERVAL_MS", value_name = "DURATION", default_value = "10000",
          value_parser = Durations::millis().or_zero())]
    pub interval_ms: Duration,
    /// The older name of `BC_METRICS_LISTEN`, read when that is unset.
    #[arg(
        long,
        env = "BC_WORKER_METRICS_LISTEN",
        value_name = "ADDR",
        hide = true
    )]
    pub worker_metrics_listen: Option<String>,
    /// The scans of provider accounts.
    #[command(flatten)]
    pub scans: ScanArgs,
    /// The grant notices.
    #[command(flatten)]
    pub notices: NoticeArgs,
    /// The managed instances' steps.
    #[command(flatten)]
    pub vms: VmArgs,
    /// The webhooks' deliveries.
    #[command(flatten)]
    pub webhooks: WebhookArgs,
    /// The settings shared with the api-server.
    #[command(flatten)]
    pub shared: SharedArgs,
}

/// The scans of provider accounts (`vps.reservations`).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Scans")]
pub struct ScanArgs {
    /// How many accounts one pass lists at once (1 to 1024; beyond is the
    /// nearest).
    #[arg(long, env = "BC_SCAN_CONCURRENCY", value_name = "N", default_value = "8",
          value_parser = Whole::any())]
    pub scan_concurrency: u64,
    /// The longest one account's listing may take; a longer one is a
    /// provider failure of that account. 0 means the default. [default: 60000]
    #[arg(long, env = "BC_SCAN_TIMEOUT_MS", value_name = "DURATION",
          value_parser = Durations::millis().or_zero())]
    pub scan_timeout_ms: Option<Duration>,
    /// How long a scan's claim keeps other replicas off its account. 0
    /// means the default. [default: 300000]
    #[arg(long, env = "BC_SCAN_LEASE_MS", value_name = "DURATION",
          value_parser = Durations::millis().or_zero())]
    pub scan_lease_ms: Option<Duration>,
}

/// The grant notices (`vps.grants`, contract 9).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Grant notices")]
pub struct NoticeArgs {
    /// When `reservation-grant.expiring` goes out before a grant's end
    /// (comma-separated durations; `none` turns it off). [default: 7d,1d,1h]
    #[arg(long, env = "BC_EXPIRY_NOTICES", value_name = "DURATIONS")]
    pub expiry_notices: Option<String>,
    /// `reservation-grant.underused` when a grant's last 24 whole hours held
    /// less than this share of what it committed (`0` turns it off).
    /// [default: 0.2]
    #[arg(long, env = "BC_UNDERUSE_RATIO", value_name = "RATIO")]
    pub underuse_ratio: Option<String>,
}

/// The managed instances' steps and listings (`vps.instances`).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Managed instances")]
pub struct VmArgs {
    /// How long a step may take from its first send. [default: 10m]
    #[arg(long, env = "BC_VM_STEP_TIMEOUT", value_name = "DURATION",
          value_parser = Durations::seconds().or_zero())]
    pub vm_step_timeout: Option<Duration>,
    /// The least time between two drift listings of an account's VMs.
    /// [default: 30s]
    #[arg(long, env = "BC_VM_LIST_INTERVAL", value_name = "DURATION",
          value_parser = Durations::seconds().or_zero())]
    pub vm_list_interval: Option<Duration>,
    /// The longest wait before retrying a step after a retryable failure.
    /// [default: 60s]
    #[arg(long, env = "BC_VM_MAX_BACKOFF", value_name = "DURATION",
          value_parser = Durations::seconds().or_zero())]
    pub vm_max_backoff: Option<Duration>,
    /// How long a replica holds a claimed step without recording progress.
    /// 0 means the default. [default: 60s]
    #[arg(long, env = "BC_VM_LEASE", value_name = "DURATION",
          value_parser = Durations::seconds().or_zero())]
    pub vm_lease: Option<Duration>,
    /// Steps calling the provider at once in one replica. [default: 256]
    #[arg(long, env = "BC_VM_CONCURRENCY", value_name = "N",
          value_parser = Whole::range(1, 4096))]
    pub vm_concurrency: Option<u64>,
    /// Mutating calls per provider account and wall-clock minute in one
    /// replica. [default: 1200]
    #[arg(long, env = "BC_VM_WRITES_PER_MIN", value_name = "N",
          value_parser = Whole::range(1, 1_000_000))]
    pub vm_writes_per_min: Option<u64>,
}

/// The webhooks' deliveries (`events.webhooks`).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Webhooks")]
pub struct WebhookArgs {
    /// How long a replica holds a webhook's claimed deliveries. 0 means
    /// the default. [default: 5m]
    #[arg(long, env = "BC_WEBHOOK_LEASE", value_name = "DURATION",
          value_parser = Durations::seconds().or_zero())]
    pub webhook_lease: Option<Duration>,
    /// Webhooks of one tenant sending at once, over all replicas.
    /// [default: 4]
    #[arg(long, env = "BC_WEBHOOK_TENANT_CONCURRENCY", value_name = "N",
          value_parser = Whole::range(1, 1024))]
    pub webhook_tenant_concurrency: Option<u64>,
    /// How long deliveries and their attempts are kept after their last
    /// attempt. [default: 30d]
    #[arg(long, env = "BC_WEBHOOK_RETENTION", value_name = "DURATION",
          value_parser = Durations::seconds())]
    pub webhook_retention: Option<Duration>,
}

/// Process configuration (contract 8.2), checked and built.
#[derive(Debug, Clone)]
pub struct Config {
    /// `DATABASE_URL`.
    pub database_url: String,
    /// `BC_ROOT_TENANT` (default `root`).
    pub root_tenant: storage::ids::TenantId,
    /// `BC_CLOCK` (default `system`).
    pub clock: Clock,
    /// `BC_DB_PREPARED_STATEMENTS` (`on` by default; `off` behind a pooler
    /// in transaction mode, docs/operations.md "PgBouncer").
    pub prepared_statements: storage::db::PreparedStatements,
    /// `BC_INTERVAL_MS` (default 10000).
    pub interval: Duration,
    /// `BC_METRICS_LISTEN` (optional; `BC_WORKER_METRICS_LISTEN`, its older
    /// name, when it is unset).
    pub metrics_listen: Option<String>,
    /// `BC_SCAN_CONCURRENCY` (default 8): how many accounts one pass of
    /// `vps.reservations` lists at once (contract 1.7).
    pub scan_concurrency: usize,
    /// `BC_SCAN_TIMEOUT_MS` (default 60000): the longest one account's
    /// listing may take; a longer one is a provider failure of that account.
    pub scan_timeout: Duration,
    /// `--once`.
    pub once: bool,
    /// `--only NAME` (repeatable); empty means every pass.
    pub only: Vec<String>,
    /// What provider accounts may reach (contract 3.5), as the api-server.
    pub provider_policy: Arc<ProviderPolicy>,
    /// How adapters reach providers (`BC_PROVIDER_CA_FILE`,
    /// `BC_PROVIDER_RETRY_DELAY_MS`, `GCE_METADATA_HOST`), as the
    /// api-server.
    pub provider_options: providers::gce::GceProviderOptions,
    /// The secret store's keys (`BC_SECRETS_KEY`, `BC_SECRETS_OLD_KEYS`).
    pub keyring: storage::crypto::Keyring,
    /// `BC_SCAN_LEASE_MS` (default 300000): how long a scan's claim keeps
    /// other replicas off its account; a replica that dies mid-listing
    /// delays that account's next scan by at most this.
    pub scan_lease: Duration,
    /// `BC_EXPIRY_NOTICES` (default `7d,1d,1h`) and `BC_UNDERUSE_RATIO`
    /// (default `0.2`): the grant notices of contract 9.
    pub notices: storage::ops::notices::NoticeRules,
    /// The managed instances' pacing (`BC_VM_*`).
    pub vm_rules: control::vms::VmRules,
    /// What webhooks may reach: the origins of `BC_WEBHOOK_ENDPOINTS`.
    pub webhook_policy: Arc<ProviderPolicy>,
    /// The webhooks' pacing (`BC_WEBHOOK_*`).
    pub webhook_rules: control::webhooks::WebhookRules,
}

impl Config {
    /// Checks the settings and builds what they describe. An unknown
    /// `--only` name is an error here, before anything connects.
    pub fn from_args(args: &Args) -> anyhow::Result<Config> {
        select(passes::all(), &args.only)?;
        let shared = args.shared.resolve()?;
        let webhook_policy =
            providers::outbound::webhook_policy(args.shared.webhook_endpoints.as_deref())
                .context(WEBHOOK_ENDPOINTS_VAR)?;
        let notices = storage::ops::notices::NoticeRules::parse(
            args.notices
                .expiry_notices
                .as_deref()
                .unwrap_or(storage::ops::notices::DEFAULT_EXPIRY_NOTICES),
            args.notices
                .underuse_ratio
                .as_deref()
                .unwrap_or(storage::ops::notices::DEFAULT_UNDERUSE_RATIO),
        )
        .map_err(anyhow::Error::msg)?;
        let scans = &args.scans;
        let default_lease =
            Duration::from_millis(storage::ops::scans::DEFAULT_SCAN_LEASE_MS.unsigned_abs());
        Ok(Config {
            database_url: shared.database_url,
            root_tenant: shared.root_tenant,
            clock: shared.clock,
            prepared_statements: shared.prepared_statements,
            interval: args.interval_ms,
            metrics_listen: shared
                .metrics_listen
                .or_else(|| args.worker_metrics_listen.clone()),
            scan_concurrency: scans.scan_concurrency.clamp(1, 1024) as usize,
            scan_timeout: nonzero_or(scans.scan_timeout_ms, Duration::from_secs(60)),
            once: args.once,
            only: args.only.clone(),
            provider_policy: shared.provider_policy,
            provider_options: shared.provider_options,
            keyring: shared.keyring,
            scan_lease: nonzero_or(scans.scan_lease_ms, default_lease),
            notices,
            vm_rules: args.vms.rules(),
            webhook_policy: Arc::new(webhook_policy),
            webhook_rules: args.webhooks.rules(
                shared.webhook_endpoints,
                args.once,
                args.interval_ms,
            ),
        })
    }
}

/// `set`, or `default` when it is unset or 0.
fn nonzero_or(set: Option<Duration>, default: Duration) -> Duration {
    set.filter(|d| !d.is_zero()).unwrap_or(default)
}

impl VmArgs {
    /// The rules, defaults for what is not set.
    pub fn rules(&self) -> control::vms::VmRules {
        let d = control::vms::VmRules::default();
        control::vms::VmRules {
            step_timeout: self.vm_step_timeout.unwrap_or(d.step_timeout),
            list_interval: self.vm_list_interval.unwrap_or(d.list_interval),
            max_backoff: self.vm_max_backoff.unwrap_or(d.max_backoff),
            lease: nonzero_or(self.vm_lease, d.lease),
            concurrency: self.vm_concurrency.map_or(d.concurrency, |n| n as usize),
            writes_per_min: self
                .vm_writes_per_min
                .map_or(d.writes_per_min, |n| n as u32),
            ..d
        }
    }
}

impl WebhookArgs {
    /// The pacing of webhook deliveries (contract 8.2), defaults for what is
    /// not set, sending to `endpoints` beyond the https rule. A pass claims
    /// for about an `interval` (at least a second, at most 5 minutes) and
    /// hands the batches still in flight to the next; a `once` pass runs
    /// until nothing is due.
    pub fn rules(
        &self,
        endpoints: providers::Origins,
        once: bool,
        interval: Duration,
    ) -> control::webhooks::WebhookRules {
        let d = control::webhooks::WebhookRules::default();
        control::webhooks::WebhookRules {
            lease: nonzero_or(self.webhook_lease, d.lease),
            tenant_concurrency: self
                .webhook_tenant_concurrency
                .map_or(d.tenant_concurrency, |n| n as usize),
            retention: self.webhook_retention.unwrap_or(d.retention),
            endpoints,
            pass_budget: (!once)
                .then(|| interval.clamp(Duration::from_secs(1), Duration::from_secs(300))),
            ..d
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, String> {
        let argv = std::iter::once("reconciler-worker").chain(args.iter().copied());
        telemetry::config::parse_from::<Args, _, _>(argv).map_err(|e| e.render().to_string())
    }

    #[test]
    fn the_flags_keep_their_spelling() {
        let args = parse(&["--once", "--only", "vps.grants", "--only=vps.usage"]).expect("valid");
        assert!(args.once);
        assert_eq!(args.only, ["vps.grants", "vps.usage"]);
        let e = parse(&["--bogus"]).err().expect("refused");
        assert!(e.contains("unknown argument '--bogus'"), "{e}");
        let e = parse(&["extra"]).err().expect("refused");
        assert!(e.contains("unknown argument 'extra'"), "{e}");
        let help = parse(&["--help"]).err().expect("help");
        for what in [
            "--once",
            "--only",
            "BC_INTERVAL_MS",
            "BC_VM_LEASE",
            "DATABASE_URL",
        ] {
            assert!(help.contains(what), "{what} missing from\n{help}");
        }
        assert!(!help.contains("BC_WORKER_METRICS_LISTEN"), "{help}");
    }

    #[test]
    fn durations_keep_their_bare_unit_and_take_units() {
        let args = parse(&[
            "--interval-ms",
            "250",
            "--vm-step-timeout",
            "600",
            "--vm-list-interval",
            "90s",
            "--vm-lease",
            "0",
            "--webhook-lease",
            "1500ms",
            "--scan-timeout-ms",
            "0",
            "--scan-lease-ms",
            "2m",
        ])
        .expect("valid");
        assert_eq!(args.interval_ms, Duration::from_millis(250));
        let vms = args.vms.rules();
        let d = control::vms::VmRules::default();
        assert_eq!(vms.step_timeout, Duration::from_secs(600));
        assert_eq!(vms.list_interval, Duration::from_secs(90));
        assert_eq!(vms.lease, d.lease, "0 is the default");
        let hooks = args
            .webhooks
            .rules(Default::default(), false, args.interval_ms);
        assert_eq!(hooks.lease, Duration::from_millis(1500));
        assert_eq!(hooks.pass_budget, Some(Duration::from_secs(1)));
        let scans = &args.scans;
        let default = Duration::from_secs(60);
        assert_eq!(nonzero_or(scans.scan_timeout_ms, default), default);
        assert_eq!(scans.scan_lease_ms, Some(Duration::from_secs(120)));
    }

    #[test]
    fn bad_values_are_refused_naming_their_variable() {
        for (flag, value, var) in [
            ("--webhook-retention", "0", "BC_WEBHOOK_RETENTION"),
            ("--webhook-retention", "soon", "BC_WEBHOOK_RETENTION"),
            (
                "--webhook-tenant-concurrency",
                "0",
                "BC_WEBHOOK_TENANT_CONCURRENCY",
            ),
            ("--vm-concurrency", "4097", "BC_VM_CONCURRENCY"),
            ("--vm-writes-per-min", "many", "BC_VM_WRITES_PER_MIN"),
            ("--interval-ms", "abc", "BC_INTERVAL_MS"),
            ("--scan-concurrency", "eight", "BC_SCAN_CONCURRENCY"),
            ("--clock", "sundial", "BC_CLOCK"),
        ] {
            let e = parse(&[&format!("{flag}={value}")]).err().expect(flag);
            assert!(e.contains(var) && e.contains(value), "{flag}: {e}");
        }
    }

    #[test]
    fn an_unknown_pass_is_refused_before_connecting() {
        let args = parse(&["--only", "vps.nope"]).expect("parses");
        let e = Config::from_args(&args).expect_err("unknown pass");
        assert!(e.to_string().contains("unknown pass \"vps.nope\""), "{e}");
    }
}
