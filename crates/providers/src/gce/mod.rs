//! The Compute Engine adapter.
//!
//! [`GceConfig::from_json`] validates an account's config; [`GceProvider`]
//! lists the project's reservations with
//! `GET {endpoint}/compute/v1/projects/{project}/aggregated/reservations`,
//! following `nextPageToken` until the last page, and drives the account's
//! managed instances ([`crate::InstanceProvider`], `instances.rs`). Every
//! call first re-checks the account against the [`ProviderPolicy`] it was
//! built with.

mod calls;
mod config;
mod http;
mod instances;
mod options;
mod paging;
mod reservations;
mod token;
mod vm_wire;
mod wire;

use std::sync::Arc;

pub use config::{
    ConfigError, ConfigReason, Credentials, DEFAULT_ENDPOINT, GceConfig, config_schema,
};
pub(crate) use http::from_reqwest;
pub use options::{GceProviderOptions, ProviderTelemetry};
pub use wire::{region_of_zone, status_from_gce};

use crate::ProviderError;
use crate::auth::ResolvedSecret;
use crate::credentials::LocalCredentials;
use crate::guard::{self, GuardedResolver};
use crate::policy::{AccountOwner, ProviderAccess, ProviderPolicy};

/// The provider's name in `providerAccounts.create { provider }`.
pub const PROVIDER_NAME: &str = "gce";

const USER_AGENT: &str = concat!("bc-compute-providers/", env!("CARGO_PKG_VERSION"));

/// Lists the reservations of one GCE project.
///
/// Holds no secret: the bearer token is resolved from the config's
/// [`Credentials`] reference at each [`crate::ReservationProvider::list_reservations`]
/// call, so a rotated token is picked up without rebuilding the provider.
/// Each call first re-runs [`ProviderPolicy::check`] for the account's
/// owner: a reference or endpoint the policy no longer allows fails with
/// [`ProviderError::NotAllowed`] before any file, variable or network is
/// touched. For a tenant account the HTTP client ignores environment
/// proxies and refuses internal addresses (see the crate docs).
/// Cloning is cheap and shares the connection pool.
#[derive(Debug, Clone)]
pub struct GceProvider {
    config: GceConfig,
    options: GceProviderOptions,
    client: reqwest::Client,
    list_url: reqwest::Url,
    /// `{endpoint}/compute/v1/projects/{project}`: the instance calls'
    /// paths are appended to it segment by segment.
    project_url: reqwest::Url,
    access: ProviderAccess,
    credentials: LocalCredentials,
    account_id: String,
    secret: Option<ResolvedSecret>,
}

impl GceProvider {
    /// Builds the adapter for an account of `access.owner`. Fails only if the
    /// endpoint is not a URL or the HTTP client cannot be set up; the policy
    /// is applied at each call, not here.
    pub fn new(
        config: GceConfig,
        options: GceProviderOptions,
        access: ProviderAccess,
    ) -> Result<Self, ProviderError> {
        let tenant = access.owner == AccountOwner::Tenant;
        let resolver = GuardedResolver::new(
            tenant.then(|| Arc::clone(&access.policy)),
            &options.dns_overrides,
        );
        let mut builder = reqwest::Client::builder()
            .connect_timeout(options.connect_timeout)
            .timeout(options.request_timeout)
            .user_agent(USER_AGENT)
            // GCE does not redirect API calls; never carry a token elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(resolver));
        if tenant {
            // A proxy would connect on the client's behalf, past the guard.
            builder = builder.no_proxy();
        }
        for root in &options.extra_roots {
            builder = builder.add_root_certificate(root.clone());
        }
        let client = builder
            .build()
            .map_err(|e| ProviderError::Transport(http::describe(&e)))?;
        if config.endpoint.starts_with("http://") && config.credentials != Credentials::None {
            tracing::warn!(
                endpoint = %config.endpoint,
                "the gce endpoint is plain http: the bearer token travels unencrypted"
            );
        }
        let project_url = reqwest::Url::parse(&format!(
            "{}/compute/v1/projects/{}",
            config.endpoint, config.project
        ))
        .ok()
        .filter(|url| !url.cannot_be_a_base())
        .ok_or_else(|| ProviderError::NotAllowed("config.endpoint: pattern".into()))?;
        let list_url = reqwest::Url::parse(&format!(
            "{}/compute/v1/projects/{}/aggregated/reservations",
            config.endpoint, config.project
        ))
        .map_err(|_| ProviderError::NotAllowed("config.endpoint: pattern".into()))?;
        let credentials = LocalCredentials::new(Arc::clone(&access.policy));
        Ok(GceProvider {
            config,
            options,
            client,
            list_url,
            project_url,
            access,
            credentials,
            account_id: String::new(),
            secret: None,
        })
    }

    /// The same adapter for the account `account_id` (the token cache's
    /// key), with its `secret:NAME` resolved, if that is its reference.
    pub fn for_account(mut self, account_id: &str, secret: Option<ResolvedSecret>) -> Self {
        self.account_id = account_id.to_owned();
        self.secret = secret;
        self
    }

    /// The account config this adapter was built from.
    pub fn config(&self) -> &GceConfig {
        &self.config
    }

    /// Whose account it is and the policy applied at each call.
    pub fn access(&self) -> &ProviderAccess {
        &self.access
    }

    /// The policy check and the IP-literal guard: everything that must pass
    /// before a credential is read or a connection made.
    fn admit(&self) -> Result<(), ProviderError> {
        let policy: &ProviderPolicy = &self.access.policy;
        policy
            .check(&self.config, self.access.owner)
            .map_err(|e| ProviderError::NotAllowed(e.to_string()))?;
        if self.access.owner == AccountOwner::Tenant {
            guard::check_ip_literal(&self.list_url, policy)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
