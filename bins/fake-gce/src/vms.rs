//! The in-memory VMs and their zone operations, shown in GCE's shapes.
//!
//! A mutating call decides its outcome when it arrives (a create takes its
//! reservation slot then, or fails) and answers an operation `RUNNING`; the
//! operation finishes once it has been read `polls` times and its latency (if
//! any) has passed, and only then does the VM reach the status it aims at
//! (`RUNNING`, `TERMINATED`, gone). An operation that may finish is finished
//! by the next request that looks at any VM or operation ([`Vms::settle`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use crate::store::{SlotError, Store};

mod hooks;
mod list;
mod pace;
mod persist;
mod shapes;

pub(crate) use list::ListQuery;
pub(crate) use pace::Pace;
use pace::{Quotas, due};
use shapes::{op_json, rfc3339, vm_json};

/// The kinds of zone operation the fake runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpType {
    Insert,
    Stop,
    Start,
    Delete,
}

impl OpType {
    fn as_str(self) -> &'static str {
        match self {
            OpType::Insert => "insert",
            OpType::Stop => "stop",
            OpType::Start => "start",
            OpType::Delete => "delete",
        }
    }
}

/// What finishing an operation does to its VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    None,
    Run,
    Terminate,
    Remove,
}

/// What a create asks for.
#[derive(Debug, Clone)]
pub(crate) struct VmSpec {
    pub name: String,
    /// A full URL.
    pub machine_type: String,
    pub labels: Map<String, Value>,
    pub affinity: Value,
    /// The reservation named by a `SPECIFIC_RESERVATION` affinity.
    pub reservation: Option<String>,
}

#[derive(Debug)]
struct Vm {
    id: u64,
    spec: VmSpec,
    /// Whether it is counted in its reservation's `inUseCount`.
    counted: bool,
    status: &'static str,
    created: String,
}

#[derive(Debug)]
struct Operation {
    id: u64,
    op_type: OpType,
    target: String,
    target_id: u64,
    polls_left: u32,
    /// Not done before this instant (`None`: no latency).
    ready_at: Option<Instant>,
    /// The same on the wall clock (epoch ms), as the state file keeps it.
    ready_at_ms: Option<u64>,
    done: bool,
    error: Option<(String, String)>,
    effect: Effect,
    insert_time: String,
    end_time: Option<String>,
}

/// A call refused outright (an HTTP error, not an operation error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    NotFound,
    AlreadyExists,
    NotReady,
    /// The project has its most operations in flight.
    TooManyOperations,
}

/// `(project, zone, name)`.
type Key = (String, String, String);

/// All projects' VMs, their operations, the creates still to fail and the
/// mutating requests seen.
#[derive(Debug)]
pub(crate) struct Vms {
    vms: BTreeMap<Key, Vm>,
    /// Every zone of a project that ever held a VM (listed on every page).
    zones: BTreeMap<String, BTreeSet<String>>,
    ops: BTreeMap<Key, Operation>,
    /// The operations not yet done.
    running: BTreeSet<Key>,
    /// `(project, requestId)` → `(zone, operation name)`.
    by_request: HashMap<(String, String), (String, String)>,
    failures_left: u64,
    failure_code: String,
    requests: Vec<Value>,
    next_id: u64,
    /// The test's clock (epoch ms), set with `POST /fake/clock`; `None`:
    /// real time.
    clock: Option<i64>,
    /// Each VM name's `RUNNING` intervals `[from, to)` on that clock (`to`
    /// `None` while it runs), kept after the VM is gone.
    runs: BTreeMap<String, Vec<(i64, Option<i64>)>>,
    /// How many VMs of each name were ever made.
    created: BTreeMap<String, u64>,
    /// Zones whose creates end with `ZONE_RESOURCE_POOL_EXHAUSTED`.
    stockout: BTreeSet<String>,
    quotas: Quotas,
}

impl Default for Vms {
    fn default() -> Self {
        Vms {
            vms: BTreeMap::new(),
            zones: BTreeMap::new(),
            ops: BTreeMap::new(),
            running: BTreeSet::new(),
            by_request: HashMap::new(),
            failures_left: 0,
            failure_code: String::new(),
            requests: Vec::new(),
            next_id: 2_000_000_000_000_000_001,
            clock: None,
            runs: BTreeMap::new(),
            created: BTreeMap::new(),
            stockout: BTreeSet::new(),
            quotas: Quotas::default(),
        }
    }
}

fn key(project: &str, zone: &str, name: &str) -> Key {
    (project.to_owned(), zone.to_owned(), name.to_owned())
}

impl Vms {
    fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// The operation a `requestId` already started, if any.
    fn replay(&self, project: &str, request_id: Option<&str>) -> Option<Value> {
        let (zone, name) = self
            .by_request
            .get(&(project.to_owned(), request_id?.to_owned()))?;
        let op = self.ops.get(&key(project, zone, name))?;
        Some(op_json(project, zone, name, op))
    }

    /// Starts an operation; answers it.
    #[expect(clippy::too_many_arguments, reason = "one operation's parts")]
    fn start_op(
        &mut self,
        store: &mut Store,
        project: &str,
        zone: &str,
        request_id: Option<&str>,
        op_type: OpType,
        target: &str,
        target_id: u64,
        error: Option<(String, String)>,
        effect: Effect,
        pace: &Pace,
    ) -> Value {
        let id = self.fresh_id();
        let name = format!("operation-{}-{id:x}", now_millis());
        let now = Instant::now();
        let ready_at = self.ready_at(pace.latency, now);
        let wall = |at: Instant| {
            let after = u64::try_from(at.duration_since(now).as_millis()).unwrap_or(u64::MAX);
            now_millis().saturating_add(after)
        };
        let op = Operation {
            id,
            op_type,
            target: target.to_owned(),
            target_id,
            polls_left: pace.polls,
            ready_at,
            ready_at_ms: ready_at.map(wall),
            done: false,
            error,
            effect,
            insert_time: rfc3339(now_millis()),
            end_time: None,
        };
        let k = key(project, zone, &name);
        let finished = due(&op, now);
        self.ops.insert(k.clone(), op);
        self.running.insert(k.clone());
        if let Some(rid) = request_id {
            self.by_request.insert(
                (project.to_owned(), rid.to_owned()),
                (zone.to_owned(), name.clone()),
            );
        }
        if finished {
            self.finish(store, &k);
        } else {
            self.started(project);
        }
        match self.ops.get(&k) {
            Some(op) => op_json(project, zone, &name, op),
            None => Value::Null,
        }
    }

    /// `instances.insert`.
    pub fn insert(
        &mut self,
        store: &mut Store,
        project: &str,
        zone: &str,
        request_id: Option<&str>,
        spec: VmSpec,
        pace: &Pace,
    ) -> Result<Value, Refusal> {
        if let Some(op) = self.replay(project, request_id) {
            return Ok(op);
        }
        let k = key(project, zone, &spec.name);
        if self.vms.contains_key(&k) {
            return Err(Refusal::AlreadyExists);
        }
        self.admit_op(project, pace.concurrent)?;
        let name = spec.name.clone();
        let mut error = None;
        if self.failures_left > 0 {
            self.failures_left -= 1;
            let message = "fake-gce: injected failure (POST /fake/fail-instances)";
            error = Some((self.failure_code.clone(), message.to_owned()));
        } else if self.stockout.contains(zone) {
            error = Some((
                "ZONE_RESOURCE_POOL_EXHAUSTED".to_owned(),
                format!(
                    "The zone 'projects/{project}/zones/{zone}' does not have enough resources \
                     available to fulfill the request. Try a different zone, or try again later."
                ),
            ));
        } else if let Some(reservation) = &spec.reservation {
            let wanted = last_segment(&spec.machine_type);
            let reserved = store
                .machine_type(project, zone, reservation)
                .map(last_segment);
            error = match reserved.filter(|r| *r != wanted) {
                // GCE answers a VM that does not fit the reservation's
                // properties as it answers a full one.
                Some(reserved) => Some((
                    "CONDITION_NOT_MET".to_owned(),
                    format!(
                        "Specified reservation '{reservation}' does not have available \
                         resources for the request: it holds {reserved} machines, not {wanted}."
                    ),
                )),
                None => match store.take_slot(project, zone, reservation) {
                    Ok(()) => None,
                    Err(SlotError::Missing) => Some((
                        "RESOURCE_NOT_FOUND".to_owned(),
                        format!(
                            "The resource 'projects/{project}/zones/{zone}/reservations/\
                         {reservation}' was not found"
                        ),
                    )),
                    Err(SlotError::Full) => Some((
                        "CONDITION_NOT_MET".to_owned(),
                        format!(
                            "Specified reservation '{reservation}' does not have available \
                         resources for the request."
                        ),
                    )),
                },
            };
        }
        let (target_id, effect) = if error.is_some() {
            (self.fresh_id(), Effect::None)
        } else {
            let id = self.fresh_id();
            let counted = spec.reservation.is_some();
            let vm = Vm {
                id,
                spec,
                counted,
                status: "PROVISIONING",
                created: rfc3339(now_millis()),
            };
            *self.created.entry(name.clone()).or_default() += 1;
            self.vms.insert(k, vm);
            self.zones
                .entry(project.to_owned())
                .or_default()
                .insert(zone.to_owned());
            (id, Effect::Run)
        };
        Ok(self.start_op(
            store,
            project,
            zone,
            request_id,
            OpType::Insert,
            &name,
            target_id,
            error,
            effect,
            pace,
        ))
    }

    /// `instances.stop`, `instances.start` and `instances.delete`.
    #[expect(clippy::too_many_arguments, reason = "one call's parts")]
    pub fn change(
        &mut self,
        store: &mut Store,
        project: &str,
        zone: &str,
        name: &str,
        request_id: Option<&str>,
        op_type: OpType,
        pace: &Pace,
    ) -> Result<Value, Refusal> {
        if let Some(op) = self.replay(project, request_id) {
            return Ok(op);
        }
        let k = key(project, zone, name);
        let vm = self.vms.get(&k).ok_or(Refusal::NotFound)?;
        if op_type != OpType::Delete && !matches!(vm.status, "RUNNING" | "TERMINATED") {
            return Err(Refusal::NotReady);
        }
        self.admit_op(project, pace.concurrent)?;
        let vm = self.vms.get_mut(&k).ok_or(Refusal::NotFound)?;
        let was = vm.status;
        let target_id = vm.id;
        let mut error = None;
        let effect = match op_type {
            OpType::Delete => {
                vm.status = "STOPPING";
                Effect::Remove
            }
            OpType::Stop if vm.status == "RUNNING" => {
                vm.status = "STOPPING";
                Effect::Terminate
            }
            OpType::Start if vm.status == "TERMINATED" => {
                let taken = match &vm.spec.reservation {
                    Some(r) => store.take_slot(project, zone, r),
                    None => Ok(()),
                };
                match taken {
                    Ok(()) => {
                        vm.counted = vm.spec.reservation.is_some();
                        vm.status = "STAGING";
                        Effect::Run
                    }
                    Err(why) => {
                        let code = match why {
                            SlotError::Missing => "RESOURCE_NOT_FOUND",
                            SlotError::Full => "CONDITION_NOT_MET",
                        };
                        error = Some((code.to_owned(), "the reservation has no room".to_owned()));
                        Effect::None
                    }
                }
            }
            _ => Effect::None,
        };
        let now = vm.status;
        self.ran(name, was, now);
        Ok(self.start_op(
            store, project, zone, request_id, op_type, name, target_id, error, effect, pace,
        ))
    }

    /// Finishes an operation and applies its effect.
    fn finish(&mut self, store: &mut Store, k: &Key) {
        let Some(op) = self.ops.get_mut(k) else {
            return;
        };
        op.done = true;
        op.end_time = Some(rfc3339(now_millis()));
        self.running.remove(k);
        let effect = if op.error.is_some() {
            Effect::None
        } else {
            op.effect
        };
        let vm_key = key(&k.0, &k.1, &op.target);
        let Some(vm) = self.vms.get_mut(&vm_key).filter(|vm| vm.id == op.target_id) else {
            return;
        };
        let was = vm.status;
        match effect {
            Effect::None => {}
            Effect::Run if matches!(vm.status, "PROVISIONING" | "STAGING") => vm.status = "RUNNING",
            Effect::Run => {}
            Effect::Terminate => {
                if vm.status == "STOPPING" {
                    vm.status = "TERMINATED";
                }
                release(store, &vm_key, vm);
            }
            Effect::Remove => {
                release(store, &vm_key, vm);
                self.vms.remove(&vm_key);
                self.ran(&vm_key.2, was, "GONE");
                return;
            }
        }
        let now = vm.status;
        self.ran(&vm_key.2, was, now);
    }

    /// `zoneOperations.get`: counts the read; answers the operation.
    pub fn poll(
        &mut self,
        store: &mut Store,
        project: &str,
        zone: &str,
        name: &str,
    ) -> Option<Value> {
        let k = key(project, zone, name);
        let op = self.ops.get_mut(&k)?;
        if !op.done {
            op.polls_left = op.polls_left.saturating_sub(1);
            if due(op, Instant::now()) {
                self.finish(store, &k);
            }
        }
        let op = self.ops.get(&k)?;
        Some(op_json(project, zone, name, op))
    }

    /// `instances.get`.
    pub fn get(&self, project: &str, zone: &str, name: &str) -> Option<Value> {
        let vm = self.vms.get(&key(project, zone, name))?;
        Some(vm_json(project, zone, name, vm))
    }
}

/// The last path segment of a machine type given as a name or a URL.
fn last_segment(machine_type: &str) -> &str {
    machine_type.rsplit('/').next().unwrap_or(machine_type)
}

/// Frees the VM's reservation slot if it holds one.
fn release(store: &mut Store, k: &Key, vm: &mut Vm) {
    if vm.counted
        && let Some(r) = &vm.spec.reservation
    {
        store.free_slot(&k.0, &k.1, r);
    }
    vm.counted = false;
}

fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
