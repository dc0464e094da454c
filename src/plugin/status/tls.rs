//! What the webhook's certificates say: a URL's TLS handshake from this
//! machine, and the chart's serving Secret against the caBundle.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

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
    let Some(roots) = roots(ca) else {
        return fail(
            true,
            Some(false),
            "caBundle holds no usable certificate".into(),
        );
    };
    let config = match rustls::ClientConfig::builder_with_provider(crate::server::tls::provider())
        .with_safe_default_protocol_versions()
    {
        Ok(b) => b.with_root_certificates(roots).with_no_client_auth(),
        Err(e) => return fail(true, None, format!("TLS setup: {e}")),
    };
    let Ok(name) = rustls_pki_types::ServerName::try_from(host.clone()) else {
        return fail(true, None, format!("{host} is not a TLS server name"));
    };
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    match tokio::time::timeout(timeout, connector.connect(name, tcp)).await {
        Ok(Ok(_)) => TlsCheck {
            ok: true,
            reachable: true,
            verifies: Some(true),
            text: "reachable from here, caBundle verifies its certificate".into(),
        },
        Ok(Err(e)) => fail(
            true,
            Some(false),
            format!("caBundle does NOT verify its certificate: {e}"),
        ),
        Err(_) => fail(true, None, "TLS handshake timed out".into()),
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
    Ok(match verify_chain(&leaf, ca, &dns) {
        Ok(()) => ServingCheck {
            secret: secret.clone(),
            verifies: Some(true),
            text: format!("caBundle verifies tls.crt of Secret {secret} for {dns}"),
        },
        Err(e) => ServingCheck {
            secret: secret.clone(),
            verifies: Some(false),
            text: format!("caBundle does NOT verify tls.crt of Secret {secret} for {dns}: {e}"),
        },
    })
}

/// Verifies PEM `leaf_pem` (end-entity first, then any intermediates) for
/// `dns` against the roots in PEM `ca_pem`, at the current time.
fn verify_chain(leaf_pem: &[u8], ca_pem: &[u8], dns: &str) -> Result<(), String> {
    use rustls::client::danger::ServerCertVerifier;
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
}
