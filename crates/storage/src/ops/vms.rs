//! The worker's side of managed instances (contract 3.12, 6): claiming the
//! steps of the outbox, recording their progress and outcome, and applying
//! what a listing of an account's VMs found (drift, orphans).
//!
//! A step is claimed with a lease (`lease_until`, `lease_token`) in a short
//! transaction and worked on outside any transaction; every later write of
//! that step checks the token, so a replica whose lease ran out (it was
//! killed, or stalled) can no longer record anything: the replica that
//! claimed the step again carries it on, with the same `requestId`.
//! Only the oldest open step of an instance can be claimed: at most one is
//! in flight per instance.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Integer, Nullable, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use grants_core::vm::{Cause, StepFailure, StepKind, VmStatus};

use crate::clock::DB_NOW_MS;
use crate::error::{Result, StorageError};
use crate::model::events;
use crate::model::instance::InstanceRow;
use crate::model::states::{DeletedReason, StepState};
use crate::more_locks::{self, Try};
use crate::ops::accounts::{self, Account};
use crate::ops::instances::managed::{self, Change, Observation};
use crate::ops::instances::{lock_for_worker, lock_quota_of};
use crate::ops::pools::{self, Pool};
use crate::schema::{instances, vm_steps};

/// A claimed step.
#[derive(Debug, Clone, QueryableByName)]
pub struct StepClaim {
    /// The step.
    #[diesel(sql_type = BigInt)]
    pub step_id: i64,
    /// Its instance.
    #[diesel(sql_type = Text)]
    pub instance_id: String,
    /// `create`, `stop`, `start` or `delete`.
    #[diesel(sql_type = Text)]
    pub kind: String,
    /// Sent with every try.
    #[diesel(sql_type = Text)]
    pub request_id: String,
    /// Where it is sent.
    #[diesel(sql_type = Text)]
    pub zone: String,
    /// For an on-demand create: the index of `zone` in the pool's zones.
    #[diesel(sql_type = Integer)]
    pub zone_index: i32,
    /// The provider's operation, once it answered.
    #[diesel(sql_type = Nullable<Text>)]
    pub operation: Option<String>,
    /// Tries so far that failed and were retried.
    #[diesel(sql_type = Integer)]
    pub attempts: i32,
    /// When it was recorded (real time, epoch ms).
    #[diesel(sql_type = BigInt)]
    pub created_wall: i64,
    /// When it was first sent to the provider (real time, epoch ms): its
    /// deadline counts from then.
    #[diesel(sql_type = Nullable<BigInt>)]
    pub sent_wall: Option<i64>,
    /// This claim's lease.
    #[diesel(sql_type = Text)]
    pub lease_token: String,
}

impl StepClaim {
    /// The step's kind.
    pub fn step(&self) -> Result<StepKind> {
        StepKind::parse(&self.kind)
            .ok_or_else(|| StorageError::internal(format!("unknown step {}", self.kind)))
    }
}

/// Everything a worker needs to carry out a claimed step.
#[derive(Debug, Clone)]
pub struct StepWork {
    /// The claim.
    pub claim: StepClaim,
    /// The instance as it is now.
    pub instance: InstanceRow,
    /// Its pool (with `vm`).
    pub pool: Pool,
    /// The pool's provider account; `None` when it is gone.
    pub account: Option<Account>,
    /// This installation's id: the `bc-installation` label of its VMs
    /// (contract 3.12 r4).
    pub installation: String,
}

/// Claims up to `limit` due steps, each the oldest open step of its
/// instance, for `lease_ms`, round-robin across tenants (oldest first within
/// a tenant). Of the steps that will send a call (no operation yet), an
/// account named in `allowances` gives at most its number (0: none, it is
/// paused) and any other account at most `allowance`; the others are left
/// for later, keeping their turn. The leases' tokens start with `owner.`
/// (the claiming worker's id), so [`release_owner`] can give them back.
pub async fn claim_steps(
    conn: &mut AsyncPgConnection,
    owner: &str,
    limit: i64,
    lease_ms: i64,
    allowances: &[(String, i32)],
    allowance: i32,
) -> Result<Vec<StepClaim>> {
    let (accounts, counts): (Vec<&str>, Vec<i32>) =
        allowances.iter().map(|(a, n)| (a.as_str(), *n)).unzip();
    let token = format!("{owner}.{}", uuid::Uuid::now_v7());
    let sql = include_str!("sql/vms_claim_steps.sql")
        .replace("{DB_NOW_MS}", DB_NOW_MS)
        .replace("{STEP_WAITS}", STEP_WAITS);
    // One short transaction behind a transaction pooler.
    crate::db::single_write(conn, async |conn| {
        // A fixed text: kept prepared (`db::cached`).
        let claims: Vec<StepClaim> = crate::db::cached(
            diesel::sql_query(sql)
                .bind::<BigInt, _>(limit)
                .bind::<BigInt, _>(lease_ms)
                .bind::<Text, _>(&token)
                .bind::<diesel::sql_types::Array<Text>, _>(&accounts)
                .bind::<diesel::sql_types::Array<Integer>, _>(&counts)
                .bind::<Integer, _>(allowance),
        )
        .load(conn)
        .await?;
        Ok(claims)
    })
    .await
}

/// Whether a step waits for borrowers to go (its alias `s`, its instance's
/// `i`): held back by the claim, counted by the lending gauges.
pub(crate) const STEP_WAITS: &str = include_str!("sql/vms_step_waits.sql");

/// The real time (epoch ms) of the next open step's next try, if any, the
/// steps of the accounts in `paused` and those waiting for borrowers to go
/// left out: how long a worker may sleep.
pub async fn next_due(conn: &mut AsyncPgConnection, paused: &[String]) -> Result<Option<i64>> {
    #[derive(QueryableByName)]
    struct Due {
        #[diesel(sql_type = Nullable<BigInt>)]
        due: Option<i64>,
    }
    let sql = format!(
        "SELECT min(s.due_wall) AS due FROM vm_steps s \
         JOIN instances i ON i.instance_id = s.instance_id \
         JOIN pools pl ON pl.pool_id = i.pool_id \
         WHERE s.state = 'open' AND NOT (pl.account_id = ANY($1)) AND NOT {STEP_WAITS}"
    );
    crate::db::read_only(conn, async |conn| {
        let due: Due = crate::db::cached(
            diesel::sql_query(sql).bind::<diesel::sql_types::Array<Text>, _>(paused),
        )
        .get_result(conn)
        .await?;
        Ok(due.due)
    })
    .await
}

/// What a worker needs for a claim: the instance, its pool and account, and
/// this installation's id.
pub async fn work_of(conn: &mut AsyncPgConnection, claim: StepClaim) -> Result<StepWork> {
    crate::db::read_only(conn, async |conn| read_work(conn, claim).await).await
}

async fn read_work(conn: &mut AsyncPgConnection, claim: StepClaim) -> Result<StepWork> {
    let instance = InstanceRow::find(conn, &claim.instance_id)
        .await?
        .ok_or_else(|| StorageError::internal("a step of an unknown instance"))?;
    let pool = pools::get_any(conn, &instance.pool_id).await?;
    let owner: Option<String> = crate::schema::provider_accounts::table
        .find(&pool.account_id)
        .select(crate::schema::provider_accounts::tenant_id)
        .first(conn)
        .await
        .optional()?;
    let account = match owner {
        Some(t) => Some(accounts::find(conn, &t, &pool.account_id).await?),
        None => None,
    };
    let installation = crate::ops::installation::id(conn).await?;
    Ok(StepWork {
        claim,
        instance,
        pool,
        account,
        installation,
    })
}

/// What a step's progress does with the provider's operation it follows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum OperationChange {
    /// Keeps what the step has.
    #[default]
    Keep,
    /// Follows this operation from now.
    Follow(String),
    /// Forgets it: the next try sends the call again.
    Forget,
}

/// How a step goes on.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// The provider's operation from now.
    pub operation: OperationChange,
    /// The next zone of an on-demand create, with a fresh request id.
    pub next_zone: Option<(String, i32)>,
    /// A fresh request id for the next send (a refused delete, sent again:
    /// the same id would answer the same refused operation).
    pub new_request: bool,
    /// When to try again, from now (ms).
    pub due_in_ms: i64,
    /// Whether this was a failed try (counted).
    pub failed_try: bool,
    /// The lease to hold from now (ms).
    pub lease_ms: i64,
    /// `Some(timeout_ms)` when this progress follows a send to the provider:
    /// the first one dates the step's first send, and its deadline is
    /// `timeout_ms` after it.
    pub sent: Option<i64>,
}

/// Records a step's progress; `false` when the claim's lease is lost (the
/// caller stops working on it).
pub async fn progress(
    conn: &mut AsyncPgConnection,
    claim: &StepClaim,
    p: &Progress,
) -> Result<bool> {
    let (set_op, op) = match &p.operation {
        OperationChange::Keep => (false, None),
        OperationChange::Follow(op) => (true, Some(op.clone())),
        OperationChange::Forget => (true, None),
    };
    let (zone, index, request) = match &p.next_zone {
        Some((z, i)) => (
            Some(z.clone()),
            Some(*i),
            Some(uuid::Uuid::now_v7().to_string()),
        ),
        None if p.new_request => (None, None, Some(uuid::Uuid::now_v7().to_string())),
        None => (None, None, None),
    };
    // A create moved to the next zone moves its instance's VM there too, in
    // the same transaction: later steps and listings look for it in that zone.
    conn.transaction::<_, StorageError, _>(async |conn| {
        let n = crate::db::cached(
            diesel::sql_query(format!(
                "UPDATE vm_steps SET \
                 operation = CASE WHEN $3 THEN $4 ELSE operation END, \
                 zone = coalesce($5, zone), zone_index = coalesce($6, zone_index), \
                 request_id = coalesce($7, request_id), \
                 attempts = attempts + CASE WHEN $8 THEN 1 ELSE 0 END, \
                 due_wall = {DB_NOW_MS} + $9, lease_until = {DB_NOW_MS} + $10, \
                 deadline_wall = CASE WHEN $11 IS NOT NULL AND sent_wall IS NULL \
                                      THEN {DB_NOW_MS} + $11 ELSE deadline_wall END, \
                 sent_wall = CASE WHEN $11 IS NOT NULL \
                                  THEN coalesce(sent_wall, {DB_NOW_MS}) ELSE sent_wall END \
                 WHERE step_id = $1 AND lease_token = $2 AND state = 'open'"
            ))
            .bind::<BigInt, _>(claim.step_id)
            .bind::<Text, _>(&claim.lease_token)
            .bind::<diesel::sql_types::Bool, _>(set_op)
            .bind::<Nullable<Text>, _>(op)
            .bind::<Nullable<Text>, _>(zone)
            .bind::<Nullable<Integer>, _>(index)
            .bind::<Nullable<Text>, _>(request)
            .bind::<diesel::sql_types::Bool, _>(p.failed_try)
            .bind::<BigInt, _>(p.due_in_ms)
            .bind::<BigInt, _>(p.lease_ms)
            .bind::<Nullable<BigInt>, _>(p.sent),
        )
        .execute(conn)
        .await?;
        if let (1, Some((zone, _))) = (n, &p.next_zone) {
            diesel::update(instances::table.find(&claim.instance_id))
                .set(instances::vm_zone.eq(zone))
                .execute(conn)
                .await?;
        }
        Ok(n == 1)
    })
    .await
}

/// Gives back the leases of every open step `owner` claimed
/// ([`claim_steps`]): a worker that stops hands its steps in flight to the
/// other replicas at once rather than when their leases run out. A step
/// whose call was sent and not recorded is sent again with the same
/// `requestId`, which the provider answers with the same operation. The
/// number of steps given back.
pub async fn release_owner(conn: &mut AsyncPgConnection, owner: &str) -> Result<usize> {
    let prefix = format!("{owner}.");
    crate::db::single_write(conn, async |conn| {
        diesel::sql_query(
            "UPDATE vm_steps SET lease_until = NULL \
             WHERE state = 'open' AND lease_until IS NOT NULL \
               AND left(lease_token, length($1)) = $1",
        )
        .bind::<Text, _>(&prefix)
        .execute(conn)
        .await
        .map_err(StorageError::from)
    })
    .await
}

/// Gives a claim's lease back, so another try can start at once.
pub async fn release(conn: &mut AsyncPgConnection, claim: &StepClaim) -> Result<()> {
    crate::db::single_write(conn, async |conn| {
        diesel::update(
            vm_steps::table
                .find(claim.step_id)
                .filter(vm_steps::lease_token.eq(&claim.lease_token)),
        )
        .set(vm_steps::lease_until.eq(None::<i64>))
        .execute(conn)
        .await
    })
    .await?;
    Ok(())
}

/// How a step ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The operation is done and the VM read back in the status aimed at.
    Confirmed {
        /// The status read back (running, stopped; `None` when gone).
        vm_status: Option<VmStatus>,
    },
    /// It failed for good ([`StepFailure::Vanished`]: the VM was found
    /// gone, the instance is lost).
    Failed {
        /// Why.
        failure: StepFailure,
    },
}

/// Why a finish stopped without applying.
enum Stop {
    /// The claim's lease is lost: nothing is written.
    LeaseLost,
    Storage(StorageError),
}

impl From<StorageError> for Stop {
    fn from(e: StorageError) -> Self {
        Stop::Storage(e)
    }
}

/// The cause a step's outcome applies.
fn cause_of(kind: StepKind, outcome: &Outcome) -> Cause {
    match outcome {
        Outcome::Confirmed { .. } => Cause::Confirmed(kind),
        Outcome::Failed { failure } if failure.vanished() => Cause::Lost,
        Outcome::Failed { .. } => Cause::Failed(kind),
    }
}

/// Whether applying `cause` to `inst` may release its quota (and so needs
/// its quota rows locked first).
fn may_release_quota(inst: &InstanceRow, cause: Cause) -> bool {
    grants_core::vm::next(inst.state.to_vm(), inst.holds_slot, cause)
        .is_ok_and(|t| t.release == grants_core::vm::Release::All)
}

/// Applies a step's outcome at `now` (the product's clock) and closes it,
/// in one transaction; `false` when the claim's lease is lost (nothing is
/// written). A failed create records a delete of whatever the provider made
/// for it anyway, unless its name was taken by another's VM.
///
/// The tenant's quota rows are locked (first, as the lock order wants) only
/// when the change may release the instance's quota: a VM confirmed running,
/// stopped or started leaves them to the tenant's creates, which all take
/// them (one tenant's burst of creates and the worker's outcomes for them
/// would otherwise queue on the same rows). The need is judged on an
/// unlocked read of the instance and again once it is locked; if it changed
/// in between, the transaction starts again with the rows.
pub async fn finish(
    conn: &mut AsyncPgConnection,
    claim: &StepClaim,
    outcome: &Outcome,
    now: i64,
) -> Result<bool> {
    let kind = claim.step()?;
    let cause = cause_of(kind, outcome);
    for with_quota in more_locks::TRIES {
        let tried = finish_once(conn, claim, outcome, (kind, cause), with_quota, now).await;
        match more_locks::ended(tried) {
            None => {}
            Some(Ok(())) => return Ok(true),
            Some(Err(Stop::LeaseLost)) => return Ok(false),
            Some(Err(Stop::Storage(e))) => return Err(e),
        }
    }
    Err(more_locks::exhausted("a step's finish"))
}

async fn finish_once(
    conn: &mut AsyncPgConnection,
    claim: &StepClaim,
    outcome: &Outcome,
    (kind, cause): (StepKind, Cause),
    with_quota: bool,
    now: i64,
) -> std::result::Result<(), Try<Stop>> {
    conn.transaction::<_, Try<Stop>, _>(async |conn| {
        let peek = InstanceRow::find(conn, &claim.instance_id)
            .await?
            .ok_or_else(|| StorageError::internal("a step of an unknown instance"))?;
        // Quota rows come first in the lock order.
        let quota = with_quota || may_release_quota(&peek, cause);
        if quota {
            lock_quota_of(conn, &peek).await?;
        }
        let mut events = Vec::new();
        let (inst, res) = lock_for_worker(conn, &claim.instance_id, now, &mut events).await?;
        let changed_wall = crate::clock::db_now_ms(conn).await?;
        let seen = match outcome {
            Outcome::Confirmed { vm_status } => Observation {
                vm_status: vm_status.clone(),
                changed_wall: Some(changed_wall),
                ..Observation::default()
            },
            Outcome::Failed { failure } if failure.vanished() => Observation {
                failure_code: Some(StepFailure::Vanished),
                deleted_reason: Some(DeletedReason::Lost),
                changed_wall: Some(changed_wall),
                ..Observation::default()
            },
            Outcome::Failed { failure } => Observation {
                failure_code: (kind == StepKind::Create).then(|| failure.clone()),
                changed_wall: Some(changed_wall),
                ..Observation::default()
            },
        };
        let change = Change::of(cause).seen(seen).quota_locked(quota);
        let applied = managed::apply(conn, &inst, res.as_ref(), change, now, &mut events).await?;
        if applied == managed::Applied::NeedsQuota {
            return Err(Try::MoreLocks);
        }
        let failed_create = matches!(
            applied,
            managed::Applied::Changed(t) if t.state == grants_core::vm::VmState::Failed
        );
        // A name taken by another's VM: not made for it, not ours to delete.
        let taken = matches!(
            outcome,
            Outcome::Failed {
                failure: StepFailure::NameTaken
            }
        );
        if failed_create && !taken {
            let zone = claim.zone.clone();
            outbox::record_step(conn, &inst.instance_id, StepKind::Delete, &zone, now).await?;
        }
        let state = match outcome {
            Outcome::Confirmed { .. } => StepState::Done,
            Outcome::Failed { .. } => StepState::Failed,
        };
        let code = match outcome {
            Outcome::Failed { failure } => Some(failure.code()),
            Outcome::Confirmed { .. } => None,
        };
        let n = crate::db::cached(
            diesel::sql_query(format!(
                "UPDATE vm_steps SET state = $3, failure_code = $4, \
                 finished_wall = {DB_NOW_MS}, lease_until = NULL \
                 WHERE step_id = $1 AND lease_token = $2 AND state = 'open'"
            ))
            .bind::<BigInt, _>(claim.step_id)
            .bind::<Text, _>(&claim.lease_token)
            .bind::<Text, _>(state)
            .bind::<Nullable<Text>, _>(code),
        )
        .execute(conn)
        .await?;
        if n != 1 {
            return Err(Try::Stop(Stop::LeaseLost));
        }
        events::publish(conn, now, events).await?;
        Ok(())
    })
    .await
}

mod listings;
mod orphans;
pub mod outbox;

pub use listings::{
    Drift, ListingClaim, SeenVm, apply_listing, claim_listing, end_listing, listing_accounts,
};
pub use orphans::{Orphan, orphan_delete_refused, orphan_deleted, orphan_released};
