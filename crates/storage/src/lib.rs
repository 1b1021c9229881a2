//! Storage of the control plane: diesel + diesel-async on PostgreSQL.
//!
//! Every operation takes a connection (the scans, which call a provider
//! between transactions, take the pool) and returns [`error::Result`]; a
//! mutation is one transaction that locks the rows deciding it, decides with
//! the pure core crates, writes its rows and its events, and commits.

pub mod accounts;
pub mod clock;
pub mod db;
pub mod error;
pub mod events;
pub mod grants;
pub mod idempotency;
pub mod ids;
pub mod instances;
pub mod lifecycle;
pub mod metering;
pub mod pools;
pub mod reservations;
pub mod schema;
pub mod tenancy;
#[cfg(feature = "test-support")]
pub mod test_db;
pub mod timeline;

pub use clock::Clock;

/// The most items a list method returns in one answer (contract 1.6).
pub const LIST_LIMIT: i64 = 1000;
pub use error::{ErrorKind, Result, StorageError};
