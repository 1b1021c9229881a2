//! Suites that span binaries: `bcctl`, the console in a browser, the demo
//! world, both processes' metrics, PostgreSQL over TLS, and the script
//! that sets up what the tests need.

mod bcctl;
mod bcctl_lending;
mod bcctl_wait;
mod console;
mod db_tls;
mod demo;
mod demo_restart;
pub(crate) mod metrics;
mod pool;
mod test_deps;
