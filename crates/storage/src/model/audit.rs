//! The audit trail (contract 3.11): one record per authenticated mutation
//! call, and `audit.list`'s oldest-first keyset paging over `(at, id)`.
//!
//! [`insert`] is one statement outside any transaction: it commits on its
//! own, so a call whose transaction rolled back (refused or failed) is still
//! recorded, and a failure to record cannot undo the call.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::Value;

use crate::error::Result;
use crate::ids;
use crate::model::keyset::Position;
use crate::model::states::AuditOutcome;
use crate::schema::audit_records as ar;

/// The TypeID prefix of audit records.
pub const AUDIT_PREFIX: &str = "aud";

/// A record to write.
#[derive(Debug, Clone)]
pub struct NewAuditRecord<'a> {
    /// The acting tenant (the calling key's).
    pub tenant_id: &'a str,
    /// The calling key.
    pub key_id: &'a str,
    /// `module.method`.
    pub method: &'a str,
    /// The ids the call named and created.
    pub object_ids: &'a [String],
    /// How the call ended.
    pub outcome: AuditOutcome,
    /// The code it answered, when refused or failed.
    pub code: Option<&'a str>,
    /// The request id (`x-request-id`).
    pub request_id: &'a str,
}

/// A stored record.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = ar)]
pub struct AuditRecord {
    /// `aud_...`
    pub audit_id: String,
    /// The server's clock when the call was recorded.
    pub at: i64,
    /// The acting tenant.
    pub tenant_id: String,
    /// The calling key.
    pub key_id: String,
    /// `module.method`.
    pub method: String,
    /// A JSON array of id strings.
    pub object_ids: Value,
    /// How the call ended.
    pub outcome: AuditOutcome,
    /// The code it answered, when refused or failed.
    pub code: Option<String>,
    /// The request id.
    pub request_id: String,
}

impl AuditRecord {
    /// The ids of [`AuditRecord::object_ids`].
    pub fn ids(&self) -> Vec<String> {
        self.object_ids
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    }

    /// The paging position after this record.
    pub fn position(&self) -> Position {
        Position::of(self.at, &self.audit_id)
    }
}

/// Writes one record at `now` (its own statement, its own transaction) and
/// returns its id.
pub async fn insert(
    conn: &mut AsyncPgConnection,
    new: &NewAuditRecord<'_>,
    now: i64,
) -> Result<String> {
    let id = ids::new_id(AUDIT_PREFIX, now);
    diesel::insert_into(ar::table)
        .values((
            ar::audit_id.eq(&id),
            ar::at.eq(now),
            ar::tenant_id.eq(new.tenant_id),
            ar::key_id.eq(new.key_id),
            ar::method.eq(new.method),
            ar::object_ids.eq(Value::from(new.object_ids.to_vec())),
            ar::outcome.eq(new.outcome),
            ar::code.eq(new.code),
            ar::request_id.eq(new.request_id),
        ))
        .execute(conn)
        .await?;
    Ok(id)
}

/// What `audit.list` reads.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    /// One tenant's records, or every tenant's (`None`: root's `all`).
    pub tenant_id: Option<String>,
    /// Records at or after this instant.
    pub from: Option<i64>,
    /// Records before this instant.
    pub to: Option<i64>,
    /// Records of this method only.
    pub method: Option<String>,
}

/// The position before every record: the cursor of a first page that found
/// nothing.
pub fn start() -> Position {
    Position::of(0, &format!("{AUDIT_PREFIX}_{}", "0".repeat(26)))
}

/// One page of records, oldest first: at most `limit` after `after` in
/// `(at, audit_id)` order (an index range of `audit_records_tenant_at_idx`
/// or, for every tenant, `audit_records_at_idx`), whether more follow, and
/// the position after the last (or `after`, or [`start`]).
pub async fn page(
    conn: &mut AsyncPgConnection,
    filter: &AuditFilter,
    after: Option<Position>,
    limit: i64,
) -> Result<(Vec<AuditRecord>, Position, bool)> {
    let mut q = ar::table
        .select(AuditRecord::as_select())
        .order((ar::at.asc(), ar::audit_id.asc()))
        .limit(limit + 1)
        .into_boxed();
    if let Some(t) = &filter.tenant_id {
        q = q.filter(ar::tenant_id.eq(t.clone()));
    }
    if let Some(p) = &after {
        q = q.filter(
            ar::at
                .gt(p.created_at)
                .or(ar::at.eq(p.created_at).and(ar::audit_id.gt(p.id.clone()))),
        );
    }
    if let Some(f) = filter.from {
        q = q.filter(ar::at.ge(f));
    }
    if let Some(t) = filter.to {
        q = q.filter(ar::at.lt(t));
    }
    if let Some(m) = &filter.method {
        q = q.filter(ar::method.eq(m.clone()));
    }
    let mut rows: Vec<AuditRecord> = q.load(conn).await?;
    let limit = usize::try_from(limit).unwrap_or(0);
    let has_more = rows.len() > limit;
    rows.truncate(limit);
    let next = rows
        .last()
        .map(AuditRecord::position)
        .or(after)
        .unwrap_or_else(start);
    Ok((rows, next, has_more))
}
