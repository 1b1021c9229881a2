//! Handlers: receive the typed input, call one storage operation, return the
//! typed view. No SQL here; authorization beyond the registry's decision goes
//! through `iam-check` ([`crate::registry::Call::allow`]).

pub mod accounts;
pub mod capacity;
pub mod examples;
pub mod grants;
pub mod instances;
pub mod system;
pub mod tenancy;
