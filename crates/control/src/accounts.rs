//! The provider account checks that need the provider's config and the
//! provider policy.

use diesel_async::AsyncPgConnection;
use storage::Result;
use storage::ops::accounts::{self, Account};

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
