//! A VM and a zone operation in GCE's shapes (`compute#instance`,
//! `compute#operation`).

use serde_json::{Value, json};

use super::{Operation, Vm};
use crate::store::API_ROOT;

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

fn zone_url(project: &str, zone: &str) -> String {
    format!("{API_ROOT}/projects/{project}/zones/{zone}")
}

/// The HTTP status GCE reports with an operation's error code.
fn http_error(code: &str) -> (u16, &'static str) {
    match code {
        "RESOURCE_NOT_FOUND" => (404, "NOT FOUND"),
        "CONDITION_NOT_MET" => (412, "PRECONDITION FAILED"),
        "QUOTA_EXCEEDED" => (403, "FORBIDDEN"),
        c if c.ends_with("_EXHAUSTED") => (503, "SERVICE UNAVAILABLE"),
        _ => (400, "BAD REQUEST"),
    }
}

/// `2026-12-02T15:04:05.123+00:00`, as GCE writes its timestamps.
pub(super) fn rfc3339(millis: u64) -> String {
    let at = i64::try_from(millis)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .unwrap_or_default();
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000+00:00");
        assert_eq!(rfc3339(1_796_224_645_123), "2026-12-02T15:17:25.123+00:00");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000+00:00");
    }
}
