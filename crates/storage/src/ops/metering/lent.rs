//! `vm.grant.lent.hours` (contract 5.5): the slot-hours borrowers held,
//! running, in the lending grants a `vps.grants` metering transaction
//! holds, for the same hour buckets as their slot-hours, in the same
//! transaction, never more than the hour's committed slot-hours.

use std::collections::BTreeMap;

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use grants_core::views::hours::{HourRow, lent_micros};
use grants_core::{Record, Segment};

use crate::error::Result;
use crate::model::grant::GrantRow;
use crate::model::states::PlacementKind;
use crate::schema::placement_segments as seg;

/// The running, billed stretches of borrowers in each of `batch`'s grants
/// not metered yet (one statement for the batch).
pub(super) async fn running(
    conn: &mut AsyncPgConnection,
    batch: &[GrantRow],
) -> Result<BTreeMap<String, Vec<Segment>>> {
    let ids: Vec<&str> = batch.iter().map(|g| g.grant_id.as_str()).collect();
    let Some(from) = batch.iter().map(|g| g.metered_through).min() else {
        return Ok(BTreeMap::new());
    };
    let rows: Vec<(Option<String>, i64, Option<i64>)> = seg::table
        .filter(seg::kind.eq(PlacementKind::Lent))
        .filter(seg::grant_id.eq_any(&ids))
        .filter(seg::running.eq(true))
        .filter(seg::billed.eq(true))
        .filter(seg::to_ms.is_null().or(seg::to_ms.gt(from)))
        .select((seg::grant_id, seg::from_ms, seg::to_ms))
        .load(conn)
        .await?;
    let mut by_grant: BTreeMap<String, Vec<Segment>> = BTreeMap::new();
    for (grant_id, from, to) in rows {
        let Some(grant_id) = grant_id else { continue };
        by_grant.entry(grant_id).or_default().push(Segment {
            from,
            to: to.unwrap_or(i64::MAX),
            weight: 1,
        });
    }
    Ok(by_grant)
}

/// The lent records of grant `g` for the hours `committed` writes (its
/// slot-hours of this transaction), from its borrowers' stretches: within
/// its term (a borrower interrupted by the grant's end runs on through the
/// notice, outside the grant), up to the last hour written.
pub(super) fn records(
    g: &GrantRow,
    stretches: Option<&Vec<Segment>>,
    committed: &[Record],
) -> Vec<Record> {
    let (Some(stretches), Some(last)) = (stretches, committed.last()) else {
        return Vec::new();
    };
    let within: Vec<Segment> = stretches
        .iter()
        .map(|s| Segment {
            to: s.to.min(g.ends_at),
            ..*s
        })
        .filter(|s| s.to > s.from)
        .collect();
    grants_core::lending::lent_records(&within, committed, g.metered_through, last.period_end)
}

/// Sets `lent_micros` on a grant's hour rows (`reservationGrants.usage`):
/// its written `vm.grant.lent.hours` record for the hours metered, and for
/// the others the slot-hours its borrowers held running so far, up to `now`
/// (provisional, like `heldHours`).
pub(crate) async fn fill(
    conn: &mut AsyncPgConnection,
    grant: &GrantRow,
    rows: &mut [HourRow],
    now: i64,
) -> Result<()> {
    let (Some(first), Some(last)) = (<[_]>::first(rows), <[_]>::last(rows)) else {
        return Ok(());
    };
    let (from, to) = (first.period_start, last.period_end);
    let written =
        crate::ops::totals::written_hours(conn, "vm.grant.lent.hours", grant, from, to).await?;
    let unmetered = from.max(grant.metered_through);
    let stretches: Vec<(i64, i64)> = if unmetered < to.min(now) {
        seg::table
            .filter(seg::kind.eq(PlacementKind::Lent))
            .filter(seg::grant_id.eq(&grant.grant_id))
            .filter(seg::running.eq(true))
            .filter(seg::billed.eq(true))
            .filter(seg::from_ms.lt(to))
            .filter(seg::to_ms.is_null().or(seg::to_ms.gt(unmetered)))
            .select((seg::from_ms, seg::to_ms))
            .load::<(i64, Option<i64>)>(conn)
            .await?
            .into_iter()
            .map(|(f, t)| (f, t.unwrap_or(now).min(grant.ends_at)))
            .collect()
    } else {
        Vec::new()
    };
    for row in rows.iter_mut() {
        row.lent_micros = if row.period_start < grant.metered_through {
            written.get(&row.period_start).copied().unwrap_or(0)
        } else {
            lent_micros(
                &stretches,
                row.period_start,
                row.period_end,
                now,
                row.slot_micros,
            )
        };
    }
    Ok(())
}
