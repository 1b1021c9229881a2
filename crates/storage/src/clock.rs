//! The product's clock. Nothing else reads the OS clock.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::error::{Detail, Field, Reason, Result, StorageError};
use crate::schema::manual_clock;

/// Where "now" comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// The OS clock.
    System,
    /// The shared simulated time stored in the database (`BC_CLOCK=manual`).
    Manual,
}

impl Clock {
    /// Parses `BC_CLOCK` (`system` or `manual`).
    pub fn parse(s: &str) -> Option<Clock> {
        match s {
            "system" => Some(Clock::System),
            "manual" => Some(Clock::Manual),
            _ => None,
        }
    }

    /// `system` or `manual`.
    pub fn as_str(self) -> &'static str {
        match self {
            Clock::System => "system",
            Clock::Manual => "manual",
        }
    }

    /// The current instant in epoch milliseconds (in a read-only
    /// transaction behind a transaction pooler, `db::read_only`).
    pub async fn now(self, conn: &mut AsyncPgConnection) -> Result<i64> {
        if self == Clock::System {
            return Ok(system_now());
        }
        crate::db::read_only(conn, async |conn| self.now_shared(conn).await).await
    }

    /// [`Clock::now`] on a shared connection, so that it can be pipelined
    /// with other reads (one round trip for several statements).
    pub async fn now_shared(self, conn: &AsyncPgConnection) -> Result<i64> {
        match self {
            Clock::System => Ok(system_now()),
            Clock::Manual => {
                let mut conn = conn;
                Ok(manual_clock::table
                    .select(manual_clock::now_ms)
                    .first::<i64>(&mut conn)
                    .await?)
            }
        }
    }

    /// Moves the manual clock to `now`; time never moves backwards.
    pub async fn set(self, conn: &mut AsyncPgConnection, now: i64) -> Result<i64> {
        if self != Clock::Manual {
            return Err(StorageError::invalid_state(
                "the clock can only be set when the server runs with BC_CLOCK=manual",
            ));
        }
        let updated: Option<i64> = crate::db::single_write(conn, async |conn| {
            diesel::update(manual_clock::table)
                .filter(manual_clock::now_ms.le(now))
                .set(manual_clock::now_ms.eq(now))
                .returning(manual_clock::now_ms)
                .get_result(conn)
                .await
                .optional()
        })
        .await?;
        match updated {
            Some(v) => Ok(v),
            None => {
                let current = self.now(conn).await?;
                Err(StorageError::invalid(
                    Field::Now,
                    Reason::Range,
                    format!("time may not move backwards: the clock is at {current}"),
                )
                .with(Detail::Current(current)))
            }
        }
    }
}

/// The OS clock in epoch milliseconds (the one place it is read).
fn system_now() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// The database's real time in epoch milliseconds, as SQL. Leases, backoff
/// and deadlines (scans, VM steps, webhook deliveries) are about real
/// elapsed time between replicas, never about the product's (possibly
/// manual) clock, and the database's time is the one all replicas share.
pub(crate) const DB_NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// The database's real time now (epoch ms), as the leases of scans, VM steps
/// and webhook deliveries measure it.
pub async fn db_now_ms(conn: &mut AsyncPgConnection) -> Result<i64> {
    #[derive(QueryableByName)]
    struct Now {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        now: i64,
    }
    let sql = format!("SELECT {DB_NOW_MS} AS now");
    let row: Now = crate::db::read_only(conn, async |conn| {
        crate::db::cached(diesel::sql_query(sql))
            .get_result(conn)
            .await
    })
    .await?;
    Ok(row.now)
}
