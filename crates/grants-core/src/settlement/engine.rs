//! The settlement engine: replays the due transitions on a copy of the
//! snapshot, deciding each one on the state the previous ones left.

use std::cmp::Ordering;

use super::{
    Destination, EndReason, ForcedEnd, GrantState, Move, Power, SettlementGrant,
    SettlementInstance, Transition, apply,
};
use crate::placement::Seat;
use crate::rules;

/// A copy of the reservation's grants and instances, and the transitions
/// recorded on it so far.
pub(super) struct Engine {
    grants: Vec<SettlementGrant>,
    instances: Vec<SettlementInstance>,
    transitions: Vec<Transition>,
}

/// Which half of an instant a due step belongs to: every end at an instant
/// comes before every start at that instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Ends,
    Starts,
}

/// What is due for a grant. A grant activated in the `Ends` phase (its term is
/// over before it could take anything in) is activated before it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Activate,
    End,
}

#[derive(Debug, Clone, Copy)]
struct Due {
    at: i64,
    phase: Phase,
    grant: usize,
    step: Step,
}

impl Engine {
    pub(super) fn new(grants: &[SettlementGrant], instances: &[SettlementInstance]) -> Engine {
        Engine {
            grants: grants.to_vec(),
            instances: instances.to_vec(),
            transitions: Vec::new(),
        }
    }

    pub(super) fn into_transitions(self) -> Vec<Transition> {
        self.transitions
    }

    /// Records every transition due up to `now`, in order.
    pub(super) fn settle(&mut self, now: i64) {
        let mut due = self.due(now);
        due.sort_by(|a, b| self.order(a, b));
        for Due {
            at, grant, step, ..
        } in due
        {
            let transition = match step {
                Step::Activate => self.activation(grant, at),
                Step::End => self.end(grant, at, EndReason::TermOver, &Destination::Reservation),
            };
            self.record(transition);
        }
    }

    /// Records the forced end `cause` at `at`; the snapshot must be settled up
    /// to `at`.
    pub(super) fn force(&mut self, cause: &ForcedEnd, at: i64) {
        let mut covered: Vec<usize> = self
            .grants
            .iter()
            .enumerate()
            .filter(|(_, grant)| {
                cause.covers(grant)
                    && matches!(grant.settled, GrantState::Scheduled | GrantState::Active)
            })
            .map(|(i, _)| i)
            .collect();
        covered.sort_by_key(|&i| self.preference(i));

        // Every covered grant ends at `at` at once, so none of them is live at
        // `at` to take over another's instances.
        for &i in &covered {
            let Some(grant) = self.grants.get_mut(i) else {
                continue;
            };
            if grant.settled == GrantState::Active {
                grant.ends_at = grant.ends_at.min(at);
            }
        }

        let (reason, fallback) = (cause.reason(), cause.fallback());
        for i in covered {
            let grant = self.grant(i);
            let transition = match grant.settled {
                GrantState::Active => self.end(i, at, reason, &fallback),
                GrantState::Scheduled => Transition::Cancel {
                    grant_id: grant.grant_id.clone(),
                    at,
                    reason,
                },
                GrantState::Ended | GrantState::Cancelled => continue,
            };
            self.record(transition);
        }

        if *cause == ForcedEnd::ReservationGone {
            let moves = self.evict_ordinary();
            if !moves.is_empty() {
                self.record(Transition::ReservationLost { at, moves });
            }
        }
    }

    /// Records a [`Transition::Refill`] at `at` for every grant live at `at`
    /// (in placement order) with free slots and instances to take; the
    /// snapshot must be settled up to `at`.
    pub(super) fn refill(&mut self, at: i64) {
        let mut live: Vec<usize> = self
            .grants
            .iter()
            .enumerate()
            .filter(|(_, g)| {
                g.settled == GrantState::Active
                    && g.starts_at <= at
                    && g.created_at <= at
                    && at < g.ends_at
            })
            .map(|(i, _)| i)
            .collect();
        live.sort_by_key(|&i| self.preference(i));
        for grant in live {
            let g = self.grant(grant);
            let take_in = self.eligible(grant, at, self.free_slots(g));
            if !take_in.is_empty() {
                self.record(Transition::Refill {
                    grant_id: g.grant_id.clone(),
                    at,
                    take_in,
                });
            }
        }
    }

    /// The instances `grant` would take in at `at`, up to `room`: its
    /// tenant's running, billed instances on ordinary slots that it serves
    /// and that exist at `at`, oldest first. The one rule of take-in at a
    /// start and of a refill.
    fn eligible(&self, grant: usize, at: i64, room: usize) -> Vec<String> {
        let g = self.grant(grant);
        let mut eligible: Vec<&SettlementInstance> = self
            .instances
            .iter()
            .filter(|i| {
                i.seat == Some(Seat::Ordinary)
                    && i.power == Power::Running
                    && i.created_at <= at
                    && rules::serves(g.owner(), i.owner(), i.billing)
            })
            .collect();
        eligible.sort_by_key(|i| rules::oldest_first(i.created_at, &i.instance_id));
        eligible
            .into_iter()
            .take(room)
            .map(|i| i.instance_id.clone())
            .collect()
    }

    fn record(&mut self, transition: Transition) {
        apply(&mut self.grants, &mut self.instances, &transition);
        self.transitions.push(transition);
    }

    /// The steps due up to `now`, unordered.
    fn due(&self, now: i64) -> Vec<Due> {
        let mut due = Vec::new();
        for (grant, g) in self.grants.iter().enumerate() {
            if g.settled == GrantState::Scheduled {
                let at = take_in_instant(g);
                if at <= now {
                    let phase = if at < g.ends_at {
                        Phase::Starts
                    } else {
                        Phase::Ends
                    };
                    due.push(Due {
                        at,
                        phase,
                        grant,
                        step: Step::Activate,
                    });
                }
            }
            let open = matches!(g.settled, GrantState::Scheduled | GrantState::Active);
            if open && g.ends_at <= now {
                due.push(Due {
                    at: g.ends_at,
                    phase: Phase::Ends,
                    grant,
                    step: Step::End,
                });
            }
        }
        due
    }

    /// Time, then ends before starts, then placement order of the grants, then
    /// a grant's activation before its own end.
    fn order(&self, a: &Due, b: &Due) -> Ordering {
        (a.at, a.phase)
            .cmp(&(b.at, b.phase))
            .then_with(|| self.preference(a.grant).cmp(&self.preference(b.grant)))
            .then(a.step.cmp(&b.step))
    }

    /// The grant at index `grant`.
    #[expect(
        clippy::indexing_slicing,
        reason = "every index comes from enumerating `grants`, whose length never changes"
    )]
    fn grant(&self, grant: usize) -> &SettlementGrant {
        &self.grants[grant]
    }

    fn preference(&self, grant: usize) -> (bool, i64, &str) {
        let g = self.grant(grant);
        rules::grant_preference(g.project_id.as_deref(), g.starts_at, &g.grant_id)
    }

    /// The instances `grant` holds, running or stopped.
    fn held(&self, grant_id: &str) -> usize {
        self.instances
            .iter()
            .filter(|i| matches!(&i.seat, Some(Seat::Grant(id)) if id == grant_id))
            .count()
    }

    fn free_slots(&self, grant: &SettlementGrant) -> usize {
        slot_count(grant.slots).saturating_sub(self.held(&grant.grant_id))
    }

    /// `grant`'s activation at `at`: it takes in its tenant's running,
    /// billed instances on ordinary slots that it serves, oldest first, up to
    /// its free slots, unless its term is already over.
    fn activation(&self, grant: usize, at: i64) -> Transition {
        let g = self.grant(grant);
        let room = if at < g.ends_at {
            self.free_slots(g)
        } else {
            0
        };
        Transition::Activate {
            grant_id: g.grant_id.clone(),
            at,
            take_in: self.eligible(grant, at, room),
        }
    }

    /// `grant`'s end at `at`: its instances, running first then stopped, each
    /// oldest first, move into the first renewal that serves them and has a
    /// free slot; the others go to `fallback` if running, nowhere if stopped.
    fn end(&self, grant: usize, at: i64, reason: EndReason, fallback: &Destination) -> Transition {
        let g = self.grant(grant);
        let mut holders: Vec<&SettlementInstance> = self
            .instances
            .iter()
            .filter(|i| matches!(&i.seat, Some(Seat::Grant(id)) if *id == g.grant_id))
            .collect();
        holders.sort_by_key(|i| {
            (
                i.power != Power::Running,
                rules::oldest_first(i.created_at, &i.instance_id),
            )
        });

        let mut renewals: Vec<usize> = self
            .grants
            .iter()
            .enumerate()
            .filter(|&(r, candidate)| r != grant && is_renewal(g, candidate, at))
            .map(|(r, _)| r)
            .collect();
        renewals.sort_by_key(|&r| self.preference(r));
        let mut room: Vec<(&SettlementGrant, usize)> = renewals
            .into_iter()
            .map(|r| (self.grant(r), self.free_slots(self.grant(r))))
            .collect();

        let moves = holders
            .into_iter()
            .map(|instance| {
                let renewal = room.iter_mut().find(|(r, free)| {
                    *free > 0 && rules::serves(r.owner(), instance.owner(), instance.billing)
                });
                let to = match (renewal, instance.power) {
                    (Some((r, free)), _) => {
                        *free -= 1;
                        Destination::Grant(r.grant_id.clone())
                    }
                    (None, Power::Running) => fallback.clone(),
                    (None, Power::Stopped) => Destination::None,
                };
                Move {
                    instance_id: instance.instance_id.clone(),
                    to,
                }
            })
            .collect();

        Transition::End {
            grant_id: g.grant_id.clone(),
            at,
            reason,
            moves,
        }
    }

    /// The instances on ordinary slots, oldest first, leaving the reservation:
    /// running ones on-demand, stopped ones nowhere.
    fn evict_ordinary(&self) -> Vec<Move> {
        let mut ordinary: Vec<&SettlementInstance> = self
            .instances
            .iter()
            .filter(|i| i.seat == Some(Seat::Ordinary))
            .collect();
        ordinary.sort_by_key(|i| rules::oldest_first(i.created_at, &i.instance_id));
        ordinary
            .into_iter()
            .map(|i| Move {
                instance_id: i.instance_id.clone(),
                to: match i.power {
                    Power::Running => Destination::OnDemand,
                    Power::Stopped => Destination::None,
                },
            })
            .collect()
    }
}

/// Whether `candidate` can take over instances of `ending` at `at`: a grant of
/// the same tenant, not cancelled nor ended, existing and live at `at`.
fn is_renewal(ending: &SettlementGrant, candidate: &SettlementGrant, at: i64) -> bool {
    candidate.tenant_id == ending.tenant_id
        && matches!(
            candidate.settled,
            GrantState::Scheduled | GrantState::Active
        )
        && candidate.created_at <= at
        && candidate.starts_at <= at
        && at < candidate.ends_at
}

/// The instant from which `grant` takes in instances: its `startsAt`, or its
/// `createdAt` if it was created later, but never after its `endsAt`.
pub(super) fn take_in_instant(grant: &SettlementGrant) -> i64 {
    grant.starts_at.max(grant.created_at).min(grant.ends_at)
}

fn slot_count(slots: u32) -> usize {
    usize::try_from(slots).unwrap_or(usize::MAX)
}
