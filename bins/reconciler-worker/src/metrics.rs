//! Pass metrics in the Prometheus text format, served on
//! `BC_WORKER_METRICS_LISTEN` when set.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;

use crate::passes::PassReport;

#[derive(Default)]
struct PassStats {
    ok: u64,
    failed: u64,
    seconds_sum: f64,
    last_seconds: f64,
    counts: BTreeMap<&'static str, u64>,
}

/// Counters and durations per pass.
#[derive(Default)]
pub struct WorkerMetrics {
    inner: Mutex<BTreeMap<&'static str, PassStats>>,
}

impl WorkerMetrics {
    /// Records one run of a pass.
    pub fn observe(&self, pass: &'static str, ok: bool, elapsed: Duration, report: &PassReport) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let s = inner.entry(pass).or_default();
        if ok {
            s.ok += 1;
        } else {
            s.failed += 1;
        }
        s.seconds_sum += elapsed.as_secs_f64();
        s.last_seconds = elapsed.as_secs_f64();
        for (k, v) in &report.counts {
            *s.counts.entry(k).or_default() += v;
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let Ok(inner) = self.inner.lock() else {
            return out;
        };
        out.push_str("# TYPE bc_worker_pass_runs_total counter\n");
        for (p, s) in inner.iter() {
            let _ = writeln!(
                out,
                "bc_worker_pass_runs_total{{pass=\"{p}\",result=\"ok\"}} {}",
                s.ok
            );
            let _ = writeln!(
                out,
                "bc_worker_pass_runs_total{{pass=\"{p}\",result=\"error\"}} {}",
                s.failed
            );
        }
        out.push_str("# TYPE bc_worker_pass_seconds_sum counter\n");
        for (p, s) in inner.iter() {
            let _ = writeln!(
                out,
                "bc_worker_pass_seconds_sum{{pass=\"{p}\"}} {}",
                s.seconds_sum
            );
        }
        out.push_str("# TYPE bc_worker_pass_last_seconds gauge\n");
        for (p, s) in inner.iter() {
            let _ = writeln!(
                out,
                "bc_worker_pass_last_seconds{{pass=\"{p}\"}} {}",
                s.last_seconds
            );
        }
        out.push_str("# TYPE bc_worker_pass_items_total counter\n");
        for (p, s) in inner.iter() {
            for (k, v) in &s.counts {
                let _ = writeln!(
                    out,
                    "bc_worker_pass_items_total{{pass=\"{p}\",item=\"{k}\"}} {v}"
                );
            }
        }
        out
    }
}

/// Serves `GET /metrics` (any path) on `listen` in the background.
pub async fn serve(listen: &str, metrics: Arc<WorkerMetrics>) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    tracing::info!(addr = %listener.local_addr()?, "worker metrics listening");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let service = service_fn(move |_req| {
                    let body = metrics.render();
                    async move {
                        Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(body))))
                    }
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(())
}
