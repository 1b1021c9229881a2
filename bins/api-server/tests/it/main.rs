//! The end-to-end tests: one binary that runs the real `api-server` (and
//! `reconciler-worker`) binaries against databases of their own. Each
//! module is one area of the contract; `support` is what they share.

#![expect(
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "tests index answers and expect them; a panic fails the test"
)]

mod support;

mod account_delete;
mod accounts_clock;
mod audit;
mod authz_matrix;
mod bcctl;
mod billing;
mod billing_rules;
mod console;
mod cursors;
mod db_tls;
mod demo;
mod events;
mod google_auth;
mod grants;
mod grants_concurrency;
mod grants_events;
mod grants_first;
mod grants_notices;
mod grants_preview;
mod grants_rules;
mod grants_visibility;
mod hostile_tenant;
mod hot_paths;
mod http_conventions;
mod http_limits;
mod idempotency;
mod instance_quotas;
mod instances;
mod instances_api;
mod instances_concurrency;
mod metrics;
mod partitions;
mod placement;
mod pools_quotas;
mod provider_accounts;
mod quota_validation;
mod scan_claims;
mod secrets;
mod smoke;
mod tenancy;
mod tenant_delete;
mod tenant_delete_races;
mod timeline;
mod views_lists;
mod views_slots;
mod views_timeline;
mod worker_crash;
mod worker_limits;
mod worker_process;
mod worker_replicas;
mod worker_scans;
