//! The provider account checks that need the provider's config and the
//! provider policy: a new account's config, and the start-up report of the
//! stored ones the policy no longer allows.

use diesel_async::AsyncPgConnection;
use providers::gce::{ConfigError, GceConfig};
use providers::policy::{AccountOwner, ProviderPolicy};
use serde_json::Value;
use storage::Result;
use storage::ops::accounts::{self, Account};

/// Why a new account's config is refused. Displays as the answer's message;
/// [`ConfigRefusal::error`] gives the field and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigRefusal {
    /// The provider's manifest refuses it.
    #[error("invalid provider config: {0}")]
    Invalid(ConfigError),
    /// The provider policy refuses it for the account's owner.
    #[error("provider config not allowed: {0}")]
    NotAllowed(ConfigError),
}

impl ConfigRefusal {
    /// The refused field and its reason.
    pub fn error(&self) -> &ConfigError {
        match self {
            ConfigRefusal::Invalid(e) | ConfigRefusal::NotAllowed(e) => e,
        }
    }
}

/// `providerAccounts.create`'s check of `config` for an account of `tenant`
/// (`root` is the root tenant): parsed by the provider's manifest, then
/// checked against `policy` for its owner, since tenants are not trusted and
/// what an account may reach depends on whose it is (contract 3.5). Each use
/// checks it again. Returns the config as it is stored.
pub fn checked_config(
    config: &Value,
    tenant: &str,
    root: &str,
    policy: &ProviderPolicy,
) -> std::result::Result<Value, ConfigRefusal> {
    let config = GceConfig::from_json(config).map_err(ConfigRefusal::Invalid)?;
    policy
        .check(&config, AccountOwner::of(tenant, root))
        .map_err(ConfigRefusal::NotAllowed)?;
    Ok(config.to_json())
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
    let all: Vec<Account> = accounts::all(conn).await?;
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
