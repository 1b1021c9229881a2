//! Figure 6: webhook delivery, from the request that commits an event to its
//! arrival at a local receiver.
//!
//! Root's webhook to a receiver in this process; the real
//! `reconciler-worker --only events.webhooks` with an interval of ten
//! minutes, so only the `NOTIFY` of an event's commit makes it send sooner.
//! One `webhooks.test` at a time: each event's delay is from sending the
//! request that commits it to the receiver reading its body.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::Notify;

use crate::procs::{ApiServer, Database, spawn_worker};
use crate::setup::{Api, str_at};

/// Events sent.
pub const EVENTS: u64 = 1_000;

/// What figure 6 measured.
#[derive(Debug, Clone)]
pub struct Deliveries {
    /// Per event, from its request to its arrival, sorted.
    pub lags: Vec<Duration>,
    /// The whole run.
    pub elapsed: Duration,
}

impl Deliveries {
    /// The `q` quantile of the delays (nearest rank).
    pub fn quantile(&self, q: f64) -> Duration {
        crate::load::nearest_rank(&self.lags, q)
    }
}

/// A receiver counting the requests it read whole; answers 200.
async fn receiver() -> anyhow::Result<(String, Arc<AtomicU64>, Arc<Notify>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    let (count, notify) = (Arc::new(AtomicU64::new(0)), Arc::new(Notify::new()));
    let (c, n) = (count.clone(), notify.clone());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (c, n) = (c.clone(), n.clone());
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<Incoming>| {
                    let (c, n) = (c.clone(), n.clone());
                    async move {
                        let _ = req.into_body().collect().await;
                        c.fetch_add(1, Ordering::SeqCst);
                        n.notify_waiters();
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::new())))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok((url, count, notify))
}

/// Runs the figure.
pub async fn run(db: &Database, server: &ApiServer) -> anyhow::Result<Deliveries> {
    let (url, count, notify) = receiver().await?;
    let api = Api::new(&server.url());
    let hook = api
        .root(
            "webhooks/create",
            json!({ "url": url, "idempotencyKey": "bench-webhook" }),
        )
        .await?;
    let webhook_id = str_at(&hook, "/webhook/webhookId")?;
    let mut worker = spawn_worker(db, "events.webhooks", &[("BC_INTERVAL_MS", "600000")])?;
    // Its first round has sent what was there; then only NOTIFY wakes it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let base = count.load(Ordering::SeqCst);
    let started = Instant::now();
    let mut lags = Vec::with_capacity(usize::try_from(EVENTS)?);
    for k in 1..=EVENTS {
        let sent = Instant::now();
        api.root("webhooks/test", json!({ "webhookId": webhook_id }))
            .await?;
        loop {
            let arrived = notify.notified();
            if count.load(Ordering::SeqCst) >= base + k {
                break;
            }
            if tokio::time::timeout(Duration::from_secs(30), arrived)
                .await
                .is_err()
            {
                bail!("event {k} never arrived at the receiver");
            }
        }
        lags.push(sent.elapsed());
    }
    let elapsed = started.elapsed();
    let _ = worker.kill().await;
    lags.sort_unstable();
    Ok(Deliveries { lags, elapsed })
}
