//! webhooks (contract 3.13): a tenant's endpoints its events are pushed
//! to, signed. The signing secret is shown once, by `create` and
//! `rotateSecret`; answers, logs, events, errors and the audit trail carry
//! the webhook's id, never its secret. Delivery is the worker's.

use iam_check::Permission;
use providers::Origins;
use providers::policy::is_internal;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Deserialize;
use serde_json::json;
use storage::cursor::Reader;
use storage::model::events::EventData;
use storage::ops::webhooks::{self, NewWebhook, WebhookChange, WebhookState};
use url::{Host, Url};

use super::EVENTS;
use super::examples::KEY;
use crate::error::{ApiError, Code};
use crate::registry::{Call, Kind, Method, endpoint};
use crate::schema::{IDEMPOTENCY_KEY, TenantOnly};
use crate::wire::{
    self, Items, Page, WebhookDeleted, WebhookReply, WebhookTested, WebhookWithSecret,
};

/// Webhook ids (at most 56 characters).
const WEBHOOK_ID: &str = "^whk_[0-9a-hjkmnp-tv-z]{26,52}$";
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
             answers its signing secret, shown this once. Other tenants than root name https \
             URLs off internal addresses unless BC_WEBHOOK_ENDPOINTS lists the origin.",
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
            "Lists the tenant's webhooks, oldest first (at most 10; never their secrets).",
            endpoint(list),
        )
        .example(json!({ "tenantId": "acme" })),
        method(
            "update",
            Kind::Mutation,
            "Changes a webhook's url, types, description or state; enabling a disabled webhook \
             sends the events from now on, not those missed.",
            endpoint(update),
        )
        .errors(&[Code::NotFound])
        .example(json!({ "tenantId": "acme", "webhookId": WEBHOOK, "state": "enabled" })),
        method(
            "delete",
            Kind::Mutation,
            "Deletes a webhook: it sends nothing more.",
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

/// The refusal of a URL the acting tenant may not name.
fn not_allowed(message: &str) -> ApiError {
    ApiError::invalid("url", "endpoint-not-allowed", message)
}

/// Whether a tenant other than root may name `host` without its origin
/// listed: not `localhost` and not an internal address literal. Names
/// resolving inside are the delivery's connect-time guard's to refuse.
fn host_allowed(host: Host<&str>) -> bool {
    match host {
        Host::Domain(name) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            name != "localhost" && !name.ends_with(".localhost")
        }
        Host::Ipv4(ip) => !is_internal(ip.into()),
        Host::Ipv6(ip) => !is_internal(ip.into()),
    }
}

/// `url` checked against the rules of contract 3.13 for a webhook of the
/// acting tenant (`INVALID_INPUT` on `url`, reason `endpoint-not-allowed`):
/// an `http` or `https` URL without user or password; for tenants other
/// than root, `https` and a host that is neither `localhost` nor an
/// internal address, unless `listed` names its origin.
fn checked_url(raw: &str, root: bool, listed: &Origins) -> Result<String, ApiError> {
    let url =
        Url::parse(raw).map_err(|_| ApiError::invalid("url", "pattern", "url is not a URL"))?;
    let Some(host) = url
        .host()
        .filter(|_| matches!(url.scheme(), "http" | "https"))
    else {
        return Err(not_allowed("a webhook's url must be an http or https URL"));
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(not_allowed("a webhook's url carries no user or password"));
    }
    if root || listed.lists(&url) {
        return Ok(url.into());
    }
    if url.scheme() != "https" {
        return Err(not_allowed(
            "a webhook's url must be https unless BC_WEBHOOK_ENDPOINTS lists its origin",
        ));
    }
    if !host_allowed(host) {
        return Err(not_allowed(
            "a webhook's url must not name a loopback, private or otherwise internal host \
             unless BC_WEBHOOK_ENDPOINTS lists its origin",
        ));
    }
    Ok(url.into())
}

fn url_of(call: &Call, raw: &str) -> Result<String, ApiError> {
    checked_url(
        raw,
        call.tenant() == call.root(),
        &call.app.webhook_endpoints,
    )
}

async fn create(call: Call, input: Create) -> Result<WebhookWithSecret, ApiError> {
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
            return match webhooks::replay(&mut conn, &call.app.keyring, key).await? {
                Some(created) => Ok(call.created(created).into()),
                None => Err(refused),
            };
        }
    };
    let new = NewWebhook {
        tenant_id: call.tenant().as_str(),
        url: &url,
        types: &input.types,
        description: input.description.as_deref(),
    };
    let (mut conn, now) = call.conn_now().await?;
    let created = webhooks::create(&mut conn, &call.app.keyring, new, key, now).await?;
    Ok(call.created(created).into())
}

/// A method on one webhook.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WebhookRef {
    #[schemars(length(min = 30, max = 56), regex(pattern = WEBHOOK_ID))]
    webhook_id: String,
}

async fn get(call: Call, input: WebhookRef) -> Result<WebhookReply, ApiError> {
    let mut conn = call.conn().await?;
    Ok(storage::db::read_only(&mut conn, async |conn| {
        webhooks::get(conn, call.tenant(), &input.webhook_id).await
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
    Ok(
        webhooks::update(&mut conn, call.tenant(), &input.webhook_id, change, now)
            .await?
            .into(),
    )
}

async fn delete(call: Call, input: WebhookRef) -> Result<WebhookDeleted, ApiError> {
    let (mut conn, now) = call.conn_now().await?;
    webhooks::delete(&mut conn, call.tenant(), &input.webhook_id, now).await?;
    Ok(WebhookDeleted {
        webhook_id: input.webhook_id,
        deleted: true,
    })
}

async fn rotate_secret(call: Call, input: WebhookRef) -> Result<WebhookWithSecret, ApiError> {
    let (mut conn, now) = call.conn_now().await?;
    Ok(webhooks::rotate_secret(
        &mut conn,
        &call.app.keyring,
        call.tenant(),
        &input.webhook_id,
        now,
    )
    .await?
    .into())
}

async fn test(call: Call, input: WebhookRef) -> Result<WebhookTested, ApiError> {
    let (mut conn, now) = call.conn_now().await?;
    let event_id = webhooks::test(&mut conn, call.tenant(), &input.webhook_id, now).await?;
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
    let reader = Reader::Webhook(&input.webhook_id);
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
        webhooks::deliveries(conn, call.tenant(), &input.webhook_id, after, input.limit).await
    })
    .await?;
    Ok(Page {
        items: page.items.into_iter().map(Into::into).collect(),
        next_cursor: call.app.cursors.seal(reader, page.next_seq),
        has_more: page.has_more,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origins(list: &str) -> Origins {
        Origins::parse("BC_WEBHOOK_ENDPOINTS", list).expect("origins")
    }

    fn reason(raw: &str, root: bool, listed: &Origins) -> Option<String> {
        checked_url(raw, root, listed)
            .err()
            .map(|e| e.details["reason"].as_str().unwrap_or_default().to_owned())
    }

    #[test]
    fn tenants_name_https_off_internal_hosts_unless_listed() {
        let none = Origins::default();
        let refused = Some("endpoint-not-allowed".to_owned());
        for url in [
            "http://example.com/x",
            "https://127.0.0.1/x",
            "https://10.0.0.1/x",
            "https://[::1]/x",
            "https://[::ffff:192.168.1.1]/x",
            "https://169.254.169.254/latest",
            "https://0.0.0.0/x",
            "https://localhost/x",
            "https://LocalHost./x",
            "https://a.localhost/x",
            "ftp://example.com/x",
            "https://user:pw@example.com/x",
        ] {
            assert_eq!(reason(url, false, &none), refused, "{url}");
        }
        assert_eq!(reason("not a url", false, &none), Some("pattern".into()));
        assert_eq!(reason("https://hooks.example.com/x", false, &none), None);
        assert_eq!(reason("https://93.184.216.34/x", false, &none), None);
        // Listed origins pass whatever their scheme or address.
        let listed = origins("http://127.0.0.1:9");
        assert_eq!(reason("http://127.0.0.1:9/x", false, &listed), None);
        assert_eq!(reason("http://127.0.0.1:10/x", false, &listed), refused);
        // Root names any http or https URL.
        assert_eq!(reason("http://127.0.0.1:9/x", true, &none), None);
        assert_eq!(reason("ftp://127.0.0.1/x", true, &none), refused);
    }
}
