//! Operator views (contract 3.10): a reservation's timeline
//! (`reservations.timeline`) and a grant's usage hour by hour
//! (`reservationGrants.usage`). Reads only; both are decided as
//! `compute:providers:read` on the tenant, and storage decides who may see
//! which reservation or grant (others get `NOT_FOUND`).

use iam_check::Permission;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use storage::ops::views;

use super::VPS;
use super::examples::{ACCOUNT, GRANT, RESERVATION, T0, T1};
use crate::error::ApiError;
use crate::registry::{Call, Kind, Method, endpoint};
use crate::wire::{GrantHour, Items, TimelineReply};
use storage::ids::{AccountId, GrantId, ReservationId};

/// The longest range one `reservations.timeline` covers: 400 days.
pub const MAX_TIMELINE_MS: i64 = 400 * 24 * 3_600_000;

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    vec![
        VPS.method(
            "reservations",
            "timeline",
            Kind::Read,
            Permission::ProvidersRead,
            "A reservation's grants, committed slots, running instances and grant events over \
             [from, to) (at most 400 days). Root reads any reservation of its accounts; a grantee \
             the reservations it holds grants on, other tenants' grants anonymised.",
            endpoint(timeline),
        )
        .example(json!({
            "tenantId": "root",
            "accountId": ACCOUNT,
            "reservationId": RESERVATION,
            "from": T0,
            "to": T1,
        })),
        VPS.method(
            "reservationGrants",
            "usage",
            Kind::Read,
            Permission::ProvidersRead,
            "A grant's hours: slot-hours committed and billed, instance-hours held and running, \
             per hour bucket of its term (at most 9000 a call). Its grantee and root read it.",
            endpoint(usage),
        )
        .example(json!({ "tenantId": "acme", "grantId": GRANT, "from": T0, "to": T1 })),
    ]
}

/// `reservations.timeline`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Timeline {
    account_id: AccountId,
    reservation_id: ReservationId,
    #[schemars(range(min = 0, max = i64::MAX))]
    from: i64,
    #[schemars(range(min = 0, max = i64::MAX))]
    to: i64,
}

/// `INVALID_INPUT` on `to` (reason `range`) unless `from < to`.
fn after_from(from: i64, to: i64) -> Result<(), ApiError> {
    if to <= from {
        return Err(ApiError::invalid("to", "range", "to must be after from"));
    }
    Ok(())
}

async fn timeline(call: Call, input: Timeline) -> Result<TimelineReply, ApiError> {
    after_from(input.from, input.to)?;
    if input.to - input.from > MAX_TIMELINE_MS {
        return Err(ApiError::invalid(
            "to",
            "range",
            "a timeline covers at most 400 days (to - from <= 34560000000)",
        )
        .with("maxRangeMs", MAX_TIMELINE_MS));
    }
    let (mut conn, now) = call.conn_now().await?;
    let timeline = storage::db::read_only(&mut conn, async |conn| {
        views::timeline(
            conn,
            &call.actor,
            &input.account_id,
            &input.reservation_id,
            grants_core::Term::new(input.from, input.to),
            now,
        )
        .await
    })
    .await?;
    Ok(timeline.into())
}

/// `reservationGrants.usage`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Usage {
    grant_id: GrantId,
    #[schemars(range(min = 0, max = i64::MAX))]
    from: Option<i64>,
    #[schemars(range(min = 0, max = i64::MAX))]
    to: Option<i64>,
}

async fn usage(call: Call, input: Usage) -> Result<Items<GrantHour>, ApiError> {
    if let (Some(from), Some(to)) = (input.from, input.to) {
        after_from(from, to)?;
    }
    let (mut conn, now) = call.conn_now().await?;
    let rows = storage::db::read_only(&mut conn, async |conn| {
        views::grant_usage(
            conn,
            &call.actor,
            &input.grant_id,
            input.from,
            input.to,
            now,
        )
        .await
    })
    .await?;
    Ok(Items::of(rows))
}
