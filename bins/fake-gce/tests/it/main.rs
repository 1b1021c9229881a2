//! Integration tests: each starts the real `fake-gce` binary on an ephemeral
//! loopback port and talks HTTP to it, directly (`endpoints`, `auth`, `tls`)
//! or through the `providers` GCE adapter (`gce_adapter`, `gce_instances`);
//! `realism` also serves the library in-process where it injects a clock.
//! One test binary,
//! so the helpers in `common` are shared without dead-code warnings.

#![expect(
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "tests index answers and expect them; a panic fails the test"
)]

mod auth;
mod common;
mod endpoints;
mod gce_adapter;
mod gce_instances;
mod instances;
mod realism;
mod state;
mod tls;
