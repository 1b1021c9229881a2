//! `placement_segments`: what the operator views and the grant notices read
//! of an instance's placement history on a reservation (they are written by
//! [`crate::ops::instances::place_at`]).
//!
//! An instance stopped and started 100,000 times has 200,000 segments, so
//! no reader loads a reservation's closed segments one by one: each asks
//! the database for what its arithmetic needs, whose size depends on the
//! answer, not on how often instances changed power
//! (`docs/decisions.md`, "Placement segments are summed by the database"):
//!
//! - [`SegmentRow::open_on_reservation`]: the open segments (one per
//!   instance at most), which settlement may still move;
//! - [`held_spans`]: a grant's closed segments merged per instance where
//!   they meet (held, running or stopped), for the notices;
//! - [`running_spans`]: the running closed segments merged per instance
//!   where they meet and stay in a grant or on an ordinary slot, for the
//!   timeline's in-use steps;
//! - [`grant_bucket_ms`]: a grant's closed segments summed per hour bucket
//!   (held and running instance-milliseconds), for `reservationGrants.usage`.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use grants_core::views::hours::BucketMs;
use grants_core::views::preview::Stint;
use grants_core::{HOUR_MS, Term};

use crate::error::Result;
use crate::model::states::PlacementKind;
use crate::schema::placement_segments as seg;

/// A placement segment on a reservation, as the views read it.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = seg)]
pub struct SegmentRow {
    /// The instance.
    pub instance_id: String,
    /// First instant.
    pub from_ms: i64,
    /// First instant after it; `None` while open.
    pub to_ms: Option<i64>,
    /// Whether the instance ran.
    pub running: bool,
    /// The grant holding it; `None` on an ordinary slot (`billing: "none"`
    /// instances' segments, of kind `none`, are on ordinary slots too).
    pub grant_id: Option<String>,
    /// Where the instance sat: a borrower's segment (`lent`) names the
    /// lending grant, and is not the grantee's.
    pub kind: PlacementKind,
}

impl SegmentRow {
    /// Whether it is a borrower's, in a slot its grant lent (contract 3.14):
    /// a grant's own use leaves it out.
    pub fn is_lent(&self) -> bool {
        self.kind == PlacementKind::Lent
    }

    /// As the views' arithmetic sees it.
    pub fn into_stint(self) -> Stint {
        Stint {
            instance_id: self.instance_id,
            from: self.from_ms,
            to: self.to_ms,
            running: self.running,
            grant_id: self.grant_id,
        }
    }

    /// The open segments on a reservation (at most one per instance), by
    /// instance, unlocked.
    pub async fn open_on_reservation(
        conn: &mut AsyncPgConnection,
        account_id: &str,
        reservation_id: &str,
    ) -> Result<Vec<SegmentRow>> {
        Ok(seg::table
            .filter(seg::account_id.eq(account_id))
            .filter(seg::reservation_id.eq(reservation_id))
            .filter(seg::to_ms.is_null())
            .order(seg::instance_id.asc())
            .select(SegmentRow::as_select())
            .load(conn)
            .await?)
    }
}

/// A merged span as the database answers it.
#[derive(Debug, QueryableByName)]
struct Span {
    #[diesel(sql_type = Text)]
    instance_id: String,
    #[diesel(sql_type = BigInt)]
    from_ms: i64,
    #[diesel(sql_type = BigInt)]
    to_ms: i64,
    #[diesel(sql_type = Bool)]
    running: bool,
    #[diesel(sql_type = Nullable<Text>)]
    grant_id: Option<String>,
}

impl Span {
    fn into_stint(self) -> Stint {
        Stint {
            instance_id: self.instance_id,
            from: self.from_ms,
            to: Some(self.to_ms),
            running: self.running,
            grant_id: self.grant_id,
        }
    }
}

/// Merges the closed segments `segments` (a query of `instance_id`,
/// `from_ms`, `to_ms`, `running`, `grant_id` and a text `part`) into spans:
/// a segment joins the previous one of its instance when it starts where
/// that one ended and has the same `part`. A span runs if any of its
/// segments ran, and names the least of their grants.
fn merged(segments: &str) -> String {
    include_str!("sql/segment_merged.sql").replace("{segments}", segments)
}

/// The closed segments of `grant` on a reservation that meet `window`,
/// merged per instance where one starts as the previous ends, whether it
/// ran or not: what the grant held, in as many rows as times an instance
/// came into it. `running`: whether it ran at any time in the span.
pub async fn held_spans(
    conn: &mut AsyncPgConnection,
    account_id: &str,
    reservation_id: &str,
    grant: &str,
    window: Term,
) -> Result<Vec<Stint>> {
    let spans: Vec<Span> = diesel::sql_query(merged(
        "SELECT instance_id, from_ms, to_ms, running, grant_id, '' AS part \
         FROM placement_segments \
         WHERE account_id = $1 AND reservation_id = $2 AND grant_id = $3 AND kind <> 'lent' \
           AND to_ms IS NOT NULL AND from_ms < $5 AND to_ms > $4",
    ))
    .bind::<Text, _>(account_id)
    .bind::<Text, _>(reservation_id)
    .bind::<Text, _>(grant)
    .bind::<BigInt, _>(window.start)
    .bind::<BigInt, _>(window.end)
    .load(conn)
    .await?;
    Ok(spans.into_iter().map(Span::into_stint).collect())
}

/// The running closed segments on a reservation that meet `window`, merged
/// per instance where one starts as the previous ends and both are in a
/// grant (any) or both on an ordinary slot: what the timeline's in-use
/// steps count, in as many rows as times an instance started or crossed
/// between a grant and an ordinary slot. `grant_id`: one of the grants of
/// the span, `None` on an ordinary slot.
pub async fn running_spans(
    conn: &mut AsyncPgConnection,
    account_id: &str,
    reservation_id: &str,
    window: Term,
) -> Result<Vec<Stint>> {
    let spans: Vec<Span> = diesel::sql_query(merged(include_str!("sql/segment_running_spans.sql")))
        .bind::<Text, _>(account_id)
        .bind::<Text, _>(reservation_id)
        .bind::<BigInt, _>(window.start)
        .bind::<BigInt, _>(window.end)
        .load(conn)
        .await?;
    Ok(spans.into_iter().map(Span::into_stint).collect())
}

#[derive(Debug, QueryableByName)]
struct Bucket {
    #[diesel(sql_type = BigInt)]
    bucket: i64,
    #[diesel(sql_type = BigInt)]
    held_ms: i64,
    #[diesel(sql_type = BigInt)]
    running_ms: i64,
}

/// The exact instance-milliseconds the closed segments of `grant` on a
/// reservation spent in each hour bucket of `hours` (which starts on an
/// hour), held (running or stopped) and running, summed by the database:
/// one row per bucket they touch, oldest first.
pub async fn grant_bucket_ms(
    conn: &mut AsyncPgConnection,
    account_id: &str,
    reservation_id: &str,
    grant: &str,
    hours: Term,
) -> Result<Vec<BucketMs>> {
    if hours.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<Bucket> = diesel::sql_query(include_str!("sql/segment_grant_bucket_ms.sql"))
        .bind::<Text, _>(account_id)
        .bind::<Text, _>(reservation_id)
        .bind::<Text, _>(grant)
        .bind::<BigInt, _>(hours.start)
        .bind::<BigInt, _>(hours.end)
        .bind::<BigInt, _>(HOUR_MS)
        .load(conn)
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| BucketMs {
            bucket: r.bucket,
            held_ms: r.held_ms,
            usage_ms: r.running_ms,
        })
        .collect())
}
