//! events and clock.

use iam_check::{Permission, TenantRule};
use serde::Deserialize;
use serde_json::{Value, json};
use storage::{Error, events};

use crate::registry::{Call, Kind, Method, handler};
use crate::schema::{Ty, instant, int, opt, opt_default, pat, req, tenant_id};

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
