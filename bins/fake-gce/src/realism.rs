//! What makes the fake behave like the real Compute Engine when asked to
//! (all off by default): the operations' latency, the per-project write and
//! concurrent-operation quotas and their `403`s, unreachable and stocked-out
//! zones, images that do not exist, and `GET /fake/stats`.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Body;
use serde_json::{Map, Value, json};

use crate::FakeGce;
use crate::hooks::valid_segment;
use crate::store::API_ROOT;
use crate::wire::{error, json_response, method_not_allowed, not_found, read_json};

/// The longest operation latency accepted (`BC_FAKE_GCE_OPERATION_LATENCY_MS`): an hour.
pub const MAX_OPERATION_LATENCY_MS: u64 = 3_600_000;

/// How long a zone operation takes at least, drawn uniformly from
/// `min_ms..=max_ms` for each operation.
///
/// Parsed from `BC_FAKE_GCE_OPERATION_LATENCY_MS`: a whole number of
/// milliseconds (`20000`) or a range (`10000-40000`), each from 0 to
/// [`MAX_OPERATION_LATENCY_MS`], the first not above the second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OperationLatency {
    /// The shortest latency, in milliseconds.
    pub min_ms: u64,
    /// The longest latency, in milliseconds.
    pub max_ms: u64,
}

impl OperationLatency {
    /// Whether every operation is done as soon as its polls allow.
    pub fn is_zero(self) -> bool {
        self.max_ms == 0
    }
}

impl FromStr for OperationLatency {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "{s:?} must be a whole number of milliseconds or a range MIN-MAX (MIN <= MAX), \
                 each from 0 to {MAX_OPERATION_LATENCY_MS}"
            )
        };
        let number = |n: &str| {
            if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            n.parse::<u64>()
                .ok()
                .filter(|n| *n <= MAX_OPERATION_LATENCY_MS)
                .ok_or_else(bad)
        };
        let (min_ms, max_ms) = match s.split_once('-') {
            Some((min, max)) => (number(min)?, number(max)?),
            None => {
                let n = number(s)?;
                (n, n)
            }
        };
        if min_ms > max_ms {
            return Err(bad());
        }
        Ok(OperationLatency { min_ms, max_ms })
    }
}

/// The wall clock (epoch milliseconds) the per-minute write windows are cut
/// on: the system clock unless a test sets its own.
#[derive(Clone, Default)]
pub(crate) struct WallClock(Option<Arc<dyn Fn() -> u64 + Send + Sync>>);

impl fmt::Debug for WallClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "WallClock(set)"
        } else {
            "WallClock(system)"
        })
    }
}

impl WallClock {
    pub(crate) fn new(now_ms: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        WallClock(Some(Arc::new(now_ms)))
    }

    pub(crate) fn now_ms(&self) -> u64 {
        match &self.0 {
            Some(clock) => clock(),
            None => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        }
    }
}

/// Which quota a mutating call ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Quota {
    /// `BC_FAKE_GCE_WRITES_PER_MIN`.
    WritesPerMinute,
    /// `BC_FAKE_GCE_CONCURRENT_OPERATIONS`.
    ConcurrentOperations,
}

/// A stable made-up project number for a project id (Google names the
/// consumer of a quota by number).
fn project_number(project: &str) -> u64 {
    let hash = project.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    100_000_000_000 + hash % 900_000_000_000
}

/// The `403` Google answers a call beyond a quota of `limit`.
pub(crate) fn quota_exceeded(quota: Quota, project: &str, limit: u32) -> Response<Full<Bytes>> {
    let (metric, limit_name, metric_id, limit_id, reason) = match quota {
        Quota::WritesPerMinute => (
            "Write requests",
            "Write requests per minute",
            "compute.googleapis.com/write_requests",
            "WriteRequestsPerMinutePerProject",
            "RATE_LIMIT_EXCEEDED",
        ),
        Quota::ConcurrentOperations => (
            "Concurrent operations",
            "Concurrent operations per project",
            "compute.googleapis.com/concurrent_operations",
            "ConcurrentOperationsPerProject",
            "CONCURRENT_OPERATIONS_QUOTA_EXCEEDED",
        ),
    };
    let message = format!(
        "Quota exceeded for quota metric '{metric}' and limit '{limit_name}' of service \
         'compute.googleapis.com' for consumer 'project_number:{}'.",
        project_number(project)
    );
    json_response(
        StatusCode::FORBIDDEN,
        &json!({
            "error": {
                "code": 403,
                "message": message,
                "errors": [{
                    "message": message,
                    "domain": "usageLimits",
                    "reason": "rateLimitExceeded",
                }],
                "status": "PERMISSION_DENIED",
                "details": [{
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": reason,
                    "domain": "googleapis.com",
                    "metadata": {
                        "quota_metric": metric_id,
                        "quota_limit": limit_id,
                        "quota_limit_value": limit.to_string(),
                        "quota_location": "global",
                        "service": "compute.googleapis.com",
                        "consumer": format!("projects/{project}"),
                    },
                }],
            }
        }),
    )
}

/// The first `disks[].initializeParams.sourceImage` of a create body that
/// is under `projects/missing/`, as `projects/missing/...`.
pub(crate) fn missing_image(body: &Map<String, Value>) -> Option<String> {
    let disks = body.get("disks").and_then(Value::as_array)?;
    disks.iter().find_map(|disk| {
        let image = disk
            .get("initializeParams")
            .and_then(|p| p.get("sourceImage"))
            .and_then(Value::as_str)?;
        let image = image
            .strip_prefix(API_ROOT)
            .map_or(image, |rest| rest.trim_start_matches('/'));
        image
            .starts_with("projects/missing/")
            .then(|| image.to_owned())
    })
}

/// Leaves the `unreachable` zones out of an aggregated list's `items`: each
/// becomes a scope with an `UNREACHABLE` warning and nothing else, or, when
/// the caller asked for `returnPartialSuccess`, a `zones/{zone}` entry of a
/// top-level `unreachables`.
pub(crate) fn mark_unreachable(list: &mut Value, unreachable: &BTreeSet<String>, partial: bool) {
    if unreachable.is_empty() {
        return;
    }
    let Some(list) = list.as_object_mut() else {
        return;
    };
    let scopes: Vec<String> = unreachable.iter().map(|z| format!("zones/{z}")).collect();
    if let Some(items) = list.get_mut("items").and_then(Value::as_object_mut) {
        for scope in &scopes {
            if partial {
                items.remove(scope);
            } else {
                let warning = json!({ "warning": {
                    "code": "UNREACHABLE",
                    "message": format!("Scope '{scope}' is unreachable."),
                    "data": [{ "key": "scope", "value": scope }]
                } });
                items.insert(scope.clone(), warning);
            }
        }
    }
    if partial {
        list.insert("unreachables".to_owned(), json!(scopes));
    }
}

/// Whether a list call asked for `returnPartialSuccess=true`.
pub(crate) fn wants_partial<'a>(mut query: impl Iterator<Item = (&'a str, &'a str)>) -> bool {
    query.any(|(k, v)| k == "returnPartialSuccess" && v.eq_ignore_ascii_case("true"))
}

/// A `{ "zones": [...] }` hook body: valid zone names, deduplicated.
fn parse_zones(body: &Map<String, Value>) -> Result<BTreeSet<String>, String> {
    if let Some(key) = body.keys().find(|k| k.as_str() != "zones") {
        return Err(format!("unknown field '{key}'"));
    }
    let bad = "'zones' must be a list of zone names such as us-central1-a";
    let zones = body.get("zones").and_then(Value::as_array).ok_or(bad)?;
    zones
        .iter()
        .map(|z| match z.as_str() {
            Some(z) if valid_segment("zone", z) => Ok(z.to_owned()),
            _ => Err(bad.to_owned()),
        })
        .collect()
}

impl FakeGce {
    /// Zone operations are `DONE` no sooner than a latency drawn uniformly
    /// from `min_ms..=max_ms` (milliseconds of wall time) after they began,
    /// however often they are read; the polls of
    /// [`with_operation_polls`](Self::with_operation_polls) are needed too.
    /// Until then they answer `RUNNING` and their VM stays `PROVISIONING`,
    /// `STAGING` or `STOPPING`. `(0, 0)` (the default) turns it off; when
    /// `min_ms > max_ms` the two are swapped. See [`OperationLatency`] for
    /// the environment's form.
    #[must_use]
    pub fn with_operation_latency(mut self, min_ms: u64, max_ms: u64) -> Self {
        let latency = OperationLatency {
            min_ms: min_ms.min(max_ms),
            max_ms: min_ms.max(max_ms),
        };
        self.pace.latency = Some(latency).filter(|l| !l.is_zero());
        self
    }

    /// Each project may make `limit` mutating instance calls per wall-clock
    /// minute (the window refilled at the start of each minute); beyond it
    /// they answer `403 rateLimitExceeded` and change nothing. 0 refuses
    /// every one. Off by default.
    #[must_use]
    pub fn with_writes_per_min(mut self, limit: u32) -> Self {
        self.writes_per_min = Some(limit);
        self
    }

    /// Each project may have `limit` zone operations not yet `DONE`; a call
    /// that would start one more answers `403 rateLimitExceeded` with
    /// `CONCURRENT_OPERATIONS_QUOTA_EXCEEDED` and changes nothing. Off by
    /// default.
    #[must_use]
    pub fn with_concurrent_operations(mut self, limit: u32) -> Self {
        self.pace.concurrent = Some(limit);
        self
    }

    /// The wall clock, in milliseconds since the Unix epoch, that the
    /// minutes of [`with_writes_per_min`](Self::with_writes_per_min) are cut
    /// on (`now_ms / 60000`); the system clock by default. For tests that
    /// cross a minute without waiting one.
    #[must_use]
    pub fn with_quota_clock(mut self, now_ms: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        self.quota_clock = WallClock::new(now_ms);
        self
    }

    /// `/fake/unreachable`, `/fake/stockout` and `/fake/stats`.
    pub(crate) async fn realism_hook<B>(&self, request: Request<B>) -> Response<Full<Bytes>>
    where
        B: Body<Data = Bytes>,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let path = request.uri().path().to_owned();
        let method = request.method().clone();
        match (path.as_str(), method) {
            ("/fake/stats", Method::GET) => json_response(StatusCode::OK, &self.vms().stats()),
            ("/fake/stats", Method::DELETE) => {
                let mut vms = self.vms();
                vms.reset_stats();
                json_response(StatusCode::OK, &vms.stats())
            }
            ("/fake/unreachable" | "/fake/stockout", Method::GET) => {
                let zones = if path == "/fake/stockout" {
                    self.vms().stockout().clone()
                } else {
                    self.store().unreachable().clone()
                };
                json_response(StatusCode::OK, &json!({ "zones": zones }))
            }
            ("/fake/unreachable" | "/fake/stockout", Method::POST) => {
                let zones = match read_json(request).await.map(|body| parse_zones(&body)) {
                    Ok(Ok(zones)) => zones,
                    Ok(Err(message)) => return error(StatusCode::BAD_REQUEST, "invalid", &message),
                    Err(response) => return response,
                };
                let shown = json!({ "zones": zones });
                if path == "/fake/stockout" {
                    self.vms().set_stockout(zones);
                } else {
                    self.store().set_unreachable(zones);
                }
                json_response(StatusCode::OK, &shown)
            }
            ("/fake/unreachable" | "/fake/stockout" | "/fake/stats", _) => method_not_allowed(),
            _ => not_found(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies() {
        let parse = |s: &str| s.parse::<OperationLatency>();
        assert_eq!(
            parse("20000"),
            Ok(OperationLatency {
                min_ms: 20_000,
                max_ms: 20_000
            })
        );
        assert_eq!(
            parse("10000-40000"),
            Ok(OperationLatency {
                min_ms: 10_000,
                max_ms: 40_000
            })
        );
        assert!(parse("0").is_ok_and(OperationLatency::is_zero));
        assert!(parse("3600000").is_ok());
        for bad in [
            "",
            "x",
            "-5",
            "5-",
            "-",
            "40-10",
            "3600001",
            "1-3600001",
            "1.5",
            " 5",
            "5 - 6",
            "+5",
            "1-2-3",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn images_and_numbers() {
        let body = |image: &str| {
            json!({ "disks": [{ "initializeParams": { "sourceImage": image } }] })
                .as_object()
                .cloned()
                .unwrap_or_default()
        };
        assert_eq!(
            missing_image(&body("projects/missing/global/images/x")).as_deref(),
            Some("projects/missing/global/images/x")
        );
        assert_eq!(
            missing_image(&body(&format!(
                "{API_ROOT}/projects/missing/global/images/x"
            )))
            .as_deref(),
            Some("projects/missing/global/images/x")
        );
        assert_eq!(
            missing_image(&body("projects/debian-cloud/global/images/x")),
            None
        );
        assert_eq!(missing_image(&Map::new()), None);
        assert_eq!(project_number("p"), project_number("p"));
        assert_ne!(project_number("p"), project_number("q"));
        assert_eq!(project_number("my-project").to_string().len(), 12);
    }
}
