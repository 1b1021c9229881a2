//! Turning an allowed credentials reference into what a call sends.
//!
//! [`CredentialSource`] is the seam: an adapter asks its source for the
//! bearer token of its account's reference at each call, after the policy
//! check. [`LocalCredentials`] is the one source today: `none`, `env:NAME`
//! and `file:/path` under the process's [`ProviderPolicy`].
//!
//! The secret store (`secret:NAME`, contract 3.9) and Application Default
//! Credentials (`adc`) are later changes. Each comes as another source (a
//! store lookup of the account's own tenant, an OAuth exchange for a
//! service-account key with its `token_uri` under the address guard, the
//! metadata server), chained in front of [`LocalCredentials`] and handed to
//! the adapter alongside [`crate::policy::ProviderAccess`]; with the matching
//! arms of [`ProviderPolicy::check`] allowing them, nothing else changes. The
//! trait returns a boxed future for that reason: those sources do I/O.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::ProviderError;
use crate::gce::Credentials;
use crate::policy::ProviderPolicy;

/// A bearer token; never printed.
pub(crate) struct BearerToken(String);

impl BearerToken {
    pub(crate) fn new(token: String) -> Self {
        BearerToken(token)
    }

    /// The token, for the `Authorization` header only.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(..)")
    }
}

/// The future of [`CredentialSource::bearer_token`].
pub(crate) type TokenFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Option<BearerToken>, ProviderError>> + Send + 'a>>;

/// Where the token for a reference comes from, resolved at each use.
pub(crate) trait CredentialSource: Send + Sync + fmt::Debug {
    /// The token to send for `credentials` (`None`: send no
    /// `Authorization` header). Errors name the reference, never a secret.
    fn bearer_token<'a>(&'a self, credentials: &'a Credentials) -> TokenFuture<'a>;
}

/// `none`, `env:NAME` and `file:/path`, read at each call under the policy
/// (checked again here: a file is resolved and re-checked as it is opened).
#[derive(Debug, Clone)]
pub(crate) struct LocalCredentials {
    policy: Arc<ProviderPolicy>,
}

impl LocalCredentials {
    pub(crate) fn new(policy: Arc<ProviderPolicy>) -> Self {
        LocalCredentials { policy }
    }

    fn read(&self, credentials: &Credentials) -> Result<Option<String>, ProviderError> {
        match credentials {
            Credentials::None => Ok(None),
            Credentials::Env(name) => {
                self.policy
                    .env_allowed(name)
                    .map_err(|why| ProviderError::NotAllowed(format!("env:{name}: {why}")))?;
                std::env::var(name).map(Some).map_err(|e| {
                    let why = match e {
                        std::env::VarError::NotPresent => "is not set",
                        std::env::VarError::NotUnicode(_) => "is not valid UTF-8",
                    };
                    ProviderError::Credentials(format!("environment variable {name} {why}"))
                })
            }
            // A small local file (a mounted secret); read at each call so that
            // rotation needs no restart.
            Credentials::File(path) => self.policy.read_credential_file(path).map(Some),
            Credentials::Secret(_) => Err(ProviderError::NotAllowed(
                "secret: references are not available yet".into(),
            )),
            Credentials::Adc => Err(ProviderError::NotAllowed("adc is not available yet".into())),
        }
    }
}

impl CredentialSource for LocalCredentials {
    fn bearer_token<'a>(&'a self, credentials: &'a Credentials) -> TokenFuture<'a> {
        let result = self.read(credentials).and_then(|token| {
            let Some(token) = token else {
                return Ok(None);
            };
            let trimmed = token.trim();
            if trimmed.is_empty() {
                return Err(ProviderError::Credentials(format!(
                    "{credentials} holds an empty token"
                )));
            }
            Ok(Some(BearerToken::new(trimmed.to_owned())))
        });
        Box::pin(std::future::ready(result))
    }
}
