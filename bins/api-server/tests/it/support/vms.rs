//! Managed pools on the fake: a platform whose pool has `vm`, the VMs the
//! fake holds, the requests it saw and changes made behind the platform's
//! back.

use serde_json::{Value, json};

use super::builders::PlatformBuilder;
use super::fixtures::{Platform, instance_op_ok};
use super::gce::{FLAVOR, Gce, PROJECT, ZONE};
use super::server::{Server, rand_suffix};
use super::worker;

/// The image every test pool boots.
pub const IMAGE: &str = "projects/debian-cloud/global/images/family/debian-12";

/// A managed pool's `pools.create` body on `account`.
pub fn managed_pool_body(account: &str, vm: Value) -> Value {
    json!({
        "name": "managed us-central1",
        "region": "us-central1",
        "provider": "gce",
        "accountId": account,
        "flavors": [{ "name": FLAVOR, "vcpus": 4, "memoryGib": 16, "gpus": 0 }],
        "quotas": { "instances": 100, "vcpus": 400 },
        "vm": vm,
        "idempotencyKey": format!("pool-{}", rand_suffix()),
    })
}

/// A platform ([`PlatformBuilder`]) with a managed pool (`vm` with the
/// test image and zones `us-central1-a`, `-b`) on a fresh fake.
pub async fn managed_platform(s: &Server, total: i64) -> Platform {
    PlatformBuilder::new().slots(total).managed().build(s).await
}

/// `state` of an instance object (empty if it has none).
pub fn state(inst: &Value) -> &str {
    inst["state"].as_str().unwrap_or_default()
}

/// `vm.name` of a managed instance object.
pub fn vm_name(inst: &Value) -> String {
    inst["vm"]["name"].as_str().expect("vm.name").to_owned()
}

/// An instance of tenant `acme` as `instances.get` with `token` answers it.
pub async fn acme_instance(s: &Server, token: &str, inst: &str) -> Value {
    instance_op_ok(s, token, "acme", "get", inst).await
}

/// The worker environment of the managed tests: listings at every pass.
pub const VM_ENV: [(&str, &str); 2] = [("BC_VM_LIST_INTERVAL", "0"), ("BC_VM_STEP_TIMEOUT", "60")];

/// One `vps.instances` pass (`--once`), asserting it exits 0.
pub async fn vm_pass(s: &Server) -> String {
    let (status, err) = worker::once_with(s, &["vps.instances"], &VM_ENV).await;
    assert!(status.success(), "worker failed: {err}");
    err
}

/// A VM as the fake's Compute Engine API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeVm {
    /// Name.
    pub name: String,
    /// Zone (short).
    pub zone: String,
    /// Status.
    pub status: String,
    /// Labels.
    pub labels: Value,
    /// The reservation affinity it was created with.
    pub affinity: Value,
}

impl Gce {
    async fn api(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let client = reqwest::Client::new();
        let mut req = client.request(
            method,
            format!("{}/compute/v1/projects/{PROJECT}/{path}", self.url),
        );
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect(path);
        resp.json().await.unwrap_or(Value::Null)
    }

    /// Every VM of the project, through the aggregated list (all pages).
    pub async fn vms(&self) -> Vec<FakeVm> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut path = "aggregated/instances?maxResults=500".to_owned();
            if let Some(t) = &token {
                path.push_str(&format!("&pageToken={t}"));
            }
            let v = self.api(reqwest::Method::GET, &path, None).await;
            for scoped in v["items"].as_object().into_iter().flat_map(|m| m.values()) {
                for vm in scoped["instances"].as_array().into_iter().flatten() {
                    out.push(FakeVm {
                        name: vm["name"].as_str().unwrap_or_default().to_owned(),
                        zone: vm["zone"]
                            .as_str()
                            .and_then(|z| z.rsplit('/').next())
                            .unwrap_or_default()
                            .to_owned(),
                        status: vm["status"].as_str().unwrap_or_default().to_owned(),
                        labels: vm["labels"].clone(),
                        affinity: vm["reservationAffinity"].clone(),
                    });
                }
            }
            match v["nextPageToken"].as_str() {
                Some(t) if !t.is_empty() => token = Some(t.to_owned()),
                _ => break,
            }
        }
        out
    }

    /// The VM named `name`, if the fake holds it.
    pub async fn vm(&self, name: &str) -> Option<FakeVm> {
        self.vms().await.into_iter().find(|v| v.name == name)
    }

    /// Creates a VM behind the platform's back (in [`ZONE`], no reservation).
    pub async fn insert_outside(&self, name: &str, labels: Value) {
        self.insert_outside_in(ZONE, name, labels).await;
    }

    /// Creates a VM behind the platform's back in `zone`, no reservation.
    /// A VM labelled `bc-managed` without `bc-installation` gets the
    /// installation of the platform on this fake ([`Gce::installation`]):
    /// it looks like one of the platform's own.
    pub async fn insert_outside_in(&self, zone: &str, name: &str, labels: Value) {
        let op = self.insert_outside_started(zone, name, labels).await;
        // Read the operation until done.
        for _ in 0..20 {
            if self.operation_done(zone, &op).await {
                return;
            }
        }
        panic!("operation {op} never ended");
    }

    /// Reads the zone operation `op` once: whether it is `DONE`.
    pub async fn operation_done(&self, zone: &str, op: &str) -> bool {
        let path = format!("zones/{zone}/operations/{op}");
        self.api(reqwest::Method::GET, &path, None).await["status"] == "DONE"
    }

    /// As [`Gce::insert_outside_in`], answering the create's operation
    /// without waiting for it.
    pub async fn insert_outside_started(
        &self,
        zone: &str,
        name: &str,
        mut labels: Value,
    ) -> String {
        if let (Some(map), Some(id)) = (labels.as_object_mut(), &self.installation)
            && map.contains_key("bc-managed")
            && !map.contains_key("bc-installation")
        {
            map.insert("bc-installation".into(), json!(id));
        }
        let body = json!({
            "name": name,
            "machineType": format!("zones/{zone}/machineTypes/{FLAVOR}"),
            "labels": labels,
            "reservationAffinity": { "consumeReservationType": "NO_RESERVATION" },
            "disks": [{ "boot": true, "autoDelete": true,
                        "initializeParams": { "sourceImage": super::vms::IMAGE } }],
            "networkInterfaces": [{ "network": "global/networks/default" }],
        });
        let op = self
            .api(
                reqwest::Method::POST,
                &format!("zones/{zone}/instances?requestId={}", uuid_like()),
                Some(body),
            )
            .await;
        op["name"].as_str().expect("operation").to_owned()
    }

    /// A change made outside the platform: `stop`, `start` or `delete`.
    pub async fn outside(&self, zone: &str, name: &str, action: &str) {
        let resp = reqwest::Client::new()
            .post(format!(
                "{}/fake/instances/{zone}/{name}/{action}",
                self.url
            ))
            .send()
            .await
            .expect("outside change");
        assert!(
            resp.status().is_success(),
            "fake {action}: {}",
            resp.status()
        );
    }

    /// The next `count` creates' operations end with `code`.
    pub async fn fail_creates(&self, count: u32, code: &str) {
        let resp = reqwest::Client::new()
            .post(format!("{}/fake/fail-instances", self.url))
            .json(&json!({ "count": count, "code": code }))
            .send()
            .await
            .expect("fail-instances");
        assert!(resp.status().is_success());
    }

    /// Sets the clock the fake measures running intervals on.
    pub async fn set_clock(&self, now: i64) {
        self.post_fake("clock", json!({ "nowMs": now })).await;
    }

    /// The next `count` mutations are applied but answered 503 (a lost
    /// answer).
    pub async fn fail_mutations(&self, count: u32) {
        self.post_fake("fail-mutations", json!({ "count": count }))
            .await;
    }

    /// Each VM name's running intervals on the fake's clock, and how many
    /// VMs of each name were made.
    pub async fn vm_runs(&self) -> (Value, Value) {
        let v = self.get("vm-runs").await;
        (v["runs"].clone(), v["created"].clone())
    }

    async fn post_fake(&self, what: &str, body: Value) {
        let resp = reqwest::Client::new()
            .post(format!("{}/fake/{what}", self.url))
            .json(&body)
            .send()
            .await
            .expect(what);
        assert!(resp.status().is_success(), "fake {what}: {}", resp.status());
    }

    /// Every mutating request the fake saw: `(method, path, requestId)`.
    pub async fn requests(&self) -> Vec<(String, String, String)> {
        self.get("requests").await["requests"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                (
                    r["method"].as_str().unwrap_or_default().to_owned(),
                    r["path"].as_str().unwrap_or_default().to_owned(),
                    r["requestId"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }
}

/// A fresh request id.
pub fn uuid_like() -> String {
    uuid::Uuid::now_v7().to_string()
}
