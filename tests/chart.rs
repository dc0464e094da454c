//! The Helm chart, with helm v3.22.0 built from the Go module proxy: lint,
//! render every values combination, have the real apiserver accept each
//! rendering (`kubectl apply --dry-run=server`), refuse wrong values with a clear
//! message, match `driftguard register`'s rules, and run the end-to-end
//! scenarios with the webhooks and policy the chart renders in url mode.

#[path = "support/control_plane.rs"]
mod control_plane;

use std::path::PathBuf;
use std::process::Command;

use control_plane::*;
use serde_json::Value;

fn helm() -> PathBuf {
    let out = Command::new(format!("{ROOT}/scripts/build-tools.sh"))
        .arg("helm")
        .output()
        .unwrap();
    assert!(out.status.success(), "building helm failed");
    PathBuf::from(
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .lines()
            .last()
            .unwrap(),
    )
}

struct Rendered {
    ok: bool,
    yaml: String,
    stderr: String,
}

fn template(helm: &PathBuf, sets: &[&str], extra: &[&str]) -> Rendered {
    let mut cmd = Command::new(helm);
    cmd.args([
        "template",
        "dg",
        &format!("{ROOT}/charts/driftguard"),
        "--namespace",
        "driftguard",
    ]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    cmd.args(extra);
    let out = cmd.output().unwrap();
    Rendered {
        ok: out.status.success(),
        yaml: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .unwrap()
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} rendered"))
}

fn rules_of(doc: &Value) -> Vec<(Vec<String>, Vec<String>)> {
    let strings = |v: &Value| {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    doc["webhooks"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (strings(&r["apiGroups"]), strings(&r["resources"])))
        .collect()
}

#[test]
fn the_chart_lints_renders_and_is_accepted_by_the_apiserver() {
    let helm = helm();
    let out = Command::new(&helm)
        .args(["lint", &format!("{ROOT}/charts/driftguard")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm lint: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    let mut plane = ControlPlane::start("chart");
    plane.add_user("driftguard", &[]);
    for ns in ["driftguard", "argocd"] {
        assert!(plane.kubectl("admin", &["create", "namespace", ns]).ok);
    }
    for crds in ["cert-manager", "monitoring"] {
        let out = plane.kubectl(
            "admin",
            &[
                "apply",
                "-f",
                &format!("{ROOT}/tests/data/crds/{crds}.yaml"),
            ],
        );
        assert!(out.ok, "{out}");
    }
    let out = plane.kubectl(
        "admin",
        &[
            "wait",
            "--for=condition=Established",
            "crd",
            "--all",
            "--timeout=30s",
        ],
    );
    assert!(out.ok, "{out}");

    let pem = std::fs::read_to_string(plane.dir.join("ca.crt")).unwrap();
    let (cert, key) = plane
        .ca
        .leaf(
            "dg-driftguard.driftguard.svc",
            &["dg-driftguard.driftguard.svc".into()],
            &[],
        )
        .unwrap();
    let provided = [
        format!("certificates.provided.cert={cert}"),
        format!("certificates.provided.key={key}"),
        format!("certificates.provided.ca={pem}"),
    ];
    let provided: Vec<&str> = provided.iter().map(String::as_str).collect();
    let combinations: Vec<(&str, Vec<&str>)> = vec![
        ("generated CA", vec![]),
        (
            "cert-manager",
            vec!["certificates.certManager.enabled=true"],
        ),
        ("user PEMs", provided.clone()),
        ("warn mode", vec!["policy.mode=warn"]),
        ("url mode", vec!["webhook.url=https://127.0.0.1:8443"]),
        (
            "monitoring",
            vec![
                "serviceMonitor.enabled=true",
                "prometheusRule.enabled=true",
                "grafanaDashboard.enabled=true",
            ],
        ),
        ("flux", vec!["watch.flux=true"]),
    ];
    for (name, sets) in &combinations {
        let rendered = template(&helm, sets, &[]);
        assert!(rendered.ok, "{name}: {}", rendered.stderr);
        let out = plane.kubectl_stdin(
            "admin",
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&rendered.yaml),
        );
        assert!(out.ok, "{name}: the apiserver refused the rendering: {out}");
        let docs = documents(&rendered.yaml);
        let validating = find(&docs, "ValidatingWebhookConfiguration");
        let hook = &validating["webhooks"][0];
        assert_eq!(hook["failurePolicy"], "Fail", "{name}");
        assert_eq!(hook["sideEffects"], "NoneOnDryRun", "{name}");
        assert_eq!(hook["matchPolicy"], "Equivalent", "{name}");
        assert_eq!(hook["timeoutSeconds"], 5, "{name}");
        let excluded = &hook["namespaceSelector"]["matchExpressions"][0]["values"];
        assert_eq!(
            excluded,
            &serde_json::json!(["kube-system", "driftguard"]),
            "{name}"
        );
        assert!(
            hook["matchConditions"][0]["expression"]
                .as_str()
                .unwrap()
                .contains("argocd-application-controller"),
            "{name}"
        );
        match *name {
            "cert-manager" => {
                find(&docs, "Certificate");
                assert_eq!(
                    validating["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
                    "driftguard/dg-driftguard"
                );
            }
            "generated CA" => {
                // One render, one pair: both webhooks trust the CA of the Secret.
                let secret = find(&docs, "Secret");
                assert_eq!(hook["clientConfig"]["caBundle"], secret["data"]["ca.crt"]);
                assert_eq!(
                    find(&docs, "MutatingWebhookConfiguration")["webhooks"][0]["clientConfig"]["caBundle"],
                    secret["data"]["ca.crt"]
                );
            }
            "url mode" => assert_eq!(
                hook["clientConfig"]["url"],
                "https://127.0.0.1:8443/validate"
            ),
            "warn mode" => assert!(
                find(&docs, "ConfigMap")["data"]["policy.yaml"]
                    .as_str()
                    .unwrap()
                    .contains("mode: warn")
            ),
            _ => {}
        }
    }

    // The chart's rules are driftguard register's rules.
    let out = Command::new(env!("CARGO_BIN_EXE_driftguard"))
        .args(["register", "--url=https://127.0.0.1:8443", "--dry-run"])
        .arg(format!(
            "--ca-bundle={}",
            plane.dir.join("ca.crt").display()
        ))
        .output()
        .unwrap();
    assert!(out.status.success());
    let registered = documents(&String::from_utf8(out.stdout).unwrap());
    let charted = documents(&template(&helm, &[], &[]).yaml);
    assert_eq!(
        rules_of(find(&charted, "ValidatingWebhookConfiguration")),
        rules_of(find(&registered, "ValidatingWebhookConfiguration"))
    );

    // Wrong values fail the install with a clear message.
    let kubeconfig = plane.kubeconfig("admin").display().to_string();
    for (set, needle) in [
        ("policy.mode=sometimes", "/policy/mode"),
        ("webhook.timeoutSeconds=-1", "/webhook/timeoutSeconds"),
        ("webhook.failurePolicy=Maybe", "/webhook/failurePolicy"),
    ] {
        let out = Command::new(&helm)
            .args([
                "install",
                "dg",
                &format!("{ROOT}/charts/driftguard"),
                "-n",
                "driftguard",
                "--dry-run=server",
                "--kubeconfig",
                &kubeconfig,
                "--set",
                set,
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(needle),
            "{set}: {err}"
        );
    }
    let mut both = provided.clone();
    both.push("certificates.certManager.enabled=true");
    let rendered = template(&helm, &both, &[]);
    assert!(
        !rendered.ok
            && rendered
                .stderr
                .contains("choose certManager.enabled or provided PEMs, not both"),
        "{}",
        rendered.stderr
    );
}

#[test]
fn end_to_end_with_the_charts_webhooks_and_policy_in_url_mode() {
    let helm = helm();
    let mut plane = ControlPlane::start("chart-e2e");
    plane.add_user("driftguard", &[]);
    for ns in ["driftguard", "argocd", "production"] {
        assert!(plane.kubectl("admin", &["create", "namespace", ns]).ok);
    }
    plane.apply_admin(RBAC);
    plane.apply_admin(CONTROLLER_RBAC);
    plane.apply_admin(DRIFTGUARD_RBAC);

    // driftguard runs outside the cluster with the policy the chart renders.
    let port = free_port();
    let pem = std::fs::read_to_string(plane.dir.join("ca.crt")).unwrap();
    let url = format!("webhook.url=https://127.0.0.1:{port}");
    let ca = format!("certificates.provided.ca={pem}");
    let (cert, key) = plane
        .ca
        .leaf("driftguard", &["127.0.0.1".into()], &[])
        .unwrap();
    let (cert_set, key_set) = (
        format!("certificates.provided.cert={cert}"),
        format!("certificates.provided.key={key}"),
    );
    let rendered = template(
        &helm,
        &[
            &url,
            &ca,
            &cert_set,
            &key_set,
            "policy.breakGlass.allowedGroups={sre-oncall}",
        ],
        &[],
    );
    assert!(rendered.ok, "{}", rendered.stderr);
    let docs = documents(&rendered.yaml);
    let policy = find(&docs, "ConfigMap")["data"]["policy.yaml"]
        .as_str()
        .unwrap()
        .to_owned();
    let policy_file = plane.dir.join("chart-policy.yaml");
    std::fs::write(&policy_file, policy).unwrap();
    let dg = Driftguard::start_on(
        &plane,
        port,
        &[
            &format!("--policy={}", policy_file.display()),
            &format!("--kubeconfig={}", plane.kubeconfig("driftguard").display()),
        ],
    );
    let webhooks: String = docs
        .iter()
        .filter(|d| {
            d["kind"]
                .as_str()
                .is_some_and(|k| k.ends_with("WebhookConfiguration"))
        })
        .map(|d| format!("---\n{}", serde_saphyr::to_string(d).unwrap()))
        .collect();
    plane.apply_admin(&webhooks);
    let app = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: myapp\n  namespace: production\n  annotations: {argocd.argoproj.io/tracking-id: \"myapp:apps/Deployment:production/myapp\"}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: myapp}}\n  template:\n    metadata: {labels: {app: myapp}}\n    spec: {containers: [{name: app, image: \"nginx:1.27\"}]}\n";
    let out = plane.kubectl_as_stdin(ARGO, &["apply", "-f", "-"], Some(app));
    assert!(out.ok, "{out}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let out = plane.kubectl(
            "alice",
            &[
                "-n",
                "production",
                "set",
                "image",
                "deployment/myapp",
                "app=nginx:1.28",
            ],
        );
        if !out.ok
            && out
                .stderr
                .contains("drifts from Git at /spec/template/spec/containers/0/image")
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the chart's webhook never denied: {out}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // The controller passes (matchConditions), a dry run warns, rollout restart is ignored, break-glass works for sam.
    assert!(
        plane
            .kubectl_as(
                ARGO,
                &[
                    "-n",
                    "production",
                    "set",
                    "image",
                    "deployment/myapp",
                    "app=nginx:1.28"
                ]
            )
            .ok
    );
    let out = plane.kubectl(
        "alice",
        &[
            "-n",
            "production",
            "annotate",
            "deployment/myapp",
            "x=y",
            "--dry-run=server",
        ],
    );
    assert!(out.stderr.contains("Warning: driftguard: dry run"), "{out}");
    let out = plane.kubectl(
        "alice",
        &["-n", "production", "rollout", "restart", "deployment/myapp"],
    );
    assert!(out.ok, "{out}");
    let expires = (jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1)).to_string();
    let out = plane.kubectl(
        "sam",
        &[
            "-n",
            "production",
            "annotate",
            "deployment/myapp",
            "driftguard.io/break-glass=INC-9",
            &format!("driftguard.io/break-glass-expires={expires}"),
        ],
    );
    assert!(out.ok && out.stderr.contains("BREAK-GLASS by sam"), "{out}");
    assert!(dg.audit().iter().any(|r| r["reason"] == "break-glass"));
}
