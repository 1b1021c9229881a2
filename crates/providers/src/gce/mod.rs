//! The Compute Engine adapter.
//!
//! [`GceConfig::from_json`] validates an account's config; [`GceProvider`]
//! lists the project's reservations with
//! `GET {endpoint}/compute/v1/projects/{project}/aggregated/reservations`,
//! following `nextPageToken` until the last page, and drives the account's
//! managed instances ([`crate::InstanceProvider`], `instances.rs`). Every
//! call first re-checks the account against the [`ProviderPolicy`] it was
//! built with.

mod config;
mod instances;
mod vm_wire;
mod wire;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderValue, RETRY_AFTER};

pub use config::{
    ConfigError, ConfigReason, Credentials, DEFAULT_ENDPOINT, GceConfig, config_schema,
};
pub use wire::{region_of_zone, status_from_gce};

use crate::auth::{self, ResolvedSecret, TOKEN_SCOPE, TokenCache};
use crate::credentials::{BearerToken, LocalCredentials, Material};
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
/// The longest `Retry-After` honoured between two tries of a page.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// How [`GceProvider`] talks to the API.
#[derive(Debug, Clone)]
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
    /// PEM certificates trusted besides the Mozilla roots
    /// (`BC_PROVIDER_CA_FILE`; default none).
    pub extra_roots: Vec<reqwest::Certificate>,
    /// How often a request (a page, an instance call) answered 429 or 5xx,
    /// or not answered, is tried again before the call fails (default 3).
    pub retries: usize,
    /// The first wait between two tries; it doubles each time, with jitter
    /// (default 500 ms). A `Retry-After` (up to 30 s) replaces it.
    pub retry_delay: Duration,
    /// The metadata server's host for `adc` (`GCE_METADATA_HOST`, default
    /// `metadata.google.internal`).
    pub metadata_host: String,
    /// Access tokens, shared by every adapter built with these options.
    pub token_cache: Arc<TokenCache>,
    /// Where the adapter reports its requests (the worker's metrics; none
    /// by default).
    pub telemetry: Option<Arc<dyn ProviderTelemetry>>,
}

/// What an adapter reports about its calls to the provider, for metrics.
pub trait ProviderTelemetry: Send + Sync + std::fmt::Debug {
    /// One HTTP request answered `status` (`None`: no answer: a timeout, a
    /// refused connection) after `elapsed`.
    fn request(&self, status: Option<u16>, elapsed: Duration);
    /// One page of a listing read in full.
    fn page(&self);
    /// An access token obtained (a key exchanged, or the metadata server
    /// asked), not taken from the cache.
    fn token_refresh(&self);
}

impl Default for GceProviderOptions {
    fn default() -> Self {
        GceProviderOptions {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            page_size: None,
            dns_overrides: BTreeMap::new(),
            extra_roots: Vec::new(),
            retries: 3,
            retry_delay: Duration::from_millis(500),
            metadata_host: auth::DEFAULT_METADATA_HOST.to_owned(),
            token_cache: Arc::new(TokenCache::default()),
            telemetry: None,
        }
    }
}

impl GceProviderOptions {
    /// The defaults with what the process environment sets:
    /// `BC_PROVIDER_CA_FILE` (PEM certificates added to the roots),
    /// `BC_PROVIDER_RETRY_DELAY_MS` (the first wait between tries) and
    /// `GCE_METADATA_HOST`. A CA file that cannot be read or holds no
    /// certificate is an error naming the variable.
    pub fn from_env() -> Result<GceProviderOptions, String> {
        let var = |name: &str| std::env::var(name).ok();
        let retry_delay = match var("BC_PROVIDER_RETRY_DELAY_MS") {
            Some(ms) if !ms.trim().is_empty() => Some(
                ms.trim()
                    .parse()
                    .ok()
                    .filter(|ms| *ms <= 60_000)
                    .map(Duration::from_millis)
                    .ok_or("BC_PROVIDER_RETRY_DELAY_MS must be milliseconds from 0 to 60000")?,
            ),
            _ => None,
        };
        GceProviderOptions::from_settings(
            var("BC_PROVIDER_CA_FILE").as_deref(),
            retry_delay,
            var("GCE_METADATA_HOST").as_deref(),
        )
    }

    /// The defaults with the operator's settings, already read: `ca_file`
    /// (`BC_PROVIDER_CA_FILE`, PEM certificates added to the roots),
    /// `retry_delay` (`BC_PROVIDER_RETRY_DELAY_MS`, the first wait between
    /// tries) and `metadata_host` (`GCE_METADATA_HOST`); a blank path or host
    /// is unset. A CA file that cannot be read or holds no certificate is an
    /// error naming the variable.
    pub fn from_settings(
        ca_file: Option<&str>,
        retry_delay: Option<Duration>,
        metadata_host: Option<&str>,
    ) -> Result<GceProviderOptions, String> {
        let mut options = GceProviderOptions::default();
        if let Some(path) = ca_file.map(str::trim).filter(|p| !p.is_empty()) {
            let pem = std::fs::read(path)
                .map_err(|e| format!("BC_PROVIDER_CA_FILE cannot be read: {e}"))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| format!("BC_PROVIDER_CA_FILE is not PEM certificates: {e}"))?;
            if certs.is_empty() {
                return Err("BC_PROVIDER_CA_FILE holds no certificate".into());
            }
            options.extra_roots = certs;
        }
        if let Some(delay) = retry_delay {
            options.retry_delay = delay;
        }
        if let Some(host) = metadata_host.map(str::trim).filter(|h| !h.is_empty()) {
            options.metadata_host = host.to_owned();
        }
        Ok(options)
    }
}

/// A page request's failure, with the provider's `Retry-After` if it sent one.
struct PageError {
    error: ProviderError,
    retry_after: Option<Duration>,
}

impl From<ProviderError> for PageError {
    fn from(error: ProviderError) -> Self {
        PageError {
            error,
            retry_after: None,
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
            .map_err(|e| ProviderError::Transport(describe(&e)))?;
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
        let material = self
            .credentials
            .material(&self.config.credentials, self.secret.as_ref())?;
        let mut authorization = self.authorization(&material, TOKEN_SCOPE, false).await?;
        let mut refreshed = false;
        let mut reservations = Vec::new();
        let mut page_token: Option<String> = None;
        let mut page = 0;
        while page < MAX_PAGES {
            let body = match self.fetch_page(page_token.as_deref(), &authorization).await {
                Err(ProviderError::Status { status: 401 })
                    if !refreshed
                        && matches!(material, Material::Key { .. } | Material::Metadata) =>
                {
                    // A token revoked or expired early: drop it, take a fresh
                    // one and ask for this page once more.
                    tracing::info!(
                        project = %self.config.project,
                        "gce answered 401: refreshing the access token once"
                    );
                    refreshed = true;
                    authorization = self.authorization(&material, TOKEN_SCOPE, true).await?;
                    continue;
                }
                other => other?,
            };
            page += 1;
            let parsed = wire::parse_page(&body, &self.config.project)?;
            reservations.extend(parsed.reservations);
            match next_page(page_token.as_deref(), parsed.next_page_token)? {
                None => {
                    tracing::debug!(
                        project = %self.config.project,
                        pages = page,
                        reservations = reservations.len(),
                        "listed gce reservations"
                    );
                    return Ok(reservations);
                }
                next => page_token = next,
            }
        }
        Err(ProviderError::Malformed(format!(
            "the listing did not end within {MAX_PAGES} pages"
        )))
    }

    /// One page, tried again on 429, 5xx and transport errors with
    /// exponential backoff and jitter (a `Retry-After` up to 30 s replaces
    /// the wait). Pages already read are never asked for again.
    async fn fetch_page(
        &self,
        page_token: Option<&str>,
        authorization: &Option<HeaderValue>,
    ) -> Result<Vec<u8>, ProviderError> {
        let once = || self.fetch_page_once(page_token, authorization);
        once.retry(self.backoff())
            .when(|e: &PageError| e.error.is_retryable() && e.error.status() != Some(408))
            .adjust(|e: &PageError, wait| {
                wait.map(|w| e.retry_after.map_or(w, |r| r.min(MAX_RETRY_AFTER)))
            })
            .notify(|e: &PageError, wait| {
                tracing::info!(
                    project = %self.config.project,
                    error = %e.error,
                    wait_ms = wait.as_millis() as u64,
                    "gce page request failed: trying again"
                );
            })
            .await
            .map_err(|e| e.error)
    }

    async fn fetch_page_once(
        &self,
        page_token: Option<&str>,
        authorization: &Option<HeaderValue>,
    ) -> Result<Vec<u8>, PageError> {
        let mut request = self
            .client
            .get(self.list_url.clone())
            .header(ACCEPT, "application/json");
        if let Some(size) = self.options.page_size {
            request = request.query(&[("maxResults", size)]);
        }
        if let Some(token) = page_token {
            request = request.query(&[("pageToken", token)]);
        }
        if let Some(value) = authorization {
            request = request.header(AUTHORIZATION, value.clone());
        }
        let started = std::time::Instant::now();
        let sent = request.send().await;
        let telemetry = self.options.telemetry.as_deref();
        if let Some(t) = telemetry {
            t.request(
                sent.as_ref().ok().map(|r| r.status().as_u16()),
                started.elapsed(),
            );
        }
        let response = sent.map_err(from_reqwest)?;
        let status = response.status();
        if !status.is_success() {
            tracing::debug!(
                project = %self.config.project,
                status = status.as_u16(),
                "gce list failed"
            );
            let retry_after = retry_after(&response);
            return Err(PageError {
                error: ProviderError::Status {
                    status: status.as_u16(),
                },
                retry_after,
            });
        }
        let body = read_body(response).await?;
        if let Some(t) = telemetry {
            t.page();
        }
        Ok(body)
    }

    /// How a request answered 429 or 5xx, or not answered, is tried again:
    /// exponential backoff with jitter from `retry_delay`, at most
    /// `retries` more times.
    fn backoff(&self) -> ExponentialBuilder {
        ExponentialBuilder::default()
            .with_min_delay(self.options.retry_delay)
            .with_max_delay(MAX_RETRY_AFTER)
            .with_max_times(self.options.retries)
            .with_jitter()
    }

    /// The bearer token of `material`: as it is, or an access token of
    /// `scope` from the cache or freshly asked for (`fresh`: the cached one
    /// was refused).
    async fn token(
        &self,
        material: &Material,
        scope: &str,
        fresh: bool,
    ) -> Result<Option<BearerToken>, ProviderError> {
        let cache = &self.options.token_cache;
        let (fingerprint, key) = match material {
            Material::None => return Ok(None),
            Material::Static(token) => return Ok(Some(token.clone())),
            Material::Key { key, fingerprint } => (fingerprint.as_str(), Some(key)),
            Material::Metadata => ("metadata", None),
        };
        if fresh {
            cache.forget(&self.account_id, fingerprint, scope);
        } else if let Some(token) = cache.get(&self.account_id, fingerprint, scope) {
            return Ok(Some(token));
        }
        let (token, expires_in) = match key {
            Some(key) => {
                self.admit_token_uri(&key.token_uri)?;
                auth::exchange(&self.client, key, scope).await?
            }
            None => auth::metadata_token(&self.client, &self.options.metadata_host, scope).await?,
        };
        tracing::info!(
            project = %self.config.project,
            account = %self.account_id,
            scope,
            expires_in,
            "gce access token obtained"
        );
        if let Some(t) = self.options.telemetry.as_deref() {
            t.token_refresh();
        }
        cache.put(&self.account_id, fingerprint, scope, &token, expires_in);
        Ok(Some(BearerToken::new(token)))
    }

    /// A tenant's key may send its assertion only where its endpoint could go
    /// (contract 3.5): Google's token endpoint or a listed origin, never an
    /// internal address (the client's guard refuses those at connect time).
    fn admit_token_uri(&self, token_uri: &str) -> Result<(), ProviderError> {
        let policy: &ProviderPolicy = &self.access.policy;
        policy
            .check_token_uri(token_uri, self.access.owner)
            .map_err(|e| {
                let why = e.message.unwrap_or_else(|| e.reason.to_string());
                ProviderError::NotAllowed(format!("the key's token_uri is not allowed: {why}"))
            })?;
        if self.access.owner == AccountOwner::Tenant {
            let url = reqwest::Url::parse(token_uri)
                .map_err(|_| ProviderError::NotAllowed("token_uri: not a URL".into()))?;
            guard::check_ip_literal(&url, policy)?;
        }
        Ok(())
    }

    /// The header a listing would send now (tests).
    #[cfg(test)]
    async fn current_authorization(&self) -> Result<Option<HeaderValue>, ProviderError> {
        let material = self
            .credentials
            .material(&self.config.credentials, self.secret.as_ref())?;
        self.authorization(&material, TOKEN_SCOPE, false).await
    }

    /// The `Authorization` header for a call needing `scope`, marked
    /// sensitive so that it is never printed. Errors name the reference,
    /// never the token.
    async fn authorization(
        &self,
        material: &Material,
        scope: &str,
        fresh: bool,
    ) -> Result<Option<HeaderValue>, ProviderError> {
        let reference = &self.config.credentials;
        let Some(token) = self.token(material, scope, fresh).await? else {
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

/// The `Retry-After` of a refusal, in seconds (the HTTP-date form is not
/// used by Google's APIs).
fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
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

pub(crate) fn from_reqwest(e: reqwest::Error) -> ProviderError {
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

/// The page token to ask for next after a page answered `next` for
/// `current`: `None` when the listing is complete; an answer repeating the
/// token it was asked with is malformed (it would never end).
pub(crate) fn next_page(
    current: Option<&str>,
    next: Option<String>,
) -> Result<Option<String>, ProviderError> {
    match next {
        Some(next) if current == Some(next.as_str()) => Err(ProviderError::Malformed(
            "the provider answered the same page token twice".into(),
        )),
        next => Ok(next),
    }
}

#[cfg(test)]
mod tests;
