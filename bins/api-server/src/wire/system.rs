//! The tenant's logs and the clock: events, usage records, the server's now.

use schemars::JsonSchema;
use serde::Serialize;
use storage::model::events::{self, EventData};
use storage::ops::metering;

use super::{Millis, Object, object};

/// An event of a tenant's log (contract 4): its `type`, and `data` as that
/// type's schema says.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// `evt_...`
    pub event_id: String,
    /// The tenant whose log holds it.
    pub tenant_id: String,
    /// The event type (`type`) and its payload (`data`).
    #[serde(flatten)]
    pub payload: EventData,
    /// When the change happened.
    pub occurred_at: Millis,
}

impl TryFrom<events::Event> for Event {
    type Error = storage::StorageError;

    fn try_from(e: events::Event) -> Result<Event, Self::Error> {
        let (event_id, tenant_id, payload, occurred_at) = e.into_parts()?;
        Ok(Event {
            event_id,
            tenant_id,
            payload,
            occurred_at,
        })
    }
}

/// One usage record (contract 6).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageRecord {
    /// `use_...`
    pub usage_id: String,
    /// The billed tenant.
    pub tenant_id: String,
    /// Project.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// Meter name.
    pub meter: String,
    /// A decimal with exactly 6 fractional digits, e.g. `"0.500000"`.
    #[schemars(regex(pattern = r"^[0-9]+\.[0-9]{6}$"))]
    pub quantity: String,
    /// The unit of the quantity.
    #[schemars(extend("enum" = ["slot-hours", "instance-hours"]))]
    pub unit: String,
    /// Hour bucket start.
    pub period_start: Millis,
    /// Hour bucket end.
    pub period_end: Millis,
    /// Grant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grant_id: Option<String>,
    /// Instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
    /// Tags.
    pub tags: Object,
    /// When it was written.
    pub recorded_at: Millis,
}

impl From<metering::UsageRecord> for UsageRecord {
    fn from(r: metering::UsageRecord) -> UsageRecord {
        UsageRecord {
            usage_id: r.usage_id,
            tenant_id: r.tenant_id,
            project_id: r.project_id,
            meter: r.meter,
            quantity: r.quantity,
            unit: r.unit,
            period_start: r.period_start,
            period_end: r.period_end,
            grant_id: r.grant_id,
            instance_id: r.instance_id,
            tags: object(r.tags),
            recorded_at: r.recorded_at,
        }
    }
}

/// `clock.get` and `clock.set`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ClockReading {
    /// The server's now.
    pub now: Millis,
    /// The clock mode.
    #[schemars(extend("enum" = ["system", "manual"]))]
    pub mode: &'static str,
}
