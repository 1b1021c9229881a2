//! The worker's gauges: the bound reservations, the managed instances and
//! the webhooks, each read in one statement.

use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::error::Result;

/// A bound reservation's figures for the worker's gauges, as last settled.
#[derive(Debug, Clone, PartialEq, Eq, diesel::QueryableByName)]
pub struct ReservationGauge {
    /// The account.
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub account_id: String,
    /// The reservation.
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub reservation_id: String,
    /// Its total from the last scan.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub total: i64,
    /// Slots of the grants live now.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub granted: i64,
    /// Instances held in its grants, running or stopped.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub held: i64,
    /// Running instances on ordinary slots, outside any grant
    /// (`ordinaryInUse`).
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub ordinary: i64,
    /// `max(running instances, providerInUse)`.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub physical: i64,
    /// Grants not started yet.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub scheduled: i64,
    /// Grants live now.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub active: i64,
    /// How many reservations are bound (beyond the limit, summed in the
    /// [`OTHER`] row).
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub bound: i64,
}

/// The name the gauges give the reservations beyond their limit, summed.
pub const OTHER: &str = "other";

/// The gauges of the reservations bound to a pool and not gone, at `now`:
/// the first `limit` by account and reservation id one by one, the rest
/// summed in one row whose account and reservation are [`OTHER`] (a label
/// value no id takes). One statement (the grants and the instances counted
/// per reservation through their indexes), cheap enough for every round of
/// the worker. Figures are those of the last settlement.
pub async fn gauges(
    conn: &mut AsyncPgConnection,
    now: i64,
    limit: i64,
) -> Result<Vec<ReservationGauge>> {
    use diesel::sql_types::{BigInt, Text};
    Ok(diesel::sql_query(include_str!("sql/gauges.sql"))
        .bind::<BigInt, _>(now)
        .bind::<BigInt, _>(limit)
        .bind::<Text, _>(OTHER)
        .load(conn)
        .await?)
}

/// The managed instances' gauges (contract 3.12): the live ones by state,
/// the open steps past their deadline and the orphans found.
#[derive(Debug, Clone, Default, PartialEq, Eq, diesel::QueryableByName)]
pub struct VmGauges {
    /// Managed instances `provisioning`.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub provisioning: i64,
    /// Managed instances `running`.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub running: i64,
    /// Managed instances `stopping`.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub stopping: i64,
    /// Managed instances `stopped`.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub stopped: i64,
    /// Managed instances `starting`.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub starting: i64,
    /// Managed instances `deleting`.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub deleting: i64,
    /// Open steps whose deadline (the database's real time) has passed.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub steps_overdue: i64,
    /// Orphan VMs found (contract 3.12 r4: their instance newer than every
    /// instance this database has made, kept for the operator) that their
    /// account's last applied listing saw: still there.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub orphans_found: i64,
    /// Managed instances `provisioning`, `stopping`, `starting` or
    /// `deleting` with no open step: nothing would ever move them on
    /// (contract 3.12 r4, "no state without a step"); always 0 unless a bug
    /// or a hand-made change left one.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub without_step: i64,
}

impl VmGauges {
    /// The live states and their counts, in the lifecycle's order.
    pub fn by_state(&self) -> [(&'static str, i64); 6] {
        [
            ("provisioning", self.provisioning),
            ("running", self.running),
            ("stopping", self.stopping),
            ("stopped", self.stopped),
            ("starting", self.starting),
            ("deleting", self.deleting),
        ]
    }
}

/// The managed instances' gauges now: one statement over the live managed
/// instances' index and the open steps (`deleted` and `failed` instances,
/// which only accumulate, are not counted).
pub async fn vm_gauges(conn: &mut AsyncPgConnection) -> Result<VmGauges> {
    let sql = include_str!("sql/vm_gauges.sql").replace("{DB_NOW_MS}", crate::clock::DB_NOW_MS);
    Ok(diesel::sql_query(sql).get_result(conn).await?)
}

/// The webhooks' gauges (contract 3.13).
#[derive(Debug, Clone, Default, PartialEq, Eq, diesel::QueryableByName)]
pub struct WebhookGauges {
    /// Webhooks `disabled` and not deleted (by their tenant, or after 3 days
    /// of failures).
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub disabled: i64,
    /// Deliveries of enabled webhooks waiting for an attempt now: `pending`
    /// or `retrying` and due by the product's clock. A delivery waiting for
    /// its retry's time is not counted: only what the worker should be
    /// sending already.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub due: i64,
}

/// The webhooks' gauges at `now` (the product's clock): one statement, the
/// due deliveries counted through their partial index.
pub async fn webhook_gauges(conn: &mut AsyncPgConnection, now: i64) -> Result<WebhookGauges> {
    Ok(diesel::sql_query(
        "SELECT \
           (SELECT count(*) FROM webhooks \
             WHERE state = 'disabled' AND deleted_at IS NULL) AS disabled, \
           (SELECT count(*) FROM webhook_deliveries d JOIN webhooks w USING (webhook_id) \
             WHERE d.state IN ('pending', 'retrying') AND d.next_at <= $1 \
               AND w.state = 'enabled' AND w.deleted_at IS NULL) AS due",
    )
    .bind::<diesel::sql_types::BigInt, _>(now)
    .get_result(conn)
    .await?)
}

/// A reservation short now (contract 5.4): its grants live now commit more
/// slots than its total.
#[derive(Debug, Clone, PartialEq, Eq, diesel::QueryableByName)]
pub struct ShortReservation {
    /// The account.
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub account_id: String,
    /// The reservation.
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub reservation_id: String,
    /// Slots committed now and not held by the provider.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub short_slots: i64,
    /// Since when, in epoch ms: the scan that first saw the total below the
    /// grants in the current run of short totals.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub since: i64,
}

/// The credits of one pool's grants so far.
#[derive(Debug, Clone, PartialEq, Eq, diesel::QueryableByName)]
pub struct PoolCredit {
    /// The pool.
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub pool_id: String,
    /// `vm.grant.deficit.hours` written for its grants, in micro-slot-hours.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub micros: i64,
}

/// The deficit credits' gauges at `now`: the reservations short now (the
/// first `limit`, by account and reservation), and the slot-hours credited
/// per pool (the first `limit` pools). Two statements over the short rows'
/// and the credited grants' partial indexes.
pub async fn deficit_gauges(
    conn: &mut AsyncPgConnection,
    now: i64,
    limit: i64,
) -> Result<(Vec<ShortReservation>, Vec<PoolCredit>)> {
    use diesel::sql_types::BigInt;
    let short = diesel::sql_query(include_str!("sql/gauges_short.sql"))
        .bind::<BigInt, _>(now)
        .bind::<BigInt, _>(limit)
        .load(conn)
        .await?;
    let pools = diesel::sql_query(
        "SELECT pool_id, sum(deficit_micro)::bigint AS micros FROM grants \
          WHERE deficit_micro > 0 GROUP BY pool_id ORDER BY pool_id LIMIT $1",
    )
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await?;
    Ok((short, pools))
}

/// What one pool's grants lend now and have lent so far (contract 3.14).
#[derive(Debug, Clone, PartialEq, Eq, diesel::QueryableByName)]
pub struct PoolLent {
    /// The pool.
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub pool_id: String,
    /// Its slots held by borrowers not being interrupted.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub lent: i64,
    /// `vm.grant.lent.hours` written for its grants, in micro-slot-hours.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub micros: i64,
}

/// The reclaims under way (contract 3.14).
#[derive(Debug, Clone, Default, PartialEq, Eq, diesel::QueryableByName)]
pub struct Reclaims {
    /// Borrowers interrupted whose VMs are not confirmed gone.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub pending: i64,
    /// How far past its `interruptAt` the oldest of them is (ms, 0: none).
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub overdue_ms: i64,
    /// How long the oldest grantee's VM has waited for borrowers to go
    /// (real ms since its step was recorded, 0: none waits).
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub waiting_ms: i64,
}

/// The lending gauges at `now`: per pool (the first `limit`) its lent
/// slots and lent slot-hours so far, and the reclaims under way.
pub async fn lending_gauges(
    conn: &mut AsyncPgConnection,
    now: i64,
    limit: i64,
) -> Result<(Vec<PoolLent>, Reclaims)> {
    use diesel::sql_types::BigInt;
    let pools = diesel::sql_query(include_str!("sql/gauges_lending.sql"))
        .bind::<BigInt, _>(limit)
        .load(conn)
        .await?;
    let reclaims = diesel::sql_query(
        include_str!("sql/gauges_reclaims.sql")
            .replace("{DB_NOW_MS}", crate::clock::DB_NOW_MS)
            .replace("{STEP_WAITS}", crate::ops::vms::STEP_WAITS),
    )
    .bind::<BigInt, _>(now)
    .get_result(conn)
    .await?;
    Ok((pools, reclaims))
}
