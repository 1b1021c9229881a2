//! Routing: which handler answers a request, by method and path, and what
//! every answer is followed by (the world kept, the request logged).

use std::time::Instant;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Body;
use serde_json::json;

use crate::FakeGce;
use crate::auth;
use crate::hooks::{valid_email, valid_segment};
use crate::wire::{error, json_response, method_not_allowed, not_found, read_json};

impl FakeGce {
    /// Answers one request.
    pub async fn handle<B>(&self, request: Request<B>) -> Response<Full<Bytes>>
    where
        B: Body<Data = Bytes>,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let response = self.route(request).await;
        // Before the answer leaves: what a caller was told is kept.
        if let Err(e) = self.save_state() {
            tracing::error!(error = %e, "the world changed but is not kept for a restart");
        }
        tracing::info!(%method, %path, status = response.status().as_u16(), "request");
        response
    }

    async fn route<B>(&self, request: Request<B>) -> Response<Full<Bytes>>
    where
        B: Body<Data = Bytes>,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let path = request.uri().path().to_owned();
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        self.settle();
        match segments.as_slice() {
            [
                "compute",
                "v1",
                "projects",
                project,
                "aggregated",
                "reservations",
            ] => {
                if request.method() != Method::GET {
                    return method_not_allowed();
                }
                let delay = self.store().count_call(project);
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                self.list(project, &request)
            }
            [
                "compute",
                "v1",
                "projects",
                _,
                "zones",
                _,
                "instances" | "operations",
                ..,
            ]
            | ["compute", "v1", "projects", _, "aggregated", "instances"]
            | [
                "fake",
                "instances" | "fail-instances" | "fail-mutations" | "requests" | "clock"
                | "vm-runs",
                ..,
            ] => self.instances(request).await,
            ["fake", "unreachable" | "stockout" | "stats"] => self.realism_hook(request).await,
            ["token"] => {
                if request.method() != Method::POST {
                    return method_not_allowed();
                }
                self.token_grant(request).await
            }
            [
                "computeMetadata",
                "v1",
                "instance",
                "service-accounts",
                "default",
                "token",
            ] => {
                if request.method() != Method::GET {
                    return method_not_allowed();
                }
                self.metadata_token(&request)
            }
            [
                "fake",
                "projects",
                project,
                "zones",
                zone,
                "reservations",
                name,
            ] => {
                if let Some(bad) = [("project", *project), ("zone", *zone), ("name", *name)]
                    .into_iter()
                    .find(|(what, v)| !valid_segment(what, v))
                {
                    return error(
                        StatusCode::BAD_REQUEST,
                        "invalid",
                        &format!("invalid {} in path", bad.0),
                    );
                }
                let (project, zone, name) =
                    (project.to_string(), zone.to_string(), name.to_string());
                match *request.method() {
                    Method::PUT => match read_json(request).await {
                        Ok(body) => self.put(&project, &zone, &name, &body),
                        Err(response) => response,
                    },
                    Method::GET => match self.store().get(&project, &zone, &name) {
                        Some(r) => json_response(StatusCode::OK, &r),
                        None => not_found(),
                    },
                    Method::DELETE => {
                        if self.store().delete(&project, &zone, &name) {
                            json_response(StatusCode::OK, &json!({ "deleted": true }))
                        } else {
                            not_found()
                        }
                    }
                    _ => method_not_allowed(),
                }
            }
            ["fake", "service-accounts", email] => {
                let Some(email) = auth::percent_decode(email).filter(|e| valid_email(e)) else {
                    return error(
                        StatusCode::BAD_REQUEST,
                        "invalid",
                        "invalid service-account email in path",
                    );
                };
                match *request.method() {
                    Method::PUT => match read_json(request).await {
                        Ok(body) => self.put_service_account(&email, &body),
                        Err(response) => response,
                    },
                    Method::GET => match self.auth().public_key(&email) {
                        Some(pem) => json_response(
                            StatusCode::OK,
                            &json!({ "email": email, "publicKeyPem": pem }),
                        ),
                        None => not_found(),
                    },
                    Method::DELETE => {
                        if self.auth().unregister(&email) {
                            json_response(StatusCode::OK, &json!({ "deleted": true }))
                        } else {
                            not_found()
                        }
                    }
                    _ => method_not_allowed(),
                }
            }
            ["fake", "revoke-tokens"] => {
                if request.method() != Method::POST {
                    return method_not_allowed();
                }
                let revoked = self.auth().revoke_all(Instant::now());
                json_response(StatusCode::OK, &json!({ "revoked": revoked }))
            }
            ["fake", "token-scopes"] => {
                if request.method() != Method::GET {
                    return method_not_allowed();
                }
                let scopes = self.auth().scope_counts().clone();
                json_response(StatusCode::OK, &json!({ "scopes": scopes }))
            }
            ["fake", "tokens"] => {
                let mut auth = self.auth();
                match *request.method() {
                    Method::GET => {}
                    Method::DELETE => auth.reset_counts(),
                    _ => return method_not_allowed(),
                }
                let (issued, metadata_issued) = auth.counts();
                json_response(
                    StatusCode::OK,
                    &json!({ "issued": issued, "metadataIssued": metadata_issued }),
                )
            }
            ["fake", "fail"] => {
                if request.method() != Method::POST {
                    return method_not_allowed();
                }
                match read_json(request).await {
                    Ok(body) => self.fail(&body),
                    Err(response) => response,
                }
            }
            ["fake", "calls"] => match *request.method() {
                Method::GET => {
                    json_response(StatusCode::OK, &json!({ "calls": self.store().calls() }))
                }
                Method::DELETE => {
                    self.store().reset_calls();
                    json_response(StatusCode::OK, &json!({ "calls": {} }))
                }
                _ => method_not_allowed(),
            },
            ["fake", "delay"] => {
                if request.method() != Method::POST {
                    return method_not_allowed();
                }
                match read_json(request).await {
                    Ok(body) => self.delay(&body),
                    Err(response) => response,
                }
            }
            _ => not_found(),
        }
    }
}
