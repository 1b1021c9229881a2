//! The operator views (contract 3.10): a reservation's timeline and a
//! grant's hours (`reservations.timeline`, `reservationGrants.usage`).

use schemars::JsonSchema;
use serde::Serialize;

use super::{Grant, Millis};

/// Another tenant's grant on a reservation's timeline, as a grantee sees
/// it: its slots and term only, no ids.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("additionalProperties" = false))]
pub struct AnonymousGrant {
    /// Committed slots.
    pub slots: u32,
    /// Term start.
    pub starts_at: Millis,
    /// Term end (exclusive).
    pub ends_at: Millis,
}

/// A grant on a reservation's timeline: a full Grant (root's view, and the
/// reader's own grants), or another tenant's as an AnonymousGrant.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum TimelineGrant {
    /// In full.
    Full(Box<Grant>),
    /// Anonymous.
    Anonymous(AnonymousGrant),
}

/// One step of the committed slots.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CommittedStep {
    /// First instant.
    pub from: Millis,
    /// First instant after it.
    pub to: Millis,
    /// The slots of the grants live throughout it.
    pub slots: u64,
}

/// One step of the running instances.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InUseStep {
    /// First instant.
    pub from: Millis,
    /// First instant after it.
    pub to: Millis,
    /// Running instances held in grants.
    pub in_grants: u64,
    /// Running instances on ordinary slots.
    pub ordinary: u64,
}

/// A grant transition or capacity change on a reservation's timeline.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimelineEvent {
    /// When it happened.
    pub at: Millis,
    /// `reservation-grant.created`, `.active`, `.ended`, `.cancelled`,
    /// `reservation-grant.capacity-short`, or `reservation.gone`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The grant it is about (absent for capacity changes, and for other
    /// tenants' grants when a grantee reads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grant_id: Option<String>,
}

/// A reservation's timeline over `[from, to)` (contract 3.10).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservationTimeline {
    /// The reservation.
    pub reservation_id: String,
    /// Its slots (from the last scan).
    pub total: i64,
    /// The range's start.
    pub from: Millis,
    /// The range's end (exclusive).
    pub to: Millis,
    /// The grants whose term meets the range, by start.
    pub grants: Vec<TimelineGrant>,
    /// Live committed slots over [from, to): contiguous, gapless, merged
    /// where equal.
    pub committed: Vec<CommittedStep>,
    /// Running instances in grants and on ordinary slots over the part of
    /// the range up to now.
    pub in_use: Vec<InUseStep>,
    /// Grant transitions and capacity changes in the range, oldest first.
    pub events: Vec<TimelineEvent>,
}

impl From<storage::ops::views::Timeline> for ReservationTimeline {
    fn from(t: storage::ops::views::Timeline) -> ReservationTimeline {
        use storage::ops::views::GrantOnTimeline;
        ReservationTimeline {
            reservation_id: t.reservation.reservation_id,
            total: t.reservation.total,
            from: t.from,
            to: t.to,
            grants: t
                .grants
                .into_iter()
                .map(|g| match g {
                    GrantOnTimeline::Full(g) => TimelineGrant::Full(Box::new((*g).into())),
                    GrantOnTimeline::Anonymous(a) => TimelineGrant::Anonymous(AnonymousGrant {
                        slots: a.slots,
                        starts_at: a.starts_at,
                        ends_at: a.ends_at,
                    }),
                })
                .collect(),
            committed: t
                .committed
                .into_iter()
                .map(|s| CommittedStep {
                    from: s.from,
                    to: s.to,
                    slots: s.slots,
                })
                .collect(),
            in_use: t
                .in_use
                .into_iter()
                .map(|s| InUseStep {
                    from: s.from,
                    to: s.to,
                    in_grants: s.in_grants,
                    ordinary: s.ordinary,
                })
                .collect(),
            events: t
                .events
                .into_iter()
                .map(|e| TimelineEvent {
                    at: e.at,
                    event_type: e.event_type,
                    grant_id: e.grant_id,
                })
                .collect(),
        }
    }
}

/// One hour bucket of a grant (`reservationGrants.usage`).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrantHour {
    /// The bucket's start.
    pub period_start: Millis,
    /// The bucket's end.
    pub period_end: Millis,
    /// The grant's slots.
    pub slots: u32,
    /// Slot-hours committed and billed in the hour: its
    /// vm.grant.slot.hours record (6 decimals), also for hours not billed
    /// yet.
    #[schemars(regex(pattern = r"^[0-9]+\.[0-9]{6}$"))]
    pub slot_hours: String,
    /// Instance-hours held in the grant, running or stopped, up to now.
    #[schemars(regex(pattern = r"^[0-9]+\.[0-9]{6}$"))]
    pub held_hours: String,
    /// Instance-hours running in the grant, up to now.
    #[schemars(regex(pattern = r"^[0-9]+\.[0-9]{6}$"))]
    pub usage_hours: String,
    /// Slot-hours credited in the hour for capacity the provider did not
    /// hold: its vm.grant.deficit.hours record once written, before that
    /// what the shortfall so far comes to (6 decimals).
    #[schemars(regex(pattern = r"^[0-9]+\.[0-9]{6}$"))]
    pub deficit_hours: String,
    /// Slot-hours its borrowers held running in lent slots: the
    /// vm.grant.lent.hours record (6 decimals), provisional for hours not
    /// metered yet, as `heldHours` (contract 3.6, r4).
    #[schemars(regex(pattern = r"^[0-9]+\.[0-9]{6}$"))]
    pub lent_hours: String,
}

impl From<grants_core::views::hours::HourRow> for GrantHour {
    fn from(r: grants_core::views::hours::HourRow) -> GrantHour {
        GrantHour {
            period_start: r.period_start,
            period_end: r.period_end,
            slots: r.slots,
            slot_hours: grants_core::format_micros(r.slot_micros),
            held_hours: grants_core::format_micros(r.held_micros),
            usage_hours: grants_core::format_micros(r.usage_micros),
            deficit_hours: grants_core::format_micros(r.deficit_micros),
            lent_hours: grants_core::format_micros(r.lent_micros),
        }
    }
}

replies! {
    /// `{ "timeline": ReservationTimeline }`
    TimelineReply { timeline: ReservationTimeline as "timeline" }
}
