//! Who may open a webhook connection: with `--client-ca`, a client must
//! present a certificate signed by that CA; with `--client-name`, its common
//! name or one of its DNS or URI subject alternative names must also be one of
//! the allowed names. The name check matters because the CA that signs the
//! apiserver's client certificate (often the cluster CA) usually signs other
//! clients too: every kubelet and every user with a client certificate.
//!
//! A refused client is refused in the TLS handshake, before any HTTP request
//! is read, so a forged review has no side effect at all: no decision, no
//! audit line, no Event, no metric other than the refusal's.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use rustls::client::danger::HandshakeSignatureValid;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, OtherError};
use rustls_pki_types::{CertificateDer, UnixTime};

// Why a client was refused, as the `reason` label of
// `driftguard_clients_refused_total`.
/// The client presented no certificate.
pub(crate) const NO_CERTIFICATE: &str = "no_certificate";
/// Its certificate is invalid: not signed by a `--client-ca`, or expired.
pub(crate) const UNTRUSTED: &str = "untrusted_certificate";
/// Its certificate is trusted but names no `--client-name`.
pub(crate) const NAME_NOT_ALLOWED: &str = "name_not_allowed";

/// The client certificate chains to the CA but names no allowed client.
#[derive(Debug, thiserror::Error)]
#[error("client certificate names {presented:?}, none of the allowed clients {allowed:?}")]
pub(crate) struct NameNotAllowed {
    pub(crate) presented: Vec<String>,
    pub(crate) allowed: Vec<String>,
}

/// Wraps the CA check with the allowed-name check.
#[derive(Debug)]
pub(crate) struct AllowedNames {
    inner: Arc<dyn ClientCertVerifier>,
    allowed: Vec<String>,
}

impl AllowedNames {
    pub(crate) fn new(inner: Arc<dyn ClientCertVerifier>, allowed: Vec<String>) -> Self {
        Self { inner, allowed }
    }

    fn allows(&self, presented: &[String]) -> bool {
        presented
            .iter()
            .any(|p| self.allowed.iter().any(|a| a == p))
    }
}

impl ClientCertVerifier for AllowedNames {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        // The chain first: names mean nothing in a certificate nobody vouches for.
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let presented = certificate_names(end_entity);
        if self.allows(&presented) {
            return Ok(verified);
        }
        Err(rustls::Error::InvalidCertificate(CertificateError::Other(
            OtherError(Arc::new(NameNotAllowed {
                presented,
                allowed: self.allowed.clone(),
            })),
        )))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }

    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }
}

/// The common names, DNS names and URIs a certificate names (each at most
/// 256 bytes, at most 32 of them: they end up in a log line). A certificate
/// that does not parse names nothing, so it matches no allowed name.
pub(crate) fn certificate_names(der: &[u8]) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return Vec::new();
    };
    let mut names: Vec<String> = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_owned))
        .collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(n) | GeneralName::URI(n) => names.push((*n).to_owned()),
                _ => {}
            }
        }
    }
    names.truncate(32);
    for n in &mut names {
        n.truncate(crate::text::prefix(n, 256).len());
    }
    names
}

/// True at most once per second: a refusal is logged as a warning then, and
/// at debug level otherwise, so a flood of forged connections cannot flood
/// the log (the metric still counts every one).
pub(crate) fn warn_now() -> bool {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    LAST.swap(now, Ordering::Relaxed) != now
}

/// Which refusal a failed handshake was, if it was one: the client sent no
/// certificate, one no trusted CA signed, or one naming no allowed client.
/// Other handshake failures (timeouts, protocol errors) are not refusals.
pub(crate) fn refusal(error: &io::Error) -> Option<(&'static str, String)> {
    let tls = error.get_ref()?.downcast_ref::<rustls::Error>()?;
    match tls {
        rustls::Error::NoCertificatesPresented => Some((NO_CERTIFICATE, tls.to_string())),
        rustls::Error::InvalidCertificate(CertificateError::Other(other))
            if other.0.downcast_ref::<NameNotAllowed>().is_some() =>
        {
            Some((NAME_NOT_ALLOWED, other.0.to_string()))
        }
        rustls::Error::InvalidCertificate(_) => Some((UNTRUSTED, tls.to_string())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::Authority;
    use rustls_pki_types::pem::PemObject;

    fn der(pem: &str) -> Vec<u8> {
        CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .to_vec()
    }

    #[test]
    fn names_are_the_common_name_and_the_dns_names() {
        let ca = Authority::new("ca").unwrap();
        let (cert, _) = ca
            .leaf(
                "kube-apiserver",
                &["apiserver.example".into(), "10.0.0.1".into()],
                &["system:masters"],
            )
            .unwrap();
        // The IP address SAN and the organization are not names.
        assert_eq!(
            certificate_names(&der(&cert)),
            ["kube-apiserver", "apiserver.example"]
        );
        assert!(certificate_names(b"not a certificate").is_empty());
    }

    #[test]
    fn refusals_are_warned_about_at_most_once_a_second() {
        let warned = (0..10_000).filter(|_| warn_now()).count();
        // Two if the loop happens to cross a second boundary.
        assert!((1..=2).contains(&warned), "{warned}");
    }

    #[test]
    fn a_name_error_is_told_apart_from_an_untrusted_chain() {
        let named = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(
                NameNotAllowed {
                    presented: vec!["alice".into()],
                    allowed: vec!["kube-apiserver".into()],
                },
            )))),
        );
        let (reason, why) = refusal(&named).unwrap();
        assert_eq!(reason, NAME_NOT_ALLOWED);
        assert!(
            why.contains("alice") && why.contains("kube-apiserver"),
            "{why}"
        );
        let untrusted = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
        );
        assert_eq!(refusal(&untrusted).unwrap().0, UNTRUSTED);
        let none = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::NoCertificatesPresented,
        );
        assert_eq!(refusal(&none).unwrap().0, NO_CERTIFICATE);
        assert!(refusal(&io::Error::other("reset")).is_none());
    }
}
