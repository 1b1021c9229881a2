//! `instances`: an instance as stored, and how settlement sees it.

use diesel::prelude::*;
use grants_core::{Billing, Power, Seat, TimelineInstance};

use crate::model::states::{InstanceBilling, InstanceState};
use crate::schema::instances;

/// An instance row.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = instances)]
pub struct InstanceRow {
    /// `inst_...`
    pub instance_id: String,
    /// Owner.
    pub tenant_id: String,
    /// Project.
    pub project_id: Option<String>,
    /// Pool.
    pub pool_id: String,
    /// Flavor.
    pub flavor: String,
    /// Name.
    pub name: String,
    /// `standard` or `none`.
    pub billing: InstanceBilling,
    /// Power and lifecycle state.
    pub state: InstanceState,
    /// `grant`, `reservation`, `ondemand` or `none`.
    pub placement_kind: String,
    /// The grant holding it.
    pub grant_id: Option<String>,
    /// Account of its reservation.
    pub account_id: Option<String>,
    /// Its reservation.
    pub reservation_id: Option<String>,
    /// Creation instant.
    pub created_at: i64,
    /// Deletion instant.
    pub deleted_at: Option<i64>,
    /// Instance meters are written up to here.
    pub usage_metered_through: i64,
}

impl InstanceRow {
    /// Who pays for its hours.
    pub fn billing(&self) -> Billing {
        self.billing.to_core()
    }

    /// Whether it runs.
    pub fn running(&self) -> bool {
        self.state == InstanceState::Running
    }

    /// As settlement sees it.
    pub fn to_timeline(&self) -> TimelineInstance {
        TimelineInstance {
            instance_id: self.instance_id.clone(),
            tenant_id: self.tenant_id.clone(),
            project_id: self.project_id.clone(),
            billing: self.billing(),
            power: if self.running() {
                Power::Running
            } else {
                Power::Stopped
            },
            created_at: self.created_at,
            seat: match (self.placement_kind.as_str(), &self.grant_id) {
                ("grant", Some(g)) => Some(Seat::Grant(g.clone())),
                ("reservation", _) => Some(Seat::Ordinary),
                _ => None,
            },
        }
    }
}
