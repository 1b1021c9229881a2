//! Listings of each account's managed VMs (contract 3.12, drift): claimed
//! per account across replicas, applied with storage, orphans deleted.
//!
//! Only this installation's VMs are listed and kept (those labelled
//! `bc-installation` with its id, contract 3.12 r4): another installation
//! sharing the project is neither drift nor orphan here. An orphan is read
//! before its delete is sent, which is sent only while its labels still say
//! it is ours, and it counts as deleted only once a read of it answers 404.

use std::time::{Duration, Instant};

use providers::{
    INSTALLATION_LABEL, INSTANCE_LABEL, InstanceProvider, MANAGED_LABEL, OperationStatus,
    ProviderError, Vm,
};
use storage::ops::accounts::Account;
use storage::ops::vms::{self, ListingClaim, Orphan, SeenVm, claim_listing};
use storage::{Result, StorageError};

use super::{VmContext, build, ms};

/// Drift found (contract 3.12), by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drift {
    /// VMs found stopped while their instance runs: the instance stops.
    pub stopped: u64,
    /// VMs found running while their instance is stopped: stopped again.
    pub restopped: u64,
    /// VMs gone: their instance is lost.
    pub lost: u64,
}

impl Drift {
    /// The kinds, as metrics label them.
    pub const KINDS: [&str; 3] = ["stopped", "restopped", "lost"];

    /// Each kind's label (one of [`Drift::KINDS`]) and count.
    pub fn by_kind(&self) -> [(&'static str, u64); 3] {
        [
            (Drift::KINDS[0], self.stopped),
            (Drift::KINDS[1], self.restopped),
            (Drift::KINDS[2], self.lost),
        ]
    }
}

impl std::ops::AddAssign for Drift {
    fn add_assign(&mut self, more: Drift) {
        self.stopped += more.stopped;
        self.restopped += more.restopped;
        self.lost += more.lost;
    }
}

/// What a listing round did.
#[derive(Debug, Clone, Default)]
pub struct ListingReport {
    /// Accounts listed.
    pub listed: u64,
    /// Accounts whose listing failed.
    pub failed: u64,
    /// Drift found.
    pub drift: Drift,
    /// Orphan VMs deleted (a read of them answered 404).
    pub orphans_deleted: u64,
    /// Orphan VMs found newer than every instance this database has made:
    /// kept, and reported once (`instance.orphan-found`).
    pub orphans_found: u64,
}

/// Lists the managed VMs of every account behind a managed pool (each at
/// most once per interval across replicas) and applies the drift rules.
pub async fn list_accounts(ctx: &VmContext<'_>) -> Result<ListingReport> {
    let mut report = ListingReport::default();
    let (accounts, installation) = {
        let mut conn = ctx.pool.get().await?;
        let accounts = vms::listing_accounts(&mut conn).await?;
        // In a transaction of its own: behind a transaction pooler a
        // statement outside one may run on another server.
        let installation = storage::db::read_only(&mut conn, async |conn| {
            storage::ops::installation::id(conn).await
        })
        .await?;
        (accounts, installation)
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
        match list_one(ctx, &installation, &account, &claim, &mut report).await {
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

/// Lists one account's VMs of `installation` and applies the listing. Only
/// a complete listing is applied: a provider error, or an answer that left
/// a zone out ([`ProviderError::Partial`]), changes nothing (contract 6, r4).
async fn list_one(
    ctx: &VmContext<'_>,
    installation: &str,
    account: &Account,
    claim: &ListingClaim,
    report: &mut ListingReport,
) -> std::result::Result<(), ListingFailure> {
    let provider = build(ctx, account)
        .await
        .map_err(ListingFailure::Provider)?;
    let listed = provider
        .list_installation_vms(installation)
        .await
        .map_err(ListingFailure::Provider)?;
    // The provider filters by the label; what it answered beyond that is
    // not ours either.
    let (ours, others): (Vec<Vm>, Vec<Vm>) = listed
        .into_iter()
        .partition(|vm| label(vm, INSTALLATION_LABEL) == Some(installation));
    if !others.is_empty() {
        tracing::warn!(
            account = %account.account_id,
            vms = others.len(),
            "the listing answered vms of another installation: left alone"
        );
    }
    let seen: Vec<SeenVm> = ours
        .into_iter()
        .map(|vm| SeenVm {
            instance_id: vm.labels.get(INSTANCE_LABEL).cloned(),
            name: vm.name,
            zone: vm.zone,
            status: vm.status,
        })
        .collect();
    let drift = {
        let mut conn = ctx.pool.get().await.map_err(StorageError::from)?;
        let now = ctx.clock.now(&mut conn).await?;
        let root = ctx.root.as_str();
        let drift = vms::apply_listing(&mut conn, root, claim, &seen, now).await?;
        vms::end_listing(&mut conn, claim, true).await?;
        drift
    };
    if drift.stale {
        tracing::info!(
            account = %account.account_id,
            "another listing of the account was applied since this one began: dropped"
        );
    }
    report.drift += Drift {
        stopped: drift.stopped,
        restopped: drift.restopped,
        lost: drift.lost,
    };
    report.orphans_found += drift.orphans_found;
    for orphan in drift.orphans {
        let started = Instant::now();
        let end = delete_orphan(provider.as_ref(), installation, &orphan).await;
        let elapsed_ms = started.elapsed().as_millis() as u64;
        let (zone, name) = (orphan.zone.as_str(), orphan.name.as_str());
        match end {
            Ok(OrphanEnd::Gone) => {
                let mut conn = ctx.pool.get().await.map_err(StorageError::from)?;
                let now = ctx.clock.now(&mut conn).await?;
                let root = ctx.root.as_str();
                let id = &account.account_id;
                if vms::orphan_deleted(&mut conn, root, id, zone, name, now).await? {
                    report.orphans_deleted += 1;
                }
            }
            Ok(OrphanEnd::Pending) => tracing::info!(
                vm = name,
                zone,
                elapsed_ms,
                "an orphan vm's delete has not ended yet: the next listing looks again"
            ),
            Ok(OrphanEnd::NotOurs) => {
                tracing::warn!(
                    vm = name,
                    zone,
                    "an orphan vm's labels no longer say it is ours: left alone"
                );
                let mut conn = ctx.pool.get().await.map_err(StorageError::from)?;
                vms::orphan_released(&mut conn, &account.account_id, zone, name).await?;
            }
            Ok(OrphanEnd::Refused(codes)) => {
                tracing::warn!(
                    vm = name,
                    zone,
                    codes = ?codes,
                    "the provider refused an orphan vm's delete: the next listing sends another"
                );
                let mut conn = ctx.pool.get().await.map_err(StorageError::from)?;
                vms::orphan_delete_refused(&mut conn, &account.account_id, zone, name).await?;
            }
            Err(e) => tracing::warn!(
                vm = name,
                zone,
                error = %e,
                elapsed_ms,
                "deleting an orphan vm failed; the next listing tries again"
            ),
        }
    }
    Ok(())
}

/// A label of `vm`.
fn label<'v>(vm: &'v Vm, key: &str) -> Option<&'v str> {
    vm.labels.get(key).map(String::as_str)
}

/// Whether `vm`, as read now, is still the orphan listed: labelled
/// `bc-managed`, with this installation and the instance it was listed with.
fn still_the_orphan(vm: &Vm, installation: &str, orphan: &Orphan) -> bool {
    label(vm, MANAGED_LABEL) == Some("true")
        && label(vm, INSTALLATION_LABEL) == Some(installation)
        && label(vm, INSTANCE_LABEL) == orphan.instance_id.as_deref()
}

/// Where an orphan's delete ended.
#[derive(Debug)]
enum OrphanEnd {
    /// A read of it answered 404: it is deleted.
    Gone,
    /// Its delete runs on (or ended and a read still finds it).
    Pending,
    /// Its labels say it is no longer ours: nothing was sent, and it is
    /// forgotten.
    NotOurs,
    /// Its delete's operation ended with these errors.
    Refused(Vec<String>),
}

/// Deletes an orphan VM: it is read first and its delete sent (to the zone
/// it is in, with its request id) only while its labels still say it is
/// the orphan listed; the operation is followed a few seconds (a slow one is
/// looked at again by the next listing), then the VM read again. Only a read
/// that answers 404 makes it [`OrphanEnd::Gone`]. An orphan this listing no
/// longer saw is only read.
async fn delete_orphan(
    provider: &dyn InstanceProvider,
    installation: &str,
    orphan: &Orphan,
) -> std::result::Result<OrphanEnd, ProviderError> {
    let (zone, name) = (orphan.zone.as_str(), orphan.name.as_str());
    let Some(vm) = provider.get_vm(zone, name).await? else {
        return Ok(OrphanEnd::Gone);
    };
    if !still_the_orphan(&vm, installation, orphan) {
        return Ok(OrphanEnd::NotOurs);
    }
    if !orphan.listed {
        // Ours, yet not listed: the next listings look at it again.
        return Ok(OrphanEnd::Pending);
    }
    let mut op = match provider.delete_vm(zone, name, &orphan.request_id).await {
        Ok(op) => op,
        Err(ProviderError::NotFound) => return gone_or_pending(provider, zone, name).await,
        Err(e) => return Err(e),
    };
    for _ in 0..20 {
        if op.status == OperationStatus::Done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        op = provider.get_operation(zone, &op.name).await?;
    }
    if op.status != OperationStatus::Done {
        return Ok(OrphanEnd::Pending);
    }
    if !op.error_codes.is_empty() {
        return Ok(OrphanEnd::Refused(op.error_codes));
    }
    gone_or_pending(provider, zone, name).await
}

/// [`OrphanEnd::Gone`] when a read of the VM answers 404, else
/// [`OrphanEnd::Pending`].
async fn gone_or_pending(
    provider: &dyn InstanceProvider,
    zone: &str,
    name: &str,
) -> std::result::Result<OrphanEnd, ProviderError> {
    Ok(match provider.get_vm(zone, name).await? {
        None => OrphanEnd::Gone,
        Some(_) => OrphanEnd::Pending,
    })
}
