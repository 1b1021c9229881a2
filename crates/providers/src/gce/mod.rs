//! The Compute Engine adapter.
//!
//! [`GceConfig::from_json`] validates an account's config; [`GceProvider`]
//! lists the project's reservations with
//! `GET {endpoint}/compute/v1/projects/{project}/aggregated/reservations`,
//! following `nextPageToken` until the last page. Every listing first
//! re-checks the account against the [`ProviderPolicy`] it was built with.

mod config;
mod wire;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderValue};

pub use config::{
    ConfigError, ConfigReason, Credentials, DEFAULT_ENDPOINT, GceConfig, config_schema,
};
pub use wire::{region_of_zone, status_from_gce};

use crate::credentials::{CredentialSource, LocalCredentials};
use crate::guard::{self, GuardedResolver};
use crate::policy::{AccountOwner, ProviderAccess, ProviderPolicy};
use crate::{ProviderError, ProviderFuture, ProviderReservation, ReservationProvider};

/// The provider's name in `providerAccounts.create { provider }`.
pub const PROVIDER_NAME: &str = "gce";

/// A listing never follows more pages than this (500 reservations each by
/// default): a provider that keeps answering tokens is treated as broken.
const MAX_PAGES: usize = 10_000;
/// The largest page body accepted.
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
const USER_AGENT: &str = concat!("bc-compute-providers/", env!("CARGO_PKG_VERSION"));

/// How [`GceProvider`] talks to the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GceProviderOptions {
    /// The limit on establishing a connection, name resolution included
    /// (default 5 s).
    pub connect_timeout: Duration,
    /// The limit on each HTTP request, from sending it to the end of its body
    /// (default 30 s). A listing of several pages makes one request per page.
    pub request_timeout: Duration,
    /// `maxResults` sent with each page request; `None` (the default) leaves
    /// the page size to the API (500 for GCE, which also caps it there).
    pub page_size: Option<u32>,
    /// Static name → addresses answers used instead of DNS for those names
    /// (case-insensitive; default none). For tests and private DNS. They are
    /// not trusted: for a tenant account, the address guard filters them like
    /// any DNS answer, so `evil.example → 127.0.0.1` is still refused.
    pub dns_overrides: BTreeMap<String, Vec<IpAddr>>,
}

impl Default for GceProviderOptions {
    fn default() -> Self {
        GceProviderOptions {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            page_size: None,
            dns_overrides: BTreeMap::new(),
        }
    }
}

/// Lists the reservations of one GCE project.
///
/// Holds no secret: the bearer token is resolved from the config's
/// [`Credentials`] reference at each [`ReservationProvider::list_reservations`]
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
    page_size: Option<u32>,
    client: reqwest::Client,
    list_url: reqwest::Url,
    access: ProviderAccess,
    credentials: Arc<dyn CredentialSource>,
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
        let client = builder
            .build()
            .map_err(|e| ProviderError::Transport(describe(&e)))?;
        if config.endpoint.starts_with("http://") && config.credentials != Credentials::None {
            tracing::warn!(
                endpoint = %config.endpoint,
                "the gce endpoint is plain http: the bearer token travels unencrypted"
            );
        }
        let list_url = reqwest::Url::parse(&format!(
            "{}/compute/v1/projects/{}/aggregated/reservations",
            config.endpoint, config.project
        ))
        .map_err(|_| ProviderError::NotAllowed("config.endpoint: pattern".into()))?;
        let credentials = Arc::new(LocalCredentials::new(Arc::clone(&access.policy)));
        Ok(GceProvider {
            config,
            page_size: options.page_size,
            client,
            list_url,
            access,
            credentials,
        })
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

    async fn list_all(&self) -> Result<Vec<ProviderReservation>, ProviderError> {
        if let Err(e) = self.admit() {
            // The caller logs the error it is handed; this says where it came from.
            tracing::debug!(
                project = %self.config.project,
                error = %e,
                "gce account refused by the provider policy"
            );
            return Err(e);
        }
        let authorization = self.authorization().await?;
        let mut reservations = Vec::new();
        let mut page_token: Option<String> = None;
        for page in 1..=MAX_PAGES {
            let mut request = self
                .client
                .get(self.list_url.clone())
                .header(ACCEPT, "application/json");
            if let Some(size) = self.page_size {
                request = request.query(&[("maxResults", size)]);
            }
            if let Some(token) = &page_token {
                request = request.query(&[("pageToken", token)]);
            }
            if let Some(value) = &authorization {
                request = request.header(AUTHORIZATION, value.clone());
            }
            let response = request.send().await.map_err(from_reqwest)?;
            let status = response.status();
            if !status.is_success() {
                tracing::debug!(
                    project = %self.config.project,
                    page,
                    status = status.as_u16(),
                    "gce list failed"
                );
                return Err(ProviderError::Status {
                    status: status.as_u16(),
                });
            }
            let body = read_body(response).await?;
            let parsed = wire::parse_page(&body, &self.config.project)?;
            reservations.extend(parsed.reservations);
            match parsed.next_page_token {
                None => {
                    tracing::debug!(
                        project = %self.config.project,
                        pages = page,
                        reservations = reservations.len(),
                        "listed gce reservations"
                    );
                    return Ok(reservations);
                }
                Some(next) if page_token.as_deref() == Some(next.as_str()) => {
                    return Err(ProviderError::Malformed(
                        "the provider answered the same page token twice".into(),
                    ));
                }
                Some(next) => page_token = Some(next),
            }
        }
        Err(ProviderError::Malformed(format!(
            "the listing did not end within {MAX_PAGES} pages"
        )))
    }

    /// The `Authorization` header for this call, marked sensitive so that
    /// it is never printed. Errors name the reference, never the token.
    async fn authorization(&self) -> Result<Option<HeaderValue>, ProviderError> {
        let reference = &self.config.credentials;
        let Some(token) = self.credentials.bearer_token(reference).await? else {
            return Ok(None);
        };
        let mut value =
            HeaderValue::from_str(&format!("Bearer {}", token.expose())).map_err(|_| {
                ProviderError::Credentials(format!("{reference} does not hold a bearer token"))
            })?;
        value.set_sensitive(true);
        Ok(Some(value))
    }
}

impl ReservationProvider for GceProvider {
    fn list_reservations(&self) -> ProviderFuture<'_, Vec<ProviderReservation>> {
        Box::pin(self.list_all())
    }
}

async fn read_body(mut response: reqwest::Response) -> Result<Vec<u8>, ProviderError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(from_reqwest)? {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(ProviderError::Malformed(format!(
                "a page is larger than {MAX_BODY_BYTES} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn from_reqwest(e: reqwest::Error) -> ProviderError {
    if let Some(refused) = guard::refusal_in(&e) {
        ProviderError::NotAllowed(refused.to_string())
    } else if e.is_timeout() {
        ProviderError::Timeout
    } else {
        ProviderError::Transport(describe(&e))
    }
}

/// The error and its causes on one line. Request headers (the token) are
/// never part of a reqwest error; the URL is dropped to keep it short.
fn describe(e: &reqwest::Error) -> String {
    let mut text = String::new();
    let mut current: Option<&dyn std::error::Error> = Some(e);
    while let Some(err) = current {
        let part = err.to_string();
        if !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
        current = err.source();
    }
    // reqwest prints "for url (...)"; the endpoint is in the account config.
    match text.find(" for url (") {
        Some(start) => match text[start..].find(')') {
            Some(end) => format!("{}{}", &text[..start], &text[start + end + 1..]),
            None => text,
        },
        None => text,
    }
}

#[cfg(test)]
mod tests;
