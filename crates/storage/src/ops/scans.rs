//! The scan protocol (contract 3.5, 6): a scan claims its account (a ticket
//! and a lease shared among replicas), lists outside any transaction, and
//! applies the answer in one transaction, in ticket order; a failure is
//! counted and backed off.

use std::collections::HashSet;

use diesel::dsl::Eq;
use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use grants_core::{Commitment, ForcedEnd, GrantState, Term};

use crate::clock::DB_NOW_MS;
use crate::error::{Result, StorageError};
use crate::ids::TenantId;
use crate::locks;
use crate::model::event_data::{self, EventData};
use crate::model::events::{self, NewEvent};
use crate::model::states::{ReservationStatus, SettledState};
use crate::model::{grant::GrantRow, reservation::ReservationRow};
use crate::ops::accounts::{self, Account};
use crate::ops::{settlement, totals};
use crate::schema::{grants, provider_accounts, reservations};

/// A reservation as a provider listed it: what a scan's answer is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedReservation {
    /// The provider's id; for GCE `projects/{project}/zones/{zone}/reservations/{name}`.
    pub reservation_id: String,
    /// The zone, e.g. `us-central1-a`.
    pub zone: String,
    /// The region, e.g. `us-central1`.
    pub region: String,
    /// The machine type of the reserved VMs, e.g. `n2-standard-4`.
    pub flavor: String,
    /// How many VMs the reservation holds.
    pub total: i64,
    /// How many of them the provider sees in use.
    pub in_use: i64,
    /// Whether it can be consumed now ([`ReservationStatus::Ready`] or
    /// [`ReservationStatus::NotReady`]).
    pub status: ReservationStatus,
}

/// The columns of a reservation row a scan sets from what the provider
/// listed: all but its key and `gone_at`.
type Listed<'a> = (
    Eq<reservations::region, &'a String>,
    Eq<reservations::zone, &'a String>,
    Eq<reservations::flavor, &'a String>,
    Eq<reservations::total, i64>,
    Eq<reservations::provider_in_use, i64>,
    Eq<reservations::status, &'static str>,
    Eq<reservations::last_scanned_at, i64>,
);

/// [`Listed`] of `r`, scanned at `now` (negative counts read as 0).
fn as_listed(r: &ListedReservation, now: i64) -> Listed<'_> {
    (
        reservations::region.eq(&r.region),
        reservations::zone.eq(&r.zone),
        reservations::flavor.eq(&r.flavor),
        reservations::total.eq(r.total.max(0)),
        reservations::provider_in_use.eq(r.in_use.max(0)),
        reservations::status.eq(r.status.as_str()),
        reservations::last_scanned_at.eq(now),
    )
}

/// What one scan changed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ScanOutcome {
    /// Reservations seen for the first time.
    pub appeared: u64,
    /// Reservations found gone by this scan.
    pub gone: u64,
    /// Grants ended or cancelled because their reservation is gone.
    pub grants_closed: u64,
    /// `capacity-short` events published.
    pub capacity_short: u64,
    /// The answer was not applied: a scan of the account claimed later had
    /// already been applied.
    pub stale: bool,
}

/// Applies a provider's answer for one claimed scan at the scan's instant
/// `now`, in one transaction: upserts what is seen, marks what is missing
/// `gone` (ending its active grants and cancelling its scheduled ones), and
/// reports capacity shortfalls once per change of total.
///
/// The account's row is locked first and the answer is applied only if no
/// scan claimed after this one has been applied meanwhile; a stale answer
/// changes nothing and comes back with [`ScanOutcome::stale`] set.
pub async fn apply_scan(
    conn: &mut AsyncPgConnection,
    root: &TenantId,
    claim: &ScanClaim,
    seen: &[ListedReservation],
    now: i64,
) -> Result<ScanOutcome> {
    let root = root.as_str();
    let root = root.to_owned();
    let account_id = claim.account.account_id.as_str();
    let ticket = claim.ticket;
    conn.transaction::<_, StorageError, _>(async move |conn| {
        let mut outcome = ScanOutcome::default();
        let applied = locks::account_for_scan(conn, account_id).await?;
        let Some(applied) = applied else {
            return Err(StorageError::not_found("provider account", account_id));
        };
        if applied >= ticket {
            release_lease(conn, claim).await?;
            tracing::info!(
                account = %account_id,
                ticket,
                applied,
                "a newer scan of the account was applied meanwhile; this answer is dropped"
            );
            outcome.stale = true;
            return Ok(outcome);
        }
        diesel::update(provider_accounts::table.find(account_id))
            .set((
                provider_accounts::scan_applied_seq.eq(ticket),
                provider_accounts::scan_failures.eq(0),
                provider_accounts::scan_retry_at.eq(None::<i64>),
            ))
            .execute(conn)
            .await?;
        release_lease(conn, claim).await?;
        let mut events = Vec::new();
        // Lock the account's known reservations in id order (the lock order of
        // every operation), then add the new ones.
        let known = locks::account_reservations(conn, account_id).await?;
        let seen_ids: HashSet<&str> = seen.iter().map(|r| r.reservation_id.as_str()).collect();
        let mut seen_sorted: Vec<&ListedReservation> = seen.iter().collect();
        seen_sorted.sort_by(|a, b| a.reservation_id.cmp(&b.reservation_id));
        for r in seen_sorted {
            let before = known.iter().find(|k| k.reservation_id == r.reservation_id);
            let row: ReservationRow = diesel::insert_into(reservations::table)
                .values((
                    reservations::account_id.eq(account_id),
                    reservations::reservation_id.eq(&r.reservation_id),
                    as_listed(r, now),
                ))
                .on_conflict((reservations::account_id, reservations::reservation_id))
                .do_update()
                .set((as_listed(r, now), reservations::gone_at.eq(None::<i64>)))
                .returning(ReservationRow::as_returning())
                .get_result(conn)
                .await?;
            // Every change of total is kept, for the deficit credits (5.4).
            let (account, id) = (account_id, r.reservation_id.as_str());
            match before {
                None => {
                    outcome.appeared += 1;
                    totals::record(conn, account, id, now, row.total, false).await?;
                }
                Some(b) if b.total != row.total => {
                    settlement::settle(conn, &row, now, &mut events).await?;
                    let short = capacity_short(conn, &root, &row, now, &mut events).await?;
                    if short {
                        outcome.capacity_short += 1;
                    }
                    totals::record(conn, account, id, now, row.total, short).await?;
                }
                Some(b) if b.status == ReservationStatus::Gone => {
                    totals::record(conn, account, id, now, row.total, false).await?;
                }
                Some(_) => {}
            }
        }
        for k in known.iter().filter(|k| {
            k.status != ReservationStatus::Gone && !seen_ids.contains(k.reservation_id.as_str())
        }) {
            let queued = events.len();
            settlement::force_end(conn, k, &ForcedEnd::ReservationGone, now, &mut events).await?;
            // Grants ended or cancelled by the loss (not the instances' move
            // off the reservation, nor term ends settled on the way).
            let closed = events
                .iter()
                .skip(queued)
                .filter(|e| match &e.data {
                    EventData::GrantEnded(g) | EventData::GrantCancelled(g) => {
                        g.reason.as_deref()
                            == Some(grants_core::EndReason::ReservationGone.as_str())
                    }
                    _ => false,
                })
                .count();
            diesel::update(reservations::table.find((&k.account_id, &k.reservation_id)))
                .set((
                    reservations::status.eq(ReservationStatus::Gone),
                    reservations::gone_at.eq(now),
                    reservations::last_scanned_at.eq(now),
                ))
                .execute(conn)
                .await?;
            // Its grants ended at `now`: nothing is owed after.
            totals::record(conn, account_id, &k.reservation_id, now, 0, false).await?;
            tracing::warn!(
                account = %account_id,
                reservation = %k.reservation_id,
                "reservation no longer reported by the provider: gone"
            );
            outcome.gone += 1;
            outcome.grants_closed += closed as u64;
        }
        events::publish(conn, now, events).await?;
        Ok(outcome)
    })
    .await
}

/// Publishes `reservation-grant.capacity-short` when `res.total` is below the
/// peak overlap of its scheduled and active grants from `now` on.
async fn capacity_short(
    conn: &mut AsyncPgConnection,
    root: &str,
    res: &ReservationRow,
    now: i64,
    events: &mut Vec<NewEvent>,
) -> Result<bool> {
    let live: Vec<GrantRow> = grants::table
        .filter(grants::account_id.eq(&res.account_id))
        .filter(grants::reservation_id.eq(&res.reservation_id))
        .filter(grants::settled_state.eq_any(SettledState::OPEN))
        .order(grants::grant_id.asc())
        .select(GrantRow::as_select())
        .load(conn)
        .await?;
    let live: Vec<GrantRow> = live
        .into_iter()
        .filter(|g| matches!(g.state_at(now), GrantState::Scheduled | GrantState::Active))
        .collect();
    let commitments: Vec<Commitment> = live
        .iter()
        .map(|g| {
            Commitment::new(
                Term::new(g.starts_at, g.ends_at),
                u32::try_from(g.slots).unwrap_or(0),
            )
        })
        .collect();
    let peak = grants_core::peak_overlap(&commitments, Term::since(now));
    if u64::try_from(res.total).unwrap_or(0) >= peak {
        return Ok(false);
    }
    let ids: Vec<String> = live.iter().map(|g| g.grant_id.clone()).collect();
    tracing::warn!(
        reservation = %res.reservation_id,
        total = res.total,
        granted = peak,
        "reservation total below its granted slots"
    );
    events.push(NewEvent::new(
        root,
        EventData::CapacityShort(event_data::CapacityShort {
            account_id: res.account_id.clone(),
            reservation_id: res.reservation_id.clone(),
            total: res.total,
            granted_slots: peak,
            grant_ids: ids,
        }),
        now,
    ));
    Ok(true)
}

/// A claimed scan of one account: the account as it was when claimed, and
/// the ticket that orders this scan among the account's scans.
#[derive(Debug, Clone)]
pub struct ScanClaim {
    /// The account to list.
    pub account: Account,
    /// The claim's ticket: a scan with a higher ticket started later.
    pub ticket: i64,
    /// The lease this claim took (its expiry, database time in epoch ms),
    /// which identifies it when given back; `None` when the claim took no
    /// lease (an explicit scan while another scan held a live one).
    pub lease_until: Option<i64>,
}

/// How a scan claims its account (contract 6: replicas share scans).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimRules {
    /// How long a claim keeps other scans of the account away; a scan that
    /// dies holding it is taken over once it expires.
    pub lease_ms: i64,
    /// A claim is refused while the account's last claim is more recent than
    /// this (0: no spacing). The worker passes its interval, so an account is
    /// listed at most once per interval however many replicas run.
    pub min_spacing_ms: i64,
    /// Whether the claim is taken even while another scan's lease is live.
    /// Only for a scan a caller asked for by name: it then lists beside the
    /// lease's holder without taking or clearing that lease (the holder
    /// keeps other replicas off the account until it answers), and tickets
    /// order the answers, so the later scan's answer is the one that stays.
    pub override_lease: bool,
}

impl ClaimRules {
    /// `providerAccounts.scan`: the caller asked for this account now.
    pub const EXPLICIT: ClaimRules = ClaimRules {
        lease_ms: DEFAULT_SCAN_LEASE_MS,
        min_spacing_ms: 0,
        override_lease: true,
    };

    /// A pass of the `vps.reservations` reconciler: skips an account another
    /// scan holds, or that was claimed less than `min_spacing_ms` ago, and
    /// holds its own claims for `lease_ms`.
    pub const fn pass(min_spacing_ms: i64, lease_ms: i64) -> ClaimRules {
        ClaimRules {
            lease_ms,
            min_spacing_ms,
            override_lease: false,
        }
    }
}

/// The default lease of a scan claim: longer than a listing can take (each
/// page request times out after 30 s).
pub const DEFAULT_SCAN_LEASE_MS: i64 = 5 * 60 * 1000;

/// Claims a scan of `account_id` for `tenant`: takes the account's next
/// ticket and its lease. `Ok(None)` when another scan holds a live lease or
/// the last claim is more recent than `rules.min_spacing_ms`; `NOT_FOUND`
/// when the account is not the tenant's.
pub async fn claim_scan(
    conn: &mut AsyncPgConnection,
    tenant: &str,
    account_id: &str,
    rules: ClaimRules,
) -> Result<Option<ScanClaim>> {
    // One short transaction behind a transaction pooler (`db::single_write`).
    crate::db::single_write(conn, async |conn| {
        claim_scan_now(conn, tenant, account_id, rules).await
    })
    .await
}

async fn claim_scan_now(
    conn: &mut AsyncPgConnection,
    tenant: &str,
    account_id: &str,
    rules: ClaimRules,
) -> Result<Option<ScanClaim>> {
    let account = accounts::find(conn, tenant, account_id).await?;
    // The row is locked first (the CTE), so the lease read is the one the
    // update replaces: a claim takes the lease only when none is live, and
    // says so by returning it; an explicit claim made while another scan
    // holds a live lease leaves that lease to its holder.
    let ticket: Option<Ticket> = diesel::sql_query(
        include_str!("sql/scans_claim_scan_now.sql").replace("{DB_NOW_MS}", DB_NOW_MS),
    )
    .bind::<diesel::sql_types::Text, _>(account_id)
    .bind::<diesel::sql_types::BigInt, _>(rules.lease_ms)
    .bind::<diesel::sql_types::BigInt, _>(rules.min_spacing_ms)
    .bind::<diesel::sql_types::Bool, _>(rules.override_lease)
    .get_result::<Ticket>(conn)
    .await
    .optional()?;
    Ok(ticket.map(|t| ScanClaim {
        account,
        ticket: t.scan_seq,
        lease_until: t.lease_until,
    }))
}

#[derive(QueryableByName)]
struct Ticket {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    scan_seq: i64,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::BigInt>)]
    lease_until: Option<i64>,
}

/// Gives a claim's lease back, if the claim took one and it is still the
/// account's lease (not expired and taken over by another claim meanwhile).
/// An explicit scan that ran beside another scan's live lease took none, so
/// it never clears that scan's lease.
async fn release_lease(conn: &mut AsyncPgConnection, claim: &ScanClaim) -> Result<()> {
    let Some(lease) = claim.lease_until else {
        return Ok(());
    };
    diesel::update(
        provider_accounts::table
            .find(&claim.account.account_id)
            .filter(provider_accounts::scan_lease_until.eq(lease)),
    )
    .set(provider_accounts::scan_lease_until.eq(None::<i64>))
    .execute(conn)
    .await?;
    Ok(())
}

/// Records a failed scan: the lease is given back, the failure counted and
/// the next try put off with [`scan_backoff_ms`]. Returns the failure count.
pub async fn scan_failed(conn: &mut AsyncPgConnection, claim: &ScanClaim, now: i64) -> Result<i32> {
    let account_id = claim.account.account_id.as_str();
    let ticket = claim.ticket;
    conn.transaction::<_, StorageError, _>(async move |conn| {
        release_lease(conn, claim).await?;
        // A scan claimed later that already succeeded has the last word: an
        // older failure puts nothing into backoff.
        let failures: Option<i32> = diesel::update(
            provider_accounts::table
                .find(account_id)
                .filter(provider_accounts::scan_applied_seq.lt(ticket)),
        )
        .set(provider_accounts::scan_failures.eq(provider_accounts::scan_failures + 1))
        .returning(provider_accounts::scan_failures)
        .get_result(conn)
        .await
        .optional()?;
        let Some(failures) = failures else {
            return Ok(0);
        };
        diesel::update(provider_accounts::table.find(account_id))
            .set(provider_accounts::scan_retry_at.eq(now + scan_backoff_ms(failures)))
            .execute(conn)
            .await?;
        Ok(failures)
    })
    .await
}

/// Backoff after `failures` consecutive provider failures: 10 s doubling,
/// at most 15 minutes.
pub fn scan_backoff_ms(failures: i32) -> i64 {
    let exp = u32::try_from(failures.clamp(1, 20) - 1).unwrap_or(0);
    (10_000i64 << exp.min(7)).min(15 * 60 * 1000)
}

/// A provider account the `vps.reservations` pass may scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanCandidate {
    /// The account.
    pub account_id: String,
    /// Its owner.
    pub tenant_id: String,
    /// Not before this instant after provider failures (backoff).
    pub retry_at: Option<i64>,
}

/// Every provider account, by account id, with its retry time: what the
/// `vps.reservations` pass walks, claiming each with [`claim_scan`] and
/// scanning it with `control::scans::run_scan`.
pub async fn scan_candidates(conn: &mut AsyncPgConnection) -> Result<Vec<ScanCandidate>> {
    let rows: Vec<(String, String, Option<i64>)> = provider_accounts::table
        .order(provider_accounts::account_id.asc())
        .select((
            provider_accounts::account_id,
            provider_accounts::tenant_id,
            provider_accounts::scan_retry_at,
        ))
        .load(conn)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(account_id, tenant_id, retry_at)| ScanCandidate {
            account_id,
            tenant_id,
            retry_at,
        })
        .collect())
}
