//! The VMs, their zone operations, the `requestId`s seen and the running
//! intervals, as the state file keeps them ([`crate::state`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Effect, OpType, Operation, Vm, VmSpec, Vms, key};
use crate::state::{field, flag, id, int, list, object, opt_text, strings, text, uint};

/// Every status a VM of the fake can be in.
const STATUSES: [&str; 5] = [
    "PROVISIONING",
    "STAGING",
    "RUNNING",
    "STOPPING",
    "TERMINATED",
];

fn effect_name(effect: Effect) -> &'static str {
    match effect {
        Effect::None => "none",
        Effect::Run => "run",
        Effect::Terminate => "terminate",
        Effect::Remove => "remove",
    }
}

fn effect_of(name: &str) -> Result<Effect, String> {
    Ok(match name {
        "none" => Effect::None,
        "run" => Effect::Run,
        "terminate" => Effect::Terminate,
        "remove" => Effect::Remove,
        _ => return Err(format!("unknown effect {name:?}")),
    })
}

fn op_type_of(name: &str) -> Result<OpType, String> {
    [OpType::Insert, OpType::Stop, OpType::Start, OpType::Delete]
        .into_iter()
        .find(|t| t.as_str() == name)
        .ok_or_else(|| format!("unknown operationType {name:?}"))
}

impl Vms {
    /// What the state file keeps: VMs, operations, `requestId`s, zones,
    /// running intervals, the VMs made per name, the ids and the test clock
    /// (not the quotas' counts or windows, the failures to inject, the
    /// stocked-out zones or the requests log).
    pub(crate) fn snapshot(&self) -> Value {
        let instances: Vec<Value> = self
            .vms
            .iter()
            .map(|((project, zone, name), vm)| {
                json!({
                    "project": project,
                    "zone": zone,
                    "name": name,
                    "id": vm.id.to_string(),
                    "machineType": vm.spec.machine_type,
                    "labels": vm.spec.labels,
                    "reservationAffinity": vm.spec.affinity,
                    "reservation": vm.spec.reservation,
                    "counted": vm.counted,
                    "status": vm.status,
                    "creationTimestamp": vm.created,
                })
            })
            .collect();
        let operations: Vec<Value> = self
            .ops
            .iter()
            .map(|((project, zone, name), op)| {
                let error = op
                    .error
                    .as_ref()
                    .map(|(code, message)| json!({ "code": code, "message": message }));
                json!({
                    "project": project,
                    "zone": zone,
                    "name": name,
                    "id": op.id.to_string(),
                    "operationType": op.op_type.as_str(),
                    "target": op.target,
                    "targetId": op.target_id.to_string(),
                    "pollsLeft": op.polls_left,
                    "readyAtMs": op.ready_at_ms,
                    "done": op.done,
                    "error": error,
                    "effect": effect_name(op.effect),
                    "insertTime": op.insert_time,
                    "endTime": op.end_time,
                })
            })
            .collect();
        // Sorted, so that an unchanged world writes the same text.
        let request_ids: Vec<Value> = self
            .by_request
            .iter()
            .collect::<BTreeMap<_, _>>()
            .into_iter()
            .map(|((project, request_id), (zone, operation))| {
                json!({
                    "project": project,
                    "requestId": request_id,
                    "zone": zone,
                    "operation": operation,
                })
            })
            .collect();
        json!({
            "nextId": self.next_id.to_string(),
            "clockMs": self.clock,
            "zones": self.zones,
            "instances": instances,
            "operations": operations,
            "requestIds": request_ids,
            "runs": self.runs(),
            "created": self.created,
        })
    }

    /// The VMs [`Vms::snapshot`] wrote, read at `now` (`now_ms` on the wall
    /// clock): an operation not yet done ends no sooner than its latency
    /// said, and at once when that time has passed.
    pub(crate) fn restore(v: &Value, now: Instant, now_ms: u64) -> Result<Vms, String> {
        let mut vms = Vms {
            next_id: id(v, "nextId")?,
            clock: match field(v, "clockMs")? {
                Value::Null => None,
                _ => Some(int(v, "clockMs")?),
            },
            ..Vms::default()
        };
        for (project, zones) in object(v, "zones")? {
            let zones: BTreeSet<String> = strings(zones, "zones")?.into_iter().collect();
            vms.zones.insert(project.clone(), zones);
        }
        for (i, vm) in list(v, "instances")?.iter().enumerate() {
            let (k, vm) = restore_vm(vm).map_err(|why| format!("instances[{i}]: {why}"))?;
            vms.zones
                .entry(k.0.clone())
                .or_default()
                .insert(k.1.clone());
            vms.vms.insert(k, vm);
        }
        for (i, op) in list(v, "operations")?.iter().enumerate() {
            let (k, op) =
                restore_op(op, now, now_ms).map_err(|why| format!("operations[{i}]: {why}"))?;
            if !op.done {
                vms.running.insert(k.clone());
            }
            vms.ops.insert(k, op);
        }
        for (i, r) in list(v, "requestIds")?.iter().enumerate() {
            let at = |why: String| format!("requestIds[{i}]: {why}");
            let project = text(r, "project").map_err(at)?.to_owned();
            let request_id = text(r, "requestId").map_err(at)?.to_owned();
            let zone = text(r, "zone").map_err(at)?.to_owned();
            let operation = text(r, "operation").map_err(at)?.to_owned();
            vms.by_request
                .insert((project, request_id), (zone, operation));
        }
        for (name, spans) in object(v, "runs")? {
            let spans = spans
                .as_array()
                .ok_or_else(|| format!("runs.{name}: not an array"))?
                .iter()
                .map(|span| match span.as_array().map(Vec::as_slice) {
                    Some([from, to]) => Ok((from.as_i64(), to)),
                    _ => Err(format!("runs.{name}: a span is not [from, to]")),
                })
                .map(|span| match span? {
                    (Some(from), Value::Null) => Ok((from, None)),
                    (Some(from), to) => match to.as_i64() {
                        Some(to) => Ok((from, Some(to))),
                        None => Err(format!("runs.{name}: an end is not an integer")),
                    },
                    (None, _) => Err(format!("runs.{name}: a start is not an integer")),
                })
                .collect::<Result<Vec<_>, String>>()?;
            vms.runs.insert(name.clone(), spans);
        }
        for (name, n) in object(v, "created")? {
            let n = n
                .as_u64()
                .ok_or_else(|| format!("created.{name}: not a whole number"))?;
            vms.created.insert(name.clone(), n);
        }
        Ok(vms)
    }
}

fn restore_vm(v: &Value) -> Result<(super::Key, Vm), String> {
    let k = key(text(v, "project")?, text(v, "zone")?, text(v, "name")?);
    let status = text(v, "status")?;
    let status = STATUSES
        .into_iter()
        .find(|s| *s == status)
        .ok_or_else(|| format!("unknown status {status:?}"))?;
    let spec = VmSpec {
        name: k.2.clone(),
        machine_type: text(v, "machineType")?.to_owned(),
        labels: object(v, "labels")?.clone(),
        affinity: field(v, "reservationAffinity")?.clone(),
        reservation: opt_text(v, "reservation")?.map(str::to_owned),
    };
    let vm = Vm {
        id: id(v, "id")?,
        spec,
        counted: flag(v, "counted")?,
        status,
        created: text(v, "creationTimestamp")?.to_owned(),
    };
    Ok((k, vm))
}

fn restore_op(v: &Value, now: Instant, now_ms: u64) -> Result<(super::Key, Operation), String> {
    let k = key(text(v, "project")?, text(v, "zone")?, text(v, "name")?);
    let ready_at_ms = match field(v, "readyAtMs")? {
        Value::Null => None,
        _ => Some(uint(v, "readyAtMs")?),
    };
    // Later on the wall clock: as much later from now; earlier: as much
    // earlier, so that the operations due keep their order.
    let ready_at = ready_at_ms.map(|at| {
        if at >= now_ms {
            now + Duration::from_millis(at - now_ms)
        } else {
            now.checked_sub(Duration::from_millis(now_ms - at))
                .unwrap_or(now)
        }
    });
    let error = match field(v, "error")? {
        Value::Null => None,
        e => Some((text(e, "code")?.to_owned(), text(e, "message")?.to_owned())),
    };
    let op = Operation {
        id: id(v, "id")?,
        op_type: op_type_of(text(v, "operationType")?)?,
        target: text(v, "target")?.to_owned(),
        target_id: id(v, "targetId")?,
        polls_left: u32::try_from(uint(v, "pollsLeft")?)
            .map_err(|_| "'pollsLeft' is too large".to_owned())?,
        ready_at,
        ready_at_ms,
        done: flag(v, "done")?,
        error,
        effect: effect_of(text(v, "effect")?)?,
        insert_time: text(v, "insertTime")?.to_owned(),
        end_time: opt_text(v, "endTime")?.map(str::to_owned),
    };
    Ok((k, op))
}

#[cfg(test)]
mod tests {
    use serde_json::Map;

    use super::*;
    use crate::realism::OperationLatency;
    use crate::store::{ReservationSpec, Store};
    use crate::vms::Pace;

    fn spec(name: &str) -> VmSpec {
        VmSpec {
            name: name.into(),
            machine_type: "https://x/zones/z-a/machineTypes/n2-standard-4".into(),
            labels: Map::from_iter([("env".to_owned(), json!("demo"))]),
            affinity: json!({ "consumeReservationType": "SPECIFIC_RESERVATION" }),
            reservation: Some("res".into()),
        }
    }

    #[test]
    fn vms_and_operations_come_back_as_they_were() {
        let mut store = Store::default();
        let reservation = ReservationSpec {
            count: 4,
            in_use_count: 0,
            machine_type: "n2-standard-4".into(),
            status: "READY".into(),
        };
        store.put("p", "z-a", "res", reservation);
        let mut vms = Vms::default();
        let quick = Pace {
            polls: 0,
            latency: None,
            concurrent: None,
        };
        let rid = "123e4567-e89b-12d3-a456-426614174000";
        vms.insert(&mut store, "p", "z-a", Some(rid), spec("vm-1"), &quick)
            .expect("created");
        vms.fail_next(1, "QUOTA_EXCEEDED");
        vms.insert(&mut store, "p", "z-a", None, spec("vm-2"), &quick)
            .expect("answered");
        let slow = Pace {
            polls: 0,
            latency: Some(OperationLatency {
                min_ms: 600_000,
                max_ms: 600_000,
            }),
            concurrent: None,
        };
        let pending = vms
            .insert(&mut store, "p", "z-a", None, spec("vm-3"), &slow)
            .expect("started");
        let snapshot = vms.snapshot();
        let now_ms = super::super::now_millis();
        let back = Vms::restore(&snapshot, Instant::now(), now_ms).expect("restores");
        assert_eq!(back.snapshot(), snapshot);
        assert_eq!(back.get("p", "z-a", "vm-1"), vms.get("p", "z-a", "vm-1"));
        assert_eq!(back.runs(), vms.runs());
        // The requestId answers the same operation; the one in flight is
        // still in flight, ten minutes from done.
        assert_eq!(back.replay("p", Some(rid)), vms.replay("p", Some(rid)));
        assert_eq!(back.in_flight("p"), 1);
        assert!(!back.has_due(Instant::now() + Duration::from_secs(599)));
        assert!(back.has_due(Instant::now() + Duration::from_secs(601)));
        assert_eq!(pending["status"], "RUNNING");
    }

    #[test]
    fn a_malformed_vm_is_refused() {
        let mut vms = Vms::default();
        let mut store = Store::default();
        let quick = Pace {
            polls: 0,
            latency: None,
            concurrent: None,
        };
        let mut plain = spec("vm-1");
        plain.reservation = None;
        vms.insert(&mut store, "p", "z-a", None, plain, &quick)
            .expect("created");
        let mut snapshot = vms.snapshot();
        snapshot["instances"][0]["status"] = json!("MELTING");
        let refused = Vms::restore(&snapshot, Instant::now(), 0).err();
        assert_eq!(
            refused.as_deref(),
            Some("instances[0]: unknown status \"MELTING\"")
        );
    }
}
