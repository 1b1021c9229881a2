//! Provider reservations: what scans see, binding to pools, and the account
//! lifecycle rules that depend on grants (contract 3.5, 6).

use std::collections::{BTreeSet, HashMap, HashSet};

use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use grants_core::views::slots::SlotAccounts;
use grants_core::{
    Commitment, Destination, ForcedEnd, GrantState, Term, TimelineGrant, TimelineInstance,
};
use providers::{AccountSpec, ProviderError, ProviderFactory, ProviderReservation};
use serde_json::json;

use crate::clock::Clock;
use crate::crypto::Keyring;
use crate::db::DbPool;
use crate::error::{ErrorKind, Result, StorageError};
use crate::locks;
use crate::model::events::{self, NewEvent};
use crate::model::instance::InstanceRow;
use crate::model::states::{InstanceState, ReservationStatus, SettledState};
use crate::model::{grant::GrantRow, reservation::ReservationRow};
use crate::ops::accounts::{self, Account};
use crate::ops::instances;
use crate::ops::secrets;
use crate::ops::settlement;
use crate::schema::{api_keys, grants, idempotency_keys, pools, provider_accounts, reservations};

/// A reservation as the API shows it: the row and its slot accounts at the
/// server's now (contract 3.10).
#[derive(Debug, Clone)]
pub struct Reservation {
    /// The stored row.
    pub row: ReservationRow,
    /// `grantedSlots`, `heldInGrants`, `ordinaryInUse`, `ordinaryFree`,
    /// `physicalInUse` at now.
    pub accounts: SlotAccounts,
}

/// The reservations with their slot accounts at `now`, read without
/// settling anything: the open grants and the seated instances of each
/// account are read in one statement each (whatever the number of
/// reservations), and the transitions due since the last settlement are
/// applied in memory (`grants_core::views::slots::slot_accounts`), so the figures
/// are those a settlement at `now` would leave.
pub async fn with_accounts(
    conn: &mut AsyncPgConnection,
    rows: Vec<ReservationRow>,
    now: i64,
) -> Result<Vec<Reservation>> {
    // One reservation (bind, unbind) reads only its own grants and instances.
    let only = match rows.as_slice() {
        [one] => Some(one.reservation_id.clone()),
        _ => None,
    };
    let accounts: BTreeSet<String> = rows.iter().map(|r| r.account_id.clone()).collect();
    type Key = (String, String);
    let mut grants_of: HashMap<Key, Vec<TimelineGrant>> = HashMap::new();
    let mut instances_of: HashMap<Key, Vec<TimelineInstance>> = HashMap::new();
    for account in &accounts {
        for g in GrantRow::open_on_account(conn, account, only.as_deref()).await? {
            let key = (g.account_id.clone(), g.reservation_id.clone());
            grants_of.entry(key).or_default().push(g.to_timeline());
        }
        for i in InstanceRow::seated_on_account(conn, account, only.as_deref()).await? {
            let (Some(a), Some(r)) = (i.account_id.clone(), i.reservation_id.clone()) else {
                continue;
            };
            instances_of
                .entry((a, r))
                .or_default()
                .push(i.to_timeline());
        }
    }
    Ok(rows
        .into_iter()
        .map(|row| {
            let key = (row.account_id.clone(), row.reservation_id.clone());
            let accounts = grants_core::views::slots::slot_accounts(
                u64::try_from(row.total).unwrap_or(0),
                u64::try_from(row.provider_in_use).unwrap_or(0),
                grants_of.get(&key).map_or(&[], Vec::as_slice),
                instances_of.get(&key).map_or(&[], Vec::as_slice),
                now,
            );
            Reservation { row, accounts }
        })
        .collect())
}

/// `providerAccounts.listReservations`: the account's reservations with
/// their slot accounts at `now`.
pub async fn list(
    conn: &mut AsyncPgConnection,
    tenant: &str,
    account_id: &str,
    now: i64,
) -> Result<Vec<Reservation>> {
    accounts::get(conn, tenant, account_id).await?;
    let rows = ReservationRow::of_account(conn, account_id).await?;
    with_accounts(conn, rows, now).await
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
    root: &str,
    claim: &ScanClaim,
    seen: &[ProviderReservation],
    now: i64,
) -> Result<ScanOutcome> {
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
        let mut seen_sorted: Vec<&ProviderReservation> = seen.iter().collect();
        seen_sorted.sort_by(|a, b| a.reservation_id.cmp(&b.reservation_id));
        for r in seen_sorted {
            let before = known.iter().find(|k| k.reservation_id == r.reservation_id);
            let row: ReservationRow = diesel::insert_into(reservations::table)
                .values((
                    reservations::account_id.eq(account_id),
                    reservations::reservation_id.eq(&r.reservation_id),
                    reservations::region.eq(&r.region),
                    reservations::zone.eq(&r.zone),
                    reservations::flavor.eq(&r.flavor),
                    reservations::total.eq(r.total.max(0)),
                    reservations::provider_in_use.eq(r.in_use.max(0)),
                    reservations::status.eq(r.status.as_str()),
                    reservations::last_scanned_at.eq(now),
                ))
                .on_conflict((reservations::account_id, reservations::reservation_id))
                .do_update()
                .set((
                    reservations::region.eq(&r.region),
                    reservations::zone.eq(&r.zone),
                    reservations::flavor.eq(&r.flavor),
                    reservations::total.eq(r.total.max(0)),
                    reservations::provider_in_use.eq(r.in_use.max(0)),
                    reservations::status.eq(r.status.as_str()),
                    reservations::last_scanned_at.eq(now),
                    reservations::gone_at.eq(None::<i64>),
                ))
                .returning(ReservationRow::as_returning())
                .get_result(conn)
                .await?;
            match before {
                None => outcome.appeared += 1,
                Some(b) if b.total != row.total => {
                    settlement::settle(conn, &row, now, &mut events).await?;
                    if capacity_short(conn, &root, &row, now, &mut events).await? {
                        outcome.capacity_short += 1;
                    }
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
            let closed = events[queued..]
                .iter()
                .filter(|e| {
                    matches!(
                        e.event_type.as_str(),
                        "reservation-grant.ended" | "reservation-grant.cancelled"
                    ) && e.data.get("reason").and_then(|r| r.as_str()) == Some("reservation-gone")
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
    let ids: Vec<&str> = live.iter().map(|g| g.grant_id.as_str()).collect();
    tracing::warn!(
        reservation = %res.reservation_id,
        total = res.total,
        granted = peak,
        "reservation total below its granted slots"
    );
    events.push(NewEvent::new(
        root,
        "reservation-grant.capacity-short",
        json!({
            "accountId": res.account_id,
            "reservationId": res.reservation_id,
            "total": res.total,
            "grantedSlots": peak,
            "grantIds": ids,
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

/// The database's real time in epoch milliseconds. Scan leases and spacing
/// are about real elapsed time between replicas, never about the product's
/// (possibly manual) clock, and the database's time is the one all replicas
/// share.
const DB_NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

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
    let account = accounts::get(conn, tenant, account_id).await?;
    // The row is locked first (the CTE), so the lease read is the one the
    // update replaces: a claim takes the lease only when none is live, and
    // says so by returning it; an explicit claim made while another scan
    // holds a live lease leaves that lease to its holder.
    let ticket: Option<Ticket> = diesel::sql_query(format!(
        "WITH old AS ( \
           SELECT account_id, scan_lease_until AS lease, scan_claimed_at AS claimed, \
                  {DB_NOW_MS} AS now \
           FROM provider_accounts WHERE account_id = $1 FOR UPDATE) \
         UPDATE provider_accounts p SET scan_seq = p.scan_seq + 1, \
            scan_lease_until = CASE WHEN old.lease IS NULL OR old.lease <= old.now \
                THEN old.now + $2 ELSE old.lease END, \
            scan_claimed_at = old.now \
         FROM old \
         WHERE p.account_id = old.account_id \
           AND ($4 OR old.lease IS NULL OR old.lease <= old.now) \
           AND ($4 OR old.claimed IS NULL OR $3 <= 0 OR old.claimed + $3 <= old.now) \
         RETURNING p.scan_seq, \
           CASE WHEN old.lease IS NULL OR old.lease <= old.now \
                THEN p.scan_lease_until END AS lease_until"
    ))
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

/// The answer to a provider failure (contract 3.5): `UNAVAILABLE` with
/// `details { reason: "provider-error", status? }` and nothing else. The
/// provider's body and transport error text go to the log ([`run_scan`]),
/// never to the caller:
/// a tenant's endpoint must not learn anything about the platform's network
/// from it.
pub fn provider_failure(error: &ProviderError) -> StorageError {
    let mut e = StorageError::new(
        ErrorKind::ProviderFailure,
        "the provider call failed; nothing changed (the server log has the cause)",
    )
    .with("reason", "provider-error");
    if let Some(status) = error.status() {
        e = e.with("status", status);
    }
    e
}

/// Runs a claimed scan: builds the provider, lists (outside any
/// transaction), then applies the answer. A failed provider call changes
/// nothing but the account's retry bookkeeping and answers
/// [`provider_failure`]. A listing (all its pages and retries) longer than
/// `limit` is abandoned and counts as a provider failure
/// ([`ProviderError::Timeout`]): the reconciler passes its
/// `BC_SCAN_TIMEOUT_MS` and `providerAccounts.scan` the server's, so one
/// slow account holds a scan slot for at most that long.
pub async fn run_scan(
    pool: &DbPool,
    clock: Clock,
    root: &str,
    claim: &ScanClaim,
    factory: &ProviderFactory,
    keyring: &Keyring,
    limit: Option<std::time::Duration>,
) -> Result<ScanOutcome> {
    let account = &claim.account;
    // A `secret:NAME` is read in the account's own tenant and decrypted for
    // this listing only; the connection is back in the pool before the
    // provider is called.
    let secret = match secrets::named_in(&account.config) {
        Some(name) => {
            let mut conn = pool.get().await?;
            Some(secrets::resolve(&mut conn, keyring, &account.tenant_id, name).await)
        }
        None => None,
    }
    .transpose();
    let listed = match secret {
        Ok(secret) => {
            let spec = AccountSpec {
                account_id: &account.account_id,
                tenant_id: &account.tenant_id,
                provider: &account.provider,
                config: &account.config,
                secret: secret.as_ref(),
            };
            match factory(spec) {
                Ok(provider) => match limit {
                    Some(limit) => tokio::time::timeout(limit, provider.list_reservations())
                        .await
                        .unwrap_or(Err(ProviderError::Timeout)),
                    None => provider.list_reservations().await,
                },
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    };
    let mut conn = pool.get().await?;
    let now = clock.now(&mut conn).await?;
    match listed {
        Ok(seen) => apply_scan(&mut conn, root, claim, &seen, now).await,
        Err(e) => {
            let failures = scan_failed(&mut conn, claim, now).await?;
            tracing::warn!(
                account = %claim.account.account_id,
                error = %e,
                failures,
                "scan failed: the provider call failed; nothing changed, will retry with backoff"
            );
            Err(provider_failure(&e))
        }
    }
}

/// What an explicit scan lists: the acting tenant's account, within a time
/// limit.
#[derive(Debug, Clone, Copy)]
pub struct ExplicitScan<'a> {
    /// The acting tenant.
    pub tenant: &'a str,
    /// Its account.
    pub account_id: &'a str,
    /// The longest the listing may take.
    pub limit: Option<std::time::Duration>,
}

/// `providerAccounts.scan`: scans one account now, with exactly the
/// reconciler's effects. While a worker's scan holds the account's lease it
/// lists beside it, from a fresh listing, without taking or clearing that
/// lease (so no other replica starts a third listing); whichever of the two
/// was claimed later (this one) is the answer that stays, the worker's
/// older answer is dropped when it arrives. The listing stops at
/// `target.limit`, as a provider failure.
pub async fn scan(
    pool: &DbPool,
    clock: Clock,
    root: &str,
    target: ExplicitScan<'_>,
    factory: &ProviderFactory,
    keyring: &Keyring,
) -> Result<(ScanOutcome, Vec<Reservation>)> {
    let ExplicitScan {
        tenant,
        account_id,
        limit,
    } = target;
    let claim = {
        let mut conn = pool.get().await?;
        // An explicit claim is refused only when the account is gone.
        claim_scan(&mut conn, tenant, account_id, ClaimRules::EXPLICIT)
            .await?
            .ok_or_else(|| StorageError::not_found("provider account", account_id))?
    };
    let outcome = run_scan(pool, clock, root, &claim, factory, keyring, limit).await?;
    let mut conn = pool.get().await?;
    let now = clock.now(&mut conn).await?;
    let reservations = crate::db::read_only(&mut conn, async |conn| {
        let rows = ReservationRow::of_account(conn, account_id).await?;
        with_accounts(conn, rows, now).await
    })
    .await?;
    Ok((outcome, reservations))
}

/// One reservation with its slot accounts at `now`.
async fn one_with_accounts(
    conn: &mut AsyncPgConnection,
    row: ReservationRow,
    now: i64,
) -> Result<Reservation> {
    with_accounts(conn, vec![row], now)
        .await?
        .pop()
        .ok_or_else(|| StorageError::internal("a reservation without its accounts"))
}

/// `providerAccounts.bindReservation`: root only, so `root` is both the
/// acting tenant and the owner the account must have.
pub async fn bind(
    conn: &mut AsyncPgConnection,
    root: &str,
    account_id: &str,
    reservation_id: &str,
    pool_id: &str,
    now: i64,
) -> Result<Reservation> {
    conn.transaction::<_, StorageError, _>(async move |conn| {
        accounts::get(conn, root, account_id).await?;
        let res = locks::reservation(conn, account_id, reservation_id)
            .await?
            .ok_or_else(|| StorageError::not_found("reservation", reservation_id))?;
        let pool: Option<(String, serde_json::Value)> = pools::table
            .find(pool_id)
            .select((pools::region, pools::flavors))
            .first(conn)
            .await
            .optional()?;
        let Some((region, flavors)) = pool else {
            return Err(StorageError::not_found("pool", pool_id));
        };
        if res.status == ReservationStatus::Gone {
            return Err(StorageError::invalid_state("the reservation is gone")
                .with("status", ReservationStatus::Gone.as_str()));
        }
        if let Some(bound) = &res.pool_id {
            if bound == pool_id {
                return one_with_accounts(conn, res, now).await;
            }
            return Err(StorageError::invalid_state(format!(
                "the reservation is bound to pool {bound}; unbind it first"
            ))
            .with("poolId", bound.as_str()));
        }
        if region != res.region {
            return Err(StorageError::invalid(
                "poolId",
                "region-mismatch",
                format!("the pool is in {region}, the reservation in {}", res.region),
            ));
        }
        let has_flavor = flavors.as_array().is_some_and(|fs| {
            fs.iter()
                .any(|f| f.get("name").and_then(|n| n.as_str()) == Some(res.flavor.as_str()))
        });
        if !has_flavor {
            return Err(StorageError::invalid(
                "poolId",
                "flavor-mismatch",
                format!("the pool has no flavor {}", res.flavor),
            ));
        }
        let row = diesel::update(reservations::table.find((account_id, reservation_id)))
            .set(reservations::pool_id.eq(pool_id))
            .returning(ReservationRow::as_returning())
            .get_result(conn)
            .await?;
        tracing::info!(reservation = %reservation_id, pool = %pool_id, "reservation bound");
        one_with_accounts(conn, row, now).await
    })
    .await
}

/// Grants of the given reservations that are scheduled or active at `now`.
async fn live_grant_ids(
    conn: &mut AsyncPgConnection,
    account_id: &str,
    reservation_id: Option<&str>,
    now: i64,
) -> Result<Vec<String>> {
    let mut query = grants::table
        .filter(grants::account_id.eq(account_id))
        .filter(grants::settled_state.ne(SettledState::Cancelled))
        .filter(grants::ends_at.gt(now))
        .order(grants::grant_id.asc())
        .select(grants::grant_id)
        .into_boxed();
    if let Some(r) = reservation_id {
        query = query.filter(grants::reservation_id.eq(r));
    }
    Ok(query.load(conn).await?)
}

/// `providerAccounts.unbindReservation`: refused while a grant on it is
/// scheduled or active.
pub async fn unbind(
    conn: &mut AsyncPgConnection,
    tenant: &str,
    account_id: &str,
    reservation_id: &str,
    now: i64,
) -> Result<Reservation> {
    conn.transaction::<_, StorageError, _>(async move |conn| {
        accounts::get(conn, tenant, account_id).await?;
        let res = locks::reservation(conn, account_id, reservation_id)
            .await?
            .ok_or_else(|| StorageError::not_found("reservation", reservation_id))?;
        let live = live_grant_ids(conn, account_id, Some(reservation_id), now).await?;
        if !live.is_empty() {
            return Err(StorageError::invalid_state(
                "grants on the reservation are scheduled or active; end them first",
            )
            .with("grantIds", live));
        }
        if res.pool_id.is_none() {
            return one_with_accounts(conn, res, now).await;
        }
        let row = diesel::update(reservations::table.find((account_id, reservation_id)))
            .set(reservations::pool_id.eq(None::<String>))
            .returning(ReservationRow::as_returning())
            .get_result(conn)
            .await?;
        tracing::info!(reservation = %reservation_id, "reservation unbound");
        one_with_accounts(conn, row, now).await
    })
    .await
}

/// `providerAccounts.delete`: refused while grants are scheduled or active,
/// or ended grants still have unmetered slot-hours. Otherwise settles each of
/// its reservations up to `now` under its row lock (so a term end due before
/// the delete hands over and publishes its event first), moves the instances
/// still placed on them on-demand (stopped ones lose their slot), removes its
/// ended and cancelled grants (usage records stay), its reservations and the
/// account, and revokes keys limited to it. Pools built on the account outlive
/// it: their `accountId` stays as a record of where they came from.
pub async fn delete_account(
    conn: &mut AsyncPgConnection,
    tenant: &str,
    account_id: &str,
    now: i64,
) -> Result<()> {
    conn.transaction::<_, StorageError, _>(async move |conn| {
        accounts::get(conn, tenant, account_id).await?;
        locks::account_for_delete(conn, account_id).await?;
        let locked = locks::account_reservations(conn, account_id).await?;
        let live = live_grant_ids(conn, account_id, None, now).await?;
        if !live.is_empty() {
            return Err(StorageError::invalid_state(
                "grants of the account are scheduled or active; end them first",
            )
            .with("grantIds", live));
        }
        let unmetered: Vec<String> = grants::table
            .filter(grants::account_id.eq(account_id))
            .filter(grants::settled_state.ne(SettledState::Cancelled))
            .filter(grants::metered_through.lt(grants::ends_at))
            .order(grants::grant_id.asc())
            .select(grants::grant_id)
            .load(conn)
            .await?;
        if !unmetered.is_empty() {
            return Err(StorageError::invalid_state(
                "ended grants still have slot-hours to meter; retry after the reconciler's next \
                 pass past the hour they ended in",
            )
            .with("grantIds", unmetered)
            .with("reason", "unmetered"));
        }
        // Every transition due up to now takes effect first, with its event,
        // so the move on-demand below starts from the true placement.
        let mut events = Vec::new();
        for res in &locked {
            settlement::settle(conn, res, now, &mut events).await?;
        }
        events::publish(conn, now, events).await?;
        forget_account(conn, account_id, &locked, now).await
    })
    .await
}

/// The deletion of a tenant's provider accounts inside `tenants.delete`
/// (contract 3.1), whose transaction holds the tenant's row and, taken next,
/// its account rows ([`locks::tenant_accounts`]): each account is deleted as
/// `providerAccounts.delete` deletes one, except that nothing refuses it.
/// Binding a reservation is the root tenant's alone, so another tenant's
/// accounts carry no grants and no placed instances; should one anyway, its
/// reservations end as gone would end them (grants ended or cancelled with
/// `reservation-gone`, instances on-demand) before they are forgotten.
/// Returns how many accounts were deleted.
pub async fn delete_accounts_of_tenant(
    conn: &mut AsyncPgConnection,
    accounts: &[String],
    now: i64,
    events: &mut Vec<NewEvent>,
) -> Result<usize> {
    for account_id in accounts {
        let locked = locks::account_reservations(conn, account_id).await?;
        for res in &locked {
            settlement::force_end(conn, res, &ForcedEnd::ReservationGone, now, events).await?;
        }
        forget_account(conn, account_id, &locked, now).await?;
    }
    Ok(accounts.len())
}

/// Forgets a locked account whose reservations (locked, `locked`) are
/// settled: instances still seated on them go on-demand (stopped ones lose
/// their slot), its grants (usage records stay), reservations, keys limited
/// to it and the idempotency keys of what it created go, then the account.
async fn forget_account(
    conn: &mut AsyncPgConnection,
    account_id: &str,
    locked: &[ReservationRow],
    now: i64,
) -> Result<()> {
    // Instances on the account's reservations are billed on-demand from now.
    for res in locked {
        for inst in InstanceRow::seated(conn, res).await? {
            let to = if inst.state == InstanceState::Running {
                Destination::OnDemand
            } else {
                Destination::None
            };
            instances::apply_move(conn, res, &inst.instance_id, &to, now).await?;
        }
    }
    // Idempotency keys live as long as the grants they created.
    diesel::delete(
        idempotency_keys::table.filter(
            idempotency_keys::object_id.eq_any(
                grants::table
                    .filter(grants::account_id.eq(account_id))
                    .select(grants::grant_id),
            ),
        ),
    )
    .execute(conn)
    .await?;
    diesel::delete(grants::table.filter(grants::account_id.eq(account_id)))
        .execute(conn)
        .await?;
    diesel::delete(reservations::table.filter(reservations::account_id.eq(account_id)))
        .execute(conn)
        .await?;
    diesel::update(
        api_keys::table
            .filter(api_keys::account_id.eq(account_id))
            .filter(api_keys::revoked_at.is_null()),
    )
    .set(api_keys::revoked_at.eq(now))
    .execute(conn)
    .await?;
    diesel::delete(provider_accounts::table.find(account_id))
        .execute(conn)
        .await?;
    diesel::delete(idempotency_keys::table.filter(idempotency_keys::object_id.eq(account_id)))
        .execute(conn)
        .await?;
    tracing::info!(account = %account_id, "provider account deleted");
    Ok(())
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
/// scanning it with [`run_scan`].
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

/// A bound reservation's figures for the worker's gauges, as last settled.
#[derive(Debug, Clone, PartialEq, Eq, diesel::QueryableByName)]
pub struct ReservationGauge {
    /// The account.
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub account_id: String,
    /// The reservation.
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub reservation_id: String,
    /// Its total from the last scan.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub total: i64,
    /// Slots of the grants live now.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub granted: i64,
    /// Instances held in its grants, running or stopped.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub held: i64,
    /// Running instances on ordinary slots, outside any grant
    /// (`ordinaryInUse`).
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub ordinary: i64,
    /// `max(running instances, providerInUse)`.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub physical: i64,
    /// Grants not started yet.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub scheduled: i64,
    /// Grants live now.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub active: i64,
    /// How many reservations are bound (beyond the limit, summed in the
    /// [`OTHER`] row).
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub bound: i64,
}

/// The name the gauges give the reservations beyond their limit, summed.
pub const OTHER: &str = "other";

/// The gauges of the reservations bound to a pool and not gone, at `now`:
/// the first `limit` by account and reservation id one by one, the rest
/// summed in one row whose account and reservation are [`OTHER`] (a label
/// value no id takes). One statement (the grants and the instances counted
/// per reservation through their indexes), cheap enough for every round of
/// the worker. Figures are those of the last settlement.
pub async fn gauges(
    conn: &mut AsyncPgConnection,
    now: i64,
    limit: i64,
) -> Result<Vec<ReservationGauge>> {
    use diesel::sql_types::{BigInt, Text};
    Ok(diesel::sql_query(
        "WITH each AS ( \
         SELECT r.account_id, r.reservation_id, r.total, \
           coalesce(g.granted, 0) AS granted, coalesce(g.scheduled, 0) AS scheduled, \
           coalesce(g.active, 0) AS active, coalesce(i.held, 0) AS held, \
           coalesce(i.ordinary, 0) AS ordinary, \
           greatest(coalesce(i.running, 0), r.provider_in_use) AS physical, \
           count(*) OVER () AS bound, \
           row_number() OVER (ORDER BY r.account_id, r.reservation_id) AS n \
         FROM reservations r \
         LEFT JOIN LATERAL ( \
           SELECT sum(slots) FILTER (WHERE starts_at <= $1 AND ends_at > $1)::bigint AS granted, \
                  count(*) FILTER (WHERE starts_at > $1) AS scheduled, \
                  count(*) FILTER (WHERE starts_at <= $1 AND ends_at > $1) AS active \
           FROM grants WHERE account_id = r.account_id AND reservation_id = r.reservation_id \
             AND settled_state IN ('scheduled', 'active')) g ON true \
         LEFT JOIN LATERAL ( \
           SELECT count(*) FILTER (WHERE grant_id IS NOT NULL) AS held, \
                  count(*) FILTER (WHERE grant_id IS NULL AND state = 'running') AS ordinary, \
                  count(*) FILTER (WHERE state = 'running') AS running \
           FROM instances WHERE account_id = r.account_id AND reservation_id = r.reservation_id \
             AND state <> 'deleted') i ON true \
         WHERE r.pool_id IS NOT NULL AND r.status <> 'gone') \
         SELECT CASE WHEN n <= $2 THEN account_id ELSE $3 END AS account_id, \
           CASE WHEN n <= $2 THEN reservation_id ELSE $3 END AS reservation_id, \
           sum(total)::bigint AS total, sum(granted)::bigint AS granted, \
           sum(scheduled)::bigint AS scheduled, sum(active)::bigint AS active, \
           sum(held)::bigint AS held, sum(ordinary)::bigint AS ordinary, \
           sum(physical)::bigint AS physical, max(bound) AS bound \
         FROM each GROUP BY 1, 2 ORDER BY min(n)",
    )
    .bind::<BigInt, _>(now)
    .bind::<BigInt, _>(limit)
    .bind::<Text, _>(OTHER)
    .load(conn)
    .await?)
}
