//! The HTTP client: `POST {endpoint}/api/compute/{module}/{method}` with
//! the key as a bearer token and the acting tenant as `tenantId`.
//!
//! It follows no redirect: a 307 or 308 would have the request's body (a
//! secret's value for `secrets put`) sent again to wherever the `Location`
//! points, so a 3xx answer is reported as an error naming its status and
//! `Location` instead.
//!
//! A request refused `RATE_LIMITED` was not performed (contract 1.7 r4): it
//! is sent again after the wait the server named (`details.retryAfterMs`),
//! at most [`RATE_RETRIES`] times, each retry said on standard error.

use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::config::Target;
use crate::exit::Failure;

/// How often a request refused `RATE_LIMITED` is sent again.
pub const RATE_RETRIES: u32 = 5;

/// The longest wait for one retry, whatever the server asks.
const LONGEST_WAIT: Duration = Duration::from_secs(60);

/// A client of one api-server as one tenant.
pub struct Client {
    http: reqwest::Client,
    target: Target,
    verbose: bool,
}

impl Client {
    /// A client for `target`; `verbose` logs each call on standard error.
    pub fn new(target: Target, verbose: bool) -> Result<Client, Failure> {
        let http = reqwest::Client::builder()
            .user_agent(concat!("bcctl/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| Failure::Unexpected(e.to_string()))?;
        Ok(Client {
            http,
            target,
            verbose,
        })
    }

    /// The acting tenant.
    pub fn tenant(&self) -> &str {
        &self.target.tenant
    }

    /// Calls `module.method` with `body` (its `tenantId` defaults to the
    /// acting tenant) and returns the answer.
    pub async fn call(&self, method: &str, mut body: Map<String, Value>) -> Result<Value, Failure> {
        let (module, name) = method
            .split_once('.')
            .ok_or_else(|| crate::exit::usage(format!("{method:?} is not module.method")))?;
        body.entry("tenantId")
            .or_insert_with(|| json!(self.target.tenant));
        if self.verbose {
            let key = body.get("idempotencyKey").and_then(Value::as_str);
            eprintln!(
                "bcctl: {method} as {}{}",
                self.target.tenant,
                key.map(|k| format!(" (idempotencyKey {k})"))
                    .unwrap_or_default()
            );
        }
        let url = format!("{}/api/compute/{module}/{name}", self.target.endpoint);
        let body = Value::Object(body);
        self.send(method, &url, || {
            self.http
                .post(&url)
                .bearer_auth(&self.target.token)
                .json(&body)
        })
        .await
    }

    /// Sends the request `build` makes, again after a `RATE_LIMITED`
    /// refusal's wait (at most [`RATE_RETRIES`] times); its answer.
    async fn send(
        &self,
        what: &str,
        url: &str,
        build: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<Value, Failure> {
        let mut retries = 0;
        loop {
            let answer = build()
                .send()
                .await
                .map_err(|e| Failure::Unreachable(format!("{url}: {e}")))?;
            match read(answer).await {
                Err(Failure::Api { code, details, .. })
                    if code == "RATE_LIMITED" && retries < RATE_RETRIES =>
                {
                    retries += 1;
                    let wait = details
                        .get("retryAfterMs")
                        .and_then(Value::as_u64)
                        .map_or(Duration::from_secs(1), Duration::from_millis)
                        .min(LONGEST_WAIT);
                    eprintln!(
                        "bcctl: {what}: the server's request rate is spent; \
                         sending again in {} ms (retry {retries} of {RATE_RETRIES})",
                        wait.as_millis()
                    );
                    tokio::time::sleep(wait).await;
                }
                other => return other,
            }
        }
    }

    /// `GET {endpoint}{path}` (the method list, the OpenAPI document).
    pub async fn get(&self, path: &str) -> Result<Value, Failure> {
        let url = format!("{}{path}", self.target.endpoint);
        self.send(path, &url, || {
            self.http.get(&url).bearer_auth(&self.target.token)
        })
        .await
    }

    /// Every item of a paged list (`items`, `nextCursor`, `hasMore`).
    pub async fn list_all(
        &self,
        method: &str,
        body: Map<String, Value>,
    ) -> Result<Vec<Value>, Failure> {
        let mut out = Vec::new();
        let mut body = body;
        body.insert("limit".into(), json!(1000));
        loop {
            let page = self.call(method, body.clone()).await?;
            out.extend(
                page.get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
            );
            match (
                page.get("hasMore").and_then(Value::as_bool),
                page.get("nextCursor").and_then(Value::as_str),
            ) {
                (Some(true), Some(next)) => {
                    body.insert("after".into(), json!(next));
                }
                _ => return Ok(out),
            }
        }
    }

    /// The server's now (its manual clock in tests and demos).
    pub async fn now(&self) -> Result<i64, Failure> {
        let clock = self.call("clock.get", Map::new()).await?;
        clock
            .get("now")
            .and_then(Value::as_i64)
            .ok_or_else(|| Failure::Unexpected(format!("clock.get answered {clock}")))
    }
}

async fn read(answer: reqwest::Response) -> Result<Value, Failure> {
    if answer.status().is_redirection() {
        return Err(redirected(&answer));
    }
    let status = answer.status().as_u16();
    let text = answer
        .text()
        .await
        .map_err(|e| Failure::Unreachable(e.to_string()))?;
    let value: Value = serde_json::from_str(&text).map_err(|_| {
        Failure::Unexpected(format!(
            "HTTP {status}: not JSON: {}",
            text.chars().take(200).collect::<String>()
        ))
    })?;
    if (200..300).contains(&status) {
        return Ok(value);
    }
    let e = |key: &str| value.get("error").and_then(|e| e.get(key));
    Err(Failure::Api {
        status,
        code: e("code")
            .and_then(Value::as_str)
            .unwrap_or("INTERNAL")
            .to_owned(),
        message: e("message")
            .and_then(Value::as_str)
            .unwrap_or("no message")
            .to_owned(),
        details: e("details").cloned().unwrap_or_else(|| json!({})),
    })
}

/// The failure of a request answered with a redirect, which bcctl does not
/// follow.
fn redirected(answer: &reqwest::Response) -> Failure {
    let location = answer
        .headers()
        .get(reqwest::header::LOCATION)
        .map(|l| String::from_utf8_lossy(l.as_bytes()).into_owned());
    Failure::Unexpected(format!(
        "{} answered HTTP {} with Location {}; bcctl follows no redirect \
         (set the endpoint to the address that answers)",
        answer.url(),
        answer.status(),
        location.as_deref().unwrap_or("(none)"),
    ))
}
