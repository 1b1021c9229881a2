//! The patterns of the contract (1.3, 1.4, 1.5) the input types' members
//! match. A TypeID is its prefix, `_` and 26 to 52 base32 characters, so at
//! most the prefix's length + 53.

/// Tenant ids and names.
pub const TENANT_ID: &str = storage::ids::TenantId::PATTERN;
/// Idempotency keys.
pub const IDEMPOTENCY_KEY: &str = "^[A-Za-z0-9._:-]{1,128}$";
/// Display names.
pub const NAME: &str = "^[A-Za-z0-9._ -]{1,128}$";
/// Quota resource names.
pub const RESOURCE: &str = "^[A-Za-z][A-Za-z0-9._-]{0,63}$";
/// Provider reservation ids.
pub const RESERVATION_ID: &str = storage::ids::ReservationId::PATTERN;
/// Machine types (pool flavors).
pub const FLAVOR: &str = "^[a-z0-9][a-z0-9-]{0,63}$";
/// Provider account ids (at most 58 characters).
pub const ACCOUNT_ID: &str = storage::ids::AccountId::PATTERN;
/// Grant ids (at most 59 characters).
pub const GRANT_ID: &str = storage::ids::GrantId::PATTERN;
/// Project ids (at most 56 characters).
pub const PROJECT_ID: &str = storage::ids::ProjectId::PATTERN;
/// Pool ids (at most 57 characters).
pub const POOL_ID: &str = storage::ids::PoolId::PATTERN;
/// Instance ids (at most 57 characters).
pub const INSTANCE_ID: &str = storage::ids::InstanceId::PATTERN;
/// API key ids (at most 56 characters).
pub const KEY_ID: &str = storage::ids::KeyId::PATTERN;
