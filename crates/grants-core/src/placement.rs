//! Slot allocation (contract section 4): where `instances.create` (and
//! `instances.start`) puts an instance among the capacity reservations bound to
//! its pool.
//!
//! The caller settles each candidate reservation up to now, then
//! describes it at that instant as a [`ReservationView`] and asks [`place`].

use std::fmt;

use crate::rules::{self, Owner};

/// How an instance is billed (`instances.create { billing }`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Billing {
    /// `"standard"`: billed by its meters; may enter a grant of its tenant.
    Standard,
    /// `"none"` (root only): writes no meters, takes an ordinary slot and
    /// never enters a grant.
    None,
}

impl Billing {
    /// Every billing mode.
    pub const ALL: [Billing; 2] = [Billing::Standard, Billing::None];

    /// The wire name: `"standard"` or `"none"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Billing::Standard => "standard",
            Billing::None => "none",
        }
    }

    /// Parses a wire name; `None` for anything else (exact, case-sensitive).
    pub fn parse(s: &str) -> Option<Billing> {
        Billing::ALL.into_iter().find(|b| b.as_str() == s)
    }
}

impl fmt::Display for Billing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The slot an instance holds on one reservation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Seat {
    /// A slot of this grant (`placement.kind: "grant"`).
    Grant(String),
    /// An ordinary slot of the reservation (`placement.kind: "reservation"`).
    Ordinary,
    /// A slot this lending grant lent to an interruptible instance of
    /// another tenant (`placement.kind: "lent"`, contract 3.14). Settlement
    /// never moves it: the borrower leaves by interruption only.
    Lent(String),
}

/// A grant live on the reservation at the instant of the decision
/// (non-cancelled, `startsAt <= t < endsAt`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LiveGrant {
    /// The grant's id (`rgrant_...`).
    pub grant_id: String,
    /// The grantee.
    pub tenant_id: String,
    /// The one project the grant serves, if it names one.
    pub project_id: Option<String>,
    /// The committed slots.
    pub slots: u32,
    /// The start of its term; earlier grants are filled first.
    pub starts_at: i64,
    /// How many instances it holds, running or stopped (a stopped instance
    /// keeps its grant slot).
    pub held: u32,
    /// Whether it lends its idle slots (contract 3.14): its pool has
    /// `lending` and its grantee set it.
    pub lends: bool,
    /// The borrowers in its slots, interrupted ones included until their
    /// VMs are gone. They never reduce [`LiveGrant::free`]: the grantee
    /// takes a lent slot back at once.
    pub lent: u32,
}

impl LiveGrant {
    /// The slots the grant pays for that none of its instances holds.
    pub fn free(&self) -> u32 {
        self.slots.saturating_sub(self.held)
    }

    /// The slots a new borrower may take: none unless it lends, else those
    /// neither the grantee's instances nor a borrower occupy.
    pub fn lendable(&self) -> u32 {
        if self.lends {
            self.slots
                .saturating_sub(self.held)
                .saturating_sub(self.lent)
        } else {
            0
        }
    }
}

/// One capacity reservation as a placement decision sees it at one instant,
/// after it has been settled up to that instant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReservationView {
    /// The provider's reservation id.
    pub reservation_id: String,
    /// The reservation's slots (`total` from the last scan).
    pub total: u64,
    /// The instances the provider reports on it (`providerInUse`), ours or not.
    pub provider_in_use: u64,
    /// The grants live on it at the instant. Only these are considered; the
    /// caller leaves scheduled, ended and cancelled grants out.
    pub live_grants: Vec<LiveGrant>,
    /// Our running instances on it outside any grant: on ordinary slots,
    /// `billing: "none"` ones included.
    pub running_outside_grants: u64,
    /// All our running instances on it, in grants or not.
    pub running: u64,
}

impl ReservationView {
    /// The slots anyone may take: `total - sum(slots of live grants) -
    /// running instances outside grants`, floored at 0.
    ///
    /// Granted slots are subtracted whole, used or not: nobody but the
    /// grantee ever takes a granted slot.
    pub fn ordinary_free(&self) -> u64 {
        let granted: u64 = self.live_grants.iter().map(|g| u64::from(g.slots)).sum();
        self.total
            .saturating_sub(granted)
            .saturating_sub(self.running_outside_grants)
    }

    /// `max(running instances on it, providerInUse)`.
    pub fn physical_in_use(&self) -> u64 {
        self.running.max(self.provider_in_use)
    }

    /// Whether the provider has no room for one more VM on it
    /// (`physical_in_use >= total`); such a reservation refuses everyone,
    /// grantees included.
    pub fn is_physically_full(&self) -> bool {
        self.physical_in_use() >= self.total
    }

    /// Whether the grantee of `grant` finds no room for its instance: its
    /// grant's borrowers are left out, since their VMs go before the
    /// grantee's is made (contract 4, r4).
    fn is_full_for(&self, grant: &LiveGrant) -> bool {
        self.physical_in_use().saturating_sub(u64::from(grant.lent)) >= self.total
    }

    /// The ordinary slots one more instance could take now: [`ordinary_free`]
    /// bounded by the physical room left. This is `details.available` of
    /// `CAPACITY_UNAVAILABLE`.
    ///
    /// [`ordinary_free`]: ReservationView::ordinary_free
    pub fn available(&self) -> u64 {
        self.ordinary_free()
            .min(self.total.saturating_sub(self.physical_in_use()))
    }
}

/// The instance to place.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PlacementRequest {
    /// The instance's tenant.
    pub tenant_id: String,
    /// The instance's project, if any.
    pub project_id: Option<String>,
    /// How the instance is billed.
    pub billing: Billing,
    /// For `instances.start`: the grant in which the stopped instance still
    /// holds its slot. If that grant is live it takes the instance back
    /// without a free slot (its slot is already counted in `held`). `None`
    /// for a new instance or one that held no grant slot.
    pub held_grant: Option<String>,
}

impl PlacementRequest {
    /// A new instance of `tenant_id` (in `project_id`, if any) billed `billing`.
    pub fn new(
        tenant_id: impl Into<String>,
        project_id: Option<String>,
        billing: Billing,
    ) -> PlacementRequest {
        PlacementRequest {
            tenant_id: tenant_id.into(),
            project_id,
            billing,
            held_grant: None,
        }
    }

    fn owner(&self) -> Owner<'_> {
        Owner {
            tenant_id: &self.tenant_id,
            project_id: self.project_id.as_deref(),
        }
    }
}

/// Why one reservation refuses an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// `physical_in_use >= total`: no room for one more VM, whoever asks.
    PhysicallyFull,
    /// No grant of the tenant has a free slot for it and no ordinary slot is
    /// free.
    NoFreeSlot,
}

/// Where [`place`] puts an instance.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Placement {
    /// On `reservation_id`, in `seat`.
    Reserved {
        /// The reservation that takes it.
        reservation_id: String,
        /// A slot of one of its grants, or an ordinary slot.
        seat: Seat,
    },
    /// No reservation is bound to the pool for the flavor: on-demand.
    OnDemand,
}

/// Every candidate reservation refuses: `CAPACITY_UNAVAILABLE` with
/// `details { reservationId, total, inUse, available }` of the first
/// candidate (in reservation id order).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CapacityUnavailable {
    /// The first candidate's id.
    pub reservation_id: String,
    /// Its total slots.
    pub total: u64,
    /// Its [`ReservationView::physical_in_use`].
    pub in_use: u64,
    /// Its [`ReservationView::available`].
    pub available: u64,
}

impl CapacityUnavailable {
    fn of(view: &ReservationView) -> CapacityUnavailable {
        CapacityUnavailable {
            reservation_id: view.reservation_id.clone(),
            total: view.total,
            in_use: view.physical_in_use(),
            available: view.available(),
        }
    }
}

impl fmt::Display for CapacityUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "reservation {} has no slot for the instance ({} of {} in use, {} available)",
            self.reservation_id, self.in_use, self.total, self.available
        )
    }
}

impl std::error::Error for CapacityUnavailable {}

/// Whether one reservation takes the instance, and in which seat:
///
/// 1. physically full: [`Refusal::PhysicallyFull`] (for a grantee, the
///    borrowers of its grant are left out: it takes their slots back);
/// 2. a live grant of the tenant that serves the instance (no project, or
///    the instance's) with a free slot: that grant, preferring
///    project-scoped grants, then the earliest `startsAt`, then the lowest
///    grant id (the grant named by `held_grant` first, if live).
///    `billing: "none"` instances never enter a grant;
/// 3. else an ordinary slot if [`ReservationView::ordinary_free`] is above 0;
/// 4. else [`Refusal::NoFreeSlot`].
pub fn place_on(view: &ReservationView, request: &PlacementRequest) -> Result<Seat, Refusal> {
    if let Some(grant) = choose_grant(view, request) {
        return Ok(Seat::Grant(grant.grant_id.clone()));
    }
    if view.is_physically_full() {
        return Err(Refusal::PhysicallyFull);
    }
    if view.ordinary_free() > 0 {
        Ok(Seat::Ordinary)
    } else {
        Err(Refusal::NoFreeSlot)
    }
}

/// The grant of `view` that takes the instance, if any (step 2 of
/// [`place_on`]), where the reservation has room for it (its grant's
/// borrowers left out).
fn choose_grant<'v>(
    view: &'v ReservationView,
    request: &PlacementRequest,
) -> Option<&'v LiveGrant> {
    let serving = || {
        view.live_grants.iter().filter(|grant| {
            if view.is_full_for(grant) {
                return false;
            }
            let owner = Owner {
                tenant_id: &grant.tenant_id,
                project_id: grant.project_id.as_deref(),
            };
            rules::serves(owner, request.owner(), request.billing)
        })
    };
    let own_slot = request
        .held_grant
        .as_deref()
        .and_then(|held| serving().find(|grant| grant.grant_id == held));
    own_slot.or_else(|| {
        serving()
            .filter(|grant| grant.free() > 0)
            .min_by_key(|grant| preference(grant))
    })
}

fn preference(grant: &LiveGrant) -> (bool, i64, &str) {
    rules::grant_preference(
        grant.project_id.as_deref(),
        grant.starts_at,
        &grant.grant_id,
    )
}

/// Places an instance among the candidate reservations (those bound to its
/// pool with its flavor and `ready`), grants first across all of them
/// (contract 4, r2), so a grantee never takes a reservation-rate slot while
/// one of its grants in the pool has an idle one:
///
/// 1. a candidate that is physically full refuses;
/// 2. over the other candidates in reservation id order, the first with a
///    live grant of the tenant that serves the instance and has a free slot
///    takes it into that grant (on one reservation: as [`place_on`] chooses);
/// 3. else the first of them, in reservation id order, with an ordinary slot
///    free takes it there.
///
/// No candidate at all: [`Placement::OnDemand`]. Every candidate refuses:
/// [`CapacityUnavailable`] describing the first candidate.
///
/// ```
/// use grants_core::{
///     place, Billing, LiveGrant, Placement, PlacementRequest, ReservationView, Seat,
/// };
///
/// let view = ReservationView {
///     reservation_id: "projects/p/zones/z/reservations/r".into(),
///     total: 4,
///     provider_in_use: 0,
///     live_grants: vec![LiveGrant {
///         grant_id: "rgrant_1".into(),
///         tenant_id: "acme".into(),
///         project_id: None,
///         slots: 3,
///         starts_at: 0,
///         held: 0,
///         lends: false,
///         lent: 0,
///     }],
///     running_outside_grants: 0,
///     running: 0,
/// };
/// let acme = PlacementRequest::new("acme", None, Billing::Standard);
/// let other = PlacementRequest::new("globex", None, Billing::Standard);
///
/// // The grantee enters its grant; anyone else shares the one ungranted slot.
/// assert!(matches!(place(&[view.clone()], &acme),
///     Ok(Placement::Reserved { seat: Seat::Grant(id), .. }) if id == "rgrant_1"));
/// assert!(matches!(place(&[view.clone()], &other),
///     Ok(Placement::Reserved { seat: Seat::Ordinary, .. })));
/// assert_eq!(place(&[], &other), Ok(Placement::OnDemand));
/// ```
pub fn place(
    candidates: &[ReservationView],
    request: &PlacementRequest,
) -> Result<Placement, CapacityUnavailable> {
    let mut ordered: Vec<ReservationView> = candidates.to_vec();
    ordered.sort_by(|a, b| a.reservation_id.cmp(&b.reservation_id));
    Ok(match place_in_order(&ordered, request)? {
        None => Placement::OnDemand,
        #[expect(
            clippy::indexing_slicing,
            reason = "`place_in_order` answers an index into the candidates it was given"
        )]
        Some((index, seat)) => Placement::Reserved {
            reservation_id: ordered[index].reservation_id.clone(),
            seat,
        },
    })
}

/// [`place`] over candidates already in the order to try them (reservation
/// id order, which is also the order their rows are locked in), answering
/// the index of the candidate that takes the instance and its seat, or
/// `None` for on-demand (no candidate). Callers that hold several
/// reservations with one id (one provider project under two accounts) use
/// it to know which one was chosen.
pub fn place_in_order(
    candidates: &[ReservationView],
    request: &PlacementRequest,
) -> Result<Option<(usize, Seat)>, CapacityUnavailable> {
    let Some(first) = candidates.first() else {
        return Ok(None);
    };
    let open = || {
        candidates
            .iter()
            .enumerate()
            .filter(|(_, view)| !view.is_physically_full())
    };
    if let Some((index, grant)) = candidates
        .iter()
        .enumerate()
        .find_map(|(index, view)| choose_grant(view, request).map(|grant| (index, grant)))
    {
        return Ok(Some((index, Seat::Grant(grant.grant_id.clone()))));
    }
    open()
        .find(|(_, view)| view.ordinary_free() > 0)
        .map(|(index, _)| Some((index, Seat::Ordinary)))
        .ok_or_else(|| CapacityUnavailable::of(first))
}

#[cfg(test)]
mod tests;
