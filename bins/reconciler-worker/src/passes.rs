//! The registry of reconciler passes.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use storage::db::DbPool;
use storage::ops::scans::{self, ScanOutcome};
use storage::ops::{metering, notices};
use storage::{Clock, ErrorKind};

/// What a pass needs.
pub struct PassContext {
    /// Connection pool.
    pub pool: DbPool,
    /// Where "now" comes from.
    pub clock: Clock,
    /// The root tenant's id.
    pub root_tenant: storage::ids::TenantId,
    /// How scans claim accounts among replicas.
    pub scan_rules: storage::ops::scans::ClaimRules,
    /// How many accounts a scan pass lists at once (`BC_SCAN_CONCURRENCY`).
    pub scan_concurrency: usize,
    /// The longest one listing may take (`BC_SCAN_TIMEOUT_MS`).
    pub scan_timeout: std::time::Duration,
    /// Builds the provider adapter of an account, under the provider policy.
    pub providers: std::sync::Arc<providers::ProviderFactory>,
    /// The secret store's keys, to resolve `secret:NAME` (contract 3.9).
    pub keyring: storage::crypto::Keyring,
    /// The grant notices (`BC_EXPIRY_NOTICES`, `BC_UNDERUSE_RATIO`).
    pub notices: storage::ops::notices::NoticeRules,
    /// Builds the instance adapter of an account, under the provider policy.
    pub instances: std::sync::Arc<providers::InstanceFactory>,
    /// How managed instances' steps and listings are paced.
    pub vm_rules: control::vms::VmRules,
    /// Each account's mutating calls, paced across passes.
    pub vm_pacer: std::sync::Arc<control::vms::Pacer>,
    /// This process's id among the workers: the prefix of its VM steps'
    /// lease tokens, given back when it stops.
    pub vm_owner: String,
    /// Woken when the api-server records a step (`NOTIFY`).
    pub vm_wake: std::sync::Arc<tokio::sync::Notify>,
    /// `BC_WEBHOOK_ENDPOINTS`: what other tenants' webhooks may reach.
    pub webhook_policy: std::sync::Arc<providers::ProviderPolicy>,
    /// The provider clients' TLS roots and DNS overrides, for webhooks too.
    pub provider_options: providers::gce::GceProviderOptions,
    /// How webhook deliveries are paced.
    pub webhook_rules: control::webhooks::WebhookRules,
    /// Woken when events are committed (`NOTIFY`).
    pub events_wake: std::sync::Arc<tokio::sync::Notify>,
}

/// What a pass did, for its log line and metrics.
#[derive(Debug, Default, Clone)]
pub struct PassReport {
    /// Named counts (`records: 12`, `grantsEnded: 1`, ...).
    pub counts: Vec<(&'static str, u64)>,
    /// Per provider account, what its scan came to (`ok`, `error`,
    /// `backing_off`, `claimed_elsewhere`).
    pub accounts: Vec<(String, &'static str)>,
    /// The managed instances' steps that ended or were put off.
    pub steps: Vec<control::vms::StepReport>,
    /// Drift found.
    pub drift: control::vms::Drift,
    /// Orphan VMs deleted.
    pub orphans_deleted: u64,
    /// Delivered webhook events' delay from commit to delivery (ms).
    pub webhook_lags_ms: Vec<i64>,
}

impl fmt::Display for PassReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.counts.is_empty() {
            return f.write_str("nothing to do");
        }
        for (i, (k, v)) in self.counts.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

/// A pass's result.
pub type PassFuture<'a> = Pin<Box<dyn Future<Output = anyhow::Result<PassReport>> + Send + 'a>>;

/// One reconciler.
pub trait Pass: Send + Sync {
    /// Its name (`vps.grants`).
    fn name(&self) -> &'static str;
    /// Runs it once.
    fn run<'a>(&'a self, ctx: &'a PassContext) -> PassFuture<'a>;
    /// Waits before the next run: the interval, unless the pass knows
    /// better.
    fn pause<'a>(
        &'a self,
        _ctx: &'a PassContext,
        interval: std::time::Duration,
    ) -> crate::vms::PassPause<'a> {
        Box::pin(tokio::time::sleep(interval))
    }
}

/// Every pass, in the order a round runs them: scans first (a reservation
/// gone ends its grants at the scan's instant), then grants, then instances.
pub fn all() -> Vec<Box<dyn Pass>> {
    vec![
        Box::new(Reservations),
        Box::new(Grants),
        Box::new(crate::vms::Instances),
        Box::new(Usage),
        Box::new(crate::webhooks::Webhooks::default()),
    ]
}

/// `vps.reservations`: scans every provider account.
pub struct Reservations;

impl Pass for Reservations {
    fn name(&self) -> &'static str {
        "vps.reservations"
    }

    fn run<'a>(&'a self, ctx: &'a PassContext) -> PassFuture<'a> {
        Box::pin(async move {
            let p = scan_accounts(ctx).await?;
            Ok(PassReport {
                accounts: p.accounts,
                counts: vec![
                    ("accountsScanned", p.scanned),
                    ("accountsFailed", p.failed),
                    ("accountsBackingOff", p.backing_off),
                    ("accountsClaimedElsewhere", p.claimed_elsewhere),
                    ("reservationsAppeared", p.outcome.appeared),
                    ("reservationsGone", p.outcome.gone),
                    ("grantsClosed", p.outcome.grants_closed),
                    ("capacityShort", p.outcome.capacity_short),
                ],
                ..PassReport::default()
            })
        })
    }
}

/// What one `vps.reservations` pass did.
#[derive(Debug, Default)]
struct ScanTally {
    /// Accounts scanned successfully.
    scanned: u64,
    /// Accounts whose provider failed (retried later with backoff).
    failed: u64,
    /// Accounts skipped because their retry time has not come.
    backing_off: u64,
    /// Accounts another scan claimed (a replica's, or an explicit one) or
    /// scanned within the interval.
    claimed_elsewhere: u64,
    /// Sum of the scans' outcomes.
    outcome: ScanOutcome,
    /// Each account's result.
    accounts: Vec<(String, &'static str)>,
}

/// What one account's scan came to.
enum Scanned {
    /// Its answer was applied.
    Applied(ScanOutcome),
    /// Its provider failed or took longer than the limit (retried later
    /// with backoff).
    Failed,
    /// Another scan holds it or listed it within the interval, or a scan
    /// claimed later was applied first.
    ClaimedElsewhere,
    /// Deleted meanwhile.
    Deleted,
}

/// Scans every provider account whose retry time has come and that no other
/// replica is scanning or scanned less than the spacing ago, up to
/// `scan_concurrency` accounts at once: for each, claim it (a short
/// transaction), list its reservations through the provider trait outside
/// any transaction, within `scan_timeout`, and apply the answer
/// (`run_scan`). A failing or slow provider changes nothing for its
/// account, is logged and retried with backoff, and holds up only its own
/// scan slot; it never fails the pass.
async fn scan_accounts(ctx: &PassContext) -> anyhow::Result<ScanTally> {
    use futures::StreamExt;
    let (now, candidates) = {
        let mut conn = ctx.pool.get().await?;
        let now = ctx.clock.now(&mut conn).await?;
        (
            now,
            storage::db::read_only(&mut conn, async |conn| scans::scan_candidates(conn).await)
                .await?,
        )
    };
    let mut pass = ScanTally::default();
    let mut due = Vec::with_capacity(candidates.len());
    for c in candidates {
        if c.retry_at.is_some_and(|t| t > now) {
            pass.backing_off += 1;
            pass.accounts.push((c.account_id, "backing_off"));
        } else {
            due.push(c);
        }
    }
    let mut scans = futures::stream::iter(due)
        .map(|c| async move {
            let scanned = scan_one(ctx, &c).await;
            (c.account_id, scanned)
        })
        .buffer_unordered(ctx.scan_concurrency.max(1));
    while let Some((account_id, scanned)) = scans.next().await {
        match scanned? {
            Scanned::Applied(o) => {
                pass.scanned += 1;
                pass.accounts.push((account_id, "ok"));
                pass.outcome.appeared += o.appeared;
                pass.outcome.gone += o.gone;
                pass.outcome.grants_closed += o.grants_closed;
                pass.outcome.capacity_short += o.capacity_short;
            }
            Scanned::Failed => {
                pass.failed += 1;
                pass.accounts.push((account_id, "error"));
            }
            Scanned::ClaimedElsewhere => {
                pass.claimed_elsewhere += 1;
                pass.accounts.push((account_id, "claimed_elsewhere"));
            }
            Scanned::Deleted => {}
        }
    }
    Ok(pass)
}

/// Claims, lists and applies one account's scan.
async fn scan_one(ctx: &PassContext, c: &scans::ScanCandidate) -> anyhow::Result<Scanned> {
    let claim = {
        let mut conn = ctx.pool.get().await?;
        let claimed =
            scans::claim_scan(&mut conn, &c.tenant_id, &c.account_id, ctx.scan_rules).await;
        match claimed {
            Ok(claim) => claim,
            // Deleted between the listing and its claim.
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(Scanned::Deleted),
            Err(e) => return Err(e.into()),
        }
    };
    let Some(claim) = claim else {
        return Ok(Scanned::ClaimedElsewhere);
    };
    let scanned = control::scans::run_scan(
        &ctx.pool,
        ctx.clock,
        &ctx.root_tenant,
        &claim,
        ctx.providers.as_ref(),
        &ctx.keyring,
        Some(ctx.scan_timeout),
    )
    .await;
    match scanned {
        Ok(o) if o.stale => Ok(Scanned::ClaimedElsewhere),
        Ok(o) => Ok(Scanned::Applied(o)),
        Err(e) if e.kind == ErrorKind::ProviderFailure => Ok(Scanned::Failed),
        // The account was deleted between its claim and the answer.
        Err(e) if e.kind == ErrorKind::NotFound => Ok(Scanned::Deleted),
        Err(e) => Err(e.into()),
    }
}

/// Creates the months ahead of `now` in the partitioned tables before a pass
/// writes; a failure is logged and the pass goes on (its rows land in the
/// default partitions and are moved when the month is created).
async fn ensure_partitions(conn: &mut storage::db::Conn, now: i64) {
    match storage::ops::partitions::ensure_ahead(conn, now).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(created = n, "monthly partitions created"),
        Err(e) => tracing::warn!(
            error = %e,
            "creating the monthly partitions failed; rows go to the default partitions \
             until the next pass"
        ),
    }
}

/// Rewrites one closed month of the logs sorted by tenant, after the pass has
/// written its records (`storage::ops::partitions::compact_next`); at most one
/// a pass, so a backlog of months spreads over passes. A failure (a lock not
/// had within its timeout, a rare write to the month) is logged and the
/// month is tried again on a later pass. Returns the months rewritten (0 or 1).
async fn compact_closed_month(conn: &mut storage::db::Conn, now: i64) -> u64 {
    let started = std::time::Instant::now();
    match storage::ops::partitions::compact_next(conn, now).await {
        Ok(None) => 0,
        Ok(Some(done)) if done.rows.is_none() => {
            tracing::debug!(table = %done.parent, "another worker is rewriting a month");
            0
        }
        Ok(Some(done)) => {
            tracing::info!(
                table = %done.parent,
                month_start = done.month_start,
                rows = done.rows,
                took_ms = started.elapsed().as_millis() as u64,
                "closed month rewritten sorted by tenant"
            );
            1
        }
        Err(e) => {
            tracing::warn!(
                error = %e,
                took_ms = started.elapsed().as_millis() as u64,
                "rewriting a closed month sorted by tenant failed; it is tried again on a \
                 later pass"
            );
            0
        }
    }
}

/// `vps.grants`: settles every reservation's timeline, writes
/// `vm.grant.slot.hours`, then sends the grant notices due
/// (`reservation-grant.expiring`, `.underused`; contract 9).
pub struct Grants;

impl Pass for Grants {
    fn name(&self) -> &'static str {
        "vps.grants"
    }

    fn run<'a>(&'a self, ctx: &'a PassContext) -> PassFuture<'a> {
        Box::pin(async move {
            let mut conn = ctx.pool.get().await?;
            let now = ctx.clock.now(&mut conn).await?;
            ensure_partitions(&mut conn, now).await;
            // Settle first, one reservation per transaction (one another
            // transaction holds is skipped: it settles it itself).
            let mut transitions = 0;
            for (account, reservation) in storage::db::read_only(&mut conn, async |conn| {
                metering::due_settlements(conn, now).await
            })
            .await?
            {
                transitions +=
                    metering::settle_reservation(&mut conn, &account, &reservation, now).await?;
            }
            // Then meter, one claimed batch per transaction, until none is left.
            let (mut grants, mut records) = (0, 0);
            loop {
                let batch = metering::meter_grant_batch(&mut conn, now).await?;
                grants += batch.items;
                records += batch.records;
                if !batch.more {
                    break;
                }
            }
            let sent = notices::send_due(&mut conn, &ctx.root_tenant, &ctx.notices, now).await?;
            Ok(PassReport {
                counts: vec![
                    ("transitions", transitions),
                    ("grantsMetered", grants),
                    ("records", records),
                    ("expiryNotices", sent.expiring),
                    ("underuseNotices", sent.underused),
                    ("underuseWindowsJudged", sent.windows_judged),
                    ("noticesSkippedHeld", sent.skipped),
                ],
                ..PassReport::default()
            })
        })
    }
}

/// `vps.usage`: writes the instance meters for every ended hour bucket from
/// placement segments.
pub struct Usage;

impl Pass for Usage {
    fn name(&self) -> &'static str {
        "vps.usage"
    }

    fn run<'a>(&'a self, ctx: &'a PassContext) -> PassFuture<'a> {
        Box::pin(async move {
            let mut conn = ctx.pool.get().await?;
            let now = ctx.clock.now(&mut conn).await?;
            ensure_partitions(&mut conn, now).await;
            let (mut instances, mut records) = (0, 0);
            // Instances on reservations: under each reservation's lock after
            // settling it, so no pending take-in or hand-over can change an
            // hour being billed; in batches, each its own transaction.
            for (account, reservation) in storage::db::read_only(&mut conn, async |conn| {
                metering::instance_reservations_due(conn, now).await
            })
            .await?
            {
                loop {
                    let batch =
                        metering::meter_instances_on(&mut conn, &account, &reservation, now)
                            .await?;
                    instances += batch.items;
                    records += batch.records;
                    if !batch.more {
                        break;
                    }
                }
            }
            // Everything else: on demand, stopped without a slot, deleted.
            loop {
                let batch = metering::meter_unplaced_batch(&mut conn, now).await?;
                instances += batch.items;
                records += batch.records;
                if !batch.more {
                    break;
                }
            }
            let compacted = compact_closed_month(&mut conn, now).await;
            Ok(PassReport {
                counts: vec![
                    ("instancesMetered", instances),
                    ("records", records),
                    ("monthsCompacted", compacted),
                ],
                ..PassReport::default()
            })
        })
    }
}
