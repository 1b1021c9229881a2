//! Connections to PostgreSQL with libpq's `sslmode` and `sslrootcert`, over
//! rustls on the ring provider.
//!
//! tokio-postgres knows only `sslmode=disable|prefer|require` and has no
//! `sslrootcert`: both are taken out of the URL here, the rest goes to
//! tokio-postgres as it is, and the TLS connector is built to verify what
//! libpq's mode verifies.
//!
//! This file opens the connection; `conninfo` splits the connection string,
//! `verifiers` holds the certificate checks of libpq's weaker modes, `hints`
//! words a failure for an operator, and the session set-up behind a
//! transaction pooler is `super::pooler`'s.

use std::sync::Arc;

use diesel::{ConnectionError, ConnectionResult};
use diesel_async::AsyncPgConnection;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tokio_postgres::config::Host;

mod conninfo;
mod hints;
mod verifiers;

pub use conninfo::with_database;
use conninfo::{RootCert, SslMode, parse_rest, split, url_error};
pub(super) use hints::with_causes;
use hints::{hint, hosts};
use verifiers::NameUnchecked;

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

/// The rustls configuration for `mode` (not called for `disable`).
fn client_config(mode: SslMode, root_cert: Option<&RootCert>) -> ConnectionResult<ClientConfig> {
    let provider: Arc<CryptoProvider> = Arc::new(rustls::crypto::ring::default_provider());
    let algorithms = provider.signature_verification_algorithms;
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ConnectionError::BadConnection(format!("TLS setup: {e}")))?;
    let verifier: Arc<dyn ServerCertVerifier> = match (mode, root_cert) {
        (SslMode::Disable | SslMode::Prefer, _) | (SslMode::Require, None) => {
            Arc::new(NameUnchecked::any(algorithms))
        }
        (SslMode::Require | SslMode::VerifyCa, _) => {
            Arc::new(NameUnchecked::chain(roots(root_cert)?, algorithms))
        }
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
        return super::pooler::connected(client, connection).await;
    }
    let tls = client_config(target.mode, target.root_cert.as_ref())?;
    let (client, connection) = config
        .connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls))
        .await
        .map_err(failed)?;
    super::pooler::connected(client, connection).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
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
