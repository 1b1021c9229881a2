//! Instances and where they are (contract 3.3).

use schemars::JsonSchema;
use serde::Serialize;
use storage::model::instance::InstanceRow;

use super::Millis;

/// Where an instance is.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// What serves it.
    #[schemars(extend("enum" = ["grant", "reservation", "ondemand", "none"]))]
    pub kind: String,
    /// The grant, when in one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grant_id: Option<String>,
    /// The reservation, when in one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation_id: Option<String>,
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
    /// Power state.
    #[schemars(extend("enum" = ["running", "stopped", "deleted"]))]
    pub state: &'static str,
    /// Where it is.
    pub placement: Placement,
    /// Creation instant.
    pub created_at: Millis,
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
                kind: i.placement_kind,
                grant_id: i.grant_id,
                reservation_id: i.reservation_id,
            },
            created_at: i.created_at,
        }
    }
}

replies! {
    /// `{ "instance": Instance }`
    InstanceReply { instance: Instance as "instance" }
}
