//! The Compute Engine instances API on the wire: the create body, the
//! `Operation`, `Instance` and `InstanceAggregatedList` answers, and Google's
//! error body. Pure: no I/O.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

use super::wire::{AggregatedList, ScopeWarning, zone_from_url};
use crate::{OperationStatus, ProviderError, Throttle, Vm, VmOperation, VmSpec, VmStatus};

/// The scope a VM's service account is given.
pub(crate) const CLOUD_PLATFORM_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// The affinity key naming a reservation.
const RESERVATION_NAME_KEY: &str = "compute.googleapis.com/reservation-name";
/// The longest operation error message kept for the log.
const MAX_MESSAGE_CHARS: usize = 1024;

/// The `instances.insert` body of `spec` (contract 7, r3). `diskSizeGb` is a
/// JSON string, as GCE sends int64.
pub(crate) fn create_body(spec: &VmSpec) -> Value {
    let affinity = match &spec.reservation {
        Some(reservation) => json!({
            "consumeReservationType": "SPECIFIC_RESERVATION",
            "key": RESERVATION_NAME_KEY,
            "values": [reservation],
        }),
        None => json!({ "consumeReservationType": "NO_RESERVATION" }),
    };
    let mut interface = json!({ "network": spec.network });
    if let (Some(subnetwork), Some(map)) = (&spec.subnetwork, interface.as_object_mut()) {
        map.insert("subnetwork".to_owned(), subnetwork.clone().into());
    }
    let mut body = json!({
        "name": spec.name,
        "machineType": format!("zones/{}/machineTypes/{}", spec.zone, spec.machine_type),
        "labels": spec.labels,
        "reservationAffinity": affinity,
        "disks": [{
            "boot": true,
            "autoDelete": true,
            "initializeParams": {
                "sourceImage": spec.image,
                "diskSizeGb": spec.disk_gb.to_string(),
            },
        }],
        "networkInterfaces": [interface],
    });
    if let (Some(email), Some(map)) = (&spec.service_account, body.as_object_mut()) {
        map.insert(
            "serviceAccounts".to_owned(),
            json!([{ "email": email, "scopes": [CLOUD_PLATFORM_SCOPE] }]),
        );
    }
    body
}

/// Whether `s` has the form of a GCE zone, instance or operation name (RFC
/// 1035: a lower-case letter, then lower-case letters, digits and `-`, not
/// ending in `-`; at most 128 characters, as operation names run longer than
/// the 63 of the others). Anything else is refused before a request is
/// made, as GCE would refuse it.
pub(crate) fn valid_name(s: &str) -> bool {
    let bytes = s.as_bytes();
    (1..=128).contains(&bytes.len())
        && bytes.first().is_some_and(u8::is_ascii_lowercase)
        && bytes.last().is_some_and(|b| *b != b'-')
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireOperation {
    name: Option<String>,
    zone: Option<String>,
    status: Option<String>,
    error: Option<OperationErrors>,
}

#[derive(Deserialize)]
struct OperationErrors {
    #[serde(default)]
    errors: Vec<OperationError>,
}

#[derive(Deserialize)]
struct OperationError {
    code: Option<String>,
    message: Option<String>,
}

/// An `Operation`; `zone` is the call's, used when the answer names none.
pub(crate) fn parse_operation(body: &[u8], zone: &str) -> Result<VmOperation, ProviderError> {
    let wire: WireOperation = serde_json::from_slice(body)
        .map_err(|e| ProviderError::Malformed(format!("not an operation ({e})")))?;
    let name = wire
        .name
        .filter(|n| valid_name(n))
        .ok_or_else(|| ProviderError::Malformed("an operation has no valid name".into()))?;
    let status = wire
        .status
        .as_deref()
        .and_then(OperationStatus::parse)
        .ok_or_else(|| ProviderError::Malformed(format!("operation {name} has no known status")))?;
    let zone = match wire.zone.as_deref() {
        Some(url) => zone_from_url(url)
            .ok_or_else(|| ProviderError::Malformed(format!("operation {name}: bad zone")))?,
        None => zone,
    }
    .to_owned();
    let mut error_codes = Vec::new();
    let mut error_messages = Vec::new();
    if status == OperationStatus::Done {
        for error in wire.error.map(|e| e.errors).unwrap_or_default() {
            error_codes.push(code_word(error.code.as_deref(), "UNKNOWN"));
            let message = error.message.unwrap_or_default();
            error_messages.push(message.chars().take(MAX_MESSAGE_CHARS).collect());
        }
    }
    Ok(VmOperation {
        name,
        zone,
        status,
        error_codes,
        error_messages,
    })
}

#[derive(Deserialize)]
struct WireInstance {
    name: Option<String>,
    zone: Option<String>,
    status: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

fn map_instance(wire: WireInstance, scope: Option<&str>) -> Result<Vm, ProviderError> {
    let name = wire
        .name
        .filter(|n| !n.is_empty() && !n.contains('/'))
        .ok_or_else(|| ProviderError::Malformed("an instance has no valid name".into()))?;
    let malformed = |what: &str| ProviderError::Malformed(format!("instance {name}: {what}"));
    let zone = wire
        .zone
        .as_deref()
        .or(scope)
        .and_then(zone_from_url)
        .ok_or_else(|| malformed("zone is not a URL ending in zones/{zone}"))?
        .to_owned();
    let status = wire
        .status
        .filter(|s| !s.is_empty())
        .ok_or_else(|| malformed("status is missing"))?;
    Ok(Vm {
        name,
        zone,
        status: VmStatus::parse(&status),
        labels: wire.labels,
    })
}

/// An `Instance`.
pub(crate) fn parse_instance(body: &[u8]) -> Result<Vm, ProviderError> {
    let wire: WireInstance = serde_json::from_slice(body)
        .map_err(|e| ProviderError::Malformed(format!("not an instance ({e})")))?;
    map_instance(wire, None)
}

/// A scope (`zones/us-central1-a`) holds instances, or a `warning` such as
/// `NO_RESULTS_ON_PAGE` or `UNREACHABLE` instead.
#[derive(Deserialize)]
struct ScopedList {
    #[serde(default)]
    instances: Vec<WireInstance>,
    warning: Option<ScopeWarning>,
}

/// One page of `aggregated/instances`: its VMs and the next page's token.
///
/// A zone the provider could not reach (a scope warning `UNREACHABLE`, or
/// `unreachables`) fails the page with [`ProviderError::Partial`]
/// ([`require_complete`], the reservations listing's rule): a partial
/// answer would make that zone's VMs look gone.
pub(crate) fn parse_instance_page(body: &[u8]) -> Result<(Vec<Vm>, Option<String>), ProviderError> {
    let list: AggregatedList<ScopedList> = serde_json::from_slice(body)
        .map_err(|e| ProviderError::Malformed(format!("not an aggregated instance list ({e})")))?;
    let (items, next) = list.complete(|s| s.warning.as_ref())?;
    let mut vms = Vec::new();
    for (scope, scoped) in items {
        for wire in scoped.instances {
            vms.push(map_instance(wire, Some(&scope))?);
        }
    }
    Ok((vms, next))
}

#[derive(Deserialize)]
struct ErrorBody {
    error: Option<ErrorDetail>,
}

#[derive(Deserialize)]
struct ErrorDetail {
    #[serde(default)]
    errors: Vec<ErrorItem>,
    status: Option<String>,
    /// `google.rpc` details; an `ErrorInfo`'s `reason` names the quota met.
    #[serde(default)]
    details: Vec<ErrorInfo>,
}

#[derive(Deserialize)]
struct ErrorInfo {
    reason: Option<String>,
}

#[derive(Deserialize)]
struct ErrorItem {
    reason: Option<String>,
}

/// The error of a non-success answer (`status` not 2xx) with `body`:
/// - 404: [`ProviderError::NotFound`];
/// - 409 whose reason is `alreadyExists`: [`ProviderError::AlreadyExists`];
/// - 401, 5xx, or a 4xx without a Google error body: [`ProviderError::Status`];
/// - a 429, or a 4xx whose reason is `rateLimitExceeded` or
///   `userRateLimitExceeded`: [`ProviderError::Throttled`] for the rate
///   quota, or for the concurrent operations when an `ErrorInfo` detail says
///   `CONCURRENT_OPERATIONS_QUOTA_EXCEEDED` (its `retry_after` is left to the
///   caller, which reads the header);
/// - other 4xx: [`ProviderError::Rejected`] with `error.errors[0].reason`,
///   else `error.status`.
///
/// Only the reason code is kept, and only when it is a short word.
pub(crate) fn classify(status: u16, body: &[u8]) -> ProviderError {
    if status == 404 {
        return ProviderError::NotFound;
    }
    if status == 401 || !(400..=499).contains(&status) {
        return ProviderError::Status { status };
    }
    let Some(detail) = serde_json::from_slice::<ErrorBody>(body)
        .ok()
        .and_then(|b| b.error)
    else {
        if status == 429 {
            return throttled(Throttle::Rate);
        }
        return ProviderError::Status { status };
    };
    let concurrent = detail
        .details
        .iter()
        .any(|d| d.reason.as_deref() == Some("CONCURRENT_OPERATIONS_QUOTA_EXCEEDED"));
    let reason = detail
        .errors
        .into_iter()
        .find_map(|e| e.reason)
        .or(detail.status);
    let reason = code_word(reason.as_deref(), "unknown");
    if status == 409 && reason == "alreadyExists" {
        return ProviderError::AlreadyExists;
    }
    if concurrent {
        return throttled(Throttle::ConcurrentOperations);
    }
    if status == 429
        || matches!(
            reason.as_str(),
            "rateLimitExceeded" | "userRateLimitExceeded"
        )
    {
        return throttled(Throttle::Rate);
    }
    ProviderError::Rejected { status, reason }
}

fn throttled(quota: Throttle) -> ProviderError {
    ProviderError::Throttled {
        quota,
        retry_after: None,
    }
}

/// `code` when it is a short word (letters, digits, `_`, `-`, `.`), else
/// `fallback`: what a provider answers is logged and may be shown, so it
/// must not carry more than a code.
fn code_word(code: Option<&str>, fallback: &str) -> String {
    code.filter(|c| {
        !c.is_empty()
            && c.len() <= 64
            && c.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    })
    .unwrap_or(fallback)
    .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> VmSpec {
        VmSpec {
            name: "bc-01jd".into(),
            zone: "us-central1-a".into(),
            machine_type: "n2-standard-4".into(),
            labels: BTreeMap::from([("bc-managed".into(), "true".into())]),
            reservation: Some("res-a".into()),
            image: "projects/debian-cloud/global/images/family/debian-12".into(),
            disk_gb: 20,
            network: "global/networks/default".into(),
            subnetwork: None,
            service_account: None,
        }
    }

    #[test]
    fn the_create_body_is_the_contracts() {
        let body = create_body(&spec());
        assert_eq!(
            body,
            json!({
                "name": "bc-01jd",
                "machineType": "zones/us-central1-a/machineTypes/n2-standard-4",
                "labels": { "bc-managed": "true" },
                "reservationAffinity": {
                    "consumeReservationType": "SPECIFIC_RESERVATION",
                    "key": "compute.googleapis.com/reservation-name",
                    "values": ["res-a"],
                },
                "disks": [{ "boot": true, "autoDelete": true, "initializeParams": {
                    "sourceImage": "projects/debian-cloud/global/images/family/debian-12",
                    "diskSizeGb": "20",
                } }],
                "networkInterfaces": [{ "network": "global/networks/default" }],
            })
        );
        let on_demand = VmSpec {
            reservation: None,
            subnetwork: Some("regions/us-central1/subnetworks/a".into()),
            service_account: Some("vm@p.iam.gserviceaccount.com".into()),
            ..spec()
        };
        let body = create_body(&on_demand);
        assert_eq!(
            body["reservationAffinity"],
            json!({ "consumeReservationType": "NO_RESERVATION" })
        );
        assert_eq!(
            body["networkInterfaces"][0]["subnetwork"],
            "regions/us-central1/subnetworks/a"
        );
        assert_eq!(
            body["serviceAccounts"],
            json!([{ "email": "vm@p.iam.gserviceaccount.com",
                     "scopes": ["https://www.googleapis.com/auth/cloud-platform"] }])
        );
    }

    #[test]
    fn names() {
        for good in ["bc-01jd", "us-central1-a", "operation-1733-5f3a", "a"] {
            assert!(valid_name(good), "{good}");
        }
        let long = "a".repeat(129);
        for bad in [
            "",
            "Bc",
            "1a",
            "a-",
            "a/b",
            "a?b",
            "a b",
            "..",
            long.as_str(),
        ] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn operations_are_read_with_their_errors() {
        let running = br#"{"kind":"compute#operation","name":"operation-1","status":"RUNNING",
            "zone":"https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-b"}"#;
        let op = parse_operation(running, "us-central1-a").expect("operation");
        assert_eq!(op.status, OperationStatus::Running);
        assert_eq!(op.zone, "us-central1-b");
        assert!(op.error_codes.is_empty());

        let failed = br#"{"name":"operation-2","status":"DONE","httpErrorStatusCode":412,
            "error":{"errors":[{"code":"CONDITION_NOT_MET","message":"full"},
                               {"code":"<b>","message":"x"}]}}"#;
        let op = parse_operation(failed, "us-central1-a").expect("operation");
        assert_eq!(op.zone, "us-central1-a");
        assert_eq!(op.error_codes, ["CONDITION_NOT_MET", "UNKNOWN"]);
        assert_eq!(op.error_messages, ["full", "x"]);
        assert!(!op.succeeded());

        for bad in [
            &br#"{"name":"operation-3","status":"SOMETHING"}"#[..],
            br#"{"status":"DONE"}"#,
            br#"{"name":"op/../x","status":"DONE"}"#,
            b"not json",
        ] {
            assert!(
                matches!(parse_operation(bad, "z"), Err(ProviderError::Malformed(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn instances_and_pages() {
        let vm = br#"{"name":"bc-1","status":"RUNNING","labels":{"bc-managed":"true"},
            "zone":"https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a"}"#;
        let vm = parse_instance(vm).expect("instance");
        assert_eq!(vm.zone, "us-central1-a");
        assert_eq!(vm.labels["bc-managed"], "true");

        let page = br#"{"items":{
            "zones/us-central1-a":{"instances":[{"name":"bc-1","status":"TERMINATED"}]},
            "zones/europe-west4-b":{"warning":{"code":"NO_RESULTS_ON_PAGE"}}},
            "nextPageToken":"t2"}"#;
        let (vms, next) = parse_instance_page(page).expect("page");
        assert_eq!(vms.len(), 1);
        assert_eq!(vms[0].zone, "us-central1-a");
        assert!(vms[0].labels.is_empty());
        assert_eq!(next.as_deref(), Some("t2"));
        let (_, next) = parse_instance_page(br#"{"nextPageToken":""}"#).expect("page");
        assert_eq!(next, None);

        let unreachable = br#"{"items":{"zones/us-east1-b":{"warning":{"code":"UNREACHABLE"}},
            "zones/us-central1-a":{"instances":[{"name":"bc-1","status":"RUNNING"}]}}}"#;
        let err = parse_instance_page(unreachable).expect_err("unreachable");
        assert!(err.is_retryable(), "{err:?}");
        assert!(err.to_string().contains("us-east1-b"), "{err}");
        assert_eq!(
            parse_instance_page(br#"{"unreachables":["zones/x-1-a"],"items":{}}"#),
            Err(ProviderError::Partial {
                unreachable: vec!["x-1-a".into()]
            })
        );
        let (vms, _) = parse_instance_page(br#"{"unreachables":[]}"#).expect("complete");
        assert!(vms.is_empty());
        assert!(matches!(
            parse_instance_page(br#"{"items":{"zones/a-1-b":{"instances":[{"name":"x"}]}}}"#),
            Err(ProviderError::Malformed(_))
        ));
    }

    fn google(code: u16, reason: Option<&str>, status: Option<&str>) -> Vec<u8> {
        let mut error = json!({ "code": code, "message": "secret-ish text ya29.token" });
        if let Some(reason) = reason {
            error["errors"] = json!([{ "domain": "global", "reason": reason, "message": "m" }]);
        }
        if let Some(status) = status {
            error["status"] = json!(status);
        }
        json!({ "error": error }).to_string().into_bytes()
    }

    #[test]
    fn errors_are_classified() {
        let rejected = |status: u16, reason: &str| ProviderError::Rejected {
            status,
            reason: reason.into(),
        };
        assert_eq!(
            classify(404, &google(404, Some("notFound"), None)),
            ProviderError::NotFound
        );
        assert_eq!(classify(404, b""), ProviderError::NotFound);
        assert_eq!(
            classify(409, &google(409, Some("alreadyExists"), None)),
            ProviderError::AlreadyExists
        );
        assert_eq!(
            classify(
                409,
                &google(409, Some("resourceInUseByAnotherResource"), None)
            ),
            rejected(409, "resourceInUseByAnotherResource")
        );
        let not_ready = classify(400, &google(400, Some("resourceNotReady"), None));
        assert_eq!(not_ready, rejected(400, "resourceNotReady"));
        assert!(not_ready.is_retryable());
        // Quota refusals are throttles, for the caller to pace (3.12 r4).
        let throttled = |quota| ProviderError::Throttled {
            quota,
            retry_after: None,
        };
        let limited = classify(403, &google(403, Some("rateLimitExceeded"), None));
        assert_eq!(limited, throttled(Throttle::Rate));
        assert!(limited.is_retryable());
        let exhausted = classify(429, &google(429, None, Some("RESOURCE_EXHAUSTED")));
        assert_eq!(exhausted, throttled(Throttle::Rate));
        assert_eq!(classify(429, b"not json"), throttled(Throttle::Rate));
        let concurrent = br#"{"error":{"code":403,"errors":[{"reason":"rateLimitExceeded"}],
            "details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo",
                        "reason":"CONCURRENT_OPERATIONS_QUOTA_EXCEEDED"}]}}"#;
        assert_eq!(
            classify(403, concurrent),
            throttled(Throttle::ConcurrentOperations)
        );
        let scope = classify(
            403,
            &google(
                403,
                Some("insufficientPermissions"),
                Some("PERMISSION_DENIED"),
            ),
        );
        assert_eq!(scope, rejected(403, "insufficientPermissions"));
        assert!(!scope.is_retryable());
        assert_eq!(
            classify(400, &google(400, Some("<script>"), None)),
            rejected(400, "unknown")
        );
        assert_eq!(
            classify(400, b"<html>"),
            ProviderError::Status { status: 400 }
        );
        assert_eq!(
            classify(401, &google(401, Some("authError"), None)),
            ProviderError::Status { status: 401 }
        );
        let unavailable = classify(503, &google(503, Some("backendError"), None));
        assert_eq!(unavailable, ProviderError::Status { status: 503 });
        assert!(unavailable.is_retryable());
        for err in [scope, not_ready, exhausted] {
            let text = err.to_string();
            assert!(!text.contains("ya29") && !text.contains("secret"), "{text}");
        }
    }
}
