//! `webhooks` and `webhook_attempts`: a tenant's endpoints with their sealed
//! signing secrets ([`crate::crypto`]), and the log of their attempts.

use std::fmt;

use diesel::prelude::*;

use crate::crypto::Sealed;
use crate::schema::{webhook_attempts, webhooks};

/// A webhook row. Its `Debug` shows no ciphertext.
#[derive(Clone, Queryable, Selectable)]
#[diesel(table_name = webhooks)]
pub struct WebhookRow {
    /// `whk_...`
    pub webhook_id: String,
    /// The owning tenant.
    pub tenant_id: String,
    /// The endpoint.
    pub url: String,
    /// The event types sent; `None`: every type.
    pub types: Option<Vec<Option<String>>>,
    /// What the tenant says it is for.
    pub description: Option<String>,
    /// `enabled` or `disabled`.
    pub state: String,
    /// The id of the key the secret is sealed under (`None` once deleted:
    /// a deleted webhook's secrets are erased).
    pub key_id: Option<String>,
    /// The secret's nonce.
    pub nonce: Option<Vec<u8>>,
    /// The secret's ciphertext and tag.
    pub ciphertext: Option<Vec<u8>>,
    /// The replaced secret's key id, while it still signs.
    pub old_key_id: Option<String>,
    /// The replaced secret's nonce.
    pub old_nonce: Option<Vec<u8>>,
    /// The replaced secret's ciphertext.
    pub old_ciphertext: Option<Vec<u8>>,
    /// The instant the replaced secret stops signing.
    pub old_until: Option<i64>,
    /// The tenant's log position it sends events after.
    pub from_seq: i64,
    /// The log position up to which its deliveries are recorded.
    pub scanned_seq: i64,
    /// The first instant of its current run of failures.
    pub failing_since: Option<i64>,
    /// Creation instant.
    pub created_at: i64,
    /// Last change.
    pub updated_at: i64,
    /// Deletion instant.
    pub deleted_at: Option<i64>,
}

impl fmt::Debug for WebhookRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookRow")
            .field("webhook_id", &self.webhook_id)
            .field("tenant_id", &self.tenant_id)
            .field("url", &self.url)
            .field("state", &self.state)
            .field("key_id", &self.key_id)
            .field("from_seq", &self.from_seq)
            .field("scanned_seq", &self.scanned_seq)
            .finish_non_exhaustive()
    }
}

impl WebhookRow {
    /// The current secret as stored (`None` once erased).
    pub fn sealed(&self) -> Option<Sealed> {
        match (&self.key_id, &self.nonce, &self.ciphertext) {
            (Some(key_id), Some(nonce), Some(ciphertext)) => Some(Sealed {
                key_id: key_id.clone(),
                nonce: nonce.clone(),
                ciphertext: ciphertext.clone(),
            }),
            _ => None,
        }
    }

    /// The replaced secret as stored, while it signs at `now`.
    pub fn old_sealed(&self, now: i64) -> Option<Sealed> {
        match (
            &self.old_key_id,
            &self.old_nonce,
            &self.old_ciphertext,
            self.old_until,
        ) {
            (Some(key_id), Some(nonce), Some(ciphertext), Some(until)) if now < until => {
                Some(Sealed {
                    key_id: key_id.clone(),
                    nonce: nonce.clone(),
                    ciphertext: ciphertext.clone(),
                })
            }
            _ => None,
        }
    }

    /// The event types it sends (empty: every type).
    pub fn type_list(&self) -> Vec<String> {
        self.types.iter().flatten().flatten().cloned().collect()
    }
}

/// One attempt to deliver an event, as `webhooks.deliveries` shows it.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = webhook_attempts)]
pub struct AttemptRow {
    /// Its position in the attempts log (platform-wide; never shown in clear).
    pub attempt_seq: i64,
    /// `whd_...`
    pub delivery_id: String,
    /// The webhook.
    pub webhook_id: String,
    /// The event sent.
    pub event_id: String,
    /// Its type.
    pub event_type: String,
    /// 1 for the first attempt.
    pub attempt: i32,
    /// When it was made.
    pub at: i64,
    /// `delivered`, `retrying` or `failed`.
    pub outcome: String,
    /// The endpoint's HTTP status, when it answered.
    pub status: Option<i32>,
    /// How long it took.
    pub duration_ms: i64,
    /// When the next attempt is due (`retrying`).
    pub next_attempt_at: Option<i64>,
}
