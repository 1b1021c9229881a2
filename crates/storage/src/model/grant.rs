//! `grants`: a grant as stored, and what settlement and events read of it.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use grants_core::{GrantState, TimelineGrant};
use serde_json::{Value, json};

use crate::error::Result;
use crate::model::states::SettledState;
use crate::schema::grants;

/// A grant to insert: scheduled, metered from its start.
#[derive(Debug, Clone, Copy)]
pub struct NewGrantRow<'a> {
    /// `rgrant_...`
    pub grant_id: &'a str,
    /// The provider account of the reservation.
    pub account_id: &'a str,
    /// The reservation.
    pub reservation_id: &'a str,
    /// The reservation's pool.
    pub pool_id: &'a str,
    /// The grantee.
    pub tenant_id: &'a str,
    /// The one project it serves.
    pub project_id: Option<&'a str>,
    /// Committed slots.
    pub slots: i32,
    /// Term start.
    pub starts_at: i64,
    /// Term end.
    pub ends_at: i64,
    /// Creation instant.
    pub created_at: i64,
}

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

    /// One grant, unlocked.
    pub async fn find(conn: &mut AsyncPgConnection, grant_id: &str) -> Result<Option<GrantRow>> {
        Ok(grants::table
            .find(grant_id)
            .select(GrantRow::as_select())
            .first(conn)
            .await
            .optional()?)
    }

    /// The newest grants (of `tenant`, or of every tenant), up to
    /// [`crate::LIST_LIMIT`], unlocked.
    pub async fn newest(
        conn: &mut AsyncPgConnection,
        tenant: Option<&str>,
    ) -> Result<Vec<GrantRow>> {
        let mut query = grants::table
            .order((grants::created_at.desc(), grants::grant_id.desc()))
            .limit(crate::LIST_LIMIT)
            .select(GrantRow::as_select())
            .into_boxed();
        if let Some(tenant) = tenant {
            query = query.filter(grants::tenant_id.eq(tenant));
        }
        Ok(query.load(conn).await?)
    }

    /// Inserts a new grant.
    pub async fn insert(conn: &mut AsyncPgConnection, new: NewGrantRow<'_>) -> Result<GrantRow> {
        Ok(diesel::insert_into(grants::table)
            .values((
                grants::grant_id.eq(new.grant_id),
                grants::account_id.eq(new.account_id),
                grants::reservation_id.eq(new.reservation_id),
                grants::pool_id.eq(new.pool_id),
                grants::tenant_id.eq(new.tenant_id),
                grants::project_id.eq(new.project_id),
                grants::slots.eq(new.slots),
                grants::starts_at.eq(new.starts_at),
                grants::ends_at.eq(new.ends_at),
                grants::settled_state.eq(SettledState::Scheduled),
                grants::created_at.eq(new.created_at),
                grants::metered_through.eq(new.starts_at),
            ))
            .returning(GrantRow::as_returning())
            .get_result(conn)
            .await?)
    }

    /// The (account, reservation) pairs on which `tenant` may hold a live
    /// grant at `now` (scheduled or active as recorded, `startsAt <= now <
    /// endsAt`), unlocked.
    pub async fn live_reservations_of(
        conn: &mut AsyncPgConnection,
        tenant: &str,
        now: i64,
    ) -> Result<Vec<(String, String)>> {
        Ok(grants::table
            .filter(grants::tenant_id.eq(tenant))
            .filter(grants::settled_state.eq_any(SettledState::OPEN))
            .filter(grants::starts_at.le(now))
            .filter(grants::ends_at.gt(now))
            .select((grants::account_id, grants::reservation_id))
            .load(conn)
            .await?)
    }
}
