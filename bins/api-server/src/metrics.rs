//! The api-server's metrics on `prometheus-client`, served at `GET
//! /metrics` (on `BC_METRICS_LISTEN` when set, else on the API's listener)
//! as the 0.0.4 text format, or OpenMetrics when the scraper asks for it:
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `bc_api_requests_total` | counter | `method`, `code` |
//! | `bc_api_request_duration_seconds` | histogram (1 ms to 120 s) | `method` |
//! | `bc_api_requests_in_flight` | gauge | |
//! | `bc_api_denials_total` | counter | `reason` (`tenant`, `role`, `scope`, `root-only`) |
//! | `bc_api_connections` | gauge | (client connections open) |
//! | `bc_api_max_connections` | gauge | (the cap, contract 1.7) |
//! | `bc_api_accept_errors_total` | counter | (accepts that failed and backed off) |
//! | `bc_api_client_timeouts_total` | counter | `phase` (`head`, `body`, `write`) |
//! | `bc_api_rate_limited_total` | counter | `client` (a tenant, `other`, `root`, `anonymous`) |
//! | `bc_db_pool_connections` | gauge | (connections open) |
//! | `bc_db_pool_max_connections` | gauge | (`BC_DB_POOL_SIZE`) |
//! | `bc_db_pool_available` | gauge | (idle connections) |
//! | `bc_db_pool_waiting` | gauge | (requests waiting for a connection) |
//! | `bc_db_pool_wait_seconds` | histogram | (time to get a connection) |
//! | `bc_build_info`, `process_*` | | see the `telemetry` crate |
//!
//! `client` names the first [`RATE_LABELS`] tenants refused, then sums the
//! others under `other`.
//!
//! `method` is a registered method's name or one of the fixed paths'
//! (`healthz`, `metrics`, `console`, `unknown`, ...), so its values are
//! bounded by the registry; `code` is the contract's error code or `OK`.

use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use storage::db::DbPool;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodCode {
    method: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabel {
    method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabel {
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClientLabel {
    client: String,
}

/// Tenants named in `bc_api_rate_limited_total`'s `client` label; the
/// refusals of any other are summed under `other` (contract 1.7: bounded
/// label sets).
pub const RATE_LABELS: usize = 50;

/// Who a rate refusal was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused<'a> {
    /// A tenant other than root.
    Tenant(&'a str),
    /// Root.
    Root,
    /// An unauthenticated client.
    Anonymous,
}

fn latency() -> Histogram {
    Histogram::new(telemetry::LATENCY_BUCKETS)
}

/// The server's metrics.
pub struct Metrics {
    registry: Registry,
    requests: Family<MethodCode, Counter>,
    duration: Family<MethodLabel, Histogram, fn() -> Histogram>,
    in_flight: Gauge,
    denials: Family<ReasonLabel, Counter>,
    pool_wait: Histogram,
    connections: Gauge,
    max_connections: Gauge,
    accept_errors: Counter,
    timeouts: Family<PhaseLabel, Counter>,
    rate_limited: Family<ClientLabel, Counter>,
    /// The tenants `rate_limited` names, at most [`RATE_LABELS`].
    rate_labelled: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// Counts a request in flight until dropped.
pub struct InFlight<'a>(&'a Gauge);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Metrics {
    /// The metrics of a server whose connections come from `pool`.
    pub fn new(pool: DbPool) -> Metrics {
        let mut registry = Registry::default();
        telemetry::register_common(&mut registry, "api-server");
        let requests = Family::<MethodCode, Counter>::default();
        registry.register(
            "bc_api_requests",
            "API requests by method and result code (OK or the contract's error code)",
            requests.clone(),
        );
        let duration =
            Family::<MethodLabel, Histogram, fn() -> Histogram>::new_with_constructor(latency);
        registry.register_with_unit(
            "bc_api_request_duration",
            "API request latency by method, from the first byte read to the answer",
            Unit::Seconds,
            duration.clone(),
        );
        let in_flight = Gauge::default();
        registry.register(
            "bc_api_requests_in_flight",
            "API requests being handled now",
            in_flight.clone(),
        );
        let denials = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "bc_api_denials",
            "Calls refused by the authorization decision, by class of reason",
            denials.clone(),
        );
        let pool_wait = latency();
        registry.register_with_unit(
            "bc_db_pool_wait",
            "Time a request waited for a database connection",
            Unit::Seconds,
            pool_wait.clone(),
        );
        registry.register_collector(Box::new(PoolCollector(pool)));
        let connections = Gauge::default();
        registry.register(
            "bc_api_connections",
            "Client connections open",
            connections.clone(),
        );
        let max_connections = Gauge::default();
        registry.register(
            "bc_api_max_connections",
            "Client connections the server keeps open at once; more wait in the backlog",
            max_connections.clone(),
        );
        let accept_errors = Counter::default();
        registry.register(
            "bc_api_accept_errors",
            "Accepts that failed (out of file descriptors or buffers) and backed off",
            accept_errors.clone(),
        );
        let timeouts = Family::<PhaseLabel, Counter>::default();
        registry.register(
            "bc_api_client_timeouts",
            "Clients disconnected for not sending their request head or body in time",
            timeouts.clone(),
        );
        let rate_limited = Family::<ClientLabel, Counter>::default();
        registry.register(
            "bc_api_rate_limited",
            "Requests refused RATE_LIMITED, by tenant (the first 50 refused, then other), \
             root or anonymous (per client address)",
            rate_limited.clone(),
        );
        Metrics {
            rate_limited,
            rate_labelled: std::sync::Mutex::default(),
            connections,
            max_connections,
            accept_errors,
            timeouts,
            registry,
            requests,
            duration,
            in_flight,
            denials,
            pool_wait,
        }
    }

    /// Records one request of `method` that answered `code` after `elapsed`.
    pub fn observe(&self, method: &str, code: &str, elapsed: Duration) {
        self.requests
            .get_or_create(&MethodCode {
                method: method.to_owned(),
                code: code.to_owned(),
            })
            .inc();
        self.duration
            .get_or_create(&MethodLabel {
                method: method.to_owned(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Counts a request in flight for as long as the guard lives.
    pub fn in_flight(&self) -> InFlight<'_> {
        self.in_flight.inc();
        InFlight(&self.in_flight)
    }

    /// Records a denial of class `reason` (`iam_check::DenyReason::class`).
    pub fn denied(&self, reason: &str) {
        self.denials
            .get_or_create(&ReasonLabel {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Counts a client connection open for as long as the guard lives.
    pub fn connection(&self) -> InFlight<'_> {
        self.connections.inc();
        InFlight(&self.connections)
    }

    /// Sets the connection cap shown by `bc_api_max_connections`.
    pub fn set_max_connections(&self, max: usize) {
        self.max_connections
            .set(i64::try_from(max).unwrap_or(i64::MAX));
    }

    /// Counts an accept that failed.
    pub fn accept_failed(&self) {
        self.accept_errors.inc();
    }

    /// Counts a client disconnected for not sending its `head` or `body`
    /// in time.
    pub fn client_timeout(&self, phase: &'static str) {
        self.timeouts.get_or_create(&PhaseLabel { phase }).inc();
    }

    /// Counts a request refused `RATE_LIMITED`.
    pub fn rate_limited(&self, who: Refused<'_>) {
        let client = match who {
            Refused::Root => "root".to_owned(),
            Refused::Anonymous => "anonymous".to_owned(),
            Refused::Tenant(tenant) => {
                let mut named = self
                    .rate_labelled
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if named.contains(tenant) {
                    tenant.to_owned()
                } else if named.len() < RATE_LABELS
                    && !matches!(tenant, "root" | "anonymous" | "other")
                {
                    named.insert(tenant.to_owned());
                    tenant.to_owned()
                } else {
                    "other".to_owned()
                }
            }
        };
        self.rate_limited
            .get_or_create(&ClientLabel { client })
            .inc();
    }

    /// Records the time spent waiting for a pooled connection.
    pub fn waited_for_connection(&self, elapsed: Duration) {
        self.pool_wait.observe(elapsed.as_secs_f64());
    }

    /// The exposition in `format`.
    pub fn render(&self, format: telemetry::Format) -> String {
        telemetry::render(&self.registry, format)
    }
}

/// Serves `/metrics` on `listen` (`BC_METRICS_LISTEN`) in the background;
/// the bound address.
pub async fn serve(
    listen: &str,
    app: std::sync::Arc<crate::app::App>,
) -> anyhow::Result<std::net::SocketAddr> {
    use anyhow::Context;
    telemetry::listener::serve(listen, std::sync::Arc::new(move |f| app.metrics.render(f)))
        .await
        .with_context(|| format!("binding BC_METRICS_LISTEN {listen}"))
}

/// The pool's state at each scrape.
struct PoolCollector(DbPool);

impl std::fmt::Debug for PoolCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PoolCollector")
    }
}

impl Collector for PoolCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = self.0.status();
        let gauges = [
            (
                "bc_db_pool_connections",
                "Database connections open",
                s.size,
            ),
            (
                "bc_db_pool_max_connections",
                "Database connections the pool may open",
                s.max_size,
            ),
            (
                "bc_db_pool_available",
                "Database connections open and idle",
                s.available,
            ),
            (
                "bc_db_pool_waiting",
                "Requests waiting for a database connection",
                s.waiting,
            ),
        ];
        for (name, help, value) in gauges {
            let g = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
        }
        Ok(())
    }
}
