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
mod tests {
    use super::*;
    use tokio_postgres::config::Host;

    use super::super::check;
    use super::super::hints::hosts;

    fn target(url: &str) -> Target {
        split(url).expect("a valid connection string")
    }

    fn error(url: &str) -> String {
        split(url)
            .expect_err("an invalid connection string")
            .to_string()
    }

    #[test]
    fn absent_parameters_keep_libpq_default_prefer() {
        let t = target("postgres://u:pw@db.example:5432/app");
        assert_eq!(t.rest, "postgres://u:pw@db.example:5432/app");
        assert_eq!(t.mode, SslMode::Prefer);
        assert_eq!(t.root_cert, None);
        let t = target("postgres://u@h/app?application_name=x");
        assert_eq!(t.rest, "postgres://u@h/app?application_name=x");
        assert_eq!(t.mode, SslMode::Prefer);
    }

    #[test]
    fn tls_parameters_are_taken_out_in_any_order() {
        for url in [
            "postgres://u@h/app?sslmode=verify-full&sslrootcert=/etc/ca.pem&connect_timeout=5",
            "postgres://u@h/app?connect_timeout=5&sslrootcert=/etc/ca.pem&sslmode=verify-full",
            "postgres://u@h/app?sslrootcert=/etc/ca.pem&connect_timeout=5&sslmode=verify-full",
        ] {
            let t = target(url);
            assert_eq!(t.rest, "postgres://u@h/app?connect_timeout=5", "{url}");
            assert_eq!(t.mode, SslMode::VerifyFull);
            assert_eq!(t.root_cert, Some(RootCert::File("/etc/ca.pem".into())));
        }
        let t = target("postgresql://u@h/app?sslmode=require");
        assert_eq!(t.rest, "postgresql://u@h/app");
        assert_eq!(t.mode, SslMode::Require);
    }

    #[test]
    fn every_mode_is_read() {
        for (value, mode) in [
            ("disable", SslMode::Disable),
            ("prefer", SslMode::Prefer),
            ("require", SslMode::Require),
            ("verify-ca", SslMode::VerifyCa),
            ("verify-full", SslMode::VerifyFull),
        ] {
            assert_eq!(
                target(&format!(
                    "postgres://h/d?sslmode={value}&sslrootcert=/ca.pem"
                ))
                .mode,
                mode
            );
            assert_eq!(mode.to_string(), value);
        }
    }

    #[test]
    fn percent_encoded_values_and_keys_are_decoded() {
        let t = target(
            "postgres://u:p%40ss@h/app?sslrootcert=%2Fsecrets%2Fmy%20ca%2Bbundle.pem\
             &ssl%6Dode=verify%2Dca",
        );
        assert_eq!(
            t.root_cert,
            Some(RootCert::File("/secrets/my ca+bundle.pem".into()))
        );
        assert_eq!(t.mode, SslMode::VerifyCa);
        // The rest, password included, is left as written for tokio-postgres.
        assert_eq!(t.rest, "postgres://u:p%40ss@h/app");
        assert!(error("postgres://h/d?sslrootcert=%zz").contains("percent-encoding"));
    }

    #[test]
    fn a_question_mark_in_the_password_is_not_the_query() {
        let t = target("postgres://u:pa?ss@h/app?sslmode=require");
        assert_eq!(t.rest, "postgres://u:pa?ss@h/app");
        assert_eq!(t.mode, SslMode::Require);
        let config = parse_rest(&t).expect("tokio-postgres reads the rest");
        assert_eq!(config.get_password(), Some(&b"pa?ss"[..]));
        let t = target("postgres://u:pa?ss@h/app");
        assert_eq!(
            (t.rest.as_str(), t.mode),
            ("postgres://u:pa?ss@h/app", SslMode::Prefer)
        );
    }

    #[test]
    fn the_last_occurrence_wins_as_in_libpq() {
        let t = target("postgres://h/d?sslmode=disable&sslmode=verify-full");
        assert_eq!(t.mode, SslMode::VerifyFull);
    }

    #[test]
    fn the_rest_is_what_tokio_postgres_reads() {
        let t = target("postgres://u:secret@db.example:6543/app?sslmode=require&port=7000");
        let config = parse_rest(&t).expect("tokio-postgres reads the rest");
        assert_eq!(config.get_user(), Some("u"));
        assert_eq!(config.get_password(), Some(&b"secret"[..]));
        assert_eq!(config.get_dbname(), Some("app"));
        assert_eq!(config.get_ports(), &[6543, 7000]);
        assert_eq!(
            config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
        let t = target("postgres://h/d?sslmode=verify-ca&sslrootcert=/ca.pem");
        assert_eq!(
            parse_rest(&t).expect("config").get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
    }

    #[test]
    fn multi_host_urls_keep_every_host_and_the_session_rule() {
        let t =
            target("postgres://u@10.0.0.1:5432,10.0.0.2:5433/app?target_session_attrs=read-write");
        assert_eq!(t.mode, SslMode::Prefer);
        let config = parse_rest(&t).expect("tokio-postgres reads the rest");
        assert_eq!(
            config.get_hosts(),
            &[Host::Tcp("10.0.0.1".into()), Host::Tcp("10.0.0.2".into())]
        );
        assert_eq!(config.get_ports(), &[5432, 5433]);
        assert_eq!(
            config.get_target_session_attrs(),
            tokio_postgres::config::TargetSessionAttrs::ReadWrite
        );
        assert_eq!(hosts(&config), "10.0.0.1:5432,10.0.0.2:5433");
        let one_port = parse_rest(&target("host=a,b port=6000 dbname=d")).expect("config");
        assert_eq!(hosts(&one_port), "a:6000,b:6000");
        check("postgres://u@a:1,b:2/d?target_session_attrs=read-write&sslmode=disable")
            .expect("a multi-host URL is accepted");
    }

    #[test]
    fn key_value_strings_are_split_too() {
        let t = target(
            "host=db.example  sslmode = verify-full dbname='my app' \
             sslrootcert='/etc/my ca.pem' password='it\\'s'",
        );
        assert_eq!(t.mode, SslMode::VerifyFull);
        assert_eq!(t.root_cert, Some(RootCert::File("/etc/my ca.pem".into())));
        let config = parse_rest(&t).expect("tokio-postgres reads the rest");
        assert_eq!(config.get_hosts(), &[Host::Tcp("db.example".into())]);
        assert_eq!(config.get_dbname(), Some("my app"));
        assert_eq!(config.get_password(), Some(&b"it's"[..]));
        let t = target("host=h dbname=d");
        assert_eq!(t.mode, SslMode::Prefer);
        assert!(error("host=h sslmode='verify-full").contains("unterminated"));
        assert!(error("host=h sslmode").contains("no `=`"));
    }

    #[test]
    fn unknown_modes_are_refused_by_name() {
        let e = error("postgres://u:hunter2@h/d?sslmode=verify_full");
        assert!(e.contains("sslmode=\"verify_full\" is not one of"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
        let e = error("postgres://h/d?sslmode=allow");
        assert!(e.contains("sslmode=allow is not supported"), "{e}");
        assert!(error("postgres://h/d?sslmode=").contains("sslmode=\"\""));
    }

    #[test]
    fn unimplemented_tls_parameters_are_refused() {
        for p in [
            "sslcert=/c.pem",
            "sslkey=/k.pem",
            "sslcrl=/crl.pem",
            "sslpassword=x",
            "sslsni=0",
            "ssl_min_protocol_version=TLSv1.3",
        ] {
            let e = error(&format!("postgres://u:hunter2@h/d?{p}"));
            let name = p.split('=').next().expect("name");
            assert!(
                e.contains(&format!("the parameter {name} is not supported")),
                "{e}"
            );
            assert!(!e.contains("hunter2"), "{e}");
        }
        // Values that say what this client does anyway are accepted.
        assert_eq!(
            target("postgres://h/d?sslsni=1&sslcompression=0").rest,
            "postgres://h/d"
        );
    }

    #[test]
    fn system_roots_mean_verify_full() {
        let t = target("postgres://h/d?sslrootcert=system");
        assert_eq!(
            (t.mode, t.root_cert),
            (SslMode::VerifyFull, Some(RootCert::System))
        );
        let e = error("postgres://h/d?sslrootcert=system&sslmode=verify-ca");
        assert!(
            e.contains("sslrootcert=system needs sslmode=verify-full"),
            "{e}"
        );
        assert!(error("postgres://h/d?sslrootcert=").contains("sslrootcert is empty"));
    }

    #[test]
    fn verify_ca_needs_its_own_roots() {
        // Public roots sign anyone's names and verify-ca checks none: refused,
        // in both forms of a connection string, with the fix named.
        for url in [
            "postgres://u:hunter2@h/d?sslmode=verify-ca",
            "host=h user=u password=hunter2 sslmode=verify-ca",
        ] {
            let e = error(url);
            assert!(e.contains("sslmode=verify-ca needs sslrootcert="), "{e}");
            assert!(e.contains("verify-full"), "{e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
        let t = target("postgres://h/d?sslmode=verify-ca&sslrootcert=/etc/ca.pem");
        assert_eq!(t.mode, SslMode::VerifyCa);
    }

    #[test]
    fn only_percent_escapes_are_decoded_and_they_must_be_whole() {
        // libpq's decoding: a `+` is itself, not a space as in a form.
        let t = target("postgres://h/d?sslrootcert=/a+b.pem");
        assert_eq!(t.root_cert, Some(RootCert::File("/a+b.pem".into())));
        assert!(error("postgres://h/d?sslrootcert=/a%4").contains("percent-encoding"));
        assert!(error("postgres://h/d?sslrootcert=/a%ff").contains("not UTF-8"));
    }

    #[test]
    fn replaces_the_database_name() {
        assert_eq!(
            with_database("postgres://u@h:5/postgres", "x"),
            "postgres://u@h:5/x"
        );
        assert_eq!(
            with_database("postgres://u@h:5/db?sslmode=disable", "x"),
            "postgres://u@h:5/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://u@h:5", "x"), "postgres://u@h:5/x");
    }
}
