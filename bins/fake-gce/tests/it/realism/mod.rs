//! fake-gce behaving like the real Compute Engine on request: operation
//! latency, the write and concurrent-operation quotas, unreachable and
//! stocked-out zones, missing images, `/fake/stats` and Google's filter
//! syntax. Most tests run the binary; those that need to move the quota's
//! clock serve the library in-process over real HTTP.

mod latency;
mod quotas;
mod zones;

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::common::FakeGceProcess;

pub const ZONE: &str = "us-central1-a";
pub const ZONE_B: &str = "us-central1-b";
/// How long a test waits for something that must happen soon.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// A `requestId` (a UUID) numbered `n`.
pub fn rid(n: u32) -> String {
    format!("00000000-0000-4000-8000-{n:012}")
}

/// A create body: on demand, labelled `bc-managed=true`, from a public image.
pub fn vm(name: &str) -> Value {
    vm_from(name, "projects/debian-cloud/global/images/family/debian-12")
}

/// A create body booting `image`.
pub fn vm_from(name: &str, image: &str) -> Value {
    json!({
        "name": name,
        "machineType": format!("zones/{ZONE}/machineTypes/n2-standard-4"),
        "labels": { "bc-managed": "true", "bc-instance": format!("inst_{name}") },
        "reservationAffinity": { "consumeReservationType": "NO_RESERVATION" },
        "disks": [{ "boot": true, "autoDelete": true, "initializeParams": {
            "sourceImage": image, "diskSizeGb": "20" } }],
        "networkInterfaces": [{ "network": "global/networks/default" }],
    })
}

/// A fake under test: the binary or the library served in-process.
pub struct Fake {
    base: String,
    http: reqwest::Client,
    /// The binary, killed when dropped.
    _process: Option<FakeGceProcess>,
    /// The in-process server, stopped when dropped.
    _stop: Option<oneshot::Sender<()>>,
}

impl Fake {
    /// Starts the binary with `env`.
    pub fn binary(env: &[(&str, &str)]) -> Fake {
        let process = FakeGceProcess::start_with(env);
        Fake {
            base: process.base.clone(),
            http: process.http.clone(),
            _process: Some(process),
            _stop: None,
        }
    }

    /// Serves `fake` on an ephemeral loopback port of this test's runtime.
    pub async fn in_process(fake: fake_gce::FakeGce) -> Fake {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("local address");
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = fake_gce::serve(listener, fake, async move {
                let _ = stopped.await;
            })
            .await;
        });
        Fake {
            base: format!("http://{addr}"),
            http: reqwest::Client::new(),
            _process: None,
            _stop: Some(stop),
        }
    }

    /// A request with an optional JSON body and bearer token; answers the
    /// status and the JSON body (`Null` if not JSON).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        token: Option<&str>,
    ) -> (StatusCode, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.expect("request to fake-gce");
        let status = response.status();
        let text = response.text().await.expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        self.call(method, path, body, None).await
    }

    /// `POST .../zones/{zone}/instances?requestId=`.
    pub async fn create_in(
        &self,
        project: &str,
        zone: &str,
        rid: &str,
        body: Value,
    ) -> (StatusCode, Value) {
        let path = format!("/compute/v1/projects/{project}/zones/{zone}/instances?requestId={rid}");
        self.send(Method::POST, &path, Some(body)).await
    }

    /// `POST .../instances/{name}/{action}` (`stop`, `start`) or, for
    /// `delete`, `DELETE .../instances/{name}`.
    pub async fn change(
        &self,
        project: &str,
        name: &str,
        action: &str,
        rid: &str,
    ) -> (StatusCode, Value) {
        let vm = format!("/compute/v1/projects/{project}/zones/{ZONE}/instances/{name}");
        match action {
            "delete" => {
                let path = format!("{vm}?requestId={rid}");
                self.send(Method::DELETE, &path, None).await
            }
            _ => {
                let path = format!("{vm}/{action}?requestId={rid}");
                self.send(Method::POST, &path, None).await
            }
        }
    }

    /// `GET .../zones/{zone}/instances/{name}`.
    pub async fn instance_in(&self, project: &str, zone: &str, name: &str) -> (StatusCode, Value) {
        let path = format!("/compute/v1/projects/{project}/zones/{zone}/instances/{name}");
        self.send(Method::GET, &path, None).await
    }

    /// `GET` of the operation `op` (as a mutating call answered it).
    pub async fn operation(&self, op: &Value) -> Value {
        let link = op["selfLink"].as_str().expect("selfLink");
        let path = link
            .strip_prefix("https://www.googleapis.com")
            .expect("a compute URL");
        let (status, op) = self.send(Method::GET, path, None).await;
        assert_eq!(status, StatusCode::OK, "{op}");
        op
    }

    /// Reads `op` until it is `DONE` (within [`DEADLINE`]); answers it.
    pub async fn wait(&self, op: &Value) -> Value {
        let started = Instant::now();
        loop {
            let read = self.operation(op).await;
            if read["status"] == "DONE" {
                return read;
            }
            assert!(started.elapsed() < DEADLINE, "never DONE: {read}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `GET .../aggregated/{what}` with a raw query string (`?...` or empty).
    pub async fn list(&self, project: &str, what: &str, query: &str) -> (StatusCode, Value) {
        let path = format!("/compute/v1/projects/{project}/aggregated/{what}{query}");
        self.send(Method::GET, &path, None).await
    }

    /// `GET /fake/stats`, the counts of `project` (`Null` when absent).
    pub async fn stats(&self, project: &str) -> Value {
        let (status, stats) = self.send(Method::GET, "/fake/stats", None).await;
        assert_eq!(status, StatusCode::OK, "{stats}");
        stats["projects"][project].clone()
    }
}

/// The counts `GET /fake/stats` shows for a project.
pub fn counts(mutating: u64, rate: u64, concurrent: u64, in_flight: u64, peak: u64) -> Value {
    json!({
        "mutatingCalls": mutating,
        "rateRefusals": rate,
        "concurrentRefusals": concurrent,
        "operationsInFlight": in_flight,
        "peakOperationsInFlight": peak,
    })
}

/// Asserts `body` is Google's `403 rateLimitExceeded` for `project`, with
/// an `ErrorInfo` of `reason` and `metric`; answers its message.
pub fn assert_quota_403(body: &Value, project: &str, reason: &str, metric: &str) -> String {
    let error = &body["error"];
    assert_eq!(error["code"], 403, "{body}");
    assert_eq!(error["status"], "PERMISSION_DENIED", "{body}");
    let message = error["message"].as_str().expect("message").to_owned();
    assert!(
        message.starts_with("Quota exceeded for quota metric '")
            && message
                .contains("of service 'compute.googleapis.com' for consumer 'project_number:")
            && message.ends_with("'."),
        "{message}"
    );
    assert_eq!(
        error["errors"],
        json!([{ "message": message, "domain": "usageLimits", "reason": "rateLimitExceeded" }])
    );
    let details = error["details"].as_array().expect("details");
    assert_eq!(details.len(), 1, "{body}");
    let info = &details[0];
    assert_eq!(info["@type"], "type.googleapis.com/google.rpc.ErrorInfo");
    assert_eq!(info["reason"], reason);
    assert_eq!(info["domain"], "googleapis.com");
    assert_eq!(info["metadata"]["quota_metric"], metric);
    assert_eq!(info["metadata"]["service"], "compute.googleapis.com");
    assert_eq!(info["metadata"]["consumer"], format!("projects/{project}"));
    message
}
