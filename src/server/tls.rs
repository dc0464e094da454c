//! rustls for the webhook listener: TLS 1.2 and 1.3 only, ring as the
//! explicitly chosen crypto provider, HTTP/2 and HTTP/1.1 through ALPN, an
//! optional client-CA check with allowed client names, and a certificate
//! pair that can be swapped while serving (new handshakes use the new pair).

use std::sync::{Arc, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// ring, chosen explicitly: it needs no C toolchain beyond cc and links
/// statically; rustls refuses to guess when more than one provider is built in.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Makes [`provider`] the process default as well: the kube client's TLS asks
/// rustls for the process default rather than taking a provider. Call it before
/// building a kube client; a second call is a no-op.
pub(crate) fn install_process_default() {
    let _ = Arc::unwrap_or_clone(provider()).install_default();
}

/// Why a certificate, key or client CA cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("{0}")]
    Read(#[from] std::io::Error),
    /// The certificate file is not PEM.
    #[error("certificate PEM: {0}")]
    CertificatePem(rustls_pki_types::pem::Error),
    /// The certificate file is PEM without a certificate.
    #[error("certificate PEM holds no certificate")]
    NoCertificate,
    /// The key file is not a PEM private key.
    #[error("private key PEM: {0}")]
    KeyPem(rustls_pki_types::pem::Error),
    /// A private key of a kind ring cannot sign with.
    #[error("private key: {0}")]
    Key(rustls::Error),
    /// The key is not the certificate's.
    #[error("certificate and key do not match: {0}")]
    Mismatch(rustls::Error),
    /// The provider does not offer TLS 1.2 and 1.3.
    #[error("{0}")]
    Versions(rustls::Error),
    /// The client CA file is not PEM.
    #[error("client CA PEM: {0}")]
    ClientCaPem(rustls_pki_types::pem::Error),
    /// A client CA certificate rustls cannot use as a trust anchor.
    #[error("client CA: {0}")]
    ClientCa(rustls::Error),
    /// The client CA file is PEM without a certificate.
    #[error("client CA PEM holds no certificate")]
    NoClientCa,
    /// The client verifier could not be built.
    #[error("client CA: {0}")]
    Verifier(rustls::server::VerifierBuilderError),
    /// `--client-name` without `--client-ca`.
    #[error(
        "--client-name needs --client-ca: without a CA no client certificate is asked for, so no name can be checked"
    )]
    NamesWithoutCa,
    /// An empty `--client-name`.
    #[error("--client-name: an empty name")]
    EmptyName,
}

/// Parses a PEM certificate chain and private key into a signing pair.
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(TlsError::CertificatePem)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(TlsError::KeyPem)?;
    let signing = provider()
        .key_provider
        .load_private_key(key)
        .map_err(TlsError::Key)?;
    let pair = CertifiedKey::new(certs, signing);
    pair.keys_match().map_err(TlsError::Mismatch)?;
    Ok(pair)
}

/// The serving pair, swappable while serving.
#[derive(Debug)]
pub struct CertStore {
    current: RwLock<Arc<CertifiedKey>>,
}

impl CertStore {
    /// A store serving `pair`.
    pub fn new(pair: CertifiedKey) -> Self {
        Self {
            current: RwLock::new(Arc::new(pair)),
        }
    }

    /// Serves `pair` from the next handshake on.
    pub(crate) fn replace(&self, pair: CertifiedKey) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(pair);
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

/// The listener's TLS configuration. With `client_ca_pem`, every client must
/// present a certificate signed by that CA (the apiserver's client
/// certificate); with `allowed_names` as well, a certificate naming one of
/// them ([`super::client_auth`]). Names without a CA are refused: they would
/// check nothing.
pub fn server_config(
    certs: Arc<CertStore>,
    client_ca_pem: Option<&[u8]>,
    allowed_names: &[String],
) -> Result<ServerConfig, TlsError> {
    if client_ca_pem.is_none() && !allowed_names.is_empty() {
        return Err(TlsError::NamesWithoutCa);
    }
    if allowed_names.iter().any(|n| n.trim().is_empty()) {
        return Err(TlsError::EmptyName);
    }
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(TlsError::Versions)?;
    let builder = match client_ca_pem {
        Some(pem) => {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem) {
                roots
                    .add(cert.map_err(TlsError::ClientCaPem)?)
                    .map_err(TlsError::ClientCa)?;
            }
            if roots.is_empty() {
                return Err(TlsError::NoClientCa);
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(TlsError::Verifier)?;
            if allowed_names.is_empty() {
                builder.with_client_cert_verifier(verifier)
            } else {
                builder.with_client_cert_verifier(Arc::new(super::client_auth::AllowedNames::new(
                    verifier,
                    allowed_names.to_vec(),
                )))
            }
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(certs);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
