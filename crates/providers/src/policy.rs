//! What a provider account may reach, by whose account it is (contract 3.5).
//!
//! Tenants are not trusted: an account's `credentials` is a reference the
//! adapter resolves on the server, and its `endpoint` is where the adapter
//! sends what that reference resolves to. [`ProviderPolicy`] is the
//! operator's configuration of what is allowed, and
//! [`ProviderPolicy::check`] applies it to one account's config. It is
//! checked when an account is created and again before every use (the
//! adapter re-runs it at each call), so an account whose reference a new
//! configuration no longer allows fails without any network call.
//!
//! | reference | root tenant's accounts | other tenants' accounts |
//! |---|---|---|
//! | `none` | allowed | allowed |
//! | `secret:NAME` | not yet (the secret store is a later change) | not yet |
//! | `adc` | not yet (ADC is a later change) | refused |
//! | `env:NAME` | if `NAME` matches `BC_CREDENTIAL_ENV` | refused |
//! | `file:/path` | if the resolved path is inside `BC_CREDENTIAL_DIR` | refused |
//!
//! Endpoints: the root tenant's accounts may name any `http` or `https` URL;
//! other tenants' accounts must name an origin listed in
//! `BC_PROVIDER_ENDPOINTS`. For those accounts the adapter also refuses to
//! connect to internal addresses (loopback, private, link-local, ...) unless
//! the host is itself listed by IP or as `localhost`: see the crate docs.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::gce::{ConfigError, ConfigReason, Credentials, DEFAULT_ENDPOINT, GceConfig};

/// The variable listing the origins other tenants' accounts may name.
pub const ENDPOINTS_VAR: &str = "BC_PROVIDER_ENDPOINTS";
/// The variable listing the environment variables `env:NAME` may name.
pub const CREDENTIAL_ENV_VAR: &str = "BC_CREDENTIAL_ENV";
/// The variable naming the directory `file:/path` must stay inside.
pub const CREDENTIAL_DIR_VAR: &str = "BC_CREDENTIAL_DIR";

/// Variables that hold the platform's own secrets: never a credential
/// source, whatever `BC_CREDENTIAL_ENV` says (a prefix such as `BC_*` does
/// not reach them, and naming one exactly is a start-up error).
const RESERVED_ENV: &[&str] = &[
    "DATABASE_URL",
    "BC_BOOTSTRAP_TOKEN",
    "BC_SECRETS_KEY",
    "BC_SECRETS_OLD_KEYS",
];

const CREDENTIALS_FIELD: &str = "config.credentials";
const ENDPOINT_FIELD: &str = "config.endpoint";

/// Whose account it is: the rules differ for the root tenant and the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccountOwner {
    /// An account of the root tenant (the platform's operator).
    Root,
    /// An account of any other tenant: not trusted.
    Tenant,
}

impl AccountOwner {
    /// The owner of an account of `tenant_id` when the root tenant is `root_tenant_id`.
    pub fn of(tenant_id: &str, root_tenant_id: &str) -> Self {
        if tenant_id == root_tenant_id {
            AccountOwner::Root
        } else {
            AccountOwner::Tenant
        }
    }
}

/// Everything an adapter needs to apply the policy to one account at each
/// use: whose account it is and the process's policy.
#[derive(Debug, Clone)]
pub struct ProviderAccess {
    /// Whose account it is.
    pub owner: AccountOwner,
    /// The process's policy (shared: built once at start-up).
    pub policy: Arc<ProviderPolicy>,
}

impl ProviderAccess {
    /// The access of an account of `owner` under `policy`.
    pub fn new(owner: AccountOwner, policy: Arc<ProviderPolicy>) -> Self {
        ProviderAccess { owner, policy }
    }
}

/// A bad policy variable: names the variable and what is wrong, never the
/// value (which could be a secret pasted in the wrong place).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}: {problem}")]
pub struct PolicyError {
    /// The variable, e.g. `BC_PROVIDER_ENDPOINTS`.
    pub variable: &'static str,
    /// What is wrong with it, e.g. `item 2 is not an origin (scheme://host[:port])`.
    pub problem: String,
}

fn policy_error(variable: &'static str, problem: impl Into<String>) -> PolicyError {
    PolicyError {
        variable,
        problem: problem.into(),
    }
}

/// An entry of `BC_CREDENTIAL_ENV`.
#[derive(Clone, PartialEq, Eq)]
enum EnvPattern {
    /// `NAME`: that variable only.
    Exact(String),
    /// `PREFIX*`: every variable whose name starts with `PREFIX`.
    Prefix(String),
}

impl EnvPattern {
    fn matches(&self, name: &str) -> bool {
        match self {
            EnvPattern::Exact(exact) => name == exact,
            EnvPattern::Prefix(prefix) => name.starts_with(prefix.as_str()),
        }
    }
}

impl fmt::Display for EnvPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnvPattern::Exact(name) => f.write_str(name),
            EnvPattern::Prefix(prefix) => write!(f, "{prefix}*"),
        }
    }
}

/// The operator's rules for provider accounts: which endpoints other
/// tenants' accounts may name and which environment variables and files the
/// root tenant's accounts may use as credentials.
///
/// Built once at start-up from the environment ([`ProviderPolicy::from_env`]);
/// the api-server and the worker read the same variables:
///
/// - `BC_PROVIDER_ENDPOINTS`: comma-separated origins `scheme://host[:port]`
///   (`http` or `https`; `*` allowed as the port, matching any). Unset:
///   `https://compute.googleapis.com`. Empty: none.
/// - `BC_CREDENTIAL_ENV`: comma-separated environment variable names; a
///   trailing `*` matches a prefix (`GCE_TOKEN_*`). Unset or empty: none. A
///   lone `*` is refused, and the platform's own secrets (`DATABASE_URL`,
///   `BC_BOOTSTRAP_TOKEN`, `BC_SECRETS_KEY`, `BC_SECRETS_OLD_KEYS`) are never
///   reachable.
/// - `BC_CREDENTIAL_DIR`: an absolute path to an existing directory other
///   than `/`, resolved once at start-up. Unset or empty: none.
///
/// Items are trimmed and empty items skipped (`a, b,` lists two). `Default`
/// is the policy of an environment where none of the variables is set.
#[derive(Clone, PartialEq, Eq)]
pub struct ProviderPolicy {
    endpoints: Vec<Origin>,
    credential_env: Vec<EnvPattern>,
    /// Canonical (symlinks resolved).
    credential_dir: Option<PathBuf>,
}

impl Default for ProviderPolicy {
    /// `BC_PROVIDER_ENDPOINTS` = [`DEFAULT_ENDPOINT`], no credential variable
    /// or directory.
    fn default() -> Self {
        ProviderPolicy {
            // Cannot fail (a test says so); an empty list would only refuse more.
            endpoints: parse_origin(DEFAULT_ENDPOINT).into_iter().collect(),
            credential_env: Vec::new(),
            credential_dir: None,
        }
    }
}

impl fmt::Debug for ProviderPolicy {
    /// The lists as configured. The policy holds names, origins and a path,
    /// never a secret; nothing here reads a variable's value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let endpoints: Vec<String> = self.endpoints.iter().map(Origin::to_string).collect();
        let env: Vec<String> = self
            .credential_env
            .iter()
            .map(EnvPattern::to_string)
            .collect();
        f.debug_struct("ProviderPolicy")
            .field("endpoints", &endpoints)
            .field("credential_env", &env)
            .field("credential_dir", &self.credential_dir)
            .finish()
    }
}

impl ProviderPolicy {
    /// The policy from the process environment (see [`ProviderPolicy`]). A
    /// variable that is set but not valid UTF-8 is an error.
    pub fn from_env() -> Result<ProviderPolicy, PolicyError> {
        for variable in [ENDPOINTS_VAR, CREDENTIAL_ENV_VAR, CREDENTIAL_DIR_VAR] {
            if let Err(std::env::VarError::NotUnicode(_)) = std::env::var(variable) {
                return Err(policy_error(variable, "is not valid UTF-8"));
            }
        }
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The policy from the variables `lookup` answers (`None`: unset). Reads
    /// the file system only to resolve `BC_CREDENTIAL_DIR`.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<ProviderPolicy, PolicyError> {
        let mut policy = ProviderPolicy::default();
        if let Some(value) = lookup(ENDPOINTS_VAR) {
            policy.endpoints = items(&value)
                .map(|(n, item)| {
                    parse_origin(item).map_err(|why| {
                        policy_error(ENDPOINTS_VAR, format!("item {n} is not an origin: {why}"))
                    })
                })
                .collect::<Result<_, _>>()?;
        }
        if let Some(value) = lookup(CREDENTIAL_ENV_VAR) {
            policy.credential_env = items(&value)
                .map(|(n, item)| {
                    parse_env_pattern(item)
                        .map_err(|why| policy_error(CREDENTIAL_ENV_VAR, format!("item {n} {why}")))
                })
                .collect::<Result<_, _>>()?;
        }
        if let Some(value) = lookup(CREDENTIAL_DIR_VAR).filter(|v| !v.trim().is_empty()) {
            policy.credential_dir = Some(parse_dir(value.trim())?);
        }
        Ok(policy)
    }

    /// Whether an account of `owner` may use `config`: its credentials
    /// reference first, then its endpoint (contract 3.5).
    ///
    /// Credentials (`config.credentials`, reason `credential-not-allowed`):
    /// - `none`: every account.
    /// - `secret:NAME`: every account (`NAME` is looked up in the account's
    ///   own tenant only).
    /// - `adc`: the root tenant's accounts only.
    /// - `env:NAME`: the root tenant's accounts only, and only a `NAME`
    ///   matching `BC_CREDENTIAL_ENV` (and not one of the platform's own
    ///   secrets).
    /// - `file:/path`: the root tenant's accounts only, and only if the
    ///   path, resolved (`..` and symlinks), is inside `BC_CREDENTIAL_DIR`. A
    ///   path that does not exist yet is resolved as far as it exists; the
    ///   adapter checks it again, fully resolved, at each read.
    ///
    /// Endpoint (`config.endpoint`, reason `endpoint-not-allowed`): any http
    /// or https URL for the root tenant's accounts; for other tenants', its
    /// origin (scheme, host compared case-insensitively, port with the
    /// scheme's default filled in) must be listed in `BC_PROVIDER_ENDPOINTS`
    /// (a `*` port matches any). A path after a listed origin is fine.
    ///
    /// Checking a `file:` reference reads file metadata (to resolve the
    /// path), and only for the root tenant's accounts.
    pub fn check(&self, config: &GceConfig, owner: AccountOwner) -> Result<(), ConfigError> {
        self.check_credentials(&config.credentials, owner)?;
        self.check_endpoint(&config.endpoint, owner)
    }

    fn check_credentials(
        &self,
        credentials: &Credentials,
        owner: AccountOwner,
    ) -> Result<(), ConfigError> {
        let refuse = |message: String| {
            Err(ConfigError::not_allowed(
                CREDENTIALS_FIELD,
                ConfigReason::CredentialNotAllowed,
                message,
            ))
        };
        let root_only =
            |kind: &str| format!("{kind} references are for the root tenant's accounts only");
        let tenant = owner == AccountOwner::Tenant;
        match credentials {
            Credentials::None => Ok(()),
            // A secret of the account's own tenant: the api-server checks at
            // create that it exists, and the store resolves it at use only
            // within the account's tenant.
            Credentials::Secret(_) => Ok(()),
            Credentials::Adc if tenant => refuse(root_only("adc")),
            Credentials::Adc => Ok(()),
            Credentials::Env(_) if tenant => refuse(root_only("env:")),
            Credentials::File(_) if tenant => refuse(root_only("file:")),
            // The file system is looked at only for the root tenant's accounts.
            Credentials::Env(name) => match self.env_allowed(name) {
                Ok(()) => Ok(()),
                Err(why) => refuse(why),
            },
            Credentials::File(path) => match self.file_allowed(path) {
                Ok(()) => Ok(()),
                Err(why) => refuse(why),
            },
        }
    }

    fn check_endpoint(&self, endpoint: &str, owner: AccountOwner) -> Result<(), ConfigError> {
        let refuse = |message: &str| {
            Err(ConfigError::not_allowed(
                ENDPOINT_FIELD,
                ConfigReason::EndpointNotAllowed,
                message.to_owned(),
            ))
        };
        let Ok(url) = reqwest::Url::parse(endpoint) else {
            return refuse("not a URL");
        };
        let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
            return refuse("not an http or https URL");
        };
        if !matches!(url.scheme(), "http" | "https") || host.is_empty() {
            return refuse("not an http or https URL");
        }
        if owner == AccountOwner::Root {
            return Ok(());
        }
        if origin_listed(&self.endpoints, url.scheme(), host, port) {
            Ok(())
        } else {
            refuse("the endpoint's origin is not listed in BC_PROVIDER_ENDPOINTS")
        }
    }

    /// Whether a service-account key of an account of `owner` may send its
    /// assertion to `token_uri` (contract 3.5): any http or https URL for the
    /// root tenant's accounts; for other tenants', Google's token endpoint or
    /// an origin listed in `BC_PROVIDER_ENDPOINTS`, as for endpoints.
    pub fn check_token_uri(&self, token_uri: &str, owner: AccountOwner) -> Result<(), ConfigError> {
        if owner == AccountOwner::Tenant && token_uri == crate::auth::GOOGLE_TOKEN_URI {
            return Ok(());
        }
        self.check_endpoint(token_uri, owner)
    }

    /// Whether `env:NAME` may be read (root accounts); the reason if not.
    pub(crate) fn env_allowed(&self, name: &str) -> Result<(), String> {
        if RESERVED_ENV.contains(&name) {
            return Err(format!("{name} holds a secret of the platform itself"));
        }
        if self.credential_env.iter().any(|p| p.matches(name)) {
            Ok(())
        } else {
            Err(format!("{name} is not listed in {CREDENTIAL_ENV_VAR}"))
        }
    }

    /// Whether the connect-time address guard lets a tenant account reach
    /// `host` whatever its addresses: the host is itself listed in
    /// `BC_PROVIDER_ENDPOINTS`, by IP or as `localhost`.
    pub(crate) fn guard_exempt(&self, host: &str) -> bool {
        host_exempt(&self.endpoints, host)
    }
}

/// The non-empty trimmed items of a comma-separated list, numbered from 1.
fn items(value: &str) -> impl Iterator<Item = (usize, &str)> {
    value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .enumerate()
        .map(|(i, item)| (i + 1, item))
}

/// `NAME` or `PREFIX*`; the reason names no part of the item.
fn parse_env_pattern(item: &str) -> Result<EnvPattern, &'static str> {
    let (name, prefix) = match item.strip_suffix('*') {
        Some(name) => (name, true),
        None => (item, false),
    };
    if name.is_empty() {
        return Err("is a lone *, which would expose every environment variable");
    }
    let b = name.as_bytes();
    let ok = b
        .first()
        .is_some_and(|&c| c.is_ascii_uppercase() || c == b'_')
        && b.iter()
            .all(|&c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_');
    if !ok {
        return Err("is not a variable name (^[A-Z_][A-Z0-9_]*$, optionally ending in *)");
    }
    if prefix {
        Ok(EnvPattern::Prefix(name.to_owned()))
    } else if RESERVED_ENV.contains(&name) {
        Err("names a variable that holds a secret of the platform itself")
    } else {
        Ok(EnvPattern::Exact(name.to_owned()))
    }
}

mod files;
mod origins;

use files::parse_dir;
pub(crate) use origins::ip_of_host;
use origins::{Origin, host_exempt, origin_listed, parse_origin};
pub use origins::{Origins, is_internal};

#[cfg(test)]
mod tests;
