//! The source's promise, across any sequence of creates, stops, starts,
//! deletes and grant starts and ends on a pool of two reservations: an
//! instance of a grantee is on an ordinary slot of a reservation only while
//! every live grant of its tenant on that reservation that serves it is full
//! (contract 4 and 5.3, r2), and placement never over-fills a grant or a
//! reservation. At every placement, across the pool: an ordinary slot is
//! taken only when no candidate with room has an idle grant slot for it.
//!
//! The model drives the crate exactly as storage does: every decision first
//! settles the reservations it reads up to now ([`settle`]), placement sees
//! all candidates at once ([`place_in_order`]), a start back into a held
//! grant slot asks [`place_on`] of that reservation, and a delete that frees
//! a grant slot asks [`refill`].

#![expect(
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "tests index answers and expect them; a panic fails the test"
)]

use grants_core::{
    Billing, GrantState, LiveGrant, PlacementRequest, Power, ReservationView, Seat,
    SettlementGrant, SettlementInstance, Transition, apply, place_in_order, place_on, refill,
    settle,
};
use proptest::prelude::*;

const TENANTS: [&str; 2] = ["acme", "globex"];
const PROJECTS: [Option<&str>; 2] = [None, Some("prj_a")];

#[derive(Debug, Clone)]
struct Reservation {
    id: String,
    total: u64,
    grants: Vec<SettlementGrant>,
    /// The instances holding a seat on it.
    seated: Vec<SettlementInstance>,
}

impl Reservation {
    fn apply_all(&mut self, due: &[Transition]) {
        for t in due {
            apply(&mut self.grants, &mut self.seated, t);
        }
        // Instances that lost their seat leave the reservation.
        self.seated.retain(|i| i.seat.is_some());
    }

    fn settle(&mut self, now: i64) -> Vec<SettlementInstance> {
        let due = settle(&self.grants, &self.seated, now);
        for t in &due {
            apply(&mut self.grants, &mut self.seated, t);
        }
        let (kept, left): (Vec<_>, Vec<_>) = self.seated.drain(..).partition(|i| i.seat.is_some());
        self.seated = kept;
        left
    }

    fn live(&self, now: i64) -> impl Iterator<Item = &SettlementGrant> {
        self.grants.iter().filter(move |g| {
            g.settled == GrantState::Active
                && g.created_at <= now
                && g.starts_at <= now
                && now < g.ends_at
        })
    }

    fn held(&self, grant_id: &str) -> u32 {
        let n = self
            .seated
            .iter()
            .filter(|i| i.seat == Some(Seat::Grant(grant_id.to_owned())))
            .count();
        u32::try_from(n).expect("small")
    }

    fn view(&self, now: i64) -> ReservationView {
        let running = |f: &dyn Fn(&SettlementInstance) -> bool| {
            self.seated
                .iter()
                .filter(|i| i.power == Power::Running && f(i))
                .count() as u64
        };
        ReservationView {
            reservation_id: self.id.clone(),
            total: self.total,
            provider_in_use: 0,
            live_grants: self
                .live(now)
                .map(|g| LiveGrant {
                    grant_id: g.grant_id.clone(),
                    tenant_id: g.tenant_id.clone(),
                    project_id: g.project_id.clone(),
                    slots: g.slots,
                    starts_at: g.starts_at,
                    held: self.held(&g.grant_id),
                    lends: false,
                    lent: 0,
                })
                .collect(),
            running_outside_grants: running(&|i| i.seat == Some(Seat::Ordinary)),
            running: running(&|_| true),
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Advance(i64),
    Create {
        tenant: usize,
        project: usize,
        unbilled: bool,
    },
    Stop(usize),
    Start(usize),
    Delete(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1i64..15).prop_map(Op::Advance),
        4 => (0..TENANTS.len(), 0..PROJECTS.len(), prop::bool::weighted(0.15))
            .prop_map(|(tenant, project, unbilled)| Op::Create { tenant, project, unbilled }),
        1 => any::<usize>().prop_map(Op::Stop),
        1 => any::<usize>().prop_map(Op::Start),
        2 => any::<usize>().prop_map(Op::Delete),
    ]
}

prop_compose! {
    fn grant(r: usize, i: usize)(tenant in 0..TENANTS.len(), project in 0..PROJECTS.len(),
        slots in 1u32..3, starts_at in 0i64..60, len in 1i64..60, early in 0i64..20)
        -> SettlementGrant {
        SettlementGrant {
            grant_id: format!("rgrant_{r}_{i}"),
            tenant_id: TENANTS[tenant].into(),
            project_id: PROJECTS[project].map(Into::into),
            slots,
            starts_at,
            ends_at: starts_at + len,
            created_at: starts_at - early,
            settled: GrantState::Scheduled,
        }
    }
}

prop_compose! {
    fn reservation(r: usize)(total in 1u64..7, n in 0usize..4)
        (grants in (0..n).map(|i| grant(r, i)).collect::<Vec<_>>(), total in Just(total))
        -> Reservation {
        // Keep the committed slots within the total, as the capacity check does.
        let mut kept = Vec::new();
        let mut sum = 0u64;
        for g in grants {
            if sum + u64::from(g.slots) <= total {
                sum += u64::from(g.slots);
                kept.push(g);
            }
        }
        Reservation { id: format!("projects/p/zones/z/reservations/r{r}"), total, grants: kept,
            seated: Vec::new() }
    }
}

struct World {
    now: i64,
    reservations: Vec<Reservation>,
    /// Stopped instances holding no seat.
    off: Vec<SettlementInstance>,
    next: usize,
}

impl World {
    fn settle_all(&mut self) {
        let now = self.now;
        for r in &mut self.reservations {
            let left = r.settle(now);
            self.off.extend(left);
        }
    }

    /// Places a running instance across all candidates, as storage's
    /// `decide` does. Returns whether it got a seat.
    fn place(&mut self, mut instance: SettlementInstance) -> bool {
        self.settle_all();
        let views: Vec<ReservationView> =
            self.reservations.iter().map(|r| r.view(self.now)).collect();
        let request = PlacementRequest::new(
            instance.tenant_id.clone(),
            instance.project_id.clone(),
            instance.billing,
        );
        match place_in_order(&views, &request) {
            Ok(Some((index, seat))) => {
                // Across the pool: an ordinary slot only when no candidate
                // with room has a grant of the tenant that would take it.
                if seat == Seat::Ordinary {
                    let idle_grant = views.iter().any(|v| {
                        !v.is_physically_full()
                            && v.live_grants.iter().any(|g| {
                                g.free() > 0
                                    && instance.billing == Billing::Standard
                                    && g.tenant_id == instance.tenant_id
                                    && (g.project_id.is_none()
                                        || g.project_id == instance.project_id)
                            })
                    });
                    assert!(
                        !idle_grant,
                        "{} placed on an ordinary slot",
                        instance.instance_id
                    );
                }
                instance.power = Power::Running;
                instance.seat = Some(seat);
                self.reservations[index].seated.push(instance);
                true
            }
            Ok(None) => unreachable!("there are candidates"),
            Err(_) => false,
        }
    }

    /// Every instance, as (reservation index or None, position).
    fn all(&self) -> Vec<(Option<usize>, usize)> {
        let mut out = Vec::new();
        for (r, res) in self.reservations.iter().enumerate() {
            out.extend((0..res.seated.len()).map(|i| (Some(r), i)));
        }
        out.extend((0..self.off.len()).map(|i| (None, i)));
        out
    }

    fn take(&mut self, at: (Option<usize>, usize)) -> SettlementInstance {
        match at {
            (Some(r), i) => self.reservations[r].seated.remove(i),
            (None, i) => self.off.remove(i),
        }
    }

    fn run(&mut self, op: &Op) {
        match *op {
            Op::Advance(dt) => {
                self.now += dt;
                self.settle_all();
            }
            Op::Create {
                tenant,
                project,
                unbilled,
            } => {
                self.next += 1;
                let instance = SettlementInstance {
                    instance_id: format!("inst_{:03}", self.next),
                    tenant_id: TENANTS[tenant].into(),
                    project_id: PROJECTS[project].map(Into::into),
                    billing: if unbilled {
                        Billing::None
                    } else {
                        Billing::Standard
                    },
                    power: Power::Running,
                    created_at: self.now,
                    seat: None,
                };
                self.place(instance);
            }
            Op::Stop(k) => {
                self.settle_all();
                let all = self.all();
                if all.is_empty() {
                    return;
                }
                if let (Some(r), i) = all[k % all.len()] {
                    let instance = &mut self.reservations[r].seated[i];
                    if instance.power == Power::Running {
                        instance.power = Power::Stopped;
                        if instance.seat == Some(Seat::Ordinary) {
                            let mut gone = self.reservations[r].seated.remove(i);
                            gone.seat = None;
                            self.off.push(gone);
                        }
                    }
                }
            }
            Op::Start(k) => {
                self.settle_all();
                let all = self.all();
                if all.is_empty() {
                    return;
                }
                let at = all[k % all.len()];
                match at {
                    (Some(r), i) => {
                        let instance = &self.reservations[r].seated[i];
                        if instance.power == Power::Running {
                            return;
                        }
                        // Back into its held grant slot, on that reservation only.
                        let Some(Seat::Grant(held)) = instance.seat.clone() else {
                            unreachable!("a stopped seated instance holds a grant slot");
                        };
                        let mut request = PlacementRequest::new(
                            instance.tenant_id.clone(),
                            instance.project_id.clone(),
                            instance.billing,
                        );
                        request.held_grant = Some(held.clone());
                        let view = self.reservations[r].view(self.now);
                        if let Ok(seat) = place_on(&view, &request) {
                            assert_eq!(seat, Seat::Grant(held), "back into its own slot");
                            self.reservations[r].seated[i].power = Power::Running;
                        }
                    }
                    (None, _) => {
                        let instance = self.take(at);
                        let keep = instance.clone();
                        if !self.place(instance) {
                            self.off.push(keep);
                        }
                    }
                }
            }
            Op::Delete(k) => {
                self.settle_all();
                let all = self.all();
                if all.is_empty() {
                    return;
                }
                let at = all[k % all.len()];
                let gone = self.take(at);
                if let (Some(r), Some(Seat::Grant(_))) = (at.0, gone.seat) {
                    let res = &mut self.reservations[r];
                    let due = refill(&res.grants, &res.seated, self.now);
                    res.apply_all(&due);
                }
            }
        }
    }

    fn check(&self) -> Result<(), TestCaseError> {
        for r in &self.reservations {
            let running = r
                .seated
                .iter()
                .filter(|i| i.power == Power::Running)
                .count() as u64;
            prop_assert!(running <= r.total, "{} over-filled", r.id);
            for g in &r.grants {
                prop_assert!(r.held(&g.grant_id) <= g.slots, "{} over-filled", g.grant_id);
            }
            for g in r.live(self.now) {
                if r.held(&g.grant_id) >= g.slots {
                    continue;
                }
                let waiting = r.seated.iter().find(|i| {
                    i.seat == Some(Seat::Ordinary)
                        && i.power == Power::Running
                        && i.billing == Billing::Standard
                        && i.tenant_id == g.tenant_id
                        && (g.project_id.is_none() || g.project_id == i.project_id)
                });
                prop_assert!(
                    waiting.is_none(),
                    "at {}: {:?} waits on an ordinary slot of {} while {} has a free slot",
                    self.now,
                    waiting.map(|i| &i.instance_id),
                    r.id,
                    g.grant_id
                );
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_grantee_is_on_an_ordinary_slot_only_while_its_serving_grants_are_full(
        a in reservation(0),
        b in reservation(1),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        let mut world = World { now: 0, reservations: vec![a, b], off: Vec::new(), next: 0 };
        world.settle_all();
        world.check()?;
        for op in &ops {
            world.run(op);
            world.check()?;
        }
    }
}
