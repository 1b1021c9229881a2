//! pools and quotas (the capacity module).

mod pools_quotas;
mod quota_validation;
