//! The requests of the managed instances' calls: a call's session (the
//! policy check, the credentials and the `compute` token), each request
//! tried again on a retryable error, the token refreshed once on a 401, and
//! refusals classified from their bodies.

use std::time::Instant;

use backon::Retryable;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use reqwest::{Method, Url};

use super::http::{MAX_RETRY_AFTER, PageError, from_reqwest, read_body, retry_after};
use super::{GceProvider, vm_wire};
use crate::ProviderError;
use crate::auth::COMPUTE_SCOPE;
use crate::credentials::Material;

/// The largest part of an error body read to classify a refusal.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// One request of an instance call.
pub(super) struct Call<'a> {
    /// For the log: `create`, `stop`, `get`, ...
    pub(super) what: &'static str,
    pub(super) method: Method,
    pub(super) url: Url,
    pub(super) query: Vec<(&'static str, &'a str)>,
    /// A JSON body; `Some(empty)` for a POST without one (Google's front
    /// end wants a `Content-Length`).
    pub(super) body: Option<Vec<u8>>,
}

/// What one call authenticates with: the credentials' material and the
/// `Authorization` header, refreshed at most once on a 401.
pub(super) struct Session {
    material: Material,
    authorization: Option<HeaderValue>,
    refreshed: bool,
}

impl GceProvider {
    /// The policy check and the credentials, then the `compute` token.
    pub(super) async fn session(&self) -> Result<Session, ProviderError> {
        let (material, authorization) = self.admitted(COMPUTE_SCOPE).await?;
        Ok(Session {
            material,
            authorization,
            refreshed: false,
        })
    }

    /// The policy check (a refusal logged here, where it came from; the
    /// caller logs the error it is handed), then the credentials' material
    /// and a token of `scope`.
    pub(super) async fn admitted(
        &self,
        scope: &str,
    ) -> Result<(Material, Option<HeaderValue>), ProviderError> {
        if let Err(e) = self.admit() {
            tracing::debug!(
                project = %self.config.project,
                error = %e,
                "gce account refused by the provider policy"
            );
            return Err(e);
        }
        let material = self
            .credentials
            .material(&self.config.credentials, self.secret.as_ref())?;
        let authorization = self.authorization(&material, scope, false).await?;
        Ok((material, authorization))
    }

    /// Sends `call` with retries; a 401 drops the cached token and tries
    /// once more with a fresh one.
    pub(super) async fn request(
        &self,
        session: &mut Session,
        call: &Call<'_>,
    ) -> Result<Vec<u8>, ProviderError> {
        loop {
            match self.send(call, &session.authorization).await {
                Err(ProviderError::Status { status: 401 })
                    if !session.refreshed
                        && matches!(
                            session.material,
                            Material::Key { .. } | Material::Metadata
                        ) =>
                {
                    tracing::info!(
                        project = %self.config.project,
                        call = call.what,
                        "gce answered 401: refreshing the access token once"
                    );
                    session.refreshed = true;
                    session.authorization = self
                        .authorization(&session.material, COMPUTE_SCOPE, true)
                        .await?;
                }
                other => return other,
            }
        }
    }

    /// One request, tried again as [`Self::backoff`] says on a retryable
    /// error (a `Retry-After` up to 30 s replaces the wait). A mutation sent
    /// again carries the same `requestId`, so it is applied once.
    async fn send(
        &self,
        call: &Call<'_>,
        authorization: &Option<HeaderValue>,
    ) -> Result<Vec<u8>, ProviderError> {
        let once = || self.send_once(call, authorization);
        // A quota refusal is not tried again here: the caller pauses the
        // account's calls until the quota allows them (contract 3.12 r4).
        let throttled = |e: &PageError| matches!(e.error, ProviderError::Throttled { .. });
        once.retry(self.backoff())
            .when(|e: &PageError| {
                e.error.is_retryable() && e.error.status() != Some(408) && !throttled(e)
            })
            .adjust(|e: &PageError, wait| {
                wait.map(|w| e.retry_after.map_or(w, |r| r.min(MAX_RETRY_AFTER)))
            })
            .notify(|e: &PageError, wait| {
                tracing::info!(
                    project = %self.config.project,
                    call = call.what,
                    error = %e.error,
                    wait_ms = wait.as_millis() as u64,
                    "gce instance call failed: trying again"
                );
            })
            .await
            .map_err(|e| match e.error {
                ProviderError::Throttled { quota, .. } => ProviderError::Throttled {
                    quota,
                    retry_after: e.retry_after,
                },
                other => other,
            })
    }

    async fn send_once(
        &self,
        call: &Call<'_>,
        authorization: &Option<HeaderValue>,
    ) -> Result<Vec<u8>, PageError> {
        let mut request = self
            .client
            .request(call.method.clone(), call.url.clone())
            .header(ACCEPT, "application/json");
        if !call.query.is_empty() {
            request = request.query(&call.query);
        }
        if let Some(body) = &call.body {
            request = if body.is_empty() {
                // hyper sends no length for an empty body; Google's front
                // end answers such a POST 411.
                request.header(CONTENT_LENGTH, "0")
            } else {
                request.header(CONTENT_TYPE, "application/json")
            };
            request = request.body(body.clone());
        }
        if let Some(value) = authorization {
            request = request.header(AUTHORIZATION, value.clone());
        }
        let started = Instant::now();
        let sent = request.send().await;
        if let Some(t) = self.options.telemetry.as_deref() {
            t.request(
                sent.as_ref().ok().map(|r| r.status().as_u16()),
                started.elapsed(),
            );
        }
        let response = sent.map_err(from_reqwest)?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after(&response);
            let body = read_error_body(response).await;
            let error = vm_wire::classify(status.as_u16(), &body);
            tracing::debug!(
                project = %self.config.project,
                call = call.what,
                status = status.as_u16(),
                error = %error,
                "gce instance call refused"
            );
            return Err(PageError { error, retry_after });
        }
        Ok(read_body(response).await?)
    }
}

/// Up to [`MAX_ERROR_BODY`] bytes of a refusal's body (what cannot be read
/// is left out: the status alone still classifies it).
async fn read_error_body(mut response: reqwest::Response) -> Vec<u8> {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        let room = MAX_ERROR_BODY.saturating_sub(body.len());
        body.extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or_default());
        if body.len() >= MAX_ERROR_BODY {
            break;
        }
    }
    body
}
