#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

use std::fmt;
use std::future::Future;
use std::pin::Pin;

pub mod gce;
mod secret;

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
}

impl ProviderError {
    /// Whether trying again later may succeed without changing anything
    /// (timeouts, transport errors, HTTP 408, 429 and 5xx).
    pub fn is_retryable(&self) -> bool {
        match self {
            ProviderError::Timeout | ProviderError::Transport(_) => true,
            ProviderError::Status { status } => {
                matches!(status, 408 | 429) || (500..=599).contains(status)
            }
            ProviderError::Malformed(_) | ProviderError::Credentials(_) => false,
        }
    }
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
        assert!(ProviderError::Status { status: 503 }.is_retryable());
        assert!(ProviderError::Status { status: 429 }.is_retryable());
        assert!(!ProviderError::Status { status: 403 }.is_retryable());
        assert!(!ProviderError::Malformed("x".into()).is_retryable());
        assert!(!ProviderError::Credentials("x".into()).is_retryable());
    }

    #[test]
    fn trait_is_dyn_compatible() {
        fn takes(_: &std::sync::Arc<dyn ReservationProvider>) {}
        let _ = takes;
    }
}
