//! Connections to PostgreSQL with libpq's `sslmode` and `sslrootcert`, over
//! rustls on the ring provider.
//!
//! tokio-postgres knows only `sslmode=disable|prefer|require` and has no
//! `sslrootcert`: both are taken out of the URL here, the rest goes to
//! tokio-postgres as it is, and the TLS connector is built to verify what
//! libpq's mode verifies.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use diesel::{ConnectionError, ConnectionResult};
use diesel_async::AsyncPgConnection;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WebPkiServerVerifier, verify_server_cert_signed_by_trust_anchor};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_postgres::config::Host;

/// libpq's `sslmode`, without `allow` (which tokio-postgres cannot do).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SslMode {
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
enum RootCert {
    /// `sslrootcert=system`: the Mozilla roots.
    System,
    /// A PEM bundle.
    File(PathBuf),
}

/// A connection string split into what tokio-postgres reads and the TLS
/// settings read here.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    /// The connection string without `sslmode` and `sslrootcert`.
    rest: String,
    /// The mode (libpq's default, `prefer`, when absent; `verify-full` when
    /// absent and `sslrootcert=system`).
    mode: SslMode,
    root_cert: Option<RootCert>,
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

fn url_error(message: impl Into<String>) -> ConnectionError {
    ConnectionError::InvalidConnectionUrl(format!("DATABASE_URL: {}", message.into()))
}

/// Percent-decodes `s` (URL components).
fn percent_decode(s: &str) -> ConnectionResult<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| url_error("a parameter has an invalid percent-encoding"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| url_error("a parameter is not UTF-8 once decoded"))
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
fn split(url: &str) -> ConnectionResult<Target> {
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

/// What a connection will do, as the logs say it: `sslmode=verify-full
/// sslrootcert=/etc/ca.pem`. Never the password.
pub fn describe(url: &str) -> ConnectionResult<String> {
    let target = split(url)?;
    let roots = match (&target.root_cert, target.mode) {
        (_, SslMode::Disable | SslMode::Prefer) | (None, SslMode::Require) => {
            "(not checked)".to_owned()
        }
        (None, _) | (Some(RootCert::System), _) => "system (Mozilla roots)".to_owned(),
        (Some(RootCert::File(p)), _) => p.display().to_string(),
    };
    Ok(format!("sslmode={} sslrootcert={roots}", target.mode))
}

/// The roots: the PEM bundle of `sslrootcert`, else the Mozilla roots.
fn roots(root_cert: Option<&RootCert>) -> ConnectionResult<RootCertStore> {
    let Some(RootCert::File(path)) = root_cert else {
        return Ok(RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        });
    };
    let shown = path.display();
    let pem = std::fs::read(path)
        .map_err(|e| url_error(format!("sslrootcert {shown} cannot be read: {e}")))?;
    let mut store = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| {
            url_error(format!(
                "sslrootcert {shown} is not a PEM certificate bundle: {e}"
            ))
        })?;
        store
            .add(cert)
            .map_err(|e| url_error(format!("sslrootcert {shown} holds an unusable CA: {e}")))?;
    }
    if store.is_empty() {
        return Err(url_error(format!(
            "sslrootcert {shown} holds no PEM certificate"
        )));
    }
    Ok(store)
}

/// Accepts any certificate (`prefer`, and `require` without roots), still
/// checking that the server holds its key.
#[derive(Debug)]
struct AnyCertificate(WebPkiSupportedAlgorithms);

/// Verifies the chain against the roots, not the name (`verify-ca`, and
/// `require` with `sslrootcert`).
#[derive(Debug)]
struct ChainOnly {
    roots: RootCertStore,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_schemes()
    }
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.algorithms.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The rustls configuration for `mode` (not called for `disable`).
fn client_config(mode: SslMode, root_cert: Option<&RootCert>) -> ConnectionResult<ClientConfig> {
    let provider: Arc<CryptoProvider> = Arc::new(rustls::crypto::ring::default_provider());
    let algorithms = provider.signature_verification_algorithms;
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ConnectionError::BadConnection(format!("TLS setup: {e}")))?;
    let verifier: Arc<dyn ServerCertVerifier> = match (mode, root_cert) {
        (SslMode::Disable | SslMode::Prefer, _) | (SslMode::Require, None) => {
            Arc::new(AnyCertificate(algorithms))
        }
        (SslMode::Require | SslMode::VerifyCa, _) => Arc::new(ChainOnly {
            roots: roots(root_cert)?,
            algorithms,
        }),
        (SslMode::VerifyFull, _) => {
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots(root_cert)?), provider)
                .build()
                .map_err(|e| ConnectionError::BadConnection(format!("TLS setup: {e}")))?
        }
    };
    let mut config = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    // What libpq sends; PostgreSQL 17 needs it for sslnegotiation=direct.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(config)
}

/// Why a connection failed, in an operator's words, when TLS is the cause.
fn hint(error: &tokio_postgres::Error, target: &Target) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        let tls = e.downcast_ref::<rustls::Error>().or_else(|| {
            e.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(rustls::Error::InvalidCertificate(cert)) = tls {
            let roots = match &target.root_cert {
                Some(RootCert::File(p)) => format!("the CAs of sslrootcert {}", p.display()),
                _ => "the Mozilla roots (set sslrootcert to the provider's CA bundle)".to_owned(),
            };
            return Some(match cert {
                CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                    format!("the server's certificate was not trusted: it is not signed by {roots}")
                }
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => format!(
                    "the server's certificate does not name the host connected to \
                     (sslmode={} checks the name; verify-ca does not)",
                    target.mode
                ),
                other => format!("the server's certificate was not trusted: {other:?}"),
            });
        }
        source = e.source();
    }
    if let Some(db) = error.as_db_error()
        && target.mode == SslMode::Disable
        && db.message().contains("no encryption")
    {
        return Some("the server requires TLS: use sslmode=require or stronger".to_owned());
    }
    None
}

/// `error` and its causes, `a: b: c` (tokio-postgres shows only the kind).
fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        out.push_str(": ");
        out.push_str(&e.to_string());
        source = e.source();
    }
    out
}

/// The hosts of a configuration with their ports (`h1:5432,h2:5433`), for
/// error messages: a multi-host URL names several, and each may have its
/// own port (libpq's rule: one port for all, or one per host).
fn hosts(config: &tokio_postgres::Config) -> String {
    let ports = config.get_ports();
    let names: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = match ports {
                [one] => Some(one),
                many => many.get(i),
            };
            match (h, port) {
                (Host::Tcp(name), Some(p)) => format!("{name}:{p}"),
                (Host::Tcp(name), None) => name.clone(),
                (Host::Unix(path), _) => path.display().to_string(),
            }
        })
        .collect();
    names.join(",")
}

/// Checks a connection string without connecting: the errors
/// [`establish`] would give for the string itself.
pub fn check(url: &str) -> ConnectionResult<()> {
    let target = split(url)?;
    parse_rest(&target)?;
    if target.mode != SslMode::Disable {
        client_config(target.mode, target.root_cert.as_ref())?;
    }
    Ok(())
}

fn parse_rest(target: &Target) -> ConnectionResult<tokio_postgres::Config> {
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

/// Opens a connection to `url`, a libpq connection string (URL or
/// `key=value` form) whose `sslmode` and `sslrootcert` are honoured as libpq
/// does, over rustls. The one way this product connects to PostgreSQL.
pub async fn establish(url: &str) -> ConnectionResult<AsyncPgConnection> {
    let target = split(url)?;
    let config = parse_rest(&target)?;
    // libpq ignores sslmode on Unix sockets; so does this, when every host
    // is one (rustls needs a name to connect to).
    let unix_only = !config.get_hosts().is_empty()
        && config.get_hostaddrs().is_empty()
        && config
            .get_hosts()
            .iter()
            .all(|h| matches!(h, Host::Unix(_)));
    let failed = |e: tokio_postgres::Error| {
        let mut message = format!(
            "could not connect to the database at {} (sslmode={}): {}",
            hosts(&config),
            target.mode,
            with_causes(&e)
        );
        if let Some(h) = hint(&e, &target) {
            message.push_str(" -- ");
            message.push_str(&h);
        }
        ConnectionError::BadConnection(message)
    };
    if target.mode == SslMode::Disable || unix_only {
        let mut plain = config.clone();
        plain.ssl_mode(tokio_postgres::config::SslMode::Disable);
        let (client, connection) = plain.connect(tokio_postgres::NoTls).await.map_err(failed)?;
        return connected(client, connection).await;
    }
    let tls = client_config(target.mode, target.root_cert.as_ref())?;
    let (client, connection) = config
        .connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls))
        .await
        .map_err(failed)?;
    connected(client, connection).await
}

/// The diesel connection over an open session. With
/// `BC_DB_PREPARED_STATEMENTS=off`, diesel-async's set-up (`SET TIME ZONE`,
/// `SET CLIENT_ENCODING`, each a prepared statement) runs in a transaction,
/// so that a transaction pooler keeps it on one server, and the connection
/// caches no statement (`pooler`).
async fn connected<S>(
    client: tokio_postgres::Client,
    mut connection: tokio_postgres::Connection<tokio_postgres::Socket, S>,
) -> ConnectionResult<AsyncPgConnection>
where
    S: tokio_postgres::tls::TlsStream + Unpin + Send + 'static,
{
    if !super::pooler::pinned() {
        return AsyncPgConnection::try_from_client_and_connection(client, connection).await;
    }
    let setup_failed = |e: String| {
        ConnectionError::BadConnection(format!("could not set up the database session: {e}"))
    };
    // The session is driven here until BEGIN is answered; diesel-async
    // drives it from then on.
    tokio::select! {
        r = client.batch_execute("BEGIN") => r.map_err(|e| setup_failed(with_causes(&e)))?,
        r = &mut connection => {
            let e = r.err().map_or_else(|| "the server closed the session".into(), |e| {
                with_causes(&e)
            });
            return Err(setup_failed(e));
        }
    }
    let mut conn = AsyncPgConnection::try_from_client_and_connection(client, connection).await?;
    diesel_async::SimpleAsyncConnection::batch_execute(&mut conn, "COMMIT")
        .await
        .map_err(ConnectionError::CouldntSetupConfiguration)?;
    super::pooler::configure(&mut conn);
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn describe_never_shows_the_password() {
        let d = describe("postgres://u:hunter2@h/d?sslmode=verify-ca&sslrootcert=/ca.pem")
            .expect("describe");
        assert_eq!(d, "sslmode=verify-ca sslrootcert=/ca.pem");
        let d = describe("postgres://u:hunter2@h/d").expect("describe");
        assert_eq!(d, "sslmode=prefer sslrootcert=(not checked)");
        let d = describe("postgres://h/d?sslmode=verify-full").expect("describe");
        assert_eq!(d, "sslmode=verify-full sslrootcert=system (Mozilla roots)");
    }

    fn temp_file(name: &str, contents: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "storage-tls-{}-{}",
            std::process::id(),
            crate::ids::new_request_id()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join(name);
        std::fs::write(&path, contents).expect("write");
        path
    }

    #[test]
    fn root_bundles_are_read_or_refused_by_name() {
        let ca = rcgen::CertificateParams::new(vec![])
            .expect("params")
            .self_signed(&rcgen::KeyPair::generate().expect("key"))
            .expect("ca");
        let two = format!("{}{}", ca.pem(), ca.pem());
        let path = temp_file("ca.pem", two.as_bytes());
        let store = roots(Some(&RootCert::File(path.clone()))).expect("roots");
        assert_eq!(store.len(), 2);
        assert!(
            check(&format!(
                "postgres://h/d?sslmode=verify-ca&sslrootcert={}",
                path.display()
            ))
            .is_ok()
        );

        let missing = path.with_file_name("missing.pem");
        let e = check(&format!(
            "postgres://u:hunter2@h/d?sslmode=verify-full&sslrootcert={}",
            missing.display()
        ))
        .expect_err("missing file")
        .to_string();
        assert!(
            e.contains(&format!("sslrootcert {} cannot be read", missing.display())),
            "{e}"
        );
        assert!(!e.contains("hunter2"), "{e}");

        let empty = temp_file("empty.pem", b"not a certificate\n");
        let e = roots(Some(&RootCert::File(empty.clone())))
            .expect_err("no certificate")
            .to_string();
        assert!(e.contains("holds no PEM certificate"), "{e}");

        // Modes that check nothing do not read the file.
        assert!(
            check(&format!(
                "postgres://h/d?sslmode=prefer&sslrootcert={}",
                missing.display()
            ))
            .is_ok()
        );
        // require with a root file is verify-ca: the file must be readable.
        assert!(
            check(&format!(
                "postgres://h/d?sslmode=require&sslrootcert={}",
                missing.display()
            ))
            .is_err()
        );

        let mozilla = roots(None).expect("Mozilla roots");
        assert_eq!(mozilla.len(), webpki_roots::TLS_SERVER_ROOTS.len());
        for p in [path, empty] {
            if let Some(dir) = p.parent() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }

    #[test]
    fn the_rest_is_refused_as_tokio_postgres_refuses_it() {
        let e = check("postgres://u:hunter2@h/d?nonsense=1").expect_err("unknown option");
        let e = e.to_string();
        assert!(e.contains("unknown option `nonsense`"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
    }
}
