//! A reservation's slot accounts at an instant (contract 4's `grantedSlots`,
//! `heldInGrants`, `ordinaryInUse`, `ordinaryFree`, `physicalInUse`), with
//! the settlement due at that instant applied in memory.

use crate::placement::{LiveGrant, ReservationView, Seat};
use crate::settlement::{GrantState, Power, SettlementGrant, SettlementInstance};
use crate::views::preview::preview_settlement;

/// A reservation's slot accounts at one instant (contract 3.10 and 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SlotAccounts {
    /// The slots of the grants live at the instant (non-cancelled,
    /// `startsAt <= t < endsAt`), used or not.
    pub granted_slots: u64,
    /// The instances those grants hold, running or stopped.
    pub held_in_grants: u64,
    /// The running instances on the reservation outside any grant
    /// (`billing: "none"` ones included).
    pub ordinary_in_use: u64,
    /// `total - grantedSlots - ordinaryInUse`, floored at 0.
    pub ordinary_free: u64,
    /// `max(running instances on the reservation, providerInUse)`.
    pub physical_in_use: u64,
}

/// The slot accounts of a reservation of `total` slots (`providerInUse`
/// from its last scan) at `now`, from its open grants and the instances
/// seated on it as last settled: the transitions due up to `now` are applied
/// in memory first, so the figures are those a settlement at `now` would
/// leave, whether or not one has run.
///
/// ```
/// use grants_core::views::slots::{slot_accounts, SlotAccounts};
/// use grants_core::{Billing, GrantState, Power, Seat, SettlementGrant, SettlementInstance};
///
/// let grant = SettlementGrant {
///     grant_id: "rgrant_1".into(),
///     tenant_id: "acme".into(),
///     project_id: None,
///     slots: 2,
///     starts_at: 100,
///     ends_at: 200,
///     created_at: 0,
///     settled: GrantState::Scheduled,
/// };
/// let vm = |id: &str| SettlementInstance {
///     instance_id: id.into(),
///     tenant_id: "acme".into(),
///     project_id: None,
///     billing: Billing::Standard,
///     power: Power::Running,
///     created_at: 10,
///     seat: Some(Seat::Ordinary),
/// };
/// let instances = [vm("inst_a"), vm("inst_b"), vm("inst_c")];
/// // Before the start: three ordinary instances, two slots committed later.
/// let before = slot_accounts(5, 0, &[grant.clone()], &instances, 50);
/// assert_eq!((before.granted_slots, before.ordinary_in_use, before.ordinary_free), (0, 3, 2));
/// // At 150 the grant has taken two of them in, settled or not.
/// assert_eq!(
///     slot_accounts(5, 4, &[grant], &instances, 150),
///     SlotAccounts {
///         granted_slots: 2,
///         held_in_grants: 2,
///         ordinary_in_use: 1,
///         ordinary_free: 2,
///         physical_in_use: 4,
///     },
/// );
/// ```
pub fn slot_accounts(
    total: u64,
    provider_in_use: u64,
    grants: &[SettlementGrant],
    instances: &[SettlementInstance],
    now: i64,
) -> SlotAccounts {
    let settled = preview_settlement(grants, instances, now);
    let held = |grant_id: &str| {
        settled
            .instances
            .iter()
            // A borrower holds a slot of its lending grant (contract 4, r4).
            .filter(|i| matches!(&i.seat, Some(Seat::Grant(g) | Seat::Lent(g)) if g == grant_id))
            .count()
    };
    let live_grants: Vec<LiveGrant> = settled
        .grants
        .iter()
        .filter(|g| g.state_at(now) == GrantState::Active)
        .map(|g| LiveGrant {
            grant_id: g.grant_id.clone(),
            tenant_id: g.tenant_id.clone(),
            project_id: g.project_id.clone(),
            slots: g.slots,
            starts_at: g.starts_at,
            held: u32::try_from(held(&g.grant_id)).unwrap_or(u32::MAX),
            lends: false,
            lent: 0,
        })
        .collect();
    let running = |seat: fn(&Seat) -> bool| {
        settled
            .instances
            .iter()
            .filter(|i| i.power == Power::Running && i.seat.as_ref().is_some_and(seat))
            .count() as u64
    };
    let view = ReservationView {
        reservation_id: String::new(),
        total,
        provider_in_use,
        running_outside_grants: running(|s| *s == Seat::Ordinary),
        running: running(|_| true),
        live_grants,
    };
    SlotAccounts {
        granted_slots: view.live_grants.iter().map(|g| u64::from(g.slots)).sum(),
        held_in_grants: view.live_grants.iter().map(|g| u64::from(g.held)).sum(),
        ordinary_in_use: view.running_outside_grants,
        ordinary_free: view.ordinary_free(),
        physical_in_use: view.physical_in_use(),
    }
}
