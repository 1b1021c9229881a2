//! The history of each reservation's total (contract 5.4): written by the
//! scans that see it change, read by the metering of deficit credits, the
//! grant's hours view and the shortfall gauges.
//!
//! A change is recorded at the scan's instant, except that it never lands in
//! an hour bucket whose credits are already written: a scan's answer applied
//! after the reservation's grants were metered through an hour takes effect
//! at that hour's end, so a written record is never contradicted. Rows are
//! pruned once no grant that is not fully metered can need them.

use std::collections::{BTreeMap, BTreeSet};

use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use grants_core::deficit::TotalChange;
use grants_core::{Commitment, HOUR_MS, Term};

use crate::error::Result;
use crate::model::states::SettledState;
use crate::schema::{grants, reservation_totals as rt};

/// The non-cancelled grants of a reservation (ended ones with their final
/// end): what `committed(t)` sums.
fn committed_grants<'a>(
    account_id: &'a str,
    reservation_id: &'a str,
) -> grants::BoxedQuery<'a, diesel::pg::Pg> {
    grants::table
        .filter(grants::account_id.eq(account_id))
        .filter(grants::reservation_id.eq(reservation_id))
        .filter(grants::settled_state.ne(SettledState::Cancelled))
        .into_boxed()
}

/// A reservation's key: its account and its id.
pub type ReservationKey = (String, String);

/// Records that the (locked) reservation's total is `total` from the scan's
/// instant `now` on, `short` when it is below the peak of the reservation's
/// scheduled and active grants from then on. Returns the instant recorded:
/// `now`, or later when the reservation's credits are already written past
/// it or a change is already recorded after it.
pub async fn record(
    conn: &mut AsyncPgConnection,
    account_id: &str,
    reservation_id: &str,
    now: i64,
    total: i64,
    short: bool,
) -> Result<i64> {
    let last: Option<i64> = rt::table
        .filter(rt::account_id.eq(account_id))
        .filter(rt::reservation_id.eq(reservation_id))
        .select(diesel::dsl::max(rt::at))
        .first(conn)
        .await?;
    // The end of the last hour bucket metered for any of its grants.
    let metered: Option<i64> = committed_grants(account_id, reservation_id)
        .filter(grants::metered_through.gt(grants::starts_at))
        .select(diesel::dsl::max(grants::metered_through))
        .first(conn)
        .await?;
    let closed = metered.map_or(i64::MIN, |m| {
        m.div_euclid(HOUR_MS) * HOUR_MS
            + if m.rem_euclid(HOUR_MS) == 0 {
                0
            } else {
                HOUR_MS
            }
    });
    let at = now.max(last.unwrap_or(i64::MIN)).max(closed);
    if at > now {
        tracing::info!(
            account = %account_id,
            reservation = %reservation_id,
            now,
            at,
            "total change recorded after the hours already credited"
        );
    }
    diesel::insert_into(rt::table)
        .values((
            rt::account_id.eq(account_id),
            rt::reservation_id.eq(reservation_id),
            rt::at.eq(at),
            rt::total.eq(total.max(0)),
            rt::short.eq(short),
        ))
        .on_conflict((rt::account_id, rt::reservation_id, rt::at))
        .do_update()
        .set((rt::total.eq(total.max(0)), rt::short.eq(short)))
        .execute(conn)
        .await?;
    prune(conn, account_id, reservation_id, now).await?;
    Ok(at)
}

/// Deletes the rows of a reservation that nothing can need: those superseded
/// by a later row at or before the earliest instant still needed. That is
/// the hour each grant still to be metered resumes at (its start when it
/// keeps no exact credit yet), and the earliest start a grant created from
/// `now` on may have (`MAX_START_IN_PAST_MS` back). The last row always
/// stays.
async fn prune(
    conn: &mut AsyncPgConnection,
    account_id: &str,
    reservation_id: &str,
    now: i64,
) -> Result<()> {
    let resume: Vec<(i64, i64, Option<String>)> = committed_grants(account_id, reservation_id)
        .filter(grants::metered_through.lt(grants::ends_at))
        .select((
            grants::starts_at,
            grants::metered_through,
            grants::deficit_exact,
        ))
        .load(conn)
        .await?;
    let backdated = now.saturating_sub(crate::ops::grants::MAX_START_IN_PAST_MS);
    let needed_from = resume
        .iter()
        .map(|(start, through, exact)| match exact {
            Some(_) => grants_core::bucket_start(*through).max(grants_core::bucket_start(*start)),
            None => *start,
        })
        .chain([backdated])
        .min();
    diesel::sql_query(
        "DELETE FROM reservation_totals t \
          WHERE t.account_id = $1 AND t.reservation_id = $2 \
            AND EXISTS (SELECT 1 FROM reservation_totals n \
                         WHERE n.account_id = $1 AND n.reservation_id = $2 \
                           AND n.at > t.at AND n.at <= $3)",
    )
    .bind::<Text, _>(account_id)
    .bind::<Text, _>(reservation_id)
    .bind::<BigInt, _>(needed_from.unwrap_or(i64::MAX))
    .execute(conn)
    .await?;
    Ok(())
}

/// Those of `keys` with a row marked short: the only reservations whose
/// grants may be owed a credit.
pub async fn short_among(
    conn: &mut AsyncPgConnection,
    keys: &[ReservationKey],
) -> Result<BTreeSet<ReservationKey>> {
    if keys.is_empty() {
        return Ok(BTreeSet::new());
    }
    let accounts: Vec<&str> = keys.iter().map(|k| k.0.as_str()).collect();
    let ids: Vec<&str> = keys.iter().map(|k| k.1.as_str()).collect();
    #[derive(QueryableByName)]
    struct Key {
        #[diesel(sql_type = Text)]
        account_id: String,
        #[diesel(sql_type = Text)]
        reservation_id: String,
    }
    let rows: Vec<Key> = diesel::sql_query(
        "SELECT DISTINCT account_id, reservation_id FROM reservation_totals \
          WHERE short AND (account_id, reservation_id) IN \
                (SELECT * FROM unnest($1::text[], $2::text[]))",
    )
    .bind::<Array<Text>, _>(&accounts)
    .bind::<Array<Text>, _>(&ids)
    .load(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|k| (k.account_id, k.reservation_id))
        .collect())
}

/// The reservation's total as the scans saw it, oldest first.
pub async fn history(
    conn: &mut AsyncPgConnection,
    account_id: &str,
    reservation_id: &str,
) -> Result<Vec<TotalChange>> {
    let rows: Vec<(i64, i64)> = rt::table
        .filter(rt::account_id.eq(account_id))
        .filter(rt::reservation_id.eq(reservation_id))
        .order(rt::at.asc())
        .select((rt::at, rt::total))
        .load(conn)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(at, total)| TotalChange {
            at,
            total: u64::try_from(total).unwrap_or(0),
        })
        .collect())
}

/// The reservation's non-cancelled grants whose term meets `window` (ended
/// ones with their final end), by grant id: what `committed(t)` sums over it.
pub async fn commitments(
    conn: &mut AsyncPgConnection,
    account_id: &str,
    reservation_id: &str,
    window: Term,
) -> Result<BTreeMap<String, Commitment>> {
    let rows: Vec<(String, i32, i64, i64)> = committed_grants(account_id, reservation_id)
        .filter(grants::ends_at.gt(window.start))
        .filter(grants::starts_at.lt(window.end))
        .select((
            grants::grant_id,
            grants::slots,
            grants::starts_at,
            grants::ends_at,
        ))
        .load(conn)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(id, slots, start, end)| {
            let slots = u32::try_from(slots).unwrap_or(0);
            (id, Commitment::new(Term::new(start, end), slots))
        })
        .collect())
}

/// What the deficit arithmetic needs about one reservation over `window`:
/// its grants in a fixed order and its history.
pub struct Shortfalls {
    /// Grant ids, in the order of `grants`.
    pub ids: Vec<String>,
    /// The grants, as `grants_core::deficit` takes them.
    pub grants: Vec<Commitment>,
    /// The total's history.
    pub history: Vec<TotalChange>,
}

impl Shortfalls {
    /// Reads them.
    pub async fn load(
        conn: &mut AsyncPgConnection,
        account_id: &str,
        reservation_id: &str,
        window: Term,
    ) -> Result<Shortfalls> {
        let (ids, grants) = commitments(conn, account_id, reservation_id, window)
            .await?
            .into_iter()
            .unzip();
        Ok(Shortfalls {
            ids,
            grants,
            history: history(conn, account_id, reservation_id).await?,
        })
    }

    /// The position of a grant in `grants`.
    pub fn position(&self, grant_id: &str) -> Option<usize> {
        self.ids.iter().position(|id| id == grant_id)
    }
}

/// Sets `deficit_micros` on a grant's hour rows (`reservationGrants.usage`):
/// its written `vm.grant.deficit.hours` record for the hours metered, and
/// for the others the credit the history so far comes to, up to `now`.
pub async fn fill_credits(
    conn: &mut AsyncPgConnection,
    grant: &crate::model::grant::GrantRow,
    rows: &mut [grants_core::views::hours::HourRow],
    now: i64,
) -> Result<()> {
    let (Some(first), Some(last)) = (<[_]>::first(rows), <[_]>::last(rows)) else {
        return Ok(());
    };
    let (from, to) = (first.period_start, last.period_end);
    let written = written_hours(conn, "vm.grant.deficit.hours", grant, from, to).await?;
    let unmetered = from.max(grant.metered_through);
    let key = (grant.account_id.clone(), grant.reservation_id.clone());
    let pending = if unmetered < to.min(now) && !short_among(conn, &[key]).await?.is_empty() {
        // From the hour metering resumes at, with the exact credit kept
        // before it (what the next records will be cut from).
        use crate::ops::metering::deficit::{before, resumes_at};
        let window = Term::new(resumes_at(grant), now.min(grant.ends_at));
        let res = Shortfalls::load(conn, &grant.account_id, &grant.reservation_id, window).await?;
        match res.position(&grant.grant_id) {
            Some(subject) => grants_core::deficit::deficit_micros_after(
                subject,
                &res.grants,
                &res.history,
                &before(grant, &res, subject),
                grant.metered_through,
                now,
            ),
            None => BTreeMap::new(),
        }
    } else {
        BTreeMap::new()
    };
    for row in rows.iter_mut() {
        // Written once the slot meter is past the hour (or the term's end
        // in it); a first hour begun mid-way is not written yet.
        let metered = grant.metered_through > grant.starts_at
            && grant.metered_through >= row.period_end.min(grant.ends_at);
        let source = if metered { &written } else { &pending };
        row.deficit_micros = source.get(&row.period_start).copied().unwrap_or(0);
    }
    Ok(())
}

/// A grant created with `starts_at` before a later change of the
/// reservation's total (at most `MAX_START_IN_PAST_MS` back) was checked
/// against the total of now only: the rows from the one in effect at
/// `starts_at` on are marked short, so metering checks that stretch exactly.
/// Nothing is sent when no change came after `starts_at` (the usual case).
pub async fn mark_backdated(
    conn: &mut AsyncPgConnection,
    account_id: &str,
    reservation_id: &str,
    starts_at: i64,
) -> Result<()> {
    diesel::sql_query(
        "UPDATE reservation_totals t SET short = true \
          WHERE t.account_id = $1 AND t.reservation_id = $2 AND NOT t.short \
            AND t.at >= COALESCE((SELECT max(p.at) FROM reservation_totals p \
                                   WHERE p.account_id = $1 AND p.reservation_id = $2 \
                                     AND p.at <= $3), t.at) \
            AND EXISTS (SELECT 1 FROM reservation_totals n \
                         WHERE n.account_id = $1 AND n.reservation_id = $2 AND n.at > $3)",
    )
    .bind::<Text, _>(account_id)
    .bind::<Text, _>(reservation_id)
    .bind::<BigInt, _>(starts_at)
    .execute(conn)
    .await?;
    Ok(())
}

/// A grant's records of `meter` written for the hours in `[from, to)` that
/// it is metered through, by `periodStart` (micros): what a grant's hour
/// rows show for the hours already metered.
pub(crate) async fn written_hours(
    conn: &mut AsyncPgConnection,
    meter: &str,
    grant: &crate::model::grant::GrantRow,
    from: i64,
    to: i64,
) -> Result<BTreeMap<i64, i64>> {
    use crate::schema::usage_records as u;
    Ok(u::table
        .filter(u::meter.eq(meter))
        .filter(u::subject.eq(&grant.grant_id))
        .filter(u::target.eq(&grant.grant_id))
        .filter(u::period_start.ge(from))
        .filter(u::period_start.lt(to.min(grant.metered_through)))
        .select((u::period_start, u::quantity_micro))
        .load::<(i64, i64)>(conn)
        .await?
        .into_iter()
        .collect())
}
