//! instances: the API's rules, placement in grants and ordinary slots,
//! quota charges, and concurrent admissions.

mod api;
mod concurrency;
mod installations;
mod lending;
mod lifecycle;
mod managed;
mod managed_rules;
mod placement;
mod provider_pace;
mod quotas;
mod stuck_states;
