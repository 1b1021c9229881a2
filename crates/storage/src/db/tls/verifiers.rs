//! The certificate verifier libpq's weaker modes need, which rustls does
//! not ship: any certificate (`prefer`, `require`) and the chain without
//! the name (`verify-ca`). `verify-full` is rustls's own.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::server::ParsedCertificate;
use rustls::{DigitallySignedStruct, RootCertStore};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

/// Never checks the server's name. With roots, verifies the chain against
/// them (`verify-ca`, and `require` with `sslrootcert`); without, accepts
/// any certificate (`prefer`, and `require` without roots). Either way it
/// still checks that the server holds its key.
#[derive(Debug)]
pub(super) struct NameUnchecked {
    roots: Option<RootCertStore>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl NameUnchecked {
    /// Accepts any certificate.
    pub(super) fn any(algorithms: WebPkiSupportedAlgorithms) -> NameUnchecked {
        NameUnchecked {
            roots: None,
            algorithms,
        }
    }

    /// Verifies the chain against `roots`.
    pub(super) fn chain(
        roots: RootCertStore,
        algorithms: WebPkiSupportedAlgorithms,
    ) -> NameUnchecked {
        NameUnchecked {
            roots: Some(roots),
            algorithms,
        }
    }
}

impl ServerCertVerifier for NameUnchecked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = ParsedCertificate::try_from(end_entity)?;
            verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.algorithms.all,
            )?;
        }
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
