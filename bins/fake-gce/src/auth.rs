//! Google authentication as the fake plays it: service-account public keys,
//! the JWT bearer grant's checks and the access tokens it hands out.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

/// The grant type of RFC 7523's JWT bearer grant.
pub const JWT_BEARER_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// The scope a read call needs.
pub const COMPUTE_READONLY_SCOPE: &str = "https://www.googleapis.com/auth/compute.readonly";
/// The scope of calls that change VMs (it also covers reads).
pub const COMPUTE_SCOPE: &str = "https://www.googleapis.com/auth/compute";
/// The scope covering every Google Cloud API, VM changes included: what a
/// metadata token has when the caller names no `scopes`.
pub const CLOUD_PLATFORM_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// How far in the future `iat` may be (clock skew).
const IAT_SKEW_S: i64 = 60;
/// The longest `exp - iat` Google accepts.
const MAX_ASSERTION_LIFETIME_S: i64 = 3600;
/// The prefix of every access token the fake issues.
pub const ACCESS_TOKEN_PREFIX: &str = "fake-ya29.";

/// Which endpoint issued a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Issuer {
    /// `POST /token`.
    Grant,
    /// The metadata server's token endpoint.
    Metadata,
}

/// What a token's scopes let it do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads only (`compute.readonly`).
    Read,
    /// Reads and VM changes (`compute` or `cloud-platform`).
    Write,
}

impl Access {
    /// The access of a token granted `scopes`.
    pub fn of<'a>(scopes: impl IntoIterator<Item = &'a str>) -> Access {
        if scopes
            .into_iter()
            .any(|s| s == COMPUTE_SCOPE || s == CLOUD_PLATFORM_SCOPE)
        {
            Access::Write
        } else {
            Access::Read
        }
    }
}

#[derive(Debug)]
struct Issued {
    expires: Instant,
    access: Access,
}

/// Registered keys, live tokens and the issue counts.
#[derive(Debug, Default)]
pub struct Auth {
    /// Service-account email → its public key (PEM).
    public_keys: BTreeMap<String, String>,
    /// Access token → when it expires and what it may do. Revoked tokens
    /// are removed; expired ones are pruned when a new one is issued.
    tokens: HashMap<String, Issued>,
    issued: u64,
    metadata_issued: u64,
    /// Tokens issued per scope granted.
    scopes: BTreeMap<String, u64>,
}

impl Auth {
    /// Registers (or replaces) the RSA public key of `email`.
    pub fn register(&mut self, email: &str, pem: &str) -> Result<(), String> {
        let label = pem.trim_start();
        if !(label.starts_with("-----BEGIN PUBLIC KEY-----")
            || label.starts_with("-----BEGIN RSA PUBLIC KEY-----"))
        {
            return Err("'publicKeyPem' must be a PEM 'PUBLIC KEY' or 'RSA PUBLIC KEY'".into());
        }
        DecodingKey::from_rsa_pem(pem.as_bytes())
            .map_err(|e| format!("'publicKeyPem' is not an RSA public key: {e}"))?;
        self.public_keys.insert(email.to_owned(), pem.to_owned());
        Ok(())
    }

    /// Forgets the key of `email`; answers whether there was one.
    pub fn unregister(&mut self, email: &str) -> bool {
        self.public_keys.remove(email).is_some()
    }

    /// The registered key of `email`.
    pub fn public_key(&self, email: &str) -> Option<&str> {
        self.public_keys.get(email).map(String::as_str)
    }

    /// Every registered key, by email.
    pub fn public_keys(&self) -> &BTreeMap<String, String> {
        &self.public_keys
    }

    /// Stores a fresh token of `scopes` valid for `ttl` from `now` and
    /// counts it.
    pub fn issue(
        &mut self,
        issuer: Issuer,
        token: String,
        scopes: &[&str],
        now: Instant,
        ttl: Duration,
    ) {
        self.tokens.retain(|_, issued| issued.expires > now);
        // A TTL past what Instant can hold is as good as forever.
        let expires = now
            .checked_add(ttl)
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400));
        let access = Access::of(scopes.iter().copied());
        self.tokens.insert(token, Issued { expires, access });
        match issuer {
            Issuer::Grant => self.issued += 1,
            Issuer::Metadata => self.metadata_issued += 1,
        }
        for scope in scopes {
            *self.scopes.entry((*scope).to_owned()).or_default() += 1;
        }
    }

    /// What `token` may do, if it was issued here, is unexpired at `now`
    /// and not revoked.
    pub fn access(&self, token: &str, now: Instant) -> Option<Access> {
        self.tokens
            .get(token)
            .filter(|issued| issued.expires > now)
            .map(|issued| issued.access)
    }

    /// Revokes every token; answers how many were still live.
    pub fn revoke_all(&mut self, now: Instant) -> usize {
        let live = self.tokens.values().filter(|i| i.expires > now).count();
        self.tokens.clear();
        live
    }

    /// Tokens issued per scope granted since start or the last reset.
    pub fn scope_counts(&self) -> &BTreeMap<String, u64> {
        &self.scopes
    }

    /// Tokens issued by `POST /token` and by the metadata endpoint since
    /// start or the last reset.
    pub fn counts(&self) -> (u64, u64) {
        (self.issued, self.metadata_issued)
    }

    /// Zeroes the issue counts, per scope too (tokens stay valid).
    pub fn reset_counts(&mut self) {
        self.issued = 0;
        self.metadata_issued = 0;
        self.scopes.clear();
    }
}

/// A new opaque access token: `fake-ya29.` and 48 hex digits.
pub fn new_access_token() -> Result<String, String> {
    let mut bytes = [0u8; 24];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut bytes)
        .map_err(|_| "the random generator failed".to_owned())?;
    let mut token = String::from(ACCESS_TOKEN_PREFIX);
    for b in bytes {
        token.push_str(&format!("{b:02x}"));
    }
    Ok(token)
}

/// Checks a JWT bearer assertion: RS256, signed by the key registered for
/// its `iss` (looked up with `key_of`), `aud` equal to `expected_aud`, `exp`
/// after `now_s`, `iat` at most 60 s ahead, `exp - iat` at most an hour, and
/// a compute scope. Answers the `scope` claim; the error is the
/// `error_description`.
pub fn check_assertion(
    assertion: &str,
    expected_aud: &str,
    now_s: i64,
    key_of: impl FnOnce(&str) -> Option<String>,
) -> Result<String, String> {
    let header = jsonwebtoken::decode_header(assertion)
        .map_err(|e| format!("Invalid JWT: the header does not decode: {e}"))?;
    if header.alg != Algorithm::RS256 {
        return Err(format!(
            "Invalid JWT: the algorithm must be RS256, not {:?}",
            header.alg
        ));
    }
    // The claims first, unverified, to learn whose key verifies them.
    let mut unverified = Validation::new(Algorithm::RS256);
    unverified.insecure_disable_signature_validation();
    unverified.validate_exp = false;
    unverified.validate_aud = false;
    unverified.required_spec_claims.clear();
    let claims: Value =
        jsonwebtoken::decode(assertion, &DecodingKey::from_secret(&[]), &unverified)
            .map_err(|e| format!("Invalid JWT: the claims do not decode: {e}"))?
            .claims;
    let Some(iss) = claims.get("iss").and_then(Value::as_str) else {
        return Err("Invalid JWT: 'iss' (the service account's email) is missing".into());
    };
    let Some(pem) = key_of(iss) else {
        return Err(format!(
            "Invalid grant: account not found ({iss} has no registered key)"
        ));
    };
    let key = DecodingKey::from_rsa_pem(pem.as_bytes())
        .map_err(|e| format!("the key registered for {iss} does not load: {e}"))?;
    let (message, signature) = assertion
        .rsplit_once('.')
        .ok_or("Invalid JWT: not three parts")?;
    match jsonwebtoken::crypto::verify(signature, message.as_bytes(), &key, Algorithm::RS256) {
        Ok(true) => {}
        Ok(false) | Err(_) => return Err("Invalid JWT Signature.".into()),
    }
    match claims.get("aud").and_then(Value::as_str) {
        Some(aud) if aud == expected_aud => {}
        Some(aud) => {
            return Err(format!(
                "Invalid JWT: 'aud' is {aud}, it must be {expected_aud}"
            ));
        }
        None => return Err(format!("Invalid JWT: 'aud' must be {expected_aud}")),
    }
    let timeframe = "Invalid JWT: Token must be a short-lived token (60 minutes) and in a \
                     reasonable timeframe. Check your iat and exp values in the JWT claim.";
    let (Some(iat), Some(exp)) = (
        claims.get("iat").and_then(Value::as_i64),
        claims.get("exp").and_then(Value::as_i64),
    ) else {
        return Err(format!("{timeframe} ('iat' and 'exp' must be integers)"));
    };
    if exp <= now_s {
        return Err(format!("{timeframe} (expired: exp {exp} <= now {now_s})"));
    }
    if iat > now_s + IAT_SKEW_S {
        return Err(format!(
            "{timeframe} (iat {iat} is more than {IAT_SKEW_S} s ahead of now {now_s})"
        ));
    }
    if exp <= iat || exp - iat > MAX_ASSERTION_LIFETIME_S {
        return Err(format!(
            "{timeframe} (exp - iat must be from 1 to {MAX_ASSERTION_LIFETIME_S} s)"
        ));
    }
    let scopes = claims.get("scope").and_then(Value::as_str).unwrap_or("");
    if !scopes
        .split(' ')
        .any(|s| s == COMPUTE_READONLY_SCOPE || s == COMPUTE_SCOPE)
    {
        return Err(format!(
            "Invalid OAuth scope: 'scope' must include {COMPUTE_READONLY_SCOPE} or \
             {COMPUTE_SCOPE}"
        ));
    }
    Ok(scopes.to_owned())
}

/// Why a form body was refused.
pub type FormError = String;

/// Decodes an `application/x-www-form-urlencoded` body; a name given twice
/// is refused (RFC 6749 §3.2).
pub fn parse_form(body: &[u8]) -> Result<BTreeMap<String, String>, FormError> {
    let text = std::str::from_utf8(body).map_err(|_| "the body is not UTF-8".to_owned())?;
    let mut form = BTreeMap::new();
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |s: &str| {
            percent_decode(&s.replace('+', " "))
                .ok_or_else(|| format!("bad percent-encoding in '{pair}'"))
        };
        let name = decode(name)?;
        if form.insert(name.clone(), decode(value)?).is_some() {
            return Err(format!("parameter '{name}' given more than once"));
        }
    }
    Ok(form)
}

/// Decodes `%XX` escapes; `None` on a malformed escape or a result that is
/// not UTF-8 (`percent-encoding` alone would pass both through).
pub fn percent_decode(s: &str) -> Option<String> {
    let well_formed = s.split('%').skip(1).all(|after| {
        after
            .as_bytes()
            .get(..2)
            .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    });
    if !well_formed {
        return None;
    }
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .ok()
        .map(std::borrow::Cow::into_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_decode() {
        let form = parse_form(b"a=1+2&b=%2Fx%40y&c").expect("form");
        assert_eq!(form["a"], "1 2");
        assert_eq!(form["b"], "/x@y");
        assert_eq!(form["c"], "");
        assert!(parse_form(b"a=1&a=2").is_err());
        assert!(parse_form(b"a=%zz").is_err());
        assert!(parse_form(b"a=%4").is_err());
        assert!(parse_form(&[0xff]).is_err());
    }

    #[test]
    fn escapes_must_decode_to_utf8() {
        assert!(parse_form(b"a=%ff").is_err());
        assert_eq!(percent_decode("a%40b+c").as_deref(), Some("a@b+c"));
        assert_eq!(percent_decode("%e2%82%ac").as_deref(), Some("\u{20ac}"));
        assert!(percent_decode("%e2%82").is_none());
    }

    #[test]
    fn tokens_expire_and_revoke() {
        let mut auth = Auth::default();
        let t0 = Instant::now();
        let ten = Duration::from_secs(10);
        auth.issue(
            Issuer::Grant,
            "a".into(),
            &[COMPUTE_READONLY_SCOPE],
            t0,
            ten,
        );
        auth.issue(
            Issuer::Metadata,
            "b".into(),
            &[],
            t0,
            Duration::from_secs(1),
        );
        auth.issue(Issuer::Grant, "w".into(), &[COMPUTE_SCOPE], t0, ten);
        assert_eq!(auth.access("a", t0), Some(Access::Read));
        assert_eq!(auth.access("w", t0), Some(Access::Write));
        assert_eq!(
            auth.scope_counts().values().copied().collect::<Vec<_>>(),
            [1, 1]
        );
        assert!(auth.access("a", t0).is_some());
        assert!(auth.access("c", t0).is_none());
        let later = t0 + Duration::from_secs(2);
        assert!(auth.access("b", later).is_none());
        assert_eq!(auth.counts(), (2, 1));
        assert_eq!(auth.revoke_all(later), 2);
        assert!(auth.access("a", later).is_none());
        auth.reset_counts();
        assert_eq!(auth.counts(), (0, 0));
        assert!(auth.scope_counts().is_empty());
    }

    #[test]
    fn access_tokens_are_fresh() {
        let a = new_access_token().expect("token");
        let b = new_access_token().expect("token");
        assert_ne!(a, b);
        assert!(a.starts_with(ACCESS_TOKEN_PREFIX));
        assert_eq!(a.len(), ACCESS_TOKEN_PREFIX.len() + 48);
    }

    #[test]
    fn keys_must_be_public_rsa_pems() {
        let mut auth = Auth::default();
        assert!(auth.register("a@b", "not a pem").is_err());
        assert!(
            auth.register(
                "a@b",
                "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"
            )
            .is_err()
        );
        assert!(auth.public_key("a@b").is_none());
        assert!(!auth.unregister("a@b"));
    }

    #[test]
    fn malformed_assertions_are_refused() {
        for bad in ["", "a.b", "a.b.c", "eyJhbGciOiJIUzI1NiJ9.e30.sig"] {
            let err = check_assertion(bad, "http://x/token", 0, |_| None).expect_err(bad);
            assert!(err.starts_with("Invalid JWT"), "{bad}: {err}");
        }
    }
}
