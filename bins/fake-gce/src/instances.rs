//! The Compute Engine instances API (create, stop, start, delete, get, the
//! zone operations and the aggregated list) and its `/fake/` hooks.

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Body;
use serde_json::{Map, Value, json};

use crate::FakeGce;
use crate::auth::{Access, percent_decode};
use crate::compute::{injected_failure, page_size_of, unauthenticated};
use crate::filter::parse_filter;
use crate::hooks::valid_segment;
use crate::realism::{Quota, missing_image, quota_exceeded, wants_partial};
use crate::store::{API_ROOT, MAX_PAGE_SIZE};
use crate::vms::{ListQuery, OpType, Pace, Refusal, VmSpec};
use crate::wire::{error, json_response, method_not_allowed, not_found, read_json};

/// The only reservation-affinity key GCE knows.
const RESERVATION_NAME_KEY: &str = "compute.googleapis.com/reservation-name";

impl FakeGce {
    /// Answers every path of the instances API and its hooks.
    pub(crate) async fn instances<B>(&self, request: Request<B>) -> Response<Full<Bytes>>
    where
        B: Body<Data = Bytes>,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let path = request.uri().path().to_owned();
        let query = match parse_query(request.uri().query()) {
            Ok(query) => query,
            Err(message) => return error(StatusCode::BAD_REQUEST, "invalid", &message),
        };
        let param = |name: &str| {
            query
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let method = request.method().clone();
        match segments.as_slice() {
            ["compute", "v1", "projects", project, rest @ ..] => {
                let allowed = match rest {
                    ["zones", _, "instances"] | ["zones", _, "instances", _, "stop" | "start"] => {
                        method == Method::POST
                    }
                    ["zones", _, "instances", _] => {
                        method == Method::GET || method == Method::DELETE
                    }
                    ["zones", _, "operations", _] | ["aggregated", "instances"] => {
                        method == Method::GET
                    }
                    _ => return not_found(),
                };
                if !allowed {
                    return method_not_allowed();
                }
                let delay = self.store().delay();
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                let write = method != Method::GET;
                let request_id = param("requestId");
                if write {
                    self.vms().record(method.as_str(), &path, request_id);
                } else if let Some(failure) = self.store().take_failure() {
                    return injected_failure(failure);
                }
                let need = if write { Access::Write } else { Access::Read };
                if let Err(why) = self.authenticate(&request, need) {
                    return unauthenticated(&why);
                }
                if let Some(bad) = std::iter::once(("project", *project))
                    .chain(zone_and_name(rest))
                    .find(|(what, v)| !valid_segment(what, v))
                {
                    return error(
                        StatusCode::BAD_REQUEST,
                        "invalid",
                        &format!("Invalid value for field '{}': '{}'.", bad.0, bad.1),
                    );
                }
                if let Some(rid) = request_id.filter(|r| !valid_uuid(r)) {
                    return error(
                        StatusCode::BAD_REQUEST,
                        "invalid",
                        &format!("Invalid value for field 'requestId': '{rid}'."),
                    );
                }
                let project = (*project).to_owned();
                // Authentication first, then the rate quota (as Google does).
                if write {
                    let now_ms = self.quota_clock.now_ms();
                    let admitted = self
                        .vms()
                        .admit_write(&project, self.writes_per_min, now_ms);
                    if let Err(limit) = admitted {
                        return quota_exceeded(Quota::WritesPerMinute, &project, limit);
                    }
                }
                let resource = |zone: &str, name: &str| {
                    format!("projects/{project}/zones/{zone}/instances/{name}")
                };
                let pace = &self.pace;
                let answered = match rest {
                    ["zones", zone, "instances"] => {
                        let (zone, rid) = ((*zone).to_owned(), request_id.map(str::to_owned));
                        let body = match read_json(request).await {
                            Ok(body) => body,
                            Err(response) => return response,
                        };
                        let spec = match parse_vm(&project, &zone, &body) {
                            Ok(spec) => spec,
                            Err(m) => return error(StatusCode::BAD_REQUEST, "invalid", &m),
                        };
                        if let Some(image) = missing_image(&body) {
                            let message = format!("The resource '{image}' was not found");
                            return error(StatusCode::NOT_FOUND, "notFound", &message);
                        }
                        let name = spec.name.clone();
                        let mut vms = self.vms();
                        let answer = vms.insert(
                            &mut self.store(),
                            &project,
                            &zone,
                            rid.as_deref(),
                            spec,
                            pace,
                        );
                        answer.map_err(|r| (r, resource(&zone, &name)))
                    }
                    ["zones", zone, "instances", name, action] => {
                        let op_type = if *action == "stop" {
                            OpType::Stop
                        } else {
                            OpType::Start
                        };
                        let mut vms = self.vms();
                        vms.change(
                            &mut self.store(),
                            &project,
                            zone,
                            name,
                            request_id,
                            op_type,
                            pace,
                        )
                        .map_err(|r| (r, resource(zone, name)))
                    }
                    ["zones", zone, "instances", name] if method == Method::DELETE => {
                        let mut vms = self.vms();
                        let store = &mut self.store();
                        vms.change(
                            store,
                            &project,
                            zone,
                            name,
                            request_id,
                            OpType::Delete,
                            pace,
                        )
                        .map_err(|r| (r, resource(zone, name)))
                    }
                    ["zones", zone, "instances", name] => self
                        .vms()
                        .get(&project, zone, name)
                        .ok_or_else(|| (Refusal::NotFound, resource(zone, name))),
                    ["zones", zone, "operations", name] => {
                        let mut vms = self.vms();
                        vms.poll(&mut self.store(), &project, zone, name)
                            .ok_or_else(|| {
                                (
                                    Refusal::NotFound,
                                    format!("projects/{project}/zones/{zone}/operations/{name}"),
                                )
                            })
                    }
                    _ => return self.list_instances(&project, &query),
                };
                let lost = || {
                    write
                        .then(|| self.store().take_mutation_failure())
                        .flatten()
                };
                match answered {
                    // Applied, and the answer lost on its way back.
                    Ok(value) => match lost() {
                        Some(failure) => injected_failure(failure),
                        None => json_response(StatusCode::OK, &value),
                    },
                    Err((refusal, resource)) => refused(refusal, &resource, &project, pace),
                }
            }
            [
                "fake",
                "instances",
                zone,
                name,
                action @ ("stop" | "start" | "delete"),
            ] => {
                if method != Method::POST {
                    return method_not_allowed();
                }
                let mut vms = self.vms();
                match vms.outside(&mut self.store(), zone, name, action) {
                    Ok(Value::Null) => json_response(StatusCode::OK, &json!({ "deleted": true })),
                    Ok(vm) => json_response(StatusCode::OK, &vm),
                    Err(Refusal::NotFound) => not_found(),
                    Err(_) => error(
                        StatusCode::CONFLICT,
                        "conditionNotMet",
                        "the VM's reservation is full",
                    ),
                }
            }
            ["fake", "clock"] => {
                if method != Method::POST {
                    return method_not_allowed();
                }
                match read_json(request).await {
                    Ok(body) => match body.get("nowMs").and_then(Value::as_i64) {
                        Some(now) => {
                            self.vms().set_clock(now);
                            json_response(StatusCode::OK, &json!({ "nowMs": now }))
                        }
                        None => error(StatusCode::BAD_REQUEST, "invalid", "nowMs: an integer"),
                    },
                    Err(resp) => resp,
                }
            }
            ["fake", "vm-runs"] => {
                if method != Method::GET {
                    return method_not_allowed();
                }
                let vms = self.vms();
                json_response(
                    StatusCode::OK,
                    &json!({ "runs": vms.runs(), "created": vms.created() }),
                )
            }
            ["fake", "fail-mutations"] => {
                if method != Method::POST {
                    return method_not_allowed();
                }
                match read_json(request).await {
                    Ok(body) => self.fail_mutations(&body),
                    Err(response) => response,
                }
            }
            ["fake", "fail-instances"] => {
                if method != Method::POST {
                    return method_not_allowed();
                }
                match read_json(request).await {
                    Ok(body) => self.fail_instances(&body),
                    Err(response) => response,
                }
            }
            ["fake", "requests"] => {
                let mut vms = self.vms();
                match method {
                    Method::GET => {}
                    Method::DELETE => vms.reset_requests(),
                    _ => return method_not_allowed(),
                }
                json_response(StatusCode::OK, &json!({ "requests": vms.requests() }))
            }
            _ => not_found(),
        }
    }

    fn list_instances(&self, project: &str, query: &[(String, String)]) -> Response<Full<Bytes>> {
        let mut filter = Vec::new();
        let mut page_size = MAX_PAGE_SIZE;
        let mut page_token = None;
        for (key, value) in query {
            match key.as_str() {
                "filter" => match parse_filter(value) {
                    Ok(terms) => filter = terms,
                    Err(message) => return error(StatusCode::BAD_REQUEST, "invalid", &message),
                },
                "maxResults" => match page_size_of(value) {
                    Ok(n) => page_size = n,
                    Err(refused) => return refused,
                },
                "pageToken" => page_token = Some(value.as_str()).filter(|t| !t.is_empty()),
                _ => {}
            }
        }
        let unreachable = self.store().unreachable().clone();
        let list = ListQuery {
            filter: &filter,
            page_size,
            page_token,
            unreachable: &unreachable,
            partial: wants_partial(query.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
        };
        match self.vms().aggregated_page(project, &list) {
            Some(page) => json_response(StatusCode::OK, &page),
            None => error(
                StatusCode::BAD_REQUEST,
                "invalid",
                "Invalid value for field 'pageToken'.",
            ),
        }
    }

    fn fail_instances(&self, body: &Map<String, Value>) -> Response<Full<Bytes>> {
        if let Some(key) = body
            .keys()
            .find(|k| !matches!(k.as_str(), "count" | "code"))
        {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid",
                &format!("unknown field '{key}'"),
            );
        }
        let Some(count) = body.get("count").and_then(Value::as_u64) else {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid",
                "'count' must be a non-negative integer",
            );
        };
        let code = match body.get("code") {
            None => "ZONE_RESOURCE_POOL_EXHAUSTED",
            Some(Value::String(s))
                if !s.is_empty() && s.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') =>
            {
                s.as_str()
            }
            Some(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "invalid",
                    "'code' must be an upper-case error code such as ZONE_RESOURCE_POOL_EXHAUSTED",
                );
            }
        };
        self.vms().fail_next(count, code);
        json_response(StatusCode::OK, &json!({ "count": count, "code": code }))
    }
}

/// The zone and instance or operation name a compute path names.
fn zone_and_name<'a>(rest: &[&'a str]) -> Vec<(&'static str, &'a str)> {
    match rest {
        ["zones", zone, _, name, ..] => vec![("zone", *zone), ("name", *name)],
        ["zones", zone, ..] => vec![("zone", *zone)],
        _ => Vec::new(),
    }
}

/// An HTTP refusal in Google's shape.
fn refused(refusal: Refusal, resource: &str, project: &str, pace: &Pace) -> Response<Full<Bytes>> {
    match refusal {
        Refusal::NotFound => error(
            StatusCode::NOT_FOUND,
            "notFound",
            &format!("The resource '{resource}' was not found"),
        ),
        Refusal::AlreadyExists => error(
            StatusCode::CONFLICT,
            "alreadyExists",
            &format!("The resource '{resource}' already exists"),
        ),
        Refusal::NotReady => error(
            StatusCode::BAD_REQUEST,
            "resourceNotReady",
            &format!("The resource '{resource}' is not ready"),
        ),
        Refusal::TooManyOperations => quota_exceeded(
            Quota::ConcurrentOperations,
            project,
            pace.concurrent.unwrap_or_default(),
        ),
    }
}

/// Query parameters, percent-decoded.
fn parse_query(query: Option<&str>) -> Result<Vec<(String, String)>, String> {
    query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let v = v.replace('+', " ");
            match (percent_decode(k), percent_decode(&v)) {
                (Some(k), Some(v)) => Ok((k, v)),
                _ => Err(format!("malformed query parameter '{k}'")),
            }
        })
        .collect()
}

/// A UUID as GCE wants a `requestId`: 8-4-4-4-12 hex digits.
fn valid_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A create's body, read as GCE reads the parts the fake keeps (other fields
/// are accepted and ignored).
fn parse_vm(project: &str, zone: &str, body: &Map<String, Value>) -> Result<VmSpec, String> {
    let name = match body.get("name") {
        Some(Value::String(s)) if valid_segment("name", s) => s.clone(),
        _ => return Err("Invalid value for field 'resource.name'.".into()),
    };
    let machine_type = match body.get("machineType") {
        Some(Value::String(s)) if s.starts_with("https://") => s.clone(),
        Some(Value::String(s)) if s.starts_with("projects/") => format!("{API_ROOT}/{s}"),
        Some(Value::String(s)) if s.starts_with("zones/") => {
            format!("{API_ROOT}/projects/{project}/{s}")
        }
        Some(Value::String(s)) if !s.is_empty() && !s.contains('/') => {
            format!("{API_ROOT}/projects/{project}/zones/{zone}/machineTypes/{s}")
        }
        _ => return Err("Invalid value for field 'resource.machineType'.".into()),
    };
    let labels = match body.get("labels") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) if map.values().all(Value::is_string) => map.clone(),
        Some(_) => return Err("Invalid value for field 'resource.labels'.".into()),
    };
    let affinity = body
        .get("reservationAffinity")
        .cloned()
        .unwrap_or_else(|| json!({ "consumeReservationType": "ANY_RESERVATION" }));
    let bad_affinity = || "Invalid value for field 'resource.reservationAffinity'.".to_owned();
    let reservation = match affinity
        .get("consumeReservationType")
        .and_then(Value::as_str)
    {
        Some("SPECIFIC_RESERVATION") => {
            if affinity.get("key").and_then(Value::as_str) != Some(RESERVATION_NAME_KEY) {
                return Err(bad_affinity());
            }
            match affinity
                .get("values")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
            {
                Some([Value::String(v)]) => {
                    Some(v.rsplit('/').next().unwrap_or(v.as_str()).to_owned())
                }
                _ => return Err(bad_affinity()),
            }
        }
        Some("NO_RESERVATION" | "ANY_RESERVATION") => None,
        _ => return Err(bad_affinity()),
    };
    Ok(VmSpec {
        name,
        machine_type,
        labels,
        affinity,
        reservation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert!(valid_uuid("123e4567-e89b-12d3-a456-426614174000"));
        assert!(!valid_uuid("123e4567e89b12d3a456426614174000"));
        assert!(!valid_uuid("123e4567-e89b-12d3-a456-42661417400z"));
    }
}
