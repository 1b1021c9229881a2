//! What the servers share: their configuration layer ([`config`]: the
//! settings both read, one duration format, the start-up check of the
//! provider policy) and what they share for being watched: the Prometheus
//! expositions on the `prometheus-client` crate (the OpenMetrics content
//! type, `bc_build_info`, the standard `process_*` metrics read from
//! `/proc/self`, the latency buckets), the metrics listener and the logging
//! setup ([`logging::init`]).
//!
//! ```
//! let mut registry = prometheus_client::registry::Registry::default();
//! telemetry::register_common(&mut registry, "api-server");
//! let text = telemetry::encode(&registry);
//! assert!(text.contains("bc_build_info{process=\"api-server\""));
//! assert!(text.ends_with("# EOF\n"));
//! ```

pub mod config;
mod exposition;
pub mod listener;
pub mod logging;
pub mod signals;

pub use exposition::{Format, TEXT_CONTENT_TYPE, to_text};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::{Registry, Unit};

/// The content type of the exposition (OpenMetrics text).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Latency buckets, in seconds, from 1 ms to 2 minutes: provider scans and
/// slow requests can take 30 s and more.
pub const LATENCY_BUCKETS: [f64; 17] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0,
    120.0,
];

/// The labels of `bc_build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    process: String,
    version: String,
}

/// Registers `bc_build_info{process, version}` (always 1) and the process
/// metrics.
pub fn register_common(registry: &mut Registry, process: &str) {
    let info = Family::<BuildLabels, Gauge>::default();
    info.get_or_create(&BuildLabels {
        process: process.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
    })
    .set(1);
    registry.register("bc_build_info", "The running build (always 1)", info);
    registry.register_collector(Box::new(ProcessCollector));
}

/// The registry as OpenMetrics text.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, registry).is_err() {
        out.clear();
        out.push_str("# EOF\n");
    }
    out
}

/// The registry in `format`.
pub fn render(registry: &Registry, format: Format) -> String {
    match format {
        Format::OpenMetrics => encode(registry),
        Format::Text => to_text(&encode(registry)),
    }
}

/// What `/proc/self` says of this process.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct ProcessStats {
    /// User and system CPU seconds.
    pub cpu_seconds: f64,
    /// Resident memory in bytes.
    pub resident_bytes: f64,
    /// Open file descriptors.
    pub open_fds: f64,
    /// The open file limit.
    pub max_fds: f64,
    /// The start time, in seconds since the Unix epoch.
    pub start_time_seconds: f64,
}

/// The kernel's clock ticks per second for `/proc` times (`USER_HZ`, 100 on
/// every Linux architecture the platform runs on).
const TICKS: f64 = 100.0;

/// Reads [`ProcessStats`] (zeros where `/proc` is not there).
pub fn process_stats() -> ProcessStats {
    let mut s = ProcessStats::default();
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat")
        && let Some((_, rest)) = stat.rsplit_once(')')
    {
        // Fields after the command: state is field 3, utime 14, stime 15,
        // starttime 22 (1-based), so index k here is field k + 3.
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        s.cpu_seconds = (num(11) + num(12)) / TICKS;
        let boot = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("btime ").map(|v| v.trim().parse::<f64>()))
            })
            .and_then(Result::ok)
            .unwrap_or(0.0);
        s.start_time_seconds = boot + num(19) / TICKS;
    }
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        s.resident_bytes = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kb| kb * 1024.0);
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        s.open_fds = dir.count() as f64;
    }
    if let Ok(limits) = std::fs::read_to_string("/proc/self/limits") {
        s.max_fds = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .and_then(|l| l.split_whitespace().nth(3))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
    }
    s
}

/// The standard `process_*` metrics, read at each scrape.
#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = process_stats();
        let cpu = ConstCounter::new(s.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu",
            "Total user and system CPU time spent in seconds",
            Some(&Unit::Seconds),
            cpu.metric_type(),
        )?)?;
        let gauges = [
            (
                "process_resident_memory",
                "Resident memory size in bytes",
                Some(Unit::Bytes),
                s.resident_bytes,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                None,
                s.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                None,
                s.max_fds,
            ),
            (
                "process_start_time",
                "Start time of the process since the Unix epoch in seconds",
                Some(Unit::Seconds),
                s.start_time_seconds,
            ),
        ];
        for (name, help, unit, value) in gauges {
            let g = ConstGauge::new(value);
            g.encode(encoder.encode_descriptor(name, help, unit.as_ref(), g.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_is_seen() {
        let s = process_stats();
        assert!(
            s.resident_bytes > 0.0 && s.open_fds > 0.0 && s.max_fds > 0.0,
            "{s:?}"
        );
        assert!(s.start_time_seconds > 1.6e9, "{s:?}");
        let mut registry = Registry::default();
        register_common(&mut registry, "test");
        let text = encode(&registry);
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_start_time_seconds",
        ] {
            assert!(text.contains(&format!("\n{name} ")), "{name} in {text}");
        }
    }
}
