//! Signed webhooks (contract 3.13): a tenant's endpoints, their signing
//! secrets sealed with the secret store's keyring ([`crate::crypto`], the
//! webhook's id as the secret's name), and the log of their attempts.
//!
//! A secret is made here, sealed before it reaches a statement, and handed
//! back once (create, rotateSecret; a replayed create answers without it)
//! or to the delivery worker ([`signing_secrets`]); no function here logs
//! it or puts it in an error. Deleting a webhook (or its tenant) erases its
//! sealed secrets in the same transaction, and disabling or deleting it
//! ends its open deliveries as `failed` (`deliveries::end_open`).
//! Which URLs a tenant may name is the caller's policy (`control`), not
//! this module's.

use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use crate::crypto::Keyring;
use crate::error::{Detail, ErrorKind, Limited, Reason, Result, StorageError};
use crate::ids::{self, TenantId, WebhookId};
use crate::locks;
use crate::model::event_data::WebhookTest;
use crate::model::events::{self, EventData, NewEvent};
use crate::model::idempotency::{self, Claim, Created, KeyedRequest};
use crate::model::webhook::{AttemptRow, WebhookRow};
use crate::schema::webhooks as wh;
use crate::schema::{event_heads, events as ev, idempotency_keys, webhook_attempts as wa};

mod attempts;
mod secrets;

pub use attempts::{AttemptPage, deliveries, test};
pub use secrets::{new_secret, rotate_secret, signing_secrets};
use secrets::{open, seal, sealed_of};

/// The TypeID prefix of webhooks.
pub const WEBHOOK_PREFIX: &str = "whk";
/// The most webhooks a tenant may have (contract 3.13).
pub const MAX_WEBHOOKS: i64 = 10;
/// How long a replaced secret still signs (contract 3.13: 24 hours).
pub const OLD_SECRET_MS: i64 = 24 * 3600 * 1000;

/// Whether a webhook sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookState {
    /// It sends the events it matches.
    Enabled,
    /// It sends nothing until enabled again.
    Disabled,
}

impl WebhookState {
    /// The stored and wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookState::Enabled => "enabled",
            WebhookState::Disabled => "disabled",
        }
    }
}

/// What the API shows of a webhook: never its secret.
#[derive(Debug, Clone)]
pub struct Webhook {
    /// `whk_...`
    pub webhook_id: String,
    /// The owning tenant.
    pub tenant_id: String,
    /// The endpoint.
    pub url: String,
    /// The event types it sends; empty: every type.
    pub types: Vec<String>,
    /// What the tenant says it is for.
    pub description: Option<String>,
    /// `enabled` or `disabled`.
    pub state: String,
    /// Creation instant.
    pub created_at: i64,
}

impl From<WebhookRow> for Webhook {
    fn from(r: WebhookRow) -> Self {
        Webhook {
            types: r.type_list(),
            webhook_id: r.webhook_id,
            tenant_id: r.tenant_id,
            url: r.url,
            description: r.description,
            state: r.state,
            created_at: r.created_at,
        }
    }
}

/// A webhook and its signing secret, as rotateSecret answers it once. It
/// holds the secret, so it has no `Debug`.
#[derive(Clone)]
pub struct WithSecret {
    /// The webhook.
    pub webhook: Webhook,
    /// `whsec_...`
    pub secret: String,
}

/// What `webhooks.create` answers: the webhook, with its secret only when
/// this call made it (a replay answers none: contract 3.13 r4). It may hold
/// the secret, so it has no `Debug`.
#[derive(Clone)]
pub struct CreatedWebhook {
    /// The webhook.
    pub webhook: Webhook,
    /// `whsec_...`, in the first answer only.
    pub secret: Option<String>,
}

/// Input of `webhooks.create`, the URL already allowed by the caller.
#[derive(Debug, Clone)]
pub struct NewWebhook<'a> {
    /// Owning (acting) tenant.
    pub tenant_id: &'a TenantId,
    /// The endpoint.
    pub url: &'a str,
    /// The event types to send (empty: every type).
    pub types: &'a [String],
    /// What it is for.
    pub description: Option<&'a str>,
}

/// A change of `webhooks.update`: each `Some` replaces the stored value.
#[derive(Debug, Clone, Default)]
pub struct WebhookChange<'a> {
    /// A new endpoint, already allowed by the caller.
    pub url: Option<&'a str>,
    /// New event types (empty: every type).
    pub types: Option<&'a [String]>,
    /// A new description (empty: none).
    pub description: Option<&'a str>,
    /// Enabled or disabled.
    pub state: Option<WebhookState>,
}

/// The secrets that sign for `row` at `now`: its current secret, then the
/// one it replaced while that still signs.
pub(crate) fn secrets_of(keyring: &Keyring, row: &WebhookRow, now: i64) -> Result<Vec<String>> {
    let mut secrets = vec![open(keyring, row, &sealed_of(row)?)?];
    if let Some(old) = row.old_sealed(now) {
        secrets.push(open(keyring, row, &old)?);
    }
    Ok(secrets)
}

/// The stored form of `types` (`NULL`: every type).
fn stored_types(types: &[String]) -> Option<Vec<String>> {
    (!types.is_empty()).then(|| types.to_vec())
}

/// The tenant's log position now (0 before its first event).
async fn head(conn: &mut AsyncPgConnection, tenant: &str) -> Result<i64> {
    Ok(event_heads::table
        .find(tenant)
        .select(event_heads::last_seq)
        .first(conn)
        .await
        .optional()?
        .unwrap_or(0))
}

/// `webhooks.create`, idempotent under `key` (a retry answers the webhook
/// as it is now, without its secret, even at the limit):
/// `QUOTA_EXCEEDED` (`details { resource: "webhooks", max: 10, used,
/// requested: 1 }`) when the tenant has [`MAX_WEBHOOKS`], `INVALID_STATE`
/// (`no-secrets-key`) without a keyring key. It sends the tenant's events
/// committed after the log position read here.
pub async fn create(
    conn: &mut AsyncPgConnection,
    keyring: &Keyring,
    new: NewWebhook<'_>,
    key: KeyedRequest<'_>,
    now: i64,
) -> Result<Created<CreatedWebhook>> {
    let tenant = new.tenant_id.as_str();
    conn.transaction::<_, StorageError, _>(async move |conn| {
        let id = ids::new_id(WEBHOOK_PREFIX, now);
        match idempotency::claim(conn, key, &id, now).await? {
            Claim::Replay(existing) => {
                let row = find(conn, tenant, &existing).await?;
                Ok(Created::replay(CreatedWebhook {
                    webhook: row.into(),
                    secret: None,
                }))
            }
            Claim::New => {
                // Exclusive among the tenant's creates, so two creates at
                // the limit cannot both count one free place.
                locks::acting_tenant_exclusive(conn, tenant).await?;
                let used: i64 = wh::table
                    .filter(wh::tenant_id.eq(tenant))
                    .filter(wh::deleted_at.is_null())
                    .count()
                    .get_result(conn)
                    .await?;
                if used + 1 > MAX_WEBHOOKS {
                    return Err(StorageError::new(
                        ErrorKind::QuotaExceeded,
                        format!(
                            "the tenant has {used} webhooks, the most it may have is \
                             {MAX_WEBHOOKS}"
                        ),
                    )
                    .with(Detail::Limit {
                        what: Limited::Webhooks,
                        max: MAX_WEBHOOKS,
                        used,
                        requested: 1,
                    }));
                }
                let secret = new_secret();
                let sealed = seal(keyring, tenant, &id, &secret)?;
                let seq = head(conn, tenant).await?;
                let row: WebhookRow = diesel::insert_into(wh::table)
                    .values((
                        wh::webhook_id.eq(&id),
                        wh::tenant_id.eq(tenant),
                        wh::url.eq(new.url),
                        wh::types.eq(stored_types(new.types)),
                        wh::description.eq(new.description.filter(|d| !d.is_empty())),
                        wh::state.eq(WebhookState::Enabled.as_str()),
                        wh::key_id.eq(&sealed.key_id),
                        wh::nonce.eq(&sealed.nonce),
                        wh::ciphertext.eq(&sealed.ciphertext),
                        wh::from_seq.eq(seq),
                        wh::scanned_seq.eq(seq),
                        wh::created_at.eq(now),
                        wh::updated_at.eq(now),
                    ))
                    .returning(WebhookRow::as_returning())
                    .get_result(conn)
                    .await?;
                tracing::info!(
                    tenant = %tenant,
                    webhook = %id,
                    key_id = %sealed.key_id,
                    from_seq = seq,
                    "webhook created"
                );
                Ok(Created::new(CreatedWebhook {
                    webhook: row.into(),
                    secret: Some(secret),
                }))
            }
        }
    })
    .await
}

/// The webhook an earlier `webhooks.create` with `key` made, as a replay
/// without its secret (`CONFLICT` when the key was used with another
/// request; `None` when it was not used): a retry is answered before the
/// method's own rules, which may refuse it now (contract 1.5).
pub async fn replay(
    conn: &mut AsyncPgConnection,
    key: KeyedRequest<'_>,
) -> Result<Option<Created<CreatedWebhook>>> {
    crate::db::read_only(conn, async |conn| replay_now(conn, key).await).await
}

async fn replay_now(
    conn: &mut AsyncPgConnection,
    key: KeyedRequest<'_>,
) -> Result<Option<Created<CreatedWebhook>>> {
    let found: Option<(Vec<u8>, String)> = idempotency_keys::table
        .filter(idempotency_keys::tenant_id.eq(key.tenant_id))
        .filter(idempotency_keys::method.eq(key.method))
        .filter(idempotency_keys::idem_key.eq(key.key))
        .select((idempotency_keys::request_hash, idempotency_keys::object_id))
        .first(conn)
        .await
        .optional()?;
    let Some((hash, id)) = found else {
        return Ok(None);
    };
    if hash != key.request_hash {
        return Err(StorageError::new(
            ErrorKind::Conflict,
            "the idempotency key was already used with a different request",
        )
        .with(Detail::IdempotencyKey(key.key.to_owned())));
    }
    let row = find(conn, key.tenant_id, &id).await?;
    Ok(Some(Created::replay(CreatedWebhook {
        webhook: row.into(),
        secret: None,
    })))
}

/// A webhook of the tenant, not deleted, unlocked; anything else is
/// `NOT_FOUND`.
async fn find(conn: &mut AsyncPgConnection, tenant: &str, id: &str) -> Result<WebhookRow> {
    wh::table
        .find(id)
        .filter(wh::tenant_id.eq(tenant))
        .filter(wh::deleted_at.is_null())
        .select(WebhookRow::as_select())
        .first(conn)
        .await
        .optional()?
        .ok_or_else(|| StorageError::not_found("webhook", id))
}

/// [`find`], the row locked `FOR UPDATE` until the transaction ends (after
/// the tenant's row, as every mutation of the tenant takes it).
async fn lock(conn: &mut AsyncPgConnection, tenant: &str, id: &str) -> Result<WebhookRow> {
    locks::acting_tenant(conn, tenant).await?;
    wh::table
        .find(id)
        .filter(wh::tenant_id.eq(tenant))
        .filter(wh::deleted_at.is_null())
        .select(WebhookRow::as_select())
        .for_update()
        .first(conn)
        .await
        .optional()?
        .ok_or_else(|| StorageError::not_found("webhook", id))
}

/// `webhooks.get`: another tenant's, a deleted or an unknown webhook is
/// `NOT_FOUND`.
pub async fn get(
    conn: &mut AsyncPgConnection,
    tenant: &TenantId,
    id: &WebhookId,
) -> Result<Webhook> {
    Ok(find(conn, tenant.as_str(), id.as_str()).await?.into())
}

/// `webhooks.list`: the tenant's webhooks, newest first (contract 1.6; at
/// most [`MAX_WEBHOOKS`], so one page).
pub async fn list(conn: &mut AsyncPgConnection, tenant: &TenantId) -> Result<Vec<Webhook>> {
    let rows: Vec<WebhookRow> = wh::table
        .filter(wh::tenant_id.eq(tenant.as_str()))
        .filter(wh::deleted_at.is_null())
        .order((wh::created_at.desc(), wh::webhook_id.desc()))
        .limit(crate::LIST_LIMIT)
        .select(WebhookRow::as_select())
        .load(conn)
        .await?;
    Ok(rows.into_iter().map(Webhook::from).collect())
}

/// `webhooks.update`: replaces what `change` names. Disabling a webhook
/// ends its open deliveries as `failed`; enabling a disabled webhook moves
/// its log position to the tenant's head now and clears its run of
/// failures: what was missed while disabled is not sent. A new `url` takes
/// every attempt that starts after the commit, claimed or not.
pub async fn update(
    conn: &mut AsyncPgConnection,
    tenant: &TenantId,
    id: &WebhookId,
    change: WebhookChange<'_>,
    now: i64,
) -> Result<Webhook> {
    let (tenant, id) = (tenant.as_str(), id.as_str());
    conn.transaction::<_, StorageError, _>(async move |conn| {
        let row = lock(conn, tenant, id).await?;
        let url = change.url.unwrap_or(&row.url).to_owned();
        let types = match change.types {
            Some(t) => stored_types(t),
            None => row.types.as_ref().map(|_| row.type_list()),
        };
        let description = match change.description {
            Some(d) => Some(d).filter(|d| !d.is_empty()).map(str::to_owned),
            None => row.description.clone(),
        };
        let state = change
            .state
            .map_or_else(|| row.state.clone(), |s| s.as_str().to_owned());
        let enabling =
            state == WebhookState::Enabled.as_str() && row.state == WebhookState::Disabled.as_str();
        let disabling =
            state == WebhookState::Disabled.as_str() && row.state == WebhookState::Enabled.as_str();
        let ended = if disabling {
            super::deliveries::end_open(conn, id, now).await?
        } else {
            0
        };
        let (from_seq, scanned_seq, failing_since) = if enabling {
            let seq = head(conn, tenant).await?;
            (seq, seq, None)
        } else {
            (row.from_seq, row.scanned_seq, row.failing_since)
        };
        let updated: WebhookRow = diesel::update(wh::table.find(id))
            .set((
                wh::url.eq(&url),
                wh::types.eq(types),
                wh::description.eq(description),
                wh::state.eq(&state),
                wh::from_seq.eq(from_seq),
                wh::scanned_seq.eq(scanned_seq),
                wh::failing_since.eq(failing_since),
                wh::updated_at.eq(now),
            ))
            .returning(WebhookRow::as_returning())
            .get_result(conn)
            .await?;
        tracing::info!(
            tenant = %tenant,
            webhook = %id,
            state = %updated.state,
            enabled_again = enabling,
            deliveries_ended = ended,
            "webhook updated"
        );
        Ok(updated.into())
    })
    .await
}

/// `webhooks.delete`: marks the webhook deleted and erases its sealed
/// secrets (it sends nothing more: its open deliveries end as `failed`;
/// its deliveries and attempts stay until the retention removes them) and
/// frees its idempotency key.
pub async fn delete(
    conn: &mut AsyncPgConnection,
    tenant: &TenantId,
    id: &WebhookId,
    now: i64,
) -> Result<()> {
    let (tenant, id) = (tenant.as_str(), id.as_str());
    conn.transaction::<_, StorageError, _>(async move |conn| {
        lock(conn, tenant, id).await?;
        let ended = erase(conn, id, now).await?;
        tracing::info!(
            tenant = %tenant,
            webhook = %id,
            deliveries_ended = ended,
            "webhook deleted, its secrets erased"
        );
        Ok(())
    })
    .await
}

/// Deletes webhook `id` (its row locked by the caller): marked deleted, its
/// sealed secrets erased, its open deliveries ended, its idempotency key
/// freed. Answers how many deliveries it ended.
async fn erase(conn: &mut AsyncPgConnection, id: &str, now: i64) -> Result<usize> {
    diesel::update(wh::table.find(id))
        .set((
            wh::deleted_at.eq(now),
            wh::updated_at.eq(now),
            wh::key_id.eq(None::<String>),
            wh::nonce.eq(None::<Vec<u8>>),
            wh::ciphertext.eq(None::<Vec<u8>>),
            wh::old_key_id.eq(None::<String>),
            wh::old_nonce.eq(None::<Vec<u8>>),
            wh::old_ciphertext.eq(None::<Vec<u8>>),
            wh::old_until.eq(None::<i64>),
        ))
        .execute(conn)
        .await?;
    diesel::delete(idempotency_keys::table.filter(idempotency_keys::object_id.eq(id)))
        .execute(conn)
        .await?;
    super::deliveries::end_open(conn, id, now).await
}

/// Deletes every webhook of a tenant being deleted (its row held `FOR
/// UPDATE` by `tenants.delete`), each as [`delete`] does. Answers how many.
pub async fn delete_all_of_tenant(
    conn: &mut AsyncPgConnection,
    tenant: &TenantId,
    now: i64,
) -> Result<usize> {
    let ids: Vec<String> = wh::table
        .filter(wh::tenant_id.eq(tenant.as_str()))
        .filter(wh::deleted_at.is_null())
        .order(wh::webhook_id.asc())
        .select(wh::webhook_id)
        .for_update()
        .load(conn)
        .await?;
    for id in &ids {
        erase(conn, id, now).await?;
    }
    Ok(ids.len())
}
