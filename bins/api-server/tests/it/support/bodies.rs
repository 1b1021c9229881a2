//! Typed builders for the request bodies the tests build again and again:
//! `reservationGrants.create` / `.preview`, `instances.create`, `quotas.set`
//! and `apiKeys.create`. Each starts from the fields the method requires and
//! names the optional ones, so a test shows what differs from the usual
//! body; `json()` gives the body, with an optional field present only when
//! it was set. The wire names of a body are written once, here.

use serde_json::{Map, Value, json};

use super::fixtures::Platform;
use super::gce::FLAVOR;

/// The object of `fields`.
fn object<const N: usize>(fields: [(&str, Value); N]) -> Map<String, Value> {
    fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// `body` with `key` set to `value`.
fn set(mut body: Map<String, Value>, key: &str, value: Value) -> Map<String, Value> {
    body.insert(key.to_owned(), value);
    body
}

/// A `reservationGrants.create` (or `.preview`, without a key) body.
#[derive(Clone, Debug)]
pub struct GrantBody(Map<String, Value>);

impl GrantBody {
    /// `slots` of `account`'s `reservation` for `grant_tenant`.
    pub fn new(account: &str, reservation: &str, grant_tenant: &str, slots: i64) -> GrantBody {
        GrantBody(object([
            ("accountId", json!(account)),
            ("reservationId", json!(reservation)),
            ("grantTenantId", json!(grant_tenant)),
            ("slots", json!(slots)),
        ]))
    }

    /// `slots` of the platform's reservation for its tenant.
    pub fn on(p: &Platform, slots: i64) -> GrantBody {
        GrantBody::new(&p.account, &p.reservation, &p.tenant, slots)
    }

    /// The term: `startsAt` and `endsAt`.
    pub fn term(self, starts_at: i64, ends_at: i64) -> GrantBody {
        let body = set(self.0, "startsAt", json!(starts_at));
        GrantBody(set(body, "endsAt", json!(ends_at)))
    }

    /// Another reservation (`accountId`, `reservationId`).
    pub fn on_reservation(self, account: &str, reservation: &str) -> GrantBody {
        let body = set(self.0, "accountId", json!(account));
        GrantBody(set(body, "reservationId", json!(reservation)))
    }

    /// Another provider account (`accountId`).
    pub fn account(self, account: &str) -> GrantBody {
        GrantBody(set(self.0, "accountId", json!(account)))
    }

    /// Another reservation of the account (`reservationId`).
    pub fn reservation(self, reservation: &str) -> GrantBody {
        GrantBody(set(self.0, "reservationId", json!(reservation)))
    }

    /// Another grantee (`grantTenantId`).
    pub fn grantee(self, tenant: &str) -> GrantBody {
        GrantBody(set(self.0, "grantTenantId", json!(tenant)))
    }

    /// The grantee's project (`projectId`).
    pub fn project(self, project: &str) -> GrantBody {
        GrantBody(set(self.0, "projectId", json!(project)))
    }

    /// The idempotency key.
    pub fn key(self, key: &str) -> GrantBody {
        GrantBody(set(self.0, "idempotencyKey", json!(key)))
    }

    /// The acting tenant (`tenantId`).
    pub fn acting(self, tenant: &str) -> GrantBody {
        GrantBody(set(self.0, "tenantId", json!(tenant)))
    }

    /// The body.
    pub fn json(&self) -> Value {
        Value::Object(self.0.clone())
    }
}

/// An `instances.create` body of the test flavor [`FLAVOR`].
#[derive(Clone, Debug)]
pub struct InstanceBody(Map<String, Value>);

impl InstanceBody {
    /// An instance on `pool` with the idempotency key `key`, in the caller's
    /// own tenant (no `tenantId`).
    pub fn new(pool: &str, key: &str) -> InstanceBody {
        InstanceBody(object([
            ("poolId", json!(pool)),
            ("flavor", json!(FLAVOR)),
            ("idempotencyKey", json!(key)),
        ]))
    }

    /// The acting tenant (`tenantId`).
    pub fn tenant(self, tenant: &str) -> InstanceBody {
        InstanceBody(set(self.0, "tenantId", json!(tenant)))
    }

    /// `billing` (`"standard"` or `"none"`).
    pub fn billing(self, billing: &str) -> InstanceBody {
        InstanceBody(set(self.0, "billing", json!(billing)))
    }

    /// The body.
    pub fn json(&self) -> Value {
        Value::Object(self.0.clone())
    }
}

/// A `quotas.set` body.
#[derive(Clone, Debug)]
pub struct QuotaBody(Map<String, Value>);

impl QuotaBody {
    /// `max` of `resource` on `pool`, for the caller's own tenant (no
    /// `tenantId`).
    pub fn new(pool: &str, resource: &str, max: i64) -> QuotaBody {
        QuotaBody(object([
            ("poolId", json!(pool)),
            ("resource", json!(resource)),
            ("max", json!(max)),
        ]))
    }

    /// The tenant whose quota is set (`tenantId`).
    pub fn tenant(self, tenant: &str) -> QuotaBody {
        QuotaBody(set(self.0, "tenantId", json!(tenant)))
    }

    /// The body.
    pub fn json(&self) -> Value {
        Value::Object(self.0.clone())
    }
}

/// An `apiKeys.create` body.
#[derive(Clone, Debug)]
pub struct KeyBody(Map<String, Value>);

impl KeyBody {
    /// A key of `tenant` named `name` with `role`.
    pub fn new(tenant: &str, name: &str, role: &str) -> KeyBody {
        KeyBody(object([
            ("tenantId", json!(tenant)),
            ("name", json!(name)),
            ("role", json!(role)),
        ]))
    }

    /// The key's account scope (`accountId`).
    pub fn account(self, account: &str) -> KeyBody {
        KeyBody(set(self.0, "accountId", json!(account)))
    }

    /// The body.
    pub fn json(&self) -> Value {
        Value::Object(self.0.clone())
    }
}
