//! The load generator: N workers (tokio tasks), each owning one connection
//! (an HTTP/1.1 keep-alive connection or a PostgreSQL connection), running
//! operations back to back until a duration has passed or a number of
//! operations has been started, and recording every operation's latency.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;

/// One client's operation, run back to back. `i` is the global operation
/// index (unique across workers), for idempotency keys and spreading.
pub trait Op: Send + 'static {
    /// Runs operation `i`.
    fn run(&mut self, i: u64) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// When a run ends.
#[derive(Debug, Clone, Copy)]
pub enum Stop {
    /// Start no operation after this long.
    After(Duration),
    /// Start exactly this many operations.
    Count(u64),
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Operations completed.
    pub ops: u64,
    /// From the first start to the last completion.
    pub elapsed: Duration,
    /// Every operation's latency, sorted ascending.
    pub latencies: Vec<Duration>,
    /// Every operation's completion, as an offset from the start, sorted.
    pub done_at: Vec<Duration>,
    /// The machine's CPU while it ran.
    pub cpu: crate::busy::CpuUse,
}

/// Operation `i`'s item of `items`, round robin; none of no items.
pub fn round_robin<T>(items: &[T], i: u64) -> Option<&T> {
    items.get(usize::try_from(i).ok()?.checked_rem(items.len())?)
}

/// The `q` quantile (0..=1) of `sorted` durations, nearest rank (zero when
/// there are none).
pub fn nearest_rank(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    let index = rank.clamp(1, sorted.len()) - 1;
    sorted.get(index).copied().unwrap_or(Duration::ZERO)
}

impl Outcome {
    /// Operations per second.
    pub fn throughput(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The `q` quantile (0..=1) of the latencies, nearest rank.
    pub fn quantile(&self, q: f64) -> Duration {
        nearest_rank(&self.latencies, q)
    }

    /// Throughput between two fractions of the run (0.0..=1.0), by
    /// completion time.
    pub fn rate_in(&self, from: f64, to: f64) -> f64 {
        let a = self.elapsed.mul_f64(from);
        let b = self.elapsed.mul_f64(to);
        let n = self.done_at.iter().filter(|t| **t >= a && **t < b).count();
        n as f64 / (b - a).as_secs_f64().max(1e-9)
    }

    /// Median latency.
    pub fn p50(&self) -> Duration {
        self.quantile(0.50)
    }

    /// 99th percentile latency.
    pub fn p99(&self) -> Duration {
        self.quantile(0.99)
    }
}

/// Runs `workers` concurrently until `stop`. The first failing operation
/// fails the run (a benchmark with errors measures nothing).
pub async fn run<W: Op>(workers: Vec<W>, stop: Stop) -> anyhow::Result<Outcome> {
    let next = Arc::new(AtomicU64::new(0));
    let span = crate::busy::CpuSpan::start();
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(workers.len());
    for mut w in workers {
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(16 * 1024);
            let mut done = Vec::with_capacity(16 * 1024);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let go = match stop {
                    Stop::After(d) => start.elapsed() < d,
                    Stop::Count(n) => i < n,
                };
                if !go {
                    break;
                }
                let t = Instant::now();
                w.run(i).await.with_context(|| format!("operation {i}"))?;
                lat.push(t.elapsed());
                done.push(start.elapsed());
            }
            anyhow::Ok((lat, done))
        }));
    }
    let mut latencies = Vec::new();
    let mut done_at = Vec::new();
    for t in tasks {
        let (lat, done) = t.await.context("load worker panicked")??;
        latencies.extend(lat);
        done_at.extend(done);
    }
    let elapsed = start.elapsed();
    let cpu = span.finish();
    latencies.sort_unstable();
    done_at.sort_unstable();
    Ok(Outcome {
        ops: latencies.len() as u64,
        elapsed,
        latencies,
        done_at,
        cpu,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_use_nearest_rank() {
        let o = Outcome {
            ops: 100,
            elapsed: Duration::from_secs(1),
            latencies: (1..=100).map(Duration::from_millis).collect(),
            done_at: (0..100).map(|i| Duration::from_millis(i * 10)).collect(),
            cpu: crate::busy::CpuUse::default(),
        };
        assert!((o.rate_in(0.0, 0.5) - 100.0).abs() < 1e-6);
        assert_eq!(o.p50(), Duration::from_millis(50));
        assert_eq!(o.p99(), Duration::from_millis(99));
        assert!((o.throughput() - 100.0).abs() < 1e-6);
    }
}
