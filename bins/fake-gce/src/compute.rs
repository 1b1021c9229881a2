//! The Compute Engine read path: the aggregated reservations list, its
//! authentication and its injected failures.

use std::time::Instant;

use bytes::Bytes;
use http::header::{AUTHORIZATION, HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use serde_json::json;

use crate::FakeGce;
use crate::store::{Failure, MAX_PAGE_SIZE, PageError};
use crate::wire::{error, json_response};

/// Why a read call's credentials were refused.
pub(crate) enum Unauthenticated {
    Missing,
    Invalid,
}

impl FakeGce {
    pub(crate) fn list<B>(&self, project: &str, request: &Request<B>) -> Response<Full<Bytes>> {
        let failure = self.store().take_failure();
        if let Some(failure) = failure {
            return injected_failure(failure);
        }
        if let Err(why) = self.authenticate(request) {
            return unauthenticated(&why);
        }
        let mut page_size = MAX_PAGE_SIZE;
        let mut page_token = None;
        for (key, value) in request
            .uri()
            .query()
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').unwrap_or((p, "")))
        {
            match key {
                "maxResults" => match page_size_of(value) {
                    Ok(n) => page_size = n,
                    Err(refused) => return refused,
                },
                "pageToken" => page_token = Some(value).filter(|t| !t.is_empty()),
                // Other GCE parameters (filter, orderBy, returnPartialSuccess, ...) are ignored.
                _ => {}
            }
        }
        match self.store().aggregated_page(project, page_size, page_token) {
            Ok(page) => json_response(StatusCode::OK, &page),
            Err(PageError::BadToken) => error(
                StatusCode::BAD_REQUEST,
                "invalid",
                "Invalid value for field 'pageToken'.",
            ),
        }
    }

    /// Checks a read call's `Authorization` against what is configured.
    pub(crate) fn authenticate<B>(&self, request: &Request<B>) -> Result<(), Unauthenticated> {
        if self.required_authorization.is_none() && !self.require_auth {
            return Ok(());
        }
        let sent = request
            .headers()
            .get(AUTHORIZATION)
            .ok_or(Unauthenticated::Missing)?;
        if let Some(expected) = &self.required_authorization
            && sent.as_bytes() == expected.as_bytes()
        {
            return Ok(());
        }
        if self.require_auth {
            let token = sent
                .to_str()
                .ok()
                .and_then(|v| v.split_once(' '))
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .map(|(_, token)| token.trim());
            if let Some(token) = token
                && self.auth().is_live(token, Instant::now())
            {
                return Ok(());
            }
        }
        Err(Unauthenticated::Invalid)
    }
}

/// The answer to a read call that must fail.
fn injected_failure(failure: Failure) -> Response<Full<Bytes>> {
    let status = StatusCode::from_u16(failure.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    let reason = match status.as_u16() {
        400 => "invalid",
        401 => "authError",
        403 => "forbidden",
        404 => "notFound",
        429 => "rateLimitExceeded",
        500..=599 => "backendError",
        _ => "invalid",
    };
    let mut response = error(
        status,
        reason,
        "fake-gce: injected failure (POST /fake/fail)",
    );
    if let Some(s) = failure.retry_after_s {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(s));
    }
    response
}

/// 401 in Google's shape, with the challenge.
pub(crate) fn unauthenticated(why: &Unauthenticated) -> Response<Full<Bytes>> {
    const SEE: &str = "Expected OAuth 2 access token, login cookie or other valid \
                       authentication credential. See \
                       https://developers.google.com/identity/sign-in/web/devconsole-project.";
    let (message, reason, challenge) = match why {
        Unauthenticated::Missing => (
            format!("Request is missing required authentication credential. {SEE}"),
            "required",
            "Bearer realm=\"https://accounts.google.com/\"",
        ),
        Unauthenticated::Invalid => (
            format!("Request had invalid authentication credentials. {SEE}"),
            "authError",
            "Bearer realm=\"https://accounts.google.com/\", error=\"invalid_token\"",
        ),
    };
    let mut response = json_response(
        StatusCode::UNAUTHORIZED,
        &json!({
            "error": {
                "code": 401,
                "message": message,
                "errors": [{
                    "message": message,
                    "domain": "global",
                    "reason": reason,
                    "location": "Authorization",
                    "locationType": "header",
                }],
                "status": "UNAUTHENTICATED",
            }
        }),
    );
    response
        .headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
    response
}

/// A list call's `maxResults`: 0 or more than the most a page holds means
/// the most; anything but a number is refused as Google refuses it.
#[expect(clippy::result_large_err, reason = "the refusal is the answer itself")]
pub(crate) fn page_size_of(value: &str) -> Result<usize, Response<Full<Bytes>>> {
    match value.parse::<usize>() {
        Ok(0) => Ok(MAX_PAGE_SIZE),
        Ok(n) => Ok(n.min(MAX_PAGE_SIZE)),
        Err(_) => Err(error(
            StatusCode::BAD_REQUEST,
            "invalid",
            "Invalid value for field 'maxResults'.",
        )),
    }
}
