//! Instances: admission (`create`: quota, then placement), stop/start/delete,
//! the quota they hold (`quota`) and the placement segments billing reads
//! (contract 3.7, 4, 5.1).
//!
//! The rows are locked in the one order of [`crate::locks`], so no operation
//! here can deadlock another.

use std::collections::HashSet;

use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use grants_core::{Billing, PlacementRequest, ReservationView, Seat};

use crate::error::{Detail, ErrorKind, Result, StorageError};
use crate::ids::{InstanceId, TenantId};
use crate::locks;
use crate::model::events::{self, NewEvent};
use crate::model::grant::GrantRow;
use crate::model::instance::{InstanceFilter, InstanceRow};
use crate::model::keyset::{Page, Position};
use crate::model::reservation::ReservationRow;
use crate::model::states::{DeletedReason, InstanceState, ReservationStatus, SettledState};
use crate::ops::settlement;
use crate::schema::{grants, instances};

mod create;
pub mod managed;
mod placement;
mod quota;
mod start;

pub use create::{NewInstance, create};
use grants_core::vm::Cause;
use managed::{Change, Observation, vm_name};
use placement::view;
pub use placement::{Seats, Target, apply_move, place_at, place_with, seats, take_in};
pub(crate) use quota::lock_quota_of;
use quota::{charges_for, lock_quota_rows, pool_of, release_quota};
pub use start::start;

fn capacity_error(view: &ReservationView) -> StorageError {
    StorageError::new(
        ErrorKind::CapacityUnavailable,
        format!(
            "reservation {} has no slot for the instance",
            view.reservation_id
        ),
    )
    .with(Detail::ReservationId(view.reservation_id.clone()))
    .with(Detail::Slots {
        total: view.total,
        in_use: view.physical_in_use(),
        available: view.available(),
    })
}

/// `CAPACITY_UNAVAILABLE` of an interruptible instance no lending grant has
/// a slot for (contract 3.14).
fn no_lent_slot(pool_id: &str) -> StorageError {
    StorageError::new(
        ErrorKind::CapacityUnavailable,
        format!("no grant of pool {pool_id} has a lent slot free"),
    )
    .with(Detail::Reason(crate::error::Reason::NoLentSlot))
}

/// Places an instance over the pool's candidate reservations (bound, of the
/// flavor, ready), in reservation id order, each locked and settled before
/// its decision. No candidate: on-demand. All refuse: `CAPACITY_UNAVAILABLE`
/// with the first candidate's figures. An `interruptible` instance looks at
/// every candidate and takes only a lent slot (contract 3.14), else
/// `CAPACITY_UNAVAILABLE` (`no-lent-slot`). Also answers whether the grant
/// chosen has lent slots (then the caller may have to take one back).
async fn decide(
    conn: &mut AsyncPgConnection,
    pool_id: &str,
    found: Candidates,
    request: &PlacementRequest,
    interruptible: bool,
    now: i64,
    events: &mut Vec<NewEvent>,
) -> Result<(Target, Option<String>, bool)> {
    // Candidates are locked and settled in (reservation id, account id)
    // order, the documented lock order, so two placements never deadlock;
    // then one pure decision sees them (grants first across all candidates,
    // contract 4). Only a prefix is needed: once an ordinary slot is found,
    // a later candidate matters only if the tenant has a live grant there,
    // so the walk stops at the first ordinary slot past the last such
    // reservation, and a pool's placements without grants do not all queue
    // on every reservation of the pool.
    let Candidates { candidates, hinted } = found;
    let mut rows = Vec::new();
    let mut views = Vec::new();
    let mut ordinary_found = false;
    for (k, (account_id, reservation_id)) in candidates.iter().enumerate() {
        if !interruptible && ordinary_found && !hinted.iter().skip(k).any(|h| *h) {
            break;
        }
        // The lock and the reads under it in one round trip (pipelined: each
        // runs once the statement before it is done, with its own snapshot).
        let (res, started, seats) = {
            let c = &*conn;
            futures::try_join!(
                locks::reservation(c, account_id, reservation_id),
                locks::started_grants_of(c, account_id, reservation_id, now),
                placement::seats(c, account_id, reservation_id),
            )?
        };
        let Some(res) = res else {
            continue;
        };
        if res.status != ReservationStatus::Ready || res.pool_id.as_deref() != Some(pool_id) {
            continue;
        }
        // Transitions written move instances: then the seats are counted again.
        let view =
            match settlement::settle_locked_with_grants(conn, &res, started, now, events).await? {
                (0, open) => placement::view_of(&res, now, open, &seats),
                (_, open) => view(conn, &res, now, open).await?,
            };
        let seat = grants_core::place_on(&view, request);
        views.push(view);
        rows.push(res);
        match seat {
            // The first grant seat in id order is the decision.
            Ok(Seat::Grant(_)) if !interruptible => break,
            Ok(Seat::Ordinary) => ordinary_found = true,
            Ok(_) | Err(_) => {}
        }
    }
    if interruptible {
        let (index, grant_id) = grants_core::lending::place_borrower(&views, &request.tenant_id)
            .ok_or_else(|| no_lent_slot(pool_id))?;
        let row = rows
            .get(index)
            .ok_or_else(|| StorageError::internal("placement chose no candidate"))?;
        let seat = Seat::Lent(grant_id.to_owned());
        return Ok((Target::from_seat(seat, row), Some(row.zone.clone()), false));
    }
    match grants_core::place_in_order(&views, request) {
        Ok(None) => Ok((Target::OnDemand, None, false)),
        Ok(Some((index, seat))) => {
            let row = rows
                .get(index)
                .ok_or_else(|| StorageError::internal("placement chose no candidate"))?;
            let lent = match (&seat, views.get(index)) {
                (Seat::Grant(g), Some(view)) => view
                    .live_grants
                    .iter()
                    .any(|live| live.grant_id == *g && live.lent > 0),
                _ => false,
            };
            Ok((Target::from_seat(seat, row), Some(row.zone.clone()), lent))
        }
        Err(_) => Err(<[_]>::first(&views).map_or_else(
            || StorageError::internal("placement refused no candidate"),
            capacity_error,
        )),
    }
}

/// A pool's candidate reservations for a flavor, in lock order (unlocked),
/// and for each whether the tenant may have a live grant on it now
/// (scheduled or active, `startsAt <= now < endsAt`): a hint of which
/// reservations a placement must look at beyond the first ordinary slot. A
/// grant committed after this read is ordered after the placement, as if it
/// had been created a moment later.
pub(super) struct Candidates {
    candidates: Vec<(String, String)>,
    hinted: Vec<bool>,
}

/// Reads [`Candidates`]: the two reads in one round trip (pipelined).
pub(super) async fn candidates(
    conn: &AsyncPgConnection,
    pool_id: &str,
    flavor: &str,
    request: &PlacementRequest,
    now: i64,
) -> Result<Candidates> {
    let hint = async {
        if request.billing != Billing::Standard {
            return Ok(None);
        }
        GrantRow::live_reservations_of(conn, &request.tenant_id, now)
            .await
            .map(Some)
    };
    let (candidates, granted) =
        futures::try_join!(ReservationRow::candidates(conn, pool_id, flavor), hint)?;
    let granted: HashSet<(String, String)> = granted.unwrap_or_default().into_iter().collect();
    let hinted = candidates.iter().map(|c| granted.contains(c)).collect();
    Ok(Candidates { candidates, hinted })
}

/// `instances.get`: an instance of the tenant.
pub async fn get(
    conn: &mut AsyncPgConnection,
    tenant: &TenantId,
    instance_id: &InstanceId,
) -> Result<InstanceRow> {
    find(conn, tenant.as_str(), instance_id.as_str()).await
}

/// [`get`] on ids already read from rows.
pub async fn find(
    conn: &mut AsyncPgConnection,
    tenant: &str,
    instance_id: &str,
) -> Result<InstanceRow> {
    match InstanceRow::find(conn, instance_id).await? {
        Some(r) if r.tenant_id == tenant => Ok(r),
        _ => Err(StorageError::not_found("instance", instance_id)),
    }
}

/// `instances.list`: one page of the instances matching `filter` (its
/// `tenant_id` is the acting tenant, or `None` for root's `all`), newest
/// first, after position `after`, at most `limit` (1 to
/// [`crate::LIST_LIMIT`]).
pub async fn list(
    conn: &mut AsyncPgConnection,
    filter: &InstanceFilter,
    after: Option<Position>,
    limit: i64,
) -> Result<Page<InstanceRow>> {
    let rows = InstanceRow::page(conn, filter, after.as_ref(), limit + 1).await?;
    Ok(Page::from_rows(rows, limit, after, INSTANCE_PREFIX, |r| {
        Position::of(r.created_at, &r.instance_id)
    }))
}

/// The TypeID prefix of instance ids.
pub const INSTANCE_PREFIX: &str = "inst";

/// Locks the instance's reservation (settled to `now`) and then the instance
/// row, so the instance cannot move under the caller. Returns the row and the
/// reservation it is on, if any.
async fn lock_instance(
    conn: &mut AsyncPgConnection,
    tenant: &str,
    instance_id: &str,
    now: i64,
    events: &mut Vec<NewEvent>,
) -> Result<(InstanceRow, Option<ReservationRow>)> {
    for attempt in 0.. {
        let current = match InstanceRow::find(conn, instance_id).await? {
            Some(r) if r.tenant_id == tenant => r,
            _ => return Err(StorageError::not_found("instance", instance_id)),
        };
        let res = match (&current.account_id, &current.reservation_id) {
            (Some(a), Some(r)) => {
                let Some(res) = locks::reservation(conn, a, r).await? else {
                    // The account was deleted while we waited for the lock:
                    // the same commit moved the instance off the reservation.
                    if attempt < 3 {
                        continue;
                    }
                    return Err(StorageError::internal("instance on unknown reservation"));
                };
                settlement::settle(conn, &res, now, events).await?;
                Some(res)
            }
            _ => None,
        };
        let locked = locks::instance(conn, instance_id).await?;
        if locked.reservation_id == current.reservation_id
            && locked.account_id == current.account_id
        {
            return Ok((locked, res));
        }
        // It moved between the read and the lock (only ever off a reservation): retry.
    }
    Err(StorageError::internal(
        "the instance kept moving while being locked",
    ))
}

/// The instance lock of `stop` and `start`, for the worker, whoever owns it: its
/// reservation locked and settled to `now`, then its row.
pub async fn lock_for_worker(
    conn: &mut AsyncPgConnection,
    instance_id: &str,
    now: i64,
    events: &mut Vec<NewEvent>,
) -> Result<(InstanceRow, Option<ReservationRow>)> {
    let tenant = InstanceRow::find(conn, instance_id)
        .await?
        .ok_or_else(|| StorageError::not_found("instance", instance_id))?
        .tenant_id;
    lock_instance(conn, &tenant, instance_id, now, events).await
}

/// `INVALID_STATE` for stop and start of a deleted instance.
fn deleted_instance() -> StorageError {
    StorageError::invalid_state("the instance is deleted")
        .with(Detail::InstanceState(InstanceState::Deleted))
}

/// `instances.stop`: a grant instance keeps its slot; others release theirs.
pub async fn stop(
    conn: &mut AsyncPgConnection,
    tenant: &TenantId,
    instance_id: &InstanceId,
    now: i64,
) -> Result<InstanceRow> {
    let tenant = tenant.as_str();
    let instance_id = instance_id.as_str();
    conn.transaction::<_, StorageError, _>(async move |conn| {
        let mut events = Vec::new();
        let (inst, res) = lock_instance(conn, tenant, instance_id, now, &mut events).await?;
        if inst.managed {
            let seen = Observation::default();
            managed::apply(
                conn,
                &inst,
                res.as_ref(),
                Change::of(Cause::StopRequested).seen(seen),
                now,
                &mut events,
            )
            .await?
            .locked()?;
            events::publish(conn, now, events).await?;
            return find(conn, tenant, instance_id).await;
        }
        match inst.state {
            InstanceState::Deleted => return Err(deleted_instance()),
            InstanceState::Stopped => {
                events::publish(conn, now, events).await?;
                return Ok(inst);
            }
            _ => {}
        }
        let target = match (&inst.grant_id, &res) {
            (Some(g), Some(r)) => Target::Grant {
                grant_id: g.clone(),
                account_id: r.account_id.clone(),
                reservation_id: r.reservation_id.clone(),
            },
            _ => Target::None,
        };
        place_at(conn, &inst, &target, InstanceState::Stopped, now).await?;
        events::publish(conn, now, events).await?;
        find(conn, tenant, instance_id).await
    })
    .await
}

/// Deletes a locked instance at `now`: releases its slot and its quota. A
/// managed one is only marked `deleting` with its step (`reason`): its slot
/// and quota go when the provider confirms its VM gone.
async fn delete_locked(
    conn: &mut AsyncPgConnection,
    inst: &InstanceRow,
    reason: DeletedReason,
    now: i64,
    events: &mut Vec<NewEvent>,
) -> Result<()> {
    if inst.managed {
        return managed::delete_requested(conn, inst, None, reason, now, events).await;
    }
    release_quota(conn, inst).await?;
    place_at(conn, inst, &Target::None, InstanceState::Deleted, now).await
}

/// `instances.delete`: releases slot and quota; deleting again returns it unchanged.
pub async fn delete(
    conn: &mut AsyncPgConnection,
    tenant: &TenantId,
    instance_id: &InstanceId,
    now: i64,
) -> Result<InstanceRow> {
    let tenant = tenant.as_str();
    let instance_id = instance_id.as_str();
    conn.transaction::<_, StorageError, _>(async move |conn| {
        // Quota rows come first in the lock order.
        let Some(peek) = InstanceRow::find(conn, instance_id)
            .await?
            .filter(|r| r.tenant_id == tenant)
        else {
            return Err(StorageError::not_found("instance", instance_id));
        };
        let pool = pool_of(conn, &peek.pool_id).await?;
        lock_quota_rows(
            conn,
            tenant,
            &peek.pool_id,
            &charges_for(&pool, &peek.flavor)?,
        )
        .await?;
        let mut events = Vec::new();
        let (inst, res) = lock_instance(conn, tenant, instance_id, now, &mut events).await?;
        if inst.managed {
            let reason = DeletedReason::Requested;
            managed::delete_requested(conn, &inst, res.as_ref(), reason, now, &mut events).await?;
        } else if inst.state != InstanceState::Deleted {
            delete_locked(conn, &inst, DeletedReason::Requested, now, &mut events).await?;
            tracing::info!(instance = %instance_id, "instance deleted");
            // A grant slot freed at this instant takes in the oldest of its
            // tenant's instances waiting on ordinary slots (contract 5.3).
            if let (Some(res), Some(_)) = (&res, &inst.grant_id) {
                settlement::refill(conn, res, now, &mut events).await?;
            }
        }
        events::publish(conn, now, events).await?;
        find(conn, tenant, instance_id).await
    })
    .await
}

/// Deletes every live instance of a tenant (tenant deletion), in the
/// caller's transaction; the caller has settled and force-ended the
/// tenant's reservations.
pub async fn delete_all_of_tenant(
    conn: &mut AsyncPgConnection,
    tenant: &str,
    now: i64,
) -> Result<usize> {
    let live = locks::live_instances_of_tenant(conn, tenant).await?;
    let mut events = Vec::new();
    for inst in &live {
        delete_locked(conn, inst, DeletedReason::TenantDeleted, now, &mut events).await?;
    }
    events::publish(conn, now, events).await?;
    Ok(live.len())
}

/// Reservations where the tenant has grants or live instances.
pub async fn reservations_of_tenant(
    conn: &mut AsyncPgConnection,
    tenant: &str,
) -> Result<Vec<(String, String)>> {
    let mut keys: Vec<(String, String)> = grants::table
        .filter(grants::tenant_id.eq(tenant))
        .filter(grants::settled_state.eq_any(SettledState::OPEN))
        .select((grants::account_id, grants::reservation_id))
        .distinct()
        .load(conn)
        .await?;
    let on: Vec<(Option<String>, Option<String>)> = instances::table
        .filter(instances::tenant_id.eq(tenant))
        .filter(instances::state.ne(InstanceState::Deleted))
        .filter(instances::reservation_id.is_not_null())
        .select((instances::account_id, instances::reservation_id))
        .distinct()
        .load(conn)
        .await?;
    keys.extend(on.into_iter().filter_map(|(a, r)| Some((a?, r?))));
    keys.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
    keys.dedup();
    Ok(keys)
}
