//! The Compute Engine `reservations.aggregatedList` response and its mapping
//! to [`ProviderReservation`]. Pure: no I/O.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::{ProviderError, ProviderReservation, ReservationStatus};

/// One page of `aggregated/reservations`, mapped.
#[derive(Debug)]
pub(crate) struct Page {
    pub(crate) reservations: Vec<ProviderReservation>,
    /// `None` on the last page (GCE omits the field or sends it empty).
    pub(crate) next_page_token: Option<String>,
}

/// An aggregated list (`aggregated/reservations`, `aggregated/instances`):
/// one scoped list of `S` per scope, and the next page's token.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AggregatedList<S> {
    #[serde(default = "BTreeMap::new")]
    items: BTreeMap<String, S>,
    next_page_token: Option<String>,
    /// The scopes left out (`returnPartialSuccess`).
    unreachables: Option<Vec<String>>,
}

impl<S> AggregatedList<S> {
    /// Its scopes and the next page's token (`None` on the last page: GCE
    /// omits the field or sends it empty), or [`ProviderError::Partial`]
    /// when a scope was unreachable ([`require_complete`]).
    pub(crate) fn complete(
        self,
        warning: impl Fn(&S) -> Option<&ScopeWarning>,
    ) -> Result<(BTreeMap<String, S>, Option<String>), ProviderError> {
        require_complete(
            self.items
                .iter()
                .map(|(scope, scoped)| (scope.as_str(), warning(scoped))),
            self.unreachables.as_deref(),
        )?;
        Ok((self.items, self.next_page_token.filter(|t| !t.is_empty())))
    }
}

/// A scope (`zones/us-central1-a`) holds reservations, or a `warning` such as
/// `NO_RESULTS_ON_PAGE` or `UNREACHABLE` instead.
#[derive(Deserialize)]
struct ScopedList {
    #[serde(default)]
    reservations: Vec<WireReservation>,
    warning: Option<ScopeWarning>,
}

/// The `warning` of one scope of an aggregated list.
#[derive(Deserialize)]
pub(crate) struct ScopeWarning {
    code: Option<String>,
}

/// The most unreachable scopes an error names; the rest are counted.
const MAX_NAMED_SCOPES: usize = 16;

/// Fails a page of an aggregated list that left scopes out (contract 6,
/// r4): a scope whose `warning.code` is `UNREACHABLE`, or any entry of a
/// top-level `unreachables`. Such a listing is incomplete, and whatever it
/// does not show would be taken for gone, so it is
/// [`ProviderError::Partial`], naming the scopes; any other warning
/// (`NO_RESULTS_ON_PAGE`, ...) is harmless. The one rule of both listings
/// (`aggregated/reservations` and `aggregated/instances`).
pub(crate) fn require_complete<'a>(
    scopes: impl IntoIterator<Item = (&'a str, Option<&'a ScopeWarning>)>,
    unreachables: Option<&[String]>,
) -> Result<(), ProviderError> {
    let mut names: Vec<String> = unreachables
        .unwrap_or_default()
        .iter()
        .map(|scope| scope_name(scope))
        .collect();
    for (scope, warning) in scopes {
        if warning.and_then(|w| w.code.as_deref()) == Some("UNREACHABLE") {
            names.push(scope_name(scope));
        }
    }
    if names.is_empty() {
        return Ok(());
    }
    names.sort();
    names.dedup();
    let more = names.len().saturating_sub(MAX_NAMED_SCOPES);
    names.truncate(MAX_NAMED_SCOPES);
    if more > 0 {
        names.push(format!("{more} more"));
    }
    Err(ProviderError::Partial { unreachable: names })
}

/// A scope as the log names it: its last segment (`zones/us-central1-a` ->
/// `us-central1-a`) when that is a short word, else `unknown` (what a
/// provider answers is logged, so it must not carry more than a name).
fn scope_name(scope: &str) -> String {
    let last = scope.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    let word = !last.is_empty()
        && last.len() <= 64
        && last
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if word { last } else { "unknown" }.to_owned()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireReservation {
    name: Option<String>,
    zone: Option<String>,
    status: Option<String>,
    specific_reservation: Option<SpecificReservation>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecificReservation {
    count: Option<Value>,
    in_use_count: Option<Value>,
    instance_properties: Option<InstanceProperties>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InstanceProperties {
    machine_type: Option<String>,
}

/// Parses one page for `project`.
///
/// Reservations without `specificReservation.instanceProperties` (those built
/// from an instance template, or aggregate reservations) name no machine type
/// and cannot be sliced into slots; they are skipped with a warning. Anything
/// else missing or ill-typed makes the whole page malformed, and a zone the
/// provider could not reach makes it [`ProviderError::Partial`]
/// ([`require_complete`]): a partial answer would make the missing
/// reservations look gone.
pub(crate) fn parse_page(body: &[u8], project: &str) -> Result<Page, ProviderError> {
    let list: AggregatedList<ScopedList> = serde_json::from_slice(body).map_err(|e| {
        ProviderError::Malformed(format!("not an aggregated reservation list ({e})"))
    })?;
    let (items, next_page_token) = list.complete(|s| s.warning.as_ref())?;
    let mut reservations = Vec::new();
    for (scope, scoped) in items {
        for wire in scoped.reservations {
            if let Some(r) = map_reservation(wire, &scope, project)? {
                reservations.push(r);
            }
        }
    }
    Ok(Page {
        reservations,
        next_page_token,
    })
}

fn map_reservation(
    wire: WireReservation,
    scope: &str,
    project: &str,
) -> Result<Option<ProviderReservation>, ProviderError> {
    let name = wire
        .name
        .filter(|n| !n.is_empty() && !n.contains('/'))
        .ok_or_else(|| {
            ProviderError::Malformed(format!("a reservation in {scope} has no valid name"))
        })?;
    let malformed = |what: &str| ProviderError::Malformed(format!("reservation {name}: {what}"));

    // The reservation's own `zone` URL, else the scope key (`zones/{zone}`).
    let zone = wire
        .zone
        .as_deref()
        .or(Some(scope))
        .and_then(zone_from_url)
        .ok_or_else(|| malformed("zone is not a URL ending in zones/{zone}"))?
        .to_owned();
    let region = region_of_zone(&zone)
        .ok_or_else(|| malformed("zone has no region part"))?
        .to_owned();

    let Some(specific) = wire.specific_reservation else {
        tracing::warn!(
            reservation = %name,
            %zone,
            "skipping a reservation without specificReservation"
        );
        return Ok(None);
    };
    let Some(properties) = specific.instance_properties else {
        tracing::warn!(
            reservation = %name,
            %zone,
            "skipping a reservation without instanceProperties"
        );
        return Ok(None);
    };
    let flavor = properties
        .machine_type
        .as_deref()
        .and_then(last_segment)
        .ok_or_else(|| malformed("specificReservation.instanceProperties.machineType is missing"))?
        .to_owned();
    let total = specific
        .count
        .as_ref()
        .ok_or_else(|| malformed("specificReservation.count is missing"))
        .and_then(|v| {
            int64(v).ok_or_else(|| malformed("specificReservation.count is not a count"))
        })?;
    let in_use = match &specific.in_use_count {
        // GCE may omit zero-valued fields.
        None => 0,
        Some(v) => {
            int64(v).ok_or_else(|| malformed("specificReservation.inUseCount is not a count"))?
        }
    };
    let status = wire
        .status
        .as_deref()
        .map_or(ReservationStatus::NotReady, status_from_gce);

    Ok(Some(ProviderReservation {
        reservation_id: format!("projects/{project}/zones/{zone}/reservations/{name}"),
        zone,
        region,
        flavor,
        total,
        in_use,
        status,
    }))
}

/// A non-negative int64 sent as a JSON string (as GCE does) or a JSON integer.
fn int64(v: &Value) -> Option<i64> {
    let n = match v {
        Value::String(s) => s.parse::<i64>().ok()?,
        Value::Number(n) => n.as_i64()?,
        _ => return None,
    };
    (n >= 0).then_some(n)
}

/// `READY` is ready; `CREATING`, `UPDATING`, `DELETING` and anything else are not.
pub fn status_from_gce(status: &str) -> ReservationStatus {
    if status == "READY" {
        ReservationStatus::Ready
    } else {
        ReservationStatus::NotReady
    }
}

/// The region of a zone: the zone without its last `-x` part
/// (`us-central1-a` -> `us-central1`). `None` if there is no such part.
pub fn region_of_zone(zone: &str) -> Option<&str> {
    let (region, suffix) = zone.rsplit_once('-')?;
    (!region.is_empty() && !suffix.is_empty()).then_some(region)
}

/// The zone named by a URL or path ending in `zones/{zone}`.
pub(crate) fn zone_from_url(url: &str) -> Option<&str> {
    let (before, zone) = url.trim_end_matches('/').rsplit_once('/')?;
    ((before == "zones" || before.ends_with("/zones")) && !zone.is_empty()).then_some(zone)
}

/// The last path segment of a machine type, which GCE may send as a URL.
fn last_segment(s: &str) -> Option<&str> {
    let last = s.trim_end_matches('/').rsplit('/').next()?;
    (!last.is_empty()).then_some(last)
}

#[cfg(test)]
mod tests;
