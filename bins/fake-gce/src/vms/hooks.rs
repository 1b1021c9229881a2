//! What the fake's `/fake/` controls see and set of the VMs: the test's
//! clock and each name's running intervals, the mutating requests seen,
//! stockouts, failures to come, and changes made outside the platform.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::shapes::vm_json;
use super::{Refusal, Vms, now_millis, release};
use crate::store::Store;

impl Vms {
    /// Sets the clock the running intervals are measured on.
    pub fn set_clock(&mut self, now_ms: i64) {
        self.clock = Some(now_ms);
    }

    /// How many VMs of each name were ever made.
    pub fn created(&self) -> Value {
        json!(self.created)
    }

    /// Every VM name's running intervals, as `GET /fake/vm-runs` shows them.
    pub fn runs(&self) -> Value {
        let runs: Map<String, Value> = self
            .runs
            .iter()
            .map(|(name, spans)| {
                let spans: Vec<Value> = spans.iter().map(|(f, t)| json!([f, t])).collect();
                (name.clone(), Value::Array(spans))
            })
            .collect();
        Value::Object(runs)
    }

    /// Notes that the VM `name` started (`running`) or stopped running.
    pub(super) fn ran(&mut self, name: &str, was: &str, now: &str) {
        let at = self
            .clock
            .unwrap_or_else(|| i64::try_from(now_millis()).unwrap_or(i64::MAX));
        let spans = self.runs.entry(name.to_owned()).or_default();
        match (was == "RUNNING", now == "RUNNING") {
            (false, true) => spans.push((at, None)),
            (true, false) => {
                if let Some(last) = spans.last_mut()
                    && last.1.is_none()
                {
                    last.1 = Some(at);
                }
            }
            _ => {}
        }
    }

    /// Notes a mutating request as `GET /fake/requests` shows it.
    pub fn record(&mut self, method: &str, path: &str, request_id: Option<&str>) {
        self.requests.push(json!({
            "method": method,
            "path": path,
            "requestId": request_id,
        }));
    }

    pub fn requests(&self) -> &[Value] {
        &self.requests
    }

    pub fn reset_requests(&mut self) {
        self.requests.clear();
    }

    /// The zones whose creates end with `ZONE_RESOURCE_POOL_EXHAUSTED`.
    pub fn stockout(&self) -> &BTreeSet<String> {
        &self.stockout
    }

    /// Makes the creates in `zones` fail for want of resources (none: no
    /// zone).
    pub fn set_stockout(&mut self, zones: BTreeSet<String>) {
        self.stockout = zones;
    }

    /// Makes the next `count` creates' operations end with `code`.
    pub fn fail_next(&mut self, count: u64, code: &str) {
        self.failures_left = count;
        code.clone_into(&mut self.failure_code);
    }

    /// A change made outside the platform (`POST /fake/instances/...`), to
    /// the VM of that zone and name in any project; answers it afterwards
    /// (`Null` once deleted).
    pub fn outside(
        &mut self,
        store: &mut Store,
        zone: &str,
        name: &str,
        action: &str,
    ) -> Result<Value, Refusal> {
        let k = self
            .vms
            .keys()
            .find(|(_, z, n)| z == zone && n == name)
            .cloned()
            .ok_or(Refusal::NotFound)?;
        let vm = self.vms.get_mut(&k).ok_or(Refusal::NotFound)?;
        let was = vm.status;
        match action {
            "stop" => {
                vm.status = "TERMINATED";
                release(store, &k, vm);
            }
            "start" => {
                if !vm.counted
                    && let Some(r) = &vm.spec.reservation
                {
                    store
                        .take_slot(&k.0, zone, r)
                        .map_err(|_| Refusal::NotReady)?;
                    vm.counted = true;
                }
                vm.status = "RUNNING";
            }
            _ => {
                release(store, &k, vm);
                self.vms.remove(&k);
                self.ran(name, was, "GONE");
                return Ok(Value::Null);
            }
        }
        let now = vm.status;
        let shown = vm_json(&k.0, &k.1, &k.2, vm);
        self.ran(name, was, now);
        Ok(shown)
    }
}
