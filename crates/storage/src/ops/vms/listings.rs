//! Listings of an account's managed VMs (contract 3.12, drift): claimed
//! like scans and applied instance by instance under the drift rules; the
//! orphans they find are [`super::orphans`]'.
//!
//! A listing holds this installation's VMs only (the worker lists and keeps
//! those labelled `bc-installation` with its id, contract 3.12 r4), so an
//! orphan is always one of ours: labelled with our installation, its
//! instance unknown, `deleted` or `failed`. One whose instance id is newer
//! than every instance this database has made was made by a copy of it (the
//! database was restored from an older backup): it is found, never deleted.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Integer, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use grants_core::vm::{Cause, StepFailure, VmStatus};

use crate::clock::DB_NOW_MS;
use crate::error::{Result, StorageError};
use crate::model::events;
use crate::model::instance::InstanceRow;
use crate::model::states::{DeletedReason, InstanceState};
use crate::ops::accounts::{self, Account};
use crate::ops::instances::managed::{self, Change, Observation};
use crate::ops::instances::{lock_for_worker, lock_quota_of};
use crate::schema::{instances, pools as pools_t, vm_listings};

use super::orphans::Orphan;

/// The accounts behind managed pools, oldest first.
pub async fn listing_accounts(conn: &mut AsyncPgConnection) -> Result<Vec<Account>> {
    crate::db::read_only(conn, async |conn| listing_accounts_now(conn).await).await
}

async fn listing_accounts_now(conn: &mut AsyncPgConnection) -> Result<Vec<Account>> {
    let ids: Vec<String> = pools_t::table
        .filter(pools_t::vm.is_not_null())
        .select(pools_t::account_id)
        .distinct()
        .load(conn)
        .await?;
    let owners: Vec<(String, String)> = crate::schema::provider_accounts::table
        .filter(crate::schema::provider_accounts::account_id.eq_any(&ids))
        .order(crate::schema::provider_accounts::account_id.asc())
        .select((
            crate::schema::provider_accounts::account_id,
            crate::schema::provider_accounts::tenant_id,
        ))
        .load(conn)
        .await?;
    let mut out = Vec::new();
    for (account, tenant) in owners {
        out.push(accounts::find(conn, &tenant, &account).await?);
    }
    Ok(out)
}

/// A listing claimed: the account's applied listings when it was claimed
/// and the real time it began.
///
/// Listings are numbered when they are applied, not when they are claimed
/// (contract 3.12 r4): `vm_listings.listing_seq` counts the account's
/// listings that succeeded and were applied, and the one applied after
/// this claim is number `seq + 1`. "Two consecutive listings" are two
/// consecutive numbers, so a listing that failed (a provider error, a
/// partial answer, a worker killed before it applied anything) takes no
/// number and neither breaks a pair nor moves its date.
#[derive(Debug, Clone)]
pub struct ListingClaim {
    /// The account.
    pub account_id: String,
    /// The account's listings applied when this one was claimed.
    pub seq: i64,
    /// When it began (real time, epoch ms).
    pub started_wall: i64,
}

/// Claims a listing of the account's VMs: `None` when another replica holds
/// one, or the last began less than `interval_ms` ago. A claim takes the
/// lease; the listing's number is taken by [`apply_listing`].
pub async fn claim_listing(
    conn: &mut AsyncPgConnection,
    account_id: &str,
    interval_ms: i64,
    lease_ms: i64,
) -> Result<Option<ListingClaim>> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = BigInt)]
        listing_seq: i64,
        #[diesel(sql_type = BigInt)]
        last_wall: i64,
    }
    let sql = format!(
        "UPDATE vm_listings SET lease_until = {DB_NOW_MS} + $3, last_wall = {DB_NOW_MS} \
         WHERE account_id = $1 AND (lease_until IS NULL OR lease_until < {DB_NOW_MS}) \
           AND (last_wall IS NULL OR last_wall + $2 <= {DB_NOW_MS}) \
         RETURNING listing_seq, last_wall"
    );
    let row: Option<Row> = conn
        .transaction::<_, StorageError, _>(async |conn| {
            diesel::insert_into(vm_listings::table)
                .values(vm_listings::account_id.eq(account_id))
                .on_conflict_do_nothing()
                .execute(conn)
                .await?;
            Ok(diesel::sql_query(sql)
                .bind::<Text, _>(account_id)
                .bind::<BigInt, _>(interval_ms)
                .bind::<BigInt, _>(lease_ms)
                .get_result(conn)
                .await
                .optional()?)
        })
        .await?;
    Ok(row.map(|r| ListingClaim {
        account_id: account_id.to_owned(),
        seq: r.listing_seq,
        started_wall: r.last_wall,
    }))
}

/// Ends a listing: its lease is given back and a failed one is counted. A
/// failed listing took no number, so the listings that succeeded before and
/// after it are consecutive (contract 3.12 r4: a VM missed by both is lost
/// at the first, an orphan seen by both is deleted).
pub async fn end_listing(
    conn: &mut AsyncPgConnection,
    claim: &ListingClaim,
    succeeded: bool,
) -> Result<()> {
    conn.transaction::<_, StorageError, _>(async |conn| {
        end_listing_now(conn, claim, succeeded).await
    })
    .await
}

async fn end_listing_now(
    conn: &mut AsyncPgConnection,
    claim: &ListingClaim,
    succeeded: bool,
) -> Result<()> {
    diesel::update(vm_listings::table.find(&claim.account_id))
        .set((
            vm_listings::lease_until.eq(None::<i64>),
            vm_listings::failures.eq(if succeeded {
                diesel::dsl::sql::<Integer>("0")
            } else {
                diesel::dsl::sql::<Integer>("failures + 1")
            }),
        ))
        .execute(conn)
        .await?;
    Ok(())
}

/// Takes the next listing number of `claim`'s account for it: `None` when
/// another listing was applied since it was claimed (one claimed after its
/// lease ran out), whose view is as new or newer; this one is then dropped.
async fn number_listing(conn: &mut AsyncPgConnection, claim: &ListingClaim) -> Result<Option<i64>> {
    Ok(diesel::update(
        vm_listings::table
            .find(&claim.account_id)
            .filter(vm_listings::listing_seq.eq(claim.seq)),
    )
    .set(vm_listings::listing_seq.eq(vm_listings::listing_seq + 1))
    .returning(vm_listings::listing_seq)
    .get_result(conn)
    .await
    .optional()?)
}

/// A VM as a listing saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenVm {
    /// Name.
    pub name: String,
    /// Zone.
    pub zone: String,
    /// Status.
    pub status: VmStatus,
    /// Its `bc-instance` label.
    pub instance_id: Option<String>,
}

/// What a listing changed.
#[derive(Debug, Clone, Default)]
pub struct Drift {
    /// Instances found stopped at the provider.
    pub stopped: u64,
    /// Stopped instances found running, stopped again.
    pub restopped: u64,
    /// Instances whose VM vanished.
    pub lost: u64,
    /// Orphan VMs to delete now.
    pub orphans: Vec<Orphan>,
    /// Orphan VMs found by this listing whose instance is newer than every
    /// instance this database has made: kept, and reported once
    /// (`instance.orphan-found`).
    pub orphans_found: u64,
    /// Another listing was applied since this one was claimed: nothing was
    /// applied.
    pub stale: bool,
}

/// A listing being applied: its claim and its number.
pub(super) struct Numbered<'a> {
    pub(super) claim: &'a ListingClaim,
    /// The listing's number; the one before it is `seq - 1`.
    pub(super) seq: i64,
}

/// Applies a complete listing of `claim`'s account at `now` (the product's
/// clock): it takes the account's next listing number (nothing is applied
/// when another listing was applied since the claim: `stale`), then the
/// drift rules of contract 3.12, one short transaction per instance that
/// changes. An instance with a step open, or changed by one since the
/// listing began, is left alone. `seen` holds this installation's VMs only;
/// `instance.orphan-found` goes to the `root` tenant.
pub async fn apply_listing(
    conn: &mut AsyncPgConnection,
    root: &str,
    claim: &ListingClaim,
    seen: &[SeenVm],
    now: i64,
) -> Result<Drift> {
    let mut drift = Drift::default();
    let numbered = conn
        .transaction::<_, StorageError, _>(async |conn| number_listing(conn, claim).await)
        .await?;
    let Some(seq) = numbered else {
        drift.stale = true;
        return Ok(drift);
    };
    let listing = Numbered { claim, seq };
    let live: Vec<InstanceRow> = crate::db::read_only(conn, async |conn| {
        instances::table
            .inner_join(pools_t::table)
            .filter(pools_t::account_id.eq(&claim.account_id))
            .filter(instances::managed.eq(true))
            .filter(instances::state.ne_all([InstanceState::Deleted, InstanceState::Failed]))
            .order(instances::instance_id.asc())
            .select(InstanceRow::as_select())
            .load(conn)
            .await
    })
    .await?;
    for inst in &live {
        let vm = seen.iter().find(|v| {
            Some(v.name.as_str()) == inst.vm_name.as_deref()
                && Some(v.zone.as_str()) == inst.vm_zone.as_deref()
        });
        match drift_one(conn, &listing, &inst.instance_id, vm, now).await? {
            Some(Cause::ObservedStopped) => drift.stopped += 1,
            Some(Cause::ObservedRunning) => drift.restopped += 1,
            Some(Cause::Lost) => drift.lost += 1,
            _ => {}
        }
    }
    let found = conn
        .transaction::<_, StorageError, _>(async |conn| {
            super::orphans::orphans(conn, root, &listing, seen, now).await
        })
        .await?;
    (drift.orphans, drift.orphans_found) = found;
    Ok(drift)
}

/// Whether the instance's VM was created before the installation id existed
/// (its create step recorded before the migration that made the id).
async fn made_before_installation(conn: &mut AsyncPgConnection, instance_id: &str) -> Result<bool> {
    #[derive(QueryableByName)]
    struct Before {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        before: bool,
    }
    let row: Before = diesel::sql_query(
        "SELECT EXISTS (SELECT 1 FROM vm_steps s, installation n \
          WHERE s.instance_id = $1 AND s.kind = 'create' \
            AND s.created_wall < n.created_at) AS before",
    )
    .bind::<diesel::sql_types::Text, _>(instance_id)
    .get_result(conn)
    .await?;
    Ok(row.before)
}

/// The drift rules for one instance, in one transaction. A missing VM is
/// marked with the listing's number and instant; the next listing that
/// misses it too (number + 1) takes the instance for lost, at the mark's
/// instant.
async fn drift_one(
    conn: &mut AsyncPgConnection,
    listing: &Numbered<'_>,
    instance_id: &str,
    vm: Option<&SeenVm>,
    now: i64,
) -> Result<Option<Cause>> {
    conn.transaction::<_, StorageError, _>(async |conn| {
        let Some(peek) = InstanceRow::find(conn, instance_id).await? else {
            return Ok(None);
        };
        // A step settled since the listing began, or an instance gone for
        // good: the listing says nothing of it. Both only become true, so
        // the unlocked read decides before any lock is waited for (the
        // quota rows a lost VM needs are the ones every create of the
        // tenant takes).
        let settled_since = |i: &InstanceRow| {
            i.vm_changed_wall
                .is_some_and(|w| w >= listing.claim.started_wall)
        };
        if settled_since(&peek) || peek.state.is_final() {
            return Ok(None);
        }
        if vm.is_none() {
            lock_quota_of(conn, &peek).await?;
        }
        let mut events = Vec::new();
        let (inst, res) = lock_for_worker(conn, instance_id, now, &mut events).await?;
        if settled_since(&inst)
            || inst.state.to_vm().step().is_some()
            || inst.state.is_final()
            || super::outbox::has_open_step(conn, instance_id).await?
        {
            events::publish(conn, now, events).await?;
            return Ok(None);
        }
        let made_before = vm.is_none() && made_before_installation(conn, instance_id).await?;
        let (cause, seen) = match vm {
            Some(vm) => {
                diesel::update(instances::table.find(instance_id))
                    .set((
                        instances::vm_missing_seq.eq(None::<i64>),
                        instances::vm_missing_at.eq(None::<i64>),
                        instances::vm_status.eq(vm.status.as_str()),
                        instances::vm_observed_at.eq(now),
                    ))
                    .execute(conn)
                    .await?;
                let observation = Observation {
                    vm_status: Some(vm.status.clone()),
                    stop_reason: Some("provider"),
                    ..Observation::default()
                };
                match inst.state {
                    InstanceState::Running if vm.status.is_off() => {
                        (Cause::ObservedStopped, observation)
                    }
                    InstanceState::Stopped if vm.status.is_running() => {
                        (Cause::ObservedRunning, observation)
                    }
                    _ => {
                        events::publish(conn, now, events).await?;
                        return Ok(None);
                    }
                }
            }
            // A VM made before this installation had its id carries no
            // `bc-installation` label, so listings never show it: missing
            // from them proves nothing (docs/operations.md says how to
            // label such VMs). It is never taken for lost.
            None if made_before => {
                events::publish(conn, now, events).await?;
                return Ok(None);
            }
            None => {
                if inst.vm_missing_seq != Some(listing.seq - 1) {
                    diesel::update(instances::table.find(instance_id))
                        .set((
                            instances::vm_missing_seq.eq(listing.seq),
                            instances::vm_missing_at.eq(now),
                        ))
                        .execute(conn)
                        .await?;
                    events::publish(conn, now, events).await?;
                    return Ok(None);
                }
                (
                    Cause::Lost,
                    Observation {
                        failure_code: Some(StepFailure::Vanished),
                        deleted_reason: Some(DeletedReason::Lost),
                        ..Observation::default()
                    },
                )
            }
        };
        // A lost VM is gone from the first listing that missed it.
        let at = match cause {
            Cause::Lost => inst.vm_missing_at.unwrap_or(now),
            _ => now,
        };
        let applied = managed::apply(
            conn,
            &inst,
            res.as_ref(),
            Change::of(cause).seen(seen).quota_locked(vm.is_none()),
            at,
            &mut events,
        )
        .await?
        .locked()?;
        events::publish(conn, now, events).await?;
        tracing::warn!(
            instance = %instance_id,
            vm = ?vm.map(|v| (&v.name, &v.zone, &v.status)),
            drift = ?cause,
            "the provider's view differs from the record: the record follows it"
        );
        Ok(matches!(applied, managed::Applied::Changed(_)).then_some(cause))
    })
    .await
}
