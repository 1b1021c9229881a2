//! Suites that span binaries: `bcctl`, the console in a browser, the demo
//! world, both processes' metrics, and PostgreSQL over TLS.

mod bcctl;
mod bcctl_wait;
mod console;
mod db_tls;
mod demo;
pub(crate) mod metrics;
mod pool;
