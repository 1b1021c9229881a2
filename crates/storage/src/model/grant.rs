//! `grants`: a grant as stored, and what settlement and events read of it.

use diesel::prelude::*;
use grants_core::{GrantState, TimelineGrant};
use serde_json::{Value, json};

use crate::model::states::SettledState;
use crate::schema::grants;

/// A grant row.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = grants)]
pub struct GrantRow {
    /// `rgrant_...`
    pub grant_id: String,
    /// The provider account of the reservation.
    pub account_id: String,
    /// The reservation.
    pub reservation_id: String,
    /// The reservation's pool at creation.
    pub pool_id: String,
    /// The grantee.
    pub tenant_id: String,
    /// The one project it serves.
    pub project_id: Option<String>,
    /// Committed slots.
    pub slots: i32,
    /// Term start.
    pub starts_at: i64,
    /// Term end (final once ended).
    pub ends_at: i64,
    /// What settlement has recorded.
    pub settled_state: SettledState,
    /// Why it ended or was cancelled.
    pub reason: Option<String>,
    /// Creation instant.
    pub created_at: i64,
    /// End or cancellation instant.
    pub ended_at: Option<i64>,
    /// Slot-hours written up to here.
    pub metered_through: i64,
}

impl GrantRow {
    /// The settled state as the core crate's type.
    pub fn settled(&self) -> GrantState {
        match self.settled_state {
            SettledState::Scheduled => GrantState::Scheduled,
            SettledState::Active => GrantState::Active,
            SettledState::Ended => GrantState::Ended,
            SettledState::Cancelled => GrantState::Cancelled,
        }
    }

    /// The grant's true state at `now`.
    pub fn state_at(&self, now: i64) -> GrantState {
        grants_core::grant_state(
            self.starts_at,
            self.ends_at,
            self.settled() == GrantState::Cancelled,
            now,
        )
    }

    /// The payload of its `reservation-grant.*` events.
    pub fn event_data(&self, reason: Option<&str>) -> Value {
        let mut data = json!({
            "grantId": self.grant_id,
            "poolId": self.pool_id,
            "slots": self.slots,
            "startsAt": self.starts_at,
            "endsAt": self.ends_at,
        });
        if let Some(p) = &self.project_id {
            data["projectId"] = json!(p);
        }
        if let Some(r) = reason {
            data["reason"] = json!(r);
        }
        data
    }

    /// As settlement sees it.
    pub fn to_timeline(&self) -> TimelineGrant {
        TimelineGrant {
            grant_id: self.grant_id.clone(),
            tenant_id: self.tenant_id.clone(),
            project_id: self.project_id.clone(),
            slots: u32::try_from(self.slots).unwrap_or(0),
            starts_at: self.starts_at,
            ends_at: self.ends_at,
            created_at: self.created_at,
            settled: self.settled(),
        }
    }
}
