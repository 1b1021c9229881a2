//! The platform the figures run on, set up through the HTTP API against the
//! fake GCE (in-process, real loopback HTTP): one root provider account, a
//! tenant `acme`, hot reservations for grant creation and, per side, 100
//! pools (fewer in the tests) each with one bound reservation and one live
//! grant to `acme`.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::procs::ROOT_TOKEN;

/// The GCE project of the benchmark account.
pub const PROJECT: &str = "platform-bench";
/// The zone of every reservation.
pub const ZONE: &str = "us-central1-a";
/// The one flavor.
pub const FLAVOR: &str = "n2-standard-4";
/// The grantee tenant.
pub const TENANT: &str = "acme";
/// Slots of a hot reservation (never the limit).
pub const HOT_TOTAL: i64 = 100_000;
/// Slots of an instance reservation, all granted to `acme`.
pub const INST_TOTAL: i64 = 1_000;
/// Reservations (and pools) per side of the instance figure.
pub const INST_RESERVATIONS: usize = 100;
/// Reservations (and pools) per side of the instance history comparison.
pub const INST_HISTORY_RESERVATIONS: usize = 10;
/// An hour in milliseconds.
pub const HOUR_MS: i64 = 3_600_000;

/// The fake GCE, served on loopback from this process.
pub struct Gce {
    /// `http://127.0.0.1:PORT`
    pub url: String,
    _stop: oneshot::Sender<()>,
}

impl Gce {
    /// Starts it on an ephemeral port.
    pub async fn start() -> anyhow::Result<Gce> {
        Gce::start_fake(fake_gce::FakeGce::new(fake_gce::FakeGceConfig::default())).await
    }

    /// Serves `fake` on an ephemeral port.
    pub async fn start_fake(fake: fake_gce::FakeGce) -> anyhow::Result<Gce> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = fake_gce::serve(listener, fake, async move {
                let _ = rx.await;
            })
            .await;
        });
        Ok(Gce { url, _stop: tx })
    }

    /// The provider's full id of reservation `name`.
    pub fn reservation_id(name: &str) -> String {
        format!("projects/{PROJECT}/zones/{ZONE}/reservations/{name}")
    }

    pub async fn put(&self, http: &reqwest::Client, name: &str, count: i64) -> anyhow::Result<()> {
        let resp = http
            .put(format!(
                "{}/fake/projects/{PROJECT}/zones/{ZONE}/reservations/{name}",
                self.url
            ))
            .json(&json!({
                "count": count,
                "inUseCount": 0,
                "machineType": FLAVOR,
                "status": "READY",
            }))
            .send()
            .await?;
        if !resp.status().is_success() {
            bail!("fake-gce put {name}: {}", resp.status());
        }
        Ok(())
    }
}

/// A JSON client of the API.
#[derive(Clone)]
pub struct Api {
    base: String,
    http: reqwest::Client,
}

impl Api {
    /// A client of the server at `base` (`http://host:port`).
    pub fn new(base: &str) -> Api {
        Api {
            base: base.to_owned(),
            http: reqwest::Client::new(),
        }
    }

    /// POSTs `/api/compute/{path}` with `token`; non-200 is an error.
    pub async fn call(&self, token: &str, path: &str, body: &Value) -> anyhow::Result<Value> {
        let resp = self
            .http
            .post(format!("{}/api/compute/{path}", self.base))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .with_context(|| format!("POST {path}"))?;
        let status = resp.status();
        let text = resp.text().await?;
        if status != reqwest::StatusCode::OK {
            bail!("{path} answered {status}: {text}");
        }
        Ok(serde_json::from_str(&text)?)
    }

    /// As root, in the root tenant.
    pub async fn root(&self, path: &str, mut body: Value) -> anyhow::Result<Value> {
        if let Some(fields) = body.as_object_mut() {
            fields.entry("tenantId").or_insert_with(|| json!("root"));
        }
        self.call(ROOT_TOKEN, path, &body).await
    }

    /// Root's provider account `name` on the fake at `endpoint`, scanned
    /// once; returns its id.
    pub async fn fake_account(&self, name: &str, endpoint: &str) -> anyhow::Result<String> {
        let account = self
            .root(
                "providerAccounts/create",
                json!({
                    "name": name,
                    "provider": "gce",
                    "config": { "project": PROJECT, "endpoint": endpoint, "credentials": "none" },
                    "idempotencyKey": format!("acct-{name}"),
                }),
            )
            .await?;
        let account_id = str_at(&account, "/account/accountId")?;
        self.root("providerAccounts/scan", json!({ "accountId": account_id }))
            .await?;
        Ok(account_id)
    }

    /// The raw bytes of a call (the body a client receives).
    pub async fn raw(&self, token: &str, path: &str, body: &Value) -> anyhow::Result<Vec<u8>> {
        let resp = self
            .http
            .post(format!("{}/api/compute/{path}", self.base))
            .bearer_auth(token)
            .json(body)
            .send()
            .await?;
        if resp.status() != reqwest::StatusCode::OK {
            bail!("{path} answered {}", resp.status());
        }
        Ok(resp.bytes().await?.to_vec())
    }
}

pub(crate) fn str_at(v: &Value, pointer: &str) -> anyhow::Result<String> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .with_context(|| format!("no {pointer} in {v}"))
}

/// One pool with one bound reservation and a live grant of all its slots.
#[derive(Debug, Clone)]
pub struct InstTarget {
    /// The pool.
    pub pool_id: String,
    /// The reservation.
    pub reservation_id: String,
    /// The grant to `acme`.
    pub grant_id: String,
}

/// Everything the figures need.
pub struct Platform {
    /// The fake, served as long as the platform lives.
    pub _gce: Gce,
    /// The manual clock's now (fixed for the whole run).
    pub now: i64,
    /// Root's provider account.
    pub account_id: String,
    /// The pool the hot reservations are bound to.
    pub hot_pool: String,
    /// Hot reservation per side: `http`, `storage`, `sql` and the extra
    /// sides of [`platform_with`].
    pub hot: BTreeMap<&'static str, String>,
    /// Instance targets per side.
    pub inst: BTreeMap<&'static str, Vec<InstTarget>>,
    /// `acme`'s admin secret.
    pub tenant_token: String,
}

impl Platform {
    /// Side `tag`'s hot reservation.
    #[expect(
        clippy::indexing_slicing,
        reason = "the figures name only sides setup made; another is a bug of the bench"
    )]
    pub fn hot_reservation(&self, tag: &str) -> &str {
        &self.hot[tag]
    }

    /// Side `tag`'s instance targets.
    #[expect(
        clippy::indexing_slicing,
        reason = "the figures name only sides setup made; another is a bug of the bench"
    )]
    pub fn instance_targets(&self, tag: &str) -> &[InstTarget] {
        &self.inst[tag]
    }
}

/// The sides every write figure runs on, each on rows of its own so each
/// starts from the same state.
pub const SIDES: [&str; 3] = ["http", "storage", "sql"];

fn pool_body(account: &str, name: &str) -> Value {
    json!({
        "name": name,
        "region": "us-central1",
        "provider": "gce",
        "accountId": account,
        "flavors": [{ "name": FLAVOR, "vcpus": 4, "memoryGib": 16, "gpus": 0 }],
        "quotas": { "instances": 1_000_000 },
        "idempotencyKey": format!("pool-{name}"),
    })
}

fn big_quotas() -> Value {
    json!({ "instances": 1_000_000, "vcpus": 4_000_000, "memoryGib": 16_000_000 })
}

/// Sets the platform up with `per_side` instance targets per side
/// ([`INST_RESERVATIONS`] in the benchmark); `now` is the manual clock's
/// instant.
#[cfg(test)]
pub async fn platform(api: &Api, now: i64, per_side: usize) -> anyhow::Result<Platform> {
    platform_with(api, now, per_side, &Extra::default()).await
}

/// Sides beyond [`SIDES`], for the history figures.
#[derive(Debug, Clone, Default)]
pub struct Extra {
    /// More hot reservations (`hot-{side}`), bound to the hot pool.
    pub hot: Vec<&'static str>,
    /// More instance sides, each with this many targets.
    pub inst: Vec<(&'static str, usize)>,
}

/// `platform` with the `extra` sides.
pub async fn platform_with(
    api: &Api,
    now: i64,
    per_side: usize,
    extra: &Extra,
) -> anyhow::Result<Platform> {
    let gce = Gce::start().await?;
    let http = reqwest::Client::new();
    let hot_sides: Vec<&'static str> = SIDES.iter().copied().chain(extra.hot.clone()).collect();
    let inst_sides: Vec<(&'static str, usize)> = SIDES
        .iter()
        .map(|s| (*s, per_side))
        .chain(extra.inst.clone())
        .collect();
    for side in &hot_sides {
        gce.put(&http, &format!("hot-{side}"), HOT_TOTAL).await?;
    }
    for (side, n) in &inst_sides {
        for k in 0..*n {
            gce.put(&http, &format!("inst-{side}-{k:03}"), INST_TOTAL)
                .await?;
        }
    }
    let account_id = api.fake_account("bench", &gce.url).await?;
    let tenant = api
        .root("tenants/create", json!({ "name": TENANT }))
        .await?;
    let tenant_token = str_at(&tenant, "/adminKey/secret")?;

    let hot_pool = str_at(
        &api.root("pools/create", pool_body(&account_id, "hot"))
            .await?,
        "/pool/poolId",
    )?;
    api.root(
        "pools/offer",
        json!({ "poolId": hot_pool, "offerTenantId": TENANT, "quotas": big_quotas() }),
    )
    .await?;
    let mut hot = BTreeMap::new();
    for side in hot_sides {
        let rid = Gce::reservation_id(&format!("hot-{side}"));
        api.root(
            "providerAccounts/bindReservation",
            json!({ "accountId": account_id, "reservationId": rid, "poolId": hot_pool }),
        )
        .await?;
        hot.insert(side, rid);
    }

    let mut inst = BTreeMap::new();
    for (side, n) in inst_sides {
        let targets: Vec<InstTarget> = futures::stream::iter(0..n)
            .map(|k| {
                let api = api.clone();
                let account_id = account_id.clone();
                async move {
                    let name = format!("inst-{side}-{k:03}");
                    let pool_id = str_at(
                        &api.root("pools/create", pool_body(&account_id, &name))
                            .await?,
                        "/pool/poolId",
                    )?;
                    let reservation_id = Gce::reservation_id(&name);
                    api.root(
                        "providerAccounts/bindReservation",
                        json!({
                            "accountId": account_id,
                            "reservationId": reservation_id,
                            "poolId": pool_id,
                        }),
                    )
                    .await?;
                    api.root(
                        "pools/offer",
                        json!({
                            "poolId": pool_id,
                            "offerTenantId": TENANT,
                            "quotas": big_quotas(),
                        }),
                    )
                    .await?;
                    let grant = api
                        .root(
                            "reservationGrants/create",
                            json!({
                                "accountId": account_id,
                                "reservationId": reservation_id,
                                "grantTenantId": TENANT,
                                "slots": INST_TOTAL,
                                "startsAt": now,
                                "endsAt": now + 30 * 24 * HOUR_MS,
                                "idempotencyKey": format!("grant-{name}"),
                            }),
                        )
                        .await?;
                    anyhow::Ok(InstTarget {
                        pool_id,
                        reservation_id,
                        grant_id: str_at(&grant, "/grant/grantId")?,
                    })
                }
            })
            .buffered(8)
            .try_collect()
            .await?;
        inst.insert(side, targets);
    }
    Ok(Platform {
        _gce: gce,
        now,
        account_id,
        hot_pool,
        hot,
        inst,
        tenant_token,
    })
}

/// A managed pool named `name` on a new fake account of `gce`, with the
/// reservation `name` of `slots` slots bound to it: the account's and the
/// pool's ids.
pub async fn managed_pool(
    api: &Api,
    gce: &Gce,
    name: &str,
    slots: i64,
) -> anyhow::Result<(String, String)> {
    gce.put(&reqwest::Client::new(), name, slots).await?;
    let account_id = api.fake_account(name, &gce.url).await?;
    let pool = api
        .root(
            "pools/create",
            serde_json::json!({
                "name": name,
                "region": "us-central1",
                "provider": "gce",
                "accountId": account_id,
                "flavors": [{ "name": FLAVOR, "vcpus": 4, "memoryGib": 16, "gpus": 0 }],
                "quotas": { "instances": 1_000_000 },
                "vm": { "image": "projects/debian-cloud/global/images/family/debian-12",
                        "zones": [ZONE] },
                "idempotencyKey": format!("pool-{name}"),
            }),
        )
        .await?;
    let pool_id = str_at(&pool, "/pool/poolId")?;
    api.root(
        "providerAccounts/bindReservation",
        serde_json::json!({ "accountId": account_id,
                            "reservationId": Gce::reservation_id(name), "poolId": pool_id }),
    )
    .await?;
    Ok((account_id, pool_id))
}
