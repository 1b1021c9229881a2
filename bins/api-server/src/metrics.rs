//! Request metrics in the Prometheus text format: a counter per method and
//! code, and a latency histogram per method.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// The server's request metrics.
#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    requests: BTreeMap<(String, String), u64>,
    latency: BTreeMap<String, Histogram>,
}

impl Metrics {
    /// Records one request of `method` that answered `code` after `elapsed`.
    pub fn observe(&self, method: &str, code: &str, elapsed: Duration) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        *inner
            .requests
            .entry((method.to_owned(), code.to_owned()))
            .or_default() += 1;
        let h = inner.latency.entry(method.to_owned()).or_default();
        let secs = elapsed.as_secs_f64();
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                h.counts[i] += 1;
            }
        }
        h.count += 1;
        h.sum += secs;
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let Ok(inner) = self.inner.lock() else {
            return out;
        };
        out.push_str("# HELP bc_api_requests_total API requests by method and result code.\n");
        out.push_str("# TYPE bc_api_requests_total counter\n");
        for ((method, code), n) in &inner.requests {
            let _ = writeln!(
                out,
                "bc_api_requests_total{{method=\"{method}\",code=\"{code}\"}} {n}"
            );
        }
        out.push_str("# HELP bc_api_request_duration_seconds API request latency by method.\n");
        out.push_str("# TYPE bc_api_request_duration_seconds histogram\n");
        for (method, h) in &inner.latency {
            for (i, b) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "bc_api_request_duration_seconds_bucket{{method=\"{method}\",le=\"{b}\"}} {}",
                    h.counts[i]
                );
            }
            let _ = writeln!(
                out,
                "bc_api_request_duration_seconds_bucket{{method=\"{method}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "bc_api_request_duration_seconds_sum{{method=\"{method}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "bc_api_request_duration_seconds_count{{method=\"{method}\"}} {}",
                h.count
            );
        }
        out
    }
}
