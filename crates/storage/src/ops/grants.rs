//! Reservation grants: create, get, list, end (seed-reservation-grants.md,
//! contract 3.6).

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use grants_core::{ForcedEnd, GrantState, SettlementGrant, Term, Transition};

use crate::actor::Actor;
use crate::error::{Detail, ErrorKind, Field, Reason, Result, StorageError};
use crate::ids;
use crate::ids::{AccountId, GrantId, TenantId};
use crate::locks;
use crate::model::event_data::EventData;
use crate::model::events::{self, NewEvent};
use crate::model::grant::{GrantFilter, GrantRow, NewGrantRow};
use crate::model::idempotency::{self, Claim, Created, KeyedRequest};
use crate::model::keyset::{Page, Position};
use crate::model::reservation::ReservationRow;
use crate::model::states::{ReservationStatus, TenantState};
use crate::ops::accounts;
use crate::ops::pools;
use crate::ops::settlement;
use crate::ops::tenancy;

/// How far in the past a new grant's `startsAt` may lie.
pub const MAX_START_IN_PAST_MS: i64 = 5 * 60 * 1000;

/// A grant as the API shows it: the row and what is true of it at the
/// server's now.
#[derive(Debug, Clone)]
pub struct Grant {
    /// The stored row (its `reason` and `ended_at` are what settlement has
    /// recorded so far; read the fields below instead).
    pub row: GrantRow,
    /// The state at now.
    pub state: GrantState,
    /// Why it ended or was cancelled.
    pub reason: Option<String>,
    /// End or cancellation instant.
    pub ended_at: Option<i64>,
    /// For a lending grant, its slots lent right now (borrowers not being
    /// interrupted); `None` for a grant that does not lend, or not read.
    pub lent_slots: Option<u32>,
}

impl Grant {
    /// Reads `lent_slots` of the lending grants among `grants` (one
    /// statement).
    pub async fn with_lent_slots(
        conn: &mut AsyncPgConnection,
        mut grants: Vec<Grant>,
    ) -> Result<Vec<Grant>> {
        use crate::model::states::{InstanceState, PlacementKind};
        use crate::schema::instances;
        let ids: Vec<&str> = grants
            .iter()
            .filter(|g| g.row.lending)
            .map(|g| g.row.grant_id.as_str())
            .collect();
        if ids.is_empty() {
            return Ok(grants);
        }
        let counts: Vec<(Option<String>, i64)> = instances::table
            .filter(instances::grant_id.eq_any(&ids))
            .filter(instances::placement_kind.eq(PlacementKind::Lent))
            .filter(instances::interrupt_at.is_null())
            .filter(instances::state.ne_all([InstanceState::Deleted, InstanceState::Failed]))
            .group_by(instances::grant_id)
            .select((instances::grant_id, diesel::dsl::count_star()))
            .load(conn)
            .await?;
        for g in grants.iter_mut().filter(|g| g.row.lending) {
            let n = counts
                .iter()
                .find(|(id, _)| id.as_deref() == Some(g.row.grant_id.as_str()))
                .map_or(0, |(_, n)| *n);
            g.lent_slots = Some(u32::try_from(n).unwrap_or(u32::MAX));
        }
        Ok(grants)
    }

    /// The API view of a row at `now`.
    pub fn at(row: GrantRow, now: i64) -> Grant {
        let state = row.state_at(now);
        let (reason, ended_at) = match state {
            GrantState::Scheduled | GrantState::Active => (None, None),
            // An ended grant whose end settlement has not recorded yet ended by its term.
            GrantState::Ended => (
                row.reason.clone().or_else(|| Some("term-over".into())),
                Some(row.ends_at),
            ),
            GrantState::Cancelled => (row.reason.clone(), row.ended_at),
        };
        Grant {
            row,
            state,
            reason,
            ended_at,
            lent_slots: None,
        }
    }
}

/// Input of `reservationGrants.create`.
#[derive(Debug, Clone)]
pub struct NewGrant<'a> {
    /// The root provider account.
    pub account_id: &'a str,
    /// The reservation on it.
    pub reservation_id: &'a str,
    /// The grantee.
    pub grant_tenant_id: &'a str,
    /// One project of the grantee, optionally.
    pub project_id: Option<&'a str>,
    /// Slots to commit.
    pub slots: i32,
    /// Term start.
    pub starts_at: i64,
    /// Term end.
    pub ends_at: i64,
}

/// `reservationGrants.create`, by root, idempotent under `key`.
pub async fn create(
    conn: &mut AsyncPgConnection,
    root: &TenantId,
    new: NewGrant<'_>,
    key: KeyedRequest<'_>,
    now: i64,
) -> Result<Created<Grant>> {
    let root = root.as_str();
    conn.transaction::<_, StorageError, _>(async move |conn| {
        let id = ids::new_id(GRANT_PREFIX, now);
        let claimed = idempotency::claim_with_generic_plans(conn, key, &id, now).await?;
        if let Claim::Replay(existing) = claimed {
            let row = GrantRow::find(conn, &existing)
                .await?
                .ok_or_else(|| StorageError::not_found("grant", &existing))?;
            return Ok(Created::replay(Grant::at(row, now)));
        }
        // Every check that needs no lock runs before the reservation's row
        // lock, which serializes the creates on a reservation: under it, only
        // what must be (the reservation as locked, settlement, capacity, the
        // writes).
        let mut plan = plan(conn, root, &new, now, Locking::Lock).await?;
        // The lock and the two reads under it go in one round trip: pipelined,
        // each statement runs after the one before it with a snapshot of its
        // own (read committed), so the reads see what the lock's previous
        // holder committed.
        let term = Term::new(new.starts_at, new.ends_at);
        let (locked, started, granted) = {
            let c = &*conn;
            futures::try_join!(
                locks::reservation(c, new.account_id, new.reservation_id),
                locks::started_grants_of(c, new.account_id, new.reservation_id, now),
                peak(c, new.account_id, new.reservation_id, term),
            )?
        };
        let locked =
            locked.ok_or_else(|| StorageError::not_found("reservation", new.reservation_id))?;
        let pool_id = ready_pool(&locked)?;
        if pool_id != plan.pool_id {
            // Rebound between the read and the lock: offer the new pool.
            offered(conn, root, new.grant_tenant_id, &pool_id).await?;
            plan.pool_id = pool_id;
        }
        plan.reservation = locked;
        // Capacity, decided under the reservation's row lock once the
        // transitions due before the new grant are settled (a transition
        // written may change the steps: they are read again).
        let mut events = Vec::new();
        let settled = settlement::settle_locked(conn, &plan.reservation, started, now, &mut events);
        let granted = if settled.await? > 0 {
            peak(conn, new.account_id, new.reservation_id, term).await?
        } else {
            granted
        };
        let total = u64::try_from(plan.reservation.total).unwrap_or(0);
        let slots = plan.slots;
        grants_core::fits(total, granted, slots).map_err(|short| {
            StorageError::new(
                ErrorKind::CapacityUnavailable,
                format!("the reservation cannot commit {slots} more slots over that term: {short}"),
            )
            .with(Detail::Capacity {
                total: short.total,
                granted: short.granted,
            })
        })?;
        let (res, pool_id) = (plan.reservation, plan.pool_id);
        if new.starts_at < now {
            // Deficit credits (contract 5.4): a start before a change of the
            // total seen since is checked by metering.
            crate::ops::totals::mark_backdated(
                conn,
                new.account_id,
                new.reservation_id,
                new.starts_at,
            )
            .await?;
        }
        let inserted = NewGrantRow {
            grant_id: &id,
            account_id: new.account_id,
            reservation_id: new.reservation_id,
            pool_id: &pool_id,
            tenant_id: new.grant_tenant_id,
            project_id: new.project_id,
            slots: new.slots,
            starts_at: new.starts_at,
            ends_at: new.ends_at,
            created_at: now,
        };
        events.push(NewEvent::new(
            new.grant_tenant_id,
            EventData::GrantCreated(inserted.change()),
            now,
        ));
        // A grant starting at or before now activates (and takes in) at once,
        // and is answered as settlement leaves it; one starting later has
        // nothing due (the rest was settled above) and is answered as
        // inserted, the insert and the events in one round trip.
        let row = if new.starts_at <= now {
            GrantRow::insert(conn, inserted).await?;
            settlement::settle(conn, &res, now, &mut events).await?;
            events::publish(conn, now, events).await?;
            GrantRow::find(conn, &id)
                .await?
                .ok_or_else(|| StorageError::internal("grant vanished"))?
        } else {
            let c = &*conn;
            let (row, ()) = futures::try_join!(
                GrantRow::insert(c, inserted),
                events::publish(c, now, events)
            )?;
            debug_assert_eq!(row.change(None), inserted.change());
            row
        };
        tracing::info!(
            grant = %id,
            reservation = %new.reservation_id,
            tenant = %new.grant_tenant_id,
            slots,
            starts_at = new.starts_at,
            ends_at = new.ends_at,
            "grant created"
        );
        Ok(Created::new(Grant::at(row, now)))
    })
    .await
}

/// Whether [`plan`] locks the grantee (`create`) or only reads it
/// (`preview`). The reservation is read unlocked either way; `create` locks
/// it after the plan and checks it again as locked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Locking {
    /// The grantee's row `FOR SHARE` (the first lock of the lock order).
    Lock,
    /// Plain reads: a preview writes and holds nothing.
    Read,
}

/// Everything `create` checks before it writes, shared with `preview` so
/// the two never disagree: the checks in order (grantee, account,
/// reservation, its state and pool, the offer, the project, the term);
/// [`fit`] then gives the capacity answer.
struct Plan {
    /// The reservation as read (unlocked).
    reservation: ReservationRow,
    /// The pool it serves.
    pool_id: String,
    /// The new grant's slots.
    slots: u32,
}

/// The capacity answer of a planned grant: the peak of the existing grants
/// over its term, and whether it fits (contract 3.6).
async fn fit(
    conn: &mut AsyncPgConnection,
    plan: &Plan,
    new: &NewGrant<'_>,
) -> Result<(u64, std::result::Result<(), grants_core::CapacityShort>)> {
    let res = &plan.reservation;
    let term = Term::new(new.starts_at, new.ends_at);
    let granted = peak(conn, &res.account_id, &res.reservation_id, term).await?;
    let total = u64::try_from(res.total).unwrap_or(0);
    Ok((granted, grants_core::fits(total, granted, plan.slots)))
}

async fn plan(
    conn: &mut AsyncPgConnection,
    root: &str,
    new: &NewGrant<'_>,
    now: i64,
    locking: Locking,
) -> Result<Plan> {
    // Existence: the account is root's, the reservation is on it, the
    // grantee exists. The grantee's row is locked first (the lock order:
    // tenant, then reservation), so a deletion of the grantee either
    // commits before this grant and refuses it here, or waits for it and
    // then ends or cancels it.
    // The three reads in one round trip (pipelined, in that order); their
    // answers are checked in the same order.
    let grantee = async |c: &AsyncPgConnection| match locking {
        Locking::Lock => locks::tenant_shared(c, new.grant_tenant_id).await,
        Locking::Read => Ok(tenancy::get_tenant(c, new.grant_tenant_id)
            .await?
            .is_some_and(|t| t.state == TenantState::Active)),
    };
    let (active, account, res) = {
        let c = &*conn;
        futures::try_join!(
            grantee(c),
            accounts::find_optional(c, root, new.account_id),
            ReservationRow::find(c, new.account_id, new.reservation_id),
        )?
    };
    if !active {
        return Err(StorageError::not_found("tenant", new.grant_tenant_id));
    }
    account.ok_or_else(|| StorageError::not_found("provider account", new.account_id))?;
    let res = res.ok_or_else(|| StorageError::not_found("reservation", new.reservation_id))?;
    let pool_id = ready_pool(&res)?;
    // The grantee may use the pool, and the project is the grantee's.
    offered(conn, root, new.grant_tenant_id, &pool_id).await?;
    if let Some(project) = new.project_id
        && tenancy::tenant_project(conn, new.grant_tenant_id, project)
            .await?
            .is_none()
    {
        return Err(StorageError::invalid(
            Field::ProjectId,
            Reason::ProjectNotGrantee,
            format!(
                "project {project} is not a project of {}",
                new.grant_tenant_id
            ),
        ));
    }
    // The term.
    if new.starts_at < now - MAX_START_IN_PAST_MS {
        return Err(StorageError::invalid(
            Field::StartsAt,
            Reason::Past,
            "startsAt may be at most 5 minutes in the past",
        )
        .with(Detail::Now(now)));
    }
    if new.ends_at <= new.starts_at {
        return Err(StorageError::invalid(
            Field::EndsAt,
            Reason::Range,
            "endsAt must be after startsAt",
        ));
    }
    Ok(Plan {
        reservation: res,
        pool_id,
        slots: u32::try_from(new.slots).map_err(StorageError::internal)?,
    })
}

/// The pool of a reservation that can commit grants: ready and bound.
fn ready_pool(res: &ReservationRow) -> Result<String> {
    if res.status != ReservationStatus::Ready {
        return Err(StorageError::invalid_state(format!(
            "the reservation is {}, not ready",
            res.status
        ))
        .with(Detail::ReservationId(res.reservation_id.clone()))
        .with(Detail::ReservationStatus(res.status)));
    }
    res.pool_id.clone().ok_or_else(|| {
        StorageError::invalid_state("the reservation is not bound to a pool")
            .with(Detail::ReservationId(res.reservation_id.clone()))
            .with(Detail::Reason(Reason::Unbound))
    })
}

/// Refuses a grantee the pool is not offered to.
async fn offered(
    conn: &mut AsyncPgConnection,
    root: &str,
    grantee: &str,
    pool_id: &str,
) -> Result<()> {
    if pools::visible(conn, grantee, root, pool_id).await? {
        return Ok(());
    }
    Err(StorageError::invalid(
        Field::GrantTenantId,
        Reason::PoolNotOffered,
        format!("pool {pool_id} is not offered to {grantee}"),
    )
    .with(Detail::PoolId(pool_id.to_owned())))
}

/// `reservationGrants.preview` (contract 3.6): what `create` of the same
/// input would decide and bill, written nowhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preview {
    /// Whether the grant fits the reservation.
    pub fits: bool,
    /// The reservation's total.
    pub total: u64,
    /// The peak overlap of the existing grants over the term.
    pub granted: u64,
    /// `total - granted`, floored at 0.
    pub available: u64,
    /// Micro-slot-hours `vm.grant.slot.hours` would add up to.
    pub slot_micros: i64,
    /// The first billed hour bucket's start.
    pub first_period_start: i64,
    /// The last billed hour bucket's end.
    pub last_period_end: i64,
    /// The instances it would take in if it started now (none for a future
    /// start, or when it does not fit).
    pub take_in: Vec<String>,
}

/// The id a previewed grant goes by in the engine's dry run: no real grant
/// id has it, so no instance is ever found in it.
const PREVIEW_GRANT: &str = "rgrant_preview";

/// `reservationGrants.preview`: the checks of `create`, from the same
/// `plan`, in a read-only transaction; a grant that does not fit is not an
/// error. `takeIn` comes from the settlement engine run on a copy of the
/// reservation's grants and seated instances with the new grant added.
pub async fn preview(
    conn: &mut AsyncPgConnection,
    root: &TenantId,
    new: NewGrant<'_>,
    now: i64,
) -> Result<Preview> {
    let root = root.as_str();
    conn.build_transaction()
        .read_only()
        .run::<_, StorageError, _>(async move |conn| {
            let plan = plan(conn, root, &new, now, Locking::Read).await?;
            let (granted, fits) = fit(conn, &plan, &new).await?;
            let term = Term::new(new.starts_at, new.ends_at);
            let (first, last) = grants_core::notices::billed_periods(term)
                .ok_or_else(|| StorageError::internal("an empty term passed the checks"))?;
            let total = u64::try_from(plan.reservation.total).unwrap_or(0);
            let take_in = if fits.is_ok() && new.starts_at <= now {
                would_take_in(conn, &plan, &new, now).await?
            } else {
                Vec::new()
            };
            Ok(Preview {
                fits: fits.is_ok(),
                total,
                granted,
                available: total.saturating_sub(granted),
                slot_micros: grants_core::notices::committed_slot_micros(plan.slots, term),
                first_period_start: first,
                last_period_end: last,
                take_in,
            })
        })
        .await
}

/// The instances a grant starting now would take in: settlement up to now
/// with it added as created now, run in memory.
async fn would_take_in(
    conn: &mut AsyncPgConnection,
    plan: &Plan,
    new: &NewGrant<'_>,
    now: i64,
) -> Result<Vec<String>> {
    let res = &plan.reservation;
    let open = settlement::open_grants_unlocked(conn, res).await?;
    let seated = settlement::seated_instances(conn, res).await?;
    // Transitions already due come first, as in create.
    let settled = grants_core::views::preview::preview_settlement(&open, &seated, now);
    let mut grants = settled.grants;
    grants.push(SettlementGrant {
        grant_id: PREVIEW_GRANT.to_owned(),
        tenant_id: new.grant_tenant_id.to_owned(),
        project_id: new.project_id.map(str::to_owned),
        slots: plan.slots,
        starts_at: new.starts_at,
        ends_at: new.ends_at,
        created_at: now,
        settled: GrantState::Scheduled,
    });
    Ok(grants_core::settle(&grants, &settled.instances, now)
        .into_iter()
        .find_map(|t| match t {
            Transition::Activate {
                grant_id, take_in, ..
            } if grant_id == PREVIEW_GRANT => Some(take_in),
            _ => None,
        })
        .unwrap_or_default())
}

/// The peak of the slots committed to the reservation's non-cancelled grants
/// over `term`, from the committed step function kept as rows
/// (`reservation_steps`, exact by the triggers on `grants`): the level at
/// the term's start and the levels of the rows inside it
/// (`grants_core::capacity::peak_of_steps`), so the read costs the steps
/// within the term, whatever the number of grants that overlap it.
pub async fn peak(
    conn: &AsyncPgConnection,
    account_id: &str,
    reservation_id: &str,
    term: Term,
) -> Result<u64> {
    #[derive(QueryableByName)]
    struct Peak {
        #[diesel(sql_type = BigInt)]
        peak: i64,
    }
    if term.is_empty() {
        return Ok(0);
    }
    let mut conn = conn;
    let found: Peak = crate::db::cached(
        diesel::sql_query(include_str!("sql/grants_peak.sql"))
            .bind::<Text, _>(account_id)
            .bind::<Text, _>(reservation_id)
            .bind::<BigInt, _>(term.start)
            .bind::<BigInt, _>(term.end),
    )
    .get_result(&mut conn)
    .await?;
    Ok(u64::try_from(found.peak).unwrap_or(0))
}

/// `reservationGrants.get`: the grantee reads its grants; the root tenant reads any.
pub async fn get(
    conn: &mut AsyncPgConnection,
    actor: &Actor,
    grant_id: &GrantId,
    now: i64,
) -> Result<Grant> {
    let (tenant, root) = (actor.tenant().as_str(), actor.root().as_str());
    let grant_id = grant_id.as_str();
    let grant = match GrantRow::find(conn, grant_id).await? {
        Some(row) if row.tenant_id == tenant || tenant == root => Grant::at(row, now),
        _ => return Err(StorageError::not_found("grant", grant_id)),
    };
    let mut one = Grant::with_lent_slots(conn, vec![grant]).await?;
    one.pop()
        .ok_or_else(|| StorageError::internal("a grant read went missing"))
}

/// `reservationGrants.list`: one page of the grants matching `filter`
/// (its `tenant_id` is the acting tenant, or `None` for root's `all`),
/// newest first, after position `after`, at most `limit` (1 to
/// [`crate::LIST_LIMIT`]), each with its state at `now`.
pub async fn list(
    conn: &mut AsyncPgConnection,
    filter: &GrantFilter,
    after: Option<Position>,
    limit: i64,
    now: i64,
) -> Result<Page<Grant>> {
    let rows = GrantRow::page(conn, filter, after.as_ref(), limit + 1, now).await?;
    let page = Page::from_rows(rows, limit, after, GRANT_PREFIX, |r| {
        Position::of(r.created_at, &r.grant_id)
    });
    let mut page = page.map(|r| Grant::at(r, now));
    page.items = Grant::with_lent_slots(conn, page.items).await?;
    Ok(page)
}

/// The TypeID prefix of grant ids.
pub const GRANT_PREFIX: &str = "rgrant";

/// `reservationGrants.end`, by root: ends the grant now (cancels it if it
/// has not started). An ended or cancelled grant is returned unchanged.
pub async fn end(
    conn: &mut AsyncPgConnection,
    root: &TenantId,
    account_id: &AccountId,
    grant_id: &GrantId,
    now: i64,
) -> Result<Grant> {
    let root = root.as_str();
    let account_id = account_id.as_str();
    let grant_id = grant_id.as_str();
    conn.transaction::<_, StorageError, _>(async move |conn| {
        accounts::find(conn, root, account_id).await?;
        let row = match GrantRow::find(conn, grant_id).await? {
            Some(row) if row.account_id == account_id => row,
            _ => return Err(StorageError::not_found("grant", grant_id)),
        };
        let res = locks::reservation(conn, &row.account_id, &row.reservation_id)
            .await?
            .ok_or_else(|| StorageError::internal("grant without reservation"))?;
        let mut events = Vec::new();
        settlement::force_end(
            conn,
            &res,
            &ForcedEnd::Root {
                grant_id: grant_id.to_owned(),
            },
            now,
            &mut events,
        )
        .await?;
        events::publish(conn, now, events).await?;
        let row = GrantRow::find(conn, grant_id)
            .await?
            .ok_or_else(|| StorageError::internal("grant vanished"))?;
        tracing::info!(grant = %grant_id, state = %row.settled_state, "grant end requested");
        Ok(Grant::at(row, now))
    })
    .await
}
