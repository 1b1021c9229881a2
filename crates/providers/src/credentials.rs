//! Turning an allowed credentials reference into what a call authenticates
//! with: nothing, a bearer token as it is (`env:`, a token file or secret),
//! a service-account key to exchange for tokens (a key file or secret,
//! `GOOGLE_APPLICATION_CREDENTIALS` under `adc`), or the metadata server
//! (`adc` without a key file). Read at each listing, under the policy.

use std::fmt;
use std::sync::Arc;

use crate::ProviderError;
use crate::auth::{ResolvedSecret, SecretKind, ServiceAccountKey, fingerprint};
use crate::gce::Credentials;
use crate::policy::ProviderPolicy;

/// A bearer token; never printed.
#[derive(Clone)]
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

/// What a reference gives the adapter to authenticate with.
pub(crate) enum Material {
    /// No `Authorization` header.
    None,
    /// A bearer token sent as it is.
    Static(BearerToken),
    /// A service-account key to exchange for tokens; `fingerprint` keys the
    /// token cache.
    Key {
        key: Box<ServiceAccountKey>,
        fingerprint: String,
    },
    /// The metadata server's token (`adc` without a key file).
    Metadata,
}

/// Reads a reference under the policy (checked again here: a file is
/// resolved and re-checked as it is opened) at each listing, so that
/// rotation needs no restart.
#[derive(Debug, Clone)]
pub(crate) struct LocalCredentials {
    policy: Arc<ProviderPolicy>,
}

impl LocalCredentials {
    pub(crate) fn new(policy: Arc<ProviderPolicy>) -> Self {
        LocalCredentials { policy }
    }

    /// The material of `credentials`; `secret` is the account's resolved
    /// `secret:NAME`, if that is its reference. Errors name the reference,
    /// never a secret.
    pub(crate) fn material(
        &self,
        credentials: &Credentials,
        secret: Option<&ResolvedSecret>,
    ) -> Result<Material, ProviderError> {
        match credentials {
            Credentials::None => Ok(Material::None),
            Credentials::Env(name) => {
                self.policy
                    .env_allowed(name)
                    .map_err(|why| ProviderError::NotAllowed(format!("env:{name}: {why}")))?;
                let value = std::env::var(name).map_err(|e| {
                    let why = match e {
                        std::env::VarError::NotPresent => "is not set",
                        std::env::VarError::NotUnicode(_) => "is not valid UTF-8",
                    };
                    ProviderError::Credentials(format!("environment variable {name} {why}"))
                })?;
                static_token(credentials, &value)
            }
            Credentials::File(path) => {
                let content = self.policy.read_credential_file(path)?;
                from_content(credentials, &content)
            }
            Credentials::Secret(name) => match secret {
                Some(s) if s.name == *name => match s.kind {
                    SecretKind::Token => static_token(credentials, &s.value),
                    SecretKind::ServiceAccount => Ok(Material::Key {
                        key: Box::new(parse_key(credentials, &s.value)?),
                        fingerprint: s.fingerprint.clone(),
                    }),
                },
                _ => Err(ProviderError::Credentials(format!(
                    "{credentials} was not resolved for this account"
                ))),
            },
            Credentials::Adc => match std::env::var("GOOGLE_APPLICATION_CREDENTIALS") {
                Ok(path) if !path.trim().is_empty() => {
                    let content = std::fs::read_to_string(path.trim()).map_err(|e| {
                        ProviderError::Credentials(format!(
                            "cannot read GOOGLE_APPLICATION_CREDENTIALS: {}",
                            e.kind()
                        ))
                    })?;
                    Ok(Material::Key {
                        key: Box::new(parse_key(credentials, &content)?),
                        fingerprint: fingerprint(&content),
                    })
                }
                _ => Ok(Material::Metadata),
            },
        }
    }
}

/// A file's content: a service-account key (JSON) or a token.
fn from_content(credentials: &Credentials, content: &str) -> Result<Material, ProviderError> {
    if content.trim_start().starts_with('{') {
        Ok(Material::Key {
            key: Box::new(parse_key(credentials, content)?),
            fingerprint: fingerprint(content),
        })
    } else {
        static_token(credentials, content)
    }
}

fn parse_key(credentials: &Credentials, text: &str) -> Result<ServiceAccountKey, ProviderError> {
    ServiceAccountKey::parse(text)
        .map_err(|e| ProviderError::Credentials(format!("{credentials}: {e}")))
}

fn static_token(credentials: &Credentials, value: &str) -> Result<Material, ProviderError> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(ProviderError::Credentials(format!(
            "{credentials} holds an empty token"
        )));
    }
    Ok(Material::Static(BearerToken::new(trimmed.to_owned())))
}
