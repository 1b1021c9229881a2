//! Managed instances (contract 3.12 and 7, r3): the VMs the platform creates,
//! stops, starts and deletes in a provider account's project, and the
//! [`InstanceProvider`] trait the reconciler drives them through.
//!
//! Every mutation carries the caller's `requestId` (a UUID chosen once per
//! step and sent again on every retry of it), so the provider applies a step
//! at most once however often its answer is lost. A mutation answers the
//! provider's operation; [`InstanceProvider::get_operation`] follows it until
//! it is [`OperationStatus::Done`], and [`InstanceProvider::get_vm`] confirms
//! the status the step aimed at.

use std::collections::BTreeMap;
use std::sync::Arc;

pub use grants_core::vm::{StepFailure, VmStatus};

use crate::policy::{AccountOwner, ProviderAccess, ProviderPolicy};
use crate::{AccountSpec, ProviderError, ProviderFuture, gce};

/// The label every VM of the platform carries (`bc-managed=true`).
pub const MANAGED_LABEL: &str = "bc-managed";

/// The label naming the installation that made a VM (contract 3.12 r4): the
/// id its database keeps. Listings, orphan deletion and adoption consider
/// only the VMs of their own installation.
pub const INSTALLATION_LABEL: &str = "bc-installation";

/// The label naming the instance a VM was made for (`inst_...`).
pub const INSTANCE_LABEL: &str = "bc-instance";

/// A VM's create request (contract 7, r3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmSpec {
    /// The VM's name, `bc-` and the instance id's suffix.
    pub name: String,
    /// The zone, e.g. `us-central1-a`.
    pub zone: String,
    /// The flavor: sent as `zones/{zone}/machineTypes/{flavor}`.
    pub machine_type: String,
    /// The VM's labels (`bc-instance`, `bc-pool`, `bc-managed`,
    /// `bc-installation` and the pool's).
    pub labels: BTreeMap<String, String>,
    /// `Some(name)`: `SPECIFIC_RESERVATION` on that reservation; `None`:
    /// `NO_RESERVATION`.
    pub reservation: Option<String>,
    /// The boot disk's `sourceImage`.
    pub image: String,
    /// The boot disk's size in GB.
    pub disk_gb: i64,
    /// The network interface's `network`.
    pub network: String,
    /// The network interface's `subnetwork`, if any.
    pub subnetwork: Option<String>,
    /// The service account's email, if any; sent with the `cloud-platform`
    /// scope.
    pub service_account: Option<String>,
}

/// Where a provider operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperationStatus {
    /// Accepted, not started (`PENDING`).
    Pending,
    /// Under way (`RUNNING`).
    Running,
    /// Finished, with or without errors (`DONE`).
    Done,
}

impl OperationStatus {
    /// GCE's spelling: `PENDING`, `RUNNING` or `DONE`.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationStatus::Pending => "PENDING",
            OperationStatus::Running => "RUNNING",
            OperationStatus::Done => "DONE",
        }
    }

    /// From GCE's spelling; `None` for anything else.
    pub fn parse(text: &str) -> Option<OperationStatus> {
        match text {
            "PENDING" => Some(OperationStatus::Pending),
            "RUNNING" => Some(OperationStatus::Running),
            "DONE" => Some(OperationStatus::Done),
            _ => None,
        }
    }
}

/// A provider operation: what a mutation answers, and what polling it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmOperation {
    /// The operation's name (`operation-...`), for [`InstanceProvider::get_operation`].
    pub name: String,
    /// The zone it runs in.
    pub zone: String,
    /// Where it is.
    pub status: OperationStatus,
    /// The error codes of a DONE operation, first first (e.g.
    /// "CONDITION_NOT_MET"); empty when none.
    pub error_codes: Vec<String>,
    /// The messages for the log only (never shown to tenants).
    pub error_messages: Vec<String>,
}

impl VmOperation {
    /// Whether it finished without an error.
    pub fn succeeded(&self) -> bool {
        self.status == OperationStatus::Done && self.error_codes.is_empty()
    }

    /// Why a `DONE` operation failed: its first error code, typed; `None`
    /// while it runs or when it succeeded.
    pub fn failure(&self) -> Option<StepFailure> {
        let first = self.error_codes.first()?;
        (self.status == OperationStatus::Done).then(|| StepFailure::provider(first))
    }
}

/// A VM as the provider reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vm {
    /// Its name.
    pub name: String,
    /// The short zone name, from the URL.
    pub zone: String,
    /// Its status, parsed from the provider's spelling.
    pub status: VmStatus,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
}

/// Creates, stops, starts and deletes the VMs of one provider account, and
/// reads them and their operations.
///
/// Each call re-checks the account against the provider policy before any
/// credential is read or connection made, as listings do. Calls answered
/// 429 or 5xx, or not answered, are tried again inside the call (at most 3
/// times, with backoff); a mutation is sent again with the same `request_id`,
/// so the provider applies it once. Errors name no token or secret.
pub trait InstanceProvider: Send + Sync {
    /// Creates the VM (`instances.insert`); answers its operation.
    /// [`ProviderError::AlreadyExists`] when a VM of that name exists.
    fn create_vm<'a>(
        &'a self,
        spec: &'a VmSpec,
        request_id: &'a str,
    ) -> ProviderFuture<'a, VmOperation>;
    /// Stops the VM (`instances.stop`); [`ProviderError::NotFound`] when it
    /// does not exist.
    fn stop_vm<'a>(
        &'a self,
        zone: &'a str,
        name: &'a str,
        request_id: &'a str,
    ) -> ProviderFuture<'a, VmOperation>;
    /// Starts the VM (`instances.start`); [`ProviderError::NotFound`] when it
    /// does not exist.
    fn start_vm<'a>(
        &'a self,
        zone: &'a str,
        name: &'a str,
        request_id: &'a str,
    ) -> ProviderFuture<'a, VmOperation>;
    /// Deletes the VM (`instances.delete`); [`ProviderError::NotFound`] when
    /// it does not exist.
    fn delete_vm<'a>(
        &'a self,
        zone: &'a str,
        name: &'a str,
        request_id: &'a str,
    ) -> ProviderFuture<'a, VmOperation>;
    /// Reads a zone operation; [`ProviderError::NotFound`] when the provider
    /// no longer knows it.
    fn get_operation<'a>(
        &'a self,
        zone: &'a str,
        operation: &'a str,
    ) -> ProviderFuture<'a, VmOperation>;
    /// None on 404.
    fn get_vm<'a>(&'a self, zone: &'a str, name: &'a str) -> ProviderFuture<'a, Option<Vm>>;
    /// Every VM of `installation` in the project, all pages: the aggregated
    /// list with the filter `labels.bc-managed=true AND
    /// labels.bc-installation={installation}` (contract 7 r4). An
    /// installation id that is not a GCE label value is refused before
    /// anything is sent (`Rejected { 400, "invalid" }`).
    fn list_installation_vms<'a>(&'a self, installation: &'a str) -> ProviderFuture<'a, Vec<Vm>>;
}

/// `InstanceProvider` stays dyn-compatible (the worker and the api-server hold it as
/// `Arc<dyn InstanceProvider>`): a change that breaks it fails to compile here.
const _: Option<&dyn InstanceProvider> = None;

/// Builds the instance adapter of an account, as [`crate::ProviderFactory`]
/// builds its reservation adapter.
pub type InstanceFactory =
    dyn Fn(AccountSpec<'_>) -> Result<Box<dyn InstanceProvider>, ProviderError> + Send + Sync;

/// The factory the binaries use: each account's instance adapter under
/// `policy`, for an account of the root tenant `root` or of another
/// (untrusted) tenant. Building reads no credential; the adapter checks the
/// policy again at each call. An unknown provider or a stored config that no
/// longer validates is [`ProviderError::NotAllowed`].
pub fn policy_instance_factory(
    root: &str,
    policy: Arc<ProviderPolicy>,
    options: gce::GceProviderOptions,
) -> Arc<InstanceFactory> {
    let root = root.to_owned();
    Arc::new(move |account: AccountSpec<'_>| {
        let owner = AccountOwner::of(account.tenant_id, &root);
        let access = ProviderAccess::new(owner, policy.clone());
        match account.provider {
            gce::PROVIDER_NAME => {
                let provider = crate::gce_provider(account.config, access, options.clone())?
                    .for_account(account.account_id, account.secret.cloned());
                Ok(Box::new(provider) as Box<dyn InstanceProvider>)
            }
            other => Err(crate::unknown_provider(other)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_statuses_round_trip() {
        for status in [
            OperationStatus::Pending,
            OperationStatus::Running,
            OperationStatus::Done,
        ] {
            assert_eq!(OperationStatus::parse(status.as_str()), Some(status));
        }
        assert_eq!(OperationStatus::parse("done"), None);
    }

    #[test]
    fn only_a_done_operation_without_errors_succeeded() {
        let mut op = VmOperation {
            name: "operation-1".into(),
            zone: "us-central1-a".into(),
            status: OperationStatus::Running,
            error_codes: vec![],
            error_messages: vec![],
        };
        assert!(!op.succeeded());
        op.status = OperationStatus::Done;
        assert!(op.succeeded());
        assert_eq!(op.failure(), None);
        op.error_codes.push("CONDITION_NOT_MET".into());
        assert!(!op.succeeded());
        assert_eq!(
            op.failure(),
            Some(StepFailure::Provider("CONDITION_NOT_MET".into()))
        );
        op.status = OperationStatus::Running;
        assert_eq!(op.failure(), None, "a running operation has not failed");
    }

    #[test]
    fn the_factory_refuses_unknown_providers_and_bad_configs() {
        let factory = policy_instance_factory(
            "ten_root",
            Arc::default(),
            gce::GceProviderOptions::default(),
        );
        let config = serde_json::json!({ "project": "my-project", "credentials": "none" });
        let spec = |provider| AccountSpec {
            account_id: "pacct_1",
            tenant_id: "ten_root",
            provider,
            config: &config,
            secret: None,
        };
        assert!(factory(spec("gce")).is_ok());
        assert!(matches!(
            factory(spec("aws")),
            Err(ProviderError::NotAllowed(_))
        ));
        let bad = serde_json::json!({ "project": "my-project", "credentials": "hunter2" });
        let err = factory(AccountSpec {
            config: &bad,
            ..spec("gce")
        })
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(err.contains("secret-value"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
}
