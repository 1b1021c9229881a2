//! A fake Compute Engine on loopback: the fake-gce library, served over real
//! HTTP in the test process.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tokio::sync::oneshot;

/// The GCE project every test account uses.
pub const PROJECT: &str = "platform-prod";
/// The zone of the test reservations.
pub const ZONE: &str = "us-central1-a";
/// The flavor of the test pools and reservations.
pub const FLAVOR: &str = "n2-standard-4";

/// The read calls one page request makes at most: the first and the
/// adapter's 3 retries (contract 7).
pub const ATTEMPTS: u32 = 4;

/// A running fake.
pub struct Gce {
    /// `http://127.0.0.1:PORT`
    pub url: String,
    /// The installation of the platform built on it
    /// ([`super::builders::PlatformBuilder::gce`]): VMs made "outside" with
    /// `bc-managed` are labelled with it, as the platform labels its own.
    pub installation: Option<String>,
    client: reqwest::Client,
    _stop: oneshot::Sender<()>,
}

impl Gce {
    /// Starts a fake on an ephemeral port.
    pub async fn start() -> Gce {
        Gce::start_with(fake_gce::FakeGceConfig::default()).await
    }

    /// Starts a fake with `config` (authentication, token lifetime, TLS) on
    /// an ephemeral port; `url` is `https://localhost:PORT` when it serves
    /// TLS (the test certificates name `localhost`).
    pub async fn start_with(config: fake_gce::FakeGceConfig) -> Gce {
        Gce::start_fake(fake_gce::FakeGce::new(config)).await
    }

    /// Starts a fake whose zone operations end on their `polls`-th read.
    pub async fn start_polls(polls: u32) -> Gce {
        let config = fake_gce::FakeGceConfig::default();
        Gce::start_fake(fake_gce::FakeGce::new(config).with_operation_polls(polls)).await
    }

    /// Serves `fake` on an ephemeral port.
    pub async fn start_fake(fake: fake_gce::FakeGce) -> Gce {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let url = match fake.scheme() {
            "https" => format!("https://localhost:{port}"),
            scheme => format!("{scheme}://127.0.0.1:{port}"),
        };
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = fake_gce::serve(listener, fake, async move {
                let _ = rx.await;
            })
            .await;
        });
        Gce {
            url,
            installation: None,
            client: reqwest::Client::builder()
                .danger_accept_invalid_certs(true)
                .build()
                .expect("control client"),
            _stop: tx,
        }
    }

    /// `host:port` of the fake (for `GCE_METADATA_HOST`).
    pub fn host(&self) -> &str {
        self.url.split_once("://").map_or(&self.url, |(_, h)| h)
    }

    /// GETs `/fake/{what}` and answers its JSON.
    pub async fn get(&self, what: &str) -> Value {
        self.client
            .get(format!("{}/fake/{what}", self.url))
            .send()
            .await
            .expect(what)
            .json()
            .await
            .expect("json")
    }

    /// `(issued by /token, issued by the metadata endpoint)` so far.
    pub async fn tokens(&self) -> (u64, u64) {
        let v = self.get("tokens").await;
        (
            v["issued"].as_u64().expect("issued"),
            v["metadataIssued"].as_u64().expect("metadataIssued"),
        )
    }

    /// Registers the public key of a service account.
    pub async fn register_key(&self, email: &str, public_pem: &str) {
        let resp = self
            .client
            .put(format!("{}/fake/service-accounts/{email}", self.url))
            .json(&json!({ "publicKeyPem": public_pem }))
            .send()
            .await
            .expect("register key");
        assert!(
            resp.status().is_success(),
            "register key: {}",
            resp.status()
        );
    }

    /// Revokes every token issued so far.
    pub async fn revoke_tokens(&self) {
        self.control("revoke-tokens", json!({})).await;
    }

    /// The full id of reservation `name` in [`ZONE`].
    pub fn reservation_id(name: &str) -> String {
        Gce::reservation_in(ZONE, name)
    }

    /// The full id of reservation `name` in `zone`.
    pub fn reservation_in(zone: &str, name: &str) -> String {
        format!("projects/{PROJECT}/zones/{zone}/reservations/{name}")
    }

    /// The fake's control URL of reservation `name` in `zone`.
    fn control_url(&self, zone: &str, name: &str) -> String {
        format!("{}/fake/{}", self.url, Gce::reservation_in(zone, name))
    }

    /// Creates or replaces a reservation of [`FLAVOR`] in [`ZONE`].
    pub async fn put(&self, name: &str, count: i64, in_use: i64, status: &str) {
        self.put_in(ZONE, name, count, in_use, FLAVOR, status).await;
    }

    /// Creates or replaces a reservation in any zone, of any machine type.
    pub async fn put_in(
        &self,
        zone: &str,
        name: &str,
        count: i64,
        in_use: i64,
        machine: &str,
        status: &str,
    ) {
        let resp = self
            .client
            .put(self.control_url(zone, name))
            .json(&json!({
                "count": count,
                "inUseCount": in_use,
                "machineType": machine,
                "status": status,
            }))
            .send()
            .await
            .expect("put");
        assert!(resp.status().is_success(), "fake put: {}", resp.status());
    }

    /// Removes a reservation from [`ZONE`].
    pub async fn delete(&self, name: &str) {
        self.delete_in(ZONE, name).await;
    }

    /// Removes a reservation from any zone.
    pub async fn delete_in(&self, zone: &str, name: &str) {
        let resp = self
            .client
            .delete(self.control_url(zone, name))
            .send()
            .await
            .expect("delete");
        assert!(resp.status().is_success(), "fake delete: {}", resp.status());
    }

    /// POSTs a control request to `/fake/{what}`.
    async fn control(&self, what: &str, body: Value) {
        let resp = self
            .client
            .post(format!("{}/fake/{what}", self.url))
            .json(&body)
            .send()
            .await
            .expect(what);
        assert!(resp.status().is_success(), "fake {what}: {}", resp.status());
    }

    /// The next `n` listings fail with 503: each is one read call and the
    /// adapter's retries of it ([`ATTEMPTS`] calls in all).
    pub async fn fail(&self, n: u32) {
        self.fail_calls(n * ATTEMPTS, 503, None).await;
    }

    /// The next `calls` read calls answer `status`, with `Retry-After:
    /// retry_after_s` when given.
    pub async fn fail_calls(&self, calls: u32, status: u16, retry_after_s: Option<u64>) {
        let mut body = json!({ "count": calls, "status": status });
        if let Some(s) = retry_after_s {
            body["retryAfterS"] = json!(s);
        }
        self.control("fail", body).await;
    }

    /// Both aggregated lists leave `zones` out as unreachable scopes from
    /// now on (`POST /fake/unreachable`); `&[]` ends it.
    pub async fn unreachable(&self, zones: &[&str]) {
        self.control("unreachable", json!({ "zones": zones })).await;
    }

    /// Delays every later listing by `ms` (0: none).
    pub async fn delay(&self, ms: u64) {
        self.control("delay", json!({ "ms": ms })).await;
    }

    /// How many reservation listings the fake has answered, per project.
    pub async fn calls(&self) -> BTreeMap<String, u64> {
        let v: Value = self
            .client
            .get(format!("{}/fake/calls", self.url))
            .send()
            .await
            .expect("calls")
            .json()
            .await
            .expect("calls body");
        v["calls"]
            .as_object()
            .expect("calls object")
            .iter()
            .map(|(k, n)| (k.clone(), n.as_u64().expect("count")))
            .collect()
    }

    /// Listings of [`PROJECT`] answered so far.
    pub async fn listings(&self) -> u64 {
        self.calls().await.get(PROJECT).copied().unwrap_or(0)
    }
}
