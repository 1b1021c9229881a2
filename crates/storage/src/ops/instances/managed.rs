//! A change to a managed instance (contract 3.12): the lifecycle of
//! [`grants_core::vm`] applied to a locked instance row, its placement
//! segments and quota, the step it starts (in the outbox,
//! [`crate::ops::vms::outbox`]) and the event it publishes, in the caller's
//! transaction. No provider is called here.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use grants_core::vm::{Cause, Refused, Release, StepFailure, Transition, VmStatus};

use super::placement::{Target, place_with};
use crate::error::{Detail, Result, StorageError};
use crate::model::event_data::{EventData, EventPlacement, EventVm, InstanceChange};
use crate::model::events::NewEvent;
use crate::model::instance::InstanceRow;
use crate::model::reservation::ReservationRow;
use crate::model::states::{DeletedReason, InstanceState};
use crate::ops::settlement;
use crate::ops::vms::outbox::record_step;
use crate::schema::instances;

/// A managed instance's VM name: `bc-` and its id's suffix.
pub fn vm_name(instance_id: &str) -> String {
    let suffix = instance_id.rsplit_once('_').map_or(instance_id, |(_, s)| s);
    format!("bc-{suffix}")
}

/// `INVALID_STATE` naming the state a request cannot be taken in.
pub fn refused(state: InstanceState) -> StorageError {
    StorageError::invalid_state(format!("the instance is {state}"))
        .with(Detail::InstanceState(state))
}

/// An instance event's data.
pub fn change(inst: &InstanceRow, placement: &Target) -> InstanceChange {
    let (grant_id, _, reservation_id) = placement.columns();
    InstanceChange {
        instance_id: inst.instance_id.clone(),
        pool_id: inst.pool_id.clone(),
        project_id: inst.project_id.clone(),
        placement: EventPlacement {
            kind: placement.kind().as_str().to_owned(),
            grant_id: grant_id.map(str::to_owned),
            reservation_id: reservation_id.map(str::to_owned),
        },
        vm: EventVm {
            name: inst.vm_name.clone().unwrap_or_default(),
            zone: inst.vm_zone.clone().unwrap_or_default(),
        },
        reason: None,
        code: None,
        interrupt_at: None,
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
    /// Nothing applied: the change releases the instance's quota, and its
    /// quota rows, which come first in the lock order, are not locked.
    NeedsQuota,
}

impl Applied {
    /// The outcome of a caller that locked what the change may need: a
    /// [`Applied::NeedsQuota`] there is a bug.
    pub fn locked(self) -> Result<Applied> {
        match self {
            Applied::NeedsQuota => Err(StorageError::internal(
                "a change that releases the quota, with its rows unlocked",
            )),
            applied => Ok(applied),
        }
    }
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

/// One change to apply: its cause, what the provider showed, and the
/// placement a start request decided.
#[derive(Debug, Clone)]
pub struct Change {
    /// What happened.
    pub cause: Cause,
    /// What else it records.
    pub seen: Observation,
    /// The placement a start request decided.
    pub placed: Option<Target>,
    /// Whether the caller holds the instance's quota rows (a change that
    /// releases the quota needs them).
    pub quota_locked: bool,
}

impl Change {
    /// `cause`, with nothing seen and no placement decided.
    pub fn of(cause: Cause) -> Change {
        Change {
            cause,
            seen: Observation::default(),
            placed: None,
            quota_locked: false,
        }
    }

    /// With what the provider showed.
    pub fn seen(self, seen: Observation) -> Change {
        Change { seen, ..self }
    }

    /// Made by a caller that holds the instance's quota rows.
    pub fn quota_locked(self, quota_locked: bool) -> Change {
        Change {
            quota_locked,
            ..self
        }
    }
}

/// Applies `change` at `at` to the locked managed instance `inst` (its
/// reservation `res`, if any, locked and settled; its quota rows locked
/// when the cause may release them, and said so in the change, else
/// [`Applied::NeedsQuota`]): placement segments, quota, a refill of
/// a freed grant slot, the step it starts and its event (in `events`).
pub async fn apply(
    conn: &mut AsyncPgConnection,
    inst: &InstanceRow,
    res: Option<&ReservationRow>,
    change: Change,
    at: i64,
    events: &mut Vec<NewEvent>,
) -> Result<Applied> {
    let Change {
        cause,
        seen,
        placed,
        quota_locked,
    } = change;
    let t = match grants_core::vm::next(inst.state.to_vm(), inst.holds_slot, cause) {
        Ok(t) if t.state == inst.state.to_vm() && t.step.is_none() && seen.vm_status.is_none() => {
            return Ok(Applied::Unchanged);
        }
        Ok(t) => t,
        Err(Refused::InvalidState(_)) => return Err(refused(inst.state)),
        Err(Refused::NotApplicable) => return Ok(Applied::Unchanged),
    };
    if t.release == Release::All && !quota_locked {
        return Ok(Applied::NeedsQuota);
    }
    let state = InstanceState::from_vm(t.state);
    let before = Target::of(inst);
    let target = match t.release {
        Release::All => Target::None,
        Release::Seat if !matches!(before, Target::Grant { .. }) => Target::None,
        _ => placed.unwrap_or_else(|| before.clone()),
    };
    let changed = state != inst.state || t.holds_slot != inst.holds_slot || target != before;
    if changed {
        if t.release == Release::All {
            super::release_quota(conn, inst).await?;
        }
        place_with(conn, inst, &target, state, t.holds_slot, t.billed, at).await?;
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

/// Applies a delete request for `reason` at `at` to the locked managed
/// instance `inst`, whose quota rows the caller holds: `deleting`, with its
/// VM's delete step (its slot and quota go when the VM is confirmed gone).
/// A reclaim ([`Cause::Reclaimed`]) keeps a running VM billed until then.
pub async fn delete_requested(
    conn: &mut AsyncPgConnection,
    inst: &InstanceRow,
    res: Option<&ReservationRow>,
    reason: DeletedReason,
    at: i64,
    events: &mut Vec<NewEvent>,
) -> Result<()> {
    let seen = Observation {
        deleted_reason: Some(reason),
        ..Observation::default()
    };
    let cause = if reason == DeletedReason::Reclaimed {
        Cause::Reclaimed
    } else {
        Cause::DeleteRequested
    };
    let change = Change::of(cause).seen(seen).quota_locked(true);
    apply(conn, inst, res, change, at, events).await?.locked()?;
    Ok(())
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
        (S::Stopped, _) if !inst.holds_slot => return None,
        (S::Stopped, _) => EventData::InstanceStopped(InstanceChange {
            reason: Some(seen.stop_reason.unwrap_or("requested").to_owned()),
            ..change(inst, after)
        }),
        (S::Failed, _) => EventData::InstanceFailed(InstanceChange {
            code: seen.failure_code.as_ref().map(|f| f.code().to_owned()),
            ..change(inst, before)
        }),
        (S::Deleted, Cause::Lost) => EventData::InstanceLost(change(inst, before)),
        (S::Deleted, _) => EventData::InstanceDeleted(InstanceChange {
            reason: (inst.deleted_reason == Some(DeletedReason::Reclaimed))
                .then(|| DeletedReason::Reclaimed.as_str().to_owned()),
            ..change(inst, before)
        }),
        _ => return None,
    })
}
