//! A tenant's webhooks (contract 3.13): never their secrets, except the
//! one answer that shows a new secret once.

use schemars::JsonSchema;
use serde::Serialize;
use storage::model::webhook::AttemptRow;
use storage::ops::webhooks;

use super::Millis;

/// A webhook of the tenant: where its events are pushed.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Webhook {
    /// `whk_...`
    pub webhook_id: String,
    /// The owning tenant.
    pub tenant_id: String,
    /// The endpoint events are POSTed to.
    pub url: String,
    /// The event types it sends, as given; an empty list means every type
    /// of the tenant's.
    pub types: Vec<String>,
    /// What the tenant says it is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether it sends.
    #[schemars(extend("enum" = ["enabled", "disabled"]))]
    pub state: String,
    /// Creation instant.
    pub created_at: Millis,
}

impl From<webhooks::Webhook> for Webhook {
    fn from(w: webhooks::Webhook) -> Webhook {
        Webhook {
            webhook_id: w.webhook_id,
            tenant_id: w.tenant_id,
            url: w.url,
            types: w.types,
            description: w.description,
            state: w.state,
            created_at: w.created_at,
        }
    }
}

/// `webhooks.create`: the webhook and its signing secret, shown in the
/// first answer only; a replay (same idempotency key and body) answers the
/// webhook without it.
#[derive(Serialize, JsonSchema)]
pub struct WebhookCreated {
    /// The webhook.
    pub webhook: Webhook,
    /// `whsec_` and 32 random bytes in unpadded base64url: the key of the
    /// `bc-signature` HMAC. In the answer that created the webhook only: the
    /// server keeps it encrypted and never shows it again (a client that
    /// lost it calls `webhooks.rotateSecret`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = "^whsec_[A-Za-z0-9_-]{43}$"))]
    pub secret: Option<String>,
}

impl std::fmt::Debug for WebhookCreated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookCreated")
            .field("webhook", &self.webhook)
            .finish_non_exhaustive()
    }
}

impl From<webhooks::CreatedWebhook> for WebhookCreated {
    fn from(w: webhooks::CreatedWebhook) -> WebhookCreated {
        WebhookCreated {
            webhook: w.webhook.into(),
            secret: w.secret,
        }
    }
}

/// `webhooks.rotateSecret`: the webhook and its new signing secret, shown
/// this once.
#[derive(Serialize, JsonSchema)]
pub struct WebhookWithSecret {
    /// The webhook.
    pub webhook: Webhook,
    /// `whsec_` and 32 random bytes in unpadded base64url: the key of the
    /// `bc-signature` HMAC. The server keeps it encrypted and never shows it
    /// again.
    #[schemars(extend("pattern" = "^whsec_[A-Za-z0-9_-]{43}$"))]
    pub secret: String,
}

impl std::fmt::Debug for WebhookWithSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookWithSecret")
            .field("webhook", &self.webhook)
            .finish_non_exhaustive()
    }
}

impl From<webhooks::WithSecret> for WebhookWithSecret {
    fn from(w: webhooks::WithSecret) -> WebhookWithSecret {
        WebhookWithSecret {
            webhook: w.webhook.into(),
            secret: w.secret,
        }
    }
}

/// `webhooks.delete`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDeleted {
    /// The deleted webhook.
    pub webhook_id: String,
    /// Always true.
    pub deleted: bool,
}

/// `webhooks.test`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookTested {
    /// The `webhook.test` event published (in `events.list`).
    pub event_id: String,
}

/// One attempt to deliver an event to a webhook.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDelivery {
    /// `whd_...`: this attempt.
    pub delivery_id: String,
    /// The event sent.
    pub event_id: String,
    /// Its type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// 1 for the first attempt.
    pub attempt: i32,
    /// When it was made.
    pub at: Millis,
    /// `delivered` (a 2xx within 10 s), `retrying` (another attempt is due
    /// at `nextAttemptAt`) or `failed` (no more attempts).
    #[schemars(extend("enum" = ["delivered", "retrying", "failed"]))]
    pub outcome: String,
    /// The endpoint's HTTP status, when it answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<i32>,
    /// How long the attempt took.
    pub duration_ms: i64,
    /// When the next attempt is due.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<Millis>,
}

impl From<AttemptRow> for WebhookDelivery {
    fn from(a: AttemptRow) -> WebhookDelivery {
        WebhookDelivery {
            delivery_id: a.delivery_id,
            event_id: a.event_id,
            event_type: a.event_type,
            attempt: a.attempt,
            at: a.at,
            outcome: a.outcome,
            status: a.status,
            duration_ms: a.duration_ms,
            next_attempt_at: a.next_attempt_at,
        }
    }
}

replies! {
    /// `{ "webhook": Webhook }`
    WebhookReply { webhook: Webhook as "webhook" }
}
