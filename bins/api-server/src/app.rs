//! Shared state of the server and helpers handlers use.

use crate::error::ApiError;
use iam_check::{Decision, RootOption};
use storage::Clock;
use storage::db::{Conn, DbPool};
use storage::ids::TenantId;
use storage::model::idempotency::{Created, KeyedRequest};

use crate::metrics::Metrics;
use crate::registry::{Call, Registry};

/// Process-wide state.
pub struct App {
    /// Connection pool.
    pub pool: DbPool,
    /// Where "now" comes from.
    pub clock: Clock,
    /// The root tenant's id.
    pub root_tenant: storage::ids::TenantId,
    /// The method registry.
    pub registry: Registry,
    /// Request metrics.
    pub metrics: Metrics,
    /// Whether `/metrics` is served on its own listener
    /// (`BC_METRICS_LISTEN`) and so not on the API's.
    pub metrics_elsewhere: bool,
    /// What provider accounts may reach (contract 3.5).
    pub provider_policy: std::sync::Arc<providers::policy::ProviderPolicy>,
    /// Builds the provider adapter of an account, under the server's
    /// provider policy (contract 3.5).
    pub providers: std::sync::Arc<providers::ProviderFactory>,
    /// The secret store's keys (contract 3.9).
    pub keyring: storage::crypto::Keyring,
    /// Seals `usage.list` cursors (contract 1.6).
    pub cursors: storage::cursor::CursorSealer,
    /// `BC_MAX_ACCOUNTS_PER_TENANT` (contract 1.7).
    pub max_accounts_per_tenant: i64,
    /// `BC_WEBHOOK_ENDPOINTS` (contract 3.13).
    pub webhook_endpoints: providers::Origins,
    /// `BC_SCAN_TIMEOUT_MS`: an explicit scan's limit on its listing.
    pub scan_timeout: std::time::Duration,
    /// Explicit scans in flight per tenant (`gate::MAX_SCANS_PER_TENANT`).
    pub scans: crate::gate::TenantGate,
    /// The HTTP limits in force (contract 1.7), the connection cap fitted
    /// to the file descriptor limit.
    pub http: crate::server::Limits,
    /// The request rates' buckets (contract 1.7 r4).
    pub rates: crate::rate::Limiter,
}

impl App {
    /// A pooled connection (`UNAVAILABLE` when the database is unreachable).
    pub async fn conn(&self) -> Result<Conn, ApiError> {
        let started = std::time::Instant::now();
        let conn = self.pool.get().await;
        self.metrics.waited_for_connection(started.elapsed());
        Ok(conn.map_err(storage::StorageError::from)?)
    }
}

impl Call {
    /// The acting tenant (`tenantId`).
    pub fn tenant(&self) -> &TenantId {
        self.actor.tenant()
    }

    /// The root tenant's id.
    pub fn root(&self) -> &TenantId {
        self.actor.root()
    }

    /// Allows an input option reserved to the root tenant, or answers
    /// `ACCESS_DENIED` (decided by `iam-check`).
    pub fn allow(&self, option: RootOption) -> Result<(), ApiError> {
        match iam_check::decide_option(self.tenant().as_str(), self.root().as_str(), option) {
            Decision::Allow => Ok(()),
            Decision::Deny(reason) => {
                self.app.metrics.denied(reason.class());
                Err(ApiError::access_denied(reason.to_string()))
            }
        }
    }

    /// A connection: the one the request authenticated on, the first time
    /// (no second checkout), then a new one from the pool.
    pub async fn conn(&self) -> Result<Conn, ApiError> {
        let held = self.held.lock().ok().and_then(|mut held| held.take());
        match held {
            Some(conn) => Ok(conn),
            None => self.app.conn().await,
        }
    }

    /// Gives the connection the request authenticated on back to the pool,
    /// before a handler waits on something slow (a provider).
    pub fn release_conn(&self) {
        drop(self.held.lock().ok().and_then(|mut held| held.take()));
    }

    /// A connection and the request's instant (read with the
    /// authentication, in the same round trip).
    pub async fn conn_now(&self) -> Result<(Conn, i64), ApiError> {
        Ok((self.conn().await?, self.now))
    }

    /// The object a creating operation answered; a replay is marked for
    /// the audit trail (`replayed`).
    pub fn created<T>(&self, created: Created<T>) -> T {
        self.audit.set_replayed(created.replayed);
        created.value
    }

    /// The idempotency identity of this (creating) request.
    pub fn request_hash(&self) -> Vec<u8> {
        storage::ids::request_hash(&self.input)
    }

    /// The client's idempotency `key` for this request of the acting tenant,
    /// with the request's `hash` ([`Call::request_hash`]).
    pub fn keyed<'a>(&'a self, key: &'a str, hash: &'a [u8]) -> KeyedRequest<'a> {
        KeyedRequest {
            tenant_id: self.tenant().as_str(),
            method: &self.name,
            key,
            request_hash: hash,
        }
    }
}
