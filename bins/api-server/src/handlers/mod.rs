//! Handlers: parse the validated input, call one storage operation, shape the
//! response. No SQL here.

pub mod accounts;
pub mod capacity;
pub mod grants;
pub mod instances;
pub mod system;
pub mod tenancy;

use serde::Serialize;
use serde_json::{Value, json};
use storage::Error;

/// `{ noun: value }`.
pub fn one<T: Serialize>(noun: &str, value: &T) -> Result<Value, Error> {
    Ok(json!({ noun: serde_json::to_value(value)? }))
}

/// `{ items: [...] }`.
pub fn items<T: Serialize>(values: &[T]) -> Result<Value, Error> {
    Ok(json!({ "items": serde_json::to_value(values)? }))
}
