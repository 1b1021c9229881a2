//! The operations: one transaction per public mutation, composed from the
//! rows of [`crate::model`], the locks of [`crate::locks`] (in their order)
//! and the pure core crates. Reads are single queries or a few, outside any
//! lock.

pub mod accounts;
pub mod deliveries;
pub mod gauges;
pub mod grants;
pub mod installation;
pub mod instances;
pub mod lending;
pub mod lifecycle;
pub mod metering;
pub mod notices;
pub mod partitions;
pub mod pools;
pub mod reservations;
pub mod scans;
pub mod secrets;
pub mod settlement;
pub mod tenancy;
pub mod totals;
pub mod views;
pub mod vms;
pub mod webhooks;
