//! Operations against the clock and the quotas: their latency, their lazy
//! completion, the operations in flight, the per-minute writes and the
//! counts `GET /fake/stats` shows.

use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::{Key, Operation, Refusal, Vms, key};
use crate::realism::OperationLatency;
use crate::store::Store;

/// The length of a write-quota window: a wall-clock minute.
pub(crate) const WRITE_WINDOW_MS: u64 = 60_000;

/// How operations run: the reads until `DONE`, the latency, and the cap on
/// a project's operations in flight.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pace {
    pub polls: u32,
    pub latency: Option<OperationLatency>,
    pub concurrent: Option<u32>,
}

/// One project's counts since start or the last `DELETE /fake/stats`.
#[derive(Debug, Default)]
struct Counters {
    mutating_calls: u64,
    rate_refusals: u64,
    concurrent_refusals: u64,
    peak: u64,
}

impl Counters {
    fn is_zero(&self) -> bool {
        self.mutating_calls == 0
            && self.rate_refusals == 0
            && self.concurrent_refusals == 0
            && self.peak == 0
    }
}

/// The quota windows, the counts and the latency draws.
#[derive(Debug)]
pub(super) struct Quotas {
    /// Project → (window index, writes admitted in that window).
    windows: HashMap<String, (u64, u32)>,
    counters: BTreeMap<String, Counters>,
    /// The latency draws.
    rng: StdRng,
}

impl Default for Quotas {
    fn default() -> Self {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0x9e37_79b9_7f4a_7c15, |d| {
                d.as_secs() ^ u64::from(d.subsec_nanos()).rotate_left(32)
            });
        Quotas {
            windows: HashMap::new(),
            counters: BTreeMap::new(),
            rng: StdRng::seed_from_u64(seed),
        }
    }
}

impl Quotas {
    /// Uniform in `min..=max`.
    fn draw(&mut self, min: u64, max: u64) -> u64 {
        self.rng.random_range(min..=max)
    }
}

/// Whether an operation may finish at `now`: its reads are used up and its
/// latency has passed.
pub(super) fn due(op: &Operation, now: Instant) -> bool {
    !op.done && op.polls_left == 0 && op.ready_at.is_none_or(|at| at <= now)
}

/// The keys of `project`'s entries in a map keyed by `(project, ..)`.
fn of_project(project: &str) -> (Bound<Key>, Bound<Key>) {
    (
        Bound::Included(key(project, "", "")),
        Bound::Excluded(key(&format!("{project}\0"), "", "")),
    )
}

impl Vms {
    /// When an operation started at `now` may be done, if it has a latency.
    pub(super) fn ready_at(
        &mut self,
        latency: Option<OperationLatency>,
        now: Instant,
    ) -> Option<Instant> {
        let latency = latency.filter(|l| !l.is_zero())?;
        let ms = self.quotas.draw(latency.min_ms, latency.max_ms);
        Some(now + Duration::from_millis(ms))
    }

    /// Whether some operation may finish at `now`.
    pub fn has_due(&self, now: Instant) -> bool {
        self.running
            .iter()
            .any(|k| self.ops.get(k).is_some_and(|op| due(op, now)))
    }

    /// Finishes every operation that may finish at `now`, the earliest due
    /// first, so that every later read sees them done.
    pub fn settle(&mut self, store: &mut Store, now: Instant) {
        let mut due_now: Vec<(Option<Instant>, Key)> = self
            .running
            .iter()
            .filter_map(|k| {
                let op = self.ops.get(k)?;
                due(op, now).then(|| (op.ready_at, k.clone()))
            })
            .collect();
        due_now.sort();
        for (_, k) in due_now {
            self.finish(store, &k);
        }
    }

    /// `project`'s operations not yet `DONE`.
    pub fn in_flight(&self, project: &str) -> u64 {
        let count = self.running.range(of_project(project)).count();
        u64::try_from(count).unwrap_or(u64::MAX)
    }

    /// Counts a mutating call of `project` and admits it if the project has
    /// made fewer than `limit` admitted writes in the window `now_ms` is in
    /// (wall-clock minutes); a refused call uses up nothing. `Err` carries
    /// the limit.
    pub fn admit_write(
        &mut self,
        project: &str,
        limit: Option<u32>,
        now_ms: u64,
    ) -> Result<(), u32> {
        let counters = self.quotas.counters.entry(project.to_owned()).or_default();
        counters.mutating_calls += 1;
        let Some(limit) = limit else {
            return Ok(());
        };
        let window = now_ms / WRITE_WINDOW_MS;
        let used = self
            .quotas
            .windows
            .entry(project.to_owned())
            .or_insert((window, 0));
        if used.0 != window {
            *used = (window, 0);
        }
        if used.1 >= limit {
            counters.rate_refusals += 1;
            return Err(limit);
        }
        used.1 += 1;
        Ok(())
    }

    /// Whether `project` may start one more operation under `limit`.
    pub(super) fn admit_op(&mut self, project: &str, limit: Option<u32>) -> Result<(), Refusal> {
        let Some(limit) = limit else {
            return Ok(());
        };
        if self.in_flight(project) < u64::from(limit) {
            return Ok(());
        }
        let counters = self.quotas.counters.entry(project.to_owned()).or_default();
        counters.concurrent_refusals += 1;
        Err(Refusal::TooManyOperations)
    }

    /// Notes that `project` started an operation (for its peak in flight).
    pub(super) fn started(&mut self, project: &str) {
        let now = self.in_flight(project);
        let counters = self.quotas.counters.entry(project.to_owned()).or_default();
        counters.peak = counters.peak.max(now);
    }

    /// `GET /fake/stats`.
    pub fn stats(&self) -> Value {
        let mut projects: BTreeMap<&str, Value> = BTreeMap::new();
        let idle = Counters::default();
        let names = self
            .quotas
            .counters
            .keys()
            .map(String::as_str)
            .chain(self.running.iter().map(|k| k.0.as_str()));
        for project in names {
            if projects.contains_key(project) {
                continue;
            }
            let c = self.quotas.counters.get(project).unwrap_or(&idle);
            let in_flight = self.in_flight(project);
            projects.insert(
                project,
                json!({
                    "mutatingCalls": c.mutating_calls,
                    "rateRefusals": c.rate_refusals,
                    "concurrentRefusals": c.concurrent_refusals,
                    "operationsInFlight": in_flight,
                    "peakOperationsInFlight": c.peak.max(in_flight),
                }),
            );
        }
        json!({ "projects": projects })
    }

    /// `DELETE /fake/stats`: zero counts; each peak restarts from what is in
    /// flight now.
    pub fn reset_stats(&mut self) {
        let mut counters = BTreeMap::new();
        for k in &self.running {
            counters
                .entry(k.0.clone())
                .or_insert_with(Counters::default)
                .peak += 1;
        }
        counters.retain(|_, c: &mut Counters| !c.is_zero());
        self.quotas.counters = counters;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_stay_in_range() {
        let mut q = Quotas::default();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..2000 {
            let d = q.draw(10, 14);
            assert!((10..=14).contains(&d), "{d}");
            seen.insert(d);
        }
        assert_eq!(seen.len(), 5, "every value drawn");
        assert_eq!(q.draw(7, 7), 7);
        // The whole range draws without overflow.
        q.draw(0, u64::MAX);
    }

    #[test]
    fn writes_are_windowed_per_project_and_minute() {
        let mut vms = Vms::default();
        let minute = 28_000_000 * WRITE_WINDOW_MS;
        assert_eq!(vms.admit_write("p", Some(2), minute + 1), Ok(()));
        assert_eq!(vms.admit_write("p", Some(2), minute + 59_000), Ok(()));
        assert_eq!(vms.admit_write("p", Some(2), minute + 59_999), Err(2));
        assert_eq!(vms.admit_write("q", Some(2), minute + 59_999), Ok(()));
        assert_eq!(
            vms.admit_write("p", Some(2), minute + WRITE_WINDOW_MS),
            Ok(())
        );
        assert_eq!(vms.admit_write("p", None, minute), Ok(()));
        let stats = vms.stats();
        assert_eq!(stats["projects"]["p"]["mutatingCalls"], 5);
        assert_eq!(stats["projects"]["p"]["rateRefusals"], 1);
        vms.reset_stats();
        assert_eq!(vms.stats(), json!({ "projects": {} }));
    }
}
