use super::*;

fn grant(id: &str, tenant: &str, project: Option<&str>, slots: u32, held: u32) -> LiveGrant {
    LiveGrant {
        grant_id: id.into(),
        tenant_id: tenant.into(),
        project_id: project.map(Into::into),
        slots,
        starts_at: 0,
        held,
        lends: false,
        lent: 0,
    }
}

fn view(id: &str, total: u64, grants: Vec<LiveGrant>) -> ReservationView {
    ReservationView {
        reservation_id: id.into(),
        total,
        provider_in_use: 0,
        live_grants: grants,
        running_outside_grants: 0,
        running: 0,
    }
}

fn request(tenant: &str, project: Option<&str>) -> PlacementRequest {
    PlacementRequest::new(tenant, project.map(Into::into), Billing::Standard)
}

#[test]
fn ordinary_free_subtracts_every_granted_slot_used_or_not() {
    let mut r = view("r", 10, vec![grant("g1", "acme", None, 4, 1)]);
    r.running_outside_grants = 3;
    r.running = 4;
    assert_eq!(r.ordinary_free(), 3);
    r.running_outside_grants = 9;
    assert_eq!(r.ordinary_free(), 0, "floored at 0");
}

#[test]
fn the_grantee_fills_its_grant_then_takes_ordinary_slots() {
    let mut r = view("r", 3, vec![grant("g1", "acme", None, 1, 0)]);
    assert_eq!(
        place_on(&r, &request("acme", None)),
        Ok(Seat::Grant("g1".into()))
    );
    r.live_grants[0].held = 1;
    r.running = 1;
    assert_eq!(place_on(&r, &request("acme", None)), Ok(Seat::Ordinary));
}

#[test]
fn others_never_take_an_idle_granted_slot() {
    let r = view("r", 2, vec![grant("g1", "acme", None, 2, 0)]);
    assert_eq!(
        place_on(&r, &request("globex", None)),
        Err(Refusal::NoFreeSlot)
    );
}

#[test]
fn a_stopped_instance_keeps_its_grant_slot() {
    // g1's only slot is held by a stopped instance: nothing runs, yet
    // neither the grantee's new instance nor anyone else gets it.
    let r = view("r", 1, vec![grant("g1", "acme", None, 1, 1)]);
    assert_eq!(r.physical_in_use(), 0);
    assert_eq!(
        place_on(&r, &request("acme", None)),
        Err(Refusal::NoFreeSlot)
    );
    assert_eq!(
        place_on(&r, &request("globex", None)),
        Err(Refusal::NoFreeSlot)
    );
    // The stopped instance itself starts again in its own slot.
    let mut again = request("acme", None);
    again.held_grant = Some("g1".into());
    assert_eq!(place_on(&r, &again), Ok(Seat::Grant("g1".into())));
}

#[test]
fn physically_full_refuses_the_grantee_too() {
    let mut r = view("r", 4, vec![grant("g1", "acme", None, 2, 0)]);
    r.provider_in_use = 4;
    assert_eq!(
        place_on(&r, &request("acme", None)),
        Err(Refusal::PhysicallyFull)
    );
    let mut again = request("acme", None);
    again.held_grant = Some("g1".into());
    assert_eq!(place_on(&r, &again), Err(Refusal::PhysicallyFull));
}

#[test]
fn project_scoped_grants_serve_only_their_project() {
    let r = view("r", 1, vec![grant("g1", "acme", Some("prj_a"), 1, 0)]);
    assert_eq!(
        place_on(&r, &request("acme", Some("prj_a"))),
        Ok(Seat::Grant("g1".into()))
    );
    assert_eq!(
        place_on(&r, &request("acme", Some("prj_b"))),
        Err(Refusal::NoFreeSlot)
    );
    assert_eq!(
        place_on(&r, &request("acme", None)),
        Err(Refusal::NoFreeSlot)
    );
}

#[test]
fn project_grants_first_then_earliest_then_lowest_id() {
    let mut wide = grant("g0", "acme", None, 1, 0);
    wide.starts_at = -100;
    let mut late = grant("g1", "acme", Some("prj_a"), 1, 0);
    late.starts_at = 50;
    let mut early_b = grant("g3", "acme", Some("prj_a"), 1, 0);
    early_b.starts_at = 10;
    let mut early_a = grant("g2", "acme", Some("prj_a"), 1, 0);
    early_a.starts_at = 10;
    let r = view("r", 10, vec![wide, late, early_b, early_a]);
    assert_eq!(
        place_on(&r, &request("acme", Some("prj_a"))),
        Ok(Seat::Grant("g2".into()))
    );
    assert_eq!(
        place_on(&r, &request("acme", Some("prj_b"))),
        Ok(Seat::Grant("g0".into()))
    );
}

#[test]
fn unbilled_instances_never_enter_a_grant() {
    let r = view("r", 3, vec![grant("g1", "acme", None, 2, 0)]);
    let none = PlacementRequest::new("acme", None, Billing::None);
    assert_eq!(place_on(&r, &none), Ok(Seat::Ordinary));
}

#[test]
fn candidates_are_tried_in_reservation_id_order() {
    let full = view("r-a", 1, vec![grant("g1", "globex", None, 1, 0)]);
    let open = view("r-b", 1, vec![]);
    let placed = place(&[open, full.clone()], &request("acme", None));
    assert_eq!(
        placed,
        Ok(Placement::Reserved {
            reservation_id: "r-b".into(),
            seat: Seat::Ordinary
        })
    );
    assert_eq!(
        place(&[full], &request("acme", None)),
        Err(CapacityUnavailable {
            reservation_id: "r-a".into(),
            total: 1,
            in_use: 0,
            available: 0
        })
    );
}

#[test]
fn the_refusal_reports_the_first_candidate() {
    let mut a = view("r-a", 2, vec![]);
    a.provider_in_use = 2;
    a.running = 1;
    a.running_outside_grants = 1;
    let mut b = view("r-b", 1, vec![]);
    b.running = 1;
    b.running_outside_grants = 1;
    assert_eq!(
        place(&[b, a], &request("acme", None)),
        Err(CapacityUnavailable {
            reservation_id: "r-a".into(),
            total: 2,
            in_use: 2,
            available: 0
        })
    );
}

#[test]
fn billing_uses_the_wire_names() {
    for billing in Billing::ALL {
        assert_eq!(Billing::parse(billing.as_str()), Some(billing));
    }
    assert_eq!(Billing::parse("None"), None);
}

#[test]
fn a_grantee_takes_its_lent_slots_back_on_a_reservation_its_borrowers_fill() {
    // Two slots, both granted to acme and lent: the provider is full of
    // borrowers' VMs, yet acme's instance enters its grant (the borrowers
    // go first, contract 4 r4); anyone else is refused.
    let mut g = grant("g1", "acme", None, 2, 0);
    g.lends = true;
    g.lent = 2;
    let mut r = view("r", 2, vec![g]);
    r.running = 2;
    r.provider_in_use = 2;
    assert_eq!(
        place_on(&r, &request("acme", None)),
        Ok(Seat::Grant("g1".into()))
    );
    assert_eq!(
        place_on(&r, &request("globex", None)),
        Err(Refusal::PhysicallyFull)
    );
    // Full of VMs that are not its borrowers', it is full for acme too.
    r.live_grants[0].lent = 0;
    assert_eq!(
        place_on(&r, &request("acme", None)),
        Err(Refusal::PhysicallyFull)
    );
}
