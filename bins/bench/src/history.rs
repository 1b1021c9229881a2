//! The history figures' rows, inserted directly in SQL: earlier grants on a
//! hot reservation (figure 1h) and deleted instances on the reservations of
//! an instance layout (figure 2h). Every foreign key points at the rows the
//! platform setup made (its account, pools, reservations and tenant).
//!
//! The tables are vacuumed and analyzed after the inserts, as old rows would
//! be, so the runs neither set hint bits on them nor meet autovacuum.
//!
//! Their ids sort after the ids the product makes (`rgrant_hist...`,
//! `inst_hist...`), so the reads of figure 3, which take the tenant's first
//! grants by id, read the same grants as without them.

use anyhow::Context;
use diesel_async::RunQueryDsl;

use crate::procs::Database;
use crate::setup::{FLAVOR, HOUR_MS, InstTarget, Platform, TENANT};

/// Earlier grants on the figure 1h reservation: half ended, half scheduled.
pub const GRANTS: i64 = 10_000;
/// Deleted instances on each reservation of the figure 2h layout.
pub const INSTANCES: i64 = 10_000;
const DAY_MS: i64 = 24 * HOUR_MS;

async fn execute(db: &Database, statements: &[String]) -> anyhow::Result<()> {
    let mut conn = db.connect().await?;
    for s in statements {
        diesel::sql_query(s)
            .execute(&mut conn)
            .await
            .with_context(|| format!("history: {s}"))?;
    }
    Ok(())
}

/// [`GRANTS`] earlier 1-slot, 24-hour grants to the tenant on
/// `reservation_id`: the first half ended (one starting every hour, the
/// last ending an hour before now; settled `ended`, `term-over`, metered to
/// their end), the second half scheduled (one starting every hour from 30
/// days after now, so after the figure's new terms, at most 24 of them
/// overlapping), all created before now.
pub async fn seed_grants(db: &Database, p: &Platform, reservation_id: &str) -> anyhow::Result<()> {
    let now = p.now;
    let half = GRANTS / 2;
    let columns = "(grant_id, account_id, reservation_id, pool_id, tenant_id, project_id, slots, \
                   starts_at, ends_at, settled_state, reason, created_at, ended_at, \
                   metered_through)";
    let from = |first: i64, last: i64| {
        format!(
            "FROM reservations r CROSS JOIN generate_series({first}, {last}) g \
             WHERE r.account_id = '{}' AND r.reservation_id = '{reservation_id}'",
            p.account_id
        )
    };
    let id = "'rgrant_hist' || lpad(g::text, 22, '0')";
    execute(
        db,
        &[
            // ended: starts now - (half - g + 25) h, ends 24 h later
            format!(
                "INSERT INTO grants {columns} \
                 SELECT {id}, r.account_id, r.reservation_id, r.pool_id, '{TENANT}', NULL, 1, s, \
                 s + {DAY_MS}, 'ended', 'term-over', s - {HOUR_MS}, s + {DAY_MS}, s + {DAY_MS} \
                 FROM (SELECT g, {now} - ({half} - g + 25) * {HOUR_MS}::bigint AS s, r.* {}) r",
                from(1, half)
            ),
            // scheduled: starts now + 30 d + (g - half - 1) h
            format!(
                "INSERT INTO grants {columns} \
                 SELECT {id}, r.account_id, r.reservation_id, r.pool_id, '{TENANT}', NULL, 1, s, \
                 s + {DAY_MS}, 'scheduled', NULL, {now} - ({GRANTS} - g + 1) * 1000, NULL, s \
                 FROM (SELECT g, \
                 {now} + 30 * {DAY_MS}::bigint + (g - {half} - 1)::bigint * {HOUR_MS} AS s, \
                 r.* {}) r",
                from(half + 1, GRANTS)
            ),
            "VACUUM (ANALYZE) grants".to_owned(),
        ],
    )
    .await
}

/// On each target's reservation, [`INSTANCES`] deleted instances of the
/// tenant in the target's pool, as `instances.delete` leaves them (state
/// `deleted`, placement `none`, metered to their deletion), each with its
/// one closed placement segment in an earlier grant of the reservation: a
/// grant of all its slots over the 30 days before the last hour, ended and
/// metered; one instance created every 4 minutes of it, each living an hour.
pub async fn seed_instances(
    db: &Database,
    p: &Platform,
    targets: &[InstTarget],
) -> anyhow::Result<()> {
    let now = p.now;
    let start = now - 30 * DAY_MS - HOUR_MS;
    let end = now - HOUR_MS;
    let mut statements = Vec::new();
    for (k, t) in targets.iter().enumerate() {
        let grant = format!("rgrant_histi{k:021}");
        statements.push(format!(
            "INSERT INTO grants (grant_id, account_id, reservation_id, pool_id, tenant_id, \
             project_id, slots, starts_at, ends_at, settled_state, reason, created_at, ended_at, \
             metered_through) \
             SELECT '{grant}', account_id, reservation_id, pool_id, '{TENANT}', NULL, \
             total::integer, {start}, {end}, 'ended', 'term-over', {start} - {HOUR_MS}, {end}, \
             {end} FROM reservations WHERE account_id = '{}' AND reservation_id = '{}'",
            p.account_id, t.reservation_id
        ));
        let created = format!("{start} + (i - 1) * 240000::bigint");
        statements.push(format!(
            "INSERT INTO instances (instance_id, tenant_id, project_id, pool_id, flavor, name, \
             billing, state, placement_kind, grant_id, account_id, reservation_id, created_at, \
             deleted_at, usage_metered_through) \
             SELECT id, '{TENANT}', NULL, '{pool}', '{FLAVOR}', id, 'standard', 'deleted', \
             'none', NULL, NULL, NULL, c, c + {HOUR_MS}, c + {HOUR_MS} \
             FROM (SELECT 'inst_hist' || lpad('{k}', 3, '0') || lpad(i::text, 19, '0') AS id, \
                   {created} AS c FROM generate_series(1, {INSTANCES}) i) x",
            pool = t.pool_id
        ));
        statements.push(format!(
            "INSERT INTO placement_segments (instance_id, from_ms, to_ms, kind, running, \
             grant_id, account_id, reservation_id) \
             SELECT 'inst_hist' || lpad('{k}', 3, '0') || lpad(i::text, 19, '0'), {created}, \
             {created} + {HOUR_MS}, 'grant', true, '{grant}', '{}', '{}' \
             FROM generate_series(1, {INSTANCES}) i",
            p.account_id, t.reservation_id
        ));
    }
    statements.push("VACUUM (ANALYZE) grants, instances, placement_segments".to_owned());
    execute(db, &statements).await
}
