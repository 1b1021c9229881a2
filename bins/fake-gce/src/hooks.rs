//! The test and demo hooks under `/fake/`: reservations, service-account
//! keys, injected failures and delays.

use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use serde_json::{Map, Value, json};

use crate::FakeGce;
use crate::store::{Failure, ReservationSpec};
use crate::wire::{error, json_response};

/// The longest delay `POST /fake/delay` accepts.
const MAX_DELAY_MS: u64 = 60_000;
/// The longest `retryAfterS` `POST /fake/fail` accepts.
const MAX_RETRY_AFTER_S: u64 = 86_400;

impl FakeGce {
    pub(crate) fn put_service_account(
        &self,
        email: &str,
        body: &Map<String, Value>,
    ) -> Response<Full<Bytes>> {
        if let Some(key) = body.keys().find(|k| k.as_str() != "publicKeyPem") {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid",
                &format!("unknown field '{key}'"),
            );
        }
        let Some(pem) = body.get("publicKeyPem").and_then(Value::as_str) else {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid",
                "'publicKeyPem' must be a PEM string",
            );
        };
        match self.auth().register(email, pem) {
            Ok(()) => json_response(
                StatusCode::OK,
                &json!({ "email": email, "publicKeyPem": pem }),
            ),
            Err(why) => error(StatusCode::BAD_REQUEST, "invalid", &why),
        }
    }

    pub(crate) fn put(
        &self,
        project: &str,
        zone: &str,
        name: &str,
        body: &Map<String, Value>,
    ) -> Response<Full<Bytes>> {
        let spec = match parse_spec(body) {
            Ok(spec) => spec,
            Err(message) => return error(StatusCode::BAD_REQUEST, "invalid", &message),
        };
        let shown = self.store().put(project, zone, name, spec);
        json_response(StatusCode::OK, &shown)
    }

    pub(crate) fn delay(&self, body: &Map<String, Value>) -> Response<Full<Bytes>> {
        if let Some(key) = body.keys().find(|k| k.as_str() != "ms") {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid",
                &format!("unknown field '{key}'"),
            );
        }
        let Some(ms) = body
            .get("ms")
            .and_then(Value::as_u64)
            .filter(|ms| *ms <= MAX_DELAY_MS)
        else {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid",
                &format!("'ms' must be an integer from 0 to {MAX_DELAY_MS}"),
            );
        };
        self.store().set_delay(Duration::from_millis(ms));
        json_response(StatusCode::OK, &json!({ "ms": ms }))
    }

    pub(crate) fn fail(&self, body: &Map<String, Value>) -> Response<Full<Bytes>> {
        let (count, failure) = match parse_fail(body) {
            Ok(parsed) => parsed,
            Err(message) => return error(StatusCode::BAD_REQUEST, "invalid", &message),
        };
        self.store().fail_next(count, failure);
        fail_answer(count, failure)
    }

    /// `POST /fake/fail-mutations`: as `/fake/fail`, for the mutating
    /// instance calls, which are applied before they fail.
    pub(crate) fn fail_mutations(&self, body: &Map<String, Value>) -> Response<Full<Bytes>> {
        let (count, failure) = match parse_fail(body) {
            Ok(parsed) => parsed,
            Err(message) => return error(StatusCode::BAD_REQUEST, "invalid", &message),
        };
        self.store().fail_mutations_next(count, failure);
        fail_answer(count, failure)
    }
}

/// The values in effect after `/fake/fail` or `/fake/fail-mutations`.
fn fail_answer(count: u64, failure: Failure) -> Response<Full<Bytes>> {
    let mut shown = json!({ "count": count, "status": failure.status });
    if let Some(s) = failure.retry_after_s
        && let Some(shown) = shown.as_object_mut()
    {
        shown.insert("retryAfterS".to_owned(), s.into());
    }
    json_response(StatusCode::OK, &shown)
}

fn parse_fail(body: &Map<String, Value>) -> Result<(u64, Failure), String> {
    if let Some(key) = body
        .keys()
        .find(|k| !matches!(k.as_str(), "count" | "status" | "retryAfterS"))
    {
        return Err(format!("unknown field '{key}'"));
    }
    let count = body
        .get("count")
        .and_then(Value::as_u64)
        .ok_or("'count' must be a non-negative integer")?;
    let mut failure = Failure::default();
    match body.get("status") {
        None | Some(Value::Null) => {}
        Some(v) => {
            failure.status = v
                .as_u64()
                .filter(|s| (400..=599).contains(s))
                .and_then(|s| u16::try_from(s).ok())
                .ok_or("'status' must be an HTTP error status from 400 to 599")?;
        }
    }
    match body.get("retryAfterS") {
        None | Some(Value::Null) => {}
        Some(v) => {
            let s = v
                .as_u64()
                .filter(|s| *s <= MAX_RETRY_AFTER_S)
                .ok_or_else(|| {
                    format!("'retryAfterS' must be an integer from 0 to {MAX_RETRY_AFTER_S}")
                })?;
            failure.retry_after_s = Some(s);
        }
    }
    Ok((count, failure))
}

/// A service-account email as a path names it: `local@domain`, no spaces,
/// slashes or control characters.
pub(crate) fn valid_email(s: &str) -> bool {
    (3..=254).contains(&s.len())
        && s.split_once('@')
            .is_some_and(|(local, domain)| !local.is_empty() && !domain.is_empty())
        && !s
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '/')
}

fn parse_spec(body: &Map<String, Value>) -> Result<ReservationSpec, String> {
    if let Some(key) = body.keys().find(|k| {
        !matches!(
            k.as_str(),
            "count" | "inUseCount" | "machineType" | "status"
        )
    }) {
        return Err(format!("unknown field '{key}'"));
    }
    let count = |key: &str| match body.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_i64()
            .filter(|n| *n >= 0)
            .map(Some)
            .ok_or_else(|| format!("'{key}' must be a non-negative integer")),
    };
    let total = count("count")?.ok_or("'count' is required")?;
    let in_use_count = count("inUseCount")?.unwrap_or(0);
    if in_use_count > total {
        return Err("'inUseCount' must not exceed 'count'".into());
    }
    let machine_type = match body.get("machineType") {
        Some(Value::String(s)) if !s.is_empty() && !s.contains(char::is_whitespace) => s.clone(),
        Some(_) => return Err("'machineType' must be a non-empty string".into()),
        None => return Err("'machineType' is required".into()),
    };
    let status = match body.get("status") {
        None => "READY".to_owned(),
        Some(Value::String(s))
            if !s.is_empty() && s.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') =>
        {
            s.clone()
        }
        Some(_) => {
            return Err("'status' must be an upper-case word such as READY or CREATING".into());
        }
    };
    Ok(ReservationSpec {
        count: total,
        in_use_count,
        machine_type,
        status,
    })
}

/// GCE resource names: `[a-z]([-a-z0-9]{0,61}[a-z0-9])?`; a zone also needs
/// its region part (`us-central1-a`).
pub(crate) fn valid_segment(what: &str, s: &str) -> bool {
    let b = s.as_bytes();
    let name = (1..=63).contains(&b.len())
        && b.first().is_some_and(u8::is_ascii_lowercase)
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && b.last().is_some_and(|&c| c != b'-');
    name && (what != "zone" || s.contains('-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments() {
        assert!(valid_segment("zone", "us-central1-a"));
        assert!(!valid_segment("zone", "uscentral1a"));
        assert!(valid_segment("name", "r1"));
        for bad in ["", "R1", "1r", "r-", "r_1", &"a".repeat(64)] {
            assert!(!valid_segment("name", bad), "{bad}");
        }
    }

    #[test]
    fn specs() {
        let parse = |v: Value| parse_spec(v.as_object().expect("object"));
        assert_eq!(
            parse(json!({ "count": 4, "machineType": "n2-standard-4" })),
            Ok(ReservationSpec {
                count: 4,
                in_use_count: 0,
                machine_type: "n2-standard-4".into(),
                status: "READY".into()
            })
        );
        for bad in [
            json!({ "machineType": "n2" }),
            json!({ "count": "4", "machineType": "n2" }),
            json!({ "count": -1, "machineType": "n2" }),
            json!({ "count": 1.5, "machineType": "n2" }),
            json!({ "count": 1, "inUseCount": 2, "machineType": "n2" }),
            json!({ "count": 1 }),
            json!({ "count": 1, "machineType": "" }),
            json!({ "count": 1, "machineType": "n2", "status": "ready" }),
            json!({ "count": 1, "machineType": "n2", "zone": "x" }),
        ] {
            assert!(parse(bad.clone()).is_err(), "{bad}");
        }
    }
}
