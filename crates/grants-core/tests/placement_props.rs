//! Property tests of slot allocation: a reservation is never over-filled,
//! physically or in a grant, and nobody but the grantee takes a granted slot.

#![expect(
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "tests index answers and expect them; a panic fails the test"
)]

use grants_core::{
    Billing, LiveGrant, Placement, PlacementRequest, Refusal, ReservationView, Seat, place,
    place_on,
};
use proptest::prelude::*;

const TENANTS: [&str; 3] = ["acme", "globex", "initech"];
const PROJECTS: [Option<&str>; 3] = [None, Some("prj_a"), Some("prj_b")];

#[derive(Debug, Clone)]
enum Op {
    Place {
        tenant: usize,
        project: usize,
        billing: Billing,
    },
    Stop(usize),
    Start(usize),
    Delete(usize),
    ProviderInUse(u64),
}

#[derive(Debug, Clone)]
struct Instance {
    tenant: usize,
    project: usize,
    billing: Billing,
    seat: Option<Seat>,
    running: bool,
}

/// One reservation with fixed live grants and the instances placed on it.
#[derive(Debug, Clone)]
struct Reservation {
    total: u64,
    provider_in_use: u64,
    grants: Vec<LiveGrant>,
    instances: Vec<Instance>,
}

impl Reservation {
    fn view(&self) -> ReservationView {
        let holds = |id: &str| {
            self.instances
                .iter()
                .filter(|i| i.seat == Some(Seat::Grant(id.into())))
                .count()
        };
        let live_grants = self
            .grants
            .iter()
            .map(|g| LiveGrant {
                held: u32::try_from(holds(&g.grant_id)).expect("small"),
                ..g.clone()
            })
            .collect();
        let running = |ordinary_only: bool| {
            self.instances
                .iter()
                .filter(|i| i.running && i.seat.is_some())
                .filter(|i| !ordinary_only || i.seat == Some(Seat::Ordinary))
                .count() as u64
        };
        ReservationView {
            reservation_id: "r".into(),
            total: self.total,
            provider_in_use: self.provider_in_use,
            live_grants,
            running_outside_grants: running(true),
            running: running(false),
        }
    }

    fn request(&self, tenant: usize, project: usize, billing: Billing) -> PlacementRequest {
        PlacementRequest::new(TENANTS[tenant], PROJECTS[project].map(Into::into), billing)
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (
            0..TENANTS.len(),
            0..PROJECTS.len(),
            prop_oneof![4 => Just(Billing::Standard), 1 => Just(Billing::None)],
        )
            .prop_map(|(tenant, project, billing)| Op::Place { tenant, project, billing }),
        1 => any::<usize>().prop_map(Op::Stop),
        1 => any::<usize>().prop_map(Op::Start),
        1 => any::<usize>().prop_map(Op::Delete),
        1 => (0u64..8).prop_map(Op::ProviderInUse),
    ]
}

prop_compose! {
    fn reservation()(total in 0u64..8, grants in prop::collection::vec(
        (0..TENANTS.len(), 0..PROJECTS.len(), 1u32..3, -5i64..5), 0..4))
        -> Reservation {
        let grants = grants
            .into_iter()
            .enumerate()
            .map(|(i, (tenant, project, slots, starts_at))| LiveGrant {
                grant_id: format!("rgrant_{i}"),
                tenant_id: TENANTS[tenant].into(),
                project_id: PROJECTS[project].map(Into::into),
                slots,
                starts_at,
                held: 0,
                lends: false,
                lent: 0,
            })
            .collect();
        Reservation { total, provider_in_use: 0, grants, instances: Vec::new() }
    }
}

/// Checks one decision against the rules and the state it was made on.
fn check_decision(
    view: &ReservationView,
    request: &PlacementRequest,
    decision: &Result<Seat, Refusal>,
) -> Result<(), TestCaseError> {
    let serving_free = view.live_grants.iter().any(|g| {
        g.tenant_id == request.tenant_id
            && request.billing == Billing::Standard
            && (g.project_id.is_none() || g.project_id == request.project_id)
            && g.held < g.slots
    });
    match decision {
        Ok(Seat::Grant(id)) => {
            let grant = view
                .live_grants
                .iter()
                .find(|g| g.grant_id == *id)
                .expect("a live grant");
            prop_assert_eq!(
                &grant.tenant_id,
                &request.tenant_id,
                "another tenant's grant"
            );
            prop_assert_eq!(request.billing, Billing::Standard);
            prop_assert!(grant.project_id.is_none() || grant.project_id == request.project_id);
            prop_assert!(
                grant.held < grant.slots || request.held_grant.as_deref() == Some(id.as_str())
            );
            prop_assert!(!view.is_physically_full());
        }
        Ok(Seat::Lent(_)) => prop_assert!(false, "place_on never lends a slot"),
        Ok(Seat::Ordinary) => {
            prop_assert!(view.ordinary_free() > 0, "took a granted slot");
            prop_assert!(!serving_free, "skipped its own grant");
            prop_assert!(!view.is_physically_full());
        }
        Err(Refusal::PhysicallyFull) => prop_assert!(view.is_physically_full()),
        Err(Refusal::NoFreeSlot) => {
            prop_assert!(!serving_free && view.ordinary_free() == 0);
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn placement_never_over_fills_a_reservation_or_a_grant(
        mut reservation in reservation(),
        ops in prop::collection::vec(op(), 0..40),
    ) {
        let granted: u64 = reservation.grants.iter().map(|g| u64::from(g.slots)).sum();
        for op in ops {
            let n = reservation.instances.len();
            match op {
                Op::Place { tenant, project, billing } => {
                    let view = reservation.view();
                    let request = reservation.request(tenant, project, billing);
                    let decision = place_on(&view, &request);
                    check_decision(&view, &request, &decision)?;
                    if let Ok(seat) = decision {
                        reservation.instances.push(Instance {
                            tenant,
                            project,
                            billing,
                            seat: Some(seat),
                            running: true,
                        });
                    }
                }
                Op::Stop(i) if n > 0 => {
                    let instance = &mut reservation.instances[i % n];
                    instance.running = false;
                    if instance.seat == Some(Seat::Ordinary) {
                        instance.seat = None; // a grant slot is kept
                    }
                }
                Op::Start(i) if n > 0 => {
                    let instance = reservation.instances[i % n].clone();
                    if !instance.running {
                        let view = reservation.view();
                        let (tenant, project) = (instance.tenant, instance.project);
                        let mut request = reservation.request(tenant, project, instance.billing);
                        request.held_grant = match &instance.seat {
                            Some(Seat::Grant(id)) => Some(id.clone()),
                            _ => None,
                        };
                        let decision = place_on(&view, &request);
                        check_decision(&view, &request, &decision)?;
                        let instance = &mut reservation.instances[i % n];
                        // Refused: it stays stopped (in its grant slot, if any).
                        if let Ok(seat) = decision {
                            instance.seat = Some(seat);
                            instance.running = true;
                        }
                    }
                }
                Op::Delete(i) if n > 0 => {
                    reservation.instances.remove(i % n);
                }
                Op::ProviderInUse(count) => reservation.provider_in_use = count,
                _ => {}
            }

            let view = reservation.view();
            prop_assert!(view.running <= view.total, "physically over-filled");
            for grant in &view.live_grants {
                prop_assert!(grant.held <= grant.slots, "grant {} over-filled", grant.grant_id);
            }
            if granted <= reservation.total {
                prop_assert!(
                    granted + view.running_outside_grants <= view.total,
                    "an ordinary instance sits on a granted slot"
                );
            }
        }
    }

    #[test]
    fn place_fills_grants_across_candidates_before_any_ordinary_slot(
        reservations in prop::collection::vec(reservation(), 0..4),
        running in prop::collection::vec(0u64..6, 4),
        tenant in 0..TENANTS.len(),
        project in 0..PROJECTS.len(),
    ) {
        let views: Vec<ReservationView> = reservations
            .iter()
            .enumerate()
            .map(|(i, r)| ReservationView {
                reservation_id: format!("r{}", (7 * i) % 4),
                running: running[i],
                running_outside_grants: running[i] / 2,
                ..r.view()
            })
            .collect();
        let request = PlacementRequest::new(
            TENANTS[tenant],
            PROJECTS[project].map(Into::into),
            Billing::Standard,
        );
        let mut ordered = views.clone();
        ordered.sort_by(|a, b| a.reservation_id.cmp(&b.reservation_id));
        let first_accepting = ordered.iter().find(|v| place_on(v, &request).is_ok());
        // The first candidate, in id order, whose own decision is a grant.
        let first_grant = ordered
            .iter()
            .find(|v| matches!(place_on(v, &request), Ok(Seat::Grant(_))));
        match place(&views, &request) {
            Ok(Placement::OnDemand) => prop_assert!(views.is_empty()),
            Ok(Placement::Reserved { reservation_id, seat }) => {
                let chosen = first_grant.or(first_accepting).expect("a candidate accepted");
                prop_assert_eq!(&reservation_id, &chosen.reservation_id);
                prop_assert_eq!(Ok(seat.clone()), place_on(chosen, &request));
                // Never an ordinary slot while any candidate's grant of the
                // tenant would take the instance.
                if seat == Seat::Ordinary {
                    prop_assert!(first_grant.is_none());
                }
            }
            Err(refusal) => {
                prop_assert!(first_accepting.is_none());
                let first = &ordered[0];
                prop_assert_eq!(&refusal.reservation_id, &first.reservation_id);
                prop_assert_eq!(refusal.total, first.total);
                prop_assert_eq!(refusal.in_use, first.physical_in_use());
                prop_assert_eq!(refusal.available, 0);
            }
        }
    }
}
