//! What every method shares: HTTP conventions and limits, idempotency keys,
//! log cursors, the authorization matrix and a hostile tenant at the
//! provider-account boundary.

mod authz_matrix;
mod conventions;
mod cursors;
mod hostile_tenant;
mod idempotency;
mod limits;
mod rates;
mod slow_readers;
