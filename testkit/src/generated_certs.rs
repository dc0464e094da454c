//! The chart's generated certificates as a release holds them in the cluster:
//! the CA Secret, the serving certificate's Secret and the webhooks' caBundle,
//! with the checks the apiserver makes on a new connection (chain and name).
use std::process::Command;
use std::sync::Arc;

use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use serde_json::Value;

use crate::control_plane::{ControlPlane, ROOT, helm};

/// A release's generated material, PEM text.
#[derive(Clone, Debug, PartialEq)]
pub struct Generated {
    pub ca_cert: String,
    pub ca_key: String,
    pub cert: String,
    pub key: String,
    /// `ca.crt` of the serving certificate's Secret.
    pub secret_bundle: String,
    /// The caBundle of every webhook of both configurations.
    pub bundles: Vec<String>,
}

impl Generated {
    /// The caBundle all webhooks share (panics when they differ).
    pub fn bundle(&self) -> &str {
        assert!(
            self.bundles.windows(2).all(|w| w[0] == w[1]),
            "the webhooks trust different bundles"
        );
        &self.bundles[0]
    }
}

fn secret_data(plane: &ControlPlane, namespace: &str, name: &str, key: &str) -> String {
    let out = plane.kubectl(
        "admin",
        &["-n", namespace, "get", "secret", name, "-o", "json"],
    );
    assert!(out.ok, "{out}");
    let secret: Value = serde_json::from_str(&out.stdout).unwrap();
    let b64 = secret["data"][key]
        .as_str()
        .unwrap_or_else(|| panic!("{name} has no {key}"));
    String::from_utf8(base64_decode(b64)).unwrap()
}

/// Reads `<fullname>-ca`, `<fullname>-tls` and the webhook configurations
/// named `fullname`.
pub fn read_generated(plane: &ControlPlane, namespace: &str, fullname: &str) -> Generated {
    let ca = format!("{fullname}-ca");
    let tls = format!("{fullname}-tls");
    let mut bundles = Vec::new();
    for kind in [
        "validatingwebhookconfiguration",
        "mutatingwebhookconfiguration",
    ] {
        let out = plane.kubectl("admin", &["get", kind, fullname, "-o", "json"]);
        assert!(out.ok, "{out}");
        let config: Value = serde_json::from_str(&out.stdout).unwrap();
        for hook in config["webhooks"].as_array().unwrap() {
            let b64 = hook["clientConfig"]["caBundle"].as_str().unwrap();
            bundles.push(String::from_utf8(base64_decode(b64)).unwrap());
        }
    }
    Generated {
        ca_cert: secret_data(plane, namespace, &ca, "tls.crt"),
        ca_key: secret_data(plane, namespace, &ca, "tls.key"),
        cert: secret_data(plane, namespace, &tls, "tls.crt"),
        key: secret_data(plane, namespace, &tls, "tls.key"),
        secret_bundle: secret_data(plane, namespace, &tls, "ca.crt"),
        bundles,
    }
}

/// `helm install|upgrade <release> charts/driftguard -n <namespace> <args>`
/// against the plane, where `lookup` reads the cluster: what it printed
/// (the release notes).
pub fn helm_release(
    plane: &ControlPlane,
    verb: &str,
    release: &str,
    namespace: &str,
    args: &[&str],
) -> String {
    let out = Command::new(helm())
        .args([verb, release, &format!("{ROOT}/charts/driftguard")])
        .args(["-n", namespace, "--kubeconfig"])
        .arg(plane.kubeconfig("admin"))
        // The config-check hook's Job needs a node; its command is tested
        // on its own (tests/chart.rs `the_config_check_hook_refuses_…`).
        .arg("--no-hooks")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm {verb} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The DER certificates of a PEM bundle, in order.
pub fn certificates(pem: &str) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap_or_else(|e| panic!("not PEM certificates ({e:?}): {pem:?}"))
}

fn roots(bundle: &str) -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    for der in certificates(bundle) {
        roots.add(der).unwrap();
    }
    roots
}

/// Whether `leaf` (PEM) chains to a CA of `bundle` and names `host` (an IP
/// address or DNS name): what the apiserver checks on a new connection.
pub fn verifies(leaf: &str, bundle: &str, host: &str) -> Result<(), String> {
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots(bundle)),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .map_err(|e| e.to_string())?;
    let leaf = certificates(leaf).remove(0);
    let name = ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
    verifier
        .verify_server_cert(&leaf, &[], &name, &[], UnixTime::now())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Subject alternative names of `pem`'s first certificate: `DNS:x`, `IP:y`.
pub fn names(pem: &str) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let der = certificates(pem).remove(0);
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    let Some(san) = cert.subject_alternative_name().unwrap() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .map(|n| match n {
            GeneralName::DNSName(d) => format!("DNS:{d}"),
            GeneralName::IPAddress(b) if b.len() == 4 => {
                format!(
                    "IP:{}",
                    std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*b).unwrap())
                )
            }
            GeneralName::IPAddress(b) if b.len() == 16 => {
                format!(
                    "IP:{}",
                    std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*b).unwrap())
                )
            }
            other => format!("{other:?}"),
        })
        .collect()
}

/// Whether `pem`'s first certificate is a CA (basicConstraints cA).
pub fn is_ca(pem: &str) -> bool {
    let der = certificates(pem).remove(0);
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    cert.basic_constraints()
        .ok()
        .flatten()
        .is_some_and(|b| b.value.ca)
}

/// Standard base64 (what Secret data and caBundle hold).
pub fn base64_decode(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
    {
        let v = ALPHABET
            .iter()
            .position(|a| *a == c)
            .unwrap_or_else(|| panic!("not base64: {c:?}")) as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}
