#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

use std::fmt;
use std::future::Future;
use std::pin::Pin;

pub mod auth;
mod credentials;
pub mod gce;
mod guard;
mod instances;
pub mod outbound;
pub mod policy;
mod secret;

pub use instances::{
    INSTALLATION_LABEL, INSTANCE_LABEL, InstanceFactory, InstanceProvider, MANAGED_LABEL,
    OperationStatus, StepFailure, Vm, VmOperation, VmSpec, VmStatus, policy_instance_factory,
};
pub use policy::{AccountOwner, Origins, PolicyError, ProviderAccess, ProviderPolicy};

/// The future returned by provider calls: boxed so that [`ReservationProvider`]
/// stays dyn-compatible (`Arc<dyn ReservationProvider>`), and `Send` so it can
/// be awaited on a multi-threaded runtime.
pub type ProviderFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, ProviderError>> + Send + 'a>>;

/// Reads the capacity reservations of one provider account.
///
/// Implementations hold the account's configuration; each call asks the
/// provider afresh (no caching) and answers every reservation it sees, or an
/// error if it could not see them all. A partial answer is never returned,
/// since a reservation missing from the answer is taken to be gone.
pub trait ReservationProvider: Send + Sync {
    /// Lists every reservation of the account.
    fn list_reservations(&self) -> ProviderFuture<'_, Vec<ProviderReservation>>;
}

/// `ReservationProvider` stays dyn-compatible (the worker and the api-server hold it as
/// `Arc<dyn ReservationProvider>`): a change that breaks it fails to compile here.
const _: Option<&dyn ReservationProvider> = None;

/// One reservation as the provider reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderReservation {
    /// The provider's id; for GCE `projects/{project}/zones/{zone}/reservations/{name}`.
    pub reservation_id: String,
    /// The zone, e.g. `us-central1-a`.
    pub zone: String,
    /// The region: the zone without its last `-x` part, e.g. `us-central1`.
    pub region: String,
    /// The machine type of the reserved VMs (the last path segment if the
    /// provider sent a URL), e.g. `n2-standard-4`.
    pub flavor: String,
    /// How many VMs the reservation holds.
    pub total: i64,
    /// How many of them the provider sees in use.
    pub in_use: i64,
    /// Whether the reservation can be consumed now.
    pub status: ReservationStatus,
}

/// Whether a reservation can be consumed now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReservationStatus {
    /// The provider reports it ready (GCE `READY`).
    Ready,
    /// Anything else: being created, updated or deleted, or a state unknown to us.
    NotReady,
}

impl ReservationStatus {
    /// The contract's spelling: `ready` or `not-ready`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReservationStatus::Ready => "ready",
            ReservationStatus::NotReady => "not-ready",
        }
    }
}

impl fmt::Display for ReservationStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a provider call failed. Messages never contain credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The provider did not connect or answer within the configured timeout.
    #[error("the provider did not answer within the configured timeout")]
    Timeout,
    /// The provider answered with an HTTP status other than success.
    #[error("the provider answered HTTP {status}")]
    Status {
        /// The HTTP status code, e.g. 503.
        status: u16,
    },
    /// The provider's answer could not be understood.
    #[error("malformed provider response: {0}")]
    Malformed(String),
    /// The provider could not be reached (connection refused, reset, TLS, ...).
    #[error("could not reach the provider: {0}")]
    Transport(String),
    /// The account's credentials reference could not be resolved (a missing
    /// environment variable, an unreadable file, ...). Names the reference,
    /// never the secret.
    #[error("unusable provider credentials: {0}")]
    Credentials(String),
    /// The provider policy refuses the call: the account's credentials
    /// reference or endpoint is not (or no longer) allowed for its owner, or
    /// a tenant account's endpoint resolves to an internal address. Nothing
    /// was sent; retrying does not help until the account or the policy
    /// changes. Names the reference or host, never a secret.
    #[error("not allowed by the provider policy: {0}")]
    NotAllowed(String),
    /// The resource to create exists already (HTTP 409 with reason
    /// `alreadyExists`).
    #[error("the provider answered that the resource already exists")]
    AlreadyExists,
    /// The resource a mutation or an operation read names does not exist
    /// (HTTP 404).
    #[error("the provider answered that the resource does not exist")]
    NotFound,
    /// The provider refused the request with an HTTP 4xx (other than 401,
    /// 404 and `alreadyExists`) and a Google error body. `reason` is the
    /// body's `error.errors[0].reason` (`resourceNotReady`,
    /// `insufficientPermissions`, ...) or else its `error.status`
    /// (`RESOURCE_EXHAUSTED`, ...), kept only when it is a short word
    /// (else `unknown`); the rest of the body is never kept.
    #[error("the provider refused the request: HTTP {status} ({reason})")]
    Rejected {
        /// The HTTP status code, e.g. 400.
        status: u16,
        /// The error's reason code.
        reason: String,
    },
    /// A mutating call refused for a quota of the project (contract 3.12
    /// r4): `403 rateLimitExceeded` (or a 429), for the calls per minute, or
    /// with a `CONCURRENT_OPERATIONS_QUOTA_EXCEEDED` detail, for the
    /// operations in flight. Nothing was done; the caller pauses the
    /// account's mutating calls instead of trying again at once.
    #[error("the provider refused the call for its {quota} quota")]
    Throttled {
        /// Which quota.
        quota: Throttle,
        /// The provider's `Retry-After`, when it sent one.
        retry_after: Option<std::time::Duration>,
    },
    /// A listing left scopes out (contract 6, r4): the provider answered,
    /// but named zones (or regions) it could not reach, as scopes with
    /// `warning.code: "UNREACHABLE"` or in `unreachables`. What they hold is
    /// unknown, not gone, so the whole listing fails and changes nothing;
    /// it is tried again later, like any failed listing.
    #[error(
        "the provider could not reach every zone (UNREACHABLE: {}); the listing is incomplete",
        unreachable.join(", ")
    )]
    Partial {
        /// The scopes left out, by their last segment (`us-central1-a`),
        /// sorted; at most 16, then `N more`.
        unreachable: Vec<String>,
    },
}

/// The quota a [`ProviderError::Throttled`] call met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Throttle {
    /// Mutating calls per project and minute (`rateLimitExceeded`, 429).
    Rate,
    /// Operations in flight per project (`CONCURRENT_OPERATIONS_QUOTA_EXCEEDED`).
    ConcurrentOperations,
}

impl fmt::Display for Throttle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Throttle::Rate => "rate",
            Throttle::ConcurrentOperations => "concurrent-operations",
        })
    }
}

impl ProviderError {
    /// A final refusal as the step failure it makes: the provider's own
    /// reason where it gave one (`notFound` for a 404: what a create names
    /// does not exist; a refusal's `reason`), else
    /// [`StepFailure::ProviderError`].
    pub fn failure(&self) -> StepFailure {
        match self {
            ProviderError::NotFound => StepFailure::provider("notFound"),
            ProviderError::Rejected { reason, .. } => StepFailure::provider(reason),
            _ => StepFailure::ProviderError,
        }
    }

    /// Whether trying again later may succeed without changing anything:
    /// timeouts, transport errors, partial listings, HTTP 408, 429 and 5xx,
    /// quota refusals, and refusals whose reason says so
    /// (`rateLimitExceeded`, `userRateLimitExceeded`, `resourceNotReady`,
    /// `RESOURCE_NOT_READY`).
    pub fn is_retryable(&self) -> bool {
        match self {
            ProviderError::Timeout | ProviderError::Transport(_) => true,
            ProviderError::Status { status } => {
                matches!(status, 408 | 429) || (500..=599).contains(status)
            }
            ProviderError::Rejected { status, reason } => {
                *status == 429
                    || (500..=599).contains(status)
                    || matches!(
                        reason.as_str(),
                        "rateLimitExceeded"
                            | "userRateLimitExceeded"
                            | "resourceNotReady"
                            | "RESOURCE_NOT_READY"
                    )
            }
            ProviderError::Throttled { .. } | ProviderError::Partial { .. } => true,
            ProviderError::Malformed(_)
            | ProviderError::Credentials(_)
            | ProviderError::NotAllowed(_)
            | ProviderError::AlreadyExists
            | ProviderError::NotFound => false,
        }
    }

    /// The provider's HTTP status, when it answered with one.
    pub fn status(&self) -> Option<u16> {
        match self {
            ProviderError::Status { status } | ProviderError::Rejected { status, .. } => {
                Some(*status)
            }
            ProviderError::AlreadyExists => Some(409),
            ProviderError::NotFound => Some(404),
            ProviderError::Throttled { .. } => Some(403),
            _ => None,
        }
    }
}

/// Builds the adapter of a provider account from what is stored for it: the
/// provider's name (`providerAccounts.create { provider }`), its config as
/// stored (the JSON of [`gce::GceConfig::to_json`]), whose account it is and
/// the policy, and the client options.
///
/// An unknown provider name or a stored config that no longer validates is
/// [`ProviderError::NotAllowed`] (the account cannot be used as stored;
/// retrying does not help). The policy itself is applied at each call of the
/// adapter, not here, so building never reads a credential.
pub fn build(
    provider_name: &str,
    config: &serde_json::Value,
    access: ProviderAccess,
    options: gce::GceProviderOptions,
) -> Result<Box<dyn ReservationProvider>, ProviderError> {
    match provider_name {
        gce::PROVIDER_NAME => Ok(Box::new(gce_provider(config, access, options)?)),
        other => Err(unknown_provider(other)),
    }
}

/// The refusal of a provider name no adapter serves; names it only when it
/// is a plain word.
fn unknown_provider(name: &str) -> ProviderError {
    let printable = name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    ProviderError::NotAllowed(if printable {
        format!("unknown provider {name:?}")
    } else {
        "unknown provider".to_owned()
    })
}

fn gce_provider(
    config: &serde_json::Value,
    access: ProviderAccess,
    options: gce::GceProviderOptions,
) -> Result<gce::GceProvider, ProviderError> {
    let config = gce::GceConfig::from_json(config).map_err(|e| {
        ProviderError::NotAllowed(format!("the stored gce account config is invalid: {e}"))
    })?;
    gce::GceProvider::new(config, options, access)
}

/// What an account's adapter is built from: whose account it is, its
/// provider's name and its stored config.
#[derive(Debug, Clone, Copy)]
pub struct AccountSpec<'a> {
    /// The account (`pacct_...`): the token cache's key.
    pub account_id: &'a str,
    /// The owning tenant (decides the policy: root's or a tenant's).
    pub tenant_id: &'a str,
    /// The provider's name (`gce`).
    pub provider: &'a str,
    /// The config as stored.
    pub config: &'a serde_json::Value,
    /// The account's `secret:NAME`, resolved in its own tenant, when that is
    /// its credentials reference.
    pub secret: Option<&'a auth::ResolvedSecret>,
}

/// Builds the adapter of an account. The binaries build one with
/// [`policy_factory`] and pass it to the operations that call a provider,
/// which so only ever see the [`ReservationProvider`] trait.
pub type ProviderFactory =
    dyn Fn(AccountSpec<'_>) -> Result<Box<dyn ReservationProvider>, ProviderError> + Send + Sync;

/// The factory the binaries use: each account's adapter under `policy`, for
/// an account of the root tenant `root` or of another (untrusted) tenant.
/// Building reads no credential; the adapter checks the policy again at each
/// listing.
pub fn policy_factory(
    root: &str,
    policy: std::sync::Arc<ProviderPolicy>,
    options: gce::GceProviderOptions,
) -> std::sync::Arc<ProviderFactory> {
    let root = root.to_owned();
    std::sync::Arc::new(move |account: AccountSpec<'_>| {
        let owner = AccountOwner::of(account.tenant_id, &root);
        let access = ProviderAccess::new(owner, policy.clone());
        match account.provider {
            gce::PROVIDER_NAME => {
                let provider = gce_provider(account.config, access, options.clone())?
                    .for_account(account.account_id, account.secret.cloned());
                Ok(Box::new(provider) as Box<dyn ReservationProvider>)
            }
            other => build(other, account.config, access, options.clone()),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_spelling() {
        assert_eq!(ReservationStatus::Ready.to_string(), "ready");
        assert_eq!(ReservationStatus::NotReady.to_string(), "not-ready");
    }

    #[test]
    fn retryable_errors() {
        assert!(ProviderError::Timeout.is_retryable());
        assert!(ProviderError::Transport("reset".into()).is_retryable());
        let partial = ProviderError::Partial {
            unreachable: vec!["us-central1-a".into()],
        };
        assert!(partial.is_retryable());
        assert_eq!(partial.status(), None);
        assert!(ProviderError::Status { status: 503 }.is_retryable());
        assert!(ProviderError::Status { status: 429 }.is_retryable());
        assert!(!ProviderError::Status { status: 403 }.is_retryable());
        assert!(!ProviderError::Malformed("x".into()).is_retryable());
        assert!(!ProviderError::Credentials("x".into()).is_retryable());
        assert!(!ProviderError::NotAllowed("x".into()).is_retryable());
        assert!(!ProviderError::AlreadyExists.is_retryable());
        assert!(!ProviderError::NotFound.is_retryable());
        let rejected = |status: u16, reason: &str| ProviderError::Rejected {
            status,
            reason: reason.into(),
        };
        for retryable in [
            rejected(403, "rateLimitExceeded"),
            rejected(403, "userRateLimitExceeded"),
            rejected(400, "resourceNotReady"),
            rejected(400, "RESOURCE_NOT_READY"),
            rejected(429, "RESOURCE_EXHAUSTED"),
        ] {
            assert!(retryable.is_retryable(), "{retryable:?}");
        }
        for final_ in [
            rejected(400, "invalid"),
            rejected(403, "insufficientPermissions"),
            rejected(409, "resourceInUseByAnotherResource"),
        ] {
            assert!(!final_.is_retryable(), "{final_:?}");
        }
    }

    #[test]
    fn refusals_read_as_their_reason_only() {
        let err = ProviderError::Rejected {
            status: 403,
            reason: "insufficientPermissions".into(),
        };
        assert_eq!(
            err.to_string(),
            "the provider refused the request: HTTP 403 (insufficientPermissions)"
        );
        assert_eq!(err.status(), Some(403));
        assert_eq!(ProviderError::AlreadyExists.status(), Some(409));
        assert_eq!(ProviderError::NotFound.status(), Some(404));
    }

    #[test]
    fn status_only_for_status_errors() {
        assert_eq!(ProviderError::Status { status: 503 }.status(), Some(503));
        assert_eq!(ProviderError::Status { status: 401 }.status(), Some(401));
        assert_eq!(ProviderError::Timeout.status(), None);
        assert_eq!(ProviderError::Transport("x".into()).status(), None);
        assert_eq!(ProviderError::NotAllowed("x".into()).status(), None);
    }

    fn access(owner: AccountOwner) -> ProviderAccess {
        ProviderAccess::new(owner, std::sync::Arc::new(ProviderPolicy::default()))
    }

    #[test]
    fn build_a_gce_provider_from_its_stored_config() {
        let stored = serde_json::json!({
            "project": "my-project",
            "endpoint": "https://compute.googleapis.com",
            "credentials": "none",
        });
        let options = gce::GceProviderOptions::default;
        assert!(build("gce", &stored, access(AccountOwner::Tenant), options()).is_ok());
        assert!(build("gce", &stored, access(AccountOwner::Root), options()).is_ok());
        let Err(err) = build("aws", &stored, access(AccountOwner::Root), options()) else {
            panic!("an unknown provider is refused");
        };
        assert_eq!(
            err,
            ProviderError::NotAllowed("unknown provider \"aws\"".into())
        );
        let Err(err) = build("ya29.a b", &stored, access(AccountOwner::Root), options()) else {
            panic!("an unknown provider is refused");
        };
        assert_eq!(err, ProviderError::NotAllowed("unknown provider".into()));
        let bad = serde_json::json!({ "project": "my-project", "credentials": "hunter2" });
        let Err(err) = build("gce", &bad, access(AccountOwner::Root), options()) else {
            panic!("an invalid stored config is refused");
        };
        assert_eq!(
            err.to_string(),
            "not allowed by the provider policy: \
             the stored gce account config is invalid: config.credentials: secret-value"
        );
        assert!(!err.to_string().contains("hunter2"));
    }
}
