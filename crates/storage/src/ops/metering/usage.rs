//! `usage.list`: the usage records in the order they were recorded, read
//! without locks.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::Value;

use crate::error::Result;
use crate::schema::usage_records as ur;

/// A usage record as `usage.list` shows it.
#[derive(Debug, Clone)]
pub struct UsageRecord {
    /// `use_...`
    pub usage_id: String,
    /// The billed tenant.
    pub tenant_id: String,
    /// Project.
    pub project_id: Option<String>,
    /// Meter name.
    pub meter: String,
    /// Exactly 6 decimals.
    pub quantity: String,
    /// `slot-hours` or `instance-hours`.
    pub unit: String,
    /// Hour bucket start.
    pub period_start: i64,
    /// Hour bucket end.
    pub period_end: i64,
    /// Grant.
    pub grant_id: Option<String>,
    /// Instance.
    pub instance_id: Option<String>,
    /// Tags.
    pub tags: Value,
    /// When it was written.
    pub recorded_at: i64,
    /// Position in the log.
    pub seq: i64,
}

/// Filters of `usage.list`.
#[derive(Debug, Clone, Default)]
pub struct UsageFilter {
    /// Only this tenant's records (None: every tenant's, root's `all`).
    pub tenant_id: Option<String>,
    /// Periods starting at or after.
    pub from: Option<i64>,
    /// Periods ending at or before.
    pub to: Option<i64>,
    /// One meter.
    pub meter: Option<String>,
    /// One grant.
    pub grant_id: Option<String>,
    /// One instance.
    pub instance_id: Option<String>,
}

/// `usage.list`: records after position `after`, oldest first in the order
/// they were recorded, at most `limit`; returns them and whether more follow.
pub async fn list(
    conn: &mut AsyncPgConnection,
    filter: &UsageFilter,
    after: i64,
    limit: i64,
) -> Result<(Vec<UsageRecord>, bool)> {
    let mut q = ur::table
        .filter(ur::seq.gt(after))
        .order(ur::seq.asc())
        .limit(limit + 1)
        .select((
            ur::usage_id,
            ur::tenant_id,
            ur::project_id,
            ur::meter,
            ur::quantity_micro,
            ur::unit,
            ur::period_start,
            ur::period_end,
            ur::grant_id,
            ur::instance_id,
            ur::tags,
            ur::recorded_at,
            ur::seq,
        ))
        .into_boxed();
    if let Some(t) = &filter.tenant_id {
        q = q.filter(ur::tenant_id.eq(t.clone()));
    }
    if let Some(f) = filter.from {
        q = q.filter(ur::period_start.ge(f));
    }
    if let Some(t) = filter.to {
        q = q.filter(ur::period_end.le(t));
    }
    if let Some(m) = &filter.meter {
        q = q.filter(ur::meter.eq(m.clone()));
    }
    if let Some(g) = &filter.grant_id {
        q = q.filter(ur::grant_id.eq(g.clone()));
    }
    if let Some(i) = &filter.instance_id {
        q = q.filter(ur::instance_id.eq(i.clone()));
    }
    type Row = (
        String,
        String,
        Option<String>,
        String,
        i64,
        String,
        i64,
        i64,
        Option<String>,
        Option<String>,
        Value,
        i64,
        i64,
    );
    let rows: Vec<Row> = q.load(conn).await?;
    let has_more = rows.len() as i64 > limit;
    let items = rows
        .into_iter()
        .take(usize::try_from(limit).unwrap_or(0))
        .map(
            |(
                usage_id,
                tenant_id,
                project_id,
                meter,
                q,
                unit,
                ps,
                pe,
                grant_id,
                instance_id,
                tags,
                recorded_at,
                seq,
            )| UsageRecord {
                usage_id,
                tenant_id,
                project_id,
                meter,
                quantity: grants_core::format_micros(q),
                unit,
                period_start: ps,
                period_end: pe,
                grant_id,
                instance_id,
                tags,
                recorded_at,
                seq,
            },
        )
        .collect();
    Ok((items, has_more))
}
