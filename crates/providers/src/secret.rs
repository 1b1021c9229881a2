//! Heuristics that catch a secret pasted where a reference was expected.
//!
//! Provider configs are stored and shown back to callers, so they must hold
//! references to secrets (`env:NAME`, `file:/path`), never the secrets. These
//! checks are deliberately conservative: they look for the well-known shapes of
//! keys and tokens (PEM blocks, service-account JSON, Google OAuth tokens and
//! API keys, common vendor token prefixes, JWTs) and for long high-entropy
//! runs of token characters. A false positive costs the operator a clearer
//! reference; a false negative stores a secret.

use serde_json::Value;

/// Substrings that only a key or key file contains.
const MARKERS: &[&str] = &[
    "-----BEGIN",
    "PRIVATE KEY-----",
    "\"private_key\"",
    "\"private_key_id\"",
    "\"client_secret\"",
    "\"refresh_token\"",
    "\"access_token\"",
];

/// Prefixes of well-known token formats, with the minimum length at which a
/// string starting with them is taken to be a token.
const PREFIXES: &[(&str, usize)] = &[
    ("ya29.", 6),    // Google OAuth 2.0 access token
    ("1//", 20),     // Google OAuth 2.0 refresh token
    ("AIza", 30),    // Google API key
    ("GOCSPX-", 20), // Google OAuth client secret
    ("ghp_", 20),    // GitHub tokens
    ("gho_", 20),
    ("ghu_", 20),
    ("ghs_", 20),
    ("github_pat_", 20),
    ("glpat-", 20), // GitLab
    ("xoxb-", 20),  // Slack
    ("xoxp-", 20),
    ("sk_live_", 20), // Stripe
    ("rk_live_", 20),
];

/// Query parameters that carry credentials in a URL.
const SECRET_QUERY_KEYS: &[&str] = &[
    "key",
    "api_key",
    "apikey",
    "access_token",
    "token",
    "client_secret",
    "password",
    "secret",
];

/// Whether `value`, or any string inside it, looks like a secret.
pub(crate) fn value_looks_like_secret(value: &Value) -> bool {
    match value {
        Value::String(s) => looks_like_secret(s),
        Value::Array(items) => items.iter().any(value_looks_like_secret),
        Value::Object(map) => {
            // A service-account key or token response pasted as an object.
            map.keys().any(|k| {
                matches!(
                    k.as_str(),
                    "private_key"
                        | "private_key_id"
                        | "client_secret"
                        | "refresh_token"
                        | "access_token"
                )
            }) || map.values().any(value_looks_like_secret)
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// Whether the string looks like a secret (a key, a token, a key file).
pub(crate) fn looks_like_secret(s: &str) -> bool {
    let t = s.trim();
    if MARKERS.iter().any(|m| t.contains(m)) {
        return true;
    }
    // A JSON document pasted into a string: no config field holds one.
    if t.starts_with('{') && t.ends_with('}') {
        return true;
    }
    let lower = t.to_ascii_lowercase();
    if lower.starts_with("bearer ") || lower.starts_with("basic ") {
        return true;
    }
    if PREFIXES
        .iter()
        .any(|(p, min)| t.starts_with(p) && t.len() >= *min)
    {
        return true;
    }
    if is_aws_access_key_id(t) || is_jwt(t) || has_secret_query(t) {
        return true;
    }
    // In a path or URL, `/` separates names; elsewhere it is a base64 character.
    let path = t.starts_with('/') || t.starts_with("file:") || t.contains("://");
    t.split(|c: char| !is_token_char(c, !path))
        .any(is_high_entropy)
}

fn is_token_char(c: char, slash: bool) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(c, '+' | '=' | '_' | '-' | '.' | '~')
        || (slash && c == '/')
}

fn is_aws_access_key_id(t: &str) -> bool {
    (t.starts_with("AKIA") || t.starts_with("ASIA"))
        && t.len() == 20
        && t.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// `header.payload.signature`, the header being base64url JSON (`{"` encodes as `eyJ`).
fn is_jwt(t: &str) -> bool {
    t.starts_with("eyJ")
        && t.split('.').count() == 3
        && t.len() >= 20
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'='))
}

fn has_secret_query(t: &str) -> bool {
    let Some((_, query)) = t.split_once('?') else {
        return false;
    };
    let query = query.split('#').next().unwrap_or_default();
    query.split('&').any(|pair| {
        let key = pair
            .split('=')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        SECRET_QUERY_KEYS.contains(&key.as_str())
    })
}

/// A long run of token characters mixing classes with the character spread of
/// random data (base64/base64url tokens, or long hex keys).
fn is_high_entropy(run: &str) -> bool {
    let len = run.len();
    if len < 32 {
        return false;
    }
    let upper = run.bytes().any(|b| b.is_ascii_uppercase());
    let lower = run.bytes().any(|b| b.is_ascii_lowercase());
    let digit = run.bytes().any(|b| b.is_ascii_digit());
    let entropy = shannon_bits_per_char(run);
    if upper && lower && digit {
        return entropy >= 4.0;
    }
    let hex = run.bytes().all(|b| b.is_ascii_hexdigit());
    let alpha = run.bytes().any(|b| b.is_ascii_alphabetic());
    hex && digit && alpha && len >= 40 && entropy >= 3.0
}

fn shannon_bits_per_char(s: &str) -> f64 {
    let mut counts = [0u32; 256];
    for b in s.bytes() {
        if let Some(count) = counts.get_mut(usize::from(b)) {
            *count += 1;
        }
    }
    let n = f64::from(u32::try_from(s.len()).unwrap_or(u32::MAX));
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ordinary_values_are_not_secrets() {
        for s in [
            "my-project-1",
            "sk-prod-123",
            "https://compute.googleapis.com",
            "http://127.0.0.1:8085",
            "https://proxy.internal.example.com/gce/v1",
            "env:GCE_ACCESS_TOKEN",
            "file:/var/run/secrets/kubernetes.io/serviceaccount/token",
            "file:/etc/bc/gce-access-token-for-the-production-cluster",
            "file:/etc/keys/private_key",
            "none",
            "n2-standard-4",
        ] {
            assert!(!looks_like_secret(s), "{s} flagged");
        }
    }

    #[test]
    fn keys_and_tokens_are_secrets() {
        let sa = json!({
            "type": "service_account",
            "project_id": "p",
            "private_key_id": "abc",
            "private_key": "-----BEGIN PRIVATE KEY-----\nMIIE...\n-----END PRIVATE KEY-----\n",
        })
        .to_string();
        for s in [
            sa.as_str(),
            "-----BEGIN RSA PRIVATE KEY-----",
            "ya29.a0AfH6SMBx3",
            "1//0gLp2YkRzPqXwCgYIARAAGBASNwF",
            "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
            "GOCSPX-abcdefghijklmnopqrstu",
            "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
            "AKIAIOSFODNN7EXAMPLE",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
            "Bearer abc",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEYabcdefgh1234",
            "Zk3q9Vb7Lm2Xp8Rt5Wn4Yc6Hd1Gf0Js9Ke7Ua3Ob2Ci5Pz",
            "3f786850e387550fdab836ed7e6dc881de23001b0cf4",
            "https://compute.googleapis.com/?key=abc",
            "{\"token\": \"x\"}",
        ] {
            assert!(looks_like_secret(s), "{s} not flagged");
        }
    }

    #[test]
    fn secrets_inside_structures() {
        assert!(value_looks_like_secret(&json!({ "private_key": "x" })));
        assert!(value_looks_like_secret(&json!(["ok", "ya29.abc"])));
        assert!(!value_looks_like_secret(
            &json!({ "a": ["ok", 1, null, true] })
        ));
    }
}
