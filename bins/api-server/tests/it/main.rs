//! The end-to-end tests: one binary that runs the real `api-server` (and
//! `reconciler-worker`) binaries against databases of their own. Each
//! folder is one family of methods, mirroring the api-server's `handlers`
//! where it can (`http` holds what every method shares, `workers` the
//! reconciler-worker, `system` the suites that span binaries); `support` is
//! what they share.

#![expect(
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "tests index answers and expect them; a panic fails the test"
)]

mod support;

mod accounts;
mod billing;
mod capacity;
mod grants;
mod http;
mod instances;
mod logs;
mod smoke;
mod system;
mod tenancy;
mod views;
mod webhooks;
mod workers;
