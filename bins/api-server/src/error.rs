//! The API's one error type: the contract's stable codes (section 1.2), their
//! HTTP statuses and the JSON envelope. Storage answers a typed
//! [`StorageError`]; this is the only place that decides how it looks on the
//! wire.

use serde_json::{Map, Value, json};
use storage::error::{Detail, Field, Limited, Reason};
use storage::{ErrorKind, StorageError};

/// Stable error codes of the API contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Code {
    /// 400: the input is malformed or breaks a rule about its own shape.
    InvalidInput,
    /// 401: no key, or an unknown or revoked key.
    Unauthenticated,
    /// 403: the tenant pre-check or the permission says no.
    AccessDenied,
    /// 404: the object does not exist or is not visible to the caller.
    NotFound,
    /// 405: not a POST on a method path.
    MethodNotAllowed,
    /// 409: an idempotency key reused with a different request, or a name taken.
    Conflict,
    /// 409: the object's state forbids the operation.
    InvalidState,
    /// 409: no capacity for the request.
    CapacityUnavailable,
    /// 413: body over the limit.
    PayloadTooLarge,
    /// 429: an admission does not fit a quota.
    QuotaExceeded,
    /// 429: the caller sent more requests than its rate allows.
    RateLimited,
    /// 500: a bug.
    Internal,
    /// 503: a dependency (database, provider) is unreachable; safe to retry.
    Unavailable,
}

impl Code {
    /// Every code, in HTTP status order.
    pub const ALL: [Code; 13] = [
        Code::InvalidInput,
        Code::Unauthenticated,
        Code::AccessDenied,
        Code::NotFound,
        Code::MethodNotAllowed,
        Code::Conflict,
        Code::InvalidState,
        Code::CapacityUnavailable,
        Code::PayloadTooLarge,
        Code::QuotaExceeded,
        Code::RateLimited,
        Code::Internal,
        Code::Unavailable,
    ];

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
            Code::RateLimited => "RATE_LIMITED",
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
            Code::QuotaExceeded | Code::RateLimited => 429,
            Code::PayloadTooLarge => 413,
            Code::MethodNotAllowed => 405,
            Code::Internal => 500,
            Code::Unavailable => 503,
        }
    }
}

impl From<ErrorKind> for Code {
    fn from(kind: ErrorKind) -> Code {
        match kind {
            ErrorKind::InvalidInput => Code::InvalidInput,
            ErrorKind::Unauthenticated => Code::Unauthenticated,
            ErrorKind::AccessDenied => Code::AccessDenied,
            ErrorKind::NotFound => Code::NotFound,
            ErrorKind::Conflict => Code::Conflict,
            ErrorKind::InvalidState => Code::InvalidState,
            ErrorKind::CapacityUnavailable => Code::CapacityUnavailable,
            ErrorKind::QuotaExceeded => Code::QuotaExceeded,
            // Contract 3.5: a provider failure is UNAVAILABLE with
            // `details.reason = "provider-error"` (set by storage).
            ErrorKind::ProviderFailure | ErrorKind::Unavailable => Code::Unavailable,
            ErrorKind::Internal => Code::Internal,
        }
    }
}

/// An error as the API answers it: code, human message, details.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct ApiError {
    /// The stable code.
    pub code: Code,
    /// Human text; never SQL, stack traces or secrets.
    pub message: String,
    /// Structured details (always an object in the envelope).
    pub details: Map<String, Value>,
}

impl From<StorageError> for ApiError {
    fn from(e: StorageError) -> ApiError {
        ApiError {
            code: e.kind.into(),
            message: e.message,
            details: wire_details(e.details),
        }
    }
}

/// The contract's `details` object for storage's typed details: the one
/// place their wire names are written.
fn wire_details(details: Vec<Detail>) -> Map<String, Value> {
    let mut map = Map::new();
    let mut put = |key: &str, value: Value| {
        map.insert(key.to_owned(), value);
    };
    for detail in details {
        match detail {
            Detail::Field(f) => put("field", field_name(f).into()),
            Detail::Reason(r) => put("reason", reason_name(r).into()),
            Detail::IdempotencyKey(k) => put("idempotencyKey", k.into()),
            Detail::ProviderStatus(s) => put("status", s.into()),
            Detail::ReservationStatus(s) => put("status", s.as_str().into()),
            Detail::InstanceState(s) => put("state", s.as_str().into()),
            Detail::PoolId(id) => put("poolId", id.into()),
            Detail::ReservationId(id) => put("reservationId", id.into()),
            Detail::TenantId(id) => put("tenantId", id.into()),
            Detail::GrantIds(ids) => put("grantIds", ids.into()),
            Detail::AccountIds(ids) => put("accountIds", ids.into()),
            Detail::InstanceIds(ids) => put("instanceIds", ids.into()),
            Detail::Capacity { total, granted } => {
                put("total", total.into());
                put("granted", granted.into());
            }
            Detail::Slots {
                total,
                in_use,
                available,
            } => {
                put("total", total.into());
                put("inUse", in_use.into());
                put("available", available.into());
            }
            Detail::Limit {
                what,
                max,
                used,
                requested,
            } => {
                let resource = match what {
                    Limited::Quota(resource) => resource,
                    Limited::ProviderAccounts => "providerAccounts".to_owned(),
                    Limited::Webhooks => "webhooks".to_owned(),
                };
                put("resource", resource.into());
                put("max", max.into());
                put("used", used.into());
                put("requested", requested.into());
            }
            Detail::Now(now) => put("now", now.into()),
            Detail::Current(now) => put("current", now.into()),
            Detail::Buckets { buckets, max } => {
                put("buckets", buckets.into());
                put("maxBuckets", max.into());
            }
        }
    }
    map
}

/// The wire name of an input field (`details.field`).
fn field_name(field: Field) -> &'static str {
    match field {
        Field::PoolId => "poolId",
        Field::ProjectId => "projectId",
        Field::StartsAt => "startsAt",
        Field::EndsAt => "endsAt",
        Field::GrantTenantId => "grantTenantId",
        Field::Flavor => "flavor",
        Field::Lending => "lending",
        Field::Interruptible => "interruptible",
        Field::ConfigCredentials => "config.credentials",
        Field::To => "to",
        Field::TargetTenantId => "targetTenantId",
        Field::Now => "now",
    }
}

/// The wire name of a reason (`details.reason`).
fn reason_name(reason: Reason) -> &'static str {
    match reason {
        Reason::RegionMismatch => "region-mismatch",
        Reason::FlavorMismatch => "flavor-mismatch",
        Reason::ProjectNotGrantee => "project-not-grantee",
        Reason::ProjectNotTenant => "project-not-tenant",
        Reason::Past => "past",
        Reason::Range => "range",
        Reason::PoolNotOffered => "pool-not-offered",
        Reason::UnknownFlavor => "unknown-flavor",
        Reason::CredentialNotAllowed => "credential-not-allowed",
        Reason::RootTenant => "root-tenant",
        Reason::ProviderError => "provider-error",
        Reason::Unbound => "unbound",
        Reason::Unmetered => "unmetered",
        Reason::NoSecretsKey => "no-secrets-key",
        Reason::NoAccount => "no-account",
        Reason::LedgerPool => "ledger-pool",
        Reason::PoolDoesNotLend => "pool-does-not-lend",
        Reason::NoLentSlot => "no-lent-slot",
        Reason::BillingNone => "billing-none",
        Reason::EndpointNotAllowed => "endpoint-not-allowed",
        Reason::OtherProject => "other-project",
    }
}

impl From<serde_json::Error> for ApiError {
    fn from(e: serde_json::Error) -> Self {
        ApiError::internal(e)
    }
}

impl ApiError {
    /// An error without details.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        ApiError {
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
        ApiError::new(Code::InvalidInput, message)
            .with("field", field)
            .with("reason", reason)
    }

    /// `ACCESS_DENIED` with a message.
    pub fn access_denied(message: impl Into<String>) -> Self {
        ApiError::new(Code::AccessDenied, message)
    }

    /// `INTERNAL`; the cause is logged, not returned.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        ApiError::new(Code::Internal, "internal error")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provider_failure_is_unavailable_on_the_wire() {
        let e = StorageError::new(ErrorKind::ProviderFailure, "x")
            .with(Detail::Reason(Reason::ProviderError));
        let api = ApiError::from(e);
        assert_eq!(api.code, Code::Unavailable);
        assert_eq!(api.code.http_status(), 503);
        assert_eq!(
            api.to_json()["error"]["details"]["reason"],
            "provider-error"
        );
    }

    #[test]
    fn every_code_has_a_distinct_name() {
        let mut names: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Code::ALL.len());
    }
}
