//! The typed error of storage operations: what went wrong in domain terms.
//! The API server maps each [`ErrorKind`] to its contract code and HTTP
//! status; nothing here knows the wire format.

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

use crate::model::states::{InstanceState, ReservationStatus};

/// The input field an error is about. api-server names each for the wire
/// (`details.field`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// The pool named by the request.
    PoolId,
    /// The project named by the request.
    ProjectId,
    /// The start of a term.
    StartsAt,
    /// The end of a term.
    EndsAt,
    /// The tenant a grant is for.
    GrantTenantId,
    /// An instance's flavor.
    Flavor,
    /// A provider account's credentials.
    ConfigCredentials,
    /// The end of a range.
    To,
    /// The tenant a lifecycle request names.
    TargetTenantId,
    /// The instant a clock is set to.
    Now,
    /// A pool's lending (contract 3.3, r4).
    Lending,
    /// An instance's `interruptible` (contract 3.14).
    Interruptible,
}

/// Why an input or a state refuses the request: a machine-readable reason
/// (`details.reason`), named for the wire by api-server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The pool and the reservation are in different regions.
    RegionMismatch,
    /// The pool has no flavor of the reservation's machine type.
    FlavorMismatch,
    /// The project is not a project of the grantee.
    ProjectNotGrantee,
    /// The project is not a project of the tenant.
    ProjectNotTenant,
    /// An instant too far in the past.
    Past,
    /// A value or range out of bounds.
    Range,
    /// The pool is not offered to the grantee.
    PoolNotOffered,
    /// The pool has no such flavor.
    UnknownFlavor,
    /// The credentials name something the tenant may not use.
    CredentialNotAllowed,
    /// The root tenant cannot be the target.
    RootTenant,
    /// A provider call failed.
    ProviderError,
    /// The reservation is not bound to a pool.
    Unbound,
    /// Ended grants still have slot-hours to meter.
    Unmetered,
    /// The server has no key to seal secrets with.
    NoSecretsKey,
    /// The provider account of a managed pool is gone.
    NoAccount,
    /// A URL names an endpoint the tenant may not reach.
    EndpointNotAllowed,
    /// A managed pool and a reservation in another project than its
    /// account's.
    OtherProject,
    /// Lending asked of a ledger pool (contract 3.3, r4).
    LedgerPool,
    /// A grant's pool has no `lending` (contract 3.6, r4).
    PoolDoesNotLend,
    /// No lending grant has a slot for an interruptible instance (3.14).
    NoLentSlot,
    /// An interruptible instance billed `none`: a borrower is always
    /// billed, as interruptible (contract 5.5).
    BillingNone,
}

/// What a quota-like limit counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Limited {
    /// A resource of a pool's quota (`quotas_core` names it).
    Quota(String),
    /// The provider accounts a tenant may have.
    ProviderAccounts,
    /// The webhooks a tenant may have.
    Webhooks,
}

/// One structured detail of an error. Storage says what it is; api-server
/// alone writes its name on the wire (`details`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detail {
    /// The input field the error is about.
    Field(Field),
    /// Why the request is refused.
    Reason(Reason),
    /// The idempotency key reused with another request.
    IdempotencyKey(String),
    /// The HTTP status of a failed provider call.
    ProviderStatus(u16),
    /// The reservation's status that forbids the operation.
    ReservationStatus(ReservationStatus),
    /// The instance's state that forbids the operation.
    InstanceState(InstanceState),
    /// The pool concerned.
    PoolId(String),
    /// The reservation concerned.
    ReservationId(String),
    /// The tenant concerned.
    TenantId(String),
    /// The grants that stand in the way.
    GrantIds(Vec<String>),
    /// The provider accounts that stand in the way.
    AccountIds(Vec<String>),
    /// The instances that stand in the way.
    InstanceIds(Vec<String>),
    /// A reservation's slots and what is already committed of them.
    Capacity {
        /// The reservation's slots.
        total: u64,
        /// Slots already committed over the term.
        granted: u64,
    },
    /// A reservation's slots held by instances and still free.
    Slots {
        /// The reservation's slots.
        total: u64,
        /// Slots held by instances.
        in_use: u64,
        /// Slots free for the request.
        available: u64,
    },
    /// A limit the request does not fit.
    Limit {
        /// What is limited.
        what: Limited,
        /// The most that may be held.
        max: i64,
        /// What is held.
        used: i64,
        /// What the request asked for.
        requested: i64,
    },
    /// The server's "now" when a time is refused.
    Now(i64),
    /// The clock's current instant.
    Current(i64),
    /// Hour buckets a range covers, and the most one call may cover.
    Buckets {
        /// Buckets the range covers.
        buckets: u64,
        /// The most one call may cover.
        max: u64,
    },
}

/// A failed operation: its kind, a human message and structured details.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{kind:?}: {message}")]
pub struct StorageError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// Human text; never SQL, stack traces or secrets.
    pub message: String,
    /// Structured details (the contract's `details` object), in the order
    /// they were added.
    pub details: Vec<Detail>,
}

/// Result of the product's operations.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

impl StorageError {
    /// An error without details.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        StorageError {
            kind,
            message: message.into(),
            details: Vec::new(),
        }
    }

    /// Adds one detail.
    pub fn with(mut self, detail: Detail) -> Self {
        self.details.push(detail);
        self
    }

    /// `INVALID_INPUT` about one field, with `details { field, reason }`.
    pub fn invalid(field: Field, reason: Reason, message: impl Into<String>) -> Self {
        StorageError::new(ErrorKind::InvalidInput, message)
            .with(Detail::Field(field))
            .with(Detail::Reason(reason))
    }

    /// The reason among the details, if any.
    pub fn reason(&self) -> Option<Reason> {
        self.details.iter().find_map(|d| match d {
            Detail::Reason(r) => Some(*r),
            _ => None,
        })
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
