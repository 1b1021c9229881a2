//! A webhook's signing secrets (contract 3.13): made here, sealed with the
//! keyring before they reach a statement (the webhook's id as the secret's
//! name), opened for the delivery worker, rotated with the old one kept for
//! a day.

use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use rand::RngCore;

use super::*;
use crate::crypto::{KeyError, Keyring, Sealed};

/// A new signing secret: `whsec_` and 32 bytes of the operating system's
/// CSPRNG (through `rand`'s thread generator) in unpadded base64url.
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("whsec_{}", data_encoding::BASE64URL_NOPAD.encode(&bytes))
}

/// Seals a new secret for webhook `id` of `tenant`: `INVALID_STATE`
/// (`no-secrets-key`) without a current key.
pub(super) fn seal(keyring: &Keyring, tenant: &str, id: &str, secret: &str) -> Result<Sealed> {
    keyring.seal(tenant, id, secret).map_err(|e| match e {
        KeyError::NoKey => StorageError::invalid_state(
            "the server has no BC_SECRETS_KEY: webhook secrets cannot be stored",
        )
        .with(Detail::Reason(Reason::NoSecretsKey)),
        other => StorageError::internal(other.to_string()),
    })
}

/// Opens a sealed secret of `row`; a key problem is `INVALID_STATE` naming
/// the key id, never the secret.
pub(super) fn open(keyring: &Keyring, row: &WebhookRow, sealed: &Sealed) -> Result<String> {
    keyring
        .open(&row.tenant_id, &row.webhook_id, sealed)
        .map_err(|e| StorageError::invalid_state(format!("webhook {}: {e}", row.webhook_id)))
}

/// The current secret of a live webhook's row as stored (a live row always
/// has one: the table's check).
pub(super) fn sealed_of(row: &WebhookRow) -> Result<Sealed> {
    row.sealed()
        .ok_or_else(|| StorageError::internal(format!("webhook {} has no secret", row.webhook_id)))
}

/// `webhooks.rotateSecret`: a new secret signs from now on; the one it
/// replaces also signs for [`OLD_SECRET_MS`] (a secret replaced earlier
/// stops). Answers the new secret, once.
pub async fn rotate_secret(
    conn: &mut AsyncPgConnection,
    keyring: &Keyring,
    tenant: &TenantId,
    id: &WebhookId,
    now: i64,
) -> Result<WithSecret> {
    let (tenant, id) = (tenant.as_str(), id.as_str());
    conn.transaction::<_, StorageError, _>(async move |conn| {
        let row = lock(conn, tenant, id).await?;
        let current = sealed_of(&row)?;
        let secret = new_secret();
        let sealed = seal(keyring, tenant, id, &secret)?;
        let updated: WebhookRow = diesel::update(wh::table.find(id))
            .set((
                wh::old_key_id.eq(&current.key_id),
                wh::old_nonce.eq(&current.nonce),
                wh::old_ciphertext.eq(&current.ciphertext),
                wh::old_until.eq(now.saturating_add(OLD_SECRET_MS)),
                wh::key_id.eq(&sealed.key_id),
                wh::nonce.eq(&sealed.nonce),
                wh::ciphertext.eq(&sealed.ciphertext),
                wh::updated_at.eq(now),
            ))
            .returning(WebhookRow::as_returning())
            .get_result(conn)
            .await?;
        tracing::info!(
            tenant = %tenant,
            webhook = %id,
            key_id = %sealed.key_id,
            "webhook secret rotated"
        );
        Ok(WithSecret {
            webhook: updated.into(),
            secret,
        })
    })
    .await
}

/// The secrets that sign a delivery of webhook `id` at `now`: its current
/// secret, then the one it replaced while that still signs. The webhook
/// need not be enabled; a deleted one has none (`NOT_FOUND`). A key problem
/// is `INVALID_STATE` naming the key id, never a secret. (The delivery
/// worker reads them with each attempt: `deliveries::start_attempt`.)
pub async fn signing_secrets(
    conn: &mut AsyncPgConnection,
    keyring: &Keyring,
    id: &WebhookId,
    now: i64,
) -> Result<Vec<String>> {
    let id = id.as_str();
    let row: WebhookRow = crate::db::read_only(conn, async |conn| {
        wh::table
            .find(id)
            .select(WebhookRow::as_select())
            .first(conn)
            .await
            .optional()
    })
    .await?
    .filter(|row| row.deleted_at.is_none())
    .ok_or_else(|| StorageError::not_found("webhook", id))?;
    secrets_of(keyring, &row, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_whsec_and_43_base64url_characters() {
        let a = new_secret();
        let b = new_secret();
        assert_ne!(a, b);
        let body = a.strip_prefix("whsec_").expect("prefix");
        assert_eq!(body.len(), 43);
        assert!(
            body.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
        let decoded = data_encoding::BASE64URL_NOPAD
            .decode(body.as_bytes())
            .expect("base64url");
        assert_eq!(decoded.len(), 32);
    }
}
