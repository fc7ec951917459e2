//! TLS on both sides, with rustls and the ring provider chosen explicitly.
//!
//! - Client side: the proxy's certificate and key; TLS 1.2 and 1.3 only, with
//!   rustls's default (modern, AEAD-only) cipher suites; client certificates
//!   required when a client CA is configured.
//! - Upstream side: from the URI's `tls*` options. Certificates are verified
//!   by default (against `tlsCAFile`, else the system roots); turning that
//!   off is possible, as in the drivers, and logged loudly.

use super::uri::UpstreamTls;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use tokio_rustls::{TlsAcceptor, TlsConnector};

/// Client-facing TLS: the proxy's certificate and key, and optionally a CA
/// that client certificates must chain to (then they are required).
#[derive(Clone, Debug)]
pub struct ClientTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    #[error("TLS client verifier: {0}")]
    Verifier(String),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

const VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

fn file_err(path: &Path, message: impl ToString) -> TlsError {
    TlsError::File {
        path: path.display().to_string(),
        message: message.to_string(),
    }
}

pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_err(path, format!("cannot read certificates: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_err(path, format!("bad PEM certificate: {e}")))?;
    if certs.is_empty() {
        return Err(file_err(
            path,
            "no certificate found (expected PEM \"BEGIN CERTIFICATE\")",
        ));
    }
    Ok(certs)
}

pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| {
        file_err(
            path,
            format!("no usable private key (PKCS#8, PKCS#1 or SEC1 PEM): {e}"),
        )
    })
}

fn root_store(ca_file: Option<&Path>) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        Some(path) => {
            for cert in load_certs(path)? {
                roots
                    .add(cert)
                    .map_err(|e| file_err(path, format!("unusable CA certificate: {e}")))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                tracing::warn!(
                    "no system root certificates found; set tlsCAFile in the upstream URI"
                );
            }
        }
    }
    Ok(roots)
}

/// The client-facing acceptor.
pub fn acceptor(settings: &ClientTls) -> Result<TlsAcceptor, TlsError> {
    let certs = load_certs(&settings.cert)?;
    let key = load_key(&settings.key)?;
    let builder =
        rustls::ServerConfig::builder_with_provider(provider()).with_protocol_versions(VERSIONS)?;
    let config = match &settings.client_ca {
        Some(ca) => {
            let roots = Arc::new(root_store(Some(ca))?);
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider())
                    .build()
                    .map_err(|e| TlsError::Verifier(e.to_string()))?;
            builder
                .with_client_cert_verifier(verifier)
                .with_single_cert(certs, key)?
        }
        None => builder.with_no_client_auth().with_single_cert(certs, key)?,
    };
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The upstream connector, or `None` when the URI does not ask for TLS.
pub fn connector(options: &UpstreamTls) -> Result<Option<TlsConnector>, TlsError> {
    if !options.enabled {
        return Ok(None);
    }
    let builder =
        rustls::ClientConfig::builder_with_provider(provider()).with_protocol_versions(VERSIONS)?;
    let verifier: Arc<dyn ServerCertVerifier> = if options.allow_invalid_certificates {
        tracing::warn!(
            "UPSTREAM TLS CERTIFICATES ARE NOT VERIFIED (tlsAllowInvalidCertificates/tlsInsecure): \
             anyone on the network path can impersonate the backend"
        );
        Arc::new(AcceptAnyCertificate(provider()))
    } else {
        let roots = Arc::new(root_store(options.ca_file.as_deref())?);
        let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider())
            .build()
            .map_err(|e| TlsError::Verifier(e.to_string()))?;
        if options.allow_invalid_hostnames {
            tracing::warn!(
                "upstream TLS host names are not checked (tlsAllowInvalidHostnames): \
                 any certificate from the trusted CAs is accepted"
            );
            Arc::new(IgnoreHostname(webpki))
        } else {
            webpki
        }
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match &options.certificate_key_file {
        Some(path) => builder.with_client_auth_cert(load_certs(path)?, load_key(path)?)?,
        None => builder.with_no_client_auth(),
    };
    Ok(Some(TlsConnector::from(Arc::new(config))))
}

pub fn server_name(host: &str) -> Result<ServerName<'static>, TlsError> {
    ServerName::try_from(host.to_string()).map_err(|e| TlsError::File {
        path: host.to_string(),
        message: format!("not a valid TLS server name: {e}"),
    })
}

/// `tlsAllowInvalidHostnames`: the chain is verified, the name is not.
#[derive(Debug)]
struct IgnoreHostname(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for IgnoreHostname {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `tlsAllowInvalidCertificates`: no verification of the certificate; the
/// handshake signatures are still checked.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
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
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
