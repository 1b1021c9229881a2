//! `placement_segments`: what the operator views read of an instance's
//! placement history on a reservation (they are written by
//! [`crate::ops::instances::place_at`]).

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use grants_core::Term;
use grants_core::views::Stint;

use crate::error::Result;
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
}

impl SegmentRow {
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

    /// The segments on a reservation that meet `window` (open ones
    /// included), by instance then start, unlocked; with `grant`, only those
    /// in that grant and the open ones (which settlement may still move into
    /// it).
    pub async fn on_reservation(
        conn: &mut AsyncPgConnection,
        account_id: &str,
        reservation_id: &str,
        window: Term,
        grant: Option<&str>,
    ) -> Result<Vec<SegmentRow>> {
        let mut query = seg::table
            .filter(seg::account_id.eq(account_id))
            .filter(seg::reservation_id.eq(reservation_id))
            .filter(seg::from_ms.lt(window.end))
            .filter(seg::to_ms.is_null().or(seg::to_ms.gt(window.start)))
            .order((seg::instance_id.asc(), seg::from_ms.asc()))
            .select(SegmentRow::as_select())
            .into_boxed();
        if let Some(g) = grant {
            query = query.filter(seg::grant_id.eq(g.to_owned()).or(seg::to_ms.is_null()));
        }
        Ok(query.load(conn).await?)
    }
}
