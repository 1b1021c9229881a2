//! Provider reservations: what scans see, binding to pools, and the account
//! lifecycle rules that depend on grants (contract 3.5, 6).

use std::collections::HashSet;
use std::time::Duration;

use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use grants_core::{Commitment, Destination, ForcedEnd, GrantState, Term};
use providers::gce::{GceConfig, GceProvider, GceProviderOptions};
use providers::{ProviderReservation, ReservationProvider};
use serde::Serialize;
use serde_json::json;

use crate::accounts::{self, Account};
use crate::clock::Clock;
use crate::db::DbPool;
use crate::error::{Code, Error, Result};
use crate::events::{self, NewEvent};
use crate::instances;
use crate::schema::{api_keys, grants, idempotency_keys, pools, provider_accounts, reservations};
use crate::timeline::{self, GrantRow, ReservationRow};

/// A reservation as the API shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reservation {
    /// The provider account.
    pub account_id: String,
    /// The provider's id.
    pub reservation_id: String,
    /// Region.
    pub region: String,
    /// Zone.
    pub zone: String,
    /// Machine type.
    pub flavor: String,
    /// Slots.
    pub total: i64,
    /// Slots the provider reports in use.
    pub provider_in_use: i64,
    /// `ready`, `not-ready` or `gone`.
    pub status: String,
    /// The pool it is bound to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool_id: Option<String>,
    /// Last scan instant.
    pub last_scanned_at: i64,
    /// When a scan found it gone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gone_at: Option<i64>,
}

impl From<ReservationRow> for Reservation {
    fn from(r: ReservationRow) -> Self {
        Reservation {
            account_id: r.account_id,
            reservation_id: r.reservation_id,
            region: r.region,
            zone: r.zone,
            flavor: r.flavor,
            total: r.total,
            provider_in_use: r.provider_in_use,
            status: r.status,
            pool_id: r.pool_id,
            last_scanned_at: r.last_scanned_at,
            gone_at: r.gone_at,
        }
    }
}

async fn rows_of_account(
    conn: &mut AsyncPgConnection,
    account_id: &str,
    lock: bool,
) -> Result<Vec<ReservationRow>> {
    let query = reservations::table
        .filter(reservations::account_id.eq(account_id))
        .order(reservations::reservation_id.asc())
        .select(ReservationRow::as_select());
    Ok(if lock {
        query.for_update().load(conn).await?
    } else {
        query.load(conn).await?
    })
}

/// `providerAccounts.listReservations`.
pub async fn list(
    conn: &mut AsyncPgConnection,
    tenant: &str,
    account_id: &str,
) -> Result<Vec<Reservation>> {
    accounts::get(conn, tenant, account_id).await?;
    Ok(rows_of_account(conn, account_id, false)
        .await?
        .into_iter()
        .map(Reservation::from)
        .collect())
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
}

/// Applies a provider's answer for one account at the scan's instant `now`,
/// in one transaction: upserts what is seen, marks what is missing `gone`
/// (ending its active grants and cancelling its scheduled ones), and reports
/// capacity shortfalls once per change of total.
pub async fn apply_scan(
    conn: &mut AsyncPgConnection,
    root: &str,
    account_id: &str,
    seen: &[ProviderReservation],
    now: i64,
) -> Result<ScanOutcome> {
    let root = root.to_owned();
    conn.transaction::<_, Error, _>(async move |conn| {
        let mut outcome = ScanOutcome::default();
        let mut events = Vec::new();
        // Lock the account's known reservations in id order (the lock order of
        // every operation), then add the new ones.
        let known = rows_of_account(conn, account_id, true).await?;
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
                    timeline::settle(conn, &row, now, &mut events).await?;
                    if capacity_short(conn, &root, &row, now, &mut events).await? {
                        outcome.capacity_short += 1;
                    }
                }
                Some(_) => {}
            }
        }
        for k in known.iter().filter(|k| k.status != "gone" && !seen_ids.contains(k.reservation_id.as_str())) {
            let queued = events.len();
            timeline::force_end(conn, k, &ForcedEnd::ReservationGone, now, &mut events).await?;
            // Grants ended or cancelled by the loss (not the instances' move
            // off the reservation, nor term ends settled on the way).
            let closed = events[queued..]
                .iter()
                .filter(|e| {
                    matches!(e.event_type.as_str(), "reservation-grant.ended" | "reservation-grant.cancelled")
                        && e.data.get("reason").and_then(|r| r.as_str()) == Some("reservation-gone")
                })
                .count();
            diesel::update(reservations::table.find((&k.account_id, &k.reservation_id)))
                .set((
                    reservations::status.eq("gone"),
                    reservations::gone_at.eq(now),
                    reservations::last_scanned_at.eq(now),
                ))
                .execute(conn)
                .await?;
            tracing::warn!(account = %account_id, reservation = %k.reservation_id, "reservation no longer reported by the provider: gone");
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
        .filter(grants::settled_state.eq_any(["scheduled", "active"]))
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
    tracing::warn!(reservation = %res.reservation_id, total = res.total, granted = peak, "reservation total below its granted slots");
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

/// Builds the provider adapter of an account.
pub fn provider_for(account: &Account) -> Result<GceProvider> {
    if account.provider != providers::gce::PROVIDER_NAME {
        return Err(Error::internal(format!(
            "unknown provider {}",
            account.provider
        )));
    }
    let config = GceConfig::from_json(&account.config).map_err(Error::internal)?;
    let options = GceProviderOptions {
        request_timeout: Duration::from_secs(30),
        ..GceProviderOptions::default()
    };
    GceProvider::new(config, options)
        .map_err(|e| Error::internal(format!("building the provider client: {e}")))
}

/// Scans one account: asks the provider (outside any transaction), then
/// applies the answer. A failed provider call changes nothing and answers
/// `UNAVAILABLE` with `details.reason: "provider-error"`.
pub async fn scan(
    pool: &DbPool,
    clock: Clock,
    root: &str,
    tenant: &str,
    account_id: &str,
) -> Result<(ScanOutcome, Vec<Reservation>)> {
    let account = {
        let mut conn = pool.get().await?;
        accounts::get(&mut conn, tenant, account_id).await?
    };
    let provider = provider_for(&account)?;
    let seen = provider.list_reservations().await.map_err(|e| {
        tracing::warn!(account = %account_id, error = %e, "provider call failed; nothing changed");
        Error::new(
            Code::Unavailable,
            format!("the provider did not answer: {e}"),
        )
        .with("reason", "provider-error")
        .with("retryable", e.is_retryable())
    })?;
    let mut conn = pool.get().await?;
    let now = clock.now(&mut conn).await?;
    let outcome = apply_scan(&mut conn, root, account_id, &seen, now).await?;
    let items = rows_of_account(&mut conn, account_id, false)
        .await?
        .into_iter()
        .map(Reservation::from)
        .collect();
    Ok((outcome, items))
}

/// `providerAccounts.bindReservation`.
pub async fn bind(
    conn: &mut AsyncPgConnection,
    tenant: &str,
    account_id: &str,
    reservation_id: &str,
    pool_id: &str,
) -> Result<Reservation> {
    conn.transaction::<_, Error, _>(async move |conn| {
        accounts::get(conn, tenant, account_id).await?;
        let res = timeline::lock_reservation(conn, account_id, reservation_id)
            .await?
            .ok_or_else(|| Error::not_found("reservation", reservation_id))?;
        let pool: Option<(String, serde_json::Value)> = pools::table
            .find(pool_id)
            .select((pools::region, pools::flavors))
            .first(conn)
            .await
            .optional()?;
        let Some((region, flavors)) = pool else {
            return Err(Error::not_found("pool", pool_id));
        };
        if res.status == "gone" {
            return Err(Error::invalid_state("the reservation is gone").with("status", "gone"));
        }
        if let Some(bound) = &res.pool_id {
            if bound == pool_id {
                return Ok(Reservation::from(res));
            }
            return Err(Error::invalid_state(format!(
                "the reservation is bound to pool {bound}; unbind it first"
            ))
            .with("poolId", bound.as_str()));
        }
        if region != res.region {
            return Err(Error::invalid(
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
            return Err(Error::invalid(
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
        Ok(Reservation::from(row))
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
        .filter(grants::settled_state.ne("cancelled"))
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
    conn.transaction::<_, Error, _>(async move |conn| {
        accounts::get(conn, tenant, account_id).await?;
        let res = timeline::lock_reservation(conn, account_id, reservation_id)
            .await?
            .ok_or_else(|| Error::not_found("reservation", reservation_id))?;
        let live = live_grant_ids(conn, account_id, Some(reservation_id), now).await?;
        if !live.is_empty() {
            return Err(Error::invalid_state(
                "grants on the reservation are scheduled or active; end them first",
            )
            .with("grantIds", live));
        }
        if res.pool_id.is_none() {
            return Ok(Reservation::from(res));
        }
        let row = diesel::update(reservations::table.find((account_id, reservation_id)))
            .set(reservations::pool_id.eq(None::<String>))
            .returning(ReservationRow::as_returning())
            .get_result(conn)
            .await?;
        tracing::info!(reservation = %reservation_id, "reservation unbound");
        Ok(Reservation::from(row))
    })
    .await
}

/// `providerAccounts.delete`: refused while grants are scheduled or active,
/// or ended grants still have unmetered slot-hours, or pools use the account.
/// Otherwise removes its ended and cancelled grants (usage records stay), its
/// reservations and the account, and revokes keys limited to it.
pub async fn delete_account(
    conn: &mut AsyncPgConnection,
    tenant: &str,
    account_id: &str,
    now: i64,
) -> Result<()> {
    conn.transaction::<_, Error, _>(async move |conn| {
        accounts::get(conn, tenant, account_id).await?;
        diesel::sql_query("SELECT 1 FROM provider_accounts WHERE account_id = $1 FOR UPDATE")
            .bind::<diesel::sql_types::Text, _>(account_id)
            .execute(conn)
            .await?;
        let locked = rows_of_account(conn, account_id, true).await?;
        let live = live_grant_ids(conn, account_id, None, now).await?;
        if !live.is_empty() {
            return Err(Error::invalid_state("grants of the account are scheduled or active; end them first")
                .with("grantIds", live));
        }
        let unmetered: Vec<String> = grants::table
            .filter(grants::account_id.eq(account_id))
            .filter(grants::settled_state.ne("cancelled"))
            .filter(grants::metered_through.lt(grants::ends_at))
            .order(grants::grant_id.asc())
            .select(grants::grant_id)
            .load(conn)
            .await?;
        if !unmetered.is_empty() {
            return Err(Error::invalid_state(
                "ended grants still have slot-hours to meter; retry after the reconciler's next pass past the hour they ended in",
            )
            .with("grantIds", unmetered)
            .with("reason", "unmetered"));
        }
        let pool_ids: Vec<String> = pools::table
            .filter(pools::account_id.eq(account_id))
            .order(pools::pool_id.asc())
            .select(pools::pool_id)
            .load(conn)
            .await?;
        if !pool_ids.is_empty() {
            return Err(Error::invalid_state("pools are built on this account").with("poolIds", pool_ids));
        }
        // Instances on the account's reservations are billed on-demand from now.
        for res in &locked {
            for inst in instances::seated(conn, res).await? {
                let to = if inst.state == "running" { Destination::OnDemand } else { Destination::None };
                instances::apply_move(conn, res, &inst.instance_id, &to, now).await?;
            }
        }
        // Idempotency keys live as long as the grants they created.
        diesel::delete(idempotency_keys::table.filter(
            idempotency_keys::object_id.eq_any(grants::table.filter(grants::account_id.eq(account_id)).select(grants::grant_id)),
        ))
        .execute(conn)
        .await?;
        diesel::delete(grants::table.filter(grants::account_id.eq(account_id))).execute(conn).await?;
        diesel::delete(reservations::table.filter(reservations::account_id.eq(account_id))).execute(conn).await?;
        diesel::update(api_keys::table.filter(api_keys::account_id.eq(account_id)).filter(api_keys::revoked_at.is_null()))
            .set(api_keys::revoked_at.eq(now))
            .execute(conn)
            .await?;
        diesel::delete(provider_accounts::table.find(account_id)).execute(conn).await?;
        diesel::delete(idempotency_keys::table.filter(idempotency_keys::object_id.eq(account_id)))
            .execute(conn)
            .await?;
        tracing::info!(account = %account_id, "provider account deleted");
        Ok(())
    })
    .await
}

/// Backoff after `failures` consecutive provider failures: 10 s doubling,
/// at most 15 minutes.
pub fn scan_backoff_ms(failures: i32) -> i64 {
    let exp = u32::try_from(failures.clamp(1, 20) - 1).unwrap_or(0);
    (10_000i64 << exp.min(7)).min(15 * 60 * 1000)
}

/// What one `vps.reservations` pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ScanPass {
    /// Accounts scanned successfully.
    pub scanned: u64,
    /// Accounts whose provider failed (retried later with backoff).
    pub failed: u64,
    /// Accounts skipped because their retry time has not come.
    pub backing_off: u64,
    /// Sum of the scans' outcomes.
    pub outcome: ScanOutcome,
}

/// Scans every provider account whose retry time has come (the
/// `vps.reservations` pass). A failing provider changes nothing for its
/// account, is logged and retried with backoff; it never fails the pass.
pub async fn scan_all(pool: &DbPool, clock: Clock, root: &str) -> Result<ScanPass> {
    let mut conn = pool.get().await?;
    let now = clock.now(&mut conn).await?;
    let accounts: Vec<(String, String, Option<i64>)> = provider_accounts::table
        .order(provider_accounts::account_id.asc())
        .select((
            provider_accounts::account_id,
            provider_accounts::tenant_id,
            provider_accounts::scan_retry_at,
        ))
        .load(&mut conn)
        .await?;
    drop(conn);
    let mut pass = ScanPass::default();
    for (account_id, tenant_id, retry_at) in accounts {
        if retry_at.is_some_and(|t| t > now) {
            pass.backing_off += 1;
            continue;
        }
        match scan(pool, clock, root, &tenant_id, &account_id).await {
            Ok((o, _)) => {
                pass.scanned += 1;
                pass.outcome.appeared += o.appeared;
                pass.outcome.gone += o.gone;
                pass.outcome.grants_closed += o.grants_closed;
                pass.outcome.capacity_short += o.capacity_short;
                let mut conn = pool.get().await?;
                diesel::update(
                    provider_accounts::table
                        .find(&account_id)
                        .filter(provider_accounts::scan_failures.ne(0)),
                )
                .set((
                    provider_accounts::scan_failures.eq(0),
                    provider_accounts::scan_retry_at.eq(None::<i64>),
                ))
                .execute(&mut conn)
                .await?;
            }
            Err(e)
                if e.code == Code::Unavailable
                    && e.details.get("reason").and_then(|r| r.as_str())
                        == Some("provider-error") =>
            {
                pass.failed += 1;
                let mut conn = pool.get().await?;
                let failures: i32 = diesel::update(provider_accounts::table.find(&account_id))
                    .set(provider_accounts::scan_failures.eq(provider_accounts::scan_failures + 1))
                    .returning(provider_accounts::scan_failures)
                    .get_result(&mut conn)
                    .await?;
                let retry_at = now + scan_backoff_ms(failures);
                diesel::update(provider_accounts::table.find(&account_id))
                    .set(provider_accounts::scan_retry_at.eq(retry_at))
                    .execute(&mut conn)
                    .await?;
                tracing::warn!(account = %account_id, failures, retry_at, error = %e.message, "scan failed; will retry with backoff");
            }
            // The account was deleted between the listing and its scan.
            Err(e) if e.code == Code::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(pass)
}
