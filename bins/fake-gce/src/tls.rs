//! The certificate and key the fake serves HTTPS with.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A certificate chain and its private key, checked and ready to serve
/// HTTPS with (rustls on the ring provider, TLS 1.2 and 1.3, HTTP/1.1).
///
/// Two identities are equal when their PEM texts are.
#[derive(Clone)]
pub struct TlsIdentity {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    server: Arc<ServerConfig>,
}

/// Why a [`TlsIdentity`] could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsError(String);

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

impl TlsIdentity {
    /// From PEM texts: `cert_pem` holds the leaf certificate first, then
    /// any intermediates; `key_pem` holds its private key (PKCS#8, PKCS#1
    /// or SEC1).
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, TlsError> {
        let certs = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError(format!("the certificate PEM does not parse: {e}")))?;
        if certs.is_empty() {
            return Err(TlsError(
                "the certificate PEM holds no CERTIFICATE section".into(),
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|e| TlsError(format!("the key PEM holds no usable private key: {e}")))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut server = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError(format!("TLS versions: {e}")))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| TlsError(format!("the certificate and key do not go together: {e}")))?;
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsIdentity {
            cert_pem: cert_pem.to_vec(),
            key_pem: key_pem.to_vec(),
            server: Arc::new(server),
        })
    }

    /// From PEM files (see [`TlsIdentity::from_pem`]); errors name the file.
    pub fn from_files(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let read = |path: &Path, what: &str| {
            std::fs::read(path)
                .map_err(|e| TlsError(format!("reading the {what} {}: {e}", path.display())))
        };
        Self::from_pem(&read(cert, "certificate")?, &read(key, "key")?)
    }

    /// The certificate chain, as given.
    pub fn cert_pem(&self) -> &[u8] {
        &self.cert_pem
    }

    pub(crate) fn server_config(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.server)
    }
}

impl fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key stays out of logs.
        f.debug_struct("TlsIdentity")
            .field("cert_pem_bytes", &self.cert_pem.len())
            .finish_non_exhaustive()
    }
}

impl PartialEq for TlsIdentity {
    fn eq(&self, other: &Self) -> bool {
        self.cert_pem == other.cert_pem && self.key_pem == other.key_pem
    }
}

impl Eq for TlsIdentity {}
