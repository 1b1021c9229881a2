//! `grants`: a grant as stored, and what settlement and events read of it.

use diesel::pg::Pg;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use grants_core::{GrantState, SettlementGrant};

use crate::error::Result;
use crate::model::event_data::GrantChange;
use crate::model::keyset::Position;
use crate::model::states::SettledState;
use crate::schema::grants;

/// What a grant listing keeps; every filter is optional and they combine.
#[derive(Debug, Clone, Default)]
pub struct GrantFilter {
    /// Only this grantee's grants (`None`: every tenant's, root's `all`).
    pub tenant_id: Option<String>,
    /// Only grants on reservations of this provider account.
    pub account_id: Option<String>,
    /// Only grants on this reservation.
    pub reservation_id: Option<String>,
    /// Only grants in one of these states at the server's now, as
    /// [`GrantRow::state_at`] derives them from the term: `cancelled` as
    /// recorded, otherwise `scheduled` before `startsAt`, `active` in
    /// `[startsAt, endsAt)`, `ended` from `endsAt`.
    pub states: Option<Vec<GrantState>>,
    /// Only grants live at this instant (non-cancelled, `startsAt <= t <
    /// endsAt`).
    pub active_at: Option<i64>,
}

/// A condition on grant rows, boxed so conditions can be combined.
type BoxedCondition = Box<dyn BoxableExpression<grants::table, Pg, SqlType = Bool>>;

/// The rows in `state` at `now` (the SQL twin of [`GrantRow::state_at`]).
fn state_at(state: GrantState, now: i64) -> BoxedCondition {
    let open = grants::settled_state.ne(SettledState::Cancelled);
    match state {
        GrantState::Cancelled => Box::new(grants::settled_state.eq(SettledState::Cancelled)),
        GrantState::Scheduled => Box::new(open.and(grants::starts_at.gt(now))),
        GrantState::Active => Box::new(
            open.and(grants::starts_at.le(now))
                .and(grants::ends_at.gt(now)),
        ),
        // `ends_at >= starts_at` always holds (a check constraint).
        GrantState::Ended => Box::new(open.and(grants::ends_at.le(now))),
    }
}

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

impl NewGrantRow<'_> {
    /// What its `.created` event carries: [`GrantRow::change`] of the row
    /// the insert writes, known before the insert answers (so the event can
    /// be sent in the same round trip).
    pub fn change(&self) -> GrantChange {
        GrantChange {
            grant_id: self.grant_id.to_owned(),
            pool_id: self.pool_id.to_owned(),
            slots: i64::from(self.slots),
            starts_at: self.starts_at,
            ends_at: self.ends_at,
            project_id: self.project_id.map(str::to_owned),
            reason: None,
        }
    }
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
    /// `vm.grant.deficit.hours` written so far, in micro-slot-hours.
    pub deficit_micro: i64,
    /// The exact credit before the hour metering resumes at (`numer/denom`
    /// slot-milliseconds); `None` until kept (see the migration).
    pub deficit_exact: Option<String>,
    /// Whether its grantee lends its idle slots (contract 3.14).
    pub lending: bool,
    /// `vm.grant.lent.hours` written so far, in micro-slot-hours.
    pub lent_micro: i64,
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
    pub fn change(&self, reason: Option<&str>) -> GrantChange {
        GrantChange {
            grant_id: self.grant_id.clone(),
            pool_id: self.pool_id.clone(),
            slots: i64::from(self.slots),
            starts_at: self.starts_at,
            ends_at: self.ends_at,
            project_id: self.project_id.clone(),
            reason: reason.map(str::to_owned),
        }
    }

    /// As settlement sees it.
    pub fn to_settlement(&self) -> SettlementGrant {
        SettlementGrant {
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

    /// One page of grants matching `filter`, newest first (`createdAt`, then
    /// grant id, both descending), strictly after position `after`, at most
    /// `limit`, unlocked. Every filter is a condition of the one statement,
    /// the page a keyset range of the index: states at `now` are compared
    /// on the term (see [`GrantFilter::states`]).
    pub async fn page(
        conn: &mut AsyncPgConnection,
        filter: &GrantFilter,
        after: Option<&Position>,
        limit: i64,
        now: i64,
    ) -> Result<Vec<GrantRow>> {
        let mut query = grants::table
            .order((grants::created_at.desc(), grants::grant_id.desc()))
            .limit(limit)
            .select(GrantRow::as_select())
            .into_boxed();
        if let Some(tenant) = &filter.tenant_id {
            query = query.filter(grants::tenant_id.eq(tenant.clone()));
        }
        if let Some(account) = &filter.account_id {
            query = query.filter(grants::account_id.eq(account.clone()));
        }
        if let Some(reservation) = &filter.reservation_id {
            query = query.filter(grants::reservation_id.eq(reservation.clone()));
        }
        if let Some(t) = filter.active_at {
            query = query.filter(
                grants::settled_state
                    .ne(SettledState::Cancelled)
                    .and(grants::starts_at.le(t))
                    .and(grants::ends_at.gt(t)),
            );
        }
        if let Some(states) = &filter.states {
            let mut any: Option<BoxedCondition> = None;
            for state in states {
                let this = state_at(*state, now);
                any = Some(match any {
                    Some(before) => Box::new(before.or(this)),
                    None => this,
                });
            }
            if let Some(any) = any {
                query = query.filter(any);
            }
        }
        if let Some(p) = after {
            query = query.filter(
                diesel::dsl::sql::<Bool>("(grants.created_at, grants.grant_id) < (")
                    .bind::<BigInt, _>(p.created_at)
                    .sql(", ")
                    .bind::<Text, _>(p.id.clone())
                    .sql(")"),
            );
        }
        Ok(query.load(conn).await?)
    }

    /// The grants settlement still moves (scheduled or active as recorded)
    /// on the reservations of a provider account (or on one of them), by
    /// start then grant id, unlocked: the read-only twin of
    /// [`crate::locks::open_grants`] for a whole listing at once.
    pub async fn open_on_account(
        conn: &mut AsyncPgConnection,
        account_id: &str,
        reservation_id: Option<&str>,
    ) -> Result<Vec<GrantRow>> {
        let mut query = grants::table
            .filter(grants::account_id.eq(account_id))
            .filter(grants::settled_state.eq_any(SettledState::OPEN))
            .order((grants::starts_at.asc(), grants::grant_id.asc()))
            .select(GrantRow::as_select())
            .into_boxed();
        if let Some(r) = reservation_id {
            query = query.filter(grants::reservation_id.eq(r));
        }
        Ok(query.load(conn).await?)
    }

    /// Every grant of a reservation, cancelled ones included, by start then
    /// grant id, unlocked.
    pub async fn of_reservation(
        conn: &mut AsyncPgConnection,
        account_id: &str,
        reservation_id: &str,
    ) -> Result<Vec<GrantRow>> {
        Ok(grants::table
            .filter(grants::account_id.eq(account_id))
            .filter(grants::reservation_id.eq(reservation_id))
            .order((grants::starts_at.asc(), grants::grant_id.asc()))
            .select(GrantRow::as_select())
            .load(conn)
            .await?)
    }

    /// Inserts a new grant.
    pub async fn insert(conn: &AsyncPgConnection, new: NewGrantRow<'_>) -> Result<GrantRow> {
        let mut conn = conn;
        let conn = &mut conn;
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
        conn: &AsyncPgConnection,
        tenant: &str,
        now: i64,
    ) -> Result<Vec<(String, String)>> {
        let mut conn = conn;
        let conn = &mut conn;
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
