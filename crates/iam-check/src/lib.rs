#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod decision;
mod permission;
mod role;

pub use decision::{
    AccessRequest, Decision, DenyReason, KeyScope, Principal, RootOption, TenantRule, decide,
    decide_option,
};
pub use permission::{Permission, ScopeKind, UnknownName};
pub use role::{Role, permits};

#[cfg(test)]
mod tests;
