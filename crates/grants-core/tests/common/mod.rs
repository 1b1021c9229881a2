//! What the property tests of settlement and of the views share: timeline
//! rows made of generated values, and the stops and starts that happen
//! between two settlements.

use grants_core::{Billing, GrantState, Power, Seat, SettlementGrant, SettlementInstance};

/// A scheduled grant of `tenant` (and `project`) of `slots` over
/// `[starts_at, starts_at + len)`, created `created_early` before its start.
pub fn scheduled_grant(
    grant_id: String,
    (tenant, project): (&str, Option<&str>),
    slots: u32,
    starts_at: i64,
    len: i64,
    created_early: i64,
) -> SettlementGrant {
    SettlementGrant {
        grant_id,
        tenant_id: tenant.into(),
        project_id: project.map(Into::into),
        slots,
        starts_at,
        ends_at: starts_at + len,
        created_at: starts_at - created_early,
        settled: GrantState::Scheduled,
    }
}

/// An instance of `tenant` (and `project`): running on an ordinary slot,
/// or stopped without a seat.
pub fn new_instance(
    instance_id: String,
    (tenant, project): (&str, Option<&str>),
    billing: Billing,
    running: bool,
    created_at: i64,
) -> SettlementInstance {
    SettlementInstance {
        instance_id,
        tenant_id: tenant.into(),
        project_id: project.map(Into::into),
        billing,
        power: if running {
            Power::Running
        } else {
            Power::Stopped
        },
        created_at,
        seat: running.then_some(Seat::Ordinary),
    }
}

/// Stops the running and starts the stopped `instances` whose toggle is
/// set: stopped, an instance on an ordinary slot gives it up; started, one
/// without a seat takes an ordinary slot; one in a grant keeps its seat.
pub fn toggle(instances: &mut [SettlementInstance], toggles: Vec<bool>) {
    for (instance, toggle) in instances.iter_mut().zip(toggles) {
        if !toggle {
            continue;
        }
        match (instance.power, &instance.seat) {
            (Power::Running, Some(Seat::Ordinary)) => {
                instance.power = Power::Stopped;
                instance.seat = None;
            }
            (Power::Running, _) => instance.power = Power::Stopped,
            (Power::Stopped, None) => {
                instance.power = Power::Running;
                instance.seat = Some(Seat::Ordinary);
            }
            (Power::Stopped, Some(_)) => instance.power = Power::Running,
        }
    }
}
