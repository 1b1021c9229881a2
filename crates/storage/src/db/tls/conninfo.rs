//! The connection string: libpq's URL or `key=value` form, split into
//! what tokio-postgres reads and the TLS settings (`sslmode`,
//! `sslrootcert`) read here.
//!
//! A URL is split as tokio-postgres reads it: the credentials run to the
//! first `@`, the parameters from the next `?`, and what is not taken here
//! is passed on exactly as written. The `url` crate cannot be the parser:
//! it refuses strings libpq and tokio-postgres accept (a `?` in the
//! password, several hosts as in `h1:5432,h2:5433`). Parameters are decoded
//! with `percent-encoding`, after the check that every escape is whole.

use std::fmt;
use std::path::PathBuf;

use diesel::{ConnectionError, ConnectionResult};

use super::hints::with_causes;

/// libpq's `sslmode`, without `allow` (which tokio-postgres cannot do).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SslMode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it, else plaintext; no certificate check.
    Prefer,
    /// TLS; no certificate check unless `sslrootcert` is given (then as
    /// `VerifyCa`).
    Require,
    /// TLS; the chain is verified against the roots, the name is not.
    VerifyCa,
    /// TLS; the chain and the server's name are verified.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> ConnectionResult<SslMode> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "allow" => {
                return Err(url_error(
                    "sslmode=allow is not supported: use prefer, require or stronger",
                ));
            }
            other => {
                return Err(url_error(format!(
                    "sslmode={other:?} is not one of disable, prefer, require, verify-ca, \
                     verify-full"
                )));
            }
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `sslrootcert`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RootCert {
    /// `sslrootcert=system`: the Mozilla roots.
    System,
    /// A PEM bundle.
    File(PathBuf),
}

/// A connection string split into what tokio-postgres reads and the TLS
/// settings read here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Target {
    /// The connection string without `sslmode` and `sslrootcert`.
    pub(super) rest: String,
    /// The mode (libpq's default, `prefer`, when absent; `verify-full` when
    /// absent and `sslrootcert=system`).
    pub(super) mode: SslMode,
    pub(super) root_cert: Option<RootCert>,
}

/// libpq's TLS parameters this client does not implement, with the values
/// (if any) that say what it does anyway.
const UNSUPPORTED: &[(&str, &[&str])] = &[
    ("sslcert", &[]),
    ("sslkey", &[]),
    ("sslpassword", &[]),
    ("sslcertmode", &["disable", "allow"]),
    ("sslcrl", &[]),
    ("sslcrldir", &[]),
    ("sslsni", &["1"]),
    ("sslcompression", &["0"]),
    ("ssl_min_protocol_version", &[]),
    ("ssl_max_protocol_version", &[]),
    ("requiressl", &[]),
    ("sslkeylogfile", &[]),
];

pub(super) fn url_error(message: impl Into<String>) -> ConnectionError {
    ConnectionError::InvalidConnectionUrl(format!("DATABASE_URL: {}", message.into()))
}

/// Percent-decodes a URL parameter's name or value as libpq does: `%XX`
/// escapes only (`+` is itself). A malformed escape or a result that is not
/// UTF-8 is refused; `percent-encoding` alone would pass both through.
fn percent_decode(s: &str) -> ConnectionResult<String> {
    if !well_formed_escapes(s) {
        return Err(url_error("a parameter has an invalid percent-encoding"));
    }
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(std::borrow::Cow::into_owned)
        .map_err(|_| url_error("a parameter is not UTF-8 once decoded"))
}

/// Whether every `%` in `s` is followed by two hexadecimal digits.
fn well_formed_escapes(s: &str) -> bool {
    s.split('%').skip(1).all(|after| {
        after
            .as_bytes()
            .get(..2)
            .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    })
}

/// The TLS settings seen so far while splitting.
#[derive(Default)]
struct Found {
    mode: Option<String>,
    root_cert: Option<String>,
}

impl Found {
    /// Takes `key=value` if it is a TLS parameter; false if it is not.
    fn take(&mut self, key: &str, value: &str) -> ConnectionResult<bool> {
        match key {
            "sslmode" => self.mode = Some(value.to_owned()),
            "sslrootcert" => self.root_cert = Some(value.to_owned()),
            _ => {
                if let Some((name, harmless)) = UNSUPPORTED.iter().find(|(n, _)| *n == key) {
                    if harmless.contains(&value) {
                        return Ok(true);
                    }
                    return Err(url_error(format!(
                        "the parameter {name} is not supported by this client (its TLS \
                         settings are sslmode and sslrootcert)"
                    )));
                }
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn finish(self, rest: String) -> ConnectionResult<Target> {
        let root_cert = match self.root_cert.as_deref() {
            None => None,
            Some("") => return Err(url_error("sslrootcert is empty")),
            Some("system") => Some(RootCert::System),
            Some(path) => Some(RootCert::File(PathBuf::from(path))),
        };
        let mode = match (self.mode.as_deref(), &root_cert) {
            (None, Some(RootCert::System)) => SslMode::VerifyFull,
            (None, _) => SslMode::Prefer,
            (Some(m), _) => SslMode::parse(m)?,
        };
        if root_cert == Some(RootCert::System) && mode != SslMode::VerifyFull {
            // libpq's rule: the system's roots vouch for any name they sign,
            // so only a name check makes them mean anything.
            return Err(url_error(format!(
                "sslrootcert=system needs sslmode=verify-full (or no sslmode), not {mode}"
            )));
        }
        if mode == SslMode::VerifyCa && root_cert.is_none() {
            // The Mozilla roots sign certificates for anyone's names, and
            // verify-ca checks no name: it would take any public certificate.
            return Err(url_error(
                "sslmode=verify-ca needs sslrootcert=<a file of the CAs that sign your \
                 server's certificate>: with only the public roots it would accept any \
                 publicly issued certificate for any name; for a certificate from a public \
                 CA use sslmode=verify-full (which checks the name) instead",
            ));
        }
        Ok(Target {
            rest,
            mode,
            root_cert,
        })
    }
}

/// Splits a `postgres://` or `postgresql://` URL.
fn split_url(url: &str, query_start: Option<usize>) -> ConnectionResult<Target> {
    let mut found = Found::default();
    let Some(q) = query_start else {
        return found.finish(url.to_owned());
    };
    let mut kept = Vec::new();
    for pair in url[q + 1..].split('&') {
        if pair.is_empty() {
            continue;
        }
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if !found.take(&percent_decode(key)?, &percent_decode(value)?)? {
            kept.push(pair);
        }
    }
    let mut rest = url[..q].to_owned();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    found.finish(rest)
}

/// Splits a `key=value ...` connection string (libpq's quoting: values in
/// single quotes, backslash escapes).
fn split_key_values(s: &str) -> ConnectionResult<Target> {
    let mut found = Found::default();
    let mut kept: Vec<String> = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_whitespace() && *c != '=') {
            key.push(c);
        }
        if key.is_empty() {
            if chars.peek().is_some() {
                return Err(url_error("a parameter has no name"));
            }
            break;
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(url_error(format!("the parameter {key} has no `=`")));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    None => return Err(url_error(format!("the value of {key} is unterminated"))),
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        if !found.take(&key, &value)? {
            let quoted = value.replace('\\', "\\\\").replace('\'', "\\'");
            kept.push(format!("{key}='{quoted}'"));
        }
    }
    found.finish(kept.join(" "))
}

/// Splits a connection string into tokio-postgres's part and the TLS
/// settings.
pub(super) fn split(url: &str) -> ConnectionResult<Target> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        // As tokio-postgres reads it: the credentials run to the first `@`
        // (a password may hold a `?`), the parameters from the next `?`.
        let after_credentials = url.find('@').map_or(0, |i| i + 1);
        let query = url[after_credentials..]
            .find('?')
            .map(|i| after_credentials + i);
        split_url(url, query)
    } else {
        split_key_values(url)
    }
}

pub(super) fn parse_rest(target: &Target) -> ConnectionResult<tokio_postgres::Config> {
    let mut config: tokio_postgres::Config = target
        .rest
        .parse()
        .map_err(|e: tokio_postgres::Error| url_error(with_causes(&e)))?;
    config.ssl_mode(match target.mode {
        SslMode::Disable => tokio_postgres::config::SslMode::Disable,
        SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        _ => tokio_postgres::config::SslMode::Require,
    });
    Ok(config)
}

/// `url` with its database name replaced by `name` (the test databases
/// and the bench's own, on the server `url` names).
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{}", &base[..path_start], name);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

#[cfg(test)]
mod tests;
