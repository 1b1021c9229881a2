//! What the wire shows: every success response as a type, serialized with the
//! contract's camelCase names and described by its JSON Schema (the OpenAPI
//! document's `components.schemas`). Storage returns domain types; each view
//! is built from one by moving its fields, never by copying a JSON tree.
//!
//! One file per method family, as in `handlers/`; every type is re-exported
//! here, as the OpenAPI document's schema names are one namespace.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Map, Value};

/// Epoch milliseconds (UTC).
type Millis = i64;

/// A JSON object whose keys the contract leaves open.
type Object = Map<String, Value>;

fn object(v: Value) -> Object {
    match v {
        Value::Object(m) => m,
        // Storage writes objects only; anything else shows as empty.
        _ => Object::new(),
    }
}

/// `{ "items": [...] }`: a whole list (at most 1000 items).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "{T}List")]
pub struct Items<T> {
    /// The items.
    pub items: Vec<T>,
}

impl<T> Items<T> {
    /// Views of domain values.
    pub fn of<D: Into<T>>(values: Vec<D>) -> Items<T> {
        Items {
            items: values.into_iter().map(Into::into).collect(),
        }
    }
}

/// One page of a paged list (a log, oldest first, or a newest-first list),
/// with the cursor to continue from.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "{T}Page")]
pub struct Page<T> {
    /// The items, in the list's order.
    pub items: Vec<T>,
    /// Pass as `after` to read on (also when `hasMore` is false, to poll).
    pub next_cursor: String,
    /// Whether more items follow now.
    pub has_more: bool,
}

impl<T> Page<T> {
    /// The view of a storage page of a newest-first list of ids with
    /// `prefix`.
    pub fn of<D: Into<T>>(page: storage::model::keyset::Page<D>, prefix: &str) -> Page<T> {
        Page {
            next_cursor: page.next.encode(prefix),
            has_more: page.has_more,
            items: page.items.into_iter().map(Into::into).collect(),
        }
    }
}

/// Declares `{ "<noun>": View }` answers.
macro_rules! replies {
    ($($(#[$m:meta])* $name:ident { $field:ident: $view:ident as $wire:literal })*) => {$(
        $(#[$m])*
        #[derive(Debug, Serialize, JsonSchema)]
        pub struct $name {
            #[doc = "The object."]
            #[serde(rename = $wire)]
            pub $field: $view,
        }
        impl<D: Into<$view>> From<D> for $name {
            fn from(d: D) -> $name {
                $name { $field: d.into() }
            }
        }
    )*};
}

mod accounts;
mod audit;
mod capacity;
mod grants;
mod instances;
mod secrets;
mod system;
mod tenancy;
mod views;
mod webhooks;

pub use accounts::{Account, AccountDeleted, AccountReply, Reservation, ReservationReply};
pub use audit::AuditRecord;
pub use capacity::{Flavor, Pool, PoolReply, Quota, QuotaReply};
pub use grants::{Grant, GrantPreview, GrantReply, PreviewReply};
pub use instances::{Instance, InstanceReply, Placement};
pub use secrets::{Secret, SecretDeleted, SecretReply};
pub use system::{ClockReading, Event, UsageRecord};
pub use tenancy::{
    ApiKey, ApiKeyReply, CreatedTenant, IssuedKey, Project, ProjectReply, Tenant, TenantReply,
};
pub use views::{
    AnonymousGrant, CommittedStep, GrantHour, InUseStep, ReservationTimeline, TimelineEvent,
    TimelineGrant, TimelineReply,
};
pub use webhooks::{
    Webhook, WebhookCreated, WebhookDeleted, WebhookDelivery, WebhookReply, WebhookTested,
    WebhookWithSecret,
};
