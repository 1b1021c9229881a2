//! Paging: the opaque cursor of the newest-first lists and the default
//! `limit`s.

use crate::error::ApiError;

/// The opaque cursor of a newest-first list (`reservationGrants.list`,
/// `instances.list`, `audit.list`; `storage::model::keyset`): `k`, a
/// non-negative 64-bit instant in 13 lower-case base32hex characters (the
/// last one's padding bit zero), and a TypeID suffix, so every string the
/// pattern allows decodes. At most 40 characters.
pub const KEYSET_CURSOR: &str =
    "^k[0-9a-f][0-9a-v]{11}[02468acegikmoqsu][0-7][0-9a-hjkmnp-tv-z]{25}$";

/// The position a [`KEYSET_CURSOR`] `after` carries for ids with `prefix`
/// (`INVALID_INPUT` on `after` if it is not such a cursor).
pub fn keyset_after(
    after: Option<&str>,
    prefix: &str,
    method: &str,
) -> Result<Option<storage::model::keyset::Position>, ApiError> {
    after
        .map(|c| {
            storage::model::keyset::Position::decode(c, prefix).ok_or_else(|| {
                ApiError::invalid("after", "pattern", format!("not a cursor from {method}"))
            })
        })
        .transpose()
}

/// The default `limit` of the newest-first lists.
pub fn list_limit() -> i64 {
    storage::LIST_LIMIT
}

/// The default `limit` of the logs' pages (contract 1.6).
pub fn page_limit() -> i64 {
    100
}
