//! The scan protocol's provider side (contract 3.5, 6): claim the account
//! with storage, list its reservations through the provider trait outside
//! any transaction, then apply the answer with storage in one transaction.

use providers::{AccountSpec, ProviderError, ProviderFactory, ProviderReservation};
use storage::Clock;
use storage::crypto::Keyring;
use storage::db::DbPool;
use storage::error::{Detail, Reason};
use storage::ids::{AccountId, TenantId};
use storage::model::reservation::ReservationRow;
use storage::model::states::ReservationStatus;
use storage::ops::reservations::{Reservation, with_accounts};
use storage::ops::scans::{
    ClaimRules, ListedReservation, ScanClaim, ScanOutcome, apply_scan, claim_scan, scan_failed,
};
use storage::ops::secrets;
use storage::{ErrorKind, Result, StorageError};

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
    .with(Detail::Reason(Reason::ProviderError));
    if let Some(status) = error.status() {
        e = e.with(Detail::ProviderStatus(status));
    }
    e
}

/// Runs a claimed scan: builds the provider, lists (outside any
/// transaction), then applies the answer. A failed provider call, or a
/// listing that left a zone out ([`ProviderError::Partial`]: what it does
/// not show is unknown, not gone), changes nothing but the account's retry
/// bookkeeping, is logged with its cause (the zones it could not reach) and
/// answers [`provider_failure`]. A listing (all its pages and retries) longer than
/// `limit` is abandoned and counts as a provider failure
/// ([`ProviderError::Timeout`]): the reconciler passes its
/// `BC_SCAN_TIMEOUT_MS` and `providerAccounts.scan` the server's, so one
/// slow account holds a scan slot for at most that long.
pub async fn run_scan(
    pool: &DbPool,
    clock: Clock,
    root: &TenantId,
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
            Some(crate::secrets::resolve(&mut conn, keyring, &account.tenant_id, name).await)
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
        Ok(seen) => {
            let seen: Vec<ListedReservation> = seen.into_iter().map(as_listed).collect();
            apply_scan(&mut conn, root, claim, &seen, now).await
        }
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

/// A provider's reservation as storage applies it.
fn as_listed(r: ProviderReservation) -> ListedReservation {
    ListedReservation {
        reservation_id: r.reservation_id,
        zone: r.zone,
        region: r.region,
        flavor: r.flavor,
        total: r.total,
        in_use: r.in_use,
        status: match r.status {
            providers::ReservationStatus::Ready => ReservationStatus::Ready,
            providers::ReservationStatus::NotReady => ReservationStatus::NotReady,
        },
    }
}

/// What an explicit scan lists: the acting tenant's account, within a time
/// limit.
#[derive(Debug, Clone, Copy)]
pub struct ExplicitScan<'a> {
    /// The acting tenant.
    pub tenant: &'a TenantId,
    /// Its account.
    pub account_id: &'a AccountId,
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
    root: &TenantId,
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
        claim_scan(
            &mut conn,
            tenant.as_str(),
            account_id.as_str(),
            ClaimRules::EXPLICIT,
        )
        .await?
        .ok_or_else(|| StorageError::not_found("provider account", account_id.as_str()))?
    };
    let outcome = run_scan(pool, clock, root, &claim, factory, keyring, limit).await?;
    let mut conn = pool.get().await?;
    let now = clock.now(&mut conn).await?;
    let reservations = storage::db::read_only(&mut conn, async |conn| {
        let rows = ReservationRow::of_account(conn, account_id.as_str()).await?;
        with_accounts(conn, rows, now).await
    })
    .await?;
    Ok((outcome, reservations))
}
