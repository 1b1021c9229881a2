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

/// A stored record, as both reads of [`list`] load it.
#[derive(Queryable, QueryableByName, Selectable)]
#[diesel(table_name = ur, check_for_backend(diesel::pg::Pg))]
struct Stored {
    usage_id: String,
    tenant_id: String,
    project_id: Option<String>,
    meter: String,
    quantity_micro: i64,
    unit: String,
    period_start: i64,
    period_end: i64,
    grant_id: Option<String>,
    instance_id: Option<String>,
    tags: Value,
    recorded_at: i64,
    seq: i64,
}

impl From<Stored> for UsageRecord {
    fn from(r: Stored) -> UsageRecord {
        UsageRecord {
            usage_id: r.usage_id,
            tenant_id: r.tenant_id,
            project_id: r.project_id,
            meter: r.meter,
            quantity: grants_core::format_micros(r.quantity_micro),
            unit: r.unit,
            period_start: r.period_start,
            period_end: r.period_end,
            grant_id: r.grant_id,
            instance_id: r.instance_id,
            tags: r.tags,
            recorded_at: r.recorded_at,
            seq: r.seq,
        }
    }
}

/// `usage.list`: records after position `after`, oldest first in the order
/// they were recorded, at most `limit`; returns them and whether more follow.
///
/// A tenant's page with no other filter is read through `usage_tenant_page`,
/// whose statement is planned once per session (a generic plan) instead of
/// on every page over every month's partition; any other filter, and root's
/// page of every tenant, is a query built for it.
pub async fn list(
    conn: &mut AsyncPgConnection,
    filter: &UsageFilter,
    after: i64,
    limit: i64,
) -> Result<(Vec<UsageRecord>, bool)> {
    let UsageFilter {
        tenant_id,
        from,
        to,
        meter,
        grant_id,
        instance_id,
    } = filter;
    let rows: Vec<Stored> = if let Some(tenant) = tenant_id
        && from.is_none()
        && to.is_none()
        && meter.is_none()
        && grant_id.is_none()
        && instance_id.is_none()
    {
        diesel::sql_query(
            "SELECT usage_id, tenant_id, project_id, meter, quantity_micro, unit, \
                    period_start, period_end, grant_id, instance_id, tags, recorded_at, seq \
             FROM usage_tenant_page($1, $2, $3)",
        )
        .bind::<diesel::sql_types::Text, _>(tenant)
        .bind::<diesel::sql_types::BigInt, _>(after)
        .bind::<diesel::sql_types::BigInt, _>(limit + 1)
        .load(conn)
        .await?
    } else {
        let mut q = ur::table
            .filter(ur::seq.gt(after))
            .order(ur::seq.asc())
            .limit(limit + 1)
            .select(Stored::as_select())
            .into_boxed();
        if let Some(t) = tenant_id {
            q = q.filter(ur::tenant_id.eq(t.clone()));
        }
        if let Some(f) = from {
            q = q.filter(ur::period_start.ge(*f));
        }
        if let Some(t) = to {
            q = q.filter(ur::period_end.le(*t));
        }
        if let Some(m) = meter {
            q = q.filter(ur::meter.eq(m.clone()));
        }
        if let Some(g) = grant_id {
            q = q.filter(ur::grant_id.eq(g.clone()));
        }
        if let Some(i) = instance_id {
            q = q.filter(ur::instance_id.eq(i.clone()));
        }
        q.load(conn).await?
    };
    let has_more = rows.len() as i64 > limit;
    let items = rows
        .into_iter()
        .take(usize::try_from(limit).unwrap_or(0))
        .map(UsageRecord::from)
        .collect();
    Ok((items, has_more))
}
