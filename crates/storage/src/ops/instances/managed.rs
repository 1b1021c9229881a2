//! The records of managed instances (contract 3.12): the lifecycle of
//! [`grants_core::vm`] applied to a locked instance row, its placement
//! segments and quota, the step it starts (an outbox row, with a `NOTIFY`
//! to wake the worker) and the event it publishes, in the caller's
//! transaction. No provider is called here.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use grants_core::vm::{Cause, Refused, Release, StepFailure, StepKind, Transition, VmStatus};

use crate::error::{Detail, Result, StorageError};
use crate::model::event_data::{EventData, EventPlacement, EventVm, InstanceChange};
use crate::model::events::NewEvent;
use crate::model::instance::InstanceRow;
use crate::model::reservation::ReservationRow;
use crate::model::states::{DeletedReason, InstanceState};
use crate::ops::settlement;
use crate::schema::{instances, vm_steps};

use super::placement::{Target, place_with, view};
use super::{capacity_error, find, lock_instance};
use crate::locks;
use crate::model::pool_vm::PoolVm;
use crate::model::states::ReservationStatus;
use crate::schema::provider_accounts;
use diesel_async::AsyncConnection;
use grants_core::PlacementRequest;

/// The channel the api-server notifies when it records a step.
pub const STEPS_CHANNEL: &str = "bc_vm_steps";

/// How long a step may take before it gives up, unless the worker's
/// `BC_VM_STEP_TIMEOUT` says otherwise (10 minutes, contract 3.12).
pub const DEFAULT_STEP_TIMEOUT_MS: i64 = 10 * 60 * 1000;

pub(crate) use crate::clock::DB_NOW_MS;
pub use crate::clock::db_now_ms;

/// A managed instance's VM name: `bc-` and its id's suffix.
pub fn vm_name(instance_id: &str) -> String {
    let suffix = instance_id.rsplit_once('_').map_or(instance_id, |(_, s)| s);
    format!("bc-{suffix}")
}

impl Target {
    /// Where a row says its instance is.
    pub fn of(inst: &InstanceRow) -> Target {
        match (
            inst.placement_kind.as_str(),
            &inst.grant_id,
            &inst.account_id,
            &inst.reservation_id,
        ) {
            ("grant", Some(g), Some(a), Some(r)) => Target::Grant {
                grant_id: g.clone(),
                account_id: a.clone(),
                reservation_id: r.clone(),
            },
            ("reservation", _, Some(a), Some(r)) => Target::Reservation {
                account_id: a.clone(),
                reservation_id: r.clone(),
            },
            ("ondemand", ..) => Target::OnDemand,
            _ => Target::None,
        }
    }
}

/// `INVALID_STATE` naming the state a request cannot be taken in.
pub fn refused(state: InstanceState) -> StorageError {
    StorageError::invalid_state(format!("the instance is {state}"))
        .with(Detail::InstanceState(state))
}

/// Records a step of instance `instance_id` in the outbox, to be sent to `zone`, and wakes
/// the worker when the transaction commits.
pub async fn record_step(
    conn: &AsyncPgConnection,
    instance_id: &str,
    kind: StepKind,
    zone: &str,
    now: i64,
) -> Result<()> {
    let request_id = uuid::Uuid::now_v7().to_string();
    // The step and its notification, pipelined: one round trip.
    let (mut step, mut notify) = (conn, conn);
    // Fixed texts: kept prepared (`db::cached`).
    futures::try_join!(
        crate::db::cached(
            diesel::sql_query(format!(
                "INSERT INTO vm_steps (instance_id, kind, request_id, zone, requested_at, \
                 created_wall, deadline_wall, due_wall) \
                 VALUES ($1, $2, $3, $4, $5, {DB_NOW_MS}, {DB_NOW_MS} + $6, {DB_NOW_MS})"
            ))
            .bind::<Text, _>(instance_id)
            .bind::<Text, _>(kind.as_str())
            .bind::<Text, _>(&request_id)
            .bind::<Text, _>(zone)
            .bind::<BigInt, _>(now)
            .bind::<BigInt, _>(DEFAULT_STEP_TIMEOUT_MS)
        )
        .execute(&mut step),
        crate::db::cached(
            diesel::sql_query("SELECT pg_notify($1, $2)")
                .bind::<Text, _>(STEPS_CHANNEL)
                .bind::<Text, _>(instance_id)
        )
        .execute(&mut notify),
    )?;
    tracing::info!(
        instance = %instance_id,
        step = kind.as_str(),
        request_id = %request_id,
        "vm step recorded"
    );
    Ok(())
}

/// Whether `inst` has a step not finished yet.
pub async fn has_open_step(conn: &mut AsyncPgConnection, instance_id: &str) -> Result<bool> {
    let n: i64 = vm_steps::table
        .filter(vm_steps::instance_id.eq(instance_id))
        .filter(vm_steps::state.eq("open"))
        .count()
        .get_result(conn)
        .await?;
    Ok(n > 0)
}

/// An instance event's data.
pub fn change(inst: &InstanceRow, placement: &Target) -> InstanceChange {
    let (kind, grant_id, reservation_id) = match placement {
        Target::Grant {
            grant_id,
            reservation_id,
            ..
        } => (
            "grant",
            Some(grant_id.clone()),
            Some(reservation_id.clone()),
        ),
        Target::Reservation { reservation_id, .. } => {
            ("reservation", None, Some(reservation_id.clone()))
        }
        Target::OnDemand => ("ondemand", None, None),
        Target::None => ("none", None, None),
    };
    InstanceChange {
        instance_id: inst.instance_id.clone(),
        pool_id: inst.pool_id.clone(),
        project_id: inst.project_id.clone(),
        placement: EventPlacement {
            kind: kind.to_owned(),
            grant_id,
            reservation_id,
        },
        vm: EventVm {
            name: inst.vm_name.clone().unwrap_or_default(),
            zone: inst.vm_zone.clone().unwrap_or_default(),
        },
        reason: None,
        code: None,
    }
}

/// The outcome of applying a cause to a managed instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The record changed.
    Changed(Transition),
    /// Nothing to change (a repeated request, or an outcome that no longer
    /// matters).
    Unchanged,
}

/// What else an applied change records.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    /// The VM status the provider reported.
    pub vm_status: Option<VmStatus>,
    /// Why a create failed, or the VM found gone.
    pub failure_code: Option<StepFailure>,
    /// Why it is deleted, when the change deletes it.
    pub deleted_reason: Option<DeletedReason>,
    /// Why it stopped, for the event (`requested`, `provider`).
    pub stop_reason: Option<&'static str>,
    /// The database's real time of a change a step made.
    pub changed_wall: Option<i64>,
}

/// Applies `cause` at `at` to the locked managed instance `inst` (its
/// reservation `res`, if any, locked and settled; its quota rows locked
/// when the cause may release them): placement segments, quota, a refill of
/// a freed grant slot, the step it starts and its event (in `events`).
/// `placed`: the placement a start request decided.
#[expect(clippy::too_many_arguments, reason = "one change's parts")]
pub async fn apply(
    conn: &mut AsyncPgConnection,
    inst: &InstanceRow,
    res: Option<&ReservationRow>,
    cause: Cause,
    placed: Option<Target>,
    seen: Observation,
    at: i64,
    events: &mut Vec<NewEvent>,
) -> Result<Applied> {
    let t = match grants_core::vm::next(inst.state.to_vm(), inst.powered, cause) {
        Ok(t) if t.state == inst.state.to_vm() && t.step.is_none() && seen.vm_status.is_none() => {
            return Ok(Applied::Unchanged);
        }
        Ok(t) => t,
        Err(Refused::InvalidState(_)) => return Err(refused(inst.state)),
        Err(Refused::NotApplicable) => return Ok(Applied::Unchanged),
    };
    let state = InstanceState::from_vm(t.state);
    let before = Target::of(inst);
    let target = match t.release {
        Release::All => Target::None,
        Release::Seat if !matches!(before, Target::Grant { .. }) => Target::None,
        _ => placed.unwrap_or_else(|| before.clone()),
    };
    let changed = state != inst.state || t.slot_running != inst.powered || target != before;
    if changed {
        if t.release == Release::All {
            super::release_quota(conn, inst).await?;
        }
        place_with(conn, inst, &target, state, t.slot_running, at).await?;
    }
    let deleted_reason = seen.deleted_reason.or(inst.deleted_reason);
    crate::db::cached(
        diesel::update(instances::table.find(&inst.instance_id)).set((
            instances::vm_status.eq(seen
                .vm_status
                .as_ref()
                .map(VmStatus::as_str)
                .or(inst.vm_status.as_deref())),
            instances::vm_observed_at.eq(if seen.vm_status.is_some() {
                Some(at)
            } else {
                inst.vm_observed_at
            }),
            instances::failure_code.eq(seen
                .failure_code
                .as_ref()
                .map(StepFailure::code)
                .or(inst.failure_code.as_deref())),
            instances::deleted_reason.eq(deleted_reason),
            instances::vm_changed_wall.eq(seen.changed_wall.or(inst.vm_changed_wall)),
        )),
    )
    .execute(conn)
    .await?;
    // A grant slot freed by a VM confirmed gone takes in the oldest of its
    // tenant's instances waiting on ordinary slots (contract 5.3).
    if t.release == Release::All
        && let (Some(res), Target::Grant { .. }) = (res, &before)
    {
        settlement::refill(conn, res, at, events).await?;
    }
    if let Some(kind) = t.step {
        let zone = inst.vm_zone.clone().unwrap_or_default();
        record_step(conn, &inst.instance_id, kind, &zone, at).await?;
    }
    if let Some(data) = event_of(inst, cause, &t, &before, &target, &seen) {
        events.push(NewEvent::new(&inst.tenant_id, data, at));
    }
    Ok(Applied::Changed(t))
}

/// The instance event a change publishes (contract 9, r3), if any.
fn event_of(
    inst: &InstanceRow,
    cause: Cause,
    t: &Transition,
    before: &Target,
    after: &Target,
    seen: &Observation,
) -> Option<EventData> {
    use grants_core::vm::VmState as S;
    let was = inst.state.to_vm();
    if t.state == was {
        return None;
    }
    Some(match (t.state, cause) {
        (S::Running, _) => EventData::InstanceRunning(change(inst, after)),
        // A VM found running while stopped and stopped again was already
        // stopped for its tenant.
        (S::Stopped, _) if !inst.powered => return None,
        (S::Stopped, _) => EventData::InstanceStopped(InstanceChange {
            reason: Some(seen.stop_reason.unwrap_or("requested").to_owned()),
            ..change(inst, after)
        }),
        (S::Failed, _) => EventData::InstanceFailed(InstanceChange {
            code: seen.failure_code.as_ref().map(|f| f.code().to_owned()),
            ..change(inst, before)
        }),
        (S::Deleted, Cause::Lost) => EventData::InstanceLost(change(inst, before)),
        (S::Deleted, _) => EventData::InstanceDeleted(change(inst, before)),
        _ => return None,
    })
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
    match target {
        Target::Grant {
            account_id,
            reservation_id,
            ..
        }
        | Target::Reservation {
            account_id,
            reservation_id,
        } => Ok(ReservationRow::find(conn, account_id, reservation_id)
            .await?
            .ok_or_else(|| StorageError::internal("placed on an unknown reservation"))?
            .zone),
        Target::OnDemand | Target::None => <[String]>::first(&vm.zones)
            .cloned()
            .ok_or_else(|| StorageError::internal("a managed pool without zones")),
    }
}

/// [`super::start`] of a managed instance: its VM never moves, so only the
/// reservation it was created on decides (a live grant of the tenant that
/// serves it, else an ordinary slot, else `CAPACITY_UNAVAILABLE`); an
/// on-demand VM, or one whose reservation is gone, starts on-demand.
pub(super) async fn start(
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
        let seen = Observation::default();
        apply(
            conn,
            &inst,
            res.as_ref(),
            Cause::StartRequested,
            placed,
            seen,
            now,
            &mut events,
        )
        .await?;
        crate::model::events::publish(conn, now, events).await?;
        find(conn, tenant, instance_id).await
    })
    .await
}
