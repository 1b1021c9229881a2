//! Method inputs: each is one Rust type, described once with serde and
//! schemars attributes (`deny_unknown_fields`, wire names, patterns, ranges,
//! lengths). Its JSON Schema is the OpenAPI request body and, compiled once
//! per process by the `jsonschema` crate, what a body is checked against;
//! [`InputSchema::check`] maps the crate's errors to the contract's
//! `INVALID_INPUT` answers in one place, and [`parse`] then deserializes the
//! body into the same type.
//!
//! The pieces: the contract's [`patterns`], the [`paging`] helpers, the
//! input types and their schemas ([`input`]) and the validation engine
//! ([`validation`]).

pub mod input;
pub mod paging;
pub mod patterns;
pub mod validation;

pub use input::{Input, TenantOnly, checked_by_handler, parse};
pub use paging::{KEYSET_CURSOR, keyset_after, list_limit, page_limit};
pub use patterns::{
    ACCOUNT_ID, FLAVOR, GRANT_ID, IDEMPOTENCY_KEY, INSTANCE_ID, KEY_ID, NAME, POOL_ID, PROJECT_ID,
    RESERVATION_ID, RESOURCE, TENANT_ID,
};
pub use validation::InputSchema;

#[cfg(test)]
mod tests;
