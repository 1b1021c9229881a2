//! The gauges read from the database (lag, reservations, managed
//! instances, webhooks, deficit credits), refreshed on their own loop while
//! metrics are served.

use std::sync::Arc;
use std::time::Duration;

use crate::metrics::{self, WorkerMetrics};
use crate::passes::PassContext;
use crate::runner::stopping;

/// The gauges' loop in run mode (with metrics served): refreshes them every
/// `interval`, whatever the passes are doing.
pub(crate) async fn gauges_loop(
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
pub(crate) async fn refresh_gauges(ctx: &PassContext, metrics: &WorkerMetrics) {
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
        let lending = storage::db::read_only(&mut conn, async |conn| {
            storage::ops::gauges::lending_gauges(conn, now, metrics::MAX_RESERVATIONS).await
        })
        .await?;
        Ok::<_, anyhow::Error>((now, lag, reservations, vms, webhooks, deficit, lending))
    };
    match read.await {
        Ok((now, lag, reservations, vms, webhooks, (short, pools), (lent, reclaims))) => {
            metrics.set_state(lag, &reservations);
            metrics.set_vm_state(&vms);
            metrics.set_webhook_state(&webhooks);
            metrics.deficit.set(now, &short, &pools);
            metrics.lending.set(&lent, &reclaims);
        }
        Err(e) => tracing::warn!(error = %e, "reading the metrics' gauges failed"),
    }
}
