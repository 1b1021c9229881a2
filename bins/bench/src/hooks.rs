//! Figure 6: webhook delivery, from the request that commits an event to its
//! arrival at a local receiver; then the same while another tenant's ten
//! webhooks point at an endpoint that accepts and never answers, with a
//! thousand of their deliveries due (contract 3.13 r4).
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
use futures::StreamExt;
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

/// Where the hostile tenant's webhooks point: a listener that accepts and
/// never answers. The bench's api-server and worker list its origin in
/// `BC_WEBHOOK_ENDPOINTS` (a tenant's webhooks must otherwise be https).
pub const BLACKHOLE: &str = "127.0.0.1:47391";

/// The hostile tenant's webhooks, and the deliveries due to each.
pub const HOSTILE_WEBHOOKS: usize = 10;
/// Deliveries due to each hostile webhook when the measure starts.
pub const HOSTILE_DUE_EACH: usize = 100;
/// Events the well-behaved tenant sends while the others are due.
pub const HOSTILE_EVENTS: u64 = 200;

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

/// A listener at [`BLACKHOLE`] that accepts every connection, reads
/// nothing and never answers, holding them until the process ends.
async fn blackhole() -> anyhow::Result<()> {
    let listener = TcpListener::bind(BLACKHOLE).await?;
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    Ok(())
}

/// The webhooks worker of the figures: woken by `NOTIFY` only, and allowed
/// to reach [`BLACKHOLE`].
fn webhooks_worker(db: &Database) -> anyhow::Result<tokio::process::Child> {
    let endpoints = format!("http://{BLACKHOLE}");
    let env = [
        ("BC_INTERVAL_MS", "600000"),
        ("BC_WEBHOOK_ENDPOINTS", endpoints.as_str()),
    ];
    spawn_worker(db, "events.webhooks", &env)
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
    let mut worker = webhooks_worker(db)?;
    // Its first round has sent what was there; then only NOTIFY wakes it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let d = measure(&api, &webhook_id, &count, &notify, EVENTS).await;
    let _ = worker.kill().await;
    d
}

/// Figure 6's second line: root's webhook measured as in [`run`] while the
/// tenant `mallory` has [`HOSTILE_WEBHOOKS`] webhooks at [`BLACKHOLE`] with
/// [`HOSTILE_DUE_EACH`] deliveries due to each (its `webhooks.test`
/// events), the worker already busy with them.
pub async fn run_hostile(db: &Database, server: &ApiServer) -> anyhow::Result<Deliveries> {
    blackhole().await?;
    let (url, count, notify) = receiver().await?;
    let api = Api::new(&server.url());
    let mallory = api
        .root("tenants/create", json!({ "name": "mallory" }))
        .await?;
    let token = str_at(&mallory, "/adminKey/secret")?;
    let mut hostile = Vec::new();
    for k in 0..HOSTILE_WEBHOOKS {
        let body = json!({
            "tenantId": "mallory",
            "url": format!("http://{BLACKHOLE}/hole{k}"),
            "idempotencyKey": format!("bench-hole-{k}"),
        });
        let hook = api.call(&token, "webhooks/create", &body).await?;
        hostile.push(str_at(&hook, "/webhook/webhookId")?);
    }
    let tests: Vec<&String> = hostile
        .iter()
        .flat_map(|id| std::iter::repeat_n(id, HOSTILE_DUE_EACH))
        .collect();
    let sent: Vec<anyhow::Result<serde_json::Value>> = futures::stream::iter(tests)
        .map(|id| {
            let body = json!({ "tenantId": "mallory", "webhookId": id });
            let (api, token) = (&api, &token);
            async move { api.call(token, "webhooks/test", &body).await }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    for s in sent {
        s?;
    }
    let hook = api
        .root(
            "webhooks/create",
            json!({ "url": url, "idempotencyKey": "bench-webhook-beside-a-blackhole" }),
        )
        .await?;
    let webhook_id = str_at(&hook, "/webhook/webhookId")?;
    let mut worker = webhooks_worker(db)?;
    // The worker's first round records the due deliveries and starts on the
    // blackholes' (each attempt waits its 10 s deadline there).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let d = measure(&api, &webhook_id, &count, &notify, HOSTILE_EVENTS).await;
    let _ = worker.kill().await;
    d
}

/// Sends `events` `webhooks.test` of root's `webhook_id`, one at a time,
/// each once the one before arrived at the receiver counting in `count`.
async fn measure(
    api: &Api,
    webhook_id: &str,
    count: &AtomicU64,
    notify: &Notify,
    events: u64,
) -> anyhow::Result<Deliveries> {
    let base = count.load(Ordering::SeqCst);
    let started = Instant::now();
    let mut lags = Vec::with_capacity(usize::try_from(events)?);
    for k in 1..=events {
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
    lags.sort_unstable();
    Ok(Deliveries { lags, elapsed })
}
