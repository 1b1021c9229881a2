//! `bcctl call`: any method, its fields read from the server's OpenAPI
//! document.

use clap::Args;
use serde_json::Value;

use super::Ctx;
use crate::exit::Failure;
use crate::fields;

/// `bcctl call`.
#[derive(Debug, Args)]
pub struct Call {
    /// The method, `module.method` (or `module/method`).
    pub method: String,
    /// Fields as name=value; values are typed by the method's schema.
    pub fields: Vec<String>,
    /// The body as a JSON object (fields given as name=value go on top).
    #[arg(long)]
    pub data: Option<String>,
    /// Describe the method's fields instead of calling it.
    #[arg(long = "fields", id = "describe")]
    pub describe: bool,
    /// The idempotency key (default: a new UUIDv7 where the method takes one).
    #[arg(long)]
    pub idempotency_key: Option<String>,
}

pub(super) async fn run_call(ctx: &Ctx, call: Call) -> Result<(), Failure> {
    let openapi = ctx.client.get("/api/openapi.json").await?;
    let m = fields::find(&openapi, &call.method)?;
    if call.describe {
        #[expect(
            clippy::print_stdout,
            reason = "the description is the command's output"
        )]
        {
            println!("{}", fields::describe(&m));
        }
        return Ok(());
    }
    let now = if fields::needs_now(&call.fields) {
        ctx.now().await
    } else {
        0
    };
    let key = m.keyed().then(|| ctx.key(call.idempotency_key.clone()));
    let body = fields::body(
        &m,
        call.data.as_deref(),
        &call.fields,
        ctx.client.tenant(),
        key.as_deref(),
        now,
    )?;
    let answer = ctx.client.call(&m.name, body).await?;
    ctx.out.print(&answer, |p| {
        // A list as a table of its items' scalar fields, else the object.
        if let Some(items) = answer.get("items").and_then(Value::as_array) {
            let keys: Vec<String> = items
                .first()
                .and_then(Value::as_object)
                .map(|o| {
                    o.iter()
                        .filter(|(_, v)| !v.is_object() && !v.is_array())
                        .map(|(k, _)| k.clone())
                        .collect()
                })
                .unwrap_or_default();
            return Some(p.table_by_fields(items, &keys));
        }
        match answer.as_object() {
            Some(o) if o.len() == 1 => o.values().next().map(|v| p.object(v)),
            _ => Some(p.object(&answer)),
        }
    });
    Ok(())
}
