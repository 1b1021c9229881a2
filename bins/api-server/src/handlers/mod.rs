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

/// **Architecture Invariant** (docs/ARCHITECTURE.md): handlers are thin, no
/// SQL in them. This reads the handlers' sources and fails on a query built
/// there (diesel's DSL, a schema table, raw SQL).
#[cfg(test)]
mod thin {
    /// What building a query looks like.
    const QUERYING: &[&str] = &["diesel", "sql_query", "storage::schema", "QueryDsl"];

    #[test]
    fn no_handler_builds_a_query() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/handlers");
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir}: {e}"));
        let mut read = 0;
        let mut querying = Vec::new();
        for entry in entries {
            let path = entry.unwrap_or_else(|e| panic!("{dir}: {e}")).path();
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            read += 1;
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
                if QUERYING.iter().any(|q| line.contains(q)) {
                    querying.push(format!("{}: {}", path.display(), line.trim()));
                }
            }
        }
        assert!(read > 10, "only {read} handler files read");
        assert!(querying.is_empty(), "queries in handlers: {querying:#?}");
    }
}
