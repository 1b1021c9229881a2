//! Handlers: parse the validated input, call one storage operation, shape the
//! response. No SQL here.

pub mod accounts;
pub mod capacity;
pub mod grants;
pub mod instances;
pub mod system;
pub mod tenancy;

use serde::Serialize;
use storage::Error;

use crate::registry::Reply;

/// `{ noun: value }`, serialized straight from the typed value.
pub fn one<T: Serialize>(noun: &str, value: &T) -> Result<Reply, Error> {
    let noun = serde_json::to_string(noun)?;
    Ok(Reply(format!(
        "{{{noun}:{}}}",
        serde_json::to_string(value)?
    )))
}

/// `{ items: [...] }`, serialized straight from the typed values (a list
/// of 1000 grants never becomes a tree of JSON values).
pub fn items<T: Serialize>(values: &[T]) -> Result<Reply, Error> {
    Ok(Reply(format!(
        "{{\"items\":{}}}",
        serde_json::to_string(values)?
    )))
}
