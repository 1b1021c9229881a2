//! The secret store seen from the providers: what a value is and its
//! fingerprint are the providers' business (`providers::auth`), storage
//! seals and opens it.

use diesel_async::AsyncPgConnection;
use providers::ProviderError;
use providers::auth::{ResolvedSecret, SecretKind, fingerprint};
use storage::Result;
use storage::crypto::Keyring;
use storage::model::states::SecretKind as StoredKind;
use storage::ops::secrets::{self, NewSecret, SecretInfo};

/// `secrets.put`: creates or replaces the acting tenant's secret `name`,
/// sealed under the current key. `kind` is what the caller decided the
/// value is ([`providers::auth::classify_secret`]).
pub async fn put(
    conn: &mut AsyncPgConnection,
    keyring: &Keyring,
    tenant: &str,
    name: &str,
    value: &str,
    kind: SecretKind,
    now: i64,
) -> Result<SecretInfo> {
    let new = NewSecret {
        tenant,
        name,
        value,
        kind: match kind {
            SecretKind::ServiceAccount => StoredKind::ServiceAccount,
            SecretKind::Token => StoredKind::Token,
        },
        fingerprint: fingerprint(value),
    };
    secrets::put(conn, keyring, new, now).await
}

/// The secret `name` of `tenant`, decrypted for its account's adapter.
/// Errors say which secret and why, never its value.
pub async fn resolve(
    conn: &mut AsyncPgConnection,
    keyring: &Keyring,
    tenant: &str,
    name: &str,
) -> std::result::Result<ResolvedSecret, ProviderError> {
    let secret = secrets::decrypt(conn, keyring, tenant, name)
        .await
        .map_err(|why| ProviderError::Credentials(format!("secret:{name}: {why}")))?;
    Ok(ResolvedSecret {
        name: secret.name,
        kind: match secret.kind {
            StoredKind::ServiceAccount => SecretKind::ServiceAccount,
            StoredKind::Token => SecretKind::Token,
        },
        fingerprint: secret.fingerprint,
        value: secret.value,
    })
}
