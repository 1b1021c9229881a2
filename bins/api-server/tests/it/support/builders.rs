//! Builders of the world a test stands on, in the style of crates.io's
//! `CrateBuilder`: each starts from the usual defaults, a test names only
//! what differs, and one call makes it through the API.
//!
//! - [`PlatformBuilder`]: a fake Compute Engine, a root account on it, a
//!   ledger or managed pool, a scanned reservation bound to the pool and a
//!   tenant the pool is offered to.
//! - [`InstanceBuilder`]: an `instances.create` of the test flavor on a
//!   platform's pool (or any pool), by its tenant (or another).
//! - [`GrantBuilder`]: a `reservationGrants.create` by root on a platform's
//!   reservation (or any account's), for its tenant (or another).

use serde_json::{Value, json};

use super::bodies::{GrantBody, InstanceBody};
use super::db;
use super::fixtures::{
    Platform, bind, create_grant_ok, create_pool, gce_account, grant_id, scan, tenant_with_pool,
};
use super::gce::Gce;
use super::server::{Answer, Server, rand_suffix};
use super::vms::{IMAGE, managed_pool_body};

/// The tenant a [`PlatformBuilder`] offers its pool to.
const TENANT: &str = "acme";

/// The kind of pool a [`PlatformBuilder`] makes.
#[derive(Clone, Debug)]
enum PoolKind {
    /// A ledger pool: the platform never reaches the provider for its VMs.
    Ledger,
    /// A managed pool with this `vm` body.
    Managed(Value),
}

/// A platform built through the API. By default: a reservation `res-a` of
/// two slots on a fresh fake, bound and ready, in a ledger pool offered to
/// tenant `acme` with the default quotas.
///
/// ```ignore
/// let p = PlatformBuilder::new().slots(4).managed().build(&s).await;
/// ```
#[must_use]
pub struct PlatformBuilder {
    slots: i64,
    pool: PoolKind,
    gce: Option<Gce>,
    lending: Option<Value>,
}

impl Default for PlatformBuilder {
    fn default() -> Self {
        PlatformBuilder {
            slots: 2,
            pool: PoolKind::Ledger,
            gce: None,
            lending: None,
        }
    }
}

impl PlatformBuilder {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// The reservation's total slots.
    pub fn slots(mut self, total: i64) -> Self {
        self.slots = total;
        self
    }

    /// A managed pool with the test image [`IMAGE`], zones `us-central1-a`
    /// and `-b` and the label `team: infra`.
    pub fn managed(self) -> Self {
        self.managed_vm(json!({
            "image": IMAGE,
            "zones": ["us-central1-a", "us-central1-b"],
            "labels": { "team": "infra" },
        }))
    }

    /// A managed pool with the pool's `vm` body `vm`.
    pub fn managed_vm(mut self, vm: Value) -> Self {
        self.pool = PoolKind::Managed(vm);
        self
    }

    /// The pool's `lending` body (a managed pool's grants may lend).
    pub fn lending(mut self, lending: Value) -> Self {
        self.lending = Some(lending);
        self
    }

    /// The fake to build on (instead of a fresh [`Gce::start`]). With a
    /// managed pool it learns the server's installation
    /// ([`Gce::installation`]).
    pub fn gce(mut self, gce: Gce) -> Self {
        self.gce = Some(gce);
        self
    }

    /// Builds the platform on `s`.
    pub async fn build(self, s: &Server) -> Platform {
        let mut gce = match self.gce {
            Some(gce) => gce,
            None => Gce::start().await,
        };
        if matches!(self.pool, PoolKind::Managed(_)) {
            gce.installation = Some(db::installation(s).await);
        }
        gce.put("res-a", self.slots, 0, "READY").await;
        let account = gce_account(s, &gce).await;
        let pool = match self.pool {
            PoolKind::Ledger => create_pool(s, &account).await,
            PoolKind::Managed(vm) => {
                let mut body = managed_pool_body(&account, vm);
                if let Some(lending) = self.lending {
                    body["lending"] = lending;
                }
                s.root("pools/create", body).await.ok()["pool"]["poolId"]
                    .as_str()
                    .expect("poolId")
                    .to_owned()
            }
        };
        scan(s, &account).await;
        let reservation = Gce::reservation_id("res-a");
        bind(s, &account, &reservation, &pool).await.ok();
        let tenant_token = tenant_with_pool(s, TENANT, &pool).await;
        Platform {
            gce,
            account,
            pool,
            reservation,
            tenant: TENANT.to_owned(),
            tenant_token,
        }
    }
}

/// An `instances.create` of the test flavor, under a fresh idempotency key
/// unless [`InstanceBuilder::key`] names one. The body is
/// [`InstanceBody`]'s with `tenantId`, then the optional fields in the
/// order they were set (a later one of a name wins).
///
/// ```ignore
/// let a = InstanceBuilder::new(&p).key("a").project(&web).create(&s).await;
/// let refused = InstanceBuilder::new(&p).by("globex", &globex).send(&s).await;
/// ```
#[must_use]
#[derive(Clone, Debug)]
pub struct InstanceBuilder {
    pool: String,
    tenant: String,
    token: String,
    key: String,
    fields: Vec<(String, Value)>,
}

impl InstanceBuilder {
    /// An instance on the platform's pool, by its tenant with its admin
    /// secret.
    pub fn new(p: &Platform) -> Self {
        Self::on(&p.pool, &p.tenant, &p.tenant_token)
    }

    /// An instance on `pool`, by `tenant` with `token`.
    pub fn on(pool: &str, tenant: &str, token: &str) -> Self {
        InstanceBuilder {
            pool: pool.to_owned(),
            tenant: tenant.to_owned(),
            token: token.to_owned(),
            key: format!("i-{}", rand_suffix()),
            fields: Vec::new(),
        }
    }

    /// Acting in `tenant` with `token` instead.
    pub fn by(mut self, tenant: &str, token: &str) -> Self {
        tenant.clone_into(&mut self.tenant);
        token.clone_into(&mut self.token);
        self
    }

    /// On `pool` instead.
    pub fn pool(mut self, pool: &str) -> Self {
        pool.clone_into(&mut self.pool);
        self
    }

    /// The idempotency key.
    pub fn key(mut self, key: &str) -> Self {
        key.clone_into(&mut self.key);
        self
    }

    /// The instance's project (`projectId`).
    pub fn project(self, project: &str) -> Self {
        self.field("projectId", json!(project))
    }

    /// `billing` (`"standard"` or `"none"`).
    pub fn billing(self, billing: &str) -> Self {
        self.field("billing", json!(billing))
    }

    /// The instance's `name`.
    pub fn name(self, name: &str) -> Self {
        self.field("name", json!(name))
    }

    /// Any other field of the body (or one of the usual ones overridden).
    pub fn field(mut self, name: &str, value: Value) -> Self {
        self.fields.push((name.to_owned(), value));
        self
    }

    /// Every field of `extra` (an object), in its order.
    pub fn fields(self, extra: Value) -> Self {
        let Value::Object(map) = extra else {
            return self;
        };
        map.into_iter().fold(self, |b, (k, v)| b.field(&k, v))
    }

    /// The `instances.create` body.
    pub fn body(&self) -> Value {
        let mut body = InstanceBody::new(&self.pool, &self.key)
            .tenant(&self.tenant)
            .json();
        for (name, value) in &self.fields {
            body[name.as_str()] = value.clone();
        }
        body
    }

    /// Sends the `instances.create`; answers whatever came back.
    pub async fn send(self, s: &Server) -> Answer {
        s.call(&self.token, "instances/create", self.body()).await
    }

    /// Creates the instance, which must succeed; returns the instance object.
    pub async fn create(self, s: &Server) -> Value {
        self.send(s).await.ok()["instance"].clone()
    }
}

/// A `reservationGrants.create` by root under a fresh idempotency key: one
/// slot of the platform's reservation for its tenant unless told otherwise.
/// The term has no default. The body is [`GrantBody`]'s.
///
/// ```ignore
/// let g = GrantBuilder::new(&p).slots(2).term(T0, T0 + HOUR).create(&s).await;
/// let g = GrantBuilder::on(&account, &res).grantee(ROOT).term(a, b).create(&s).await;
/// ```
#[must_use]
#[derive(Clone, Debug)]
pub struct GrantBuilder {
    account: String,
    reservation: String,
    grantee: Option<String>,
    slots: i64,
    term: Option<(i64, i64)>,
}

impl GrantBuilder {
    /// A grant on the platform's reservation, for its tenant.
    pub fn new(p: &Platform) -> Self {
        Self::on(&p.account, &p.reservation).grantee(&p.tenant)
    }

    /// A grant on `account`'s `reservation`; its grantee must be named
    /// ([`GrantBuilder::grantee`]).
    pub fn on(account: &str, reservation: &str) -> Self {
        GrantBuilder {
            account: account.to_owned(),
            reservation: reservation.to_owned(),
            grantee: None,
            slots: 1,
            term: None,
        }
    }

    /// On another `reservation` of the same account.
    pub fn reservation(mut self, reservation: &str) -> Self {
        reservation.clone_into(&mut self.reservation);
        self
    }

    /// For `tenant` instead.
    pub fn grantee(mut self, tenant: &str) -> Self {
        self.grantee = Some(tenant.to_owned());
        self
    }

    /// The number of slots (1 by default).
    pub fn slots(mut self, slots: i64) -> Self {
        self.slots = slots;
        self
    }

    /// The term: `startsAt` and `endsAt`.
    pub fn term(mut self, starts_at: i64, ends_at: i64) -> Self {
        self.term = Some((starts_at, ends_at));
        self
    }

    /// The `reservationGrants.create` body.
    pub fn body(&self) -> Value {
        let grantee = self.grantee.as_deref().expect("a grant needs a grantee");
        let (starts_at, ends_at) = self.term.expect("a grant needs a term");
        GrantBody::new(&self.account, &self.reservation, grantee, self.slots)
            .term(starts_at, ends_at)
            .key(&format!("g-{}", rand_suffix()))
            .json()
    }

    /// Creates the grant as root, which must succeed; returns its id.
    pub async fn create(self, s: &Server) -> String {
        grant_id(&create_grant_ok(s, self.body()).await)
    }
}
