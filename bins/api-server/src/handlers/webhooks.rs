//! webhooks (contract 3.13): a tenant's endpoints its events are pushed
//! to, signed. The signing secret is shown once, by `create` and
//! `rotateSecret`; answers, logs, events, errors and the audit trail carry
//! the webhook's id, never its secret. Delivery is the worker's.

use control::webhooks::{Refused, checked};
use iam_check::Permission;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Deserialize;
use serde_json::json;
use storage::cursor::Reader;
use storage::ids::WebhookId;
use storage::model::events::EventData;
use storage::ops::webhooks::{self, NewWebhook, WebhookChange, WebhookState};

use super::EVENTS;
use super::examples::KEY;
use crate::error::{ApiError, Code};
use crate::registry::{Call, Kind, Method, endpoint};
use crate::schema::{IDEMPOTENCY_KEY, TenantOnly};
use crate::wire::{
    self, Items, Page, WebhookCreated, WebhookDeleted, WebhookReply, WebhookTested,
    WebhookWithSecret,
};

/// Webhook ids (at most 56 characters).
const WEBHOOK_ID: &str = WebhookId::PATTERN;
/// An example webhook id.
const WEBHOOK: &str = "whk_01jd8x3m5q7r9t1v3w5y7z9b2k";
/// The longest URL.
const MAX_URL: usize = 2048;
/// The most event types one webhook names.
const MAX_TYPES: usize = 32;
/// The longest description.
const MAX_DESCRIPTION: usize = 256;

/// The opaque cursor of `webhooks.deliveries`: `u` and a sealed 128-bit
/// block in lower-case base32hex (`storage::cursor`, bound to the webhook).
const DELIVERY_CURSOR: &str = "^u[0-9a-v]{25}[048cgkos]$";

fn method(
    method: &'static str,
    kind: Kind,
    summary: &'static str,
    endpoint: crate::registry::Endpoint,
) -> Method {
    EVENTS
        .method(
            "webhooks",
            method,
            kind,
            Permission::IamManage,
            summary,
            endpoint,
        )
        .phase("v1.0")
        .example(json!({ "tenantId": "acme", "webhookId": WEBHOOK }))
}

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    vec![
        method(
            "create",
            Kind::Mutation,
            "Subscribes an endpoint to the tenant's events (all types, or those of types); \
             answers its signing secret, shown this once (a replay answers the webhook without \
             it). Other tenants than root name https URLs off internal addresses unless \
             BC_WEBHOOK_ENDPOINTS lists the origin.",
            endpoint(create),
        )
        .errors(&[Code::Conflict, Code::InvalidState, Code::QuotaExceeded])
        .example(json!({
            "tenantId": "acme",
            "url": "https://hooks.acme.example/bc",
            "types": ["reservation-grant.expiring", "instance.failed"],
            "description": "on-call pager",
            "idempotencyKey": KEY,
        })),
        method(
            "get",
            Kind::Read,
            "Returns a webhook of the tenant (never its secret).",
            endpoint(get),
        )
        .errors(&[Code::NotFound]),
        method(
            "list",
            Kind::Read,
            "Lists the tenant's webhooks, newest first (at most 10; never their secrets).",
            endpoint(list),
        )
        .example(json!({ "tenantId": "acme" })),
        method(
            "update",
            Kind::Mutation,
            "Changes a webhook's url, types, description or state; disabling ends its open \
             deliveries as failed, enabling a disabled webhook sends the events from now on, not \
             those missed; a new url takes every attempt from now on.",
            endpoint(update),
        )
        .errors(&[Code::NotFound])
        .example(json!({ "tenantId": "acme", "webhookId": WEBHOOK, "state": "enabled" })),
        method(
            "delete",
            Kind::Mutation,
            "Deletes a webhook: it sends nothing more and its signing secrets are erased.",
            endpoint(delete),
        )
        .errors(&[Code::NotFound]),
        method(
            "rotateSecret",
            Kind::Mutation,
            "Replaces a webhook's signing secret, answered this once; the old one also signs \
             for 24 hours.",
            endpoint(rotate_secret),
        )
        .errors(&[Code::NotFound, Code::InvalidState]),
        method(
            "test",
            Kind::Mutation,
            "Publishes a webhook.test event in the tenant that only this webhook receives.",
            endpoint(test),
        )
        .errors(&[Code::NotFound]),
        method(
            "deliveries",
            Kind::Read,
            "Pages a webhook's delivery attempts, oldest first, with an opaque cursor.",
            endpoint(deliveries),
        )
        .errors(&[Code::NotFound])
        .example(json!({ "tenantId": "acme", "webhookId": WEBHOOK, "limit": 100 })),
    ]
}

/// The documented and checked shape of `types` at create: event types,
/// each once.
fn types_schema(_: &mut SchemaGenerator) -> Schema {
    types_described("Event types to send; absent or empty: every type of the tenant's.")
}

/// `types` at update.
fn new_types_schema(_: &mut SchemaGenerator) -> Schema {
    types_described("New event types to send (empty: every type); absent: unchanged.")
}

fn types_described(description: &str) -> Schema {
    Schema::try_from(json!({
        "type": "array",
        "description": description,
        "maxItems": MAX_TYPES,
        "uniqueItems": true,
        "items": { "type": "string", "enum": EventData::TYPES },
    }))
    .unwrap_or_default()
}

/// `webhooks.create`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Create {
    #[schemars(length(min = 1, max = MAX_URL))]
    url: String,
    #[serde(default)]
    #[schemars(schema_with = "types_schema")]
    types: Vec<String>,
    #[schemars(length(max = MAX_DESCRIPTION))]
    description: Option<String>,
    #[schemars(length(min = 1, max = 128), regex(pattern = IDEMPOTENCY_KEY))]
    idempotency_key: String,
}

/// `url` checked against the rules of contract 3.13 for a webhook of the
/// acting tenant (`control::webhooks::checked`; `INVALID_INPUT` on `url`,
/// reason `endpoint-not-allowed`, or `pattern` for what is not a URL).
fn url_of(call: &Call, raw: &str) -> Result<String, ApiError> {
    let root = call.tenant() == call.root();
    match checked(raw, root, &call.app.webhook_endpoints) {
        Ok(url) => Ok(url.into()),
        Err(Refused::NotUrl) => Err(ApiError::invalid(
            "url",
            "pattern",
            Refused::NotUrl.message(),
        )),
        Err(refused) => Err(ApiError::invalid(
            "url",
            "endpoint-not-allowed",
            refused.message(),
        )),
    }
}

async fn create(call: Call, input: Create) -> Result<WebhookCreated, ApiError> {
    let hash = call.request_hash();
    let key = call.keyed(&input.idempotency_key, &hash);
    // The URL rules are the method's own: a replay is matched before them
    // (contract 1.5), inside the storage call, which gets the URL as checked
    // when it passes them.
    let url = url_of(&call, &input.url);
    let url = match url {
        Ok(url) => url,
        Err(refused) => {
            let (mut conn, _) = call.conn_now().await?;
            return match webhooks::replay(&mut conn, key).await? {
                Some(created) => Ok(call.created(created).into()),
                None => Err(refused),
            };
        }
    };
    let new = NewWebhook {
        tenant_id: call.tenant(),
        url: &url,
        types: &input.types,
        description: input.description.as_deref(),
    };
    let (mut conn, now) = call.conn_now().await?;
    let created = webhooks::create(&mut conn, &call.app.keyring, new, key, now).await?;
    Ok(call.created(created).into())
}

/// `webhookId` as the type storage takes. The schema has checked the
/// pattern already; a value it let through that does not parse is refused
/// as the schema refuses one (`INVALID_INPUT`, reason `pattern`).
fn webhook_id(raw: &str) -> Result<WebhookId, ApiError> {
    WebhookId::parse(raw).map_err(|_| {
        ApiError::invalid(
            "webhookId",
            "pattern",
            format!("webhookId must match {WEBHOOK_ID}"),
        )
        .with("pattern", WEBHOOK_ID)
    })
}

/// A method on one webhook.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WebhookRef {
    #[schemars(length(min = 30, max = 56), regex(pattern = WEBHOOK_ID))]
    webhook_id: String,
}

async fn get(call: Call, input: WebhookRef) -> Result<WebhookReply, ApiError> {
    let id = webhook_id(&input.webhook_id)?;
    let mut conn = call.conn().await?;
    Ok(storage::db::read_only(&mut conn, async |conn| {
        webhooks::get(conn, call.tenant(), &id).await
    })
    .await?
    .into())
}

async fn list(call: Call, _: TenantOnly) -> Result<Items<wire::Webhook>, ApiError> {
    let mut conn = call.conn().await?;
    Ok(Items::of(
        storage::db::read_only(&mut conn, async |conn| {
            webhooks::list(conn, call.tenant()).await
        })
        .await?,
    ))
}

/// `webhooks.update`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Update {
    #[schemars(length(min = 30, max = 56), regex(pattern = WEBHOOK_ID))]
    webhook_id: String,
    #[schemars(length(min = 1, max = MAX_URL))]
    url: Option<String>,
    #[serde(default)]
    #[schemars(schema_with = "new_types_schema")]
    types: Option<Vec<String>>,
    /// A new description; empty: none.
    #[schemars(length(max = MAX_DESCRIPTION))]
    description: Option<String>,
    #[schemars(extend("enum" = ["enabled", "disabled"]))]
    state: Option<String>,
}

async fn update(call: Call, input: Update) -> Result<WebhookReply, ApiError> {
    let id = webhook_id(&input.webhook_id)?;
    let url = input.url.as_deref().map(|u| url_of(&call, u)).transpose()?;
    let state = match input.state.as_deref() {
        None => None,
        Some("enabled") => Some(WebhookState::Enabled),
        Some("disabled") => Some(WebhookState::Disabled),
        Some(_) => return Err(ApiError::invalid("state", "enum", "enabled or disabled")),
    };
    let change = WebhookChange {
        url: url.as_deref(),
        types: input.types.as_deref(),
        description: input.description.as_deref(),
        state,
    };
    let (mut conn, now) = call.conn_now().await?;
    Ok(webhooks::update(&mut conn, call.tenant(), &id, change, now)
        .await?
        .into())
}

async fn delete(call: Call, input: WebhookRef) -> Result<WebhookDeleted, ApiError> {
    let id = webhook_id(&input.webhook_id)?;
    let (mut conn, now) = call.conn_now().await?;
    webhooks::delete(&mut conn, call.tenant(), &id, now).await?;
    Ok(WebhookDeleted {
        webhook_id: id.into_string(),
        deleted: true,
    })
}

async fn rotate_secret(call: Call, input: WebhookRef) -> Result<WebhookWithSecret, ApiError> {
    let id = webhook_id(&input.webhook_id)?;
    let (mut conn, now) = call.conn_now().await?;
    Ok(
        webhooks::rotate_secret(&mut conn, &call.app.keyring, call.tenant(), &id, now)
            .await?
            .into(),
    )
}

async fn test(call: Call, input: WebhookRef) -> Result<WebhookTested, ApiError> {
    let id = webhook_id(&input.webhook_id)?;
    let (mut conn, now) = call.conn_now().await?;
    let event_id = webhooks::test(&mut conn, call.tenant(), &id, now).await?;
    Ok(WebhookTested { event_id })
}

/// `webhooks.deliveries`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Deliveries {
    #[schemars(length(min = 30, max = 56), regex(pattern = WEBHOOK_ID))]
    webhook_id: String,
    #[schemars(length(min = 1, max = 27), regex(pattern = DELIVERY_CURSOR))]
    after: Option<String>,
    #[serde(default = "crate::schema::page_limit")]
    #[schemars(range(min = 1, max = 1000))]
    limit: i64,
}

async fn deliveries(
    call: Call,
    input: Deliveries,
) -> Result<Page<wire::WebhookDelivery>, ApiError> {
    let id = webhook_id(&input.webhook_id)?;
    let reader = Reader::Webhook(id.as_str());
    // Another webhook's cursor does not open: the same answer as a
    // malformed one.
    let after = match &input.after {
        Some(c) => call.app.cursors.open(reader, c).ok_or_else(|| {
            ApiError::invalid(
                "after",
                "pattern",
                "not a cursor of this webhook from webhooks.deliveries",
            )
        })?,
        None => 0,
    };
    let mut conn = call.conn().await?;
    let page = storage::db::read_only(&mut conn, async |conn| {
        webhooks::deliveries(conn, call.tenant(), &id, after, input.limit).await
    })
    .await?;
    Ok(Page {
        items: page.items.into_iter().map(Into::into).collect(),
        next_cursor: call.app.cursors.seal(reader, page.next_seq),
        has_more: page.has_more,
    })
}
