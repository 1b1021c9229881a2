//! The reservation grants (`reservationGrants.*`, contract 3.2 and 3.6): a
//! grant and a preview of its creation.

use schemars::JsonSchema;
use serde::Serialize;
use storage::ops::grants;

use super::Millis;

/// A reservation grant (contract 3.2).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Grant {
    /// `rgrant_...`
    pub grant_id: String,
    /// Provider account of the reservation.
    pub account_id: String,
    /// The reservation.
    pub reservation_id: String,
    /// The reservation's pool.
    pub pool_id: String,
    /// The grantee.
    pub tenant_id: String,
    /// The one project served, if the grant is limited to one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// Committed slots.
    pub slots: i32,
    /// Term start.
    pub starts_at: Millis,
    /// Term end (exclusive).
    pub ends_at: Millis,
    /// The state at the server's now.
    #[schemars(extend("enum" = ["scheduled", "active", "ended", "cancelled"]))]
    pub state: &'static str,
    /// Why it ended or was cancelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Creation instant.
    pub created_at: Millis,
    /// End or cancellation instant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<Millis>,
    /// Slot-hours are written up to this instant.
    pub metered_through: Millis,
    /// Slot-hours credited so far for capacity the provider did not hold:
    /// the sum of the grant's vm.grant.deficit.hours records (6 decimals).
    /// Part of every grant object, so `get` and `list` show the same one.
    #[schemars(regex(pattern = r"^[0-9]+\.[0-9]{6}$"))]
    pub deficit_slot_hours: String,
    /// Whether the grantee lends its idle slots (contract 3.14).
    pub lending: bool,
    /// For a lending grant, its slots lent right now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lent_slots: Option<u32>,
    /// Slot-hours borrowers held running in its slots so far: the sum of
    /// its vm.grant.lent.hours records (6 decimals), the grantee's rebate.
    #[schemars(regex(pattern = r"^[0-9]+\.[0-9]{6}$"))]
    pub lent_slot_hours: String,
}

impl From<grants::Grant> for Grant {
    fn from(g: grants::Grant) -> Grant {
        let r = g.row;
        Grant {
            grant_id: r.grant_id,
            account_id: r.account_id,
            reservation_id: r.reservation_id,
            pool_id: r.pool_id,
            tenant_id: r.tenant_id,
            project_id: r.project_id,
            slots: r.slots,
            starts_at: r.starts_at,
            ends_at: r.ends_at,
            state: g.state.as_str(),
            reason: g.reason,
            created_at: r.created_at,
            ended_at: g.ended_at,
            metered_through: r.metered_through,
            deficit_slot_hours: grants_core::format_micros(r.deficit_micro),
            lending: r.lending,
            lent_slots: g.lent_slots,
            lent_slot_hours: grants_core::format_micros(r.lent_micro),
        }
    }
}

/// `reservationGrants.preview` (contract 3.6): what `create` of the same
/// input would decide and bill.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrantPreview {
    /// Whether the grant fits the reservation over its term.
    pub fits: bool,
    /// The reservation's total slots.
    pub total: u64,
    /// The peak overlap of the existing grants over the term, without the
    /// new one.
    pub granted: u64,
    /// `total - granted`, floored at 0.
    pub available: u64,
    /// The exact total vm.grant.slot.hours would add up to (6 decimals).
    #[schemars(regex(pattern = r"^[0-9]+\.[0-9]{6}$"))]
    pub slot_hours: String,
    /// The start of the first hour bucket it would bill.
    pub first_period_start: Millis,
    /// The end of the last hour bucket it would bill.
    pub last_period_end: Millis,
    /// The instances it would take in if it started now (empty for a
    /// future start, and when it does not fit).
    pub take_in: Vec<String>,
}

impl From<storage::ops::grants::Preview> for GrantPreview {
    fn from(p: storage::ops::grants::Preview) -> GrantPreview {
        GrantPreview {
            fits: p.fits,
            total: p.total,
            granted: p.granted,
            available: p.available,
            slot_hours: grants_core::format_micros(p.slot_micros),
            first_period_start: p.first_period_start,
            last_period_end: p.last_period_end,
            take_in: p.take_in,
        }
    }
}

replies! {
    /// `{ "grant": Grant }`
    GrantReply { grant: Grant as "grant" }
    /// `{ "preview": GrantPreview }`
    PreviewReply { preview: GrantPreview as "preview" }
}
