//! `bcctl usage`, `events` and `clock` (the billing and events methods).

use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};

use super::{Ctx, opt, set};
use crate::exit::Failure;
use crate::output::{Col, text, time};
use crate::when;

/// What `usage --sum-by` groups by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SumBy {
    /// Per grant (records of no grant together).
    Grant,
    /// Per meter.
    Meter,
    /// Per day (UTC, or local with --local) and meter.
    Day,
}

/// `bcctl usage`.
#[derive(Debug, Args)]
pub struct Usage {
    /// Records from this instant.
    #[arg(long, allow_hyphen_values = true)]
    pub from: Option<String>,
    /// Records before this instant.
    #[arg(long, allow_hyphen_values = true)]
    pub to: Option<String>,
    /// One meter.
    #[arg(long)]
    pub meter: Option<String>,
    /// One grant's.
    #[arg(long)]
    pub grant: Option<String>,
    /// One instance's.
    #[arg(long)]
    pub instance: Option<String>,
    /// Every tenant's (root).
    #[arg(long)]
    pub all: bool,
    /// Sum the quantities instead of listing records.
    #[arg(long, value_enum)]
    pub sum_by: Option<SumBy>,
}

/// `bcctl events`.
#[derive(Debug, Args)]
pub struct Events {
    /// Keep polling and print events as they arrive (Ctrl-C stops).
    #[arg(short, long)]
    pub follow: bool,
    /// Only these types (repeat, or comma-separated).
    #[arg(long = "type", value_delimiter = ',')]
    pub types: Vec<String>,
    /// After this cursor.
    #[arg(long)]
    pub after: Option<String>,
    /// Seconds between polls with --follow.
    #[arg(long, default_value_t = 2.0)]
    pub interval: f64,
}

/// `bcctl clock`.
#[derive(Debug, Subcommand)]
pub enum Clock {
    /// The server's now.
    #[command(after_help = "Example:\n  bcctl clock get")]
    Get,
    /// Move a manual clock (root): RFC 3339, epoch ms, or +1h from its now.
    #[command(after_help = "Example:\n  bcctl clock set 2030-01-02T00:00:00Z")]
    Set {
        /// The new now.
        #[arg(allow_hyphen_values = true)]
        now: String,
    },
}

const USAGE_COLS: &[Col] = &[
    time("PERIOD", "periodStart"),
    text("METER", "meter"),
    text("QUANTITY", "quantity"),
    text("UNIT", "unit"),
    text("GRANT", "grantId"),
    text("INSTANCE", "instanceId"),
];

const EVENT_COLS: &[Col] = &[
    time("AT", "occurredAt"),
    text("TYPE", "type"),
    text("GRANT", "data.grantId"),
    text("DATA", "data"),
];

/// Micro-units of a 6-decimal quantity.
fn micros(q: &str) -> i64 {
    let (int, frac) = q.split_once('.').unwrap_or((q, "0"));
    let frac = format!("{frac:0<6}");
    let sign = if int.starts_with('-') { -1 } else { 1 };
    let int: i64 = int.trim_start_matches('-').parse().unwrap_or(0);
    sign * (int * 1_000_000 + frac[..6].parse::<i64>().unwrap_or(0))
}

pub(super) async fn usage_cmd(ctx: &Ctx, u: Usage) -> Result<(), Failure> {
    let mut body = Map::new();
    if let Some(f) = &u.from {
        body.insert("from".into(), json!(ctx.instant(f).await?));
    }
    if let Some(t) = &u.to {
        body.insert("to".into(), json!(ctx.instant(t).await?));
    }
    for (k, v) in [
        ("meter", &u.meter),
        ("grantId", &u.grant),
        ("instanceId", &u.instance),
    ] {
        if let Some(v) = v {
            body.insert(k.into(), json!(v));
        }
    }
    if u.all {
        body.insert("all".into(), json!(true));
    }
    let records = ctx.client.list_all("usage.list", body).await?;
    let Some(by) = u.sum_by else {
        let answer = json!({ "items": records });
        ctx.list(&answer, USAGE_COLS);
        return Ok(());
    };
    // Exact sums in micro-units, per key and meter.
    let mut sums: std::collections::BTreeMap<(String, String), (i64, String)> =
        std::collections::BTreeMap::new();
    for r in &records {
        let meter = r["meter"].as_str().unwrap_or("").to_owned();
        let key = match by {
            SumBy::Grant => r["grantId"].as_str().unwrap_or("-").to_owned(),
            SumBy::Meter => String::new(),
            SumBy::Day => {
                let t = when::format_instant(r["periodStart"].as_i64().unwrap_or(0), ctx.out.local);
                t.get(..10).unwrap_or(&t).to_owned()
            }
        };
        let unit = r["unit"].as_str().unwrap_or("").to_owned();
        let e = sums.entry((key, meter)).or_insert((0, unit));
        e.0 += micros(r["quantity"].as_str().unwrap_or("0"));
    }
    let key_name = match by {
        SumBy::Grant => "grantId",
        SumBy::Meter => "",
        SumBy::Day => "day",
    };
    let items: Vec<Value> = sums
        .into_iter()
        .map(|((key, meter), (m, unit))| {
            let mut item = json!({
                "meter": meter,
                "quantity": grants_format(m),
                "unit": unit,
            });
            if !key_name.is_empty() {
                set(&mut item, key_name, json!(key));
            }
            item
        })
        .collect();
    let answer = json!({ "items": items, "records": records.len() });
    let mut cols = Vec::new();
    match by {
        SumBy::Grant => cols.push(text("GRANT", "grantId")),
        SumBy::Day => cols.push(text("DAY", "day")),
        SumBy::Meter => {}
    }
    cols.extend([
        text("METER", "meter"),
        text("QUANTITY", "quantity"),
        text("UNIT", "unit"),
    ]);
    ctx.list(&answer, &cols);
    Ok(())
}

/// Micro-units as the API writes quantities (6 decimals).
fn grants_format(m: i64) -> String {
    let sign = if m < 0 { "-" } else { "" };
    let a = m.unsigned_abs();
    format!("{sign}{}.{:06}", a / 1_000_000, a % 1_000_000)
}

#[expect(
    clippy::print_stdout,
    reason = "following the log prints each page as it arrives"
)]
pub(super) async fn events(ctx: &Ctx, e: Events) -> Result<(), Failure> {
    let mut body = json!({ "limit": 1000 });
    if !e.types.is_empty() {
        set(&mut body, "types", json!(e.types));
    }
    opt(&mut body, "after", e.after.clone());
    if !e.follow {
        let a = ctx.call("events.list", body).await?;
        ctx.list(&a, EVENT_COLS);
        return Ok(());
    }
    use std::io::Write;
    let interval = Duration::from_secs_f64(e.interval.clamp(0.05, 3600.0));
    let mut first = true;
    loop {
        let page = ctx.call("events.list", body.clone()).await?;
        let items = page
            .get("items")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if !items.is_empty() || first {
            match ctx.out.format {
                crate::output::Format::Table => {
                    let table = ctx.out.table(&items, EVENT_COLS);
                    let mut lines = table.lines();
                    let header = lines.next().unwrap_or_default();
                    if first {
                        println!("{}", header.trim_end());
                    }
                    for line in lines {
                        println!("{}", line.trim_end());
                    }
                }
                // One object per line, as they arrive.
                _ => {
                    for item in &items {
                        println!("{}", serde_json::to_string(item).unwrap_or_default());
                    }
                }
            }
            let _ = std::io::stdout().flush();
        }
        first = false;
        if let Some(next) = page.get("nextCursor").and_then(Value::as_str) {
            set(&mut body, "after", json!(next));
        }
        if page.get("hasMore") != Some(&json!(true)) {
            tokio::time::sleep(interval).await;
        }
    }
}

pub(super) async fn clock(ctx: &Ctx, c: Clock) -> Result<(), Failure> {
    let a = match c {
        Clock::Get => ctx.call("clock.get", json!({})).await?,
        Clock::Set { now } => {
            let now = ctx.instant(&now).await?;
            ctx.call("clock.set", json!({ "tenantId": "root", "now": now }))
                .await?
        }
    };
    ctx.out.print(&a, |p| {
        Some(format!(
            "{} ({})",
            p.cell(
                a.get("now").unwrap_or(&Value::Null),
                crate::output::Kind::Time
            ),
            a.get("mode").and_then(Value::as_str).unwrap_or("")
        ))
    });
    Ok(())
}
