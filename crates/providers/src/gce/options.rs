//! How a [`GceProvider`](super::GceProvider) talks to the API: timeouts,
//! page size, name overrides, TLS roots, retries, the token cache and
//! telemetry, from the defaults or the operator's settings.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::auth::{self, TokenCache};

/// How [`GceProvider`](super::GceProvider) talks to the API.
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
