//! What every request to the API shares: the retry policy, `Retry-After`,
//! bounded bodies and errors that name no token.

use std::time::Duration;

use backon::ExponentialBuilder;
use reqwest::header::RETRY_AFTER;

use super::GceProvider;
use crate::ProviderError;
use crate::guard;

/// The largest page body accepted.
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
/// The longest `Retry-After` honoured between two tries of a page.
pub(super) const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// A page request's failure, with the provider's `Retry-After` if it sent one.
pub(super) struct PageError {
    pub(super) error: ProviderError,
    pub(super) retry_after: Option<Duration>,
}

impl From<ProviderError> for PageError {
    fn from(error: ProviderError) -> Self {
        PageError {
            error,
            retry_after: None,
        }
    }
}

impl GceProvider {
    /// How a request answered 429 or 5xx, or not answered, is tried again:
    /// exponential backoff with jitter from `retry_delay`, at most
    /// `retries` more times.
    pub(super) fn backoff(&self) -> ExponentialBuilder {
        ExponentialBuilder::default()
            .with_min_delay(self.options.retry_delay)
            .with_max_delay(MAX_RETRY_AFTER)
            .with_max_times(self.options.retries)
            .with_jitter()
    }
}

/// The `Retry-After` of a refusal, in seconds (the HTTP-date form is not
/// used by Google's APIs).
pub(super) fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

pub(super) async fn read_body(mut response: reqwest::Response) -> Result<Vec<u8>, ProviderError> {
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
pub(super) fn describe(e: &reqwest::Error) -> String {
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
