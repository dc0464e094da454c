//! End to end on a real kube-apiserver: the serving certificate is renewed
//! while judged writes flow. The chart's cert-manager path issues it from a
//! CA that the webhook configurations trust (`inject-ca-from` the CA
//! Certificate), so a renewal changes the files driftguard reloads and never
//! the caBundle: no write may fail, and a new connection (the apiserver opens
//! one whenever its pooled ones close) verifies against the same caBundle.
//! A self-signed renewal (what the chart did before: each renewal its own CA)
//! fails that check until the caBundle catches up, which shows the test can
//! fail. (Writes over the apiserver's pooled connection would not show it:
//! TLS is checked once per connection.) The chart's generated path:
//! tests/e2e_generated_renewal.rs.

use driftguard_testkit::control_plane;
use driftguard_testkit::renewal;

use control_plane::*;
use renewal::*;

/// Replaces driftguard's serving pair with a new leaf, writing under load,
/// and returns (writes that went through, failures' stderr).
fn renew_under_load(
    plane: &ControlPlane,
    dg: &Driftguard,
    pair: (String, String),
) -> (usize, Vec<String>) {
    let (ok, failures, ()) = under_load(plane, || replace_files(plane, dg, &pair.0, &pair.1));
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
    wait_until_judged(&plane);

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
