//! The Compute Engine adapter.
//!
//! [`GceConfig::from_json`] validates an account's config; [`GceProvider`]
//! lists the project's reservations with
//! `GET {endpoint}/compute/v1/projects/{project}/aggregated/reservations`,
//! following `nextPageToken` until the last page.

mod config;
mod wire;

use std::time::Duration;

use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderValue};

pub use config::{
    ConfigError, ConfigReason, Credentials, DEFAULT_ENDPOINT, GceConfig, config_schema,
};
pub use wire::{region_of_zone, status_from_gce};

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
    /// The limit on establishing a connection (default 5 s).
    pub connect_timeout: Duration,
    /// The limit on each HTTP request, from sending it to the end of its body
    /// (default 30 s). A listing of several pages makes one request per page.
    pub request_timeout: Duration,
    /// `maxResults` sent with each page request; `None` (the default) leaves
    /// the page size to the API (500 for GCE, which also caps it there).
    pub page_size: Option<u32>,
}

impl Default for GceProviderOptions {
    fn default() -> Self {
        GceProviderOptions {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            page_size: None,
        }
    }
}

/// Lists the reservations of one GCE project.
///
/// Holds no secret: the bearer token is resolved from the config's
/// [`Credentials`] reference at each [`ReservationProvider::list_reservations`]
/// call, so a rotated token is picked up without rebuilding the provider.
/// Cloning is cheap and shares the connection pool.
#[derive(Debug, Clone)]
pub struct GceProvider {
    config: GceConfig,
    page_size: Option<u32>,
    client: reqwest::Client,
    list_url: String,
}

impl GceProvider {
    /// Builds the adapter. Fails only if the HTTP client cannot be set up.
    pub fn new(config: GceConfig, options: GceProviderOptions) -> Result<Self, ProviderError> {
        let client = reqwest::Client::builder()
            .connect_timeout(options.connect_timeout)
            .timeout(options.request_timeout)
            .user_agent(USER_AGENT)
            // GCE does not redirect API calls; never carry a token elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ProviderError::Transport(describe(&e)))?;
        if config.endpoint.starts_with("http://") && config.credentials != Credentials::None {
            tracing::warn!(
                endpoint = %config.endpoint,
                "the gce endpoint is plain http: the bearer token travels unencrypted"
            );
        }
        let list_url = format!(
            "{}/compute/v1/projects/{}/aggregated/reservations",
            config.endpoint, config.project
        );
        Ok(GceProvider {
            config,
            page_size: options.page_size,
            client,
            list_url,
        })
    }

    /// The account config this adapter was built from.
    pub fn config(&self) -> &GceConfig {
        &self.config
    }

    async fn list_all(&self) -> Result<Vec<ProviderReservation>, ProviderError> {
        let authorization = self.authorization()?;
        let mut reservations = Vec::new();
        let mut page_token: Option<String> = None;
        for page in 1..=MAX_PAGES {
            let mut request = self
                .client
                .get(&self.list_url)
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
                tracing::debug!(project = %self.config.project, page, status = status.as_u16(), "gce list failed");
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
    fn authorization(&self) -> Result<Option<HeaderValue>, ProviderError> {
        let reference = &self.config.credentials;
        let token = match reference {
            Credentials::None => return Ok(None),
            Credentials::Env(name) => std::env::var(name).map_err(|e| {
                let why = match e {
                    std::env::VarError::NotPresent => "is not set",
                    std::env::VarError::NotUnicode(_) => "is not valid UTF-8",
                };
                ProviderError::Credentials(format!("environment variable {name} {why}"))
            })?,
            // A small local file (a mounted secret); read at each call so that
            // rotation needs no restart.
            Credentials::File(path) => std::fs::read_to_string(path).map_err(|e| {
                ProviderError::Credentials(format!(
                    "cannot read token file {}: {}",
                    path.display(),
                    e.kind()
                ))
            })?,
        };
        let token = token.trim();
        if token.is_empty() {
            return Err(ProviderError::Credentials(format!(
                "{reference} holds an empty token"
            )));
        }
        let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
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
    if e.is_timeout() {
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
mod tests {
    use super::*;

    fn provider_at(endpoint: &str, credentials: Credentials) -> GceProvider {
        GceProvider::new(
            GceConfig {
                project: "my-project".into(),
                endpoint: endpoint.into(),
                credentials,
            },
            GceProviderOptions::default(),
        )
        .expect("client")
    }

    fn provider(credentials: Credentials) -> GceProvider {
        provider_at("http://127.0.0.1:9", credentials)
    }

    #[test]
    fn defaults() {
        let o = GceProviderOptions::default();
        assert_eq!(o.connect_timeout, Duration::from_secs(5));
        assert_eq!(o.request_timeout, Duration::from_secs(30));
        assert_eq!(o.page_size, None);
        assert_eq!(
            provider(Credentials::None).list_url,
            "http://127.0.0.1:9/compute/v1/projects/my-project/aggregated/reservations"
        );
    }

    #[test]
    fn no_credentials_no_header() {
        assert_eq!(provider(Credentials::None).authorization(), Ok(None));
    }

    #[test]
    fn token_from_a_file_is_sensitive_and_trimmed() {
        let path = std::env::temp_dir().join(format!("providers-token-{}", std::process::id()));
        std::fs::write(&path, "tok-123\n").expect("write");
        let value = provider(Credentials::File(path.clone()))
            .authorization()
            .expect("token")
            .expect("header");
        assert_eq!(value.to_str().expect("ascii"), "Bearer tok-123");
        assert!(value.is_sensitive());
        assert!(!format!("{value:?}").contains("tok-123"));

        std::fs::write(&path, "line one\nline two").expect("write");
        let err = provider(Credentials::File(path.clone()))
            .authorization()
            .expect_err("not a token");
        assert!(!err.to_string().contains("line"), "{err}");
        std::fs::write(&path, "  \n").expect("write");
        assert!(matches!(
            provider(Credentials::File(path.clone())).authorization(),
            Err(ProviderError::Credentials(_))
        ));
        std::fs::remove_file(&path).expect("remove");
        let err = provider(Credentials::File(path.clone()))
            .authorization()
            .expect_err("missing");
        assert!(err.to_string().contains("cannot read token file"), "{err}");
    }

    #[test]
    fn missing_env_var_is_a_credentials_error() {
        let err = provider(Credentials::Env("PROVIDERS_TEST_SURELY_UNSET_TOKEN".into()))
            .authorization()
            .expect_err("unset");
        assert_eq!(
            err,
            ProviderError::Credentials(
                "environment variable PROVIDERS_TEST_SURELY_UNSET_TOKEN is not set".into()
            )
        );
    }

    #[tokio::test]
    async fn unreachable_endpoint_is_a_transport_error() {
        // A port that was just free: connecting to it is refused.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind")
            .port();
        let err = provider_at(&format!("http://127.0.0.1:{port}"), Credentials::None)
            .list_reservations()
            .await
            .expect_err("nothing listens");
        match err {
            ProviderError::Transport(m) => assert!(!m.contains("for url"), "{m}"),
            other => panic!("expected a transport error, got {other:?}"),
        }
    }
}
