//! The one error type of the product's operations, with the stable codes of
//! the API contract (section 1.2). Handlers map it to HTTP; storage operations
//! return it directly so a domain rule and its code live in one place.

use serde_json::{Map, Value, json};

/// Stable error codes of the API contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// 400: the input is malformed or breaks a rule about its own shape.
    InvalidInput,
    /// 401: no key, or an unknown or revoked key.
    Unauthenticated,
    /// 403: the tenant pre-check or the permission says no.
    AccessDenied,
    /// 404: the object does not exist or is not visible to the caller.
    NotFound,
    /// 409: an idempotency key reused with a different request, or a name taken.
    Conflict,
    /// 409: the object's state forbids the operation.
    InvalidState,
    /// 409: no capacity for the request.
    CapacityUnavailable,
    /// 429: an admission does not fit a quota.
    QuotaExceeded,
    /// 413: body over the limit.
    PayloadTooLarge,
    /// 405: not a POST on a method path.
    MethodNotAllowed,
    /// 500: a bug.
    Internal,
    /// 503: a dependency (database, provider) is unreachable; safe to retry.
    Unavailable,
}

impl Code {
    /// The code as written in the error envelope.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::InvalidInput => "INVALID_INPUT",
            Code::Unauthenticated => "UNAUTHENTICATED",
            Code::AccessDenied => "ACCESS_DENIED",
            Code::NotFound => "NOT_FOUND",
            Code::Conflict => "CONFLICT",
            Code::InvalidState => "INVALID_STATE",
            Code::CapacityUnavailable => "CAPACITY_UNAVAILABLE",
            Code::QuotaExceeded => "QUOTA_EXCEEDED",
            Code::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            Code::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            Code::Internal => "INTERNAL",
            Code::Unavailable => "UNAVAILABLE",
        }
    }

    /// The HTTP status the contract gives the code.
    pub fn http_status(self) -> u16 {
        match self {
            Code::InvalidInput => 400,
            Code::Unauthenticated => 401,
            Code::AccessDenied => 403,
            Code::NotFound => 404,
            Code::Conflict | Code::InvalidState | Code::CapacityUnavailable => 409,
            Code::QuotaExceeded => 429,
            Code::PayloadTooLarge => 413,
            Code::MethodNotAllowed => 405,
            Code::Internal => 500,
            Code::Unavailable => 503,
        }
    }
}

/// An error with its contract code, a human message and structured details.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct Error {
    /// The stable code.
    pub code: Code,
    /// Human text; never SQL, stack traces or secrets.
    pub message: String,
    /// Structured details (always an object in the envelope).
    pub details: Map<String, Value>,
}

/// Result of the product's operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error without details.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Error {
            code,
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
        Error::new(Code::InvalidInput, message)
            .with("field", field)
            .with("reason", reason)
    }

    /// `NOT_FOUND` for an object kind and id.
    pub fn not_found(kind: &str, id: &str) -> Self {
        Error::new(Code::NotFound, format!("{kind} {id} not found"))
    }

    /// `INVALID_STATE` with a message.
    pub fn invalid_state(message: impl Into<String>) -> Self {
        Error::new(Code::InvalidState, message)
    }

    /// `ACCESS_DENIED` with a message.
    pub fn access_denied(message: impl Into<String>) -> Self {
        Error::new(Code::AccessDenied, message)
    }

    /// `INTERNAL`; the cause is logged, not returned.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Error::new(Code::Internal, "internal error")
    }

    /// `UNAVAILABLE` (safe to retry).
    pub fn unavailable(message: impl Into<String>) -> Self {
        Error::new(Code::Unavailable, message)
    }

    /// The JSON envelope `{ "error": { code, message, details } }`.
    pub fn to_json(&self) -> Value {
        json!({
            "error": {
                "code": self.code.as_str(),
                "message": self.message,
                "details": self.details,
            },
        })
    }
}

impl From<diesel::result::Error> for Error {
    fn from(e: diesel::result::Error) -> Self {
        use diesel::result::{DatabaseErrorKind, Error as D};
        match &e {
            D::NotFound => Error::new(Code::NotFound, "not found"),
            D::DatabaseError(DatabaseErrorKind::ClosedConnection, _)
            | D::BrokenTransactionManager => {
                tracing::warn!(error = %e, "database connection lost");
                Error::unavailable("the database is unreachable; retry")
            }
            D::DatabaseError(DatabaseErrorKind::SerializationFailure, _) => {
                tracing::warn!(error = %e, "serialization failure");
                Error::unavailable("concurrent update; retry")
            }
            _ => Error::internal(e),
        }
    }
}

impl From<diesel_async::pooled_connection::deadpool::PoolError> for Error {
    fn from(e: diesel_async::pooled_connection::deadpool::PoolError) -> Self {
        tracing::warn!(error = %e, "database pool error");
        Error::unavailable("the database is unreachable; retry")
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::internal(e)
    }
}
