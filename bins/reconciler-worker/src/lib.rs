//! reconciler-worker: runs the reconciler passes on an interval, or once.
//!
//! Every pass is idempotent and safe with any number of replicas: work is
//! claimed with row locks and results are written under unique constraints,
//! so a pass killed at any point is simply run again.
//!
//! The pieces: the configuration ([`config`]), the passes ([`passes`], the
//! managed instances' [`vms`], the [`webhooks`]), running them ([`runner`]),
//! and the metrics and the gauges read for them ([`metrics`], [`gauges`]);
//! SIGTERM stops it (`telemetry::signals`).

pub mod config;
pub mod gauges;
pub mod metrics;
pub mod passes;
pub mod runner;
pub mod vms;
pub mod webhooks;

pub use config::Config;
pub use runner::{run, select};
