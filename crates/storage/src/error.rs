//! The typed error of storage operations: what went wrong in domain terms.
//! The API server maps each [`ErrorKind`] to its contract code and HTTP
//! status; nothing here knows the wire format.

use serde_json::{Map, Value};

/// What kind of failure an operation met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The input breaks a rule about its own shape or values.
    InvalidInput,
    /// The key is unknown or revoked.
    Unauthenticated,
    /// The caller may not do this.
    AccessDenied,
    /// The object does not exist or is not visible to the caller.
    NotFound,
    /// An idempotency key reused with a different request, or a name taken.
    Conflict,
    /// The object's state forbids the operation.
    InvalidState,
    /// No capacity for the request.
    CapacityUnavailable,
    /// An admission does not fit a quota.
    QuotaExceeded,
    /// A provider call failed; nothing changed. Safe to retry.
    ProviderFailure,
    /// The database is unreachable or a concurrent update won; safe to retry.
    Unavailable,
    /// A bug or a corrupt row; the cause is logged, not returned.
    Internal,
}

/// A failed operation: its kind, a human message and structured details.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{kind:?}: {message}")]
pub struct StorageError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// Human text; never SQL, stack traces or secrets.
    pub message: String,
    /// Structured details (the contract's `details` object).
    pub details: Map<String, Value>,
}

/// Result of the product's operations.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

impl StorageError {
    /// An error without details.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        StorageError {
            kind,
            message: message.into(),
            details: Map::new(),
        }
    }

    /// Adds one detail.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_owned(), value.into());
        self
    }

    /// `INVALID_INPUT` about one field, with `details { field, reason }`.
    pub fn invalid(field: &str, reason: &str, message: impl Into<String>) -> Self {
        StorageError::new(ErrorKind::InvalidInput, message)
            .with("field", field)
            .with("reason", reason)
    }

    /// `NOT_FOUND` for an object kind and id.
    pub fn not_found(kind: &str, id: &str) -> Self {
        StorageError::new(ErrorKind::NotFound, format!("{kind} {id} not found"))
    }

    /// `INVALID_STATE` with a message.
    pub fn invalid_state(message: impl Into<String>) -> Self {
        StorageError::new(ErrorKind::InvalidState, message)
    }

    /// `ACCESS_DENIED` with a message.
    pub fn access_denied(message: impl Into<String>) -> Self {
        StorageError::new(ErrorKind::AccessDenied, message)
    }

    /// `INTERNAL`; the cause is logged, not returned.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        StorageError::new(ErrorKind::Internal, "internal error")
    }

    /// `UNAVAILABLE` (safe to retry).
    pub fn unavailable(message: impl Into<String>) -> Self {
        StorageError::new(ErrorKind::Unavailable, message)
    }
}

/// The messages of the errors PostgreSQL sends when a session ends under it
/// or the server cannot take it now: `57P01` (administrator command,
/// unexpected postmaster exit), `57P02` (crash of another server process),
/// `57P03` (starting up, shutting down, in recovery) and `57P05` (idle
/// session timeout). diesel names none of these (its kind is `Unknown` and it
/// keeps no SQLSTATE), so they are told apart by their English message, as
/// the server sends them with `lc_messages` C or English.
const GONE_MESSAGES: &[&str] = &["terminating connection ", "the database system is "];

/// Whether `e` says the database is unreachable or cannot take the request
/// now (a retry may reach a server that can): the session's connection was
/// lost (diesel-async reports a failure without a SQLSTATE, such as
/// tokio-postgres' "connection closed", as `UnableToSendCommand`), the
/// server ended the session or is starting or stopping, the session landed
/// on a server that became read-only (`25006`), or a transaction's commit
/// failed on one of these.
pub fn is_unavailable(e: &diesel::result::Error) -> bool {
    use diesel::result::{DatabaseErrorKind as K, Error as D};
    match e {
        D::DatabaseError(
            K::ClosedConnection | K::UnableToSendCommand | K::ReadOnlyTransaction,
            _,
        )
        | D::BrokenTransactionManager => true,
        D::DatabaseError(K::Unknown, info) => {
            GONE_MESSAGES.iter().any(|m| info.message().starts_with(m))
        }
        D::RollbackErrorOnCommit { commit_error, .. } => is_unavailable(commit_error),
        _ => false,
    }
}

impl From<diesel::result::Error> for StorageError {
    fn from(e: diesel::result::Error) -> Self {
        use diesel::result::{DatabaseErrorKind, Error as D};
        match &e {
            D::NotFound => StorageError::new(ErrorKind::NotFound, "not found"),
            D::DatabaseError(DatabaseErrorKind::SerializationFailure, _) => {
                tracing::warn!(error = %e, "serialization failure");
                StorageError::unavailable("concurrent update; retry")
            }
            _ if is_unavailable(&e) => {
                tracing::warn!(error = %e, "database unavailable");
                StorageError::unavailable("the database is unavailable; retry")
            }
            _ => StorageError::internal(e),
        }
    }
}

impl From<diesel_async::pooled_connection::deadpool::PoolError> for StorageError {
    fn from(e: diesel_async::pooled_connection::deadpool::PoolError) -> Self {
        tracing::warn!(error = %e, "database pool error");
        StorageError::unavailable("the database is unavailable; retry")
    }
}

impl From<serde_json::Error> for StorageError {
    fn from(e: serde_json::Error) -> Self {
        StorageError::internal(e)
    }
}

#[cfg(test)]
mod tests {
    use diesel::result::{DatabaseErrorKind as K, Error as D};

    use super::*;

    fn db(kind: K, message: &str) -> D {
        D::DatabaseError(kind, Box::new(message.to_owned()))
    }

    fn kind(e: D) -> ErrorKind {
        StorageError::from(e).kind
    }

    #[test]
    fn a_lost_or_ended_session_is_unavailable() {
        for e in [
            db(K::UnableToSendCommand, "connection closed"),
            db(K::ClosedConnection, "server closed the connection"),
            db(
                K::ReadOnlyTransaction,
                "cannot execute INSERT in a read-only transaction",
            ),
            db(
                K::Unknown,
                "terminating connection due to administrator command",
            ),
            db(
                K::Unknown,
                "terminating connection due to unexpected postmaster exit",
            ),
            db(
                K::Unknown,
                "terminating connection because of crash of another server process",
            ),
            db(K::Unknown, "the database system is shutting down"),
            db(K::Unknown, "the database system is in recovery mode"),
            D::BrokenTransactionManager,
            D::RollbackErrorOnCommit {
                rollback_error: Box::new(db(K::UnableToSendCommand, "connection closed")),
                commit_error: Box::new(db(
                    K::Unknown,
                    "terminating connection due to \
                                                      administrator command",
                )),
            },
        ] {
            let text = e.to_string();
            let mapped = StorageError::from(e);
            assert_eq!(mapped.kind, ErrorKind::Unavailable, "{text}");
            assert_eq!(
                mapped.message, "the database is unavailable; retry",
                "{text}"
            );
        }
    }

    #[test]
    fn other_database_errors_stay_what_they_were() {
        assert_eq!(kind(D::NotFound), ErrorKind::NotFound);
        assert_eq!(
            kind(db(K::SerializationFailure, "could not serialize access")),
            ErrorKind::Unavailable
        );
        assert_eq!(
            kind(db(K::UniqueViolation, "duplicate key value")),
            ErrorKind::Internal
        );
        assert_eq!(
            kind(db(K::Unknown, "column \"x\" does not exist")),
            ErrorKind::Internal
        );
        assert_eq!(
            kind(D::RollbackErrorOnCommit {
                rollback_error: Box::new(db(K::UnableToSendCommand, "connection closed")),
                commit_error: Box::new(db(K::CheckViolation, "violates check constraint")),
            }),
            ErrorKind::Internal
        );
    }
}
