//! `bcctl timeline`: a reservation's timeline as a text chart.

use clap::Args;
use serde_json::json;

use super::Ctx;
use crate::exit::Failure;

/// `bcctl timeline`.
#[derive(Debug, Args)]
pub struct Timeline {
    /// The reservation.
    pub reservation_id: String,
    /// Its account.
    #[arg(long)]
    pub account: String,
    /// From (default: a day ago).
    #[arg(long, allow_hyphen_values = true, default_value = "-1d")]
    pub from: String,
    /// To (default: in 14 days).
    #[arg(long, allow_hyphen_values = true, default_value = "+14d")]
    pub to: String,
    /// The chart's width (default: the terminal's, else 100).
    #[arg(long)]
    pub width: Option<usize>,
}

pub(super) async fn timeline(ctx: &Ctx, t: Timeline) -> Result<(), Failure> {
    let from = ctx.instant(&t.from).await?;
    let to = ctx.instant(&t.to).await?;
    let body = json!({ "accountId": t.account, "reservationId": t.reservation_id,
        "from": from, "to": to });
    let a = ctx.call("reservations.timeline", body).await?;
    let width = t
        .width
        .or_else(|| std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()))
        .or_else(|| terminal_size::terminal_size().map(|(w, _)| usize::from(w.0)))
        .unwrap_or(100);
    ctx.out.print(&a, |p| {
        let timeline = a.get("timeline").unwrap_or(&serde_json::Value::Null);
        Some(crate::gantt::render(timeline, width, p.local))
    });
    Ok(())
}
