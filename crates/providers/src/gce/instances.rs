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

use reqwest::{Method, Url};

use super::calls::{Call, Session};
use super::paging::{Listing, read_all_pages};
use super::{GceProvider, vm_wire};
use crate::{
    INSTALLATION_LABEL, InstanceProvider, MANAGED_LABEL, ProviderError, ProviderFuture, Vm,
    VmOperation, VmSpec,
};

/// The managed VMs' listing of one call, with its session.
struct ManagedVms<'a> {
    provider: &'a GceProvider,
    session: Session,
    url: Url,
    /// `labels.bc-managed=true`, and the installation's label if one is given.
    filter: String,
    /// `maxResults`, if the options set it.
    page_size: Option<String>,
}

impl Listing for ManagedVms<'_> {
    type Item = Vm;

    async fn page(
        &mut self,
        page_token: Option<&str>,
    ) -> Result<(Vec<Vm>, Option<String>), ProviderError> {
        let mut query = vec![("filter", self.filter.as_str())];
        if let Some(size) = &self.page_size {
            query.push(("maxResults", size));
        }
        if let Some(token) = page_token {
            query.push(("pageToken", token));
        }
        let call = Call {
            what: "list",
            method: Method::GET,
            url: self.url.clone(),
            query,
            body: None,
        };
        let answer = self.provider.request(&mut self.session, &call).await?;
        vm_wire::parse_instance_page(&answer)
    }
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
        let session = self.session().await?;
        let mut filter = format!("labels.{MANAGED_LABEL}=true");
        if let Some(id) = installation {
            filter.push_str(&format!(" AND labels.{INSTALLATION_LABEL}={id}"));
        }
        let mut listing = ManagedVms {
            provider: self,
            session,
            url,
            filter,
            page_size: self.options.page_size.map(|n| n.to_string()),
        };
        let (vms, pages) = read_all_pages(&mut listing).await?;
        tracing::debug!(
            project = %self.config.project,
            pages,
            vms = vms.len(),
            "listed gce managed instances"
        );
        Ok(vms)
    }
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
