//! `instances.start`: a ledger instance back into its grant or placed again
//! like a new one, under the lock order; a managed one on its own
//! reservation ([`start_managed`]).

use diesel_async::{AsyncConnection, AsyncPgConnection};
use grants_core::{PlacementRequest, Seat};

use super::placement::{Target, place_at, view};
use super::{capacity_error, decide, deleted_instance, find, lock_instance, managed};
use crate::error::{Result, StorageError};
use crate::ids::{InstanceId, TenantId};
use crate::locks;
use crate::model::events;
use crate::model::instance::InstanceRow;
use crate::model::pool_vm::PoolVm;
use crate::model::reservation::ReservationRow;
use crate::model::states::{InstanceState, ReservationStatus};
use crate::more_locks::{self, Try};
use crate::ops::{lending, settlement};
use crate::schema::provider_accounts;
use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use grants_core::vm::Cause;
use managed::Change;

/// `instances.start`: back into its grant if that grant is still live,
/// otherwise placed again like a new instance.
///
/// Lock order: placing it again locks the pool's candidate reservations in
/// id order, and those must be locked before the instance row and before
/// no reservation of a later id (a concurrent `instances.create` locks them
/// in that order). An instance off any reservation has its candidates
/// locked first. One on a reservation locks only that reservation, unless
/// it turns out, once settled there, to need a placement (its grant ended
/// or was cancelled): then the transaction rolls back and starts again
/// with the candidates and its reservation locked first, in id order.
pub async fn start(
    conn: &mut AsyncPgConnection,
    tenant: &TenantId,
    instance_id: &InstanceId,
    now: i64,
) -> Result<InstanceRow> {
    let tenant = tenant.as_str();
    let instance_id = instance_id.as_str();
    let managed = crate::db::read_only(conn, async |conn| {
        InstanceRow::find(conn, instance_id).await
    })
    .await?
    .is_some_and(|r| r.tenant_id == tenant && r.managed);
    if managed {
        return start_managed(conn, tenant, instance_id, now).await;
    }
    for lock_pool in more_locks::TRIES {
        let tried = start_once(conn, tenant, instance_id, now, lock_pool).await;
        if let Some(done) = more_locks::ended(tried) {
            return done;
        }
    }
    Err(more_locks::exhausted("instances.start"))
}

/// One try of [`start`]; with `lock_pool`, the pool's candidates and the
/// instance's reservation are locked first whatever its placement.
async fn start_once(
    conn: &mut AsyncPgConnection,
    tenant: &str,
    instance_id: &str,
    now: i64,
    lock_pool: bool,
) -> std::result::Result<InstanceRow, Try<StorageError>> {
    conn.transaction::<_, Try<StorageError>, _>(async move |conn| {
        let mut events = Vec::new();
        let mut pool_locked = false;
        if let Some(peek) = InstanceRow::find(conn, instance_id)
            .await?
            .filter(|r| r.tenant_id == tenant)
            && (lock_pool || peek.reservation_id.is_none())
        {
            let mut rows = ReservationRow::candidates(conn, &peek.pool_id, &peek.flavor).await?;
            if let (Some(a), Some(r)) = (&peek.account_id, &peek.reservation_id) {
                rows.push((a.clone(), r.clone()));
            }
            rows.sort_by(|(a1, r1), (a2, r2)| (r1, a1).cmp(&(r2, a2)));
            rows.dedup();
            for (account_id, reservation_id) in &rows {
                locks::reservation(conn, account_id, reservation_id).await?;
            }
            pool_locked = true;
        }
        let (inst, res) = lock_instance(conn, tenant, instance_id, now, &mut events).await?;
        match inst.state {
            InstanceState::Deleted => return Err(deleted_instance().into()),
            InstanceState::Running => {
                events::publish(conn, now, events).await?;
                return Ok(inst);
            }
            _ => {}
        }
        let mut request = PlacementRequest::new(tenant, inst.project_id.clone(), inst.billing());
        let target = match (&inst.grant_id, &res) {
            (Some(g), Some(r)) => {
                // It still holds its slot in a live grant (settlement would
                // have moved it otherwise): only its own reservation decides.
                request.held_grant = Some(g.clone());
                let open = locks::started_grants(conn, r, now).await?;
                let view = view(conn, r, now, open).await?;
                let seat =
                    grants_core::place_on(&view, &request).map_err(|_| capacity_error(&view))?;
                Target::from_seat(seat, r)
            }
            _ if !pool_locked => return Err(Try::MoreLocks),
            _ => {
                let found =
                    super::candidates(conn, &inst.pool_id, &inst.flavor, &request, now).await?;
                decide(
                    conn,
                    &inst.pool_id,
                    found,
                    &request,
                    false,
                    now,
                    &mut events,
                )
                .await?
                .0
            }
        };
        place_at(conn, &inst, &target, InstanceState::Running, now).await?;
        if let Target::Grant { grant_id, .. } = &target {
            lending::enforce_grant(conn, grant_id, now, &mut events).await?;
        }
        events::publish(conn, now, events).await?;
        Ok(find(conn, tenant, instance_id).await?)
    })
    .await
}

/// Whether a provider account still exists.
pub(super) async fn account_exists(conn: &mut AsyncPgConnection, account_id: &str) -> Result<bool> {
    let n: i64 = provider_accounts::table
        .find(account_id)
        .count()
        .get_result(conn)
        .await?;
    Ok(n > 0)
}

/// The zone of a new managed instance's VM: its reservation's for a slot
/// on one, else the pool's first zone (contract 3.12).
pub(super) async fn vm_zone(
    conn: &mut AsyncPgConnection,
    target: &Target,
    vm: &PoolVm,
) -> Result<String> {
    match target.reservation() {
        Some((account_id, reservation_id)) => {
            Ok(ReservationRow::find(conn, account_id, reservation_id)
                .await?
                .ok_or_else(|| StorageError::internal("placed on an unknown reservation"))?
                .zone)
        }
        None => <[String]>::first(&vm.zones)
            .cloned()
            .ok_or_else(|| StorageError::internal("a managed pool without zones")),
    }
}

/// [`start`] of a managed instance: its VM never moves, so only the
/// reservation it was created on decides (a live grant of the tenant that
/// serves it, else an ordinary slot, else `CAPACITY_UNAVAILABLE`); an
/// on-demand VM, or one whose reservation is gone, starts on-demand.
async fn start_managed(
    conn: &mut AsyncPgConnection,
    tenant: &str,
    instance_id: &str,
    now: i64,
) -> Result<InstanceRow> {
    conn.transaction::<_, StorageError, _>(async move |conn| {
        let mut events = Vec::new();
        let peek = find(conn, tenant, instance_id).await?;
        // The VM's reservation first (the lock order), settled.
        let vm_res = match (&peek.vm_account_id, &peek.vm_reservation_id) {
            (Some(a), Some(r)) => locks::reservation(conn, a, r).await?,
            _ => None,
        };
        if let Some(r) = &vm_res {
            settlement::settle(conn, r, now, &mut events).await?;
        }
        let (inst, res) = lock_instance(conn, tenant, instance_id, now, &mut events).await?;
        let placed = match (inst.state, &vm_res) {
            // A stopped interruptible instance holds nothing: it takes a lent
            // slot on its VM's reservation again, or none (contract 3.14).
            (InstanceState::Stopped, Some(r)) if inst.interruptible => {
                if r.status == ReservationStatus::Gone {
                    return Err(super::no_lent_slot(&inst.pool_id));
                }
                let request =
                    PlacementRequest::new(tenant, inst.project_id.clone(), inst.billing());
                let open = locks::started_grants(conn, r, now).await?;
                let view = view(conn, r, now, open).await?;
                let (_, grant_id) = grants_core::lending::place_borrower(
                    std::slice::from_ref(&view),
                    &request.tenant_id,
                )
                .ok_or_else(|| super::no_lent_slot(&inst.pool_id))?;
                Some(Target::from_seat(Seat::Lent(grant_id.to_owned()), r))
            }
            (InstanceState::Stopped, None) if inst.interruptible => {
                return Err(super::no_lent_slot(&inst.pool_id));
            }
            (InstanceState::Stopped, Some(r)) if r.status != ReservationStatus::Gone => {
                let mut request =
                    PlacementRequest::new(tenant, inst.project_id.clone(), inst.billing());
                request.held_grant = inst.grant_id.clone();
                let open = locks::started_grants(conn, r, now).await?;
                let view = view(conn, r, now, open).await?;
                let seat =
                    grants_core::place_on(&view, &request).map_err(|_| capacity_error(&view))?;
                Some(Target::from_seat(seat, r))
            }
            (InstanceState::Stopped, _) => Some(Target::OnDemand),
            _ => None,
        };
        let grant = match &placed {
            Some(Target::Grant { grant_id, .. }) => Some(grant_id.clone()),
            _ => None,
        };
        let change = Change {
            placed,
            ..Change::of(Cause::StartRequested)
        };
        managed::apply(conn, &inst, res.as_ref(), change, now, &mut events)
            .await?
            .locked()?;
        if let Some(grant_id) = grant {
            lending::enforce_grant(conn, &grant_id, now, &mut events).await?;
        }
        crate::model::events::publish(conn, now, events).await?;
        find(conn, tenant, instance_id).await
    })
    .await
}
