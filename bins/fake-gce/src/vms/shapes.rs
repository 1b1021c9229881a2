//! A VM and a zone operation in GCE's shapes (`compute#instance`,
//! `compute#operation`).

use serde_json::{Value, json};

use super::{Operation, Vm, http_error, zone_url};

pub(super) fn vm_json(project: &str, zone: &str, name: &str, vm: &Vm) -> Value {
    let zone_url = zone_url(project, zone);
    json!({
        "kind": "compute#instance",
        "id": vm.id.to_string(),
        "name": name,
        "zone": zone_url,
        "machineType": vm.spec.machine_type,
        "status": vm.status,
        "labels": vm.spec.labels,
        "reservationAffinity": vm.spec.affinity,
        "creationTimestamp": vm.created,
        "selfLink": format!("{zone_url}/instances/{name}"),
    })
}

pub(super) fn op_json(project: &str, zone: &str, name: &str, op: &Operation) -> Value {
    let zone_url = zone_url(project, zone);
    let mut shown = json!({
        "kind": "compute#operation",
        "id": op.id.to_string(),
        "name": name,
        "zone": zone_url,
        "operationType": op.op_type.as_str(),
        "targetLink": format!("{zone_url}/instances/{}", op.target),
        "targetId": op.target_id.to_string(),
        "status": if op.done { "DONE" } else { "RUNNING" },
        "progress": if op.done { 100 } else { 0 },
        "insertTime": op.insert_time,
        "startTime": op.insert_time,
        "selfLink": format!("{zone_url}/operations/{name}"),
    });
    if let Some(map) = shown.as_object_mut() {
        if let Some(end) = &op.end_time {
            map.insert("endTime".to_owned(), end.clone().into());
        }
        if op.done
            && let Some((code, message)) = &op.error
        {
            let (status, status_message) = http_error(code);
            map.insert(
                "error".to_owned(),
                json!({ "errors": [{ "code": code, "message": message }] }),
            );
            map.insert("httpErrorStatusCode".to_owned(), status.into());
            map.insert("httpErrorMessage".to_owned(), status_message.into());
        }
    }
    shown
}
