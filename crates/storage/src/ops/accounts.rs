//! Provider accounts: create, read, the start-up report of those the
//! provider policy refuses, and deletion (contract 3.5, 3.1).

use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use grants_core::{Destination, ForcedEnd};
use serde_json::Value;

use crate::error::{Detail, ErrorKind, Field, Limited, Reason, Result, StorageError};
use crate::ids;
use crate::ids::{AccountId, TenantId};
use crate::locks;
use crate::model::events::{self, NewEvent};
use crate::model::idempotency::{self, Claim, Created, KeyedRequest};
use crate::model::instance::InstanceRow;
use crate::model::reservation::ReservationRow;
use crate::model::states::{InstanceState, SettledState};
use crate::ops::reservations::live_grant_ids;
use crate::ops::{instances, secrets, settlement};
use crate::schema::provider_accounts as pa;
use crate::schema::{
    api_keys, grants, idempotency_keys, instances as inst, pools, provider_accounts, reservations,
};

/// A provider account of a tenant.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = pa)]
pub struct Account {
    /// `pacct_...`
    pub account_id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// Name.
    pub name: String,
    /// Provider name (`gce`).
    pub provider: String,
    /// Validated configuration (secret references only).
    pub config: Value,
    /// Creation instant.
    pub created_at: i64,
}

/// Input of `providerAccounts.create`, with `config` already validated by
/// the provider's manifest.
#[derive(Debug, Clone)]
pub struct NewAccount<'a> {
    /// Owning (acting) tenant.
    pub tenant_id: &'a str,
    /// Name.
    pub name: &'a str,
    /// Provider name.
    pub provider: &'a str,
    /// Validated configuration.
    pub config: &'a Value,
    /// The most accounts the tenant may have (`BC_MAX_ACCOUNTS_PER_TENANT`;
    /// `None`: no limit, the root tenant's case).
    pub max_accounts: Option<i64>,
}

/// `providerAccounts.create`, idempotent under `key` (a retry returns the
/// account even when the tenant is at its limit now): `QUOTA_EXCEEDED`
/// with `details { resource: "providerAccounts", max, used, requested: 1 }`
/// when the tenant already has `max_accounts`.
pub async fn create(
    conn: &mut AsyncPgConnection,
    new: NewAccount<'_>,
    key: KeyedRequest<'_>,
    now: i64,
) -> Result<Created<Account>> {
    conn.transaction::<_, StorageError, _>(async move |conn| {
        let id = ids::new_id("pacct", now);
        match idempotency::claim(conn, key, &id, now).await? {
            Claim::Replay(existing) => find(conn, new.tenant_id, &existing)
                .await
                .map(Created::replay),
            Claim::New => {
                // Exclusive among the tenant's account creates, so two
                // creates at the limit cannot both count one free place.
                locks::acting_tenant_exclusive(conn, new.tenant_id).await?;
                if let Some(max) = new.max_accounts {
                    let used: i64 = pa::table
                        .filter(pa::tenant_id.eq(new.tenant_id))
                        .count()
                        .get_result(conn)
                        .await?;
                    if used + 1 > max {
                        return Err(StorageError::new(
                            ErrorKind::QuotaExceeded,
                            format!(
                                "the tenant has {used} provider accounts, the most it may have \
                                 is {max}"
                            ),
                        )
                        .with(Detail::Limit {
                            what: Limited::ProviderAccounts,
                            max,
                            used,
                            requested: 1,
                        }));
                    }
                }
                // `secret:NAME` names a secret of the account's own tenant
                // (contract 3.5), held `FOR SHARE` until this commits.
                if let Some(name) = secrets::named_in(new.config)
                    && !locks::secret_shared(conn, new.tenant_id, name).await?
                {
                    return Err(StorageError::invalid(
                        Field::ConfigCredentials,
                        Reason::CredentialNotAllowed,
                        format!("the tenant has no secret named {name}"),
                    ));
                }
                Ok(Created::new(
                    diesel::insert_into(pa::table)
                        .values((
                            pa::account_id.eq(&id),
                            pa::tenant_id.eq(new.tenant_id),
                            pa::name.eq(new.name),
                            pa::provider.eq(new.provider),
                            pa::config.eq(new.config),
                            pa::created_at.eq(now),
                        ))
                        .returning(Account::as_returning())
                        .get_result(conn)
                        .await?,
                ))
            }
        }
    })
    .await
}

/// Loads an account of the tenant; another tenant's account is `NOT_FOUND`.
pub async fn get(
    conn: &mut AsyncPgConnection,
    tenant_id: &TenantId,
    account_id: &AccountId,
) -> Result<Account> {
    find(conn, tenant_id.as_str(), account_id.as_str()).await
}

/// [`get`] on ids already read from rows.
pub async fn find(
    conn: &mut AsyncPgConnection,
    tenant_id: &str,
    account_id: &str,
) -> Result<Account> {
    find_optional(conn, tenant_id, account_id)
        .await?
        .ok_or_else(|| StorageError::not_found("provider account", account_id))
}

/// [`find`] on a shared connection (to pipeline), `None` when not found.
pub async fn find_optional(
    conn: &AsyncPgConnection,
    tenant_id: &str,
    account_id: &str,
) -> Result<Option<Account>> {
    let mut conn = conn;
    Ok(pa::table
        .find(account_id)
        .filter(pa::tenant_id.eq(tenant_id))
        .select(Account::as_select())
        .first(&mut conn)
        .await
        .optional()?)
}

/// The tenant's accounts, newest first.
pub async fn list(conn: &mut AsyncPgConnection, tenant_id: &TenantId) -> Result<Vec<Account>> {
    let tenant_id = tenant_id.as_str();
    Ok(pa::table
        .filter(pa::tenant_id.eq(tenant_id))
        .order((pa::created_at.desc(), pa::account_id.desc()))
        .limit(crate::LIST_LIMIT)
        .select(Account::as_select())
        .load(conn)
        .await?)
}

/// Every account of every tenant, by account id.
pub async fn all(conn: &mut AsyncPgConnection) -> Result<Vec<Account>> {
    Ok(pa::table
        .order(pa::account_id.asc())
        .select(Account::as_select())
        .load(conn)
        .await?)
}

/// `providerAccounts.delete`: refused while grants are scheduled or active,
/// or ended grants still have unmetered slot-hours. Otherwise settles each of
/// its reservations up to `now` under its row lock (so a term end due before
/// the delete hands over and publishes its event first), moves the instances
/// still placed on them on-demand (stopped ones lose their slot), removes its
/// ended and cancelled grants (usage records stay), its reservations and the
/// account, and revokes keys limited to it. Pools built on the account outlive
/// it: their `accountId` stays as a record of where they came from.
pub async fn delete_account(
    conn: &mut AsyncPgConnection,
    tenant: &TenantId,
    account_id: &AccountId,
    now: i64,
) -> Result<()> {
    let tenant = tenant.as_str();
    let account_id = account_id.as_str();
    conn.transaction::<_, StorageError, _>(async move |conn| {
        find(conn, tenant, account_id).await?;
        locks::account_for_delete(conn, account_id).await?;
        let locked = locks::account_reservations(conn, account_id).await?;
        let live = live_grant_ids(conn, account_id, None, now).await?;
        if !live.is_empty() {
            return Err(StorageError::invalid_state(
                "grants of the account are scheduled or active; end them first",
            )
            .with(Detail::GrantIds(live)));
        }
        let managed: Vec<String> = inst::table
            .inner_join(pools::table)
            .filter(pools::account_id.eq(account_id))
            .filter(inst::managed.eq(true))
            .filter(inst::state.ne_all([InstanceState::Deleted, InstanceState::Failed]))
            .order(inst::instance_id.asc())
            .limit(100)
            .select(inst::instance_id)
            .load(conn)
            .await?;
        if !managed.is_empty() {
            return Err(StorageError::invalid_state(
                "managed instances of the account's pools are not deleted; delete them first",
            )
            .with(Detail::InstanceIds(managed)));
        }
        let unmetered: Vec<String> = grants::table
            .filter(grants::account_id.eq(account_id))
            .filter(grants::settled_state.ne(SettledState::Cancelled))
            .filter(grants::metered_through.lt(grants::ends_at))
            .order(grants::grant_id.asc())
            .select(grants::grant_id)
            .load(conn)
            .await?;
        if !unmetered.is_empty() {
            return Err(StorageError::invalid_state(
                "ended grants still have slot-hours to meter; retry after the reconciler's next \
                 pass past the hour they ended in",
            )
            .with(Detail::GrantIds(unmetered))
            .with(Detail::Reason(Reason::Unmetered)));
        }
        // Every transition due up to now takes effect first, with its event,
        // so the move on-demand below starts from the true placement.
        let mut events = Vec::new();
        for res in &locked {
            settlement::settle(conn, res, now, &mut events).await?;
        }
        events::publish(conn, now, events).await?;
        forget_account(conn, account_id, &locked, now).await
    })
    .await
}

/// The deletion of a tenant's provider accounts inside `tenants.delete`
/// (contract 3.1), whose transaction holds the tenant's row and, taken next,
/// its account rows ([`locks::tenant_accounts`]): each account is deleted as
/// `providerAccounts.delete` deletes one, except that nothing refuses it.
/// Binding a reservation is the root tenant's alone, so another tenant's
/// accounts carry no grants and no placed instances; should one anyway, its
/// reservations end as gone would end them (grants ended or cancelled with
/// `reservation-gone`, instances on-demand) before they are forgotten.
/// Returns how many accounts were deleted.
pub async fn delete_accounts_of_tenant(
    conn: &mut AsyncPgConnection,
    accounts: &[String],
    now: i64,
    events: &mut Vec<NewEvent>,
) -> Result<usize> {
    for account_id in accounts {
        let locked = locks::account_reservations(conn, account_id).await?;
        for res in &locked {
            settlement::force_end(conn, res, &ForcedEnd::ReservationGone, now, events).await?;
        }
        forget_account(conn, account_id, &locked, now).await?;
    }
    Ok(accounts.len())
}

/// Forgets a locked account whose reservations (locked, `locked`) are
/// settled: instances still seated on them go on-demand (stopped ones lose
/// their slot), its grants (usage records stay), reservations, keys limited
/// to it and the idempotency keys of what it created go, then the account.
async fn forget_account(
    conn: &mut AsyncPgConnection,
    account_id: &str,
    locked: &[ReservationRow],
    now: i64,
) -> Result<()> {
    // Instances on the account's reservations are billed on-demand from now.
    for res in locked {
        for inst in InstanceRow::seated(conn, res).await? {
            let to = if inst.holds_slot {
                Destination::OnDemand
            } else {
                Destination::None
            };
            instances::apply_move(conn, res, &inst.instance_id, &to, now).await?;
        }
    }
    // Idempotency keys live as long as the grants they created.
    diesel::delete(
        idempotency_keys::table.filter(
            idempotency_keys::object_id.eq_any(
                grants::table
                    .filter(grants::account_id.eq(account_id))
                    .select(grants::grant_id),
            ),
        ),
    )
    .execute(conn)
    .await?;
    diesel::delete(grants::table.filter(grants::account_id.eq(account_id)))
        .execute(conn)
        .await?;
    diesel::delete(reservations::table.filter(reservations::account_id.eq(account_id)))
        .execute(conn)
        .await?;
    diesel::update(
        api_keys::table
            .filter(api_keys::account_id.eq(account_id))
            .filter(api_keys::revoked_at.is_null()),
    )
    .set(api_keys::revoked_at.eq(now))
    .execute(conn)
    .await?;
    diesel::delete(provider_accounts::table.find(account_id))
        .execute(conn)
        .await?;
    diesel::delete(idempotency_keys::table.filter(idempotency_keys::object_id.eq(account_id)))
        .execute(conn)
        .await?;
    tracing::info!(account = %account_id, "provider account deleted");
    Ok(())
}
