//! A fake Compute Engine on loopback (the fake-gce library, served over real
//! HTTP in the test process) and helpers to get a bound, ready reservation.
#![allow(dead_code)]

use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::common::Server;

/// The GCE project every test account uses.
pub const PROJECT: &str = "platform-prod";
/// The zone of the test reservations.
pub const ZONE: &str = "us-central1-a";
/// The flavor of the test pools and reservations.
pub const FLAVOR: &str = "n2-standard-4";

/// A running fake.
pub struct Gce {
    /// `http://127.0.0.1:PORT`
    pub url: String,
    client: reqwest::Client,
    _stop: oneshot::Sender<()>,
}

impl Gce {
    /// Starts a fake on an ephemeral port.
    pub async fn start() -> Gce {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let (tx, rx) = oneshot::channel::<()>();
        let fake = fake_gce::FakeGce::new(fake_gce::FakeGceConfig::default());
        tokio::spawn(async move {
            let _ = fake_gce::serve(listener, fake, async move {
                let _ = rx.await;
            })
            .await;
        });
        Gce {
            url,
            client: reqwest::Client::new(),
            _stop: tx,
        }
    }

    /// The full reservation id of `name`.
    pub fn reservation_id(name: &str) -> String {
        format!("projects/{PROJECT}/zones/{ZONE}/reservations/{name}")
    }

    /// Creates or replaces a reservation.
    pub async fn put(&self, name: &str, count: i64, in_use: i64, status: &str) {
        let resp = self
            .client
            .put(format!(
                "{}/fake/projects/{PROJECT}/zones/{ZONE}/reservations/{name}",
                self.url
            ))
            .json(&json!({
                "count": count,
                "inUseCount": in_use,
                "machineType": FLAVOR,
                "status": status,
            }))
            .send()
            .await
            .expect("put");
        assert!(resp.status().is_success());
    }

    /// Removes a reservation.
    pub async fn delete(&self, name: &str) {
        let resp = self
            .client
            .delete(format!(
                "{}/fake/projects/{PROJECT}/zones/{ZONE}/reservations/{name}",
                self.url
            ))
            .send()
            .await
            .expect("delete");
        assert!(resp.status().is_success());
    }

    /// The next `n` read calls fail with 503.
    pub async fn fail(&self, n: u32) {
        let resp = self
            .client
            .post(format!("{}/fake/fail", self.url))
            .json(&json!({ "count": n }))
            .send()
            .await
            .expect("fail");
        assert!(resp.status().is_success());
    }
}

impl Gce {
    /// How many reservation listings the fake has answered, per project.
    pub async fn calls(&self) -> std::collections::BTreeMap<String, u64> {
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

    /// Delays every later listing by `ms` (0: none).
    pub async fn delay(&self, ms: u64) {
        let resp = self
            .client
            .post(format!("{}/fake/delay", self.url))
            .json(&json!({ "ms": ms }))
            .send()
            .await
            .expect("delay");
        assert!(resp.status().is_success());
    }
}

/// A platform set up for grants: a root account on the fake, a pool, a
/// scanned reservation bound to it, and a tenant the pool is offered to.
pub struct Platform {
    /// The fake.
    pub gce: Gce,
    /// Root's provider account.
    pub account: String,
    /// The pool.
    pub pool: String,
    /// The bound reservation's id.
    pub reservation: String,
    /// The tenant's name.
    pub tenant: String,
    /// The tenant's admin secret.
    pub tenant_token: String,
}

/// Creates a root account whose endpoint is the fake.
pub async fn account(s: &Server, gce: &Gce) -> String {
    let v = s
        .root(
            "providerAccounts/create",
            json!({
                "name": "gce",
                "provider": "gce",
                "config": { "project": PROJECT, "endpoint": gce.url, "credentials": "none" },
                "idempotencyKey": format!("acct-{}", crate::common::rand_suffix()),
            }),
        )
        .await
        .ok();
    v["account"]["accountId"]
        .as_str()
        .expect("accountId")
        .to_owned()
}

/// Scans `account` as root.
pub async fn scan(s: &Server, account: &str) -> Value {
    s.root("providerAccounts/scan", json!({ "accountId": account }))
        .await
        .ok()
}

/// A platform with one reservation of `total` slots, bound and ready, offered to tenant `acme`.
pub async fn platform(s: &Server, total: i64) -> Platform {
    let gce = Gce::start().await;
    gce.put("res-a", total, 0, "READY").await;
    let account = account(s, &gce).await;
    let pool = s.pool(&account).await;
    scan(s, &account).await;
    let reservation = Gce::reservation_id("res-a");
    s.root(
        "providerAccounts/bindReservation",
        json!({ "accountId": account, "reservationId": reservation, "poolId": pool }),
    )
    .await
    .ok();
    let tenant_token = s.tenant("acme").await;
    s.root(
        "pools/offer",
        json!({
            "poolId": pool,
            "offerTenantId": "acme",
            "quotas": { "instances": 10, "vcpus": 40, "memoryGib": 1000 },
        }),
    )
    .await
    .ok();
    Platform {
        gce,
        account,
        pool,
        reservation,
        tenant: "acme".into(),
        tenant_token,
    }
}

/// A grant request body.
pub fn grant_body(p: &Platform, slots: i64, starts_at: i64, ends_at: i64, key: &str) -> Value {
    json!({
        "accountId": p.account,
        "reservationId": p.reservation,
        "grantTenantId": p.tenant,
        "slots": slots,
        "startsAt": starts_at,
        "endsAt": ends_at,
        "idempotencyKey": key,
    })
}
