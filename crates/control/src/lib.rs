#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod accounts;
pub mod scans;
pub mod secrets;
pub mod vms;
pub mod webhooks;
