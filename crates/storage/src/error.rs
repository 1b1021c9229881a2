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

impl From<diesel::result::Error> for StorageError {
    fn from(e: diesel::result::Error) -> Self {
        use diesel::result::{DatabaseErrorKind, Error as D};
        match &e {
            D::NotFound => StorageError::new(ErrorKind::NotFound, "not found"),
            D::DatabaseError(DatabaseErrorKind::ClosedConnection, _)
            | D::BrokenTransactionManager => {
                tracing::warn!(error = %e, "database connection lost");
                StorageError::unavailable("the database is unreachable; retry")
            }
            D::DatabaseError(DatabaseErrorKind::SerializationFailure, _) => {
                tracing::warn!(error = %e, "serialization failure");
                StorageError::unavailable("concurrent update; retry")
            }
            _ => StorageError::internal(e),
        }
    }
}

impl From<diesel_async::pooled_connection::deadpool::PoolError> for StorageError {
    fn from(e: diesel_async::pooled_connection::deadpool::PoolError) -> Self {
        tracing::warn!(error = %e, "database pool error");
        StorageError::unavailable("the database is unreachable; retry")
    }
}

impl From<serde_json::Error> for StorageError {
    fn from(e: serde_json::Error) -> Self {
        StorageError::internal(e)
    }
}
