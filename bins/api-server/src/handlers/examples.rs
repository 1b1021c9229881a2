//! Values the OpenAPI examples use: ids of the right shape, instants on an
//! hour boundary.

/// A provider account id.
pub const ACCOUNT: &str = "pacct_01jd8x3m5q7r9t1v3w5y7z9b2c";
/// A pool id.
pub const POOL: &str = "pool_01jd8x3m5q7r9t1v3w5y7z9b2d";
/// A grant id.
pub const GRANT: &str = "rgrant_01jd8x3m5q7r9t1v3w5y7z9b2e";
/// A project id.
pub const PROJECT: &str = "prj_01jd8x3m5q7r9t1v3w5y7z9b2f";
/// An instance id.
pub const INSTANCE: &str = "inst_01jd8x3m5q7r9t1v3w5y7z9b2g";
/// An API key id.
pub const API_KEY: &str = "key_01jd8x3m5q7r9t1v3w5y7z9b2h";
/// A provider reservation id.
pub const RESERVATION: &str = "projects/acme-capacity/zones/us-central1-a/reservations/r1";
/// An idempotency key.
pub const KEY: &str = "create-2030-01-01-1";
/// 2030-01-01T00:00:00Z.
pub const T0: i64 = 1_893_456_000_000;
/// 2030-01-31T00:00:00Z.
pub const T1: i64 = T0 + 30 * 24 * 3_600_000;
