//! What the renewal tests share: a ConfigMap whose counter alice may write
//! (driftguard judges and allows each write), writes in a loop while a
//! certificate changes, and the TLS connection the apiserver would open next.
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::CertificateDer;

use crate::control_plane::{ControlPlane, Driftguard, probe_get, trusting};

/// A ConfigMap Argo CD manages, whose `data.counter` the policy ignores:
/// alice's writes to it are sent to driftguard and allowed.
pub const COUNTER: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: counter
  namespace: production
  annotations: {argocd.argoproj.io/tracking-id: "myapp:/ConfigMap:production/counter"}
data: {counter: "0"}
"#;

pub const POLICY: &str = "ignoreDifferences:\n  - kind: ConfigMap\n    name: counter\n    jsonPointers: [/data/counter]\n";

/// Writes from alice, one after another, until `stop`: the number that went
/// through; each failure's stderr goes to `log`.
pub fn write_until(plane: &ControlPlane, stop: &AtomicBool, log: &Mutex<Vec<String>>) -> usize {
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

/// Runs `during` while alice writes (from 2 s before it to 3 s after):
/// (writes that went through, failures' stderr, what `during` returned).
pub fn under_load<T>(plane: &ControlPlane, during: impl FnOnce() -> T) -> (usize, Vec<String>, T) {
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(Mutex::new(Vec::new()));
    /// Stops the writer also when `during` panics (the scope waits for it).
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let (ok, value) = std::thread::scope(|s| {
        let writer = s.spawn(|| write_until(plane, &stop, &failures));
        let stopper = StopOnDrop(&stop);
        // The load's shape, not waits: writes before and after `during`.
        std::thread::sleep(Duration::from_secs(2));
        let value = during();
        std::thread::sleep(Duration::from_secs(3));
        drop(stopper);
        (writer.join().unwrap(), value)
    });
    let failures = failures.lock().unwrap().clone();
    (ok, failures, value)
}

/// Successful certificate reloads so far.
pub fn reloads(dg: &Driftguard) -> f64 {
    let (_, body) = probe_get(dg.probe, "/metrics");
    body.lines()
        .find(|l| l.starts_with("driftguard_certificate_reloads_total{result=\"success\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Writes a new serving pair to the files `dg` reads (plane.dir's
/// driftguard.crt and .key) and waits until it reloaded them.
pub fn replace_files(plane: &ControlPlane, dg: &Driftguard, cert: &str, key: &str) {
    let before = reloads(dg);
    std::fs::write(plane.dir.join("driftguard.crt"), cert).unwrap();
    driftguard::certs::write_private(&plane.dir.join("driftguard.key"), key).unwrap();
    crate::control_plane::wait_for(
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
}

/// A new TLS connection to driftguard on 127.0.0.1:`port` that trusts only
/// `ca_pem` (a caBundle, every certificate of it), as the apiserver's next
/// one would: the certificate served, or `Err` when the handshake or the
/// request fails.
pub fn new_connection(port: u16, ca_pem: &str) -> Result<CertificateDer<'static>, String> {
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
    if !reply.starts_with(b"HTTP/1.1") {
        return Err(format!(
            "no HTTP reply: {:?}",
            String::from_utf8_lossy(&reply)
        ));
    }
    tls.conn
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|leaf| leaf.clone().into_owned())
        .ok_or_else(|| "no certificate served".to_owned())
}

/// Waits until alice's writes to production reach driftguard (a labelling
/// dry run is denied by it).
pub fn wait_until_judged(plane: &ControlPlane) {
    crate::control_plane::wait_for(
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
}
