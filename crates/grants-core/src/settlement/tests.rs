use super::*;

fn grant(id: &str, tenant: &str, slots: u32, starts_at: i64, ends_at: i64) -> SettlementGrant {
    SettlementGrant {
        grant_id: id.into(),
        tenant_id: tenant.into(),
        project_id: None,
        slots,
        starts_at,
        ends_at,
        created_at: 0,
        settled: GrantState::Scheduled,
    }
}

fn in_project(mut grant: SettlementGrant, project: &str) -> SettlementGrant {
    grant.project_id = Some(project.into());
    grant
}

fn active(mut grant: SettlementGrant) -> SettlementGrant {
    grant.settled = GrantState::Active;
    grant
}

fn instance(id: &str, tenant: &str, created_at: i64, seat: Option<Seat>) -> SettlementInstance {
    SettlementInstance {
        instance_id: id.into(),
        tenant_id: tenant.into(),
        project_id: None,
        billing: Billing::Standard,
        power: Power::Running,
        created_at,
        seat,
    }
}

fn ordinary(id: &str, tenant: &str, created_at: i64) -> SettlementInstance {
    instance(id, tenant, created_at, Some(Seat::Ordinary))
}

fn held(id: &str, tenant: &str, created_at: i64, grant_id: &str) -> SettlementInstance {
    instance(id, tenant, created_at, Some(Seat::Grant(grant_id.into())))
}

fn stopped(mut instance: SettlementInstance) -> SettlementInstance {
    instance.power = Power::Stopped;
    instance
}

fn activate(grant_id: &str, at: i64, take_in: &[&str]) -> Transition {
    Transition::Activate {
        grant_id: grant_id.into(),
        at,
        take_in: take_in.iter().map(ToString::to_string).collect(),
    }
}

fn mv(instance_id: &str, to: Destination) -> Move {
    Move {
        instance_id: instance_id.into(),
        to,
    }
}

fn to_grant(grant_id: &str) -> Destination {
    Destination::Grant(grant_id.into())
}

fn end(grant_id: &str, at: i64, reason: EndReason, moves: Vec<Move>) -> Transition {
    Transition::End {
        grant_id: grant_id.into(),
        at,
        reason,
        moves,
    }
}

/// Applies `transitions` to copies of the snapshot.
fn applied(
    grants: &[SettlementGrant],
    instances: &[SettlementInstance],
    transitions: &[Transition],
) -> (Vec<SettlementGrant>, Vec<SettlementInstance>) {
    let (mut grants, mut instances) = (grants.to_vec(), instances.to_vec());
    for transition in transitions {
        apply(&mut grants, &mut instances, transition);
    }
    (grants, instances)
}

#[test]
fn state_is_the_truth_at_now() {
    assert_eq!(grant_state(10, 20, false, i64::MIN), GrantState::Scheduled);
    assert_eq!(grant_state(10, 20, false, 19), GrantState::Active);
    assert_eq!(grant_state(10, 20, false, 21), GrantState::Ended);
    assert_eq!(grant_state(10, 20, true, 21), GrantState::Cancelled);
    let g = grant("g", "acme", 1, 10, 20);
    assert_eq!(g.state_at(15), GrantState::Active, "whatever was settled");
}

#[test]
fn nothing_is_due_before_the_start() {
    let grants = [grant("g", "acme", 1, 10, 20)];
    let instances = [ordinary("i", "acme", 0)];
    assert!(settle(&grants, &instances, 9).is_empty());
}

#[test]
fn take_in_is_oldest_first_up_to_the_free_slots() {
    let grants = [grant("g", "acme", 2, 10, 20)];
    let instances = [
        ordinary("i3", "acme", 3),
        ordinary("i1b", "acme", 1),
        ordinary("i1a", "acme", 1),
        ordinary("other", "globex", 0),
    ];
    assert_eq!(
        settle(&grants, &instances, 10),
        [activate("g", 10, &["i1a", "i1b"])]
    );
}

#[test]
fn take_in_skips_unbilled_stopped_and_unserved_instances() {
    let grants = [in_project(grant("g", "acme", 5, 10, 20), "prj_a")];
    let mut unbilled = ordinary("unbilled", "acme", 0);
    unbilled.project_id = Some("prj_a".into());
    unbilled.billing = Billing::None;
    let mut other_project = ordinary("other-project", "acme", 0);
    other_project.project_id = Some("prj_b".into());
    let no_project = ordinary("no-project", "acme", 0);
    let mut idle = stopped(ordinary("idle", "acme", 0));
    idle.project_id = Some("prj_a".into());
    let mut served = ordinary("served", "acme", 5);
    served.project_id = Some("prj_a".into());
    let instances = [unbilled, other_project, no_project, idle, served];
    assert_eq!(
        settle(&grants, &instances, 15),
        [activate("g", 10, &["served"])]
    );
}

#[test]
fn a_grant_created_late_takes_in_from_its_creation() {
    let mut late = grant("g", "acme", 1, 10, 20);
    late.created_at = 12;
    let instances = [ordinary("i", "acme", 0)];
    assert!(settle(std::slice::from_ref(&late), &instances, 11).is_empty());
    assert_eq!(
        settle(std::slice::from_ref(&late), &instances, 12),
        [activate("g", 12, &["i"])]
    );
}

#[test]
fn the_term_over_hands_running_instances_back_to_ordinary_slots() {
    let grants = [active(grant("g", "acme", 2, 0, 20))];
    let instances = [
        stopped(held("idle", "acme", 0, "g")),
        held("busy", "acme", 5, "g"),
    ];
    assert_eq!(
        settle(&grants, &instances, 25),
        [end(
            "g",
            20,
            EndReason::TermOver,
            vec![
                mv("busy", Destination::Reservation),
                mv("idle", Destination::None),
            ]
        )]
    );
}

#[test]
fn a_renewal_takes_over_up_to_its_free_slots_running_first() {
    let grants = [
        active(grant("old", "acme", 3, 0, 20)),
        active(grant("renewal", "acme", 3, 10, 40)),
    ];
    let instances = [
        held("already", "acme", 0, "renewal"),
        stopped(held("idle", "acme", 1, "old")),
        held("young", "acme", 9, "old"),
        held("oldest", "acme", 2, "old"),
    ];
    assert_eq!(
        settle(&grants, &instances, 20),
        [end(
            "old",
            20,
            EndReason::TermOver,
            vec![
                mv("oldest", to_grant("renewal")),
                mv("young", to_grant("renewal")),
                mv("idle", Destination::None),
            ]
        )]
    );
}

#[test]
fn a_renewal_starting_at_the_old_end_takes_over_before_taking_in() {
    let grants = [
        active(grant("old", "acme", 1, 0, 20)),
        grant("renewal", "acme", 2, 20, 40),
    ];
    let instances = [
        held("kept", "acme", 5, "old"),
        ordinary("extra", "acme", 1),
        ordinary("late", "acme", 2),
    ];
    assert_eq!(
        settle(&grants, &instances, 20),
        [
            end(
                "old",
                20,
                EndReason::TermOver,
                vec![mv("kept", to_grant("renewal"))]
            ),
            activate("renewal", 20, &["extra"]),
        ]
    );
}

#[test]
fn a_renewal_serves_only_its_project() {
    let grants = [
        active(grant("old", "acme", 2, 0, 20)),
        active(in_project(grant("renewal", "acme", 2, 0, 40), "prj_a")),
    ];
    let mut in_a = held("in-a", "acme", 1, "old");
    in_a.project_id = Some("prj_a".into());
    let mut in_b = held("in-b", "acme", 0, "old");
    in_b.project_id = Some("prj_b".into());
    assert_eq!(
        settle(&grants, &[in_a, in_b], 20),
        [end(
            "old",
            20,
            EndReason::TermOver,
            vec![
                mv("in-b", Destination::Reservation),
                mv("in-a", to_grant("renewal")),
            ]
        )]
    );
}

#[test]
fn another_tenants_grant_is_no_renewal() {
    let grants = [
        active(grant("old", "acme", 1, 0, 20)),
        active(grant("theirs", "globex", 5, 0, 40)),
    ];
    let instances = [held("i", "acme", 0, "old")];
    assert_eq!(
        settle(&grants, &instances, 20),
        [end(
            "old",
            20,
            EndReason::TermOver,
            vec![mv("i", Destination::Reservation)]
        )]
    );
}

#[test]
fn a_whole_term_in_the_past_settles_in_order() {
    let grants = [grant("g", "acme", 1, 10, 20)];
    let instances = [ordinary("i", "acme", 0)];
    assert_eq!(
        settle(&grants, &instances, 100),
        [
            activate("g", 10, &["i"]),
            end(
                "g",
                20,
                EndReason::TermOver,
                vec![mv("i", Destination::Reservation)]
            ),
        ]
    );
}

#[test]
fn a_grant_created_after_its_term_takes_nothing_in() {
    let mut over = grant("g", "acme", 1, 10, 20);
    over.created_at = 25;
    let instances = [ordinary("i", "acme", 0)];
    assert_eq!(
        settle(&[over], &instances, 30),
        [
            activate("g", 20, &[]),
            end("g", 20, EndReason::TermOver, vec![]),
        ]
    );
}

#[test]
fn cancelled_and_ended_grants_are_left_alone() {
    let mut cancelled = grant("c", "acme", 1, 10, 20);
    cancelled.settled = GrantState::Cancelled;
    let mut ended = grant("e", "acme", 1, 0, 5);
    ended.settled = GrantState::Ended;
    let instances = [ordinary("i", "acme", 0)];
    assert!(settle(&[cancelled, ended], &instances, 100).is_empty());
}

#[test]
fn settling_twice_is_settling_once() {
    let grants = [grant("a", "acme", 1, 10, 20), grant("b", "acme", 2, 15, 30)];
    let instances = [ordinary("i1", "acme", 0), ordinary("i2", "acme", 1)];
    let due = settle(&grants, &instances, 25);
    let (grants, instances) = applied(&grants, &instances, &due);
    assert!(settle(&grants, &instances, 25).is_empty());
    assert_eq!(grants[0].settled, GrantState::Ended);
    assert_eq!(grants[1].settled, GrantState::Active);
    assert!(
        instances
            .iter()
            .all(|i| i.seat == Some(Seat::Grant("b".into())))
    );
}

#[test]
fn root_end_hands_over_and_moves_ends_at_earlier() {
    let grants = [
        active(grant("g", "acme", 2, 0, 100)),
        active(grant("other", "acme", 1, 0, 100)),
    ];
    let instances = [held("a", "acme", 0, "g"), held("b", "acme", 1, "g")];
    let cause = ForcedEnd::Root {
        grant_id: "g".into(),
    };
    let due = force_end(&grants, &instances, &cause, 40);
    assert_eq!(
        due,
        [end(
            "g",
            40,
            EndReason::Ended,
            vec![
                mv("a", to_grant("other")),
                mv("b", Destination::Reservation)
            ]
        )]
    );
    let (after, instances) = applied(&grants, &instances, &due);
    assert_eq!(after[0].ends_at, 40);
    assert_eq!(after[0].settled, GrantState::Ended);
    assert!(force_end(&after, &instances, &cause, 40).is_empty());
    assert!(force_end(&after, &instances, &cause, 60).is_empty());
}

#[test]
fn root_end_before_the_start_cancels_and_keeps_the_term() {
    let grants = [grant("g", "acme", 2, 50, 100)];
    let cause = ForcedEnd::Root {
        grant_id: "g".into(),
    };
    let due = force_end(&grants, &[], &cause, 40);
    assert_eq!(
        due,
        [Transition::Cancel {
            grant_id: "g".into(),
            at: 40,
            reason: EndReason::Ended
        }]
    );
    let (after, _) = applied(&grants, &[], &due);
    assert_eq!((after[0].starts_at, after[0].ends_at), (50, 100));
    assert_eq!(after[0].state_at(60), GrantState::Cancelled);
}

#[test]
fn root_end_of_an_ended_grant_changes_nothing_but_settles() {
    let grants = [active(grant("g", "acme", 1, 0, 30))];
    let instances = [held("i", "acme", 0, "g")];
    let cause = ForcedEnd::Root {
        grant_id: "g".into(),
    };
    assert_eq!(
        force_end(&grants, &instances, &cause, 40),
        [end(
            "g",
            30,
            EndReason::TermOver,
            vec![mv("i", Destination::Reservation)]
        )]
    );
}

#[test]
fn tenant_deletion_ends_and_cancels_all_its_grants_without_renewal() {
    let grants = [
        active(grant("a", "acme", 1, 0, 100)),
        active(grant("b", "acme", 1, 0, 100)),
        grant("later", "acme", 1, 60, 100),
        active(grant("theirs", "globex", 1, 0, 100)),
    ];
    let instances = [held("i", "acme", 0, "a")];
    let cause = ForcedEnd::TenantDeleted {
        tenant_id: "acme".into(),
    };
    assert_eq!(
        force_end(&grants, &instances, &cause, 50),
        [
            end(
                "a",
                50,
                EndReason::TenantDeleted,
                vec![mv("i", Destination::Reservation)]
            ),
            end("b", 50, EndReason::TenantDeleted, vec![]),
            Transition::Cancel {
                grant_id: "later".into(),
                at: 50,
                reason: EndReason::TenantDeleted
            },
        ]
    );
}

#[test]
fn a_lost_reservation_sends_everyone_on_demand() {
    let grants = [
        active(grant("g", "acme", 2, 0, 100)),
        grant("next", "acme", 1, 60, 100),
    ];
    let instances = [
        held("in-grant", "acme", 0, "g"),
        stopped(held("idle", "acme", 1, "g")),
        ordinary("ordinary", "globex", 2),
        instance("elsewhere", "acme", 3, None),
    ];
    let due = force_end(&grants, &instances, &ForcedEnd::ReservationGone, 50);
    assert_eq!(
        due,
        [
            end(
                "g",
                50,
                EndReason::ReservationGone,
                vec![
                    mv("in-grant", Destination::OnDemand),
                    mv("idle", Destination::None)
                ]
            ),
            Transition::Cancel {
                grant_id: "next".into(),
                at: 50,
                reason: EndReason::ReservationGone
            },
            Transition::ReservationLost {
                at: 50,
                moves: vec![mv("ordinary", Destination::OnDemand)]
            },
        ]
    );
    let (grants, instances) = applied(&grants, &instances, &due);
    assert!(instances.iter().all(|i| i.seat.is_none()));
    assert!(force_end(&grants, &instances, &ForcedEnd::ReservationGone, 50).is_empty());
}

#[test]
fn wire_names() {
    for state in GrantState::ALL {
        assert_eq!(GrantState::parse(state.as_str()), Some(state));
    }
    for reason in EndReason::ALL {
        assert_eq!(EndReason::parse(reason.as_str()), Some(reason));
    }
}
