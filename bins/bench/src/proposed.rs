//! Prototypes of the fixes the findings propose for code this program may
//! not edit, measured on the same data so the proposal comes with a number.
//! Nothing here is used by the product.
//!
//! `meter_grants_unnest`: `storage::metering::meter_grants` with the same
//! locks (up to 50 reservations claimed `FOR UPDATE SKIP LOCKED`, then their
//! due grants `FOR UPDATE` in grant id order), records, metered-through
//! marks and usage sequence, changed in four ways:
//!
//! - each batch's writes are two array-bound statements, `UPDATE grants ...
//!   FROM unnest(...)` for the marks and `INSERT INTO usage_records ...
//!   SELECT ... FROM unnest(...) WITH ORDINALITY` for the records: eleven
//!   parameters whatever the batch holds, one prepared statement, no
//!   65,535-parameter limit (the product sends one `UPDATE` per grant and
//!   multi-row `INSERT`s of 15 parameters per record);
//! - batches of 1,000 grants instead of 200;
//! - the tags object is built once per grant and joined in by grant id;
//! - usage ids count up within a millisecond (as grant ids already do), so
//!   they append to the `usage_id` index instead of landing all over it.

use std::collections::BTreeMap;

use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Jsonb, Nullable, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde_json::{Value, json};
use storage::schema::{grants, pools, reservations};
use storage::timeline::GrantRow;

const GRANT_BATCH: i64 = 1000;
const HOUR_MS: i64 = 3_600_000;

#[derive(QueryableByName)]
struct DueReservation {
    #[diesel(sql_type = Text)]
    account_id: String,
    #[diesel(sql_type = Text)]
    reservation_id: String,
}

#[derive(QueryableByName)]
struct Head {
    #[diesel(sql_type = BigInt)]
    last_seq: i64,
}

/// Column vectors of the records of one batch.
#[derive(Default)]
struct Columns {
    usage_id: Vec<String>,
    tenant_id: Vec<String>,
    project_id: Vec<Option<String>>,
    quantity: Vec<i64>,
    period_start: Vec<i64>,
    period_end: Vec<i64>,
    grant_id: Vec<String>,
    /// One per grant (in `marks` order).
    tags: Vec<Value>,
}

/// Usage ids that increase within a millisecond (as `grants::next_grant_id`
/// already does for grants): TypeIDs of a UUIDv7 whose 62 low random bits
/// count up from a random start, so a batch's ids land at the end of the
/// `usage_id` index instead of all over it.
struct MonotonicIds {
    prefix: u128,
    next: u64,
}

impl MonotonicIds {
    fn new(now: i64) -> MonotonicIds {
        let ms = u128::from(u64::try_from(now).unwrap_or(0)) & ((1 << 48) - 1);
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        MonotonicIds {
            // 48 bits of milliseconds, version 7, 12 bits "rand_a", variant 10.
            prefix: (ms << 80) | (0x7 << 76) | (u128::from(seed & 0xfff) << 64) | (0b10 << 62),
            next: u64::from(seed) << 20,
        }
    }

    fn next(&mut self) -> String {
        self.next += 1;
        let id = self.prefix | u128::from(self.next & ((1 << 62) - 1));
        format!("use_{}", storage::ids::encode_suffix(id))
    }
}

/// Meters every grant as `vps.grants` does, with array-bound writes.
/// Returns (grants, records).
pub async fn meter_grants_unnest(
    conn: &mut AsyncPgConnection,
    now: i64,
) -> anyhow::Result<(u64, u64)> {
    let cutoff = now.div_euclid(HOUR_MS) * HOUR_MS;
    let mut totals = (0u64, 0u64);
    let mut usage_ids = MonotonicIds::new(now);
    loop {
        let (g, r) = conn
            .transaction::<_, anyhow::Error, _>(async |conn| {
                // As `meter_grants`: claim reservations with grants due
                // (skipping those another transaction holds), then lock
                // their due grants.
                let keys: Vec<DueReservation> = diesel::sql_query(
                    "SELECT r.account_id, r.reservation_id FROM reservations r \
                     WHERE EXISTS (SELECT 1 FROM grants g \
                        WHERE g.account_id = r.account_id AND g.reservation_id = r.reservation_id \
                          AND g.settled_state <> 'cancelled' \
                          AND g.metered_through < g.ends_at AND g.metered_through < $1) \
                     ORDER BY r.reservation_id, r.account_id \
                     LIMIT 50 FOR UPDATE OF r SKIP LOCKED",
                )
                .bind::<BigInt, _>(cutoff)
                .load(conn)
                .await?;
                if keys.is_empty() {
                    return Ok((0, 0));
                }
                let claimed: Vec<&str> = keys.iter().map(|k| k.reservation_id.as_str()).collect();
                let batch: Vec<GrantRow> = grants::table
                    .filter(grants::reservation_id.eq_any(&claimed))
                    .filter(grants::settled_state.ne("cancelled"))
                    .filter(grants::metered_through.lt(grants::ends_at))
                    .filter(grants::metered_through.lt(cutoff))
                    .order(grants::grant_id.asc())
                    .limit(GRANT_BATCH)
                    .select(GrantRow::as_select())
                    .for_update()
                    .load(conn)
                    .await?;
                let batch: Vec<GrantRow> = batch
                    .into_iter()
                    .filter(|g| {
                        keys.iter().any(|k| {
                            k.account_id == g.account_id && k.reservation_id == g.reservation_id
                        })
                    })
                    .collect();
                if batch.is_empty() {
                    return Ok((0, 0));
                }
                let ids: Vec<&str> = batch.iter().map(|g| g.reservation_id.as_str()).collect();
                let rows: Vec<(String, String, String, Option<String>)> = reservations::table
                    .left_join(pools::table)
                    .filter(reservations::reservation_id.eq_any(&ids))
                    .select((
                        reservations::account_id,
                        reservations::reservation_id,
                        reservations::region,
                        pools::provider.nullable(),
                    ))
                    .load(conn)
                    .await?;
                let places: BTreeMap<(String, String), (String, String)> = rows
                    .into_iter()
                    .map(|(a, r, region, p)| ((a, r), (region, p.unwrap_or_else(|| "gce".into()))))
                    .collect();
                let mut cols = Columns::default();
                let mut marks: (Vec<String>, Vec<i64>) = (Vec::new(), Vec::new());
                for g in &batch {
                    let due = grants_core::grant_slot_records(
                        u32::try_from(g.slots).unwrap_or(0),
                        g.starts_at,
                        g.ends_at,
                        g.metered_through,
                        now,
                    );
                    let Some(last) = due.last() else { continue };
                    marks.0.push(g.grant_id.clone());
                    marks.1.push(last.metered_through);
                    let (region, provider) = places
                        .get(&(g.account_id.clone(), g.reservation_id.clone()))
                        .cloned()
                        .unwrap_or_default();
                    let tags = json!({
                        "poolId": g.pool_id,
                        "provider": provider,
                        "region": region,
                        "reservationId": g.reservation_id,
                    });
                    cols.tags.push(tags);
                    for r in due {
                        cols.usage_id.push(usage_ids.next());
                        cols.tenant_id.push(g.tenant_id.clone());
                        cols.project_id.push(g.project_id.clone());
                        cols.quantity.push(r.quantity_micro);
                        cols.period_start.push(r.period_start);
                        cols.period_end.push(r.period_end);
                        cols.grant_id.push(g.grant_id.clone());
                    }
                }
                diesel::sql_query(
                    "UPDATE grants SET metered_through = v.t \
                     FROM unnest($1::text[], $2::bigint[]) AS v(id, t) WHERE grants.grant_id = v.id",
                )
                .bind::<Array<Text>, _>(&marks.0)
                .bind::<Array<BigInt>, _>(&marks.1)
                .execute(conn)
                .await?;
                let n = i64::try_from(cols.usage_id.len())?;
                let head: Head = diesel::sql_query(
                    "UPDATE usage_head SET last_seq = last_seq + $1 WHERE id = 1 RETURNING last_seq",
                )
                .bind::<BigInt, _>(n)
                .get_result(conn)
                .await?;
                let written = diesel::sql_query(
                    "INSERT INTO usage_records (seq, usage_id, tenant_id, project_id, meter, quantity_micro, unit, \
                     period_start, period_end, grant_id, instance_id, subject, target, tags, recorded_at) \
                     SELECT $1 + s.i, s.usage_id, s.tenant_id, s.project_id, 'vm.grant.slot.hours', s.q, 'slot-hours', \
                     s.ps, s.pe, s.g, NULL, s.g, s.g, t.tags, $11 \
                     FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[], $8::text[]) \
                     WITH ORDINALITY AS s(usage_id, tenant_id, project_id, q, ps, pe, g, i) \
                     JOIN unnest($9::text[], $10::jsonb[]) AS t(g, tags) ON t.g = s.g \
                     ORDER BY s.i",
                )
                .bind::<BigInt, _>(head.last_seq - n)
                .bind::<Array<Text>, _>(&cols.usage_id)
                .bind::<Array<Text>, _>(&cols.tenant_id)
                .bind::<Array<Nullable<Text>>, _>(&cols.project_id)
                .bind::<Array<BigInt>, _>(&cols.quantity)
                .bind::<Array<BigInt>, _>(&cols.period_start)
                .bind::<Array<BigInt>, _>(&cols.period_end)
                .bind::<Array<Text>, _>(&cols.grant_id)
                .bind::<Array<Text>, _>(&marks.0)
                .bind::<Array<Jsonb>, _>(&cols.tags)
                .bind::<BigInt, _>(now)
                .execute(conn)
                .await?;
                Ok((batch.len() as u64, written as u64))
            })
            .await?;
        if g == 0 {
            return Ok(totals);
        }
        totals.0 += g;
        totals.1 += r;
    }
}
