//! Figure 4: `vps.grants` metering 10,000 grants × 24 ended hours with the
//! real `reconciler-worker --once --only vps.grants`, next to one bulk
//! `INSERT ... SELECT` of the same rows into a scratch copy of
//! `usage_records` (same columns, constraints and indexes), and next to a
//! `COPY ... FROM STDIN (FORMAT binary)` of the same rows built in the client
//! into another scratch copy.

use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::BufMut;
use diesel::sql_types::BigInt;
use diesel_async::RunQueryDsl;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

use crate::procs::{self, Database, WorkerRun};

/// Grants metered.
pub const GRANTS: i64 = 10_000;
/// Ended hours per grant.
pub const HOURS: i64 = 24;
/// Reservations the grants are spread over.
const RESERVATIONS: i64 = 100;
const HOUR_MS: i64 = 3_600_000;

/// What figure 4 measured.
#[derive(Debug, Clone)]
pub struct Metering {
    /// The worker run metering everything at once.
    pub worker: WorkerRun,
    /// Records found in `usage_records` after it.
    pub records_written: i64,
    /// When the all-at-once run failed: the same work metered in
    /// `HOURS / catch_up_hours` rounds (the clock advanced that many hours
    /// each), so a figure exists; their summed pass times and records.
    pub catch_up: Option<(i64, Vec<WorkerRun>, i64)>,
    /// The bulk insert's time.
    pub bulk: Duration,
    /// Rows the bulk insert wrote.
    pub bulk_rows: i64,
    /// The binary COPY's time.
    pub copy: Duration,
    /// Rows the binary COPY wrote.
    pub copy_rows: i64,
}

#[derive(diesel::QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

async fn count(db: &Database, sql: &str) -> anyhow::Result<i64> {
    let mut conn = db.connect().await?;
    Ok(diesel::sql_query(sql)
        .get_result::<Count>(&mut conn)
        .await?
        .n)
}

/// The first instant of the grants' terms: an hour boundary a day ago.
fn t0() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(0));
    (now / HOUR_MS) * HOUR_MS - 2 * 24 * HOUR_MS
}

/// Builds the database: migrations, then rows inserted directly (one root
/// account, a pool, 100 reservations, 10,000 settled, ended grants never
/// metered), with the manual clock `hours_ended` hours after their start.
async fn seed(db: &Database, hours_ended: i64) -> anyhow::Result<i64> {
    storage::db::migrate(&db.url)
        .await
        .context("migrating the metering database")?;
    let t0 = t0();
    let mut conn = db.connect().await?;
    let statements = [
        format!(
            "INSERT INTO tenants (tenant_id, display_name, state, created_at) \
             VALUES ('acme', 'acme', 'active', {t0})"
        ),
        format!(
            "INSERT INTO provider_accounts \
             (account_id, tenant_id, name, provider, config, created_at) \
             VALUES ('pacct_bench', 'root', 'bench', 'gce', \
             '{{\"project\":\"platform-bench\",\"credentials\":\"none\"}}', {t0})"
        ),
        format!(
            "INSERT INTO pools (pool_id, name, region, provider, account_id, flavors, created_at) \
             VALUES ('pool_bench', 'bench', 'us-central1', 'gce', 'pacct_bench', \
             '[{{\"name\":\"n2-standard-4\",\"vcpus\":4,\"memoryGib\":16,\"gpus\":0}}]', {t0})"
        ),
        format!(
            "INSERT INTO reservations (account_id, reservation_id, region, zone, flavor, total, \
             provider_in_use, status, pool_id, last_scanned_at) \
             SELECT 'pacct_bench', \
             'projects/platform-bench/zones/us-central1-a/reservations/m-' \
             || lpad(r::text, 3, '0'), \
             'us-central1', 'us-central1-a', 'n2-standard-4', 1000, 0, 'ready', 'pool_bench', {t0} \
             FROM generate_series(0, {}) r",
            RESERVATIONS - 1
        ),
        format!(
            "INSERT INTO grants (grant_id, account_id, reservation_id, pool_id, tenant_id, slots, \
             starts_at, ends_at, settled_state, reason, created_at, ended_at, metered_through) \
             SELECT 'rgrant_' || lpad(g::text, 26, '0'), 'pacct_bench', \
             'projects/platform-bench/zones/us-central1-a/reservations/m-' \
             || lpad((g % {RESERVATIONS})::text, 3, '0'), \
             'pool_bench', 'acme', 1 + g % 4, {t0}, {t0} + {HOURS} * {HOUR_MS}, 'ended', \
             'term-over', {t0} - {HOUR_MS}, \
             {t0} + {HOURS} * {HOUR_MS}, {t0} \
             FROM generate_series(1, {GRANTS}) g"
        ),
        format!("UPDATE manual_clock SET now_ms = {t0} + {hours_ended} * {HOUR_MS} + 60000"),
        "ANALYZE".to_owned(),
    ];
    for s in statements {
        diesel::sql_query(&s)
            .execute(&mut conn)
            .await
            .with_context(|| format!("seeding: {s}"))?;
    }
    Ok(t0)
}

/// The ceiling: the same rows as one `INSERT ... SELECT` into a scratch copy.
async fn bulk(db: &Database) -> anyhow::Result<(Duration, i64)> {
    let mut conn = db.connect().await?;
    diesel::sql_query("CREATE TABLE usage_scratch (LIKE usage_records INCLUDING ALL)")
        .execute(&mut conn)
        .await?;
    // The same rows (columns, types, sizes, the four indexes and unique
    // keys), in the database's best case: usage ids in index order, rows in
    // (grant, hour) order, tags built once per grant.
    let sql = format!(
        "INSERT INTO usage_scratch (seq, usage_id, tenant_id, project_id, meter, quantity_micro, \
         unit, period_start, period_end, grant_id, instance_id, subject, target, tags, \
         recorded_at) \
         SELECT row_number() OVER w, 'use_' || lpad((row_number() OVER w)::text, 26, '0'), \
         g.tenant_id, g.project_id, 'vm.grant.slot.hours', g.slots::bigint * 1000000, \
         'slot-hours', g.starts_at + h * {HOUR_MS}, g.starts_at + (h + 1) * {HOUR_MS}, \
         g.grant_id, NULL, g.grant_id, g.grant_id, \
         g.tags, (SELECT now_ms FROM manual_clock) \
         FROM (SELECT g.*, jsonb_build_object('region', r.region, 'poolId', g.pool_id, \
               'provider', 'gce', 'reservationId', g.reservation_id) AS tags \
               FROM grants g JOIN reservations r USING (account_id, reservation_id)) g \
         CROSS JOIN generate_series(0, {}) h \
         WINDOW w AS (ORDER BY g.grant_id, h)",
        HOURS - 1
    );
    let start = Instant::now();
    let rows = diesel::sql_query(&sql).execute(&mut conn).await?;
    Ok((start.elapsed(), i64::try_from(rows)?))
}

/// Runs figure 4 on databases of its own on `server_url`.
pub async fn run(server_url: &str) -> anyhow::Result<Metering> {
    let db = Database::create(server_url, "meter").await?;
    seed(&db, HOURS).await?;
    let worker = procs::run_worker_once(&db.url, "vps.grants").await?;
    let records_written = count(&db, "SELECT count(*) AS n FROM usage_records").await?;
    let (bulk, bulk_rows) = bulk(&db).await?;
    let (copy, copy_rows) = copy_binary(&db).await?;
    db.drop_now().await?;

    let mut catch_up = None;
    if !worker.ok || records_written < GRANTS * HOURS {
        // The same records in rounds of fewer hours each, on a fresh copy.
        // 200 grants × 12 hours × 15 parameters stays under the limit.
        let hours_per_round = 12;
        let db = Database::create(server_url, "meter2").await?;
        let t0 = seed(&db, hours_per_round).await?;
        let mut runs = Vec::new();
        let mut ended = hours_per_round;
        loop {
            runs.push(procs::run_worker_once(&db.url, "vps.grants").await?);
            if ended >= HOURS {
                break;
            }
            ended = (ended + hours_per_round).min(HOURS);
            let mut conn = db.connect().await?;
            diesel::sql_query(format!(
                "UPDATE manual_clock SET now_ms = {t0} + {ended} * {HOUR_MS} + 60000"
            ))
            .execute(&mut conn)
            .await?;
        }
        let written = count(&db, "SELECT count(*) AS n FROM usage_records").await?;
        db.drop_now().await?;
        catch_up = Some((hours_per_round, runs, written));
    }
    Ok(Metering {
        worker,
        records_written,
        catch_up,
        bulk,
        bulk_rows,
        copy,
        copy_rows,
    })
}

/// A `jsonb` value in the binary format: version 1, then the JSON text.
#[derive(Debug)]
struct Jsonb(Vec<u8>);

impl ToSql for Jsonb {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.put_u8(1);
        out.extend_from_slice(&self.0);
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSONB
    }

    to_sql_checked!();
}

/// A grant to meter, as the worker reads it.
struct Due {
    grant_id: String,
    tenant_id: String,
    project_id: Option<String>,
    slots: i64,
    starts_at: i64,
    tags: Vec<u8>,
}

/// The second ceiling: the same 240,000 rows (columns, types, sizes, tags as
/// the worker writes them, usage ids made as the worker makes them), built
/// in the client while they stream, in (grant, hour) order, as one
/// `COPY ... FROM STDIN (FORMAT binary)` (tokio-postgres's
/// `BinaryCopyInWriter`) into a scratch copy of `usage_records`. The grants
/// are read before the clock starts.
async fn copy_binary(db: &Database) -> anyhow::Result<(Duration, i64)> {
    let (client, connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .context("connecting with tokio-postgres")?;
    let conn_task = tokio::spawn(connection);
    client
        .batch_execute("CREATE TABLE usage_copy (LIKE usage_records INCLUDING ALL)")
        .await?;
    let now: i64 = client
        .query_one("SELECT now_ms FROM manual_clock", &[])
        .await?
        .get(0);
    let due: Vec<Due> = client
        .query(
            "SELECT g.grant_id, g.tenant_id, g.project_id, g.slots, g.starts_at, r.region, \
             g.pool_id, g.reservation_id FROM grants g \
             JOIN reservations r USING (account_id, reservation_id) ORDER BY g.grant_id",
            &[],
        )
        .await?
        .into_iter()
        .map(|r| {
            let mut tags = serde_json::Map::new();
            tags.insert("region".into(), r.get::<_, String>(5).into());
            tags.insert("poolId".into(), r.get::<_, String>(6).into());
            tags.insert("provider".into(), "gce".into());
            tags.insert("reservationId".into(), r.get::<_, String>(7).into());
            anyhow::Ok(Due {
                grant_id: r.get(0),
                tenant_id: r.get(1),
                project_id: r.get(2),
                slots: i64::from(r.get::<_, i32>(3)),
                starts_at: r.get(4),
                tags: serde_json::to_vec(&tags)?,
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let types = [
        Type::INT8,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::TEXT,
        Type::INT8,
        Type::INT8,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::JSONB,
        Type::INT8,
    ];
    let start = Instant::now();
    let sink = client
        .copy_in(
            "COPY usage_copy (seq, usage_id, tenant_id, project_id, meter, quantity_micro, \
             unit, period_start, period_end, grant_id, instance_id, subject, target, tags, \
             recorded_at) FROM STDIN (FORMAT binary)",
        )
        .await?;
    let writer = BinaryCopyInWriter::new(sink, &types);
    let mut writer = std::pin::pin!(writer);
    let mut seq: i64 = 0;
    for g in &due {
        let tags = Jsonb(g.tags.clone());
        for h in 0..HOURS {
            seq += 1;
            let usage_id = storage::ids::new_id("use", now);
            let period_start = g.starts_at + h * HOUR_MS;
            let period_end = period_start + HOUR_MS;
            let quantity = g.slots * 1_000_000;
            writer
                .as_mut()
                .write(&[
                    &seq,
                    &usage_id,
                    &g.tenant_id,
                    &g.project_id,
                    &"vm.grant.slot.hours",
                    &quantity,
                    &"slot-hours",
                    &period_start,
                    &period_end,
                    &g.grant_id,
                    &None::<&str>,
                    &g.grant_id,
                    &g.grant_id,
                    &tags,
                    &now,
                ])
                .await?;
        }
    }
    let rows = writer.finish().await?;
    let elapsed = start.elapsed();
    drop(client);
    conn_task.await??;
    Ok((elapsed, i64::try_from(rows)?))
}
