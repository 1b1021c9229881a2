//! Google's token endpoints: the JWT bearer grant of `POST /token` and the
//! metadata server's token.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, HOST, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Body;
use serde_json::json;

use crate::FakeGce;
use crate::auth::{self, Issuer, JWT_BEARER_GRANT};
use crate::wire::{BodyError, error, json_response, read_bytes};

const METADATA_FLAVOR: HeaderName = HeaderName::from_static("metadata-flavor");

impl FakeGce {
    pub(crate) async fn token_grant<B>(&self, request: Request<B>) -> Response<Full<Bytes>>
    where
        B: Body<Data = Bytes>,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let host = request
            .headers()
            .get(HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned)
            .or_else(|| request.uri().authority().map(ToString::to_string));
        let Some(host) = host else {
            return oauth_error("invalid_request", "the request has no Host header");
        };
        let expected_aud = format!("{}://{host}/token", self.scheme());
        let form_encoded = request
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| {
                v.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            });
        if !form_encoded {
            return oauth_error(
                "invalid_request",
                "Content-Type must be application/x-www-form-urlencoded",
            );
        }
        let body = match read_bytes(request).await {
            Ok(body) => body,
            Err(BodyError::TooLarge) => {
                let mut response = oauth_error("invalid_request", "body over 1 MiB");
                *response.status_mut() = StatusCode::PAYLOAD_TOO_LARGE;
                return response;
            }
            Err(BodyError::Unreadable) => {
                return oauth_error("invalid_request", "could not read the body");
            }
        };
        let form = match auth::parse_form(&body) {
            Ok(form) => form,
            Err(why) => return oauth_error("invalid_request", &why),
        };
        match form.get("grant_type").map(String::as_str) {
            Some(JWT_BEARER_GRANT) => {}
            other => {
                return oauth_error(
                    "unsupported_grant_type",
                    &format!("Invalid grant_type: {}", other.unwrap_or("")),
                );
            }
        }
        let Some(assertion) = form.get("assertion") else {
            return oauth_error("invalid_request", "Missing required parameter: assertion");
        };
        let now_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let checked = auth::check_assertion(assertion, &expected_aud, now_s, |iss| {
            self.auth().public_key(iss).map(str::to_owned)
        });
        match checked {
            Ok(scope) => {
                let scopes: Vec<&str> = scope.split(' ').filter(|s| !s.is_empty()).collect();
                self.issue(Issuer::Grant, &scopes)
            }
            Err(why) => oauth_error("invalid_grant", &why),
        }
    }

    pub(crate) fn metadata_token<B>(&self, request: &Request<B>) -> Response<Full<Bytes>> {
        if request
            .headers()
            .get(METADATA_FLAVOR)
            .is_none_or(|v| v.as_bytes() != b"Google")
        {
            let mut response = Response::new(Full::new(Bytes::from_static(
                b"Missing required header \"Metadata-Flavor\": \"Google\"\n",
            )));
            *response.status_mut() = StatusCode::FORBIDDEN;
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            return response;
        }
        // `scopes=a,b` narrows the token as the metadata server does;
        // without it the token has the default account's full access.
        let asked = request.uri().query().and_then(|query| {
            query
                .split('&')
                .filter_map(|pair| pair.split_once('='))
                .find(|(key, _)| *key == "scopes")
                .and_then(|(_, value)| auth::percent_decode(value))
        });
        let scopes: Vec<&str> = match &asked {
            Some(list) => list.split(',').filter(|s| !s.is_empty()).collect(),
            None => vec![auth::CLOUD_PLATFORM_SCOPE],
        };
        let mut response = self.issue(Issuer::Metadata, &scopes);
        response
            .headers_mut()
            .insert(METADATA_FLAVOR, HeaderValue::from_static("Google"));
        response
    }

    /// Issues a fresh token of `scopes` and answers it in the token
    /// endpoints' shape.
    fn issue(&self, issuer: Issuer, scopes: &[&str]) -> Response<Full<Bytes>> {
        let token = match auth::new_access_token() {
            Ok(token) => token,
            Err(why) => return error(StatusCode::INTERNAL_SERVER_ERROR, "backendError", &why),
        };
        self.auth().issue(
            issuer,
            token.clone(),
            scopes,
            Instant::now(),
            self.token_ttl,
        );
        let mut response = json_response(
            StatusCode::OK,
            &json!({
                "access_token": token,
                "expires_in": self.token_ttl.as_secs(),
                "token_type": "Bearer",
            }),
        );
        response
            .headers_mut()
            .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        response
    }
}

/// A refusal of `POST /token` in Google's OAuth shape (400).
fn oauth_error(code: &str, description: &str) -> Response<Full<Bytes>> {
    json_response(
        StatusCode::BAD_REQUEST,
        &json!({ "error": code, "error_description": description }),
    )
}
