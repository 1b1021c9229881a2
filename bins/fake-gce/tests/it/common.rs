//! Starting the real `fake-gce` binary and speaking plain HTTP to it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;

pub const PROJECT: &str = "my-project";

/// A running `fake-gce` process, killed when dropped.
pub struct FakeGceProcess {
    child: Child,
    /// `http://127.0.0.1:PORT`, from the ready line.
    pub base: String,
    pub http: reqwest::Client,
}

impl FakeGceProcess {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts the binary with extra environment variables and waits for its
    /// ready line.
    pub fn start_with(env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_fake-gce"));
        command
            .env("BC_FAKE_GCE_LISTEN", "127.0.0.1:0")
            .env_remove("BC_FAKE_GCE_TOKEN")
            .env_remove("BC_FAKE_GCE_REQUIRE_AUTH")
            .env_remove("BC_FAKE_GCE_TOKEN_TTL_S")
            .env_remove("BC_FAKE_GCE_TLS_CERT")
            .env_remove("BC_FAKE_GCE_TLS_KEY")
            .env_remove("BC_FAKE_GCE_OPERATION_POLLS")
            .env_remove("BC_FAKE_GCE_OPERATION_LATENCY_MS")
            .env_remove("BC_FAKE_GCE_WRITES_PER_MIN")
            .env_remove("BC_FAKE_GCE_CONCURRENT_OPERATIONS")
            .env_remove("BC_FAKE_GCE_STATE")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("spawn fake-gce");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let read = BufReader::new(stdout).read_line(&mut line).map(|_| line);
            let _ = tx.send(read);
        });
        let line = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Ok(line)) => line,
            other => {
                let _ = child.kill();
                panic!("fake-gce did not print its ready line: {other:?}");
            }
        };
        let base = line
            .trim_end()
            .strip_prefix("fake-gce listening on ")
            .unwrap_or_else(|| panic!("unexpected ready line {line:?}"))
            .to_owned();
        FakeGceProcess {
            child,
            base,
            http: reqwest::Client::new(),
        }
    }

    /// Replaces the HTTP client (e.g. with one trusting a test CA).
    pub fn with_http(mut self, http: reqwest::Client) -> Self {
        self.http = http;
        self
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (`TERM`, `INT`) and waits for the process to exit.
    pub fn stop_with(mut self, signal: &str) -> ExitStatus {
        let sent = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -{signal} failed");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "fake-gce did not stop on SIG{signal}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn reservation_path(project: &str, zone: &str, name: &str) -> String {
        format!("/fake/projects/{project}/zones/{zone}/reservations/{name}")
    }

    /// `PUT /fake/...`, asserting success.
    pub async fn put_reservation(&self, zone: &str, name: &str, body: Value) -> Value {
        let (status, json) = self
            .send(
                reqwest::Method::PUT,
                &Self::reservation_path(PROJECT, zone, name),
                Some(body),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{json}");
        json
    }

    /// `POST /fake/fail`, asserting success.
    pub async fn fail_next(&self, count: u64) {
        let (status, json) = self
            .send(
                reqwest::Method::POST,
                "/fake/fail",
                Some(serde_json::json!({ "count": count })),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{json}");
    }

    /// `GET /fake/calls`: the read calls per project.
    pub async fn calls(&self) -> Value {
        let (status, json) = self.send(reqwest::Method::GET, "/fake/calls", None).await;
        assert_eq!(status, StatusCode::OK, "{json}");
        json["calls"].clone()
    }

    /// `POST /fake/delay`, asserting success.
    pub async fn set_delay(&self, ms: u64) {
        let (status, json) = self
            .send(
                reqwest::Method::POST,
                "/fake/delay",
                Some(serde_json::json!({ "ms": ms })),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{json}");
    }

    /// Any request with an optional JSON body; answers the status and the
    /// JSON body (`Null` if the body is not JSON).
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self.http.request(method, self.url(path));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request to fake-gce");
        let status = response.status();
        let text = response.text().await.expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// `GET .../aggregated/reservations` with a raw query string.
    pub async fn list_raw(&self, project: &str, query: &str) -> (StatusCode, Value) {
        self.send(
            reqwest::Method::GET,
            &format!("/compute/v1/projects/{project}/aggregated/reservations{query}"),
            None,
        )
        .await
    }
}

impl Drop for FakeGceProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
