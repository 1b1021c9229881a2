//! The Compute Engine read path: the aggregated reservations list, the
//! authentication of every Compute Engine call and the injected failures.

use std::time::Instant;

use bytes::Bytes;
use http::header::{AUTHORIZATION, HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use serde_json::json;

use crate::FakeGce;
use crate::auth::Access;
use crate::realism::wants_partial;
use crate::store::{Failure, MAX_PAGE_SIZE, PageError};
use crate::wire::{error, json_response};

/// Why a call's credentials were refused.
pub(crate) enum Unauthenticated {
    /// No `Authorization` header (401).
    Missing,
    /// A token not issued here, expired or revoked (401).
    Invalid,
    /// A live token whose scopes do not cover the call (403).
    InsufficientScope,
}

impl FakeGce {
    pub(crate) fn list<B>(&self, project: &str, request: &Request<B>) -> Response<Full<Bytes>> {
        let failure = self.store().take_failure();
        if let Some(failure) = failure {
            return injected_failure(failure);
        }
        if let Err(why) = self.authenticate(request, Access::Read) {
            return unauthenticated(&why);
        }
        let mut page_size = MAX_PAGE_SIZE;
        let mut page_token = None;
        let query = || {
            request
                .uri()
                .query()
                .unwrap_or_default()
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| p.split_once('=').unwrap_or((p, "")))
        };
        for (key, value) in query() {
            match key {
                "maxResults" => match page_size_of(value) {
                    Ok(n) => page_size = n,
                    Err(refused) => return refused,
                },
                "pageToken" => page_token = Some(value).filter(|t| !t.is_empty()),
                // Other GCE parameters (filter, orderBy, ...) are ignored.
                _ => {}
            }
        }
        let partial = wants_partial(query());
        // Operations due by now change reservations' counts: finish them first.
        self.settle();
        let page = self
            .store()
            .aggregated_page(project, page_size, page_token, partial);
        match page {
            Ok(page) => json_response(StatusCode::OK, &page),
            Err(PageError::BadToken) => error(
                StatusCode::BAD_REQUEST,
                "invalid",
                "Invalid value for field 'pageToken'.",
            ),
        }
    }

    /// Checks a call's `Authorization` against what is configured: the
    /// static token may do anything; an issued token must be live and, for
    /// a call that changes VMs (`need` [`Access::Write`]), granted the
    /// `compute` or `cloud-platform` scope.
    pub(crate) fn authenticate<B>(
        &self,
        request: &Request<B>,
        need: Access,
    ) -> Result<(), Unauthenticated> {
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
            match token.and_then(|t| self.auth().access(t, Instant::now())) {
                Some(Access::Write) => return Ok(()),
                Some(Access::Read) if need == Access::Read => return Ok(()),
                Some(Access::Read) => return Err(Unauthenticated::InsufficientScope),
                None => {}
            }
        }
        Err(Unauthenticated::Invalid)
    }
}

/// The answer to a call that must fail.
pub(crate) fn injected_failure(failure: Failure) -> Response<Full<Bytes>> {
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

/// 401 in Google's shape, with the challenge; 403 `insufficientPermissions`
/// (`PERMISSION_DENIED`, `ACCESS_TOKEN_SCOPE_INSUFFICIENT`) for a token
/// without the scope, as Google answers it.
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
        Unauthenticated::InsufficientScope => return insufficient_scope(),
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

/// 403 for a live token whose scopes do not allow the call, in the shape
/// Google's APIs answer it.
fn insufficient_scope() -> Response<Full<Bytes>> {
    let message = "Request had insufficient authentication scopes.";
    let mut response = json_response(
        StatusCode::FORBIDDEN,
        &json!({
            "error": {
                "code": 403,
                "message": message,
                "errors": [{
                    "message": "Insufficient Permission",
                    "domain": "global",
                    "reason": "insufficientPermissions",
                }],
                "status": "PERMISSION_DENIED",
                "details": [{
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "ACCESS_TOKEN_SCOPE_INSUFFICIENT",
                    "domain": "googleapis.com",
                    "metadata": { "service": "compute.googleapis.com" },
                }],
            }
        }),
    );
    response.headers_mut().insert(
        WWW_AUTHENTICATE,
        HeaderValue::from_static(
            "Bearer realm=\"https://accounts.google.com/\", error=\"insufficient_scope\", \
             scope=\"https://www.googleapis.com/auth/compute \
             https://www.googleapis.com/auth/cloud-platform\"",
        ),
    );
    response
}
