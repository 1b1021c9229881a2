//! Property tests of lending (contract 3.14, 5.5): a slot is never lent
//! twice, held plus lent never exceeds a grant's slots, the overlap is
//! bounded by the interrupted borrowers, no borrower stays in a grant that
//! does not lend but while interrupted, a reclaim interrupts the borrower
//! that came last, and lent slot-hours never exceed committed ones.

#![expect(
    clippy::expect_used,
    reason = "tests expect answers; a panic fails the test"
)]

use grants_core::lending::{
    Borrower, LendingGrant, borrow, grantee_vm_fits, interrupt_all, lent_records, reclaim,
};
use grants_core::{HOUR_MS, Segment, cumulative_rounded_records, grant_slot_records};
use proptest::prelude::*;

/// One thing that happens to the grants.
#[derive(Debug, Clone)]
enum Op {
    /// An interruptible create by tenant `t`.
    Borrow(usize),
    /// Grant `g`'s grantee needs one more slot (a create or a start).
    Need(usize),
    /// Grant `g`'s grantee lets one slot go (a delete or a stop).
    Release(usize),
    /// The `i`-th borrower (of all, in order) is gone: deleted by its
    /// tenant, or its interrupted VM confirmed gone.
    Gone(usize),
    /// Grant `g` stops lending (or ends).
    StopLending(usize),
    /// Grant `g` lends again.
    Lend(usize),
}

const TENANTS: [&str; 3] = ["acme", "globex", "initech"];

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => (0..3usize).prop_map(Op::Borrow),
        3 => (0..3usize).prop_map(Op::Need),
        2 => (0..3usize).prop_map(Op::Release),
        3 => (0..16usize).prop_map(Op::Gone),
        1 => (0..3usize).prop_map(Op::StopLending),
        1 => (0..3usize).prop_map(Op::Lend),
    ];
    prop::collection::vec(op, 0..80)
}

/// Three grants of acme and globex, lending, with 1 to 4 slots.
fn grants() -> impl Strategy<Value = Vec<LendingGrant>> {
    (1..5u32, 1..5u32, 1..5u32, 0..3i64).prop_map(|(a, b, c, shift)| {
        let mut g = vec![
            LendingGrant::new("rgrant_b", "acme", 10, a),
            LendingGrant::new("rgrant_a", "globex", 10 + shift, b),
            LendingGrant::new("rgrant_c", "acme", 5, c),
        ];
        for grant in &mut g {
            grant.lends = true;
        }
        g
    })
}

/// The invariants that hold after every step.
fn check(grants: &[LendingGrant]) -> Result<(), TestCaseError> {
    for g in grants {
        let interrupting = g.borrowers.iter().filter(|b| b.interrupting).count();
        let interrupting = u32::try_from(interrupting).expect("small");
        prop_assert!(g.held + g.lent() <= g.slots, "held plus lent: {g:?}");
        prop_assert!(
            g.borrowers.len() <= usize::try_from(g.slots).expect("small"),
            "a slot lent twice: the borrowers' VMs outnumber the slots: {g:?}"
        );
        prop_assert!(
            g.occupied() <= g.slots + interrupting,
            "the overlap is the interrupted borrowers': {g:?}"
        );
        if !g.lends {
            prop_assert_eq!(g.lent(), 0, "a borrower in a grant that does not lend");
        }
    }
    Ok(())
}

fn run(mut grants: Vec<LendingGrant>, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut next = 0;
    for (at, op) in ops.iter().enumerate() {
        let at = i64::try_from(at).expect("small");
        match op {
            Op::Borrow(t) => {
                let tenant = *TENANTS.get(*t).expect("a tenant");
                let first = grants
                    .iter()
                    .filter(|g| g.tenant_id != tenant && g.lendable() > 0)
                    .min_by_key(|g| (g.starts_at, g.grant_id.clone()))
                    .map(|g| g.grant_id.clone());
                let chosen = borrow(&grants, tenant).map(str::to_owned);
                prop_assert_eq!(
                    &chosen,
                    &first,
                    "the order of contract 4, or no lendable slot"
                );
                match chosen {
                    None => {}
                    Some(id) => {
                        let g = grants
                            .iter_mut()
                            .find(|g| g.grant_id == id)
                            .expect("the grant");
                        prop_assert_ne!(&g.tenant_id, tenant, "borrowed from its own tenant");
                        next += 1;
                        g.borrowers
                            .push(Borrower::new(&format!("inst_{next:03}"), at));
                    }
                }
            }
            Op::Need(i) => {
                let g = grants.get_mut(*i).expect("a grant");
                if g.held < g.slots {
                    let latest = g
                        .borrowers
                        .iter()
                        .filter(|b| !b.interrupting)
                        .map(|b| (b.since, b.instance_id.clone()))
                        .max();
                    let victim = reclaim(g).map(|b| b.instance_id.clone());
                    if g.has_unlent_slot() {
                        prop_assert_eq!(victim.as_ref(), None, "interrupted with a slot unlent");
                    } else {
                        let latest = latest.map(|l| l.1);
                        prop_assert_eq!(&victim, &latest, "the borrower that came last");
                    }
                    if let Some(v) = victim {
                        let b = g
                            .borrowers
                            .iter_mut()
                            .find(|b| b.instance_id == v)
                            .expect("the victim");
                        b.interrupting = true;
                    }
                    g.held += 1;
                }
            }
            Op::Release(i) => {
                let g = grants.get_mut(*i).expect("a grant");
                g.held = g.held.saturating_sub(1);
            }
            Op::Gone(n) => {
                let all: Vec<(usize, String)> = grants
                    .iter()
                    .enumerate()
                    .flat_map(|(gi, g)| {
                        g.borrowers.iter().map(move |b| (gi, b.instance_id.clone()))
                    })
                    .collect();
                if let Some((gi, id)) = all.get(*n) {
                    grants
                        .get_mut(*gi)
                        .expect("its grant")
                        .borrowers
                        .retain(|b| &b.instance_id != id);
                }
            }
            Op::StopLending(i) => {
                let g = grants.get_mut(*i).expect("a grant");
                g.lends = false;
                let ids: Vec<String> = interrupt_all(g)
                    .iter()
                    .map(|b| b.instance_id.clone())
                    .collect();
                prop_assert_eq!(ids.len(), usize::try_from(g.lent()).expect("small"));
                for b in &mut g.borrowers {
                    b.interrupting = true;
                }
                prop_assert_eq!(g.lendable(), 0);
            }
            Op::Lend(i) => grants.get_mut(*i).expect("a grant").lends = true,
        }
        check(&grants)?;
        for g in &grants {
            // The grantee's VMs are made once every interrupted borrower's
            // VM is gone: never more VMs than slots then.
            if g.borrowers.iter().all(|b| !b.interrupting) {
                prop_assert!(grantee_vm_fits(g), "{g:?}");
            }
        }
    }
    Ok(())
}

/// Borrowers' running stretches in one grant of `slots`: per slot, disjoint
/// stretches in `[0, span)`, so at most `slots` run at any instant.
fn stretches(slots: u32) -> impl Strategy<Value = Vec<Segment>> {
    let per_slot = prop::collection::vec((0..4 * HOUR_MS, 1..3 * HOUR_MS), 0..4);
    prop::collection::vec(per_slot, usize::try_from(slots).expect("small")).prop_map(|slots| {
        let mut out = Vec::new();
        for mut stretches in slots {
            stretches.sort_unstable();
            let mut free_from = 0;
            for (from, len) in stretches {
                let from = from.max(free_from);
                let to = from + len;
                out.push(Segment {
                    from,
                    to,
                    weight: 1,
                });
                free_from = to;
            }
        }
        out
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_slot_is_never_lent_twice_and_a_reclaim_interrupts_the_last_borrower(
        grants in grants(),
        ops in ops(),
    ) {
        run(grants, &ops)?;
    }

    #[test]
    fn lent_hours_never_exceed_committed_hours_and_need_no_cap(
        (slots, running) in (1..4u32).prop_flat_map(|s| (Just(s), stretches(s))),
        now in 0..12 * HOUR_MS,
    ) {
        let ends_at = 12 * HOUR_MS;
        let committed = grant_slot_records(slots, 0, ends_at, 0, now);
        let lent = lent_records(&running, &committed, 0, now);
        let uncapped: Vec<_> = cumulative_rounded_records(&running, 0, now)
            .into_iter()
            .filter(|r| r.quantity_micro > 0)
            .collect();
        prop_assert_eq!(&lent, &uncapped, "the cap never binds");
        for r in &lent {
            let c = committed
                .iter()
                .find(|c| c.period_start == r.period_start)
                .expect("a committed record for every lent hour");
            prop_assert!(r.quantity_micro <= c.quantity_micro, "{r:?} over {c:?}");
        }
    }
}

#[test]
fn a_grant_that_does_not_lend_is_never_borrowed_from() {
    let mut g = LendingGrant::new("rgrant_a", "acme", 0, 3);
    assert_eq!(borrow(std::slice::from_ref(&g), "globex"), None);
    g.lends = true;
    assert_eq!(
        borrow(std::slice::from_ref(&g), "acme"),
        None,
        "its own tenant"
    );
    assert_eq!(borrow(std::slice::from_ref(&g), "globex"), Some("rgrant_a"));
}

#[test]
fn an_interrupted_borrowers_slot_serves_the_grantees_next_need_without_another_interruption() {
    let mut g = LendingGrant::new("rgrant_a", "acme", 0, 2);
    g.lends = true;
    g.borrowers = vec![Borrower::new("inst_1", 1), Borrower::new("inst_2", 2)];
    g.borrowers[1].interrupting = true;
    // acme's instance that caused it was deleted before inst_2 was gone.
    assert!(g.has_unlent_slot());
    assert_eq!(reclaim(&g), None);
    // Nobody else takes that slot meanwhile: inst_2's VM still runs on it.
    assert_eq!(g.lendable(), 0);
    assert_eq!(borrow(std::slice::from_ref(&g), "globex"), None);
}

/// One candidate reservation's lending grants, for `place_borrower`.
fn live(tenant: &'static str, id: String, starts_at: i64, slots: u32) -> grants_core::LiveGrant {
    grants_core::LiveGrant {
        grant_id: id,
        tenant_id: tenant.to_owned(),
        project_id: None,
        slots,
        starts_at,
        held: 0,
        lends: false,
        lent: 0,
    }
}

proptest! {
    /// Over candidate reservations, a borrower takes a lendable slot of
    /// another tenant's lending grant on a reservation with room, the
    /// earliest `startsAt` (then id) of all such grants; none when there is
    /// none (contract 3.14).
    #[test]
    fn place_borrower_takes_the_first_lendable_slot_of_another_tenant(
        views in prop::collection::vec(
            (
                prop::collection::vec(
                    (0..3usize, 0..4i64, 1..4u32, 0..4u32, 0..3u32, any::<bool>()),
                    0..4,
                ),
                0..2u64,
            ),
            0..4,
        ),
        tenant in 0..3usize,
    ) {
        let tenant = TENANTS[tenant];
        let mut n = 0;
        let views: Vec<grants_core::ReservationView> = views
            .into_iter()
            .enumerate()
            .map(|(r, (grants, extra))| {
                let live_grants: Vec<grants_core::LiveGrant> = grants
                    .into_iter()
                    .map(|(t, starts_at, slots, held, lent, lends)| {
                        n += 1;
                        let mut g = live(TENANTS[t], format!("rgrant_{n:02}"), starts_at, slots);
                        g.held = held.min(slots);
                        g.lent = lent;
                        g.lends = lends;
                        g
                    })
                    .collect();
                let occupied: u64 =
                    live_grants.iter().map(|g| u64::from(g.held + g.lent)).sum();
                let total: u64 = live_grants.iter().map(|g| u64::from(g.slots)).sum::<u64>() + 1;
                grants_core::ReservationView {
                    reservation_id: format!("r{r}"),
                    total,
                    provider_in_use: occupied + extra,
                    live_grants,
                    running_outside_grants: 0,
                    running: occupied,
                }
            })
            .collect();
        let eligible = || {
            views
                .iter()
                .enumerate()
                .filter(|(_, v)| !v.is_physically_full())
                .flat_map(|(i, v)| v.live_grants.iter().map(move |g| (i, g)))
                .filter(|(_, g)| g.tenant_id != tenant && g.lends && g.slots > g.held + g.lent)
        };
        match grants_core::lending::place_borrower(&views, tenant) {
            None => prop_assert_eq!(eligible().count(), 0),
            Some((index, grant_id)) => {
                let view = &views[index];
                prop_assert!(!view.is_physically_full());
                let g = view
                    .live_grants
                    .iter()
                    .find(|g| g.grant_id == grant_id)
                    .expect("a grant of the chosen candidate");
                prop_assert!(g.tenant_id != tenant, "borrowed from its own grant");
                prop_assert!(g.lends && g.lendable() > 0);
                let best = eligible()
                    .map(|(_, g)| (g.starts_at, g.grant_id.clone()))
                    .min()
                    .expect("one eligible");
                prop_assert_eq!(best, (g.starts_at, g.grant_id.clone()));
            }
        }
    }
}
