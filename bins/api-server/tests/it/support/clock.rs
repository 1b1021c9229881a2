//! Time in milliseconds and the server's manual clock.

use serde_json::json;

use super::server::Server;

/// One second in milliseconds.
pub const SEC: i64 = 1_000;
/// One minute in milliseconds.
pub const MIN: i64 = 60 * SEC;
/// One hour in milliseconds (a metering bucket).
pub const HOUR: i64 = 60 * MIN;
/// 2030-01-01T00:00:00Z: an hour boundary far from anything real.
pub const T0: i64 = 1_893_456_000_000;

impl Server {
    /// Sets the manual clock.
    pub async fn set_clock(&self, now: i64) {
        self.root("clock/set", json!({ "now": now })).await.ok();
    }

    /// The server's now (`clock.get`).
    pub async fn now(&self) -> i64 {
        self.root("clock/get", json!({})).await.ok()["now"]
            .as_i64()
            .expect("now")
    }
}
