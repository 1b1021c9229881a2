//! Google authentication for provider accounts (contract 7).
//!
//! - A service-account key (from a tenant's secret, a root `file:`, or
//!   `GOOGLE_APPLICATION_CREDENTIALS` under `adc`) is exchanged for an access
//!   token with the OAuth 2.0 JWT bearer grant (RFC 7523): an RS256 JWT signed
//!   with `jsonwebtoken` (on `ring`, the TLS stack's own crypto), posted to the
//!   key's `token_uri` with the account's own HTTP client, so a tenant's
//!   `token_uri` goes through the same address guard as its endpoint.
//! - `adc` without a key file asks the metadata server
//!   (`GCE_METADATA_HOST`, default `metadata.google.internal`).
//! - Tokens are asked for one scope: [`TOKEN_SCOPE`] (`compute.readonly`)
//!   for reservation listings, [`COMPUTE_SCOPE`] for the calls on managed
//!   instances (contract 7, r3).
//! - Tokens are cached per account, key fingerprint and scope in a
//!   [`TokenCache`] shared by every adapter of the process, until 60 s
//!   before they expire.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::ProviderError;
use crate::credentials::BearerToken;

/// The scope of the tokens that list reservations.
pub const TOKEN_SCOPE: &str = "https://www.googleapis.com/auth/compute.readonly";
/// The scope of the tokens that create, stop, start, delete and read
/// managed instances.
pub const COMPUTE_SCOPE: &str = "https://www.googleapis.com/auth/compute";
/// Google's token endpoint, the one a tenant's key may name without it being
/// listed in `BC_PROVIDER_ENDPOINTS`.
pub const GOOGLE_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// The metadata server's host when `GCE_METADATA_HOST` is not set.
pub const DEFAULT_METADATA_HOST: &str = "metadata.google.internal";
/// A cached token is used until this long before it expires.
const EXPIRY_MARGIN: Duration = Duration::from_secs(60);
/// The lifetime asked for in the JWT (Google's maximum).
const ASSERTION_LIFETIME_S: u64 = 3600;
/// The largest token answer accepted.
const MAX_TOKEN_BODY: usize = 64 * 1024;

/// The kind of a stored secret (contract 3.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecretKind {
    /// A Google service-account key (JSON).
    ServiceAccount,
    /// A bearer token sent as it is.
    Token,
}

impl SecretKind {
    /// The contract's spelling: `service-account` or `token`.
    pub fn as_str(self) -> &'static str {
        match self {
            SecretKind::ServiceAccount => "service-account",
            SecretKind::Token => "token",
        }
    }

    /// From the contract's spelling.
    pub fn parse(text: &str) -> Option<SecretKind> {
        match text {
            "service-account" => Some(SecretKind::ServiceAccount),
            "token" => Some(SecretKind::Token),
            _ => None,
        }
    }
}

/// Why a secret's value is refused. Never holds any part of the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretProblem {
    /// Empty, or a token with whitespace in it.
    #[error("the value must be a non-empty token without whitespace, or a service-account key")]
    NotAToken,
    /// JSON that is not a usable service-account key; says which part.
    #[error("not a usable service-account key: {0}")]
    ServiceAccountInvalid(&'static str),
}

/// Decides a value's kind as `secrets.put` does: JSON is a service-account
/// key and must be a valid one; anything else is a token.
pub fn classify_secret(value: &str) -> Result<SecretKind, SecretProblem> {
    if value.trim_start().starts_with('{') {
        ServiceAccountKey::parse(value)?;
        return Ok(SecretKind::ServiceAccount);
    }
    if value.is_empty() || value.chars().any(char::is_whitespace) {
        return Err(SecretProblem::NotAToken);
    }
    Ok(SecretKind::Token)
}

/// The fingerprint of a value: the first 16 hex digits of its SHA-256.
pub fn fingerprint(value: &str) -> String {
    let mut hex = data_encoding::HEXLOWER.encode(&Sha256::digest(value.as_bytes()));
    hex.truncate(16);
    hex
}

/// A secret of the account's own tenant, decrypted for one listing. Never
/// printed.
#[derive(Clone)]
pub struct ResolvedSecret {
    /// Its name (`secret:NAME`).
    pub name: String,
    /// Its kind.
    pub kind: SecretKind,
    /// Its fingerprint (the token cache's key).
    pub fingerprint: String,
    /// The value.
    pub value: String,
}

impl fmt::Debug for ResolvedSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolvedSecret")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct KeyFile {
    #[serde(rename = "type")]
    kind: Option<String>,
    client_email: Option<String>,
    private_key: Option<String>,
    private_key_id: Option<String>,
    token_uri: Option<String>,
}

/// A parsed Google service-account key. Never printed beyond its email.
#[derive(Clone)]
pub struct ServiceAccountKey {
    /// The account's email (the JWT's `iss`).
    pub client_email: String,
    /// Where tokens are asked for.
    pub token_uri: String,
    private_key_id: Option<String>,
    key: EncodingKey,
}

impl fmt::Debug for ServiceAccountKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceAccountKey")
            .field("client_email", &self.client_email)
            .field("token_uri", &self.token_uri)
            .finish_non_exhaustive()
    }
}

impl ServiceAccountKey {
    /// Parses a key file: `"type": "service_account"`, `client_email`, an RSA
    /// `private_key` in PEM and a `token_uri` (contract 3.9). The key is
    /// proven usable by signing once.
    pub fn parse(text: &str) -> Result<ServiceAccountKey, SecretProblem> {
        let invalid = SecretProblem::ServiceAccountInvalid;
        let file: KeyFile = serde_json::from_str(text).map_err(|_| invalid("not JSON"))?;
        if file.kind.as_deref() != Some("service_account") {
            return Err(invalid("type is not service_account"));
        }
        let client_email = file
            .client_email
            .filter(|e| e.contains('@') && e.len() <= 320)
            .ok_or(invalid("client_email is missing"))?;
        let pem = file.private_key.ok_or(invalid("private_key is missing"))?;
        let key = EncodingKey::from_rsa_pem(pem.as_bytes())
            .map_err(|_| invalid("private_key is not an RSA key in PEM"))?;
        let token_uri = file
            .token_uri
            .filter(|u| u.starts_with("https://") || u.starts_with("http://"))
            .ok_or(invalid("token_uri is missing or not an http(s) URL"))?;
        let parsed = ServiceAccountKey {
            client_email,
            token_uri,
            private_key_id: file.private_key_id,
            key,
        };
        parsed
            .assertion(0, TOKEN_SCOPE)
            .map_err(|_| invalid("private_key cannot sign"))?;
        Ok(parsed)
    }

    /// The signed JWT of the bearer grant for `scope`, issued at `iat`
    /// (epoch seconds).
    fn assertion(&self, iat: u64, scope: &str) -> Result<String, jsonwebtoken::errors::Error> {
        #[derive(Serialize)]
        struct Claims<'a> {
            iss: &'a str,
            scope: &'a str,
            aud: &'a str,
            iat: u64,
            exp: u64,
        }
        let mut header = Header::new(Algorithm::RS256);
        header.kid = self.private_key_id.clone();
        let claims = Claims {
            iss: &self.client_email,
            scope,
            aud: &self.token_uri,
            iat,
            exp: iat + ASSERTION_LIFETIME_S,
        };
        jsonwebtoken::encode(&header, &claims, &self.key)
    }
}

struct Cached {
    token: String,
    usable_until: Instant,
}

/// `(account, key fingerprint, scope)`.
type CacheKey = (String, String, String);

/// Access tokens of the process, per account, key fingerprint and scope.
/// Shared by every adapter the process builds (one per scan).
#[derive(Default)]
pub struct TokenCache {
    entries: Mutex<HashMap<CacheKey, Cached>>,
}

impl fmt::Debug for TokenCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.lock().len();
        f.debug_struct("TokenCache").field("entries", &n).finish()
    }
}

impl TokenCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CacheKey, Cached>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn key(account: &str, fingerprint: &str, scope: &str) -> CacheKey {
        (account.to_owned(), fingerprint.to_owned(), scope.to_owned())
    }

    pub(crate) fn get(&self, account: &str, fingerprint: &str, scope: &str) -> Option<BearerToken> {
        let entries = self.lock();
        let cached = entries.get(&Self::key(account, fingerprint, scope))?;
        (Instant::now() < cached.usable_until).then(|| BearerToken::new(cached.token.clone()))
    }

    pub(crate) fn put(
        &self,
        account: &str,
        fingerprint: &str,
        scope: &str,
        token: &str,
        expires_in: u64,
    ) {
        let lifetime = Duration::from_secs(expires_in).saturating_sub(EXPIRY_MARGIN);
        self.lock().insert(
            Self::key(account, fingerprint, scope),
            Cached {
                token: token.to_owned(),
                usable_until: Instant::now() + lifetime,
            },
        );
    }

    pub(crate) fn forget(&self, account: &str, fingerprint: &str, scope: &str) {
        self.lock().remove(&Self::key(account, fingerprint, scope));
    }
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    expires_in: Option<u64>,
}

#[derive(Deserialize)]
struct TokenRefusal {
    error: Option<String>,
}

/// An OAuth error code safe to log and show: Google's are short words.
fn error_code(body: &[u8]) -> String {
    serde_json::from_slice::<TokenRefusal>(body)
        .ok()
        .and_then(|r| r.error)
        .filter(|e| e.len() <= 64 && e.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .unwrap_or_else(|| "unknown".to_owned())
}

async fn read_limited(mut response: reqwest::Response) -> Result<Vec<u8>, ProviderError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(crate::gce::from_reqwest)? {
        if body.len() + chunk.len() > MAX_TOKEN_BODY {
            return Err(ProviderError::Malformed(
                "the token answer is too large".into(),
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A token answer's `(access_token, expires_in)`.
async fn token_answer(
    response: reqwest::Response,
    what: &str,
) -> Result<(String, u64), ProviderError> {
    let status = response.status();
    let body = read_limited(response).await?;
    if !status.is_success() {
        let code = error_code(&body);
        tracing::warn!(status = status.as_u16(), error = %code, "{what} refused the request");
        return Err(if status.is_server_error() || status.as_u16() == 429 {
            ProviderError::Status {
                status: status.as_u16(),
            }
        } else {
            ProviderError::Credentials(format!("{what} answered HTTP {} ({code})", status.as_u16()))
        });
    }
    let answer: TokenAnswer = serde_json::from_slice(&body)
        .map_err(|_| ProviderError::Malformed(format!("{what} answered no access_token")))?;
    if answer.access_token.is_empty() {
        return Err(ProviderError::Malformed(format!(
            "{what} answered an empty token"
        )));
    }
    Ok((answer.access_token, answer.expires_in.unwrap_or(3600)))
}

/// Exchanges a service-account key for an access token of `scope` (RFC 7523).
pub(crate) async fn exchange(
    client: &reqwest::Client,
    key: &ServiceAccountKey,
    scope: &str,
) -> Result<(String, u64), ProviderError> {
    let iat = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let assertion = key
        .assertion(iat, scope)
        .map_err(|_| ProviderError::Credentials("the service-account key cannot sign".into()))?;
    let response = client
        .post(&key.token_uri)
        .form(&[
            ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
            ("assertion", assertion.as_str()),
        ])
        .send()
        .await
        .map_err(crate::gce::from_reqwest)?;
    token_answer(response, "the token endpoint").await
}

/// Asks the metadata server for the default service account's token,
/// narrowed to `scope` (the `scopes` parameter Google's libraries send).
pub(crate) async fn metadata_token(
    client: &reqwest::Client,
    host: &str,
    scope: &str,
) -> Result<(String, u64), ProviderError> {
    let url = format!("http://{host}/computeMetadata/v1/instance/service-accounts/default/token");
    let response = client
        .get(url)
        .query(&[("scopes", scope)])
        .header("Metadata-Flavor", "Google")
        .send()
        .await
        .map_err(crate::gce::from_reqwest)?;
    token_answer(response, "the metadata server").await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_classified_as_the_contract_says() {
        assert_eq!(classify_secret("ya29.abc"), Ok(SecretKind::Token));
        assert_eq!(classify_secret(""), Err(SecretProblem::NotAToken));
        assert_eq!(classify_secret("two words"), Err(SecretProblem::NotAToken));
        assert_eq!(classify_secret("tab\there"), Err(SecretProblem::NotAToken));
        assert_eq!(
            classify_secret("{\"type\": \"authorized_user\"}"),
            Err(SecretProblem::ServiceAccountInvalid(
                "type is not service_account"
            ))
        );
        assert_eq!(
            classify_secret("{not json"),
            Err(SecretProblem::ServiceAccountInvalid("not JSON"))
        );
        let no_key = r#"{"type":"service_account","client_email":"a@b.iam",
            "token_uri":"https://oauth2.googleapis.com/token"}"#;
        assert_eq!(
            classify_secret(no_key),
            Err(SecretProblem::ServiceAccountInvalid(
                "private_key is missing"
            ))
        );
        let bad_pem = r#"{"type":"service_account","client_email":"a@b.iam",
            "private_key":"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            "token_uri":"https://oauth2.googleapis.com/token"}"#;
        assert!(matches!(
            classify_secret(bad_pem),
            Err(SecretProblem::ServiceAccountInvalid(_))
        ));
    }

    #[test]
    fn problems_never_echo_the_value() {
        let value = "{\"type\": \"service_account\", \"client_email\": \"hunter2\"}";
        let err = classify_secret(value).expect_err("invalid");
        assert!(!err.to_string().contains("hunter2"));
    }

    #[test]
    fn fingerprints_are_16_hex_digits() {
        let f = fingerprint("abc");
        assert_eq!(f, "ba7816bf8f01cfea");
        assert_eq!(f.len(), 16);
    }

    #[test]
    fn the_cache_keeps_a_token_until_a_minute_before_it_expires() {
        let cache = TokenCache::default();
        let (ro, rw) = (TOKEN_SCOPE, COMPUTE_SCOPE);
        cache.put("acct", "fp", ro, "t1", 3600);
        assert_eq!(
            cache.get("acct", "fp", ro).map(|t| t.expose().to_owned()),
            Some("t1".into())
        );
        assert!(cache.get("acct", "other", ro).is_none());
        assert!(cache.get("other", "fp", ro).is_none());
        // Per scope: the read-only token never serves a mutation.
        assert!(cache.get("acct", "fp", rw).is_none());
        cache.put("acct", "fp", rw, "t3", 3600);
        assert_eq!(
            cache.get("acct", "fp", rw).map(|t| t.expose().to_owned()),
            Some("t3".into())
        );
        // 60 s or less: already past its margin.
        cache.put("acct", "short", ro, "t2", 60);
        assert!(cache.get("acct", "short", ro).is_none());
        cache.forget("acct", "fp", ro);
        assert!(cache.get("acct", "fp", ro).is_none());
        assert!(
            cache.get("acct", "fp", rw).is_some(),
            "forgets one scope only"
        );
        assert!(!format!("{cache:?}").contains("t2"));
    }

    #[test]
    fn oauth_error_codes_are_kept_only_when_they_are_words() {
        assert_eq!(error_code(br#"{"error":"invalid_grant"}"#), "invalid_grant");
        assert_eq!(error_code(br#"{"error":"<script>"}"#), "unknown");
        assert_eq!(error_code(b"not json"), "unknown");
    }
}
