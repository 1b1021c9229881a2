//! The payload of each event type (contract 9): one enum, tagged by type.
//!
//! An event is an immutable record: the log keeps it as written and
//! `events.list` answers it as kept, so its shape is defined once, here,
//! and the OpenAPI document describes each type's `data` from this enum.
//! The serde names are the record's format (the `data` column and the
//! wire alike); changing one is a change of the contract.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An event's type and payload. Serialized adjacently tagged: `type` is the
/// event type (the log's `event_type` column), `data` the payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", content = "data")]
pub enum EventData {
    /// A grant was created (in the grantee's tenant).
    #[serde(rename = "reservation-grant.created")]
    GrantCreated(GrantChange),
    /// A grant became active (in the grantee's tenant).
    #[serde(rename = "reservation-grant.active")]
    GrantActive(GrantChange),
    /// A grant ended, at its `endsAt` or early (in the grantee's tenant).
    #[serde(rename = "reservation-grant.ended")]
    GrantEnded(GrantChange),
    /// A grant was cancelled before it started (in the grantee's tenant).
    #[serde(rename = "reservation-grant.cancelled")]
    GrantCancelled(GrantChange),
    /// A reservation's total fell below the slots granted on it (in the root
    /// tenant).
    #[serde(rename = "reservation-grant.capacity-short")]
    CapacityShort(CapacityShort),
    /// An expiry notice of a grant (in the grantee's and the root tenant).
    #[serde(rename = "reservation-grant.expiring")]
    GrantExpiring(GrantExpiring),
    /// A grant held little of what it committed over the last 24 hours (in
    /// the grantee's and the root tenant).
    #[serde(rename = "reservation-grant.underused")]
    GrantUnderused(GrantUnderused),
    /// A quota was set (in the target tenant).
    #[serde(rename = "quota.updated")]
    QuotaUpdated(QuotaUpdated),
    /// A managed instance's VM was seen running after its create or start
    /// (in the instance's tenant).
    #[serde(rename = "instance.running")]
    InstanceRunning(InstanceChange),
    /// A managed instance's VM stopped, as requested or at the provider
    /// (`reason`).
    #[serde(rename = "instance.stopped")]
    InstanceStopped(InstanceChange),
    /// A managed instance's VM is gone, as requested.
    #[serde(rename = "instance.deleted")]
    InstanceDeleted(InstanceChange),
    /// A managed instance's create failed (`code`).
    #[serde(rename = "instance.failed")]
    InstanceFailed(InstanceChange),
    /// A managed instance's VM vanished at the provider.
    #[serde(rename = "instance.lost")]
    InstanceLost(InstanceChange),
    /// An interruptible instance's lent slot is taken back: its VM is
    /// deleted at `interruptAt` (contract 3.14).
    #[serde(rename = "instance.interrupting")]
    InstanceInterrupting(InstanceChange),
    /// A labelled VM without a live instance was deleted (in the root
    /// tenant).
    #[serde(rename = "instance.orphan-deleted")]
    OrphanDeleted(OrphanDeleted),
    /// A VM labelled with this installation whose instance is newer than
    /// every instance this database has made (a database restored from a
    /// backup): kept for the operator to adopt or delete (in the root
    /// tenant).
    #[serde(rename = "instance.orphan-found")]
    OrphanFound(OrphanFound),
    /// A test of a webhook (`webhooks.test`): sent only to that webhook.
    #[serde(rename = "webhook.test")]
    WebhookTest(WebhookTest),
    /// A webhook none of whose attempts succeeded for 3 days was disabled
    /// (sent to no webhook).
    #[serde(rename = "webhook.disabled")]
    WebhookDisabled(WebhookDisabled),
}

impl EventData {
    /// The event type (`reservation-grant.created`, ...), as the log's
    /// `event_type` column keeps it.
    pub fn event_type(&self) -> &'static str {
        match self {
            EventData::GrantCreated(_) => "reservation-grant.created",
            EventData::GrantActive(_) => "reservation-grant.active",
            EventData::GrantEnded(_) => "reservation-grant.ended",
            EventData::GrantCancelled(_) => "reservation-grant.cancelled",
            EventData::CapacityShort(_) => "reservation-grant.capacity-short",
            EventData::GrantExpiring(_) => "reservation-grant.expiring",
            EventData::GrantUnderused(_) => "reservation-grant.underused",
            EventData::QuotaUpdated(_) => "quota.updated",
            EventData::InstanceRunning(_) => "instance.running",
            EventData::InstanceStopped(_) => "instance.stopped",
            EventData::InstanceDeleted(_) => "instance.deleted",
            EventData::InstanceFailed(_) => "instance.failed",
            EventData::InstanceLost(_) => "instance.lost",
            EventData::InstanceInterrupting(_) => "instance.interrupting",
            EventData::OrphanDeleted(_) => "instance.orphan-deleted",
            EventData::OrphanFound(_) => "instance.orphan-found",
            EventData::WebhookTest(_) => "webhook.test",
            EventData::WebhookDisabled(_) => "webhook.disabled",
        }
    }

    /// Every event type, in the order of the variants (what a webhook's
    /// `types` may name).
    pub const TYPES: &'static [&'static str] = &[
        "reservation-grant.created",
        "reservation-grant.active",
        "reservation-grant.ended",
        "reservation-grant.cancelled",
        "reservation-grant.capacity-short",
        "reservation-grant.expiring",
        "reservation-grant.underused",
        "quota.updated",
        "instance.running",
        "instance.stopped",
        "instance.deleted",
        "instance.failed",
        "instance.lost",
        "instance.interrupting",
        "instance.orphan-deleted",
        "instance.orphan-found",
        "webhook.test",
        "webhook.disabled",
    ];

    /// The payload alone (the log's `data` column).
    pub fn to_data(&self) -> serde_json::Result<serde_json::Value> {
        let mut tagged = serde_json::to_value(self)?;
        Ok(tagged
            .get_mut("data")
            .map(serde_json::Value::take)
            .unwrap_or_default())
    }

    /// The payload of a stored event of `event_type`.
    pub fn from_parts(event_type: &str, data: serde_json::Value) -> serde_json::Result<Self> {
        let mut tagged = serde_json::Map::new();
        tagged.insert("type".to_owned(), event_type.into());
        tagged.insert("data".to_owned(), data);
        serde_json::from_value(serde_json::Value::Object(tagged))
    }
}

/// A grant's term and size, as each `reservation-grant.*` transition reports
/// it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrantChange {
    /// `grn_...`
    pub grant_id: String,
    /// The pool of the grant's reservation.
    pub pool_id: String,
    /// The committed slots.
    pub slots: i64,
    /// The start of the term (epoch milliseconds).
    pub starts_at: i64,
    /// The end of the term (epoch milliseconds; for `.ended`, when it ended).
    pub ends_at: i64,
    /// The grantee's project the grant is limited to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// Why a grant ended or was cancelled (`.ended`, `.cancelled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A reservation whose total no longer covers what is granted on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityShort {
    /// The provider account of the reservation.
    pub account_id: String,
    /// The reservation.
    pub reservation_id: String,
    /// Its slots as the provider reports them.
    pub total: i64,
    /// The most slots granted on it at once from now on.
    pub granted_slots: u64,
    /// The grants scheduled or active on it.
    pub grant_ids: Vec<String>,
}

/// What a grant held of what it committed over a window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Utilisation {
    /// Held instance-hours over committed slot-hours, 6 decimals.
    pub utilisation: String,
    /// A renewal size an operator can act on (at least 1).
    pub suggested_slots: u32,
}

/// An expiry notice of a grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrantExpiring {
    /// The grant.
    #[serde(flatten)]
    pub grant: GrantChange,
    /// The notice, as configured (`"7d"`).
    pub notice: String,
    /// A grant of the same tenant on the same reservation live at `endsAt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renewal: Option<String>,
    /// Use over the term so far.
    #[serde(flatten)]
    pub usage: Utilisation,
}

/// An underuse notice of a grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrantUnderused {
    /// `grn_...`
    pub grant_id: String,
    /// The pool of the grant's reservation.
    pub pool_id: String,
    /// The committed slots.
    pub slots: i64,
    /// The 24 whole hours judged.
    pub window: Window,
    /// Use over the window.
    #[serde(flatten)]
    pub usage: Utilisation,
}

/// A half-open window of epoch milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Window {
    /// Its start.
    pub from: i64,
    /// Its end (excluded).
    pub to: i64,
}

/// A quota set by root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaUpdated {
    /// The pool.
    pub pool_id: String,
    /// The resource.
    pub resource: String,
    /// The new maximum.
    pub max: i64,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn change() -> GrantChange {
        GrantChange {
            grant_id: "grn_1".into(),
            pool_id: "pool_1".into(),
            slots: 2,
            starts_at: 10,
            ends_at: 20,
            project_id: None,
            reason: Some("revoked".into()),
        }
    }

    #[test]
    fn the_type_tag_is_the_event_type_and_data_the_payload_alone() {
        let e = EventData::GrantEnded(change());
        let data = e.to_data().unwrap();
        assert_eq!(
            data,
            json!({"grantId": "grn_1", "poolId": "pool_1", "slots": 2, "startsAt": 10,
                   "endsAt": 20, "reason": "revoked"})
        );
        assert_eq!(EventData::from_parts(e.event_type(), data).unwrap(), e);
    }

    #[test]
    fn every_variant_names_its_own_type() {
        let usage = Utilisation {
            utilisation: "0.500000".into(),
            suggested_slots: 1,
        };
        let all = [
            EventData::GrantCreated(change()),
            EventData::GrantActive(change()),
            EventData::GrantEnded(change()),
            EventData::GrantCancelled(change()),
            EventData::CapacityShort(CapacityShort {
                account_id: "acc".into(),
                reservation_id: "r".into(),
                total: 1,
                granted_slots: 2,
                grant_ids: vec!["grn_1".into()],
            }),
            EventData::GrantExpiring(GrantExpiring {
                grant: change(),
                notice: "1d".into(),
                renewal: None,
                usage: usage.clone(),
            }),
            EventData::GrantUnderused(GrantUnderused {
                grant_id: "grn_1".into(),
                pool_id: "pool_1".into(),
                slots: 2,
                window: Window { from: 0, to: 1 },
                usage,
            }),
            EventData::QuotaUpdated(QuotaUpdated {
                pool_id: "pool_1".into(),
                resource: "instances".into(),
                max: 3,
            }),
            EventData::OrphanDeleted(OrphanDeleted {
                vm_name: "bc-1".into(),
                zone: "us-central1-a".into(),
                instance_id: None,
            }),
            EventData::OrphanFound(OrphanFound {
                vm_name: "bc-1".into(),
                zone: "us-central1-a".into(),
                instance_id: "inst_1".into(),
            }),
            EventData::WebhookTest(WebhookTest {
                webhook_id: "whk_1".into(),
            }),
            EventData::WebhookDisabled(WebhookDisabled {
                webhook_id: "whk_1".into(),
                url: "https://hooks.example.com/x".into(),
            }),
        ];
        for e in &all {
            assert!(EventData::TYPES.contains(&e.event_type()), "{e:?}");
        }
        for e in all {
            let tagged = serde_json::to_value(&e).unwrap();
            assert_eq!(tagged["type"], e.event_type());
            let back = EventData::from_parts(e.event_type(), e.to_data().unwrap()).unwrap();
            assert_eq!(back, e);
        }
    }
}

/// Where an instance is, as its events report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventPlacement {
    /// `grant`, `reservation`, `ondemand` or `none`.
    pub kind: String,
    /// The grant holding it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant_id: Option<String>,
    /// Its reservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation_id: Option<String>,
}

/// A VM's name and zone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventVm {
    /// `bc-...`
    pub name: String,
    /// Its zone.
    pub zone: String,
}

/// A change of a managed instance (contract 9, r3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceChange {
    /// `inst_...`
    pub instance_id: String,
    /// Its pool.
    pub pool_id: String,
    /// Its project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// Where it is after the change (before it, for a deletion).
    pub placement: EventPlacement,
    /// Its VM.
    pub vm: EventVm,
    /// Why it stopped: `requested` or `provider`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why its create failed: the provider's error code, `timeout`,
    /// `name-taken` or `provider-error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// When an interrupted instance's VM is deleted (epoch ms, contract
    /// 3.14).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt_at: Option<i64>,
}

/// A labelled VM deleted because no live instance owns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrphanDeleted {
    /// The VM's name.
    pub vm_name: String,
    /// Its zone.
    pub zone: String,
    /// The instance its `bc-instance` label names, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
}

/// A labelled VM kept because its instance is newer than every instance this
/// database has made: never deleted, for the operator to adopt or delete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrphanFound {
    /// The VM's name.
    pub vm_name: String,
    /// Its zone.
    pub zone: String,
    /// The instance its `bc-instance` label names.
    pub instance_id: String,
}

/// `webhook.test`: a test of one webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookTest {
    /// `whk_...`: the one webhook it is sent to.
    pub webhook_id: String,
}

/// `webhook.disabled`: a webhook stopped sending after 3 days of failures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDisabled {
    /// `whk_...`
    pub webhook_id: String,
    /// Its endpoint.
    pub url: String,
}
