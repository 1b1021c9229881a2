//! Every row lock the product takes, in one place and in the one order every
//! transaction takes them (so no two transactions wait on each other in a
//! cycle):
//!
//! 1. **tenant rows**: `FOR SHARE` by every write that names a tenant (the
//!    acting tenant, a grantee, a quota target), `FOR UPDATE` by
//!    `tenants.delete`, first;
//!    then **a secret row** of that tenant: `FOR SHARE` by an account create
//!    naming it, its own row lock by `secrets.put` and `secrets.delete`;
//! 2. **a provider account row**: a scan's application, an account deletion
//!    (all of a tenant's, by account id, for the tenant's deletion);
//! 3. **a tenant's quota rows of a pool**, by resource (all of a tenant's,
//!    by pool then resource, for its deletion);
//! 4. **reservation rows**, by reservation id then account id;
//! 5. **a reservation's open grant rows**, by start then grant id;
//! 6. **instance rows**, by instance id;
//! 7. **a managed instance's step rows** (`vm_steps`), last: claimed alone
//!    by the worker (`SKIP LOCKED`), and closed after the instance row;
//! 8. **a webhook row, then its delivery rows** (`ops::webhooks`,
//!    `ops::deliveries`): after the tenant row by the methods and by
//!    `tenants.delete`, alone by the worker's attempts; the worker's claims
//!    take delivery rows alone and never wait for a webhook's row.
//!
//! A function here takes one lock (or one ordered batch of one kind) and
//! returns what it read under it. Reconciler passes use the `SKIP LOCKED`
//! variants: a row another transaction holds is that transaction's work.
//!
//! Locks are taken outside this module only in the files named here, each
//! in the order above (`tests/lock_sites.rs` fails on any other file that
//! locks): the claims that pick and lock in one statement,
//! `ops/sql/vms_claim_steps.sql` (step rows, `SKIP LOCKED`),
//! `ops/sql/scans_claim_scan_now.sql` (an account row) and
//! `sql/locks_due_reservations.sql` (this module's); the webhook path,
//! `ops/webhooks.rs` (a webhook row), `ops/deliveries.rs` (the claims'
//! advisory lock, a webhook row `FOR SHARE` at an attempt, delivery rows)
//! and `ops/deliveries/retention.rs` (ended delivery rows, `SKIP LOCKED`);
//! and the migrations' advisory lock, `db.rs` and `test_db.rs`.

use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Bool, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::error::{ErrorKind, Result, StorageError};
use crate::model::instance::InstanceRow;
use crate::model::states::{InstanceState, SettledState, TenantState};
use crate::model::{grant::GrantRow, reservation::ReservationRow};
use crate::ops::tenancy::Tenant;
use crate::schema::{grants, instances, provider_accounts, quotas, reservations, secrets, tenants};

// 1. Tenant rows.

/// Locks a tenant's row `FOR SHARE` and answers whether it is active.
///
/// Every write that names a tenant (a grant's grantee, an instance's,
/// a project's, a key's, an account's or a quota row's tenant) takes this lock
/// before it writes, and `tenants.delete` takes the same row `FOR UPDATE`
/// first (contract 3.6): a write racing the deletion either commits first, so
/// the deletion sees and undoes it, or waits and then finds the tenant
/// deleted.
pub async fn tenant_shared(conn: &AsyncPgConnection, tenant_id: &str) -> Result<bool> {
    let mut conn = conn;
    let conn = &mut conn;
    let state: Option<TenantState> = tenants::table
        .find(tenant_id)
        .select(tenants::state)
        .for_share()
        .first(conn)
        .await
        .optional()?;
    Ok(state == Some(TenantState::Active))
}

/// [`tenant_shared`] for a tenant the request names (a grantee, a quota
/// target): a missing or deleted tenant is `NOT_FOUND`.
pub async fn named_tenant(conn: &mut AsyncPgConnection, tenant_id: &str) -> Result<()> {
    if tenant_shared(conn, tenant_id).await? {
        Ok(())
    } else {
        Err(StorageError::not_found("tenant", tenant_id))
    }
}

/// [`tenant_shared`] for the acting tenant: its key was authenticated, so a
/// tenant found deleted now was deleted while the request ran, and the key no
/// longer works (`UNAUTHENTICATED`).
pub async fn acting_tenant(conn: &mut AsyncPgConnection, tenant_id: &str) -> Result<()> {
    if tenant_shared(conn, tenant_id).await? {
        Ok(())
    } else {
        Err(StorageError::new(
            ErrorKind::Unauthenticated,
            "the tenant has been deleted",
        ))
    }
}

/// Locks the acting tenant's row `FOR NO KEY UPDATE` for a create that
/// counts the tenant's objects against a limit (`providerAccounts.create`
/// and `BC_MAX_ACCOUNTS_PER_TENANT`): two such creates of one tenant take
/// turns, so the second counts what the first inserted. It waits for the
/// tenant's writes holding the row `FOR SHARE` (short transactions) and is
/// otherwise [`acting_tenant`].
pub async fn acting_tenant_exclusive(conn: &mut AsyncPgConnection, tenant_id: &str) -> Result<()> {
    let state: Option<TenantState> = tenants::table
        .find(tenant_id)
        .select(tenants::state)
        .for_no_key_update()
        .first(conn)
        .await
        .optional()?;
    if state == Some(TenantState::Active) {
        Ok(())
    } else {
        Err(StorageError::new(
            ErrorKind::Unauthenticated,
            "the tenant has been deleted",
        ))
    }
}

/// Locks a tenant's row `FOR UPDATE` (the first step of `tenants.delete`).
pub async fn tenant_for_delete(
    conn: &mut AsyncPgConnection,
    tenant_id: &str,
) -> Result<Option<Tenant>> {
    Ok(tenants::table
        .find(tenant_id)
        .select(Tenant::as_select())
        .for_update()
        .first(conn)
        .await
        .optional()?)
}

/// Locks a tenant's secret row `FOR SHARE` and answers whether it exists.
/// An account create naming `secret:NAME` takes it, so a `secrets.delete`
/// racing it either commits first (and the create finds no secret) or waits
/// and then sees the new account referencing it.
pub async fn secret_shared(conn: &mut AsyncPgConnection, tenant: &str, name: &str) -> Result<bool> {
    Ok(secrets::table
        .find((tenant, name))
        .select(secrets::name)
        .for_share()
        .first::<String>(conn)
        .await
        .optional()?
        .is_some())
}

// 2. A provider account row.

/// Locks an account's row for applying a scan and returns the ticket of the
/// last applied scan (`None` when the account is gone).
pub async fn account_for_scan(
    conn: &mut AsyncPgConnection,
    account_id: &str,
) -> Result<Option<i64>> {
    Ok(provider_accounts::table
        .find(account_id)
        .select(provider_accounts::scan_applied_seq)
        .for_update()
        .first(conn)
        .await
        .optional()?)
}

/// Locks every provider account row of a tenant, by account id, and
/// returns their ids (`tenants.delete`, after the tenant's row).
pub async fn tenant_accounts(conn: &mut AsyncPgConnection, tenant: &str) -> Result<Vec<String>> {
    Ok(provider_accounts::table
        .filter(provider_accounts::tenant_id.eq(tenant))
        .order(provider_accounts::account_id.asc())
        .select(provider_accounts::account_id)
        .for_update()
        .load(conn)
        .await?)
}

/// Locks an account's row for its deletion.
pub async fn account_for_delete(conn: &mut AsyncPgConnection, account_id: &str) -> Result<()> {
    provider_accounts::table
        .find(account_id)
        .select(provider_accounts::account_id)
        .for_update()
        .load::<String>(conn)
        .await?;
    Ok(())
}

// 3. Quota rows.

/// Locks a tenant's quota rows of a pool for `resources` (by resource) and
/// returns `(resource, max, used)` of those that exist.
pub async fn quota_rows(
    conn: &AsyncPgConnection,
    tenant: &str,
    pool_id: &str,
    resources: &[&str],
) -> Result<Vec<(String, i64, i64)>> {
    let mut conn = conn;
    Ok(quotas::table
        .filter(quotas::tenant_id.eq(tenant))
        .filter(quotas::pool_id.eq(pool_id))
        .filter(quotas::resource.eq_any(resources))
        .order(quotas::resource.asc())
        .select((quotas::resource, quotas::max_value, quotas::used))
        .for_update()
        .load(&mut conn)
        .await?)
}

/// Locks one quota row and returns `(max, used)`, if it exists.
pub async fn quota_row(
    conn: &mut AsyncPgConnection,
    tenant: &str,
    pool_id: &str,
    resource: &str,
) -> Result<Option<(i64, i64)>> {
    Ok(quotas::table
        .find((tenant, pool_id, resource))
        .select((quotas::max_value, quotas::used))
        .for_update()
        .first(conn)
        .await
        .optional()?)
}

/// Locks every quota row of a tenant (by pool, then resource).
pub async fn tenant_quota_rows(conn: &mut AsyncPgConnection, tenant: &str) -> Result<()> {
    quotas::table
        .filter(quotas::tenant_id.eq(tenant))
        .order((quotas::pool_id.asc(), quotas::resource.asc()))
        .select(quotas::resource)
        .for_update()
        .load::<String>(conn)
        .await?;
    Ok(())
}

// 4. Reservation rows.

/// Locks a reservation's row, waiting for another holder (`None` when it
/// does not exist).
pub async fn reservation(
    conn: &AsyncPgConnection,
    account_id: &str,
    reservation_id: &str,
) -> Result<Option<ReservationRow>> {
    let mut conn = conn;
    let conn = &mut conn;
    Ok(reservations::table
        .find((account_id, reservation_id))
        .select(ReservationRow::as_select())
        .for_update()
        .first(conn)
        .await
        .optional()?)
}

/// Locks a reservation's row unless another transaction holds it (then
/// `None`: that transaction settles it itself). For reconciler passes.
pub async fn reservation_unless_held(
    conn: &mut AsyncPgConnection,
    account_id: &str,
    reservation_id: &str,
) -> Result<Option<ReservationRow>> {
    Ok(reservations::table
        .find((account_id, reservation_id))
        .select(ReservationRow::as_select())
        .for_update()
        .skip_locked()
        .first(conn)
        .await
        .optional()?)
}

/// Locks every reservation row of an account, by reservation id.
pub async fn account_reservations(
    conn: &mut AsyncPgConnection,
    account_id: &str,
) -> Result<Vec<ReservationRow>> {
    Ok(reservations::table
        .filter(reservations::account_id.eq(account_id))
        .order(reservations::reservation_id.asc())
        .select(ReservationRow::as_select())
        .for_update()
        .load(conn)
        .await?)
}

/// A reservation claimed by a metering transaction.
#[derive(Debug, QueryableByName)]
pub struct DueReservation {
    /// The account.
    #[diesel(sql_type = Text)]
    pub account_id: String,
    /// The reservation.
    #[diesel(sql_type = Text)]
    pub reservation_id: String,
}

/// Claims (`SKIP LOCKED`) up to `limit` reservations with a grant that has
/// an unmetered hour before `cutoff`, in lock order.
pub async fn due_reservations(
    conn: &mut AsyncPgConnection,
    cutoff: i64,
    limit: i64,
) -> Result<Vec<DueReservation>> {
    Ok(
        diesel::sql_query(include_str!("sql/locks_due_reservations.sql"))
            .bind::<BigInt, _>(cutoff)
            .bind::<BigInt, _>(limit)
            .load(conn)
            .await?,
    )
}

// 5. Grant rows.

/// Locks the grants settlement still moves on a reservation (scheduled or
/// active as recorded), by start then grant id. Taken after the reservation,
/// so a metering pass cannot advance `meteredThrough` between settlement's
/// read and its write.
pub async fn open_grants(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
) -> Result<Vec<GrantRow>> {
    // Every open grant has started by the end of time.
    started_grants(conn, res, i64::MAX).await
}

/// Locks the open grants of a reservation that have started by `at`, by
/// start then grant id: all that settlement, a refill and the live grants at
/// `at` need (`grants_core::has_due`), however many grants the reservation
/// had before or has scheduled later. Read through the partial index
/// `grants_open_started_idx`.
pub async fn started_grants(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
    at: i64,
) -> Result<Vec<GrantRow>> {
    started_grants_of(conn, &res.account_id, &res.reservation_id, at).await
}

/// [`started_grants`] of a reservation named by its key, on a shared
/// connection: sent in the same round trip as the reservation's lock
/// (pipelined after it), it runs once the lock is held.
pub async fn started_grants_of(
    conn: &AsyncPgConnection,
    account_id: &str,
    reservation_id: &str,
    at: i64,
) -> Result<Vec<GrantRow>> {
    let mut conn = conn;
    let conn = &mut conn;
    Ok(grants::table
        .filter(grants::account_id.eq(account_id))
        .filter(grants::reservation_id.eq(reservation_id))
        .filter(open_state())
        .filter(grants::starts_at.le(at))
        .order((grants::starts_at.asc(), grants::grant_id.asc()))
        .select(GrantRow::as_select())
        .for_update()
        .load(conn)
        .await?)
}

/// `settled_state IN ('scheduled', 'active')` as literal SQL, not a bound
/// array: the planner proves a partial index's predicate only from
/// constants, and a prepared statement's generic plan has none.
pub(crate) fn open_state() -> OpenState {
    debug_assert_eq!(
        SettledState::OPEN.map(SettledState::as_str),
        ["scheduled", "active"]
    );
    OpenState
}

/// [`open_state`]: a fixed SQL fragment with a static query id, so that a
/// query filtering on it keeps its prepared statement in the connection's
/// cache (diesel caches no statement holding a `sql` literal, and then
/// PostgreSQL plans it on every execution).
#[derive(Debug, Clone, Copy, diesel::query_builder::QueryId, diesel::expression::ValidGrouping)]
pub(crate) struct OpenState;

impl diesel::Expression for OpenState {
    type SqlType = Bool;
}

impl diesel::AppearsOnTable<grants::table> for OpenState {}

impl diesel::SelectableExpression<grants::table> for OpenState {}

impl diesel::query_builder::QueryFragment<diesel::pg::Pg> for OpenState {
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, diesel::pg::Pg>,
    ) -> QueryResult<()> {
        out.push_sql("grants.settled_state IN ('scheduled', 'active')");
        Ok(())
    }
}

/// Locks up to `limit` grants of the claimed reservations with an unmetered
/// hour before `cutoff`, by grant id. `claimed` are exactly the claimed
/// (account, reservation) pairs: two accounts may list the same reservation
/// id, and one's grants must never fill the batch of another's.
pub async fn due_grants(
    conn: &mut AsyncPgConnection,
    claimed: &[DueReservation],
    cutoff: i64,
    limit: i64,
) -> Result<Vec<GrantRow>> {
    let accounts: Vec<&str> = claimed.iter().map(|k| k.account_id.as_str()).collect();
    let reservations: Vec<&str> = claimed.iter().map(|k| k.reservation_id.as_str()).collect();
    let in_claimed = diesel::dsl::sql::<Bool>(
        "(grants.account_id, grants.reservation_id) IN (SELECT * FROM unnest(",
    )
    .bind::<Array<Text>, _>(accounts)
    .sql("::text[], ")
    .bind::<Array<Text>, _>(reservations)
    .sql("::text[]))");
    Ok(grants::table
        .filter(in_claimed)
        .filter(grants::settled_state.ne(SettledState::Cancelled))
        .filter(grants::metered_through.lt(grants::ends_at))
        .filter(grants::metered_through.lt(cutoff))
        .order(grants::grant_id.asc())
        .limit(limit)
        .select(GrantRow::as_select())
        .for_update()
        .load(conn)
        .await?)
}

// 6. Instance rows.

/// Locks an instance's row.
pub async fn instance(conn: &mut AsyncPgConnection, instance_id: &str) -> Result<InstanceRow> {
    Ok(instances::table
        .find(instance_id)
        .select(InstanceRow::as_select())
        .for_update()
        .first(conn)
        .await?)
}

/// Locks every live instance of a tenant, by instance id.
pub async fn live_instances_of_tenant(
    conn: &mut AsyncPgConnection,
    tenant: &str,
) -> Result<Vec<InstanceRow>> {
    Ok(instances::table
        .filter(instances::tenant_id.eq(tenant))
        .filter(instances::state.ne_all([InstanceState::Deleted, InstanceState::Failed]))
        .order(instances::instance_id.asc())
        .select(InstanceRow::as_select())
        .for_update()
        .load(conn)
        .await?)
}

/// Locks up to `limit` live instances on a (locked) reservation with an
/// unmetered hour before `cutoff`, by instance id.
pub async fn due_instances_on(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
    cutoff: i64,
    limit: i64,
) -> Result<Vec<InstanceRow>> {
    Ok(instances::table
        .filter(instances::account_id.eq(&res.account_id))
        .filter(instances::reservation_id.eq(&res.reservation_id))
        .filter(instances::state.ne(InstanceState::Deleted))
        .filter(instances::usage_metered_through.lt(cutoff))
        .order(instances::instance_id.asc())
        .limit(limit)
        .select(InstanceRow::as_select())
        .for_update()
        .load(conn)
        .await?)
}

/// Claims (`SKIP LOCKED`) up to `limit` instances on no reservation (on
/// demand, stopped without a slot, or deleted with hours still to meter)
/// with an unmetered hour before `cutoff`, by instance id.
pub async fn due_unplaced_instances(
    conn: &mut AsyncPgConnection,
    cutoff: i64,
    limit: i64,
) -> Result<Vec<InstanceRow>> {
    Ok(instances::table
        .filter(instances::reservation_id.is_null())
        .filter(instances::usage_metered_through.lt(cutoff))
        .filter(
            instances::state
                .ne(InstanceState::Deleted)
                .or(instances::usage_metered_through.lt(instances::deleted_at.assume_not_null())),
        )
        .order(instances::instance_id.asc())
        .limit(limit)
        .select(InstanceRow::as_select())
        .for_update()
        .skip_locked()
        .load(conn)
        .await?)
}
