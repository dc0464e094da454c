//! End to end on a real kube-apiserver: the chart's generated certificates
//! (no cert-manager) are re-issued and their CA rotated by `helm upgrade`
//! while judged writes flow. The chart is installed for real (helm reads the
//! cluster, so `lookup` works) in url mode at a local driftguard, which serves
//! the generated Secret's files. After each upgrade the new Secret reaches
//! the files late, as the kubelet's would (up to about a minute in a
//! cluster), and no write may fail:
//! - a re-issue keeps the CA, so the caBundle does not change and the
//!   certificate still served verifies until the new one is read;
//! - a CA rotation's caBundle holds both CAs, so the apiserver, which opens
//!   new connections for a new caBundle, verifies the old certificate until
//!   the new one is read; the next upgrade leaves the old CA out.
//!
//! The failure the overlap prevents is shown on the same apiserver: a
//! caBundle with only a new CA (the chart before: a new CA meant a new
//! caBundle alone) while the files lag fails writes.

use driftguard_testkit::control_plane;
use driftguard_testkit::generated_certs;
use driftguard_testkit::renewal;

use control_plane::*;
use generated_certs::*;
use renewal::*;
use serde_json::Value;
use std::time::Duration;

const RELEASE: &str = "dg";
const NAMESPACE: &str = "driftguard";
const FULLNAME: &str = "dg-driftguard";

/// How long the files lag the Secret: the kubelet's sync, shortened.
const KUBELET_LAG: Duration = Duration::from_secs(4);

fn read(plane: &ControlPlane) -> Generated {
    read_generated(plane, NAMESPACE, FULLNAME)
}

fn upgrade(plane: &ControlPlane, sets: &[&str]) -> Generated {
    let mut args = vec!["--reuse-values"];
    for s in sets {
        args.extend(["--set", s]);
    }
    helm_release(plane, "upgrade", RELEASE, NAMESPACE, &args);
    read(plane)
}

fn assert_none_failed(what: &str, ok: usize, failures: &[String]) {
    assert!(ok > 5, "{what}: too few writes to say anything: {ok}");
    assert!(
        failures.is_empty(),
        "{what}: {} of {} writes failed: {:?}",
        failures.len(),
        ok + failures.len(),
        &failures[..failures.len().min(3)]
    );
    println!("{what}: {ok} writes, none failed");
}

/// The webhook configurations' caBundle replaced by `bundle`, outside helm.
fn set_ca_bundle(plane: &ControlPlane, bundle: &str) {
    for kind in [
        "validatingwebhookconfiguration",
        "mutatingwebhookconfiguration",
    ] {
        let out = plane.kubectl("admin", &["get", kind, FULLNAME, "-o", "json"]);
        assert!(out.ok, "{out}");
        let mut config: Value = serde_json::from_str(&out.stdout).unwrap();
        for hook in config["webhooks"].as_array_mut().unwrap() {
            hook["clientConfig"]["caBundle"] = Value::from(base64_encode(bundle.as_bytes()));
        }
        let out = plane.kubectl_stdin("admin", &["replace", "-f", "-"], Some(&config.to_string()));
        assert!(out.ok, "{out}");
    }
}

fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n =
            chunk.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn served(dg: &Driftguard, bundle: &str) -> Vec<u8> {
    new_connection(dg.port, bundle)
        .unwrap_or_else(|e| panic!("a new connection against the live caBundle: {e}"))
        .to_vec()
}

fn der(pem: &str) -> Vec<u8> {
    certificates(pem).remove(0).to_vec()
}

#[test]
fn reissuing_and_rotating_the_generated_certificates_under_load_fails_no_write() {
    let mut plane = ControlPlane::start("generated-renewal");
    plane.prepare(&["production", "argocd"]);
    let policy = plane.dir.join("renewal-policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    // Serving a certificate of the plane's CA until the chart's is read.
    let dg = Driftguard::start(
        &plane,
        &[
            &format!("--policy={}", policy.display()),
            "--reload-interval=500ms",
        ],
    );
    let url = format!("webhook.url=https://127.0.0.1:{}", dg.port);
    helm_release(
        &plane,
        "install",
        RELEASE,
        NAMESPACE,
        &["--create-namespace", "--set", &url],
    );
    let installed = read(&plane);
    assert_eq!(installed.bundle(), installed.ca_cert);
    replace_files(&plane, &dg, &installed.cert, &installed.key);
    let out = plane.kubectl_as_stdin(ARGO, &["apply", "-f", "-"], Some(COUNTER));
    assert!(out.ok, "{out}");
    wait_until_judged(&plane);
    assert_eq!(served(&dg, installed.bundle()), der(&installed.cert));

    // A re-issue: the Secret changes at once, the files a few seconds later.
    let (ok, failures, reissued) = under_load(&plane, || {
        let reissued = upgrade(&plane, &["certificates.generated.reissue=1"]);
        assert_eq!(
            reissued.bundle(),
            installed.bundle(),
            "the caBundle changed"
        );
        assert_ne!(reissued.cert, installed.cert, "no new certificate");
        std::thread::sleep(KUBELET_LAG);
        // Still the old certificate: it verifies against the live caBundle.
        assert_eq!(served(&dg, reissued.bundle()), der(&installed.cert));
        replace_files(&plane, &dg, &reissued.cert, &reissued.key);
        reissued
    });
    assert_none_failed("re-issue", ok, &failures);
    assert_eq!(served(&dg, &read(&plane).bundles[0]), der(&reissued.cert));

    // A CA rotation: the apiserver gets a new caBundle (and opens new
    // connections for it) while the old certificate is still served.
    let (ok, failures, rotated) = under_load(&plane, || {
        let rotated = upgrade(&plane, &["certificates.generated.caRotation=1"]);
        assert_ne!(rotated.ca_cert, reissued.ca_cert, "no new CA");
        assert_eq!(
            certificates(rotated.bundle()),
            [
                certificates(&rotated.ca_cert),
                certificates(&reissued.ca_cert)
            ]
            .concat(),
            "the caBundle holds the new CA and the old one"
        );
        std::thread::sleep(KUBELET_LAG);
        assert_eq!(served(&dg, rotated.bundle()), der(&reissued.cert));
        // What the overlap prevents: a new connection trusting only the new CA.
        let refused = new_connection(dg.port, &rotated.ca_cert);
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("UnknownIssuer") || e.contains("BadSignature")),
            "the old certificate verified against the new CA alone: {refused:?}"
        );
        replace_files(&plane, &dg, &rotated.cert, &rotated.key);
        rotated
    });
    assert_none_failed("CA rotation", ok, &failures);
    assert_eq!(served(&dg, rotated.bundle()), der(&rotated.cert));

    // The next upgrade leaves the old CA out; writes go on.
    let (ok, failures, settled) = under_load(&plane, || upgrade(&plane, &[]));
    assert_none_failed("the upgrade after the rotation", ok, &failures);
    assert_eq!(
        settled.bundle(),
        rotated.ca_cert,
        "the old CA is still trusted"
    );
    assert_eq!(settled.cert, rotated.cert);
    assert_eq!(served(&dg, settled.bundle()), der(&rotated.cert));

    // The chart before: a new CA and a caBundle of that CA alone, applied
    // while the files lag. The apiserver's new connections fail.
    let next = driftguard::certs::Authority::new("a new CA alone").unwrap();
    let (ok, failures, ()) = under_load(&plane, || {
        set_ca_bundle(&plane, &next.cert_pem);
        std::thread::sleep(KUBELET_LAG);
    });
    assert!(
        failures
            .iter()
            .any(|e| e.contains("failed calling webhook") && e.contains("x509")),
        "a caBundle that does not trust the served certificate failed no write \
         ({ok} went through): {failures:?}"
    );
    println!(
        "a new CA alone in the caBundle: {} of {} writes failed, e.g. {}",
        failures.len(),
        ok + failures.len(),
        failures[0].trim()
    );
    // Until the files catch up.
    let (cert, key) = next.leaf("driftguard", &["127.0.0.1".into()], &[]).unwrap();
    replace_files(&plane, &dg, &cert, &key);
    wait_for(
        "writes to go through again",
        Duration::from_secs(30),
        || {
            let out = plane.kubectl(
                "alice",
                &[
                    "-n",
                    "production",
                    "patch",
                    "configmap/counter",
                    "--type=merge",
                    "-p",
                    r#"{"data":{"counter":"again"}}"#,
                ],
            );
            if out.ok { Ok(()) } else { Err(out.to_string()) }
        },
    );
}
