//! Where an instance sits: the [`Target`] of a placement, writing it with
//! its placement segments ([`place_at`]), the moves settlement decides, and
//! the placement view of a locked, settled reservation.

use std::collections::HashMap;

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use grants_core::{Destination, ReservationView, Seat};

use crate::db::cached;
use crate::error::{Result, StorageError};
use crate::model::grant::GrantRow;
use crate::model::instance::{InstanceRow, Subject};
use crate::model::reservation::ReservationRow;
use crate::model::states::{InstanceBilling, InstanceState, PlacementKind};
use crate::ops::settlement;
use crate::schema::{instances, placement_segments as seg};

/// Where to put an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// In a grant on a reservation.
    Grant {
        /// The grant.
        grant_id: String,
        /// Account of the reservation.
        account_id: String,
        /// The reservation.
        reservation_id: String,
    },
    /// In a slot a lending grant lent (an interruptible instance).
    Lent {
        /// The lending grant.
        grant_id: String,
        /// Account of the reservation.
        account_id: String,
        /// The reservation.
        reservation_id: String,
    },
    /// On an ordinary slot of a reservation.
    Reservation {
        /// Account of the reservation.
        account_id: String,
        /// The reservation.
        reservation_id: String,
    },
    /// On-demand.
    OnDemand,
    /// Nowhere (stopped without a slot, or deleted).
    None,
}

impl Target {
    /// Where a row says its instance is.
    pub fn of(inst: &InstanceRow) -> Target {
        match (
            inst.placement_kind,
            &inst.grant_id,
            &inst.account_id,
            &inst.reservation_id,
        ) {
            (PlacementKind::Grant, Some(g), Some(a), Some(r)) => Target::Grant {
                grant_id: g.clone(),
                account_id: a.clone(),
                reservation_id: r.clone(),
            },
            (PlacementKind::Lent, Some(g), Some(a), Some(r)) => Target::Lent {
                grant_id: g.clone(),
                account_id: a.clone(),
                reservation_id: r.clone(),
            },
            (PlacementKind::Reservation, _, Some(a), Some(r)) => Target::Reservation {
                account_id: a.clone(),
                reservation_id: r.clone(),
            },
            (PlacementKind::OnDemand, ..) => Target::OnDemand,
            _ => Target::None,
        }
    }

    /// The account and reservation it is on, if any.
    pub fn reservation(&self) -> Option<(&str, &str)> {
        match self {
            Target::Grant {
                account_id,
                reservation_id,
                ..
            }
            | Target::Lent {
                account_id,
                reservation_id,
                ..
            }
            | Target::Reservation {
                account_id,
                reservation_id,
            } => Some((account_id, reservation_id)),
            Target::OnDemand | Target::None => None,
        }
    }

    /// Its kind, as stored and shown.
    pub fn kind(&self) -> PlacementKind {
        match self {
            Target::Grant { .. } => PlacementKind::Grant,
            Target::Lent { .. } => PlacementKind::Lent,
            Target::Reservation { .. } => PlacementKind::Reservation,
            Target::OnDemand => PlacementKind::OnDemand,
            Target::None => PlacementKind::None,
        }
    }
}

impl Target {
    fn from_destination(d: &Destination, res: &ReservationRow) -> Target {
        match d {
            Destination::Grant(g) => Target::Grant {
                grant_id: g.clone(),
                account_id: res.account_id.clone(),
                reservation_id: res.reservation_id.clone(),
            },
            Destination::Reservation => Target::Reservation {
                account_id: res.account_id.clone(),
                reservation_id: res.reservation_id.clone(),
            },
            Destination::OnDemand => Target::OnDemand,
            Destination::None => Target::None,
        }
    }

    pub(super) fn from_seat(seat: Seat, res: &ReservationRow) -> Target {
        match seat {
            Seat::Grant(g) => Target::Grant {
                grant_id: g,
                account_id: res.account_id.clone(),
                reservation_id: res.reservation_id.clone(),
            },
            Seat::Lent(g) => Target::Lent {
                grant_id: g,
                account_id: res.account_id.clone(),
                reservation_id: res.reservation_id.clone(),
            },
            Seat::Ordinary => Target::Reservation {
                account_id: res.account_id.clone(),
                reservation_id: res.reservation_id.clone(),
            },
        }
    }

    /// Its grant, account and reservation columns.
    pub(super) fn columns(&self) -> (Option<&str>, Option<&str>, Option<&str>) {
        let grant_id = match self {
            Target::Grant { grant_id, .. } | Target::Lent { grant_id, .. } => {
                Some(grant_id.as_str())
            }
            _ => None,
        };
        let (account_id, reservation_id) = self.reservation().unzip();
        (grant_id, account_id, reservation_id)
    }
}

/// Records a ledger instance's new placement and power from instant `at`
/// (it holds a running slot when `running`): see [`place_with`].
pub async fn place_at(
    conn: &mut AsyncPgConnection,
    inst: &InstanceRow,
    target: &Target,
    state: InstanceState,
    at: i64,
) -> Result<()> {
    let running = state == InstanceState::Running;
    place_with(
        conn,
        inst,
        target,
        state,
        running,
        !inst.managed || running,
        at,
    )
    .await
}

/// Records `inst`'s new placement, state and power from instant `at`:
/// updates the row and closes its open segment at `at`, opening the next
/// one (unless it is gone). A segment that would be empty is dropped. The
/// segment holds a running slot when `holds_slot`, and is billed when it does
/// and `billed` says so: always for a ledger instance, for a managed one as
/// its lifecycle says (`grants_core::vm::Transition::billed`: from its VM
/// seen running, contract 3.12, until a reclaimed VM is gone, 5.5).
pub async fn place_with<'a>(
    conn: &AsyncPgConnection,
    inst: impl Into<Subject<'a>>,
    target: &Target,
    state: InstanceState,
    holds_slot: bool,
    billed: bool,
    at: i64,
) -> Result<()> {
    let inst: Subject<'_> = inst.into();
    // Billed history is never rewritten: a transition settled after its
    // instant was metered takes effect at the first unmetered instant.
    let at = at.max(inst.usage_metered_through);
    let kind = target.kind();
    let lent = kind == PlacementKind::Lent && !state.is_final();
    let (grant_id, account_id, reservation_id) = target.columns();
    // The four writes depend on nothing they answer: pipelined, in order,
    // one round trip.
    let (mut c1, mut c2, mut c3, mut c4) = (conn, conn, conn, conn);
    // Fixed texts (every value bound): kept prepared (`db::cached`).
    let placed = cached(
        diesel::update(instances::table.find(inst.instance_id)).set((
            instances::placement_kind.eq(kind),
            instances::grant_id.eq(grant_id),
            instances::account_id.eq(account_id),
            instances::reservation_id.eq(reservation_id),
            instances::state.eq(state),
            instances::powered.eq(holds_slot && !state.is_final()),
            instances::deleted_at.eq(if state == InstanceState::Deleted {
                Some(at)
            } else {
                inst.deleted_at
            }),
            // A borrower keeps the instant it took its lent slot, and its
            // pending interruption, while it holds the slot; anything else
            // has neither.
            instances::lent_at.eq(diesel::dsl::sql::<Nullable<BigInt>>("CASE WHEN ")
                .bind::<Bool, _>(lent)
                .sql(" THEN coalesce(lent_at, ")
                .bind::<BigInt, _>(at)
                .sql(") END")),
            instances::interrupt_at.eq(diesel::dsl::sql::<Nullable<BigInt>>("CASE WHEN ")
                .bind::<Bool, _>(lent)
                .sql(" THEN interrupt_at END")),
        )),
    )
    .execute(&mut c1);
    let closed = cached(
        diesel::update(
            seg::table
                .filter(seg::instance_id.eq(inst.instance_id))
                .filter(seg::to_ms.is_null())
                .filter(seg::from_ms.lt(at)),
        )
        .set(seg::to_ms.eq(at)),
    )
    .execute(&mut c2);
    let dropped = diesel::delete(
        seg::table
            .filter(seg::instance_id.eq(inst.instance_id))
            .filter(seg::to_ms.is_null()),
    )
    .execute(&mut c3);
    // billing "none" instances bill nothing wherever they are.
    let seg_kind = if inst.billing == InstanceBilling::None {
        PlacementKind::None
    } else {
        kind
    };
    let opened = async {
        if state.is_final() {
            return Ok(0);
        }
        diesel::insert_into(seg::table)
            .values((
                seg::instance_id.eq(inst.instance_id),
                seg::from_ms.eq(at),
                seg::kind.eq(seg_kind),
                seg::running.eq(holds_slot),
                seg::billed.eq(billed),
                seg::grant_id.eq(grant_id),
                seg::account_id.eq(account_id),
                seg::reservation_id.eq(reservation_id),
            ))
            .execute(&mut c4)
            .await
    };
    futures::try_join!(placed, closed, dropped, opened)?;
    Ok(())
}

/// Applies a settlement move of one instance on `res` at `at`.
pub async fn apply_move(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
    instance_id: &str,
    to: &Destination,
    at: i64,
) -> Result<()> {
    let inst = InstanceRow::find(conn, instance_id)
        .await?
        .ok_or_else(|| StorageError::internal(format!("move of unknown instance {instance_id}")))?;
    let target = Target::from_destination(to, res);
    place_with(
        conn,
        &inst,
        &target,
        inst.state,
        inst.holds_slot,
        inst.billed(),
        at,
    )
    .await
}

/// Moves instances taken into a grant at `at`.
pub async fn take_in(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
    grant_id: &str,
    ids: &[String],
    at: i64,
) -> Result<()> {
    for id in ids {
        apply_move(conn, res, id, &Destination::Grant(grant_id.to_owned()), at).await?;
    }
    Ok(())
}

/// What the placement view needs of a reservation's seated instances (the
/// live ones holding a slot): how many each grant holds, and how many hold a
/// running slot, in all and outside grants. Counted in PostgreSQL, so a
/// placement reads one row per grant however many instances are seated.
#[derive(Debug, Clone, Default)]
pub struct Seats {
    /// Seated instances per grant id (the grantee's).
    held: HashMap<String, u64>,
    /// Borrowers per lending grant id.
    lent: HashMap<String, u64>,
    /// Seated instances holding a running slot.
    running: u64,
    /// Of those, the ones on ordinary slots (placed on the reservation).
    running_outside_grants: u64,
}

/// [`Seats`] of a reservation, on a shared connection (pipelined after the
/// reservation's lock, it runs once the lock is held).
pub async fn seats(
    conn: &AsyncPgConnection,
    account_id: &str,
    reservation_id: &str,
) -> Result<Seats> {
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = Nullable<Text>)]
        grant_id: Option<String>,
        #[diesel(sql_type = BigInt)]
        held: i64,
        #[diesel(sql_type = BigInt)]
        lent: i64,
        #[diesel(sql_type = BigInt)]
        running: i64,
        #[diesel(sql_type = BigInt)]
        running_outside: i64,
    }
    let mut conn = conn;
    let counts: Vec<Count> = cached(
        diesel::sql_query(include_str!("../sql/seats.sql"))
            .bind::<Text, _>(account_id)
            .bind::<Text, _>(reservation_id),
    )
    .load(&mut conn)
    .await?;
    let mut seats = Seats::default();
    for c in counts {
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        seats.running += n(c.running);
        seats.running_outside_grants += n(c.running_outside);
        if let Some(g) = c.grant_id {
            *seats.lent.entry(g.clone()).or_default() += n(c.lent);
            *seats.held.entry(g).or_default() += n(c.held);
        }
    }
    Ok(seats)
}

/// The placement view of a settled reservation, its live grants taken from
/// `open` (its open grants started by `now`, as settlement left them).
pub(super) async fn view(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
    now: i64,
    open: Vec<GrantRow>,
) -> Result<ReservationView> {
    let seats = seats(conn, &res.account_id, &res.reservation_id).await?;
    Ok(view_of(res, now, open, &seats))
}

/// [`view`] from seats already counted.
pub(super) fn view_of(
    res: &ReservationRow,
    now: i64,
    open: Vec<GrantRow>,
    seats: &Seats,
) -> ReservationView {
    let live_grants = settlement::live_at(open, now)
        .into_iter()
        .map(|g| {
            let held = seats.held.get(&g.grant_id).copied().unwrap_or(0);
            let lent = seats.lent.get(&g.grant_id).copied().unwrap_or(0);
            grants_core::LiveGrant {
                slots: u32::try_from(g.slots).unwrap_or(0),
                starts_at: g.starts_at,
                held: u32::try_from(held).unwrap_or(u32::MAX),
                lends: g.lending,
                lent: u32::try_from(lent).unwrap_or(u32::MAX),
                grant_id: g.grant_id,
                tenant_id: g.tenant_id,
                project_id: g.project_id,
            }
        })
        .collect();
    ReservationView {
        reservation_id: res.reservation_id.clone(),
        total: u64::try_from(res.total).unwrap_or(0),
        provider_in_use: u64::try_from(res.provider_in_use).unwrap_or(0),
        live_grants,
        running_outside_grants: seats.running_outside_grants,
        running: seats.running,
    }
}
