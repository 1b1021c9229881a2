//! The worker's gauges of the bound reservations, read in one statement.

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
    Ok(diesel::sql_query(
        "WITH each AS ( \
         SELECT r.account_id, r.reservation_id, r.total, \
           coalesce(g.granted, 0) AS granted, coalesce(g.scheduled, 0) AS scheduled, \
           coalesce(g.active, 0) AS active, coalesce(i.held, 0) AS held, \
           coalesce(i.ordinary, 0) AS ordinary, \
           greatest(coalesce(i.running, 0), r.provider_in_use) AS physical, \
           count(*) OVER () AS bound, \
           row_number() OVER (ORDER BY r.account_id, r.reservation_id) AS n \
         FROM reservations r \
         LEFT JOIN LATERAL ( \
           SELECT sum(slots) FILTER (WHERE starts_at <= $1 AND ends_at > $1)::bigint AS granted, \
                  count(*) FILTER (WHERE starts_at > $1) AS scheduled, \
                  count(*) FILTER (WHERE starts_at <= $1 AND ends_at > $1) AS active \
           FROM grants WHERE account_id = r.account_id AND reservation_id = r.reservation_id \
             AND settled_state IN ('scheduled', 'active')) g ON true \
         LEFT JOIN LATERAL ( \
           SELECT count(*) FILTER (WHERE grant_id IS NOT NULL) AS held, \
                  count(*) FILTER (WHERE grant_id IS NULL AND state = 'running') AS ordinary, \
                  count(*) FILTER (WHERE state = 'running') AS running \
           FROM instances WHERE account_id = r.account_id AND reservation_id = r.reservation_id \
             AND state <> 'deleted') i ON true \
         WHERE r.pool_id IS NOT NULL AND r.status <> 'gone') \
         SELECT CASE WHEN n <= $2 THEN account_id ELSE $3 END AS account_id, \
           CASE WHEN n <= $2 THEN reservation_id ELSE $3 END AS reservation_id, \
           sum(total)::bigint AS total, sum(granted)::bigint AS granted, \
           sum(scheduled)::bigint AS scheduled, sum(active)::bigint AS active, \
           sum(held)::bigint AS held, sum(ordinary)::bigint AS ordinary, \
           sum(physical)::bigint AS physical, max(bound) AS bound \
         FROM each GROUP BY 1, 2 ORDER BY min(n)",
    )
    .bind::<BigInt, _>(now)
    .bind::<BigInt, _>(limit)
    .bind::<Text, _>(OTHER)
    .load(conn)
    .await?)
}
