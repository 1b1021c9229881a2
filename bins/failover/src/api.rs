//! The api-server over HTTP, with a tally of every answer: by status and
//! code, and when it came relative to the kill.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::procs::ROOT_TOKEN;

/// The root tenant's id.
pub const ROOT: &str = "root";

/// An answer.
#[derive(Debug)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The JSON body (Null if not JSON).
    pub body: Value,
}

impl Answer {
    /// The error code, if the body is an error envelope.
    pub fn code(&self) -> &str {
        self.body
            .pointer("/error/code")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// The body of a 200, or an error saying what came instead.
    pub fn ok(self, what: &str) -> anyhow::Result<Value> {
        if self.status != 200 {
            bail!("{what}: expected 200, got {} {}", self.status, self.body);
        }
        Ok(self.body)
    }
}

/// One answer as the tally keeps it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// When the request was sent.
    pub sent: Instant,
    /// When its answer came.
    pub answered: Instant,
    /// HTTP status.
    pub status: u16,
    /// The error code ("" on success).
    pub code: String,
    /// The error message ("" on success).
    pub message: String,
    /// The method path.
    pub path: String,
    /// Whether the method writes.
    pub write: bool,
}

/// The api-server's client, shared by the load's tasks.
#[derive(Clone)]
pub struct Api {
    url: String,
    client: reqwest::Client,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Api {
    /// A client of the server at `url`.
    pub fn new(url: &str) -> anyhow::Result<Api> {
        Ok(Api {
            url: url.to_owned(),
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()?,
            seen: Arc::default(),
        })
    }

    /// POSTs `body` to `/api/compute/{path}` with `token`. A request that
    /// gets no HTTP answer (connection refused or reset, timeout) is an
    /// error: the server must answer throughout.
    pub async fn call(&self, token: &str, path: &str, body: Value) -> anyhow::Result<Answer> {
        let sent = Instant::now();
        let resp = self
            .client
            .post(format!("{}/api/compute/{path}", self.url))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .with_context(|| format!("{path}: no answer from the api-server"))?;
        let status = resp.status().as_u16();
        let text = resp
            .text()
            .await
            .with_context(|| format!("{path}: reading the answer"))?;
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let answer = Answer { status, body };
        let seen = Seen {
            sent,
            answered: Instant::now(),
            status,
            code: answer.code().to_owned(),
            message: answer
                .body
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            path: path.to_owned(),
            write: is_write(path),
        };
        self.seen
            .lock()
            .map_err(|_| anyhow::anyhow!("tally poisoned"))?
            .push(seen);
        Ok(answer)
    }

    /// The HTTP status of `GET {path}` (`/readyz`); an error when the
    /// server gives no answer.
    pub async fn get_status(&self, path: &str) -> anyhow::Result<u16> {
        let resp = self
            .client
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .with_context(|| format!("GET {path}: no answer from the api-server"))?;
        Ok(resp.status().as_u16())
    }

    /// As root in the root tenant.
    pub async fn root(&self, path: &str, mut body: Value) -> anyhow::Result<Answer> {
        if let Some(fields) = body.as_object_mut() {
            fields.entry("tenantId").or_insert_with(|| json!(ROOT));
        }
        self.call(ROOT_TOKEN, path, body).await
    }

    /// Every answer so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Every item of a list method, paging with `nextCursor`.
    pub async fn list_all(
        &self,
        token: &str,
        path: &str,
        mut body: Value,
    ) -> anyhow::Result<Vec<Value>> {
        let mut out = Vec::new();
        let fields = body.as_object_mut().context("a list's body is an object")?;
        fields.insert("limit".to_owned(), json!(1000));
        loop {
            let page = self.call(token, path, body.clone()).await?.ok(path)?;
            let items = page
                .get("items")
                .and_then(Value::as_array)
                .context("items")?;
            out.extend(items.iter().cloned());
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(c) if page.get("hasMore") != Some(&json!(false)) && !items.is_empty() => {
                    if let Some(fields) = body.as_object_mut() {
                        fields.insert("after".to_owned(), json!(c));
                    }
                }
                _ => return Ok(out),
            }
        }
    }
}

/// Whether a method path writes (its name is not a read).
fn is_write(path: &str) -> bool {
    let method = path.rsplit('/').next().unwrap_or_default();
    !matches!(method, "get" | "list" | "preview") && !method.starts_with("list")
}

/// Counts of answers by `status code`.
pub fn by_status(seen: &[Seen]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for s in seen {
        let key = if s.code.is_empty() {
            s.status.to_string()
        } else {
            format!("{} {}", s.status, s.code)
        };
        *out.entry(key).or_default() += 1;
    }
    out
}
