//! The secret store (contract 3.9): `secrets.put`, `list`, `delete`, and the
//! decryption of an account's `secret:NAME` for one use.
//!
//! Values are sealed by [`crate::crypto::Keyring`] before they reach a
//! statement and opened only to hand them to the account's adapter; no
//! function here returns, logs or puts a value in an error.

use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use crate::crypto::{KeyError, Keyring};
use crate::error::{Detail, Reason, Result, StorageError};
use crate::ids::TenantId;
use crate::locks;
use crate::model::secret::SecretRow;
use crate::model::states::SecretKind;
use crate::schema::{provider_accounts as pa, secrets};

/// What the API shows of a secret: never its value.
#[derive(Debug, Clone)]
pub struct SecretInfo {
    /// Its name.
    pub name: String,
    /// The owning tenant.
    pub tenant_id: String,
    /// `service-account` or `token`.
    pub kind: String,
    /// The first 16 hex digits of the value's SHA-256.
    pub fingerprint: String,
    /// Creation instant.
    pub created_at: i64,
    /// Last put.
    pub updated_at: i64,
}

impl From<SecretRow> for SecretInfo {
    fn from(r: SecretRow) -> Self {
        SecretInfo {
            name: r.name,
            tenant_id: r.tenant_id,
            kind: r.kind,
            fingerprint: r.fingerprint,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// A secret to store: what `secrets.put` received, with what the caller
/// decided of its value. It holds the value, so it has no `Debug`.
#[derive(Clone)]
pub struct NewSecret<'a> {
    /// The acting tenant, its owner.
    pub tenant: &'a str,
    /// Its name.
    pub name: &'a str,
    /// The value, sealed before it reaches a statement.
    pub value: &'a str,
    /// What the value is.
    pub kind: SecretKind,
    /// The value's fingerprint, as the provider adapters key it.
    pub fingerprint: String,
}

/// `secrets.put`: creates or replaces the acting tenant's secret `name`,
/// sealed under the current key.
pub async fn put(
    conn: &mut AsyncPgConnection,
    keyring: &Keyring,
    new: NewSecret<'_>,
    now: i64,
) -> Result<SecretInfo> {
    let NewSecret {
        tenant,
        name,
        value,
        kind,
        fingerprint: fp,
    } = new;
    let sealed = keyring.seal(tenant, name, value).map_err(|e| match e {
        KeyError::NoKey => StorageError::invalid_state(
            "the server has no BC_SECRETS_KEY: secrets cannot be stored",
        )
        .with(Detail::Reason(Reason::NoSecretsKey)),
        other => StorageError::internal(other.to_string()),
    })?;
    conn.transaction::<_, StorageError, _>(async move |conn| {
        locks::acting_tenant(conn, tenant).await?;
        let row: SecretRow = diesel::insert_into(secrets::table)
            .values((
                secrets::tenant_id.eq(tenant),
                secrets::name.eq(name),
                secrets::kind.eq(kind.as_str()),
                secrets::fingerprint.eq(&fp),
                secrets::key_id.eq(&sealed.key_id),
                secrets::nonce.eq(&sealed.nonce),
                secrets::ciphertext.eq(&sealed.ciphertext),
                secrets::created_at.eq(now),
                secrets::updated_at.eq(now),
            ))
            .on_conflict((secrets::tenant_id, secrets::name))
            .do_update()
            .set((
                secrets::kind.eq(kind.as_str()),
                secrets::fingerprint.eq(&fp),
                secrets::key_id.eq(&sealed.key_id),
                secrets::nonce.eq(&sealed.nonce),
                secrets::ciphertext.eq(&sealed.ciphertext),
                secrets::updated_at.eq(now),
            ))
            .returning(SecretRow::as_returning())
            .get_result(conn)
            .await?;
        tracing::info!(
            tenant = %tenant,
            secret = %name,
            kind = kind.as_str(),
            fingerprint = %row.fingerprint,
            key_id = %row.key_id,
            "secret stored"
        );
        Ok(SecretInfo::from(row))
    })
    .await
}

/// `secrets.list`: the tenant's secrets by name, without values.
pub async fn list(conn: &mut AsyncPgConnection, tenant: &TenantId) -> Result<Vec<SecretInfo>> {
    let tenant = tenant.as_str();
    Ok(SecretRow::of_tenant(conn, tenant)
        .await?
        .into_iter()
        .map(SecretInfo::from)
        .collect())
}

/// The credentials reference of an account that names the secret `name`.
fn reference(name: &str) -> String {
    format!("secret:{name}")
}

/// The secret a stored account config names (`credentials: "secret:NAME"`),
/// if it names one.
pub fn named_in(config: &serde_json::Value) -> Option<&str> {
    config
        .get("credentials")
        .and_then(|c| c.as_str())
        .and_then(|c| c.strip_prefix("secret:"))
}

/// `secrets.delete`: `NOT_FOUND` for an unknown name, `INVALID_STATE` with
/// `details.accountIds` while an account of the tenant references it.
pub async fn delete(conn: &mut AsyncPgConnection, tenant: &TenantId, name: &str) -> Result<()> {
    let tenant = tenant.as_str();
    conn.transaction::<_, StorageError, _>(async move |conn| {
        locks::acting_tenant(conn, tenant).await?;
        // The delete takes the row's lock first: an account create naming the
        // secret holds it `FOR SHARE` until it commits, so the check below
        // sees every account that will reference it.
        let deleted = diesel::delete(secrets::table.find((tenant, name)))
            .execute(conn)
            .await?;
        if deleted == 0 {
            return Err(StorageError::not_found("secret", name));
        }
        let using: Vec<String> = pa::table
            .filter(pa::tenant_id.eq(tenant))
            .filter(
                diesel::dsl::sql::<diesel::sql_types::Bool>("config->>'credentials' = ")
                    .bind::<diesel::sql_types::Text, _>(reference(name)),
            )
            .order(pa::account_id.asc())
            .select(pa::account_id)
            .load(conn)
            .await?;
        if !using.is_empty() {
            return Err(StorageError::invalid_state(format!(
                "secret {name} is referenced by {} provider account(s)",
                using.len()
            ))
            .with(Detail::AccountIds(using)));
        }
        tracing::info!(tenant = %tenant, secret = %name, "secret deleted");
        Ok(())
    })
    .await
}

/// Deletes every secret of a tenant being deleted (inside `tenants.delete`,
/// under its tenant row lock): a departed tenant's credentials are not kept.
pub async fn delete_all_of_tenant(
    conn: &mut AsyncPgConnection,
    tenant: &TenantId,
) -> Result<usize> {
    Ok(
        diesel::delete(secrets::table.filter(secrets::tenant_id.eq(tenant.as_str())))
            .execute(conn)
            .await?,
    )
}

/// A secret decrypted for one use by its account's adapter. It holds the
/// value, so it has no `Debug`.
#[derive(Clone)]
pub struct DecryptedSecret {
    /// Its name.
    pub name: String,
    /// What the value is.
    pub kind: SecretKind,
    /// The value's fingerprint.
    pub fingerprint: String,
    /// The value.
    pub value: String,
}

/// Why a named secret cannot be used: which step failed, never its value.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unusable {
    /// Reading its row failed.
    #[error("cannot be read: {0}")]
    Unreadable(StorageError),
    /// The tenant has no secret of that name.
    #[error("does not exist")]
    Missing,
    /// Its stored kind is none this version knows.
    #[error("has an unknown kind")]
    UnknownKind,
    /// It cannot be opened with the server's keys.
    #[error(transparent)]
    Sealed(KeyError),
}

/// The secret `name` of `tenant`, decrypted for its account's adapter.
/// Errors say which step failed, never its value.
pub async fn decrypt(
    conn: &mut AsyncPgConnection,
    keyring: &Keyring,
    tenant: &str,
    name: &str,
) -> std::result::Result<DecryptedSecret, Unusable> {
    // A read of its own (the scan's provider call comes next).
    let row = crate::db::read_only(conn, async |conn| SecretRow::find(conn, tenant, name).await)
        .await
        .map_err(Unusable::Unreadable)?
        .ok_or(Unusable::Missing)?;
    let kind = SecretKind::parse(&row.kind).ok_or(Unusable::UnknownKind)?;
    let value = keyring
        .open(tenant, name, &row.sealed())
        .map_err(Unusable::Sealed)?;
    Ok(DecryptedSecret {
        name: row.name,
        kind,
        fingerprint: row.fingerprint,
        value,
    })
}
