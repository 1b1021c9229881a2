//! events and clock.

use iam_check::{Permission, TenantRule};
use serde::Deserialize;
use serde_json::{Value, json};
use storage::metering::{self, UsageFilter};
use storage::{Error, events};

use crate::registry::{Call, Kind, Method, handler};
use crate::schema::{Ty, instant, int, opt, opt_default, pat, req, tenant_id, typeid};

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    vec![
        Method {
            module: "events",
            method: "list",
            service_module: "events",
            kind: Kind::Read,
            permission: Permission::EventsRead,
            tenant_rule: TenantRule::Acting,
            phase: "v0.1",
            status: "registered",
            summary: "Pages the tenant's events in commit order with an opaque cursor.",
            fields: vec![
                req("tenantId", tenant_id()),
                opt("after", pat(64, "^c[0-9a-v]{1,40}$")),
                opt_default("limit", int(1, 1000), json!(100)),
                opt(
                    "types",
                    Ty::Arr {
                        item: Box::new(pat(64, "^[a-z][a-z0-9.-]{0,63}$")),
                        min_items: 1,
                        max_items: 20,
                    },
                ),
            ],
            handler: handler!(list_events),
        },
        Method {
            module: "usage",
            method: "list",
            service_module: "billing",
            kind: Kind::Read,
            permission: Permission::UsageRead,
            tenant_rule: TenantRule::Acting,
            phase: "v1.0",
            status: "registered",
            summary: "Pages the tenant's usage records in the order they were recorded (all \
                      tenants' with all, root only).",
            fields: vec![
                req("tenantId", tenant_id()),
                opt("from", instant()),
                opt("to", instant()),
                opt("meter", pat(64, "^[a-z][a-z0-9.-]{0,63}$")),
                opt("grantId", typeid("rgrant")),
                opt("instanceId", typeid("inst")),
                opt("after", pat(64, "^c[0-9a-v]{1,40}$")),
                opt_default("limit", int(1, 1000), json!(100)),
                opt_default("all", Ty::Bool, json!(false)),
            ],
            handler: handler!(list_usage),
        },
        Method {
            module: "clock",
            method: "get",
            service_module: "billing",
            kind: Kind::Read,
            permission: Permission::FleetAdmin,
            tenant_rule: TenantRule::Acting,
            phase: "v0.1",
            status: "registered",
            summary: "Returns the server's now and the clock mode.",
            fields: vec![req("tenantId", tenant_id())],
            handler: handler!(get_clock),
        },
        Method {
            module: "clock",
            method: "set",
            service_module: "billing",
            kind: Kind::Mutation,
            permission: Permission::FleetAdmin,
            tenant_rule: TenantRule::Acting,
            phase: "v0.1",
            status: "registered",
            summary: "Moves the manual clock forward (BC_CLOCK=manual only).",
            fields: vec![req("tenantId", tenant_id()), req("now", instant())],
            handler: handler!(set_clock),
        },
    ]
}

#[derive(Deserialize)]
struct ListEvents {
    after: Option<String>,
    limit: Option<i64>,
    types: Option<Vec<String>>,
}

async fn list_events(call: Call) -> Result<Value, Error> {
    let input: ListEvents = call.parse()?;
    let after = match &input.after {
        Some(c) => events::decode_cursor(c)
            .ok_or_else(|| Error::invalid("after", "pattern", "not a cursor from events.list"))?,
        None => 0,
    };
    let mut conn = call.app.conn().await?;
    let page = events::list(
        &mut conn,
        call.tenant(),
        after,
        input.limit.unwrap_or(100),
        input.types.as_deref(),
    )
    .await?;
    Ok(json!({
        "items": page.items,
        "nextCursor": events::encode_cursor(page.next_seq),
        "hasMore": page.has_more,
    }))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListUsage {
    from: Option<i64>,
    to: Option<i64>,
    meter: Option<String>,
    grant_id: Option<String>,
    instance_id: Option<String>,
    after: Option<String>,
    limit: Option<i64>,
    all: Option<bool>,
}

async fn list_usage(call: Call) -> Result<Value, Error> {
    let input: ListUsage = call.parse()?;
    let all = input.all.unwrap_or(false);
    if all && !call.in_root() {
        return Err(Error::access_denied(
            "only the root tenant may list every tenant's usage",
        ));
    }
    let after = match &input.after {
        Some(c) => events::decode_cursor(c)
            .ok_or_else(|| Error::invalid("after", "pattern", "not a cursor from usage.list"))?,
        None => 0,
    };
    let filter = UsageFilter {
        tenant_id: (!all).then(|| call.tenant().to_owned()),
        from: input.from,
        to: input.to,
        meter: input.meter,
        grant_id: input.grant_id,
        instance_id: input.instance_id,
    };
    let mut conn = call.app.conn().await?;
    let (items, has_more) =
        metering::list(&mut conn, &filter, after, input.limit.unwrap_or(100)).await?;
    let next = items.last().map_or(after, |r| r.seq);
    Ok(json!({ "items": items, "nextCursor": events::encode_cursor(next), "hasMore": has_more }))
}

async fn get_clock(call: Call) -> Result<Value, Error> {
    let (_, now) = call.conn_now().await?;
    Ok(json!({ "now": now, "mode": call.app.clock.as_str() }))
}

#[derive(Deserialize)]
struct SetClock {
    now: i64,
}

async fn set_clock(call: Call) -> Result<Value, Error> {
    let input: SetClock = call.parse()?;
    let mut conn = call.app.conn().await?;
    let now = call.app.clock.set(&mut conn, input.now).await?;
    tracing::info!(now, "manual clock set");
    Ok(json!({ "now": now, "mode": call.app.clock.as_str() }))
}
