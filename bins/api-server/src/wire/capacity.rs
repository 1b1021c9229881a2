//! Pools, their flavors and quota rows (contract 3.1 and 5).

use schemars::JsonSchema;
use serde::Serialize;
use storage::model::pool_vm::PoolVm;
use storage::ops::pools;

use super::Millis;

/// A flavor a pool offers.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Flavor {
    /// Provider machine type, e.g. `n2-standard-4`.
    pub name: String,
    /// vCPUs per instance.
    pub vcpus: i64,
    /// Memory per instance in GiB.
    pub memory_gib: i64,
    /// GPUs per instance.
    pub gpus: i64,
}

/// A pool (contract 3.1).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Pool {
    /// `pool_...`
    pub pool_id: String,
    /// Name.
    pub name: String,
    /// Region, e.g. `us-central1`.
    pub region: String,
    /// Provider name.
    pub provider: String,
    /// The root provider account behind the pool.
    pub account_id: String,
    /// Flavors.
    pub flavors: Vec<Flavor>,
    /// Tenants the pool is offered to (to root: all of them; to a tenant: itself).
    pub offered_to: Vec<String>,
    /// Creation instant.
    pub created_at: Millis,
    /// Its VM settings: a managed pool (contract 3.12).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vm: Option<PoolVm>,
    /// Its grants may lend idle slots to interruptible instances (3.14).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lending: Option<PoolLending>,
}

/// A pool's lending (contract 3.3, r4).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolLending {
    /// The notice a borrower gets before its VM is deleted (seconds).
    pub notice_seconds: i32,
}

impl From<pools::Pool> for Pool {
    fn from(p: pools::Pool) -> Pool {
        Pool {
            pool_id: p.pool_id,
            name: p.name,
            region: p.region,
            provider: p.provider,
            account_id: p.account_id,
            flavors: p
                .flavors
                .into_iter()
                .map(|f| Flavor {
                    name: f.name,
                    vcpus: f.vcpus,
                    memory_gib: f.memory_gib,
                    gpus: f.gpus,
                })
                .collect(),
            offered_to: p.offered_to,
            created_at: p.created_at,
            vm: p.vm,
            lending: p.lending.map(|l| PoolLending {
                notice_seconds: l.notice_seconds,
            }),
        }
    }
}

/// One quota row (contract 5).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Quota {
    /// The pool.
    pub pool_id: String,
    /// The resource (`instances`, `vcpus`, ...).
    pub resource: String,
    /// The maximum in effect.
    pub max: i64,
    /// Currently charged.
    pub used: i64,
    /// `max - used`, never below 0.
    pub available: i64,
}

impl From<pools::Quota> for Quota {
    fn from(q: pools::Quota) -> Quota {
        Quota {
            pool_id: q.pool_id,
            resource: q.resource,
            max: q.max,
            used: q.used,
            available: q.available,
        }
    }
}

replies! {
    /// `{ "pool": Pool }`
    PoolReply { pool: Pool as "pool" }
    /// `{ "quota": Quota }`
    QuotaReply { quota: Quota as "quota" }
}
