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
mod tests;
