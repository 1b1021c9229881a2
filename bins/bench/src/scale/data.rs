//! The data every stage measures: the world (an account, reservations,
//! a pool, tenants) and a year of grants, usage records and events written
//! in SQL.

use anyhow::Context;
use diesel_async::AsyncPgConnection;
use serde_json::{Value, json};
use std::time::Instant;

use super::{CHUNK, PER_HOUR, RESERVATIONS, TENANTS, YEAR_HOURS, exec, say};
use crate::setup::{Api, FLAVOR, Gce, HOUR_MS, TENANT};

/// The tenant id of tenant number `t` (0 is `acme`), as SQL over `expr`.
fn tenant_sql(expr: &str) -> String {
    format!(
        "(CASE WHEN ({expr}) % {TENANTS} = 0 THEN '{TENANT}' \
         ELSE 'scale-' || lpad((({expr}) % {TENANTS})::text, 4, '0') END)"
    )
}

/// The world every stage builds on: the account, 50 reservations bound to
/// one pool offered to `acme`, and 999 more tenants. Returns `acme`'s
/// secret, the account and the pool.
pub(super) async fn world(
    api: &Api,
    conn: &mut AsyncPgConnection,
) -> anyhow::Result<(String, String, String)> {
    let gce = Gce::start().await?;
    let http = reqwest::Client::new();
    for r in 0..RESERVATIONS {
        gce.put(&http, &format!("scale-{r:02}"), 100_000).await?;
    }
    let account_id = api.fake_account("scale", &gce.url).await?;
    let pool = api
        .root(
            "pools/create",
            json!({
                "name": "scale",
                "region": "us-central1",
                "provider": "gce",
                "accountId": account_id,
                "flavors": [{ "name": FLAVOR, "vcpus": 4, "memoryGib": 16, "gpus": 0 }],
                "quotas": { "instances": 1_000_000 },
                "idempotencyKey": "pool-scale",
            }),
        )
        .await?;
    let pool_id = at(&pool, "/pool/poolId")?;
    for r in 0..RESERVATIONS {
        api.root(
            "providerAccounts/bindReservation",
            json!({
                "accountId": account_id,
                "reservationId": Gce::reservation_id(&format!("scale-{r:02}")),
                "poolId": pool_id,
            }),
        )
        .await?;
    }
    let tenant = api
        .root("tenants/create", json!({ "name": TENANT }))
        .await?;
    let secret = at(&tenant, "/adminKey/secret")?;
    exec(
        conn,
        &format!(
            "INSERT INTO tenants (tenant_id, display_name, state, created_at) \
             SELECT 'scale-' || lpad(t::text, 4, '0'), 'scale tenant ' || t, 'active', 0 \
             FROM generate_series(1, {}) t",
            TENANTS - 1
        ),
    )
    .await?;
    drop(gce);
    Ok((secret, account_id, pool_id))
}

fn at(v: &Value, pointer: &str) -> anyhow::Result<String> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .with_context(|| format!("{pointer} missing in {v}"))
}

/// Generates grants `[from, to)`, records and events `[from_rows, to_rows)`.
pub(super) async fn generate(
    conn: &mut AsyncPgConnection,
    y0: i64,
    account: &str,
    pool: &str,
    grants: (i64, i64),
    rows: (i64, i64),
) -> anyhow::Result<()> {
    let day = format!("{}::bigint", 24 * HOUR_MS);
    let grant_id = |e: &str| format!("'rgrant_0' || lpad(to_hex({e}), 25, '0')");
    // Grants: one a little more than every 4 minutes over 300 days, a week
    // each, all ended before the clock's now.
    exec(
        conn,
        &format!(
            "INSERT INTO grants (grant_id, account_id, reservation_id, pool_id, tenant_id, \
               slots, starts_at, ends_at, settled_state, reason, created_at, ended_at, \
               metered_through) \
             SELECT {gid}, '{account}', \
               'projects/{project}/zones/us-central1-a/reservations/scale-' \
                 || lpad((g % {RESERVATIONS})::text, 2, '0'), \
               '{pool}', {tenant}, 1, s, s + 7 * {day}, 'ended', 'term-over', s - {HOUR_MS}, \
               s + 7 * {day}, s + 7 * {day} \
             FROM generate_series({lo}::bigint, {hi}) g, \
                  LATERAL (SELECT {y0} + g * (300 * {day} / 100000) AS s) t",
            gid = grant_id("g"),
            project = crate::setup::PROJECT,
            tenant = tenant_sql("g"),
            lo = grants.0,
            hi = grants.1 - 1,
        ),
    )
    .await?;
    let mut from = rows.0;
    while from < rows.1 {
        let to = (from + CHUNK).min(rows.1);
        let started = Instant::now();
        // Record i bills hour i / PER_HOUR for one of 100,000 grants,
        // distinct within the hour (the dedupe key holds).
        let g = format!("((i % {PER_HOUR}) + (i / {PER_HOUR}) * 7919) % 100000");
        exec(
            conn,
            &format!(
                "INSERT INTO usage_records (seq, usage_id, tenant_id, meter, quantity_micro, \
                   unit, period_start, period_end, grant_id, subject, target, tags, \
                   recorded_at) \
                 SELECT i + 1, 'use_0' || lpad(to_hex(i), 25, '0'), {tenant}, \
                   'vm.grant.slot.hours', 1000000, 'slot-hours', p, p + {HOUR_MS}, {gid}, \
                   {gid}, {gid}, jsonb_build_object('region', 'us-central1', 'poolId', \
                   '{pool}', 'provider', 'gce', 'grantId', {gid}), p + {HOUR_MS} + 60000 \
                 FROM generate_series({from}::bigint, {last}) i, \
                      LATERAL (SELECT {y0} + (i / {PER_HOUR}) * {HOUR_MS} AS p) t",
                tenant = tenant_sql(&g),
                gid = grant_id(&g),
                last = to - 1,
            ),
        )
        .await?;
        // Event i is tenant i % 1000's event number i / 1000 + 1: a grant's
        // change, with the payload the API reads back.
        exec(
            conn,
            &format!(
                "INSERT INTO events (tenant_id, seq, event_id, event_type, data, occurred_at) \
                 SELECT {tenant}, i / {TENANTS} + 1, 'evt_0' || lpad(to_hex(i), 25, '0'), \
                   (ARRAY['reservation-grant.created', 'reservation-grant.active', \
                          'reservation-grant.ended'])[i % 3 + 1], \
                   jsonb_build_object('grantId', {gid}, 'poolId', '{pool}', 'slots', 1, \
                     'startsAt', t, 'endsAt', t + 7 * {day}) \
                     || CASE WHEN i % 3 = 2 THEN '{{\"reason\": \"term-over\"}}'::jsonb \
                             ELSE '{{}}'::jsonb END, \
                   t \
                 FROM generate_series({from}::bigint, {last}) i, \
                      LATERAL (SELECT {y0} + i * ({year}::bigint / 10000000) AS t) o",
                tenant = tenant_sql("i"),
                gid = grant_id("i % 100000"),
                year = YEAR_HOURS * HOUR_MS,
                last = to - 1,
            ),
        )
        .await?;
        say(&format!(
            "rows {from}..{to} of usage records and events in {:.1} s",
            started.elapsed().as_secs_f64()
        ));
        from = to;
    }
    exec(
        conn,
        &format!("UPDATE usage_head SET last_seq = {}", rows.1),
    )
    .await?;
    exec(
        conn,
        "INSERT INTO event_heads (tenant_id, last_seq) \
         SELECT tenant_id, max(seq) FROM events GROUP BY tenant_id \
         ON CONFLICT (tenant_id) DO UPDATE SET last_seq = EXCLUDED.last_seq",
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use storage::test_db::TestDatabase;

    use super::super::num;
    use super::*;

    /// The generator at a small size keeps the logs' invariants: every row
    /// in its month (none in the default partitions), each tenant's events
    /// numbered 1, 2, 3, ... and the head rows at the last numbers.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn generated_logs_keep_their_invariants() {
        let db = TestDatabase::new().await;
        let mut conn = storage::db::establish(db.url()).await.expect("connect");
        let y0 = 1_893_456_000_000; // 2030-01-01
        let end = y0 + YEAR_HOURS * HOUR_MS;
        for table in ["usage_records", "events"] {
            exec(
                &mut conn,
                &format!("SELECT bc_ensure_month_partitions('{table}', {y0}, {end})"),
            )
            .await
            .expect("partitions");
        }
        generate(&mut conn, y0, "pacct_x", "pool_x", (0, 0), (0, 3_000))
            .await
            .expect("generate");
        generate(&mut conn, y0, "pacct_x", "pool_x", (0, 0), (3_000, 5_000))
            .await
            .expect("generate more");
        let url = db.url().to_owned();
        let count = |sql: &'static str| {
            let url = url.clone();
            async move { num(&mut storage::db::establish(&url).await.unwrap(), sql).await }
        };
        assert_eq!(
            count("SELECT count(*) AS n FROM usage_records")
                .await
                .unwrap(),
            5_000
        );
        assert_eq!(
            count("SELECT count(*) AS n FROM events").await.unwrap(),
            5_000
        );
        assert_eq!(
            count("SELECT count(*) AS n FROM usage_records_default")
                .await
                .unwrap()
                + count("SELECT count(*) AS n FROM events_default")
                    .await
                    .unwrap(),
            0
        );
        assert_eq!(
            count(
                "SELECT count(*) AS n FROM (SELECT tenant_id FROM events GROUP BY tenant_id \
                 HAVING max(seq) <> count(*) OR min(seq) <> 1) bad"
            )
            .await
            .unwrap(),
            0
        );
        assert_eq!(
            count("SELECT last_seq AS n FROM event_heads WHERE tenant_id = 'acme'")
                .await
                .unwrap(),
            5
        );
        assert_eq!(
            count("SELECT last_seq AS n FROM usage_head").await.unwrap(),
            5_000
        );
        // A record's tenant is its grant's: grant number g goes to tenant
        // g % 1000, acme being tenant 0.
        assert_eq!(
            count(
                "SELECT count(*) AS n FROM usage_records WHERE (tenant_id = 'acme') <> \
                 (('x' || right(grant_id, 8))::bit(32)::int % 1000 = 0)"
            )
            .await
            .unwrap(),
            0
        );
        assert!(
            count("SELECT count(*) AS n FROM usage_records WHERE tenant_id = 'acme'")
                .await
                .unwrap()
                > 0
        );
    }
}
