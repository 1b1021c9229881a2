//! The `Authorization` header of a call: the credentials' bearer token as
//! it is, or an access token of the call's scope from the cache or freshly
//! obtained (a key exchanged under the policy, or the metadata server).

use reqwest::header::HeaderValue;

use super::GceProvider;
use crate::ProviderError;
use crate::auth;
use crate::credentials::{BearerToken, Material};
use crate::guard;
use crate::policy::{AccountOwner, ProviderPolicy};

impl GceProvider {
    /// The bearer token of `material`: as it is, or an access token of
    /// `scope` from the cache or freshly asked for (`fresh`: the cached one
    /// was refused).
    async fn token(
        &self,
        material: &Material,
        scope: &str,
        fresh: bool,
    ) -> Result<Option<BearerToken>, ProviderError> {
        let cache = &self.options.token_cache;
        let (fingerprint, key) = match material {
            Material::None => return Ok(None),
            Material::Static(token) => return Ok(Some(token.clone())),
            Material::Key { key, fingerprint } => (fingerprint.as_str(), Some(key)),
            Material::Metadata => ("metadata", None),
        };
        if fresh {
            cache.forget(&self.account_id, fingerprint, scope);
        } else if let Some(token) = cache.get(&self.account_id, fingerprint, scope) {
            return Ok(Some(token));
        }
        let (token, expires_in) = match key {
            Some(key) => {
                self.admit_token_uri(&key.token_uri)?;
                auth::exchange(&self.client, key, scope).await?
            }
            None => auth::metadata_token(&self.client, &self.options.metadata_host, scope).await?,
        };
        tracing::info!(
            project = %self.config.project,
            account = %self.account_id,
            scope,
            expires_in,
            "gce access token obtained"
        );
        if let Some(t) = self.options.telemetry.as_deref() {
            t.token_refresh();
        }
        cache.put(&self.account_id, fingerprint, scope, &token, expires_in);
        Ok(Some(BearerToken::new(token)))
    }

    /// A tenant's key may send its assertion only where its endpoint could go
    /// (contract 3.5): Google's token endpoint or a listed origin, never an
    /// internal address (the client's guard refuses those at connect time).
    fn admit_token_uri(&self, token_uri: &str) -> Result<(), ProviderError> {
        let policy: &ProviderPolicy = &self.access.policy;
        policy
            .check_token_uri(token_uri, self.access.owner)
            .map_err(|e| {
                let why = e.message.unwrap_or_else(|| e.reason.to_string());
                ProviderError::NotAllowed(format!("the key's token_uri is not allowed: {why}"))
            })?;
        if self.access.owner == AccountOwner::Tenant {
            let url = reqwest::Url::parse(token_uri)
                .map_err(|_| ProviderError::NotAllowed("token_uri: not a URL".into()))?;
            guard::check_ip_literal(&url, policy)?;
        }
        Ok(())
    }

    /// The header a listing would send now (tests).
    #[cfg(test)]
    pub(super) async fn current_authorization(&self) -> Result<Option<HeaderValue>, ProviderError> {
        let material = self
            .credentials
            .material(&self.config.credentials, self.secret.as_ref())?;
        self.authorization(&material, auth::TOKEN_SCOPE, false)
            .await
    }

    /// The `Authorization` header for a call needing `scope`, marked
    /// sensitive so that it is never printed. Errors name the reference,
    /// never the token.
    pub(super) async fn authorization(
        &self,
        material: &Material,
        scope: &str,
        fresh: bool,
    ) -> Result<Option<HeaderValue>, ProviderError> {
        let reference = &self.config.credentials;
        let Some(token) = self.token(material, scope, fresh).await? else {
            return Ok(None);
        };
        let mut value =
            HeaderValue::from_str(&format!("Bearer {}", token.expose())).map_err(|_| {
                ProviderError::Credentials(format!("{reference} does not hold a bearer token"))
            })?;
        value.set_sensitive(true);
        Ok(Some(value))
    }
}
