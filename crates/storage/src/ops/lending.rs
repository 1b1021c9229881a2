//! Lending idle granted slots (contract 3.14): a grant's lending, set by its
//! grantee; the interruption of borrowers when the grantee needs its slots
//! back or the grant stops lending ([`enforce`]); and the reclaim of the
//! interruptions due (the worker's `vps.lending` pass, [`reclaim`]).
//!
//! The decisions are [`grants_core::lending`]'s. Every write here runs under
//! the lock of the reservation the borrowers are on, so two placements, a
//! reclaim and a borrower's own delete never interrupt one borrower twice or
//! free its slot twice.

use std::collections::BTreeMap;

use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use grants_core::GrantState;
use grants_core::lending::{Borrower, LendingGrant, interrupt_all, reclaim as next_reclaimed};

use super::grants::Grant;
use super::instances::managed;
use super::instances::{Target, lock_quota_of};
use crate::actor::Actor;
use crate::error::{Detail, Reason, Result, StorageError};
use crate::ids::GrantId;
use crate::locks;
use crate::model::event_data::{EventData, InstanceChange};
use crate::model::events::{self, NewEvent};
use crate::model::grant::GrantRow;
use crate::model::instance::InstanceRow;
use crate::model::reservation::ReservationRow;
use crate::model::states::{DeletedReason, InstanceState, PlacementKind};
use crate::ops::settlement;
use crate::schema::{grants, instances, pools};

/// The notice of a pool without one stored (its grants cannot lend, so it
/// only matters to a borrower left from a pool that could).
const DEFAULT_NOTICE_S: i32 = 120;

/// The states in which a borrower's interruption is still to act on: its
/// VM is made, running or starting (a stopping one frees its slot itself).
const ACTIVE: [InstanceState; 3] = [
    InstanceState::Provisioning,
    InstanceState::Running,
    InstanceState::Starting,
];

/// The states in which an instance holds nothing.
const GONE: [InstanceState; 2] = [InstanceState::Deleted, InstanceState::Failed];

/// `reservationGrants.setLending`: the grantee (or root) lets the grant's
/// idle slots be lent, or stops lending (interrupting every borrower in
/// it). Setting the value it has returns the grant unchanged.
pub async fn set_lending(
    conn: &mut AsyncPgConnection,
    actor: &Actor,
    grant_id: &GrantId,
    lend: bool,
    now: i64,
) -> Result<Grant> {
    let (tenant, root) = (actor.tenant().as_str(), actor.root().as_str());
    let grant_id = grant_id.as_str();
    conn.transaction::<_, StorageError, _>(async move |conn| {
        let row = match GrantRow::find(conn, grant_id).await? {
            Some(row) if row.tenant_id == tenant || tenant == root => row,
            _ => return Err(StorageError::not_found("grant", grant_id)),
        };
        // The reservation first (the lock order), settled to now, so the
        // state below is the grant's at now.
        let res = locks::reservation(conn, &row.account_id, &row.reservation_id)
            .await?
            .ok_or_else(|| StorageError::internal("grant without reservation"))?;
        let mut events = Vec::new();
        settlement::settle(conn, &res, now, &mut events).await?;
        let row = GrantRow::find(conn, grant_id)
            .await?
            .ok_or_else(|| StorageError::internal("grant vanished"))?;
        let notice: Option<Option<i32>> = pools::table
            .find(&row.pool_id)
            .select(pools::lending_notice_s)
            .first(conn)
            .await
            .optional()?;
        if notice.flatten().is_none() {
            return Err(
                StorageError::invalid_state(format!("pool {} does not lend", row.pool_id))
                    .with(Detail::Reason(Reason::PoolDoesNotLend)),
            );
        }
        match row.state_at(now) {
            GrantState::Ended | GrantState::Cancelled => {
                return Err(StorageError::invalid_state(format!(
                    "grant {grant_id} is {}",
                    row.state_at(now)
                )));
            }
            GrantState::Scheduled | GrantState::Active => {}
        }
        if row.lending != lend {
            diesel::update(grants::table.find(grant_id))
                .set(grants::lending.eq(lend))
                .execute(conn)
                .await?;
            enforce_grant(conn, grant_id, now, &mut events).await?;
            tracing::info!(grant = %grant_id, lend, "grant lending set");
        }
        events::publish(conn, now, events).await?;
        let row = GrantRow::find(conn, grant_id)
            .await?
            .ok_or_else(|| StorageError::internal("grant vanished"))?;
        let mut one = Grant::with_lent_slots(conn, vec![Grant::at(row, now)]).await?;
        one.pop()
            .ok_or_else(|| StorageError::internal("a grant read went missing"))
    })
    .await
}

/// One borrower as the lending decisions need it.
#[derive(Debug, Clone, Queryable)]
struct BorrowerRow {
    instance_id: String,
    grant_id: Option<String>,
    lent_at: Option<i64>,
    interrupt_at: Option<i64>,
}

/// The SQL types of a [`BorrowerRow`].
type BorrowerSql = (
    diesel::sql_types::Text,
    diesel::sql_types::Nullable<diesel::sql_types::Text>,
    diesel::sql_types::Nullable<diesel::sql_types::BigInt>,
    diesel::sql_types::Nullable<diesel::sql_types::BigInt>,
);

/// A query of [`BorrowerRow`]s, narrowed by its caller.
type BorrowersQuery<'a> = instances::BoxedQuery<'a, diesel::pg::Pg, BorrowerSql>;

/// The live borrowers' rows, as the lending decisions need them (the
/// caller narrows them to a reservation or a grant).
fn live_borrowers<'a>() -> BorrowersQuery<'a> {
    instances::table
        .filter(instances::placement_kind.eq(PlacementKind::Lent))
        .filter(instances::state.ne_all(GONE))
        .select((
            instances::instance_id,
            instances::grant_id,
            instances::lent_at,
            instances::interrupt_at,
        ))
        .into_boxed()
}

/// Interrupts, at `at`, the borrowers on the locked reservation that a
/// grant no longer lends to: every one of a grant that ended, was cancelled
/// or stopped lending, and, in a lending grant whose grantee needs more
/// slots than the unlent ones, the borrowers that came last (contract
/// 3.14). Answers how many it interrupted. Called after every change that
/// may take a lent slot back: a grantee's instance placed in its grant, and
/// settlement transitions.
pub async fn enforce(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
    at: i64,
    events: &mut Vec<NewEvent>,
) -> Result<usize> {
    let borrowers = live_borrowers()
        .filter(instances::account_id.eq(&res.account_id))
        .filter(instances::reservation_id.eq(&res.reservation_id))
        .load(conn)
        .await?;
    enforce_on(conn, borrowers, at, events).await
}

/// [`enforce`] for the borrowers of one grant (a grantee's instance placed
/// in it, or its lending switched).
pub async fn enforce_grant(
    conn: &mut AsyncPgConnection,
    grant_id: &str,
    at: i64,
    events: &mut Vec<NewEvent>,
) -> Result<usize> {
    let borrowers = live_borrowers()
        .filter(instances::grant_id.eq(grant_id))
        .load(conn)
        .await?;
    enforce_on(conn, borrowers, at, events).await
}

async fn enforce_on(
    conn: &mut AsyncPgConnection,
    borrowers: Vec<BorrowerRow>,
    at: i64,
    events: &mut Vec<NewEvent>,
) -> Result<usize> {
    let mut by_grant: BTreeMap<String, Vec<Borrower>> = BTreeMap::new();
    for b in borrowers {
        let Some(grant_id) = b.grant_id else { continue };
        by_grant.entry(grant_id).or_default().push(Borrower {
            instance_id: b.instance_id,
            since: b.lent_at.unwrap_or(0),
            interrupting: b.interrupt_at.is_some(),
        });
    }
    let mut interrupted = 0;
    for (grant_id, borrowers) in by_grant {
        let row = GrantRow::find(conn, &grant_id)
            .await?
            .ok_or_else(|| StorageError::internal("a borrower of an unknown grant"))?;
        let held: i64 = instances::table
            .filter(instances::grant_id.eq(&grant_id))
            .filter(instances::placement_kind.eq(PlacementKind::Grant))
            .filter(instances::state.ne_all(GONE))
            .count()
            .get_result(conn)
            .await?;
        let mut grant = LendingGrant::new(
            &grant_id,
            &row.tenant_id,
            row.starts_at,
            u32::try_from(row.slots).unwrap_or(0),
        );
        grant.lends = row.lending && row.state_at(at) == GrantState::Active;
        grant.held = u32::try_from(held).unwrap_or(u32::MAX);
        grant.borrowers = borrowers;
        let chosen: Vec<String> = if grant.lends {
            // The grantee's instances are already counted in `held`: the
            // borrowers that came last go until the VMs fit the slots.
            let mut chosen = Vec::new();
            while grant.held.saturating_add(grant.lent()) > grant.slots
                && let Some(b) = next_reclaimed(&grant).map(|b| b.instance_id.clone())
            {
                for x in grant.borrowers.iter_mut().filter(|x| x.instance_id == b) {
                    x.interrupting = true;
                }
                chosen.push(b);
            }
            chosen
        } else {
            interrupt_all(&grant)
                .into_iter()
                .map(|b| b.instance_id.clone())
                .collect()
        };
        if chosen.is_empty() {
            continue;
        }
        let notice_s: Option<i32> = pools::table
            .find(&row.pool_id)
            .select(pools::lending_notice_s)
            .first(conn)
            .await?;
        let interrupt_at = at + i64::from(notice_s.unwrap_or(DEFAULT_NOTICE_S)) * 1000;
        for id in chosen {
            interrupted += interrupt(conn, &id, interrupt_at, at, events).await?;
        }
    }
    Ok(interrupted)
}

/// Marks one borrower interrupted (once) and queues its
/// `instance.interrupting` event.
async fn interrupt(
    conn: &mut AsyncPgConnection,
    instance_id: &str,
    interrupt_at: i64,
    at: i64,
    events: &mut Vec<NewEvent>,
) -> Result<usize> {
    let Some(inst): Option<InstanceRow> = diesel::update(
        instances::table
            .find(instance_id)
            .filter(instances::interrupt_at.is_null())
            .filter(instances::placement_kind.eq(PlacementKind::Lent)),
    )
    .set(instances::interrupt_at.eq(interrupt_at))
    .returning(InstanceRow::as_returning())
    .get_result(conn)
    .await
    .optional()?
    else {
        return Ok(0);
    };
    tracing::info!(
        instance = %inst.instance_id,
        grant = ?inst.grant_id,
        interrupt_at,
        "borrower interrupted"
    );
    let data = InstanceChange {
        interrupt_at: Some(interrupt_at),
        ..managed::change(&inst, &Target::of(&inst))
    };
    events.push(NewEvent::new(
        &inst.tenant_id,
        EventData::InstanceInterrupting(data),
        at,
    ));
    Ok(1)
}

/// The borrowers whose interruption is due at `now` and whose VM is not
/// being deleted yet, oldest due first, at most `limit`.
pub async fn due(conn: &mut AsyncPgConnection, now: i64, limit: i64) -> Result<Vec<String>> {
    Ok(instances::table
        .filter(instances::interrupt_at.le(now))
        .filter(instances::placement_kind.eq(PlacementKind::Lent))
        .filter(instances::state.eq_any(ACTIVE))
        .order((instances::interrupt_at.asc(), instances::instance_id.asc()))
        .limit(limit)
        .select(instances::instance_id)
        .load(conn)
        .await?)
}

/// The instant the next interruption not acted on yet is due, if any.
pub async fn next_due(conn: &mut AsyncPgConnection) -> Result<Option<i64>> {
    // One short transaction behind a transaction pooler.
    crate::db::read_only(conn, async |conn| {
        Ok(instances::table
            .filter(instances::interrupt_at.is_not_null())
            .filter(instances::placement_kind.eq(PlacementKind::Lent))
            .filter(instances::state.eq_any(ACTIVE))
            .select(diesel::dsl::min(instances::interrupt_at))
            .first(conn)
            .await?)
    })
    .await
}

/// Deletes one borrower whose interruption is due (`deletedReason:
/// "reclaimed"`): its VM's delete step is recorded, the slot stays its
/// grantee's. Answers whether it did; a borrower deleted or stopped in the
/// meantime, or not due, is left as it is.
pub async fn reclaim(conn: &mut AsyncPgConnection, instance_id: &str, now: i64) -> Result<bool> {
    conn.transaction::<_, StorageError, _>(async move |conn| {
        let Some(peek) = InstanceRow::find(conn, instance_id).await? else {
            return Ok(false);
        };
        // Quota rows first (the lock order): the delete releases them once
        // the VM is gone, not now, but the change must be allowed to.
        lock_quota_of(conn, &peek).await?;
        let mut events = Vec::new();
        let (inst, res) =
            super::instances::lock_for_worker(conn, instance_id, now, &mut events).await?;
        let due = inst.placement_kind == PlacementKind::Lent
            && inst.interrupt_at.is_some_and(|t| t <= now)
            && ACTIVE.contains(&inst.state);
        if !due {
            events::publish(conn, now, events).await?;
            return Ok(false);
        }
        let reason = DeletedReason::Reclaimed;
        managed::delete_requested(conn, &inst, res.as_ref(), reason, now, &mut events).await?;
        events::publish(conn, now, events).await?;
        tracing::info!(instance = %instance_id, "borrower reclaimed: its VM is deleted");
        Ok(true)
    })
    .await
}
