//! End to end on a real kube-apiserver: the serving certificate is renewed
//! while judged writes flow. The chart's cert-manager path issues it from a
//! CA that the webhook configurations trust (`inject-ca-from` the CA
//! Certificate), so a renewal changes the files driftguard reloads and never
//! the caBundle: no write may fail, and a new connection (the apiserver opens
//! one whenever its pooled ones close) verifies against the same caBundle.
//! A self-signed renewal (what the chart did before: each renewal its own CA)
//! fails that check until the caBundle catches up, which shows the test can
//! fail. (Writes over the apiserver's pooled connection would not show it:
//! TLS is checked once per connection.)

#[path = "support/control_plane.rs"]
mod control_plane;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use control_plane::*;

/// A ConfigMap Argo CD manages, whose `data.counter` the policy ignores:
/// alice's writes to it are sent to driftguard and allowed.
const COUNTER: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: counter
  namespace: production
  annotations: {argocd.argoproj.io/tracking-id: "myapp:/ConfigMap:production/counter"}
data: {counter: "0"}
"#;

const POLICY: &str = "ignoreDifferences:\n  - kind: ConfigMap\n    name: counter\n    jsonPointers: [/data/counter]\n";

/// Writes from alice, one after another, until `stop`: (ok, failures).
fn write_until(plane: &ControlPlane, stop: &AtomicBool, log: &Mutex<Vec<String>>) -> usize {
    let mut ok = 0;
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let patch = format!("{{\"data\":{{\"counter\":\"{n}\"}}}}");
        let out = plane.kubectl(
            "alice",
            &[
                "-n",
                "production",
                "patch",
                "configmap/counter",
                "--type=merge",
                "-p",
                &patch,
            ],
        );
        if out.ok {
            ok += 1;
        } else {
            log.lock().unwrap().push(out.stderr.clone());
        }
    }
    ok
}

fn reloads(dg: &Driftguard) -> f64 {
    let (_, body) = probe_get(dg.probe, "/metrics");
    body.lines()
        .find(|l| l.starts_with("driftguard_certificate_reloads_total{result=\"success\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// A new TLS connection to driftguard that trusts only `ca_pem` (the
/// caBundle), as the apiserver's next one would: `Err` when the handshake
/// or the request fails.
fn new_connection(port: u16, ca_pem: &str) -> Result<(), String> {
    let config = Arc::new(trusting(ca_pem.as_bytes()));
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(config, name).map_err(|e| e.to_string())?;
    let tcp = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: driftguard\r\nConnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut reply = Vec::new();
    let _ = tls.read_to_end(&mut reply);
    if reply.starts_with(b"HTTP/1.1") {
        Ok(())
    } else {
        Err(format!(
            "no HTTP reply: {:?}",
            String::from_utf8_lossy(&reply)
        ))
    }
}

/// Replaces driftguard's serving pair with a new leaf, writing under load,
/// and returns (writes that went through, failures' stderr).
fn renew_under_load(
    plane: &ControlPlane,
    dg: &Driftguard,
    pair: (String, String),
) -> (usize, Vec<String>) {
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let before = reloads(dg);
    let ok = std::thread::scope(|s| {
        let writer = s.spawn(|| write_until(plane, &stop, &failures));
        std::thread::sleep(Duration::from_secs(2));
        std::fs::write(plane.dir.join("driftguard.crt"), &pair.0).unwrap();
        driftguard::certs::write_private(&plane.dir.join("driftguard.key"), &pair.1).unwrap();
        wait_for(
            "driftguard to reload its certificate",
            Duration::from_secs(20),
            || {
                if reloads(dg) > before {
                    Ok(())
                } else {
                    Err(dg.proc.stderr_tail(5))
                }
            },
        );
        std::thread::sleep(Duration::from_secs(3));
        stop.store(true, Ordering::SeqCst);
        writer.join().unwrap()
    });
    let failures = failures.lock().unwrap().clone();
    (ok, failures)
}

#[test]
fn renewing_the_serving_certificate_under_load_fails_no_write() {
    let mut plane = ControlPlane::start("renewal");
    plane.prepare(&["production", "argocd"]);
    let policy = plane.dir.join("renewal-policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let dg = Driftguard::start(
        &plane,
        &[
            &format!("--policy={}", policy.display()),
            "--reload-interval=500ms",
        ],
    );
    dg.register(&plane, &policy.display().to_string());
    let out = plane.kubectl_as_stdin(ARGO, &["apply", "-f", "-"], Some(COUNTER));
    assert!(out.ok, "{out}");
    wait_for(
        "the webhook to judge alice's writes",
        Duration::from_secs(30),
        || {
            let out = plane.kubectl(
                "alice",
                &[
                    "-n",
                    "production",
                    "label",
                    "configmap/counter",
                    "x=1",
                    "--dry-run=server",
                ],
            );
            if !out.ok && out.stderr.contains("driftguard") {
                Ok(())
            } else {
                Err(out.to_string())
            }
        },
    );

    // A renewal from the same CA: nothing the apiserver trusts changes.
    let names = vec!["127.0.0.1".to_owned()];
    let renewed = plane.ca.leaf("driftguard", &names, &[]).unwrap();
    let (ok, failures) = renew_under_load(&plane, &dg, renewed);
    assert!(ok > 5, "too few writes to say anything: {ok}");
    new_connection(dg.port, &plane.ca.cert_pem)
        .expect("a new connection verifies against the unchanged caBundle");
    assert!(
        failures.is_empty(),
        "{} of {} writes failed across a renewal from the same CA: {:?}",
        failures.len(),
        ok + failures.len(),
        &failures[..failures.len().min(3)]
    );
    println!("renewal from the same CA: {ok} writes, none failed");

    // A self-signed renewal (a new CA each time), the caBundle not yet
    // updated: the apiserver's next connection fails.
    let other = driftguard::certs::Authority::new("a self-signed renewal").unwrap();
    let (ok, failures) =
        renew_under_load(&plane, &dg, other.leaf("driftguard", &names, &[]).unwrap());
    let refused = new_connection(dg.port, &plane.ca.cert_pem);
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.contains("UnknownIssuer") || e.contains("certificate")),
        "a certificate the caBundle does not trust was accepted: {refused:?}"
    );
    println!(
        "self-signed renewal: {ok} writes over pooled connections ({} failed); a new connection: {}",
        failures.len(),
        refused.unwrap_err()
    );
}
