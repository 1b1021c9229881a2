//! Why a connection failed, in an operator's words: the TLS cause named,
//! every cause of an error, the hosts tried.

use rustls::CertificateError;
use tokio_postgres::config::Host;

use super::conninfo::{RootCert, SslMode, Target};

/// Why a connection failed, in an operator's words, when TLS is the cause.
pub(super) fn hint(error: &tokio_postgres::Error, target: &Target) -> Option<String> {
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
pub(in crate::db) fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
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
pub(in crate::db) fn hosts(config: &tokio_postgres::Config) -> String {
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
