//! Lending idle granted slots (contract 3.14, 5.5): which lent slot an
//! interruptible instance takes, which borrower a grantee's need interrupts,
//! and the lent slot-hours a lending grant is credited.
//!
//! A grant that lends keeps paying for every committed slot-hour; a slot its
//! grantee's instances do not hold may be lent to one interruptible instance
//! of another tenant (a *borrower*). When the grantee needs the slot back,
//! its instance is admitted at once and the borrower that came last is
//! interrupted: it keeps running on the slot until its VM is gone (the
//! *overlap*), and the grantee's VM is made only then.
//!
//! ```
//! use grants_core::lending::{Borrower, LendingGrant, borrow, reclaim};
//!
//! let mut grant = LendingGrant::new("rgrant_a", "acme", 0, 2);
//! grant.lends = true;
//! // acme runs nothing: globex borrows both slots.
//! for (i, at) in [(1, 10), (2, 20)] {
//!     assert_eq!(borrow(std::slice::from_ref(&grant), "globex"), Some("rgrant_a"));
//!     grant.borrowers.push(Borrower::new(&format!("inst_{i}"), at));
//! }
//! assert_eq!(borrow(std::slice::from_ref(&grant), "globex"), None);
//! // acme needs a slot: the borrower that came last is interrupted.
//! assert_eq!(reclaim(&grant).map(|b| b.instance_id.as_str()), Some("inst_2"));
//! ```

use crate::metering::{Record, Segment, cumulative_rounded_records};
use crate::placement::ReservationView;

/// One interruptible instance in a slot of a lending grant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Borrower {
    /// The borrower (`inst_...`).
    pub instance_id: String,
    /// When it took the slot; the one that came last is interrupted first.
    pub since: i64,
    /// Whether it is being interrupted: its slot is the grantee's again,
    /// and its VM runs on it until it is gone.
    pub interrupting: bool,
}

impl Borrower {
    /// A borrower that took its slot at `since`, not interrupted.
    pub fn new(instance_id: &str, since: i64) -> Borrower {
        Borrower {
            instance_id: instance_id.to_owned(),
            since,
            interrupting: false,
        }
    }
}

/// A grant live at one instant, as the lending decisions see it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LendingGrant {
    /// The grant (`rgrant_...`).
    pub grant_id: String,
    /// The grantee.
    pub tenant_id: String,
    /// The start of its term: grants are lent from in the order of contract
    /// 4 (earliest start, then id).
    pub starts_at: i64,
    /// The committed slots.
    pub slots: u32,
    /// Whether it lends: its pool has `lending` and its grantee set it.
    pub lends: bool,
    /// The grantee's instances that hold a slot of it.
    pub held: u32,
    /// The interruptible instances in its slots, interrupted or not.
    pub borrowers: Vec<Borrower>,
}

impl LendingGrant {
    /// A grant of `slots` that lends nothing and holds nothing.
    pub fn new(grant_id: &str, tenant_id: &str, starts_at: i64, slots: u32) -> LendingGrant {
        LendingGrant {
            grant_id: grant_id.to_owned(),
            tenant_id: tenant_id.to_owned(),
            starts_at,
            slots,
            lends: false,
            held: 0,
            borrowers: Vec::new(),
        }
    }

    /// The slots lent now: its borrowers not being interrupted.
    pub fn lent(&self) -> u32 {
        let n = self.borrowers.iter().filter(|b| !b.interrupting).count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// The VMs in its slots: the grantee's and every borrower's, the
    /// interrupted ones included until their VMs are gone.
    pub fn occupied(&self) -> u32 {
        let borrowers = u32::try_from(self.borrowers.len()).unwrap_or(u32::MAX);
        self.held.saturating_add(borrowers)
    }

    /// The slots a new borrower may take: none unless it lends; otherwise
    /// the slots neither the grantee nor any borrower occupies (an
    /// interrupted borrower's slot is the grantee's, not lent again).
    pub fn lendable(&self) -> u32 {
        if self.lends {
            self.slots.saturating_sub(self.occupied())
        } else {
            0
        }
    }

    /// Whether the grantee's next instance finds a slot of its own without
    /// interrupting anyone: one that neither its instances nor a borrower
    /// not yet interrupted hold (an interrupted borrower's slot already
    /// came back to it).
    pub fn has_unlent_slot(&self) -> bool {
        self.held.saturating_add(self.lent()) < self.slots
    }
}

/// The lending grant an interruptible instance of `tenant` takes a slot of:
/// the first, in the order of contract 4 (earliest `startsAt`, then id),
/// that lends, has a lendable slot and is not its own tenant's. `None`:
/// `CAPACITY_UNAVAILABLE` (`no-lent-slot`).
pub fn borrow<'a>(grants: &'a [LendingGrant], tenant: &str) -> Option<&'a str> {
    grants
        .iter()
        .filter(|g| g.tenant_id != tenant && g.lendable() > 0)
        .min_by(|a, b| (a.starts_at, &a.grant_id).cmp(&(b.starts_at, &b.grant_id)))
        .map(|g| g.grant_id.as_str())
}

/// The lent slot an interruptible instance of `tenant` takes among the
/// candidate reservations of its pool (contract 3.14): over those not
/// physically full, the first lending grant, in the order of contract 4
/// (earliest `startsAt`, then id), that has a lendable slot and is not its
/// own tenant's. Answers the candidate's index and the grant; `None`:
/// `CAPACITY_UNAVAILABLE` (`no-lent-slot`).
pub fn place_borrower<'a>(
    candidates: &'a [ReservationView],
    tenant: &str,
) -> Option<(usize, &'a str)> {
    candidates
        .iter()
        .enumerate()
        .filter(|(_, view)| !view.is_physically_full())
        .flat_map(|(index, view)| view.live_grants.iter().map(move |g| (index, g)))
        .filter(|(_, g)| g.tenant_id != tenant && g.lendable() > 0)
        .min_by(|(_, a), (_, b)| (a.starts_at, &a.grant_id).cmp(&(b.starts_at, &b.grant_id)))
        .map(|(index, g)| (index, g.grant_id.as_str()))
}

/// The borrower the grantee's need of one more slot interrupts: none when
/// an unlent slot remains ([`LendingGrant::has_unlent_slot`]), else the
/// borrower not yet interrupted that took its slot last (the greater
/// instance id on a tie). The grantee's instance is admitted either way.
pub fn reclaim(grant: &LendingGrant) -> Option<&Borrower> {
    if grant.has_unlent_slot() {
        return None;
    }
    grant
        .borrowers
        .iter()
        .filter(|b| !b.interrupting)
        .max_by(|a, b| (a.since, &a.instance_id).cmp(&(b.since, &b.instance_id)))
}

/// The borrowers a grant that ends, is cancelled or stops lending
/// interrupts: every one not interrupted yet, in the order they came.
pub fn interrupt_all(grant: &LendingGrant) -> Vec<&Borrower> {
    let mut all: Vec<&Borrower> = grant.borrowers.iter().filter(|b| !b.interrupting).collect();
    all.sort_by(|a, b| (a.since, &a.instance_id).cmp(&(b.since, &b.instance_id)));
    all
}

/// Whether the grantee's instance admitted into a grant may have its VM
/// made: its slot is free of every borrower's VM (an interrupted
/// borrower's VM confirmed gone), that is the grant's VMs fit its slots.
pub fn grantee_vm_fits(grant: &LendingGrant) -> bool {
    grant.occupied() <= grant.slots
}

/// The lending grant's `vm.grant.lent.hours` (contract 5.5): for each ended
/// hour from `metered_through`, the slot-hours its borrowers held running in
/// it (`running`: one segment per borrower's running stretch), with
/// cumulative rounding, no zero records, and never more than that hour's
/// `committed` record (the grant's `vm.grant.slot.hours` of the same hour).
pub fn lent_records(
    running: &[Segment],
    committed: &[Record],
    metered_through: i64,
    now: i64,
) -> Vec<Record> {
    cumulative_rounded_records(running, metered_through, now)
        .into_iter()
        .filter_map(|r| {
            let cap = committed
                .iter()
                .find(|c| c.period_start == r.period_start)
                .map_or(0, |c| c.quantity_micro);
            let quantity_micro = r.quantity_micro.min(cap);
            (quantity_micro > 0).then_some(Record {
                quantity_micro,
                ..r
            })
        })
        .collect()
}
