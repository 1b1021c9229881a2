//! The settlement due at an instant, previewed without writing: what
//! [`settle`] would record, applied to a copy of the grants and instances
//! ([`preview_settlement`]) and to the reservation's placement segments
//! ([`project_stints`]).

use crate::capacity::Term;
use crate::settlement::{
    Destination, SettlementGrant, SettlementInstance, Transition, apply, settle,
};

/// A reservation's snapshot as settlement at an instant would leave it: the
/// transitions due, and the grants and instances once they are applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettlementPreview {
    /// The grants afterwards.
    pub grants: Vec<SettlementGrant>,
    /// The instances afterwards.
    pub instances: Vec<SettlementInstance>,
    /// What settlement would record, in order.
    pub transitions: Vec<Transition>,
}

/// What [`settle`] up to `now` would do to the snapshot, applied to a copy
/// of it: the read-only twin of storage's settlement.
pub fn preview_settlement(
    grants: &[SettlementGrant],
    instances: &[SettlementInstance],
    now: i64,
) -> SettlementPreview {
    let transitions = settle(grants, instances, now);
    let mut grants = grants.to_vec();
    let mut instances = instances.to_vec();
    for transition in &transitions {
        apply(&mut grants, &mut instances, transition);
    }
    SettlementPreview {
        grants,
        instances,
        transitions,
    }
}

/// One placement segment of an instance on the reservation: `[from, to)`
/// (open while `to` is `None`), in a grant or on an ordinary slot.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Stint {
    /// The instance.
    pub instance_id: String,
    /// First instant.
    pub from: i64,
    /// First instant after it; `None` while it lasts.
    pub to: Option<i64>,
    /// Whether the instance runs during it.
    pub running: bool,
    /// The grant holding the instance; `None` on an ordinary slot.
    pub grant_id: Option<String>,
}

impl Stint {
    /// Its stretch, an open one lasting until `until`.
    pub(crate) fn term(&self, until: i64) -> Term {
        Term::new(self.from, self.to.unwrap_or(until))
    }
}

/// The reservation's placement segments as they will be once `transitions`
/// (from [`preview_settlement`]) are written: each move closes the
/// instance's open segment at the transition's instant and opens the next
/// one there (none when the instance leaves the reservation), as storage
/// writes them. A move whose instance has no open segment changes nothing.
pub fn project_stints(stints: &[Stint], transitions: &[Transition]) -> Vec<Stint> {
    let mut out = stints.to_vec();
    for transition in transitions {
        let at = transition.at();
        let moves: Vec<(&str, Destination)> = match transition {
            Transition::Activate {
                grant_id, take_in, ..
            }
            | Transition::Refill {
                grant_id, take_in, ..
            } => take_in
                .iter()
                .map(|i| (i.as_str(), Destination::Grant(grant_id.clone())))
                .collect(),
            Transition::End { moves, .. } | Transition::ReservationLost { moves, .. } => moves
                .iter()
                .map(|m| (m.instance_id.as_str(), m.to.clone()))
                .collect(),
            Transition::Cancel { .. } => Vec::new(),
        };
        for (instance_id, to) in moves {
            move_stint(&mut out, instance_id, &to, at);
        }
    }
    out
}

fn move_stint(stints: &mut Vec<Stint>, instance_id: &str, to: &Destination, at: i64) {
    let Some((k, stint)) = stints
        .iter_mut()
        .enumerate()
        .find(|(_, s)| s.instance_id == instance_id && s.to.is_none())
    else {
        return;
    };
    // The grant of the next segment on the reservation; None: it leaves.
    let next = match to {
        Destination::Grant(g) => Some(Some(g.clone())),
        Destination::Reservation => Some(None),
        Destination::OnDemand | Destination::None => None,
    };
    if stint.from < at {
        stint.to = Some(at);
        if let Some(grant_id) = next {
            let running = stint.running;
            stints.push(Stint {
                instance_id: instance_id.to_owned(),
                from: at,
                to: None,
                running,
                grant_id,
            });
        }
    } else {
        // An empty segment is replaced, as storage drops it.
        match next {
            Some(grant_id) => stint.grant_id = grant_id,
            None => {
                stints.remove(k);
            }
        }
    }
}
