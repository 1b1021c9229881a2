//! The `gce` provider account config: its manifest and validation.

use std::fmt;
use std::path::PathBuf;

use serde_json::{Map, Value, json};

use crate::secret::value_looks_like_secret;

/// The endpoint used when a config names none.
pub const DEFAULT_ENDPOINT: &str = "https://compute.googleapis.com";

const PROJECT_MIN: usize = 6;
const PROJECT_MAX: usize = 30;
const ENDPOINT_MAX: usize = 2048;
const ENV_NAME_MAX: usize = 128;
const PATH_MAX: usize = 4096;
/// `secret:NAME`: the name of a secret of the account's own tenant (contract 3.9).
const SECRET_NAME_MAX: usize = 63;

/// A validated `gce` provider account config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GceConfig {
    /// The GCE project id whose reservations the account covers.
    pub project: String,
    /// The API root without a trailing `/`, e.g. `https://compute.googleapis.com`.
    pub endpoint: String,
    /// Where the bearer token comes from.
    pub credentials: Credentials,
}

/// A reference to the credentials used with the GCE API; never the credentials.
///
/// Which references an account may use depends on whose account it is: see
/// [`crate::policy::ProviderPolicy::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    /// `env:NAME`: the token is read from this environment variable at each call.
    Env(String),
    /// `file:/path`: the token is read from this file at each call.
    File(PathBuf),
    /// `secret:NAME`: a secret of the account's own tenant (`NAME` matches
    /// `^[a-z][a-z0-9-]{0,62}$`).
    Secret(String),
    /// `adc`: the server's Application Default Credentials.
    Adc,
    /// `none`: requests carry no `Authorization` header (emulators, proxies
    /// that authenticate themselves).
    None,
}

impl fmt::Display for Credentials {
    /// The reference as written in a config: `env:NAME`, `file:/path`,
    /// `secret:NAME`, `adc` or `none`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::Env(name) => write!(f, "env:{name}"),
            Credentials::File(path) => write!(f, "file:{}", path.display()),
            Credentials::Secret(name) => write!(f, "secret:{name}"),
            Credentials::Adc => f.write_str("adc"),
            Credentials::None => f.write_str("none"),
        }
    }
}

/// Why a config was refused: the field (`config.project`) and a short reason,
/// in the shape of the API's `INVALID_INPUT` details. Never carries the value.
///
/// Displays as `field: reason`, followed by ` (message)` when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The field as sent, prefixed with `config.` (`config` for the whole object).
    pub field: String,
    /// What is wrong with it.
    pub reason: ConfigReason,
    /// A human explanation when the reason alone does not say enough (the
    /// policy rules of [`crate::policy`]). Never a secret, and never what the
    /// platform's configuration lists.
    pub message: Option<String>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)?;
        match &self.message {
            Some(message) => write!(f, " ({message})"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    /// A refusal of a policy rule, with its explanation.
    pub(crate) fn not_allowed(field: &str, reason: ConfigReason, message: String) -> Self {
        ConfigError {
            field: field.to_owned(),
            reason,
            message: Some(message),
        }
    }
}

/// The reason part of a [`ConfigError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConfigReason {
    /// A required field is absent.
    Missing,
    /// The value has the wrong JSON type.
    Type,
    /// The value does not match the field's pattern.
    Pattern,
    /// The value is too long.
    Length,
    /// The field is not part of the manifest.
    Unknown,
    /// The value looks like a secret itself; a reference was expected.
    SecretValue,
    /// The credentials reference is not one this account may use (contract 3.5).
    CredentialNotAllowed,
    /// The endpoint is not one this account may name (contract 3.5).
    EndpointNotAllowed,
}

impl ConfigReason {
    /// The API's spelling: `missing`, `type`, `pattern`, `length`, `unknown`,
    /// `secret-value`, `credential-not-allowed`, `endpoint-not-allowed`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigReason::Missing => "missing",
            ConfigReason::Type => "type",
            ConfigReason::Pattern => "pattern",
            ConfigReason::Length => "length",
            ConfigReason::Unknown => "unknown",
            ConfigReason::SecretValue => "secret-value",
            ConfigReason::CredentialNotAllowed => "credential-not-allowed",
            ConfigReason::EndpointNotAllowed => "endpoint-not-allowed",
        }
    }
}

impl fmt::Display for ConfigReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn error(field: &str, reason: ConfigReason) -> ConfigError {
    let field = if field.is_empty() {
        "config".to_owned()
    } else {
        format!("config.{field}")
    };
    ConfigError {
        field,
        reason,
        message: None,
    }
}

impl GceConfig {
    /// Validates a `providerAccounts` config for `gce`.
    ///
    /// Checks, in order: the value is an object (`config`, `type`); no value
    /// anywhere in it looks like a secret (`secret-value`); no unknown key
    /// (`unknown`); then `project` (required, `^[a-z][a-z0-9-]{4,28}[a-z0-9]$`),
    /// `endpoint` (optional http(s) URL without credentials, query or fragment;
    /// default [`DEFAULT_ENDPOINT`]) and `credentials` (required: `env:NAME`
    /// with `NAME` matching `^[A-Z_][A-Z0-9_]*$`, `file:/absolute/path`,
    /// `secret:NAME` with `NAME` matching `^[a-z][a-z0-9-]{0,62}$`, `adc` or
    /// `none`; any other value is taken for an inline secret, `secret-value`).
    ///
    /// This is the shape only: whether the account may use that reference and
    /// endpoint is [`crate::policy::ProviderPolicy::check`].
    pub fn from_json(value: &Value) -> Result<GceConfig, ConfigError> {
        let Value::Object(map) = value else {
            return Err(error("", ConfigReason::Type));
        };
        if let Some((key, _)) = map.iter().find(|(_, v)| value_looks_like_secret(v)) {
            return Err(error(key, ConfigReason::SecretValue));
        }
        if let Some(key) = map
            .keys()
            .find(|k| !matches!(k.as_str(), "project" | "endpoint" | "credentials"))
        {
            return Err(error(key, ConfigReason::Unknown));
        }
        let project = parse_project(required_str(map, "project")?)?;
        let endpoint = match map.get("endpoint") {
            None => DEFAULT_ENDPOINT.to_owned(),
            Some(Value::String(s)) => parse_endpoint(s)?,
            Some(_) => return Err(error("endpoint", ConfigReason::Type)),
        };
        let credentials = match map.get("credentials") {
            None => return Err(error("credentials", ConfigReason::Missing)),
            Some(Value::String(s)) => parse_credentials(s)?,
            // An object here is a key file pasted inline.
            Some(Value::Object(_)) => return Err(error("credentials", ConfigReason::SecretValue)),
            Some(_) => return Err(error("credentials", ConfigReason::Type)),
        };
        Ok(GceConfig {
            project,
            endpoint,
            credentials,
        })
    }

    /// The config as stored and shown: every field explicit, the default
    /// endpoint filled in. [`GceConfig::from_json`] accepts it back unchanged.
    pub fn to_json(&self) -> Value {
        json!({
            "project": self.project,
            "endpoint": self.endpoint,
            "credentials": self.credentials.to_string(),
        })
    }
}

const CREDENTIALS_PATTERN: &str =
    "^(env:[A-Z_][A-Z0-9_]*|file:/.+|secret:[a-z][a-z0-9-]{0,62}|adc|none)$";
const CREDENTIALS_DESCRIPTION: &str = "A reference to the credentials, never the credentials \
    themselves: none (no Authorization header, any account); secret:NAME (a secret of the \
    account's own tenant); adc (the server's Application Default Credentials; root tenant \
    only); env:NAME (an environment variable listed in BC_CREDENTIAL_ENV, read at each call; \
    root tenant only); file:/absolute/path (a file inside BC_CREDENTIAL_DIR, read at each \
    call; root tenant only).";

/// The manifest of the `gce` config as a JSON Schema (for OpenAPI and docs).
/// [`GceConfig::from_json`] is the authority; it also refuses secret-looking
/// values, which a schema cannot express.
pub fn config_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["project", "credentials"],
        "properties": {
            "project": {
                "type": "string",
                "pattern": "^[a-z][a-z0-9-]{4,28}[a-z0-9]$",
                "description": "The GCE project id."
            },
            "endpoint": {
                "type": "string",
                "format": "uri",
                "maxLength": ENDPOINT_MAX,
                "default": DEFAULT_ENDPOINT,
                "description": "The Compute Engine API root (http or https)."
            },
            "credentials": {
                "type": "string",
                "pattern": CREDENTIALS_PATTERN,
                "description": CREDENTIALS_DESCRIPTION
            }
        }
    })
}

fn required_str<'a>(map: &'a Map<String, Value>, key: &str) -> Result<&'a str, ConfigError> {
    match map.get(key) {
        None => Err(error(key, ConfigReason::Missing)),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(error(key, ConfigReason::Type)),
    }
}

fn parse_project(s: &str) -> Result<String, ConfigError> {
    if s.len() > PROJECT_MAX {
        return Err(error("project", ConfigReason::Length));
    }
    let b = s.as_bytes();
    let ok = b.len() >= PROJECT_MIN
        && b.first().is_some_and(u8::is_ascii_lowercase)
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && b.last().is_some_and(|&c| c != b'-');
    if ok {
        Ok(s.to_owned())
    } else {
        Err(error("project", ConfigReason::Pattern))
    }
}

fn parse_endpoint(s: &str) -> Result<String, ConfigError> {
    const FIELD: &str = "endpoint";
    if s.len() > ENDPOINT_MAX {
        return Err(error(FIELD, ConfigReason::Length));
    }
    let url = reqwest::Url::parse(s).map_err(|_| error(FIELD, ConfigReason::Pattern))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(error(FIELD, ConfigReason::SecretValue));
    }
    let http = matches!(url.scheme(), "http" | "https");
    let host = url.host_str().is_some_and(|h| !h.is_empty());
    if !http || !host || url.query().is_some() || url.fragment().is_some() {
        return Err(error(FIELD, ConfigReason::Pattern));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

fn parse_credentials(s: &str) -> Result<Credentials, ConfigError> {
    const FIELD: &str = "credentials";
    if s == "none" {
        return Ok(Credentials::None);
    }
    if s == "adc" {
        return Ok(Credentials::Adc);
    }
    if let Some(name) = s.strip_prefix("secret:") {
        let b = name.as_bytes();
        let ok = (1..=SECRET_NAME_MAX).contains(&b.len())
            && b.first().is_some_and(u8::is_ascii_lowercase)
            && b.iter()
                .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-');
        return if ok {
            Ok(Credentials::Secret(name.to_owned()))
        } else {
            Err(error(FIELD, ConfigReason::Pattern))
        };
    }
    if let Some(name) = s.strip_prefix("env:") {
        if name.len() > ENV_NAME_MAX {
            return Err(error(FIELD, ConfigReason::Length));
        }
        let b = name.as_bytes();
        let ok = b
            .first()
            .is_some_and(|&c| c.is_ascii_uppercase() || c == b'_')
            && b.iter()
                .all(|&c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_');
        return if ok {
            Ok(Credentials::Env(name.to_owned()))
        } else {
            Err(error(FIELD, ConfigReason::Pattern))
        };
    }
    if let Some(path) = s.strip_prefix("file:") {
        if path.len() > PATH_MAX {
            return Err(error(FIELD, ConfigReason::Length));
        }
        let ok = path.starts_with('/') && path.len() > 1 && !path.chars().any(char::is_control);
        return if ok {
            Ok(Credentials::File(PathBuf::from(path)))
        } else {
            Err(error(FIELD, ConfigReason::Pattern))
        };
    }
    // Not a reference: whatever it is (a password, a token of a shape the
    // heuristics do not know), it must not be stored.
    Err(error(FIELD, ConfigReason::SecretValue))
}

#[cfg(test)]
mod tests;
