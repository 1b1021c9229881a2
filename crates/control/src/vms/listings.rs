//! Listings of each account's managed VMs (contract 3.12, drift): claimed
//! per account across replicas, applied with storage, orphans deleted.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use providers::{InstanceProvider, OperationStatus, ProviderError};
use storage::ops::accounts::Account;
use storage::ops::vms::{self, ListingClaim, SeenVm, claim_listing};
use storage::{Result, StorageError};

use super::{VmContext, build, ms};

/// What a listing round did.
#[derive(Debug, Clone, Default)]
pub struct ListingReport {
    /// Accounts listed.
    pub listed: u64,
    /// Accounts whose listing failed.
    pub failed: u64,
    /// Drift found, by kind: `stopped`, `restopped`, `lost`.
    pub drift: BTreeMap<&'static str, u64>,
    /// Orphan VMs deleted.
    pub orphans_deleted: u64,
}

/// Lists the managed VMs of every account behind a managed pool (each at
/// most once per interval across replicas) and applies the drift rules.
pub async fn list_accounts(ctx: &VmContext<'_>) -> Result<ListingReport> {
    let mut report = ListingReport::default();
    let accounts = {
        let mut conn = ctx.pool.get().await?;
        vms::listing_accounts(&mut conn).await?
    };
    for account in accounts {
        let claim = {
            let mut conn = ctx.pool.get().await?;
            claim_listing(
                &mut conn,
                &account.account_id,
                ms(ctx.rules.list_interval),
                ms(ctx.rules.lease) * 5,
            )
            .await?
        };
        let Some(claim) = claim else { continue };
        match list_one(ctx, &account, &claim, &mut report).await {
            Ok(()) => report.listed += 1,
            Err(e) => {
                report.failed += 1;
                // The provider's error names no secret (a partial listing
                // names the zones it could not reach).
                tracing::warn!(
                    account = %account.account_id,
                    error = %e,
                    "listing managed vms failed: that account's drift waits for the next listing"
                );
                let mut conn = ctx.pool.get().await?;
                vms::end_listing(&mut conn, &claim, false).await?;
            }
        }
    }
    Ok(report)
}

/// Why a listing failed: the provider (an error, an incomplete answer) or
/// the platform's own database while applying it.
#[derive(Debug)]
enum ListingFailure {
    Provider(ProviderError),
    Storage(StorageError),
}

impl From<StorageError> for ListingFailure {
    fn from(e: StorageError) -> Self {
        ListingFailure::Storage(e)
    }
}

impl std::fmt::Display for ListingFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListingFailure::Provider(e) => e.fmt(f),
            ListingFailure::Storage(e) => e.fmt(f),
        }
    }
}

/// Lists one account's managed VMs and applies the listing. Only a
/// complete listing is applied: a provider error, or an answer that left a
/// zone out ([`ProviderError::Partial`]), changes nothing (contract 6, r4).
async fn list_one(
    ctx: &VmContext<'_>,
    account: &Account,
    claim: &ListingClaim,
    report: &mut ListingReport,
) -> std::result::Result<(), ListingFailure> {
    let provider = build(ctx, account)
        .await
        .map_err(ListingFailure::Provider)?;
    let listed = provider
        .list_managed_vms()
        .await
        .map_err(ListingFailure::Provider)?;
    let seen: Vec<SeenVm> = listed
        .into_iter()
        .map(|vm| SeenVm {
            instance_id: vm.labels.get("bc-instance").cloned(),
            name: vm.name,
            zone: vm.zone,
            status: vm.status,
        })
        .collect();
    let drift = {
        let mut conn = ctx.pool.get().await.map_err(StorageError::from)?;
        let now = ctx.clock.now(&mut conn).await?;
        let drift = vms::apply_listing(&mut conn, claim, &seen, now).await?;
        vms::end_listing(&mut conn, claim, true).await?;
        drift
    };
    if drift.stale {
        tracing::info!(
            account = %account.account_id,
            "another listing of the account was applied since this one began: dropped"
        );
    }
    for (kind, n) in [
        ("stopped", drift.stopped),
        ("restopped", drift.restopped),
        ("lost", drift.lost),
    ] {
        if n > 0 {
            *report.drift.entry(kind).or_default() += n;
        }
    }
    for (zone, name, request) in drift.orphans {
        let started = Instant::now();
        match delete_orphan(provider.as_ref(), &zone, &name, &request).await {
            Ok(()) => {
                let mut conn = ctx.pool.get().await.map_err(StorageError::from)?;
                let now = ctx.clock.now(&mut conn).await?;
                if vms::orphan_deleted(
                    &mut conn,
                    ctx.root.as_str(),
                    &account.account_id,
                    &zone,
                    &name,
                    now,
                )
                .await?
                {
                    report.orphans_deleted += 1;
                }
            }
            Err(e) => tracing::warn!(
                vm = %name,
                zone = %zone,
                error = %e,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "deleting an orphan vm failed; the next listing tries again"
            ),
        }
    }
    Ok(())
}

/// Deletes an orphan VM and follows the operation to its end (a few
/// seconds at most: a slow one is confirmed by the next listing).
async fn delete_orphan(
    provider: &dyn InstanceProvider,
    zone: &str,
    name: &str,
    request: &str,
) -> std::result::Result<(), ProviderError> {
    let op = match provider.delete_vm(zone, name, request).await {
        Ok(op) => op,
        Err(ProviderError::NotFound) => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut status = op.status;
    for _ in 0..20 {
        if status == OperationStatus::Done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        status = provider.get_operation(zone, &op.name).await?.status;
    }
    Ok(())
}
