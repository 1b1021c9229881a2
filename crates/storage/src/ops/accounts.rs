//! Provider accounts.

use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde_json::Value;

use crate::error::{Detail, ErrorKind, Field, Limited, Reason, Result, StorageError};
use crate::ids;
use crate::locks;
use crate::model::idempotency::{self, Claim, Created, KeyedRequest};
use crate::ops::secrets;
use crate::schema::provider_accounts as pa;

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
            Claim::Replay(existing) => get(conn, new.tenant_id, &existing)
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
    tenant_id: &str,
    account_id: &str,
) -> Result<Account> {
    pa::table
        .find(account_id)
        .filter(pa::tenant_id.eq(tenant_id))
        .select(Account::as_select())
        .first(conn)
        .await
        .optional()?
        .ok_or_else(|| StorageError::not_found("provider account", account_id))
}

/// The tenant's accounts, newest first.
pub async fn list(conn: &mut AsyncPgConnection, tenant_id: &str) -> Result<Vec<Account>> {
    Ok(pa::table
        .filter(pa::tenant_id.eq(tenant_id))
        .order((pa::created_at.desc(), pa::account_id.desc()))
        .limit(crate::LIST_LIMIT)
        .select(Account::as_select())
        .load(conn)
        .await?)
}

/// An account whose stored config the provider policy no longer allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disallowed {
    /// The account.
    pub account_id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// The refusal: the field and its reason, never a value.
    pub refusal: String,
}

/// Every account whose config `policy` refuses for its owner today (a
/// tenant's `env:` reference, an endpoint no longer listed, ...). They stay
/// stored but unusable: each scan re-checks the policy first and fails as a
/// provider error. Binaries call this at start-up to log them.
pub async fn disallowed(
    conn: &mut AsyncPgConnection,
    root: &str,
    policy: &providers::policy::ProviderPolicy,
) -> Result<Vec<Disallowed>> {
    let all: Vec<Account> = pa::table
        .order(pa::account_id.asc())
        .select(Account::as_select())
        .load(conn)
        .await?;
    Ok(all
        .into_iter()
        .filter_map(|a| {
            let owner = providers::policy::AccountOwner::of(&a.tenant_id, root);
            let refusal = match providers::gce::GceConfig::from_json(&a.config) {
                Err(e) => e.to_string(),
                Ok(config) => policy.check(&config, owner).err()?.to_string(),
            };
            Some(Disallowed {
                account_id: a.account_id,
                tenant_id: a.tenant_id,
                refusal,
            })
        })
        .collect())
}

/// Logs, at start-up, every account [`disallowed`] finds, and returns how
/// many there are: they stay stored but unusable until fixed.
pub async fn warn_disallowed(
    conn: &mut AsyncPgConnection,
    root: &str,
    policy: &providers::policy::ProviderPolicy,
) -> Result<usize> {
    let refused = disallowed(conn, root, policy).await?;
    for a in &refused {
        tracing::warn!(
            account = %a.account_id,
            tenant = %a.tenant_id,
            refusal = %a.refusal,
            "provider account not allowed by the provider policy; its scans will fail"
        );
    }
    Ok(refused.len())
}
