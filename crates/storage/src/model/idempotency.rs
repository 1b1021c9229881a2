//! Idempotency keys (contract 1.5), shared by every creating mutation.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::error::{Detail, ErrorKind, Result, StorageError};
use crate::schema::idempotency_keys as ik;

/// What a creating mutation should do with its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The key is new: create the object with the reserved id.
    New,
    /// A retry of the same request: return the existing object.
    Replay(String),
}

/// The identity of one creating request.
#[derive(Debug, Clone, Copy)]
pub struct KeyedRequest<'a> {
    /// The acting tenant.
    pub tenant_id: &'a str,
    /// `module.method`
    pub method: &'a str,
    /// The client's key.
    pub key: &'a str,
    /// Hash of the request body ([`crate::ids::request_hash`]).
    pub request_hash: &'a [u8],
}

/// Claims `req.key` for the object `object_id`, inside the caller's
/// transaction, as its first write. A concurrent request with the same key
/// waits here until the first commits (then replays) or rolls back (then
/// claims the key itself), so one object is created.
pub async fn claim(
    conn: &AsyncPgConnection,
    req: KeyedRequest<'_>,
    object_id: &str,
    now: i64,
) -> Result<Claim> {
    let mut conn = conn;
    let conn = &mut conn;
    let inserted = diesel::insert_into(ik::table)
        .values((
            ik::tenant_id.eq(req.tenant_id),
            ik::method.eq(req.method),
            ik::idem_key.eq(req.key),
            ik::request_hash.eq(req.request_hash),
            ik::object_id.eq(object_id),
            ik::created_at.eq(now),
        ))
        .on_conflict_do_nothing()
        .execute(conn)
        .await?;
    if inserted == 1 {
        return Ok(Claim::New);
    }
    let (hash, existing): (Vec<u8>, String) = ik::table
        .filter(ik::tenant_id.eq(req.tenant_id))
        .filter(ik::method.eq(req.method))
        .filter(ik::idem_key.eq(req.key))
        .select((ik::request_hash, ik::object_id))
        .first(conn)
        .await?;
    if hash == req.request_hash {
        Ok(Claim::Replay(existing))
    } else {
        Err(StorageError::new(
            ErrorKind::Conflict,
            "the idempotency key was already used with a different request",
        )
        .with(Detail::IdempotencyKey(req.key.to_owned())))
    }
}

/// [`claim`] as the first statement of `reservationGrants.create`'s
/// transaction, sent in one round trip after [`crate::db::generic_plans`]
/// (the transaction's statements then use generic plans).
pub async fn claim_with_generic_plans(
    conn: &AsyncPgConnection,
    req: KeyedRequest<'_>,
    object_id: &str,
    now: i64,
) -> Result<Claim> {
    futures::try_join!(crate::db::generic_plans(conn), async {
        Ok(claim(conn, req, object_id, now).await)
    })?
    .1
}

/// What a creating mutation answers: the object, and whether the call was a
/// replay of an earlier one ([`Claim::Replay`]: nothing was created), so the
/// caller can tell the two apart (the audit trail's `replayed`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created<T> {
    /// The object, as it is now.
    pub value: T,
    /// True when the key had already created it.
    pub replayed: bool,
}

impl<T> Created<T> {
    /// An object this call created.
    pub fn new(value: T) -> Created<T> {
        Created {
            value,
            replayed: false,
        }
    }

    /// An object an earlier call with the same key created.
    pub fn replay(value: T) -> Created<T> {
        Created {
            value,
            replayed: true,
        }
    }
}
