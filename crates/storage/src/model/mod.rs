//! The stored rows: one module per table (or per log) with its row type, its
//! typed state columns and the single-statement queries on it. Operations in
//! [`crate::ops`] compose them; nothing here opens a transaction.

pub mod audit;
pub mod event_data;
pub mod events;
pub mod grant;
pub mod idempotency;
pub mod instance;
pub mod keyset;
pub mod pool_vm;
pub mod quota;
pub mod reservation;
pub mod secret;
pub mod segment;
pub mod states;
pub mod webhook;
