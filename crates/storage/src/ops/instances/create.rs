//! `instances.create`: the quota charged, then the instance placed (a
//! managed one with its VM's create step), atomically and idempotently.

use diesel_async::{AsyncConnection, AsyncPgConnection};
use grants_core::{Billing, PlacementRequest};

use super::quota::{charges_for, lock_quota_rows, write_quota_rows};
use super::{INSTANCE_PREFIX, candidates, decide, find, place_with, start, vm_name};
use crate::error::{Detail, ErrorKind, Field, Limited, Reason, Result, StorageError};
use crate::ids::{self, TenantId};
use crate::locks;
use crate::model::events;
use crate::model::idempotency::{self, Claim, Created, KeyedRequest};
use crate::model::instance::{InstanceRow, NewInstanceRow, NewVm};
use crate::model::states::InstanceBilling;
use crate::ops::instances::Target;
use crate::ops::tenancy;
use crate::ops::vms::outbox;
use crate::ops::{lending, pools};

/// Input of `instances.create`.
#[derive(Debug, Clone)]
pub struct NewInstance<'a> {
    /// The acting tenant.
    pub tenant_id: &'a TenantId,
    /// Pool.
    pub pool_id: &'a ids::PoolId,
    /// Flavor.
    pub flavor: &'a str,
    /// Project.
    pub project_id: Option<&'a ids::ProjectId>,
    /// Name (defaults to the id).
    pub name: Option<&'a str>,
    /// Billing.
    pub billing: Billing,
    /// Whether it takes only lent slots (contract 3.14).
    pub interruptible: bool,
}

/// [`NewInstance`] with its ids as the rows keep them.
#[derive(Debug, Clone, Copy)]
struct NewInstanceRefs<'a> {
    tenant_id: &'a str,
    pool_id: &'a str,
    flavor: &'a str,
    project_id: Option<&'a str>,
    name: Option<&'a str>,
    billing: Billing,
    interruptible: bool,
}

/// `instances.create`: quota charged, then placed, atomically; idempotent.
pub async fn create(
    conn: &mut AsyncPgConnection,
    root: &TenantId,
    new: NewInstance<'_>,
    key: KeyedRequest<'_>,
    now: i64,
) -> Result<Created<InstanceRow>> {
    let root = root.as_str();
    let new = NewInstanceRefs {
        tenant_id: new.tenant_id.as_str(),
        pool_id: new.pool_id.as_str(),
        flavor: new.flavor,
        project_id: new.project_id.map(ids::ProjectId::as_str),
        name: new.name,
        billing: new.billing,
        interruptible: new.interruptible,
    };
    conn.transaction::<_, StorageError, _>(async move |conn| {
        let id = ids::new_id(INSTANCE_PREFIX, now);
        // Default plans here: generic plans made one tenant's burst of
        // creates twice as slow (docs/benchmarks.md, figure 2b).
        let claimed = idempotency::claim(conn, key, &id, now).await?;
        if let Claim::Replay(existing) = claimed {
            return find(conn, new.tenant_id, &existing)
                .await
                .map(Created::replay);
        }
        // The tenant row first (the lock order): a deletion that committed
        // since the key was authenticated refuses the admission instead of
        // leaving a live instance behind; one that starts now waits for it.
        locks::acting_tenant(conn, new.tenant_id).await?;
        let pool = pools::find(conn, new.tenant_id, root, new.pool_id).await?;
        if pool.flavor(new.flavor).is_none() {
            return Err(StorageError::invalid(
                Field::Flavor,
                Reason::UnknownFlavor,
                format!("pool {} has no flavor {}", pool.pool_id, new.flavor),
            ));
        }
        if let Some(p) = new.project_id
            && tenancy::tenant_project(conn, new.tenant_id, p)
                .await?
                .is_none()
        {
            return Err(StorageError::invalid(
                Field::ProjectId,
                Reason::ProjectNotTenant,
                format!("project {p} is not a project of {}", new.tenant_id),
            ));
        }
        if pool.vm.is_some() && !start::account_exists(conn, &pool.account_id).await? {
            return Err(StorageError::invalid_state(format!(
                "the provider account of managed pool {} is gone",
                pool.pool_id
            ))
            .with(Detail::Reason(Reason::NoAccount)));
        }
        if new.interruptible {
            interruptible_allowed(&pool, new.billing)?;
        }
        let charges = charges_for(&pool, new.flavor)?;
        let request = PlacementRequest::new(
            new.tenant_id,
            new.project_id.map(str::to_owned),
            new.billing,
        );
        // The quota rows are locked from here to the commit, and every create
        // of the tenant in the pool takes them: what they cover is kept to
        // three round trips. The candidates and the hint (unlocked reads) go
        // with the lock, in one round trip (pipelined, in this order).
        let (found, rows) = {
            let c = &*conn;
            futures::try_join!(
                candidates(c, new.pool_id, new.flavor, &request, now),
                lock_quota_rows(c, new.tenant_id, new.pool_id, &charges),
            )?
        };
        let charged = quotas_core::charge(&rows, &charges).map_err(|q| {
            StorageError::new(
                ErrorKind::QuotaExceeded,
                format!("quota {} of pool {} exceeded", q.resource, new.pool_id),
            )
            .with(Detail::PoolId(new.pool_id.to_owned()))
            .with(Detail::Limit {
                what: Limited::Quota(q.resource.clone()),
                max: q.max,
                used: q.used,
                requested: q.requested,
            })
        })?;
        let mut events = Vec::new();
        let (target, placed_zone, lent) = decide(
            conn,
            new.pool_id,
            found,
            &request,
            new.interruptible,
            now,
            &mut events,
        )
        .await?;
        let name = vm_name(&id);
        let zone = match (&pool.vm, placed_zone) {
            (None, _) => None,
            // A VM runs in its reservation's zone, as locked by the placement.
            (Some(_), Some(zone)) => Some(zone),
            (Some(vm), None) => Some(start::vm_zone(conn, &target, vm).await?),
        };
        let reservation = target.reservation();
        let row = NewInstanceRow {
            instance_id: &id,
            tenant_id: new.tenant_id,
            project_id: new.project_id,
            pool_id: new.pool_id,
            flavor: new.flavor,
            name: new.name.unwrap_or(&id),
            billing: InstanceBilling::from_core(new.billing),
            interruptible: new.interruptible,
            created_at: now,
            vm: zone.as_deref().map(|zone| NewVm {
                name: &name,
                zone,
                reservation,
            }),
        };
        // Every write depends on nothing another answers: the quota's new
        // use, the row, its placement, its VM's step with the worker's
        // wake-up, the events and the answer's read, in one round trip
        // (pipelined: each statement runs once the one before it is done).
        let c = &*conn;
        let step = async {
            match &zone {
                Some(zone) => {
                    outbox::record_step(c, &id, grants_core::vm::StepKind::Create, zone, now).await
                }
                None => Ok(()),
            }
        };
        let ((), _, (), (), (), created) = futures::try_join!(
            write_quota_rows(c, new.tenant_id, new.pool_id, &rows, &charged),
            InstanceRow::insert(c, row),
            // A managed instance is billed from its VM seen running.
            place_with(
                c,
                row.subject(),
                &target,
                row.state(),
                true,
                row.vm.is_none(),
                now
            ),
            step,
            events::publish(c, now, events),
            InstanceRow::find(c, &id),
        )?;
        // A grantee's instance admitted into a grant that lent its last idle
        // slot takes it back: the borrower that came last is interrupted.
        let created = match &target {
            Target::Grant { grant_id, .. } if lent => {
                let mut more = Vec::new();
                lending::enforce_grant(conn, grant_id, now, &mut more).await?;
                events::publish(conn, now, more).await?;
                InstanceRow::find(conn, &id).await?
            }
            _ => created,
        };
        let created =
            created.ok_or_else(|| StorageError::internal("the instance just inserted is gone"))?;
        tracing::info!(
            instance = %id,
            tenant = %new.tenant_id,
            placement = ?target,
            "instance created"
        );
        Ok(Created::new(created))
    })
    .await
}

/// Whether an interruptible instance may be made in `pool`: a managed pool
/// with `lending`, billed `standard` (contract 3.14), else `INVALID_INPUT`
/// on `interruptible`.
fn interruptible_allowed(pool: &pools::Pool, billing: Billing) -> Result<()> {
    if pool.lending.is_none() {
        return Err(StorageError::invalid(
            Field::Interruptible,
            Reason::PoolDoesNotLend,
            format!(
                "pool {} does not lend: no instance of it is interruptible",
                pool.pool_id
            ),
        ));
    }
    if billing != Billing::Standard {
        return Err(StorageError::invalid(
            Field::Interruptible,
            Reason::BillingNone,
            "an interruptible instance is billed: billing must be standard",
        ));
    }
    Ok(())
}
