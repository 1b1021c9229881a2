//! `secrets`: a tenant's named secret, encrypted ([`crate::crypto`]).

use std::fmt;

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::crypto::Sealed;
use crate::error::Result;
use crate::schema::secrets;

/// A secret row. Its `Debug` shows no ciphertext.
#[derive(Clone, Queryable, Selectable)]
#[diesel(table_name = secrets)]
pub struct SecretRow {
    /// The owning tenant.
    pub tenant_id: String,
    /// `^[a-z][a-z0-9-]{0,62}$`
    pub name: String,
    /// `service-account` or `token`.
    pub kind: String,
    /// The first 16 hex digits of the value's SHA-256.
    pub fingerprint: String,
    /// The id of the key it is encrypted under.
    pub key_id: String,
    /// The nonce.
    pub nonce: Vec<u8>,
    /// The ciphertext and tag.
    pub ciphertext: Vec<u8>,
    /// Creation instant.
    pub created_at: i64,
    /// Last `secrets.put`.
    pub updated_at: i64,
}

impl fmt::Debug for SecretRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretRow")
            .field("tenant_id", &self.tenant_id)
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("fingerprint", &self.fingerprint)
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

impl SecretRow {
    /// The stored ciphertext.
    pub fn sealed(&self) -> Sealed {
        Sealed {
            key_id: self.key_id.clone(),
            nonce: self.nonce.clone(),
            ciphertext: self.ciphertext.clone(),
        }
    }

    /// One secret of a tenant, unlocked.
    pub async fn find(
        conn: &mut AsyncPgConnection,
        tenant: &str,
        name: &str,
    ) -> Result<Option<SecretRow>> {
        Ok(secrets::table
            .find((tenant, name))
            .select(SecretRow::as_select())
            .first(conn)
            .await
            .optional()?)
    }

    /// A tenant's secrets by name.
    pub async fn of_tenant(conn: &mut AsyncPgConnection, tenant: &str) -> Result<Vec<SecretRow>> {
        Ok(secrets::table
            .filter(secrets::tenant_id.eq(tenant))
            .order(secrets::name.asc())
            .limit(crate::LIST_LIMIT)
            .select(SecretRow::as_select())
            .load(conn)
            .await?)
    }
}
