//! `reservations`: a reservation a scan has seen, as stored.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::error::Result;
use crate::model::states::ReservationStatus;
use crate::schema::reservations;

/// A reservation row.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = reservations)]
pub struct ReservationRow {
    /// The provider account.
    pub account_id: String,
    /// The provider's id.
    pub reservation_id: String,
    /// Region.
    pub region: String,
    /// Zone.
    pub zone: String,
    /// Machine type.
    pub flavor: String,
    /// Slots the provider reports.
    pub total: i64,
    /// Slots the provider reports in use.
    pub provider_in_use: i64,
    /// From the last scan.
    pub status: ReservationStatus,
    /// The pool it is bound to.
    pub pool_id: Option<String>,
    /// Last scan instant.
    pub last_scanned_at: i64,
    /// When a scan found it gone.
    pub gone_at: Option<i64>,
}

impl ReservationRow {
    /// Every reservation of an account seen by its scans, by reservation id
    /// (unlocked; [`crate::locks::account_reservations`] locks them).
    pub async fn of_account(
        conn: &mut AsyncPgConnection,
        account_id: &str,
    ) -> Result<Vec<ReservationRow>> {
        Ok(reservations::table
            .filter(reservations::account_id.eq(account_id))
            .order(reservations::reservation_id.asc())
            .select(ReservationRow::as_select())
            .load(conn)
            .await?)
    }

    /// One reservation, unlocked.
    pub async fn find(
        conn: &AsyncPgConnection,
        account_id: &str,
        reservation_id: &str,
    ) -> Result<Option<ReservationRow>> {
        let mut conn = conn;
        let conn = &mut conn;
        Ok(reservations::table
            .find((account_id, reservation_id))
            .select(ReservationRow::as_select())
            .first(conn)
            .await
            .optional()?)
    }

    /// A pool's candidate reservations for `flavor` (bound to it, of the
    /// flavor, ready) as (account, reservation), in lock order, unlocked.
    pub async fn candidates(
        conn: &AsyncPgConnection,
        pool_id: &str,
        flavor: &str,
    ) -> Result<Vec<(String, String)>> {
        let mut conn = conn;
        let conn = &mut conn;
        Ok(reservations::table
            .filter(reservations::pool_id.eq(pool_id))
            .filter(reservations::flavor.eq(flavor))
            .filter(reservations::status.eq(ReservationStatus::Ready))
            .order((
                reservations::reservation_id.asc(),
                reservations::account_id.asc(),
            ))
            .select((reservations::account_id, reservations::reservation_id))
            .load(conn)
            .await?)
    }
}
