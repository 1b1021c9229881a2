//! Instances: admission (quota, then placement), stop/start/delete, and the
//! placement segments billing reads (contract 3.7, 4, 5.1).
//!
//! The rows are locked in the one order of [`crate::locks`], so no operation
//! here can deadlock another.

use std::collections::HashSet;

use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use grants_core::{Billing, PlacementRequest, ReservationView, Seat};
use quotas_core::{Charge, QuotaRow};

use crate::error::{Detail, ErrorKind, Field, Limited, Reason, Result, StorageError};
use crate::ids;
use crate::ids::{InstanceId, TenantId};
use crate::locks;
use crate::model::events::{self, NewEvent};
use crate::model::grant::GrantRow;
use crate::model::idempotency::{self, Claim, Created, KeyedRequest};
use crate::model::instance::{InstanceFilter, InstanceRow, NewInstanceRow, NewVm};
use crate::model::keyset::{Page, Position};
use crate::model::quota;
use crate::model::reservation::ReservationRow;
use crate::model::states::{
    DeletedReason, InstanceBilling, InstanceState, ReservationStatus, SettledState,
};
use crate::ops::pools::{self, Pool};
use crate::ops::settlement;
use crate::ops::tenancy;
use crate::schema::{grants, instances};

pub mod managed;
mod placement;
mod start;

use crate::ops::vms::outbox;
use grants_core::vm::Cause;
use managed::{Change, Observation, vm_name};
use placement::view;
pub use placement::{Seats, Target, apply_move, place_at, place_with, seats, take_in};
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

/// Places an instance over the pool's candidate reservations (bound, of the
/// flavor, ready), in reservation id order, each locked and settled before
/// its decision. No candidate: on-demand. All refuse: `CAPACITY_UNAVAILABLE`
/// with the first candidate's figures.
async fn decide(
    conn: &mut AsyncPgConnection,
    pool_id: &str,
    found: Candidates,
    request: &PlacementRequest,
    now: i64,
    events: &mut Vec<NewEvent>,
) -> Result<(Target, Option<String>)> {
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
        if ordinary_found && !hinted.iter().skip(k).any(|h| *h) {
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
            Ok(Seat::Grant(_)) => break,
            Ok(Seat::Ordinary) => ordinary_found = true,
            Err(_) => {}
        }
    }
    match grants_core::place_in_order(&views, request) {
        Ok(None) => Ok((Target::OnDemand, None)),
        Ok(Some((index, seat))) => {
            let row = rows
                .get(index)
                .ok_or_else(|| StorageError::internal("placement chose no candidate"))?;
            Ok((Target::from_seat(seat, row), Some(row.zone.clone())))
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

/// Locks the tenant's quota rows of the pool for `charges` (by resource).
async fn lock_quota_rows(
    conn: &AsyncPgConnection,
    tenant: &str,
    pool_id: &str,
    charges: &[Charge],
) -> Result<Vec<QuotaRow>> {
    let resources: Vec<&str> = charges.iter().map(|c| c.resource.as_str()).collect();
    let rows = locks::quota_rows(conn, tenant, pool_id, &resources).await?;
    Ok(rows
        .into_iter()
        .map(|(r, m, u)| QuotaRow::new(r, m, u))
        .collect())
}

async fn write_quota_rows(
    conn: &AsyncPgConnection,
    tenant: &str,
    pool_id: &str,
    before: &[QuotaRow],
    after: &[QuotaRow],
) -> Result<()> {
    // The rows whose use changes, pipelined: one round trip.
    let writes = after
        .iter()
        .filter(|row| {
            !before
                .iter()
                .any(|b| b.resource == row.resource && b.used == row.used)
        })
        .map(|row| quota::set_used(conn, tenant, pool_id, &row.resource, row.used));
    futures::future::try_join_all(writes).await?;
    Ok(())
}

fn charges_for(pool: &Pool, flavor: &str) -> Result<Vec<Charge>> {
    let f = pool
        .flavor(flavor)
        .ok_or_else(|| StorageError::internal("flavor vanished"))?;
    Ok(quotas_core::instance_charges(f.vcpus, f.memory_gib, f.gpus))
}

/// Input of `instances.create`.
#[derive(Debug, Clone)]
pub struct NewInstance<'a> {
    /// The acting tenant.
    pub tenant_id: &'a TenantId,
    /// Pool.
    pub pool_id: &'a ids::PoolId,
    /// Flavor.
    pub flavor: &'a str,
    /// Project.
    pub project_id: Option<&'a ids::ProjectId>,
    /// Name (defaults to the id).
    pub name: Option<&'a str>,
    /// Billing.
    pub billing: Billing,
}

/// [`NewInstance`] with its ids as the rows keep them.
#[derive(Debug, Clone, Copy)]
struct NewInstanceRefs<'a> {
    tenant_id: &'a str,
    pool_id: &'a str,
    flavor: &'a str,
    project_id: Option<&'a str>,
    name: Option<&'a str>,
    billing: Billing,
}

/// `instances.create`: quota charged, then placed, atomically; idempotent.
pub async fn create(
    conn: &mut AsyncPgConnection,
    root: &TenantId,
    new: NewInstance<'_>,
    key: KeyedRequest<'_>,
    now: i64,
) -> Result<Created<InstanceRow>> {
    let root = root.as_str();
    let new = NewInstanceRefs {
        tenant_id: new.tenant_id.as_str(),
        pool_id: new.pool_id.as_str(),
        flavor: new.flavor,
        project_id: new.project_id.map(ids::ProjectId::as_str),
        name: new.name,
        billing: new.billing,
    };
    conn.transaction::<_, StorageError, _>(async move |conn| {
        let id = ids::new_id(INSTANCE_PREFIX, now);
        // Default plans here: generic plans made one tenant's burst of
        // creates twice as slow (docs/benchmarks.md, figure 2b).
        let claimed = idempotency::claim(conn, key, &id, now).await?;
        if let Claim::Replay(existing) = claimed {
            return find(conn, new.tenant_id, &existing)
                .await
                .map(Created::replay);
        }
        // The tenant row first (the lock order): a deletion that committed
        // since the key was authenticated refuses the admission instead of
        // leaving a live instance behind; one that starts now waits for it.
        locks::acting_tenant(conn, new.tenant_id).await?;
        let pool = pools::find(conn, new.tenant_id, root, new.pool_id).await?;
        if pool.flavor(new.flavor).is_none() {
            return Err(StorageError::invalid(
                Field::Flavor,
                Reason::UnknownFlavor,
                format!("pool {} has no flavor {}", pool.pool_id, new.flavor),
            ));
        }
        if let Some(p) = new.project_id
            && tenancy::tenant_project(conn, new.tenant_id, p)
                .await?
                .is_none()
        {
            return Err(StorageError::invalid(
                Field::ProjectId,
                Reason::ProjectNotTenant,
                format!("project {p} is not a project of {}", new.tenant_id),
            ));
        }
        if pool.vm.is_some() && !start::account_exists(conn, &pool.account_id).await? {
            return Err(StorageError::invalid_state(format!(
                "the provider account of managed pool {} is gone",
                pool.pool_id
            ))
            .with(Detail::Reason(Reason::NoAccount)));
        }
        let charges = charges_for(&pool, new.flavor)?;
        let request = PlacementRequest::new(
            new.tenant_id,
            new.project_id.map(str::to_owned),
            new.billing,
        );
        // The quota rows are locked from here to the commit, and every create
        // of the tenant in the pool takes them: what they cover is kept to
        // three round trips. The candidates and the hint (unlocked reads) go
        // with the lock, in one round trip (pipelined, in this order).
        let (found, rows) = {
            let c = &*conn;
            futures::try_join!(
                candidates(c, new.pool_id, new.flavor, &request, now),
                lock_quota_rows(c, new.tenant_id, new.pool_id, &charges),
            )?
        };
        let charged = quotas_core::charge(&rows, &charges).map_err(|q| {
            StorageError::new(
                ErrorKind::QuotaExceeded,
                format!("quota {} of pool {} exceeded", q.resource, new.pool_id),
            )
            .with(Detail::PoolId(new.pool_id.to_owned()))
            .with(Detail::Limit {
                what: Limited::Quota(q.resource.clone()),
                max: q.max,
                used: q.used,
                requested: q.requested,
            })
        })?;
        let mut events = Vec::new();
        let (target, placed_zone) =
            decide(conn, new.pool_id, found, &request, now, &mut events).await?;
        let name = vm_name(&id);
        let zone = match (&pool.vm, placed_zone) {
            (None, _) => None,
            // A VM runs in its reservation's zone, as locked by the placement.
            (Some(_), Some(zone)) => Some(zone),
            (Some(vm), None) => Some(start::vm_zone(conn, &target, vm).await?),
        };
        let reservation = target.reservation();
        let row = NewInstanceRow {
            instance_id: &id,
            tenant_id: new.tenant_id,
            project_id: new.project_id,
            pool_id: new.pool_id,
            flavor: new.flavor,
            name: new.name.unwrap_or(&id),
            billing: InstanceBilling::from_core(new.billing),
            created_at: now,
            vm: zone.as_deref().map(|zone| NewVm {
                name: &name,
                zone,
                reservation,
            }),
        };
        // Every write depends on nothing another answers: the quota's new
        // use, the row, its placement, its VM's step with the worker's
        // wake-up, the events and the answer's read, in one round trip
        // (pipelined: each statement runs once the one before it is done).
        let c = &*conn;
        let step = async {
            match &zone {
                Some(zone) => {
                    outbox::record_step(c, &id, grants_core::vm::StepKind::Create, zone, now).await
                }
                None => Ok(()),
            }
        };
        let ((), _, (), (), (), created) = futures::try_join!(
            write_quota_rows(c, new.tenant_id, new.pool_id, &rows, &charged),
            InstanceRow::insert(c, row),
            place_with(c, row.subject(), &target, row.state(), true, now),
            step,
            events::publish(c, now, events),
            InstanceRow::find(c, &id),
        )?;
        let created =
            created.ok_or_else(|| StorageError::internal("the instance just inserted is gone"))?;
        tracing::info!(
            instance = %id,
            tenant = %new.tenant_id,
            placement = ?target,
            "instance created"
        );
        Ok(Created::new(created))
    })
    .await
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

/// Releases the quota a locked instance holds.
async fn release_quota(conn: &mut AsyncPgConnection, inst: &InstanceRow) -> Result<()> {
    let pool = pool_of(conn, &inst.pool_id).await?;
    let charges = charges_for(&pool, &inst.flavor)?;
    let rows = lock_quota_rows(conn, &inst.tenant_id, &inst.pool_id, &charges).await?;
    let released = quotas_core::release(&rows, &charges);
    write_quota_rows(conn, &inst.tenant_id, &inst.pool_id, &rows, &released).await
}

/// Locks the quota rows a locked instance holds (first in the lock order,
/// before its reservation and its row).
pub(crate) async fn lock_quota_of(conn: &mut AsyncPgConnection, inst: &InstanceRow) -> Result<()> {
    let pool = pool_of(conn, &inst.pool_id).await?;
    lock_quota_rows(
        conn,
        &inst.tenant_id,
        &inst.pool_id,
        &charges_for(&pool, &inst.flavor)?,
    )
    .await?;
    Ok(())
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
        let seen = Observation {
            deleted_reason: Some(reason),
            ..Observation::default()
        };
        managed::apply(
            conn,
            inst,
            None,
            Change::of(Cause::DeleteRequested)
                .seen(seen)
                .quota_locked(true),
            now,
            events,
        )
        .await?
        .locked()?;
        return Ok(());
    }
    release_quota(conn, inst).await?;
    place_at(conn, inst, &Target::None, InstanceState::Deleted, now).await
}

async fn pool_of(conn: &mut AsyncPgConnection, pool_id: &str) -> Result<Pool> {
    pools::get_any(conn, pool_id).await
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
            let seen = Observation {
                deleted_reason: Some(DeletedReason::Requested),
                ..Observation::default()
            };
            managed::apply(
                conn,
                &inst,
                res.as_ref(),
                Change::of(Cause::DeleteRequested)
                    .seen(seen)
                    .quota_locked(true),
                now,
                &mut events,
            )
            .await?
            .locked()?;
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
