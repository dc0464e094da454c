//! End to end on a real kube-apiserver configured to authenticate to its
//! webhooks: an AdmissionConfiguration whose kubeconfig presents a client
//! certificate named `kube-apiserver-webhooks` to `127.0.0.1:PORT`, and
//! driftguard serving with `--client-ca` (the plane's CA, which also signs
//! every user's certificate) and `--client-name=kube-apiserver-webhooks`.
//! kubectl writes are judged as usual; a forged review posted straight to
//! driftguard, without a certificate or with alice's (same CA, another
//! name), is refused in the handshake and leaves no trace: no Event, no audit
//! line, no break-glass count, no decision counted. The same review sent with
//! the apiserver's certificate does all of that, which shows the test can
//! fail (and without `--client-name`, alice's certificate would get in).
//! Last, a kubeconfig user for another address is not presented: the
//! apiserver matches users by the webhook's `host:port`.

use driftguard_testkit::control_plane;

use std::time::Duration;

use control_plane::*;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};

const APISERVER_CLIENT: &str = "kube-apiserver-webhooks";
const SETTINGS: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: production
  annotations: {argocd.argoproj.io/tracking-id: "myapp:/ConfigMap:production/settings"}
data: {level: info}
"#;
/// The user the forged reviews frame.
const FRAMED: &str = "bob-framed";

#[test]
fn only_the_apiserver_may_ask() {
    let mut plane = ControlPlane::start("client-auth");
    plane.prepare(&["production", "argocd"]);
    let policy = format!("{ROOT}/tests/data/e2e-policy.yaml");
    let dg = Driftguard::start(
        &plane,
        &[
            &format!("--policy={policy}"),
            &format!("--argocd-application={ROOT}/tests/data/seed/argocd-application.yaml"),
            &plane.driftguard_kubeconfig_flag(),
            &format!("--client-ca={}", plane.dir.join("ca.crt").display()),
            &format!("--client-name={APISERVER_CLIENT}"),
            // The policy allows break-glass, which needs the sweeper; it
            // never comes due here. Its records are kept in `default`, which
            // the main webhooks leave out.
            "--break-glass-sweep-interval=1h",
        ],
    );
    plane.present_client_certificate(&format!("127.0.0.1:{}", dg.port), APISERVER_CLIENT);
    Driftguard::register_with(
        &plane,
        &policy,
        &format!("https://127.0.0.1:{}", dg.port),
        &["--exclude-namespace=default"],
    );
    let out = plane.kubectl_as_stdin(ARGO, &["apply", "-f", "-"], Some(MYAPP_DEPLOYMENT));
    assert!(out.ok, "Argo CD's apply, judged through client auth: {out}");
    plane.wait_until_webhook_denies_drift();

    // kubectl writes are judged normally: alice's drift (on a ConfigMap, so
    // that the Deployment's DriftBlocked Event below is not folded into it)
    // is denied, her replica change (ignored by the Application) allowed.
    let out = plane.kubectl_as_stdin(ARGO, &["apply", "-f", "-"], Some(SETTINGS));
    assert!(out.ok, "{out}");
    let out = plane.kubectl(
        "alice",
        &[
            "-n",
            "production",
            "patch",
            "configmap/settings",
            "-p",
            r#"{"data":{"level":"debug"}}"#,
        ],
    );
    assert!(
        !out.ok && out.stderr.contains("driftguard"),
        "alice's drift: {out}"
    );
    let out = plane.kubectl(
        "alice",
        &[
            "-n",
            "production",
            "patch",
            "deployment/myapp",
            "-p",
            r#"{"spec":{"replicas":3}}"#,
        ],
    );
    assert!(out.ok, "alice's replica change: {out}");

    let reviews = forged_reviews(&plane);
    let before = Counts::read(&dg);
    assert!(before.requests > 0.0, "the kubectl writes were counted");

    // Forged: no certificate, then alice's (the plane's CA, another name).
    let alice = (
        std::fs::read_to_string(plane.dir.join("alice.crt")).unwrap(),
        std::fs::read_to_string(plane.dir.join("alice.key")).unwrap(),
    );
    for review in &reviews {
        for identity in [None, Some(&alice)] {
            let sent = post(&plane, dg.port, identity, review);
            assert!(
                sent.is_err(),
                "a forged review from {:?} was answered: {sent:?}",
                identity.map(|_| "alice")
            );
        }
    }
    let refused = metric(&dg, "driftguard_clients_refused_total");
    assert!(
        refused.contains("reason=\"no_certificate\"")
            && refused.contains("reason=\"name_not_allowed\""),
        "refusals counted by reason: {refused}"
    );
    assert!(
        dg.proc.stderr_text().contains("refused a webhook client"),
        "a log line for the refused client"
    );
    // No trace, also not a moment later (Events are written in the background).
    holds_for(
        "no side effect of a forged review",
        Duration::from_secs(3),
        || {
            let now = Counts::read(&dg);
            if now != before {
                return Err(format!("counts moved: {before:?} -> {now:?}"));
            }
            if let Some(r) = dg.audit().iter().find(|r| r.to_string().contains(FRAMED)) {
                return Err(format!("audited: {r}"));
            }
            let events = framing_events(&plane);
            if !events.is_empty() {
                return Err(format!("Events: {events}"));
            }
            Ok(())
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));

    // The same reviews with the apiserver's certificate are judged, with
    // every side effect the forged ones would have had.
    let apiserver = (
        std::fs::read_to_string(plane.dir.join("webhook-client.crt")).unwrap(),
        std::fs::read_to_string(plane.dir.join("webhook-client.key")).unwrap(),
    );
    for review in &reviews {
        let answer = post(&plane, dg.port, Some(&apiserver), review)
            .unwrap_or_else(|e| panic!("with the apiserver's certificate: {e}"));
        assert_eq!(answer["response"]["uid"], review["request"]["uid"]);
    }
    let after = Counts::read(&dg);
    assert_eq!(after.break_glass, before.break_glass + 1.0, "{after:?}");
    assert_eq!(after.requests, before.requests + 2.0, "{after:?}");
    assert!(dg.audit().iter().any(|r| r.to_string().contains(FRAMED)));
    wait_for(
        "the Events the control reviews raise",
        Duration::from_secs(10),
        || {
            let events = framing_events(&plane);
            if events.contains("BreakGlassUsed") && events.contains("DriftBlocked") {
                Ok(())
            } else {
                Err(events)
            }
        },
    );
}

/// Two reviews framing [`FRAMED`]: a break-glass update of production/myapp
/// (allowed, flagged) and a plain drift of it (denied).
fn forged_reviews(plane: &ControlPlane) -> Vec<Value> {
    let out = plane.kubectl(
        "admin",
        &["-n", "production", "get", "deployment/myapp", "-o", "json"],
    );
    assert!(out.ok, "{out}");
    let old: Value = serde_json::from_str(&out.stdout).unwrap();
    let soon = (jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1)).to_string();
    let review = |uid: &str, break_glass: bool| {
        let mut object = old.clone();
        object["spec"]["template"]["spec"]["containers"][0]["image"] = json!("evil:latest");
        if break_glass {
            let annotations = &mut object["metadata"]["annotations"];
            annotations["driftguard.io/break-glass"] = json!("framed");
            annotations["driftguard.io/break-glass-expires"] = json!(soon);
        }
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
                "requestKind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                "requestResource": {"group": "apps", "version": "v1", "resource": "deployments"},
                "name": "myapp",
                "namespace": "production",
                "operation": "UPDATE",
                "userInfo": {"username": FRAMED, "groups": ["sre-oncall", "system:authenticated"]},
                "object": object,
                "oldObject": old,
                "dryRun": false,
                "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"}
            }
        })
    };
    vec![
        review("00000000-0000-0000-0000-0000000000b1", true),
        review("00000000-0000-0000-0000-0000000000d1", false),
    ]
}

/// Posts `review` to /validate, with a client certificate or without.
fn post(
    plane: &ControlPlane,
    port: u16,
    identity: Option<&(String, String)>,
    review: &Value,
) -> Result<Value, String> {
    let ca = std::fs::read(plane.dir.join("ca.crt")).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(&ca).unwrap())
        .unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(cert.as_bytes())
                    .collect::<Result<_, _>>()
                    .unwrap(),
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(config)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let url = format!("https://127.0.0.1:{port}/validate");
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let resp = client
            .post(url)
            .json(review)
            .send()
            .await
            .map_err(|e| format!("{e:?}"))?;
        let status = resp.status();
        let body: Value = resp.json().await.map_err(|e| e.to_string())?;
        if status.is_success() {
            Ok(body)
        } else {
            Err(format!("{status}: {body}"))
        }
    })
}

/// The counters a review moves.
#[derive(Debug, PartialEq)]
struct Counts {
    requests: f64,
    break_glass: f64,
}

impl Counts {
    fn read(dg: &Driftguard) -> Counts {
        Counts {
            // Not CREATEs: the break-glass record's own create reaches the
            // creates webhook, which every namespace is sent to.
            requests: sum(&metric(dg, "driftguard_requests_total")
                .lines()
                .filter(|l| !l.contains("operation=\"CREATE\""))
                .map(|l| format!("{l}\n"))
                .collect::<String>()),
            break_glass: sum(&metric(dg, "driftguard_break_glass_uses_total")),
        }
    }
}

/// The sample lines of `name` on /metrics.
fn metric(dg: &Driftguard, name: &str) -> String {
    let (status, body) = probe_get(dg.probe, "/metrics");
    assert_eq!(status, 200);
    body.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn sum(lines: &str) -> f64 {
    lines
        .lines()
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Events in production whose note names [`FRAMED`]: `reason note` lines.
fn framing_events(plane: &ControlPlane) -> String {
    let out = plane.kubectl(
        "admin",
        &[
            "-n",
            "production",
            "get",
            "events.events.k8s.io",
            "-o",
            "jsonpath={range .items[*]}{.reason} {.note}{\"\\n\"}{end}",
        ],
    );
    assert!(out.ok, "{out}");
    out.stdout
        .lines()
        .filter(|l| l.contains(FRAMED))
        .map(|l| format!("{l}\n"))
        .collect()
}
