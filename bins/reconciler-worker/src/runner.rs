//! Running the passes: one round with `--once`, else a loop per pass (and
//! one for the gauges) until told to stop; each run caught, timed, counted
//! and logged.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use storage::db::DbPool;
use tracing::{error, info, warn};

use crate::config::Config;
use crate::gauges::{gauges_loop, refresh_gauges};
use crate::metrics::{self, WorkerMetrics};
use crate::passes::{self, Pass, PassContext};
use crate::vms;

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
        telemetry::config::log_disallowed_accounts(
            &mut conn,
            &config.root_tenant,
            &config.provider_policy,
        )
        .await?;
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
pub(crate) async fn stopping(stopped: &mut tokio::sync::watch::Receiver<bool>) {
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
