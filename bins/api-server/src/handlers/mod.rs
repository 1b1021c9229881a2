//! Handlers: receive the typed input, call one storage operation, return the
//! typed view. No SQL here; authorization beyond the registry's decision goes
//! through `iam-check` ([`crate::registry::Call::allow`]).

pub mod accounts;
pub mod audit;
pub mod capacity;
pub mod examples;
pub mod grants;
pub mod instances;
pub mod secrets;
pub mod system;
pub mod tenancy;
pub mod views;
pub mod webhooks;

use crate::error::Code;
use crate::registry::Service;

/// Grants, instances and provider accounts.
const VPS: Service = Service {
    name: "vps",
    phase: "v1.0",
    errors: &[Code::NotFound],
};

/// Pools and quotas.
const CAPACITY: Service = Service {
    name: "capacity",
    phase: "v0.1",
    errors: &[Code::NotFound],
};

/// Tenants, projects, API keys, secrets and the audit trail.
const IAM: Service = Service {
    name: "iam",
    phase: "v0.1",
    errors: &[],
};

/// The event log.
const EVENTS: Service = Service {
    name: "events",
    phase: "v0.1",
    errors: &[],
};

/// Usage records and the clock.
const BILLING: Service = Service {
    name: "billing",
    phase: "v0.1",
    errors: &[],
};
