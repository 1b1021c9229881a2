//! The reconcilers' storage side: settling every reservation, writing
//! `vm.grant.slot.hours` for grants and the instance meters from placement
//! segments (contract 5.2, 6), and `usage.list`.
//!
//! Every step claims its rows with row locks (skipping rows another replica
//! holds), writes records and the new metered-through mark in one
//! transaction, and relies on the unique (meter, subject, target, hour) key as
//! a backstop: a worker killed at any point loses nothing and duplicates
//! nothing, and any number of replicas may run at once.

use std::collections::BTreeMap;

use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Integer, Jsonb, Nullable, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use grants_core::{HOUR_MS, Record, Segment};
use serde_json::Value;

use crate::error::{Result, StorageError};
use crate::ids;
use crate::locks;
use crate::model::events;
use crate::model::instance::InstanceRow;
use crate::model::states::{InstanceState, PlacementKind, SettledState};
use crate::ops::settlement;
use crate::schema::{grants, instances, placement_segments as seg, pools, reservations};

pub(crate) mod deficit;
pub(crate) mod lent;
mod usage;

pub use usage::{UsageFilter, UsageRecord, list};

/// Grants metered per transaction.
const GRANT_BATCH: i64 = 1000;
/// Reservations one `vps.grants` metering transaction claims.
const RESERVATION_BATCH: i64 = 50;
/// Instances metered per transaction.
const INSTANCE_BATCH: i64 = 200;

/// The start of the hour bucket holding `t`.
fn hour_floor(t: i64) -> i64 {
    t.div_euclid(HOUR_MS) * HOUR_MS
}

/// Usage records to write about one subject and meter: everything but the
/// hour buckets is shared (a grant's or an instance's run of hours).
#[derive(Debug, Clone)]
struct RecordGroup {
    tenant_id: String,
    project_id: Option<String>,
    meter: &'static str,
    unit: &'static str,
    grant_id: Option<String>,
    instance_id: Option<String>,
    subject: String,
    target: String,
    tags: Value,
    /// The hour buckets, in period order.
    records: Vec<Record>,
}

/// Writes records under the global usage sequence (taken last, held to
/// commit, so sequence order is commit order). Returns how many were written.
///
/// One array-bound statement per call, whatever the number of records: the
/// same prepared statement every time, and no per-statement parameter limit.
/// What the records of a group share is sent once per group (a grant's 24
/// hours carry one tags object, parsed once by PostgreSQL); each record
/// sends its id, its group's position and its bucket.
async fn write_records(
    conn: &mut AsyncPgConnection,
    now: i64,
    groups: &[RecordGroup],
) -> Result<u64> {
    let count: usize = groups.iter().map(|g| g.records.len()).sum();
    if count == 0 {
        return Ok(0);
    }
    #[derive(QueryableByName)]
    struct Head {
        #[diesel(sql_type = BigInt)]
        last_seq: i64,
    }
    let n = i64::try_from(count).map_err(StorageError::internal)?;
    let head: Head = diesel::sql_query(
        "UPDATE usage_head SET last_seq = last_seq + $1 WHERE id = 1 RETURNING last_seq",
    )
    .bind::<BigInt, _>(n)
    .get_result(conn)
    .await?;
    let mut usage_ids = Vec::with_capacity(count);
    let mut group_of = Vec::with_capacity(count);
    let (mut q, mut ps, mut pe) = (
        Vec::with_capacity(count),
        Vec::with_capacity(count),
        Vec::with_capacity(count),
    );
    for (k, g) in groups.iter().enumerate() {
        let k = i32::try_from(k + 1).map_err(StorageError::internal)?;
        for r in &g.records {
            usage_ids.push(ids::new_id("use", now));
            group_of.push(k);
            q.push(r.quantity_micro);
            ps.push(r.period_start);
            pe.push(r.period_end);
        }
    }
    let col = |f: fn(&RecordGroup) -> &str| groups.iter().map(f).collect::<Vec<&str>>();
    let opt = |f: fn(&RecordGroup) -> Option<&str>| groups.iter().map(f).collect::<Vec<_>>();
    let tags: Vec<&Value> = groups.iter().map(|g| &g.tags).collect();
    // The claim on the subject's row makes a duplicate impossible; the unique
    // key would turn a bug into a failed, retried transaction, not a double bill.
    let written = diesel::sql_query(include_str!("sql/metering_write_records.sql"))
        .bind::<BigInt, _>(head.last_seq - n)
        .bind::<Array<Text>, _>(&usage_ids)
        .bind::<Array<Integer>, _>(&group_of)
        .bind::<Array<BigInt>, _>(&q)
        .bind::<Array<BigInt>, _>(&ps)
        .bind::<Array<BigInt>, _>(&pe)
        .bind::<Array<Text>, _>(col(|g| &g.tenant_id))
        .bind::<Array<Nullable<Text>>, _>(opt(|g| g.project_id.as_deref()))
        .bind::<Array<Text>, _>(col(|g| g.meter))
        .bind::<Array<Text>, _>(col(|g| g.unit))
        .bind::<Array<Nullable<Text>>, _>(opt(|g| g.grant_id.as_deref()))
        .bind::<Array<Nullable<Text>>, _>(opt(|g| g.instance_id.as_deref()))
        .bind::<Array<Text>, _>(col(|g| &g.subject))
        .bind::<Array<Text>, _>(col(|g| &g.target))
        .bind::<Array<Jsonb>, _>(&tags)
        .bind::<BigInt, _>(now)
        .execute(conn)
        .await?;
    Ok(written as u64)
}

/// What a metering transaction advances on its grants.
#[derive(Debug, Default)]
struct Marks {
    /// The grants.
    ids: Vec<String>,
    /// Their new `meteredThrough`.
    through: Vec<i64>,
    /// The micro-slot-hours credited to each by this transaction.
    credited: Vec<i64>,
    /// The exact credit each keeps now (`None`: unchanged).
    exact: Vec<Option<String>>,
    /// The micro-slot-hours lent by each in this transaction.
    lent: Vec<i64>,
}

/// Sets the metered-through marks of grants, and adds their new credits, in
/// one statement.
async fn set_grant_marks(conn: &mut AsyncPgConnection, marks: &Marks) -> Result<()> {
    if marks.ids.is_empty() {
        return Ok(());
    }
    diesel::sql_query(
        "UPDATE grants SET metered_through = v.t, deficit_micro = deficit_micro + v.c, \
                deficit_exact = COALESCE(v.e, deficit_exact), lent_micro = lent_micro + v.l \
         FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::bigint[]) \
              AS v(id, t, c, e, l) \
         WHERE grants.grant_id = v.id",
    )
    .bind::<Array<Text>, _>(&marks.ids)
    .bind::<Array<BigInt>, _>(&marks.through)
    .bind::<Array<BigInt>, _>(&marks.credited)
    .bind::<Array<Nullable<Text>>, _>(&marks.exact)
    .bind::<Array<BigInt>, _>(&marks.lent)
    .execute(conn)
    .await?;
    Ok(())
}

/// What one metering or settlement transaction did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    /// Grants, instances or transitions handled.
    pub items: u64,
    /// Usage records written.
    pub records: u64,
    /// Whether the same call may find more work right away.
    pub more: bool,
}

/// The reservations with a grant transition due by `now` (by reservation
/// id, then account id): what the `vps.grants` pass settles, one
/// [`settle_reservation`] each.
pub async fn due_settlements(
    conn: &mut AsyncPgConnection,
    now: i64,
) -> Result<Vec<(String, String)>> {
    Ok(grants::table
        .filter(
            grants::settled_state
                .eq(SettledState::Scheduled)
                .and(grants::starts_at.le(now))
                .or(grants::settled_state
                    .eq_any(SettledState::OPEN)
                    .and(grants::ends_at.le(now))),
        )
        .select((grants::account_id, grants::reservation_id))
        .distinct()
        .order((grants::reservation_id.asc(), grants::account_id.asc()))
        .load(conn)
        .await?)
}

/// Settles one reservation up to `now` in its own transaction,
/// unless another transaction holds it (it settles it itself). Returns the
/// number of transitions applied.
pub async fn settle_reservation(
    conn: &mut AsyncPgConnection,
    account_id: &str,
    reservation_id: &str,
    now: i64,
) -> Result<u64> {
    conn.transaction::<_, StorageError, _>(async |conn| {
        let Some(res) = locks::reservation_unless_held(conn, account_id, reservation_id).await?
        else {
            return Ok(0);
        };
        let mut batch = Vec::new();
        let n = settlement::settle(conn, &res, now, &mut batch).await?;
        events::publish(conn, now, batch).await?;
        Ok(n as u64)
    })
    .await
}

/// Tags of a usage record: where the usage happened. Kept as the record's
/// `tags` object, as written here (the record's format, like an event's
/// payload).
#[derive(Debug, Clone, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Tags<'a> {
    region: &'a str,
    pool_id: &'a str,
    provider: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    flavor: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reservation_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    grant_id: Option<&'a str>,
}

impl Tags<'_> {
    fn to_value(&self) -> Result<Value> {
        Ok(serde_json::to_value(self)?)
    }
}

/// One transaction of `vm.grant.slot.hours`: claims up to a batch of
/// reservations with grants to meter, writes every ended, unmetered hour
/// bucket of their non-cancelled grants and advances `meteredThrough`. The
/// `vps.grants` pass calls it until it reports no `more`.
pub async fn meter_grant_batch(conn: &mut AsyncPgConnection, now: i64) -> Result<Batch> {
    let cutoff = hour_floor(now);
    {
        let (grants_done, written) = conn
            .transaction::<_, StorageError, _>(async |conn| {
                // Claim reservations first: settlement and `end` hold a
                // reservation's lock while they change its grants' terms, so
                // a grant is never metered while its end is being decided.
                let keys = locks::due_reservations(conn, cutoff, RESERVATION_BATCH).await?;
                if keys.is_empty() {
                    return Ok((0, 0));
                }
                let batch = locks::due_grants(conn, &keys, cutoff, GRANT_BATCH).await?;
                if batch.is_empty() {
                    return Ok((0, 0));
                }
                let keys: Vec<(String, String)> = batch
                    .iter()
                    .map(|g| (g.account_id.clone(), g.reservation_id.clone()))
                    .collect();
                let places = reservation_places(conn, &keys).await?;
                let mut credits = deficit::credits(conn, &batch, now).await?;
                let borrowed = lent::running(conn, &batch).await?;
                let mut records = Vec::new();
                let mut marks = Marks::default();
                for g in &batch {
                    let slots = u32::try_from(g.slots).unwrap_or(0);
                    let due = grants_core::grant_slot_records(
                        slots,
                        g.starts_at,
                        g.ends_at,
                        g.metered_through,
                        now,
                    );
                    let Some(last) = due.last() else { continue };
                    let through = last.metered_through;
                    let lent_records = lent::records(g, borrowed.get(&g.grant_id), &due);
                    let (region, provider) = places
                        .get(&(g.account_id.clone(), g.reservation_id.clone()))
                        .cloned()
                        .unwrap_or_default();
                    let slot_group = RecordGroup {
                        tenant_id: g.tenant_id.clone(),
                        project_id: g.project_id.clone(),
                        meter: "vm.grant.slot.hours",
                        unit: "slot-hours",
                        grant_id: Some(g.grant_id.clone()),
                        instance_id: None,
                        subject: g.grant_id.clone(),
                        target: g.grant_id.clone(),
                        tags: Tags {
                            region: &region,
                            pool_id: &g.pool_id,
                            provider: &provider,
                            reservation_id: Some(&g.reservation_id),
                            ..Tags::default()
                        }
                        .to_value()?,
                        records: due,
                    };
                    // The credit of the same buckets, with the same tags.
                    let (mut credited, mut exact) = (0, None);
                    if let Some(credit) = credits.remove(&g.grant_id) {
                        credited = credit.records.iter().map(|r| r.quantity_micro).sum();
                        exact = Some(credit.exact);
                        records.push(RecordGroup {
                            meter: "vm.grant.deficit.hours",
                            records: credit.records,
                            ..slot_group.clone()
                        });
                    }
                    // The rebate of the same buckets, with the same tags.
                    marks
                        .lent
                        .push(lent_records.iter().map(|r| r.quantity_micro).sum());
                    if !lent_records.is_empty() {
                        records.push(RecordGroup {
                            meter: "vm.grant.lent.hours",
                            records: lent_records,
                            ..slot_group.clone()
                        });
                    }
                    records.push(slot_group);
                    marks.ids.push(g.grant_id.clone());
                    marks.through.push(through);
                    marks.credited.push(credited);
                    marks.exact.push(exact);
                }
                set_grant_marks(conn, &marks).await?;
                let written = write_records(conn, now, &records).await?;
                Ok((batch.len() as u64, written))
            })
            .await?;
        Ok(Batch {
            items: grants_done,
            records: written,
            more: grants_done > 0,
        })
    }
}

/// Region and provider of reservations (by account and id).
async fn reservation_places(
    conn: &mut AsyncPgConnection,
    keys: &[(String, String)],
) -> Result<BTreeMap<(String, String), (String, String)>> {
    let ids: Vec<&str> = keys.iter().map(|k| k.1.as_str()).collect();
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
    Ok(rows
        .into_iter()
        .map(|(a, r, region, provider)| {
            ((a, r), (region, provider.unwrap_or_else(|| "gce".into())))
        })
        .collect())
}

/// Which meter a segment kind feeds.
fn meter_of(kind: PlacementKind) -> Option<&'static str> {
    match kind {
        PlacementKind::Grant => Some("vm.grant.usage.hours"),
        // A borrower in a lent slot (contract 5.5).
        PlacementKind::Lent => Some("vm.interruptible.hours"),
        PlacementKind::Reservation => Some("vm.reserved.hours"),
        PlacementKind::OnDemand => Some("vm.ondemand.hours"),
        PlacementKind::None => None,
    }
}

#[derive(Debug, Clone, Queryable)]
struct SegmentRow {
    from_ms: i64,
    to_ms: Option<i64>,
    kind: PlacementKind,
    running: bool,
    grant_id: Option<String>,
    account_id: Option<String>,
    reservation_id: Option<String>,
}

/// One meter series of an instance: its segments, its grant, its reservation.
type Series = (Vec<Segment>, Option<String>, Option<(String, String)>);

/// The instance meters of one locked instance up to `now`.
async fn instance_records(
    conn: &mut AsyncPgConnection,
    inst: &InstanceRow,
    now: i64,
) -> Result<Vec<RecordGroup>> {
    let segments: Vec<SegmentRow> = seg::table
        .filter(seg::instance_id.eq(&inst.instance_id))
        .filter(seg::running.eq(true))
        .filter(seg::billed.eq(true))
        .order((seg::from_ms.asc(), seg::segment_id.asc()))
        .select((
            seg::from_ms,
            seg::to_ms,
            seg::kind,
            seg::running,
            seg::grant_id,
            seg::account_id,
            seg::reservation_id,
        ))
        .load(conn)
        .await?;
    // One series per (meter, target): its own cumulative rounding.
    let mut series: BTreeMap<(&'static str, String), Series> = BTreeMap::new();
    for s in segments.iter().filter(|s| s.running) {
        let Some(meter) = meter_of(s.kind) else {
            continue;
        };
        let target = match s.kind {
            PlacementKind::Grant | PlacementKind::Lent => s.grant_id.clone().unwrap_or_default(),
            PlacementKind::Reservation => s.reservation_id.clone().unwrap_or_default(),
            PlacementKind::OnDemand | PlacementKind::None => {
                PlacementKind::OnDemand.as_str().to_owned()
            }
        };
        let res = s.account_id.clone().zip(s.reservation_id.clone());
        let entry = series
            .entry((meter, target))
            .or_insert_with(|| (Vec::new(), s.grant_id.clone(), res));
        entry.0.push(Segment {
            from: s.from_ms,
            to: s.to_ms.unwrap_or(i64::MAX),
            weight: 1,
        });
    }
    if series.is_empty() {
        return Ok(Vec::new());
    }
    let (pool_region, provider): (String, String) = pools::table
        .find(&inst.pool_id)
        .select((pools::region, pools::provider))
        .first(conn)
        .await?;
    let keys: Vec<(String, String)> = series.values().filter_map(|v| v.2.clone()).collect();
    let places = reservation_places(conn, &keys).await?;
    let mut out = Vec::new();
    for ((meter, target), (segments, grant_id, res)) in series {
        let region = res
            .as_ref()
            .and_then(|k| places.get(k))
            .map_or(pool_region.clone(), |(region, _)| region.clone());
        let records =
            grants_core::cumulative_rounded_records(&segments, inst.usage_metered_through, now);
        if records.is_empty() {
            continue;
        }
        let tags = Tags {
            region: &region,
            pool_id: &inst.pool_id,
            provider: &provider,
            flavor: Some(&inst.flavor),
            reservation_id: res.as_ref().map(|(_, r)| r.as_str()),
            grant_id: grant_id.as_deref(),
        }
        .to_value()?;
        out.push(RecordGroup {
            tenant_id: inst.tenant_id.clone(),
            project_id: inst.project_id.clone(),
            meter,
            unit: "instance-hours",
            grant_id: grant_id.clone(),
            instance_id: Some(inst.instance_id.clone()),
            subject: inst.instance_id.clone(),
            target,
            tags,
            records,
        });
    }
    Ok(out)
}

/// Meters locked instances up to the last ended hour and advances their mark.
async fn meter_locked(
    conn: &mut AsyncPgConnection,
    batch: &[InstanceRow],
    now: i64,
) -> Result<u64> {
    let cutoff = hour_floor(now);
    let mut records = Vec::new();
    for inst in batch {
        records.extend(instance_records(conn, inst, now).await?);
        diesel::update(instances::table.find(&inst.instance_id))
            .set(instances::usage_metered_through.eq(cutoff.max(inst.usage_metered_through)))
            .execute(conn)
            .await?;
    }
    write_records(conn, now, &records).await
}

/// The reservations with live instances to meter before `now`'s hour (by
/// reservation id, then account id): what the `vps.usage` pass meters, with
/// [`meter_instances_on`] each, before [`meter_unplaced_batch`].
pub async fn instance_reservations_due(
    conn: &mut AsyncPgConnection,
    now: i64,
) -> Result<Vec<(String, String)>> {
    let cutoff = hour_floor(now);
    let on: Vec<(Option<String>, Option<String>)> = instances::table
        .filter(instances::reservation_id.is_not_null())
        .filter(instances::state.ne(InstanceState::Deleted))
        .filter(instances::usage_metered_through.lt(cutoff))
        .select((instances::account_id, instances::reservation_id))
        .distinct()
        .load(conn)
        .await?;
    let mut keys: Vec<(String, String)> =
        on.into_iter().filter_map(|(a, r)| Some((a?, r?))).collect();
    keys.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
    Ok(keys)
}

/// One transaction of instance meters on one reservation: settles it, then
/// meters up to a batch of its live instances (in batches so a long backlog
/// commits piecemeal and no transaction grows without bound). Skipped
/// (nothing, no `more`) when another transaction holds the reservation.
pub async fn meter_instances_on(
    conn: &mut AsyncPgConnection,
    account_id: &str,
    reservation_id: &str,
    now: i64,
) -> Result<Batch> {
    let cutoff = hour_floor(now);
    let (n, w) = conn
        .transaction::<_, StorageError, _>(async |conn| {
            let Some(res) =
                locks::reservation_unless_held(conn, account_id, reservation_id).await?
            else {
                return Ok((0, 0));
            };
            let mut batch_events = Vec::new();
            settlement::settle(conn, &res, now, &mut batch_events).await?;
            let batch = locks::due_instances_on(conn, &res, cutoff, INSTANCE_BATCH).await?;
            let written = meter_locked(conn, &batch, now).await?;
            events::publish(conn, now, batch_events).await?;
            Ok((batch.len() as u64, written))
        })
        .await?;
    Ok(Batch {
        items: n,
        records: w,
        more: n >= INSTANCE_BATCH.unsigned_abs(),
    })
}

/// One transaction of instance meters on no reservation (on demand, stopped
/// without a slot, deleted with hours left), claimed `SKIP LOCKED`.
pub async fn meter_unplaced_batch(conn: &mut AsyncPgConnection, now: i64) -> Result<Batch> {
    let cutoff = hour_floor(now);
    let (n, w) = conn
        .transaction::<_, StorageError, _>(async |conn| {
            let batch = locks::due_unplaced_instances(conn, cutoff, INSTANCE_BATCH).await?;
            let written = meter_locked(conn, &batch, now).await?;
            Ok((batch.len() as u64, written))
        })
        .await?;
    Ok(Batch {
        items: n,
        records: w,
        more: n > 0,
    })
}

/// How far metering is behind at some instant (for the worker's metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lag {
    /// `now` minus the end of the oldest ended hour of a non-cancelled grant
    /// whose `vm.grant.slot.hours` record is not written (0 when caught up).
    pub grants_ms: i64,
    /// The same for the instance meters.
    pub usage_ms: i64,
}

#[derive(QueryableByName)]
struct Oldest {
    #[diesel(sql_type = Nullable<BigInt>)]
    grants: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    usage: Option<i64>,
}

/// The metering [`Lag`] at `now`, in one statement over the two partial
/// "still to meter" conditions of the passes.
pub async fn lag(conn: &mut AsyncPgConnection, now: i64) -> Result<Lag> {
    let cutoff = hour_floor(now);
    let o: Oldest = diesel::sql_query(include_str!("sql/metering_lag.sql"))
        .bind::<BigInt, _>(cutoff)
        .get_result(conn)
        .await?;
    let behind =
        |through: Option<i64>| through.map_or(0, |t| (now - (hour_floor(t) + HOUR_MS)).max(0));
    Ok(Lag {
        grants_ms: behind(o.grants),
        usage_ms: behind(o.usage),
    })
}
