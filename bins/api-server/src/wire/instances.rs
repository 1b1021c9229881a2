//! Instances and where they are (contract 3.3).

use schemars::JsonSchema;
use serde::Serialize;
use storage::model::instance::InstanceRow;
use storage::model::states::{DeletedReason, InstanceState};

use super::Millis;

/// Where an instance is.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// What serves it.
    #[schemars(extend("enum" = ["grant", "lent", "reservation", "ondemand", "none"]))]
    pub kind: &'static str,
    /// The grant, when in one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grant_id: Option<String>,
    /// The reservation, when in one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation_id: Option<String>,
}

/// A managed instance's VM (contract 3.7, r3).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceVm {
    /// `bc-...`
    pub name: String,
    /// Its zone.
    pub zone: String,
    /// The provider's last reported status (`RUNNING`, `TERMINATED`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// When that status was seen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_at: Option<Millis>,
}

/// Why a managed instance failed or was lost.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// The provider's first error code (`CONDITION_NOT_MET`, ...), or
    /// `timeout`, `name-taken`, `provider-error`, `no-account`, `not-found`.
    pub code: String,
}

/// An instance (contract 3.3).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Instance {
    /// `inst_...`
    pub instance_id: String,
    /// Owner.
    pub tenant_id: String,
    /// Project.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// Pool.
    pub pool_id: String,
    /// Flavor.
    pub flavor: String,
    /// Name.
    pub name: String,
    /// Who pays for its hours.
    #[schemars(extend("enum" = ["standard", "none"]))]
    pub billing: String,
    /// Power state; a managed instance's also `provisioning`, `stopping`,
    /// `starting`, `deleting` and `failed`.
    #[schemars(extend("enum" = [
        "running", "stopped", "deleted",
        "provisioning", "stopping", "starting", "deleting", "failed"
    ]))]
    pub state: &'static str,
    /// Where it is.
    pub placement: Placement,
    /// Creation instant.
    pub created_at: Millis,
    /// Its VM (managed pools).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vm: Option<InstanceVm>,
    /// Why it failed or was lost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// Why it is deleted (managed pools).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["requested", "lost", "tenant-deleted", "reclaimed"]))]
    pub deleted_reason: Option<&'static str>,
    /// Whether it takes only lent slots (contract 3.14).
    pub interruptible: bool,
    /// While an interruption is pending: when its VM will be deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupt_at: Option<Millis>,
}

impl From<InstanceRow> for Instance {
    fn from(i: InstanceRow) -> Instance {
        Instance {
            instance_id: i.instance_id,
            tenant_id: i.tenant_id,
            project_id: i.project_id,
            pool_id: i.pool_id,
            flavor: i.flavor,
            name: i.name,
            billing: i.billing.as_str().to_owned(),
            state: i.state.as_str(),
            placement: Placement {
                kind: i.placement_kind.as_str(),
                grant_id: i.grant_id,
                reservation_id: i.reservation_id,
            },
            created_at: i.created_at,
            vm: match (i.vm_name, i.vm_zone) {
                (Some(name), Some(zone)) => Some(InstanceVm {
                    name,
                    zone,
                    status: i.vm_status,
                    observed_at: i.vm_observed_at,
                }),
                _ => None,
            },
            failure: i.failure_code.map(|code| Failure { code }),
            deleted_reason: i
                .deleted_reason
                .filter(|_| i.state == InstanceState::Deleted)
                .map(DeletedReason::as_str),
            interruptible: i.interruptible,
            interrupt_at: i.interrupt_at.filter(|_| !i.state.is_final()),
        }
    }
}

replies! {
    /// `{ "instance": Instance }`
    InstanceReply { instance: Instance as "instance" }
}
