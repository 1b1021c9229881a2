//! HTTP clients for endpoints a tenant names that are not provider APIs
//! (webhooks, contract 3.13): the same connect-time guard, TLS roots and
//! refusal of proxies and redirects as the provider adapters.

use std::sync::Arc;
use std::time::Duration;

use crate::guard::GuardedResolver;
use crate::policy::{ENDPOINTS_VAR, PolicyError, ProviderPolicy};
use crate::{ProviderError, gce};

/// The variable listing the origins other tenants' webhooks may name over
/// `http` or on internal addresses (same syntax as `BC_PROVIDER_ENDPOINTS`).
pub const WEBHOOK_ENDPOINTS_VAR: &str = "BC_WEBHOOK_ENDPOINTS";

/// The policy of webhook endpoints from `BC_WEBHOOK_ENDPOINTS`'s value
/// (`None` or empty: no origin listed).
pub fn webhook_policy(value: Option<&str>) -> Result<ProviderPolicy, PolicyError> {
    let value = value.unwrap_or_default().to_owned();
    ProviderPolicy::from_lookup(|name| (name == ENDPOINTS_VAR).then(|| value.clone()))
}

/// A client that never follows a redirect and never uses a proxy, with the
/// operator's extra TLS roots, giving up after `timeout`. With `guard`
/// (another tenant's endpoint), a name that resolves only to internal
/// addresses is refused at connect time unless the policy lists it.
pub fn guarded_client(
    guard: Option<Arc<ProviderPolicy>>,
    timeout: Duration,
    options: &gce::GceProviderOptions,
) -> Result<reqwest::Client, ProviderError> {
    let resolver = GuardedResolver::new(guard, &options.dns_overrides);
    let mut builder = reqwest::Client::builder()
        .connect_timeout(timeout)
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(resolver));
    for root in &options.extra_roots {
        builder = builder.add_root_certificate(root.clone());
    }
    builder
        .build()
        .map_err(|e| ProviderError::Transport(e.to_string()))
}
