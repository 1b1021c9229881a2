//! events, usage and clock.

use iam_check::{Permission, RootOption};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use storage::cursor::Reader;
use storage::model::events;
use storage::ops::metering::{self, UsageFilter};

use super::examples::{GRANT, T0, T1};
use super::{BILLING, EVENTS};
use crate::error::{ApiError, Code};
use crate::registry::{Call, Kind, Method, endpoint};
use crate::schema::TenantOnly;
use crate::wire::{self, ClockReading, Page};
use storage::ids::{GrantId, InstanceId};

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    vec![
        EVENTS
            .method(
                "events",
                "list",
                Kind::Read,
                Permission::EventsRead,
                "Pages the tenant's events in commit order with an opaque cursor.",
                endpoint(list_events),
            )
            .example(
                json!({ "tenantId": "acme", "limit": 100, "types": ["reservation-grant.created"] }),
            ),
        BILLING
            .method(
                "usage",
                "list",
                Kind::Read,
                Permission::UsageRead,
                "Pages the tenant's usage records in the order they were recorded (all \
             tenants' with all, root only).",
                endpoint(list_usage),
            )
            .phase("v1.0")
            .example(json!({
                "tenantId": "acme",
                "from": T0,
                "to": T1,
                "meter": "reservation.slot-hours",
                "grantId": GRANT,
                "limit": 100,
            })),
        BILLING
            .method(
                "clock",
                "get",
                Kind::Read,
                Permission::FleetAdmin,
                "Returns the server's now and the clock mode.",
                endpoint(get_clock),
            )
            .example(json!({ "tenantId": "root" })),
        BILLING
            .method(
                "clock",
                "set",
                Kind::Mutation,
                Permission::FleetAdmin,
                "Moves the manual clock forward (BC_CLOCK=manual only).",
                endpoint(set_clock),
            )
            .example(json!({ "tenantId": "root", "now": T0 }))
            .errors(&[Code::InvalidState]),
    ]
}

/// The opaque cursor of `events.list`: `c` and a non-negative 64-bit
/// position in the tenant's own log in lower-case base32hex (13 characters,
/// the last one's padding bit zero), so every string the pattern allows
/// decodes. At most 14 characters.
const CURSOR: &str = "^c[0-7][0-9a-v]{11}[02468acegikmoqsu]$";

/// The opaque cursor of `usage.list`: `u` and a sealed 128-bit block in
/// lower-case base32hex (26 characters, the last one's padding bits zero;
/// `storage::cursor`). At most 27 characters.
const USAGE_CURSOR: &str = "^u[0-9a-v]{25}[048cgkos]$";

/// Meter and event type names (at most 64 characters).
const DOTTED_NAME: &str = "^[a-z][a-z0-9.-]{0,63}$";

/// `events.list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ListEvents {
    #[schemars(length(min = 1, max = 14), regex(pattern = CURSOR))]
    after: Option<String>,
    #[serde(default = "crate::schema::page_limit")]
    #[schemars(range(min = 1, max = 1000))]
    limit: i64,
    #[serde(default)]
    #[schemars(
        with = "Vec<String>",
        length(min = 1, max = 20),
        inner(length(min = 1, max = 64), regex(pattern = DOTTED_NAME))
    )]
    types: Option<Vec<String>>,
}

async fn list_events(call: Call, input: ListEvents) -> Result<Page<wire::Event>, ApiError> {
    let after = match &input.after {
        Some(c) => events::decode_cursor(c).ok_or_else(|| {
            ApiError::invalid("after", "pattern", "not a cursor from events.list")
        })?,
        None => 0,
    };
    let mut conn = call.conn().await?;
    let page = storage::db::read_only(&mut conn, async |conn| {
        events::list(
            conn,
            call.tenant().as_str(),
            after,
            input.limit,
            input.types.as_deref(),
        )
        .await
    })
    .await?;
    Ok(Page {
        items: page
            .items
            .into_iter()
            .map(wire::Event::try_from)
            .collect::<Result<_, _>>()?,
        next_cursor: events::encode_cursor(page.next_seq),
        has_more: page.has_more,
    })
}

/// `usage.list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ListUsage {
    #[schemars(range(min = 0, max = i64::MAX))]
    from: Option<i64>,
    #[schemars(range(min = 0, max = i64::MAX))]
    to: Option<i64>,
    #[schemars(length(min = 1, max = 64), regex(pattern = DOTTED_NAME))]
    meter: Option<String>,
    grant_id: Option<GrantId>,
    instance_id: Option<InstanceId>,
    #[schemars(length(min = 1, max = 27), regex(pattern = USAGE_CURSOR))]
    after: Option<String>,
    #[serde(default = "crate::schema::page_limit")]
    #[schemars(range(min = 1, max = 1000))]
    limit: i64,
    #[serde(default)]
    all: bool,
}

async fn list_usage(call: Call, input: ListUsage) -> Result<Page<wire::UsageRecord>, ApiError> {
    if input.all {
        call.allow(RootOption::AllTenants)?;
    }
    let reader = if input.all {
        Reader::AllTenants
    } else {
        Reader::Tenant(call.tenant().as_str())
    };
    // Another tenant's cursor, or one of a listing with another `all`, does
    // not open: the same answer as a malformed one.
    let after = match &input.after {
        Some(c) => call.app.cursors.open(reader, c).ok_or_else(|| {
            ApiError::invalid(
                "after",
                "pattern",
                "not a cursor this caller got from usage.list",
            )
        })?,
        None => 0,
    };
    let filter = UsageFilter {
        tenant_id: (!input.all).then(|| call.tenant().to_string()),
        from: input.from,
        to: input.to,
        meter: input.meter,
        grant_id: input.grant_id.map(String::from),
        instance_id: input.instance_id.map(String::from),
    };
    let mut conn = call.conn().await?;
    refuse_archived(&mut conn, &filter).await?;
    let (items, has_more) = storage::db::read_only(&mut conn, async |conn| {
        metering::list(conn, &filter, after, input.limit).await
    })
    .await?;
    let next = items.last().map_or(after, |r| r.seq);
    Ok(Page {
        items: items.into_iter().map(Into::into).collect(),
        next_cursor: call.app.cursors.seal(reader, next),
        has_more,
    })
}

/// A `from` (or, without one, a `to`) inside a month already archived is
/// refused (`INVALID_INPUT`, reason `archived`, with `archivedThrough`): those
/// records are no longer in the database, and a partial answer would read as
/// a complete one. A range without bounds lists what is kept.
async fn refuse_archived(
    conn: &mut storage::db::Conn,
    filter: &UsageFilter,
) -> Result<(), ApiError> {
    let bound = match (filter.from, filter.to) {
        (Some(from), _) => Some(("from", from)),
        (None, Some(to)) => Some(("to", to)),
        (None, None) => None,
    };
    let Some((field, at)) = bound else {
        return Ok(());
    };
    let through = storage::db::read_only(conn, async |conn| {
        storage::ops::partitions::usage_archived_through(conn).await
    })
    .await?;
    match through {
        Some(through) if at < through => Err(ApiError::invalid(
            field,
            "archived",
            format!("usage before {through} is archived and no longer listed"),
        )
        .with("archivedThrough", through)),
        _ => Ok(()),
    }
}

async fn get_clock(call: Call, _: TenantOnly) -> Result<ClockReading, ApiError> {
    let (_, now) = call.conn_now().await?;
    Ok(ClockReading {
        now,
        mode: call.app.clock.as_str(),
    })
}

/// `clock.set`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SetClock {
    #[schemars(range(min = 0, max = i64::MAX))]
    now: i64,
}

async fn set_clock(call: Call, input: SetClock) -> Result<ClockReading, ApiError> {
    let mut conn = call.conn().await?;
    let now = call.app.clock.set(&mut conn, input.now).await?;
    tracing::info!(now, "manual clock set");
    Ok(ClockReading {
        now,
        mode: call.app.clock.as_str(),
    })
}
