//! The provider side of managed instances (contract 3.12): carrying out the
//! steps of the outbox and listing each account's VMs for drift, through
//! the [`InstanceProvider`] trait, never inside a transaction.
//!
//! One job per module:
//! - `pipeline`: which steps this worker drives, and how many at once: a
//!   pipeline that claims the next step (round-robin across tenants) as soon
//!   as one ends or waits, never a batch that waits for its slowest step;
//! - `step`: driving one claimed step: sent with its `requestId` (the same
//!   on every try), its operation read until `DONE`, the VM read back, the
//!   outcome recorded with storage;
//! - `pace`: how fast each account's mutating calls go (its write budget,
//!   the pauses a rate or concurrent-operations quota asks for);
//! - `listings`: each account's VMs listed for drift, on their own.
//!
//! A worker killed anywhere leaves a step open, and the replica that claims
//! it next sends the same `requestId` again or finds the operation or the
//! VM, so nothing is done twice.

use std::time::Duration;

use grants_core::vm::StepKind;
use providers::{AccountSpec, InstanceFactory, InstanceProvider, ProviderError};
use storage::Clock;
use storage::crypto::Keyring;
use storage::db::DbPool;
use storage::ids::TenantId;
use storage::ops::accounts::Account;
use storage::ops::secrets;

mod listings;
mod look;
mod pace;
mod pipeline;
mod step;

pub use listings::{Drift, ListingReport, list_accounts};
pub use pace::Pacer;
pub use pipeline::drive_steps;

/// How steps and listings are paced.
#[derive(Debug, Clone)]
pub struct VmRules {
    /// How long a step may take from its first send (`BC_VM_STEP_TIMEOUT`,
    /// default 10 min).
    pub step_timeout: Duration,
    /// A claim's lease, renewed while the step is held (`BC_VM_LEASE`).
    pub lease: Duration,
    /// Steps calling the provider at once in one worker
    /// (`BC_VM_CONCURRENCY`, default 256); steps waiting for their
    /// operation do not count.
    pub concurrency: usize,
    /// The least time between two listings of an account.
    pub list_interval: Duration,
    /// The longest wait between two reads of an operation (reads start a
    /// second apart and space out as the operation ages).
    pub max_poll: Duration,
    /// The longest backoff of a retryable failure.
    pub max_backoff: Duration,
    /// Mutating calls per account and minute (`BC_VM_WRITES_PER_MIN`,
    /// default 1200).
    pub writes_per_min: u32,
}

impl Default for VmRules {
    fn default() -> Self {
        VmRules {
            step_timeout: Duration::from_secs(600),
            lease: Duration::from_secs(60),
            concurrency: 256,
            list_interval: Duration::from_secs(30),
            max_poll: Duration::from_secs(4),
            max_backoff: Duration::from_secs(60),
            writes_per_min: 1200,
        }
    }
}

/// What the steps and listings need.
pub struct VmContext<'a> {
    /// Connections.
    pub pool: &'a DbPool,
    /// The product's clock.
    pub clock: Clock,
    /// The root tenant (orphan events go there).
    pub root: &'a TenantId,
    /// Builds an account's instance adapter under the provider policy.
    pub factory: &'a InstanceFactory,
    /// Resolves `secret:NAME` credentials.
    pub keyring: &'a Keyring,
    /// Pacing.
    pub rules: &'a VmRules,
    /// Each account's mutating calls, paced (kept for the process's life).
    pub pacer: &'a Pacer,
    /// This worker's id, the prefix of its claims' lease tokens
    /// (`vms::release_owner` gives them back when it stops).
    pub owner: &'a str,
}

/// How one step ended for this worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepEnd {
    /// Recorded as succeeded.
    Done,
    /// Recorded as failed.
    Failed,
    /// Put off (a retryable failure, a paused account, a slow operation):
    /// due again later.
    Waiting,
    /// The lease was lost to another replica: nothing recorded.
    LeaseLost,
}

/// One step's end, for metrics and logs.
#[derive(Debug, Clone)]
pub struct StepReport {
    /// Its kind.
    pub kind: StepKind,
    /// How it ended here.
    pub end: StepEnd,
    /// From its recording to its end (real time), for a step that ended.
    pub latency: Option<Duration>,
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The wall clock (epoch ms) of this process, for the pacer's minutes.
pub fn wall_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    ms(since)
}

pub(crate) async fn build(
    ctx: &VmContext<'_>,
    account: &Account,
) -> std::result::Result<Box<dyn InstanceProvider>, ProviderError> {
    let secret = match secrets::named_in(&account.config) {
        Some(name) => {
            let mut conn = ctx
                .pool
                .get()
                .await
                .map_err(|e| ProviderError::Transport(format!("database: {e}")))?;
            Some(crate::secrets::resolve(&mut conn, ctx.keyring, &account.tenant_id, name).await?)
        }
        None => None,
    };
    (ctx.factory)(AccountSpec {
        account_id: &account.account_id,
        tenant_id: &account.tenant_id,
        provider: &account.provider,
        config: &account.config,
        secret: secret.as_ref(),
    })
}
