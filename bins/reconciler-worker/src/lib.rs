//! reconciler-worker: runs the reconciler passes on an interval, or once.
//!
//! Every pass is idempotent and safe with any number of replicas: work is
//! claimed with row locks and results are written under unique constraints,
//! so a pass killed at any point is simply run again.

pub mod metrics;
pub mod passes;
pub mod vms;
pub mod webhooks;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use providers::policy::ProviderPolicy;
use storage::Clock;
use storage::db::DbPool;
use tracing::{error, info, warn};

use crate::metrics::WorkerMetrics;
use crate::passes::{Pass, PassContext};

/// Process configuration (contract 8.2).
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
    /// `GCE_METADATA_HOST`), as the api-server.
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
    pub vm_rules: control::vms::VmRules,
    pub webhook_policy: Arc<ProviderPolicy>,
    pub webhook_rules: control::webhooks::WebhookRules,
}

/// A duration setting (`600`, seconds, or `10m`, `90s`, ...).
/// A whole number from `min` to `max` in variable `name`, if it is set.
fn whole_var(name: &str, min: u64, max: u64) -> anyhow::Result<Option<u64>> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| match v.parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(anyhow::anyhow!(
                "{name}={v:?} must be a whole number from {min} to {max}"
            )),
        })
        .transpose()
}

fn duration_var(name: &str, value: Option<String>) -> anyhow::Result<Option<Duration>> {
    value
        .map(|v| match v.parse::<u64>() {
            Ok(secs) => Ok(Duration::from_secs(secs)),
            Err(_) => humantime::parse_duration(&v),
        })
        .transpose()
        .with_context(|| format!("{name} must be a duration such as 600 (seconds) or 10m"))
}

/// The pacing of webhook deliveries (contract 8.2): `BC_WEBHOOK_LEASE`
/// (5m), `BC_WEBHOOK_TENANT_CONCURRENCY` (4), `BC_WEBHOOK_RETENTION` (30d,
/// more than 0) and the origins of `BC_WEBHOOK_ENDPOINTS`. A pass claims
/// for about an `interval` (at least a second, at most 5 minutes) and hands
/// the batches still in flight to the next; a `--once` pass runs until
/// nothing is due.
fn webhook_rules(
    once: bool,
    interval: Duration,
) -> anyhow::Result<control::webhooks::WebhookRules> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let d = control::webhooks::WebhookRules::default();
    let retention = match duration_var("BC_WEBHOOK_RETENTION", var("BC_WEBHOOK_RETENTION"))? {
        Some(r) if r.is_zero() => bail!("BC_WEBHOOK_RETENTION must be longer than 0"),
        Some(r) => r,
        None => d.retention,
    };
    Ok(control::webhooks::WebhookRules {
        lease: duration_var("BC_WEBHOOK_LEASE", var("BC_WEBHOOK_LEASE"))?
            .filter(|d| !d.is_zero())
            .unwrap_or(d.lease),
        tenant_concurrency: whole_var("BC_WEBHOOK_TENANT_CONCURRENCY", 1, 1024)?
            .map_or(d.tenant_concurrency, |n| n as usize),
        retention,
        endpoints: providers::Origins::from_env(providers::outbound::WEBHOOK_ENDPOINTS_VAR)
            .context(providers::outbound::WEBHOOK_ENDPOINTS_VAR)?,
        pass_budget: (!once)
            .then(|| interval.clamp(Duration::from_secs(1), Duration::from_secs(300))),
        ..d
    })
}

impl Config {
    /// Reads the environment and the command line.
    pub fn from_env_and_args(args: impl IntoIterator<Item = String>) -> anyhow::Result<Config> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let clock = var("BC_CLOCK").unwrap_or_else(|| "system".into());
        let mut once = false;
        let mut only = Vec::new();
        let mut args = args.into_iter();
        while let Some(a) = args.next() {
            match a.as_str() {
                "--once" => once = true,
                "--only" => only.push(args.next().context("--only needs a pass name")?),
                "--help" | "-h" => bail!("usage: reconciler-worker [--once] [--only NAME]..."),
                other => match other.strip_prefix("--only=") {
                    Some(name) => only.push(name.to_owned()),
                    None => bail!(
                        "unknown argument {other:?}; \
                         usage: reconciler-worker [--once] [--only NAME]..."
                    ),
                },
            }
        }
        // Unknown pass names are a usage error, found before connecting.
        select(passes::all(), &only)?;
        let interval = Duration::from_millis(
            var("BC_INTERVAL_MS")
                .map(|v| v.parse())
                .transpose()
                .context("BC_INTERVAL_MS")?
                .unwrap_or(10_000),
        );
        Ok(Config {
            database_url: var("DATABASE_URL").context("DATABASE_URL is required")?,
            root_tenant: storage::ids::TenantId::parse(
                &var("BC_ROOT_TENANT").unwrap_or_else(|| "root".into()),
            )
            .context("BC_ROOT_TENANT")?,
            clock: Clock::parse(&clock)
                .with_context(|| format!("BC_CLOCK must be system or manual, not {clock:?}"))?,
            prepared_statements: storage::db::PreparedStatements::from_env()?,
            interval,
            metrics_listen: var("BC_METRICS_LISTEN").or_else(|| var("BC_WORKER_METRICS_LISTEN")),
            scan_concurrency: var("BC_SCAN_CONCURRENCY")
                .map(|v| v.parse::<usize>())
                .transpose()
                .context("BC_SCAN_CONCURRENCY must be a whole number")?
                .unwrap_or(8)
                .clamp(1, 1024),
            scan_timeout: Duration::from_millis(
                var("BC_SCAN_TIMEOUT_MS")
                    .map(|v| v.parse::<u64>())
                    .transpose()
                    .context("BC_SCAN_TIMEOUT_MS must be a number of milliseconds")?
                    .filter(|ms| *ms > 0)
                    .unwrap_or(60_000),
            ),
            once,
            only,
            provider_policy: Arc::new(ProviderPolicy::from_env().context("the provider policy")?),
            provider_options: providers::gce::GceProviderOptions::from_env()
                .map_err(anyhow::Error::msg)?,
            keyring: storage::crypto::Keyring::from_env()?,
            scan_lease: Duration::from_millis(
                var("BC_SCAN_LEASE_MS")
                    .map(|v| v.parse::<u64>())
                    .transpose()
                    .context("BC_SCAN_LEASE_MS must be a number of milliseconds")?
                    .filter(|ms| *ms > 0)
                    .unwrap_or(storage::ops::scans::DEFAULT_SCAN_LEASE_MS.unsigned_abs()),
            ),
            notices: storage::ops::notices::NoticeRules::from_env().map_err(anyhow::Error::msg)?,
            webhook_policy: Arc::new(
                providers::outbound::webhook_policy(
                    var(providers::outbound::WEBHOOK_ENDPOINTS_VAR).as_deref(),
                )
                .context(providers::outbound::WEBHOOK_ENDPOINTS_VAR)?,
            ),
            webhook_rules: webhook_rules(once, interval)?,
            vm_rules: {
                let d = control::vms::VmRules::default();
                control::vms::VmRules {
                    step_timeout: duration_var("BC_VM_STEP_TIMEOUT", var("BC_VM_STEP_TIMEOUT"))?
                        .unwrap_or(d.step_timeout),
                    list_interval: duration_var("BC_VM_LIST_INTERVAL", var("BC_VM_LIST_INTERVAL"))?
                        .unwrap_or(d.list_interval),
                    max_backoff: duration_var("BC_VM_MAX_BACKOFF", var("BC_VM_MAX_BACKOFF"))?
                        .unwrap_or(d.max_backoff),
                    lease: duration_var("BC_VM_LEASE", var("BC_VM_LEASE"))?
                        .filter(|d| !d.is_zero())
                        .unwrap_or(d.lease),
                    concurrency: whole_var("BC_VM_CONCURRENCY", 1, 4096)?
                        .map_or(d.concurrency, |n| n as usize),
                    writes_per_min: whole_var("BC_VM_WRITES_PER_MIN", 1, 1_000_000)?
                        .map_or(d.writes_per_min, |n| n as u32),
                    ..d
                }
            },
        })
    }
}

/// The passes selected by `--only` (all when empty); unknown names are an error.
pub fn select(all: Vec<Box<dyn Pass>>, only: &[String]) -> anyhow::Result<Vec<Box<dyn Pass>>> {
    for name in only {
        if !all.iter().any(|p| p.name() == name) {
            let known: Vec<&str> = all.iter().map(|p| p.name()).collect();
            bail!("unknown pass {name:?}; known passes: {}", known.join(", "));
        }
    }
    Ok(all
        .into_iter()
        .filter(|p| only.is_empty() || only.iter().any(|n| n == p.name()))
        .collect())
}

/// Runs the worker until SIGTERM/SIGINT (or one round with `--once`).
/// Returns whether every pass of the last round succeeded (in loop mode:
/// the last run of each pass).
///
/// With `--once`, the passes run one after another, scans first, as one
/// round. Otherwise each pass runs in its own task on its own interval, so
/// no pass waits for another: a scan round slowed by providers never delays
/// metering or notices (contract 1.7).
pub async fn run(
    config: Config,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<bool> {
    storage::db::set_prepared_statements(config.prepared_statements);
    // A connection per pass and for the gauges, and one per scan in flight
    // (held only to claim and to apply, never during a listing).
    let pool: DbPool = storage::db::pool(&config.database_url, 4 + config.scan_concurrency)?;
    {
        let mut conn = pool.get().await.context("connecting to the database")?;
        storage::db::read_only(&mut conn, async |conn| {
            control::accounts::warn_disallowed(
                conn,
                config.root_tenant.as_str(),
                &config.provider_policy,
            )
            .await
        })
        .await
        .map_err(|e| anyhow::anyhow!("checking provider accounts: {e}"))?;
    }
    let passes = select(passes::all(), &config.only)?;
    let names: Vec<&str> = passes.iter().map(|p| p.name()).collect();
    info!(
        passes = ?names,
        once = config.once,
        interval_ms = config.interval.as_millis() as u64,
        scan_concurrency = config.scan_concurrency,
        scan_timeout_ms = config.scan_timeout.as_millis() as u64,
        expiry_notices = ?config
            .notices
            .expiry
            .iter()
            .map(|n| n.label.as_str())
            .collect::<Vec<_>>(),
        underuse_ratio = config.notices.underuse_ratio_micros as f64 / 1e6,
        "reconciler-worker started"
    );
    config.keyring.log_at_start();
    let metrics = Arc::new(WorkerMetrics::new(&names));
    if let Some(listen) = &config.metrics_listen {
        metrics::serve(listen, metrics.clone()).await?;
    }
    // One listing per account per interval however many replicas run; a
    // one-shot run waits for no interval, only for another replica's scan.
    let spacing = if config.once {
        0
    } else {
        i64::try_from(config.interval.as_millis()).unwrap_or(i64::MAX)
    };
    let ctx = Arc::new(PassContext {
        pool,
        clock: config.clock,
        root_tenant: config.root_tenant.clone(),
        scan_rules: storage::ops::scans::ClaimRules::pass(
            spacing,
            i64::try_from(config.scan_lease.as_millis()).unwrap_or(i64::MAX),
        ),
        scan_concurrency: config.scan_concurrency,
        scan_timeout: config.scan_timeout,
        providers: providers::policy_factory(
            config.root_tenant.as_str(),
            config.provider_policy.clone(),
            providers::gce::GceProviderOptions {
                telemetry: Some(metrics.provider.clone()),
                ..config.provider_options.clone()
            },
        ),
        keyring: config.keyring.clone(),
        notices: config.notices.clone(),
        instances: providers::policy_instance_factory(
            config.root_tenant.as_str(),
            config.provider_policy.clone(),
            providers::gce::GceProviderOptions {
                telemetry: Some(metrics.provider.clone()),
                ..config.provider_options.clone()
            },
        ),
        vm_rules: config.vm_rules.clone(),
        vm_pacer: Arc::new(control::vms::Pacer::new(config.vm_rules.writes_per_min)),
        vm_owner: uuid::Uuid::now_v7().to_string(),
        vm_wake: Arc::new(tokio::sync::Notify::new()),
        webhook_policy: config.webhook_policy.clone(),
        provider_options: config.provider_options.clone(),
        webhook_rules: config.webhook_rules.clone(),
        events_wake: Arc::new(tokio::sync::Notify::new()),
    });
    if names.contains(&"events.webhooks")
        && !config.once
        && config.prepared_statements != storage::db::PreparedStatements::Off
    {
        tokio::spawn(vms::listen_on(
            config.database_url.clone(),
            storage::ops::deliveries::EVENTS_CHANNEL,
            ctx.events_wake.clone(),
        ));
    }
    let managing = names.contains(&"vps.instances");
    if managing && !config.once {
        if config.prepared_statements == storage::db::PreparedStatements::Off {
            info!(
                "behind a transaction pooler (BC_DB_PREPARED_STATEMENTS=off) LISTEN does not \
                 work: vm steps start within the worker interval, not at once"
            );
        } else {
            tokio::spawn(vms::listen(
                config.database_url.clone(),
                ctx.vm_wake.clone(),
            ));
        }
    }
    if managing {
        info!(
            step_timeout_s = config.vm_rules.step_timeout.as_secs(),
            list_interval_ms = config.vm_rules.list_interval.as_millis() as u64,
            "managed instances: steps and listings"
        );
    }
    tokio::pin!(shutdown);
    if config.once {
        let mut all_ok = true;
        for pass in &passes {
            tokio::select! {
                ok = run_pass(pass.as_ref(), &ctx, &metrics) => all_ok &= ok,
                () = &mut shutdown => {
                    info!("shutting down mid-round; the interrupted pass is safe to rerun");
                    release_vm_steps(&ctx).await;
                    return Ok(all_ok);
                }
            };
        }
        if config.metrics_listen.is_some() {
            refresh_gauges(&ctx, &metrics).await;
        }
        return Ok(all_ok);
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut loops = tokio::task::JoinSet::new();
    for pass in passes {
        loops.spawn(pass_loop(
            pass,
            ctx.clone(),
            metrics.clone(),
            config.interval,
            stopped.clone(),
        ));
    }
    if config.metrics_listen.is_some() {
        loops.spawn(gauges_loop(
            ctx.clone(),
            metrics.clone(),
            config.interval,
            stopped.clone(),
        ));
    }
    shutdown.await;
    info!("shutting down");
    let _ = stop.send(true);
    let mut all_ok = true;
    while let Some(ended) = loops.join_next().await {
        all_ok &= ended.unwrap_or(false);
    }
    release_vm_steps(&ctx).await;
    Ok(all_ok)
}

/// Gives back the leases of the VM steps this worker held when it was told
/// to stop (its passes have ended), so another replica, or this one
/// restarted, takes them at once instead of when their leases lapse. A
/// failure is logged: the leases then lapse as after a crash.
async fn release_vm_steps(ctx: &PassContext) {
    let release = async {
        let mut conn = ctx.pool.get().await.map_err(storage::StorageError::from)?;
        storage::ops::vms::release_owner(&mut conn, &ctx.vm_owner).await
    };
    // A stop never waits long on it: at worst the leases lapse.
    match tokio::time::timeout(RELEASE_TIMEOUT, release).await {
        Ok(Ok(0)) => {}
        Ok(Ok(n)) => info!(steps = n, "gave back the leases of the vm steps in flight"),
        Ok(Err(e)) => warn!(
            error = %e,
            "could not give back the vm steps' leases: they lapse after BC_VM_LEASE"
        ),
        Err(_) => warn!(
            "the vm steps' leases were not given back within 5 s: they lapse after BC_VM_LEASE"
        ),
    }
}

/// The longest a stopping worker spends giving back its leases.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs one pass once, records it in the metrics and logs it; returns
/// whether it succeeded.
async fn run_pass(pass: &dyn Pass, ctx: &PassContext, metrics: &WorkerMetrics) -> bool {
    let start = Instant::now();
    let result = match caught(pass.run(ctx)).await {
        Ok(result) => result,
        Err(panic) => {
            metrics.observe(pass.name(), false, start.elapsed(), &Default::default());
            error!(
                pass = pass.name(),
                panic = %panic,
                "pass panicked: it runs again after its interval; the vm steps it held \
                 are taken again when their leases lapse (BC_VM_LEASE)"
            );
            return false;
        }
    };
    let elapsed = start.elapsed();
    match result {
        Ok(report) => {
            metrics.observe(pass.name(), true, elapsed, &report);
            info!(
                pass = pass.name(),
                elapsed_ms = elapsed.as_millis() as u64,
                %report,
                "pass done"
            );
            true
        }
        Err(e) => {
            metrics.observe(pass.name(), false, elapsed, &Default::default());
            error!(
                pass = pass.name(),
                elapsed_ms = elapsed.as_millis() as u64,
                error = %e,
                "pass failed"
            );
            false
        }
    }
}

/// Runs `run` to its end, or to its panic: a bug in one pass (one of its
/// steps, one of its listings) must not stop that pass for the rest of the
/// process's life while the others go on. The panic's message is returned
/// (a panic's own hook has already printed where it happened).
async fn caught<T>(run: impl Future<Output = T>) -> Result<T, String> {
    use futures::FutureExt;
    std::panic::AssertUnwindSafe(run)
        .catch_unwind()
        .await
        .map_err(|panic| {
            panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned())
        })
}

/// Resolves once the worker is told to stop.
async fn stopping(stopped: &mut tokio::sync::watch::Receiver<bool>) {
    // An error means the sender is gone: stop too.
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// One pass's loop in run mode: run it, wait `interval`, again, until
/// told to stop (a run in progress is dropped: every pass is safe to rerun).
/// Returns whether its last run succeeded.
async fn pass_loop(
    pass: Box<dyn Pass>,
    ctx: Arc<PassContext>,
    metrics: Arc<WorkerMetrics>,
    interval: Duration,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) -> bool {
    let mut last_ok = true;
    loop {
        tokio::select! {
            ok = run_pass(pass.as_ref(), &ctx, &metrics) => last_ok = ok,
            () = stopping(&mut stopped) => {
                info!(
                    pass = pass.name(),
                    "shutting down mid-pass; the interrupted pass is safe to rerun"
                );
                return last_ok;
            }
        }
        tokio::select! {
            () = pass.pause(&ctx, interval) => {}
            () = stopping(&mut stopped) => return last_ok,
        }
    }
}

/// The gauges' loop in run mode (with metrics served): refreshes them every
/// `interval`, whatever the passes are doing.
async fn gauges_loop(
    ctx: Arc<PassContext>,
    metrics: Arc<WorkerMetrics>,
    interval: Duration,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) -> bool {
    loop {
        tokio::select! {
            () = refresh_gauges(&ctx, &metrics) => {}
            () = stopping(&mut stopped) => return true,
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = stopping(&mut stopped) => return true,
        }
    }
}

/// Refreshes the lag, reservation, managed instances', webhooks' and deficit
/// credits' gauges: a few cheap statements; a failure is logged and leaves
/// the last values.
async fn refresh_gauges(ctx: &PassContext, metrics: &WorkerMetrics) {
    let read = async {
        let mut conn = ctx.pool.get().await?;
        let now = ctx.clock.now(&mut conn).await?;
        let lag = storage::db::read_only(&mut conn, async |conn| {
            storage::ops::metering::lag(conn, now).await
        })
        .await?;
        let reservations = storage::db::read_only(&mut conn, async |conn| {
            storage::ops::gauges::gauges(conn, now, metrics::MAX_RESERVATIONS).await
        })
        .await?;
        let vms = storage::db::read_only(&mut conn, async |conn| {
            storage::ops::gauges::vm_gauges(conn).await
        })
        .await?;
        let webhooks = storage::db::read_only(&mut conn, async |conn| {
            storage::ops::gauges::webhook_gauges(conn, now).await
        })
        .await?;
        let deficit = storage::db::read_only(&mut conn, async |conn| {
            storage::ops::gauges::deficit_gauges(conn, now, metrics::MAX_RESERVATIONS).await
        })
        .await?;
        Ok::<_, anyhow::Error>((now, lag, reservations, vms, webhooks, deficit))
    };
    match read.await {
        Ok((now, lag, reservations, vms, webhooks, (short, pools))) => {
            metrics.set_state(lag, &reservations);
            metrics.set_vm_state(&vms);
            metrics.set_webhook_state(&webhooks);
            metrics.deficit.set(now, &short, &pools);
        }
        Err(e) => tracing::warn!(error = %e, "reading the metrics' gauges failed"),
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

#[cfg(test)]
mod tests {
    use super::caught;

    #[tokio::test]
    async fn a_panicking_run_is_caught_with_its_message_and_the_next_run_goes_on() {
        let mut runs = 0;
        let mut results = Vec::new();
        for k in 0..3 {
            runs += 1;
            results.push(
                caught(async move {
                    tokio::task::yield_now().await;
                    assert!(k != 1, "step {k} broke");
                    k
                })
                .await,
            );
        }
        assert_eq!(runs, 3);
        assert_eq!(results[0], Ok(0));
        assert_eq!(results[1], Err("step 1 broke".to_owned()));
        assert_eq!(results[2], Ok(2));
        let no_message = caught(async { std::panic::panic_any(7_u8) }).await;
        assert_eq!(no_message, Err("a panic without a message".to_owned()));
    }
}
