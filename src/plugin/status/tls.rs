//! What the webhook's certificates say: a URL's TLS handshake from this
//! machine, and the chart's serving Secret against the caBundle; each with
//! the serving certificate's expiry.

use std::sync::{Arc, Mutex};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use rustls::client::danger::ServerCertVerifier;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use super::expiry::{self, Expiry};
use crate::plugin::PluginError;
use crate::plugin::api::{Api, answer};

/// What a TLS handshake with a webhook URL, from this machine, says.
#[derive(Debug, serde::Serialize)]
pub(super) struct TlsCheck {
    pub(super) ok: bool,
    pub(super) reachable: bool,
    #[serde(rename = "caBundleVerifies")]
    pub(super) verifies: Option<bool>,
    pub(super) text: String,
    /// The certificate the handshake presented, verified or not.
    pub(super) expiry: Option<Expiry>,
}

/// Connects to a webhook URL (2 s) and verifies its certificate against the
/// configuration's caBundle, as the apiserver will. A hint: the apiserver
/// may see the network differently from this machine.
pub(super) async fn check_tls(url: &str, ca: &[u8]) -> TlsCheck {
    let fail = |reachable, verifies, text: String| TlsCheck {
        ok: false,
        reachable,
        verifies,
        text,
        expiry: None,
    };
    let Ok(uri) = url.parse::<http::Uri>() else {
        return fail(false, None, format!("URL {url} does not parse"));
    };
    let Some(host) = uri
        .host()
        .map(|h| h.trim_start_matches('[').trim_end_matches(']').to_owned())
    else {
        return fail(false, None, format!("URL {url} has no host"));
    };
    let port = uri.port_u16().unwrap_or(443);
    let timeout = std::time::Duration::from_secs(2);
    let tcp = match tokio::time::timeout(
        timeout,
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await
    {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(e)) => return fail(false, None, format!("NOT REACHABLE from here: {e}")),
        Err(_) => return fail(false, None, "NOT REACHABLE from here: timed out".into()),
    };
    let verifier = match Recording::new(ca) {
        Ok(v) => Arc::new(v),
        Err(why) => return fail(true, Some(false), why),
    };
    let config = match rustls::ClientConfig::builder_with_provider(crate::server::tls::provider())
        .with_safe_default_protocol_versions()
    {
        Ok(b) => b
            .dangerous()
            .with_custom_certificate_verifier(verifier.clone())
            .with_no_client_auth(),
        Err(e) => return fail(true, None, format!("TLS setup: {e}")),
    };
    let Ok(name) = rustls_pki_types::ServerName::try_from(host.clone()) else {
        return fail(true, None, format!("{host} is not a TLS server name"));
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let handshake = tokio::time::timeout(timeout, connector.connect(name, tcp)).await;
    let mut check = match handshake {
        Ok(Ok(_)) => TlsCheck {
            ok: true,
            reachable: true,
            verifies: Some(true),
            text: "reachable from here, caBundle verifies its certificate".into(),
            expiry: None,
        },
        Ok(Err(e)) => fail(
            true,
            Some(false),
            format!("caBundle does NOT verify its certificate: {e}"),
        ),
        Err(_) => fail(true, None, "TLS handshake timed out".into()),
    };
    check.expiry = verifier.seen(crate::certs::expiry::now());
    check
}

/// The caBundle's verifier, keeping the end-entity certificate it was
/// shown: an expired one fails the handshake, and its date is what tells
/// the operator why. Every decision is the wrapped verifier's.
#[derive(Debug)]
struct Recording {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
    seen: Mutex<Option<Vec<u8>>>,
}

impl Recording {
    fn new(ca: &[u8]) -> Result<Self, String> {
        let roots = roots(ca).ok_or("caBundle holds no usable certificate")?;
        let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            crate::server::tls::provider(),
        )
        .build()
        .map_err(|e| format!("caBundle: {e}"))?;
        Ok(Self {
            inner,
            seen: Mutex::new(None),
        })
    }

    /// The dates of the certificate the server presented, if it got that far.
    fn seen(&self, now: i64) -> Option<Expiry> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        expiry::of_der(seen.as_deref()?, now)
    }
}

impl ServerCertVerifier for Recording {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &rustls_pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(end_entity.to_vec());
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// What the serving certificate the chart mounts says about a caBundle.
#[derive(Debug, serde::Serialize)]
pub(super) struct ServingCheck {
    pub(super) secret: String,
    /// `None`: not checked (the Secret could not be read), not a failure.
    #[serde(rename = "caBundleVerifies")]
    pub(super) verifies: Option<bool>,
    pub(super) text: String,
    /// tls.crt's leaf; null when it was not read.
    pub(super) expiry: Option<Expiry>,
}

/// The chart mounts Secret `<fullname>-tls` (keys tls.crt, tls.key) and names
/// its Service `<fullname>`, both in the release namespace: reads that
/// Secret's tls.crt and verifies that it chains to `ca_bundle` for the
/// Service DNS name `NAME.NAMESPACE.svc`, as the apiserver will.
pub(super) async fn check_serving_secret(
    api: &Api,
    ns: &str,
    name: &str,
    ca: &[u8],
) -> Result<ServingCheck, PluginError> {
    let secret = format!("{ns}/{name}-tls");
    let not_checked = |text: String| ServingCheck {
        secret: secret.clone(),
        verifies: None,
        text: format!("caBundle not checked: {text}"),
        expiry: None,
    };
    let got = api
        .namespaced::<Secret>(ns)
        .get(&format!("{name}-tls"))
        .await;
    let object = match answer(got, format_args!("get secret {secret}"))? {
        Ok(o) => o,
        Err(r) if r.code == 403 => {
            return Ok(not_checked(format!(
                "cannot read Secret {secret} (needs get on secrets in namespace {ns}): {}",
                r.message
            )));
        }
        Err(r) if r.code == 404 => {
            return Ok(not_checked(format!(
                "Secret {secret} (the chart's serving certificate) does not exist"
            )));
        }
        Err(r) => return Ok(not_checked(format!("Secret {secret}: {}", r.message))),
    };
    let Some(ByteString(leaf)) = object.data.and_then(|mut d| d.remove("tls.crt")) else {
        return Ok(not_checked(format!("Secret {secret} has no tls.crt")));
    };
    let dns = format!("{name}.{ns}.svc");
    Ok(serving_check(
        secret,
        &leaf,
        ca,
        &dns,
        crate::certs::expiry::now(),
    ))
}

/// Secret `secret`'s tls.crt `leaf` checked against caBundle `ca` for `dns`
/// at the current time, with the leaf's dates at `now`.
fn serving_check(secret: String, leaf: &[u8], ca: &[u8], dns: &str, now: i64) -> ServingCheck {
    let (verifies, text) = match verify_chain(leaf, ca, dns) {
        Ok(()) => (
            true,
            format!("caBundle verifies tls.crt of Secret {secret} for {dns}"),
        ),
        Err(e) => (
            false,
            format!("caBundle does NOT verify tls.crt of Secret {secret} for {dns}: {e}"),
        ),
    };
    ServingCheck {
        secret,
        verifies: Some(verifies),
        text,
        expiry: expiry::leaf_of_pem(leaf, now),
    }
}

/// Verifies PEM `leaf_pem` (end-entity first, then any intermediates) for
/// `dns` against the roots in PEM `ca_pem`, at the current time.
fn verify_chain(leaf_pem: &[u8], ca_pem: &[u8], dns: &str) -> Result<(), String> {
    use rustls_pki_types::{ServerName, UnixTime};
    let roots = roots(ca_pem).ok_or("caBundle holds no usable certificate")?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(leaf_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("tls.crt: {e}"))?;
    let Some((end_entity, intermediates)) = chain.split_first() else {
        return Err("tls.crt holds no certificate".into());
    };
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        std::sync::Arc::new(roots),
        crate::server::tls::provider(),
    )
    .build()
    .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(dns.to_owned()).map_err(|e| format!("{dns}: {e}"))?;
    verifier
        .verify_server_cert(end_entity, intermediates, &name, &[], UnixTime::now())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The certificates of PEM `ca`; `None` when it holds none.
fn roots(ca: &[u8]) -> Option<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca).flatten() {
        let _ = roots.add(cert);
    }
    (!roots.is_empty()).then_some(roots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::Authority;

    #[test]
    fn the_serving_certificate_chains_to_the_ca_bundle_or_not() {
        let dns = "driftguard.driftguard.svc";
        let ca = Authority::new("ca").unwrap();
        let (leaf, _) = ca.leaf("driftguard", &[dns.to_owned()], &[]).unwrap();
        assert_eq!(
            verify_chain(leaf.as_bytes(), ca.cert_pem.as_bytes(), dns),
            Ok(())
        );

        let other = Authority::new("another ca").unwrap();
        let (foreign, _) = other.leaf("driftguard", &[dns.to_owned()], &[]).unwrap();
        let e = verify_chain(foreign.as_bytes(), ca.cert_pem.as_bytes(), dns).unwrap_err();
        assert!(e.contains("UnknownIssuer"), "{e}");

        let e = verify_chain(leaf.as_bytes(), ca.cert_pem.as_bytes(), "other.ns.svc").unwrap_err();
        assert!(e.contains("not valid for name"), "{e}");
        assert!(verify_chain(leaf.as_bytes(), b"", dns).is_err());
    }

    const DAY: i64 = 86_400;

    fn validity(not_before: i64, not_after: i64) -> crate::certs::expiry::Validity {
        crate::certs::expiry::Validity {
            not_before,
            not_after,
        }
    }

    /// The Secret's tls.crt: expired (so the chain check fails, and the
    /// date says why), or valid with days to count.
    #[test]
    fn the_serving_secret_says_when_its_certificate_expires() {
        let dns = "driftguard.driftguard.svc";
        let ca = Authority::new("ca").unwrap();
        let now = crate::certs::expiry::now();
        let past = validity(now - 400 * DAY, now - 30 * DAY - 60);
        let (expired, _) = ca
            .leaf_valid("driftguard", &[dns.into()], &[], past)
            .unwrap();
        let check = serving_check(
            "driftguard/driftguard-tls".into(),
            expired.as_bytes(),
            ca.cert_pem.as_bytes(),
            dns,
            now,
        );
        assert_eq!(check.verifies, Some(false), "{}", check.text);
        let e = check.expiry.unwrap();
        assert!(e.text.starts_with("expired 30 days ago ("), "{}", e.text);
        assert_eq!((e.days_left, e.usable), (Some(-31), false));

        let soon = validity(now - DAY, now + 10 * DAY + 60);
        let (leaf, _) = ca
            .leaf_valid("driftguard", &[dns.into()], &[], soon)
            .unwrap();
        let check = serving_check(
            "s".into(),
            leaf.as_bytes(),
            ca.cert_pem.as_bytes(),
            dns,
            now,
        );
        assert_eq!(check.verifies, Some(true), "{}", check.text);
        let e = check.expiry.unwrap();
        assert_eq!(e.subject, "CN=driftguard");
        assert!(e.text.starts_with("expires in 10 days ("), "{}", e.text);
    }

    /// A URL's handshake with an expired certificate fails, and the
    /// certificate it presented still has its date told.
    #[tokio::test]
    async fn a_urls_expired_certificate_is_dated_though_the_handshake_fails() {
        use crate::server::tls::{CertStore, certified_key, server_config};
        let ca = Authority::new("ca").unwrap();
        let now = crate::certs::expiry::now();
        let past = validity(now - 400 * DAY, now - 3 * DAY - 60);
        let (cert, key) = ca
            .leaf_valid("driftguard", &["127.0.0.1".into()], &[], past)
            .unwrap();
        let pair = certified_key(cert.as_bytes(), key.as_bytes()).unwrap();
        let config = server_config(Arc::new(CertStore::new(pair)), None, &[]).unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let _ = acceptor.accept(tcp).await;
        });
        let check = check_tls(
            &format!("https://127.0.0.1:{port}/validate"),
            ca.cert_pem.as_bytes(),
        )
        .await;
        let _ = server.await;
        assert!(!check.ok && check.reachable, "{}", check.text);
        assert!(check.text.contains("does NOT verify"), "{}", check.text);
        let e = check.expiry.expect("the presented certificate's dates");
        assert!(e.text.starts_with("expired 3 days ago ("), "{}", e.text);
    }
}
