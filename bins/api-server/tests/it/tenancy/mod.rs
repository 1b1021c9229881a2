//! tenants, projects and apiKeys, and `tenants.delete` with its races.

mod api;
mod delete;
mod delete_races;
