//! [`InstanceProvider`] for [`GceProvider`]: the managed instances' calls of
//! contract 7 (r3), under the same policy check, address guard, TLS roots,
//! retries and redaction as the reservations listing, with tokens of the
//! `compute` scope.
//!
//! - create: `POST {project}/zones/{zone}/instances?requestId=`;
//! - stop, start: `POST {project}/zones/{zone}/instances/{name}/stop|start?requestId=`;
//! - delete: `DELETE {project}/zones/{zone}/instances/{name}?requestId=`;
//! - `GET {project}/zones/{zone}/operations/{operation}`;
//! - `GET {project}/zones/{zone}/instances/{name}`;
//! - `GET {project}/aggregated/instances?filter=` `labels.bc-managed=true AND
//!   labels.bc-installation={id}` (URL-encoded), paged: one installation's
//!   VMs (without the installation term, every installation's).
//!
//! Paths are built segment by segment and queries by the URL encoder; zone,
//! instance and operation names must be GCE names (else the call is refused
//! as `Rejected { 400, "invalid" }` before anything is read or sent).

use std::time::Instant;

use backon::Retryable;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use reqwest::{Method, Url};

use super::{
    GceProvider, MAX_PAGES, MAX_RETRY_AFTER, PageError, from_reqwest, read_body, retry_after,
    vm_wire,
};
use crate::auth::COMPUTE_SCOPE;
use crate::credentials::Material;
use crate::{
    INSTALLATION_LABEL, InstanceProvider, MANAGED_LABEL, ProviderError, ProviderFuture, Vm,
    VmOperation, VmSpec,
};

/// The largest part of an error body read to classify a refusal.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// One request of an instance call.
struct Call<'a> {
    /// For the log: `create`, `stop`, `get`, ...
    what: &'static str,
    method: Method,
    url: Url,
    query: Vec<(&'static str, &'a str)>,
    /// A JSON body; `Some(empty)` for a POST without one (Google's front
    /// end wants a `Content-Length`).
    body: Option<Vec<u8>>,
}

/// What one call authenticates with: the credentials' material and the
/// `Authorization` header, refreshed at most once on a 401.
struct Session {
    material: Material,
    authorization: Option<HeaderValue>,
    refreshed: bool,
}

/// Refuses a value that is not a GCE name, before anything is sent.
fn check_name(field: &'static str, value: &str) -> Result<(), ProviderError> {
    if vm_wire::valid_name(value) {
        return Ok(());
    }
    tracing::warn!(field, "refused before sending: not a valid GCE name");
    Err(ProviderError::Rejected {
        status: 400,
        reason: "invalid".to_owned(),
    })
}

/// Refuses an installation id that is not a GCE label value (lowercase
/// letters, digits, `-`, `_`, 1 to 63 characters) before anything is sent:
/// it goes into a listing's filter as a bare value.
fn check_label_value(value: &str) -> Result<(), ProviderError> {
    let valid = (1..=63).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if valid {
        return Ok(());
    }
    tracing::warn!("refused before sending: the installation id is not a GCE label value");
    Err(ProviderError::Rejected {
        status: 400,
        reason: "invalid".to_owned(),
    })
}

/// A `requestId` as GCE takes it: a UUID (hex digits and dashes), not zero.
fn check_request_id(request_id: &str) -> Result<(), ProviderError> {
    let groups: Vec<usize> = request_id.split('-').map(str::len).collect();
    let hex = request_id
        .bytes()
        .all(|b| b.is_ascii_hexdigit() || b == b'-');
    let zero = request_id.bytes().all(|b| b == b'0' || b == b'-');
    if groups == [8, 4, 4, 4, 12] && hex && !zero {
        return Ok(());
    }
    tracing::warn!("refused before sending: the requestId is not a UUID");
    Err(ProviderError::Rejected {
        status: 400,
        reason: "invalid".to_owned(),
    })
}

impl GceProvider {
    /// `{endpoint}/compute/v1/projects/{project}/` and `segments`, each
    /// percent-encoded as one path segment.
    fn api_url(&self, segments: &[&str]) -> Result<Url, ProviderError> {
        let mut url = self.project_url.clone();
        url.path_segments_mut()
            .map_err(|()| ProviderError::NotAllowed("config.endpoint: pattern".into()))?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }

    /// The URL of `zones/{zone}/{rest...}`, the names checked first.
    fn zone_url(&self, zone: &str, rest: &[&str]) -> Result<Url, ProviderError> {
        check_name("zone", zone)?;
        let mut segments = vec!["zones", zone];
        segments.extend_from_slice(rest);
        self.api_url(&segments)
    }

    /// The policy check and the credentials, then the `compute` token.
    async fn session(&self) -> Result<Session, ProviderError> {
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
        let authorization = self.authorization(&material, COMPUTE_SCOPE, false).await?;
        Ok(Session {
            material,
            authorization,
            refreshed: false,
        })
    }

    /// Sends `call` with retries; a 401 drops the cached token and tries
    /// once more with a fresh one.
    async fn request(
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

    /// A create, stop, start or delete: its operation.
    async fn mutate(
        &self,
        what: &'static str,
        method: Method,
        url: Url,
        zone: &str,
        request_id: &str,
        body: Vec<u8>,
    ) -> Result<VmOperation, ProviderError> {
        check_request_id(request_id)?;
        let mut session = self.session().await?;
        let call = Call {
            what,
            method,
            url,
            query: vec![("requestId", request_id)],
            body: Some(body),
        };
        let answer = self.request(&mut session, &call).await?;
        let operation = vm_wire::parse_operation(&answer, zone)?;
        tracing::info!(
            project = %self.config.project,
            call = what,
            zone,
            operation = %operation.name,
            status = operation.status.as_str(),
            request_id,
            "gce instance call accepted"
        );
        Ok(operation)
    }

    async fn create(&self, spec: &VmSpec, request_id: &str) -> Result<VmOperation, ProviderError> {
        check_name("name", &spec.name)?;
        let url = self.zone_url(&spec.zone, &["instances"])?;
        let body = serde_json::to_vec(&vm_wire::create_body(spec))
            .map_err(|e| ProviderError::Malformed(format!("the create body: {e}")))?;
        self.mutate("create", Method::POST, url, &spec.zone, request_id, body)
            .await
    }

    async fn change(
        &self,
        what: &'static str,
        zone: &str,
        name: &str,
        request_id: &str,
    ) -> Result<VmOperation, ProviderError> {
        check_name("name", name)?;
        let (method, url) = match what {
            "delete" => (Method::DELETE, self.zone_url(zone, &["instances", name])?),
            action => (
                Method::POST,
                self.zone_url(zone, &["instances", name, action])?,
            ),
        };
        self.mutate(what, method, url, zone, request_id, Vec::new())
            .await
    }

    async fn operation(&self, zone: &str, operation: &str) -> Result<VmOperation, ProviderError> {
        check_name("operation", operation)?;
        let url = self.zone_url(zone, &["operations", operation])?;
        let mut session = self.session().await?;
        let call = Call {
            what: "operation",
            method: Method::GET,
            url,
            query: Vec::new(),
            body: None,
        };
        let answer = self.request(&mut session, &call).await?;
        vm_wire::parse_operation(&answer, zone)
    }

    async fn vm(&self, zone: &str, name: &str) -> Result<Option<Vm>, ProviderError> {
        check_name("name", name)?;
        let url = self.zone_url(zone, &["instances", name])?;
        let mut session = self.session().await?;
        let call = Call {
            what: "get",
            method: Method::GET,
            url,
            query: Vec::new(),
            body: None,
        };
        match self.request(&mut session, &call).await {
            Ok(answer) => vm_wire::parse_instance(&answer).map(Some),
            Err(ProviderError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every VM labelled `bc-managed=true` in the project, whatever its
    /// installation (all pages): what an operator's tools see. The worker
    /// lists its own installation's VMs only
    /// ([`InstanceProvider::list_installation_vms`]).
    pub async fn list_managed_vms(&self) -> Result<Vec<Vm>, ProviderError> {
        self.managed_vms(None).await
    }

    /// Every page of the managed VMs (of `installation`, when given); pages
    /// already read are not refetched.
    async fn managed_vms(&self, installation: Option<&str>) -> Result<Vec<Vm>, ProviderError> {
        if let Some(id) = installation {
            check_label_value(id)?;
        }
        let url = self.api_url(&["aggregated", "instances"])?;
        let mut session = self.session().await?;
        let mut filter = format!("labels.{MANAGED_LABEL}=true");
        if let Some(id) = installation {
            filter.push_str(&format!(" AND labels.{INSTALLATION_LABEL}={id}"));
        }
        let page_size = self.options.page_size.map(|n| n.to_string());
        let mut vms = Vec::new();
        let mut page_token: Option<String> = None;
        for page in 1..=MAX_PAGES {
            let mut query = vec![("filter", filter.as_str())];
            if let Some(size) = &page_size {
                query.push(("maxResults", size));
            }
            if let Some(token) = &page_token {
                query.push(("pageToken", token));
            }
            let call = Call {
                what: "list",
                method: Method::GET,
                url: url.clone(),
                query,
                body: None,
            };
            let answer = self.request(&mut session, &call).await?;
            let (found, next) = vm_wire::parse_instance_page(&answer)?;
            vms.extend(found);
            match super::next_page(page_token.as_deref(), next)? {
                None => {
                    tracing::debug!(
                        project = %self.config.project,
                        pages = page,
                        vms = vms.len(),
                        "listed gce managed instances"
                    );
                    return Ok(vms);
                }
                next => page_token = next,
            }
        }
        Err(ProviderError::Malformed(format!(
            "the listing did not end within {MAX_PAGES} pages"
        )))
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

impl InstanceProvider for GceProvider {
    fn create_vm<'a>(
        &'a self,
        spec: &'a VmSpec,
        request_id: &'a str,
    ) -> ProviderFuture<'a, VmOperation> {
        Box::pin(self.create(spec, request_id))
    }

    fn stop_vm<'a>(
        &'a self,
        zone: &'a str,
        name: &'a str,
        request_id: &'a str,
    ) -> ProviderFuture<'a, VmOperation> {
        Box::pin(self.change("stop", zone, name, request_id))
    }

    fn start_vm<'a>(
        &'a self,
        zone: &'a str,
        name: &'a str,
        request_id: &'a str,
    ) -> ProviderFuture<'a, VmOperation> {
        Box::pin(self.change("start", zone, name, request_id))
    }

    fn delete_vm<'a>(
        &'a self,
        zone: &'a str,
        name: &'a str,
        request_id: &'a str,
    ) -> ProviderFuture<'a, VmOperation> {
        Box::pin(self.change("delete", zone, name, request_id))
    }

    fn get_operation<'a>(
        &'a self,
        zone: &'a str,
        operation: &'a str,
    ) -> ProviderFuture<'a, VmOperation> {
        Box::pin(self.operation(zone, operation))
    }

    fn get_vm<'a>(&'a self, zone: &'a str, name: &'a str) -> ProviderFuture<'a, Option<Vm>> {
        Box::pin(self.vm(zone, name))
    }

    fn list_installation_vms<'a>(&'a self, installation: &'a str) -> ProviderFuture<'a, Vec<Vm>> {
        Box::pin(self.managed_vms(Some(installation)))
    }
}

#[cfg(test)]
mod tests;
