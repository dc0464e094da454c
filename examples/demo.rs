//! `scripts/demo.sh`: a real control plane, driftguard registered as a webhook,
//! and what a person sees in kubectl: a denied `kubectl set image`, a dry-run
//! warning and a break-glass. Commands are echoed as they run.

use driftguard_testkit::control_plane;

use control_plane::*;

const APP: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: myapp
  namespace: production
  annotations: {argocd.argoproj.io/tracking-id: "myapp:apps/Deployment:production/myapp"}
spec:
  replicas: 2
  selector: {matchLabels: {app: myapp}}
  template:
    metadata: {labels: {app: myapp}}
    spec: {containers: [{name: app, image: "nginx:1.27"}]}
"#;

fn say(text: &str) {
    println!("\n### {text}");
}

fn main() {
    say("starting etcd and kube-apiserver (built from the Go module proxy), then driftguard");
    let mut plane = ControlPlane::start("demo");
    plane.add_user("driftguard", &[]);
    assert!(
        plane
            .kubectl("admin", &["create", "namespace", "argocd"])
            .ok
    );
    plane.apply_admin(RBAC);
    plane.apply_admin(CONTROLLER_RBAC);
    plane.apply_admin(DRIFTGUARD_RBAC);
    assert!(
        plane
            .kubectl("admin", &["create", "namespace", "production"])
            .ok
    );
    let dg = Driftguard::start(
        &plane,
        &[
            &format!("--policy={ROOT}/tests/data/e2e-policy.yaml"),
            &format!("--argocd-application={ROOT}/tests/data/seed/argocd-application.yaml"),
            &format!("--kubeconfig={}", plane.kubeconfig("driftguard").display()),
        ],
    );
    dg.register(&plane, &format!("{ROOT}/tests/data/e2e-policy.yaml"));
    let out = plane.kubectl_as_stdin(ARGO, &["apply", "-f", "-"], Some(APP));
    assert!(out.ok, "{out}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while plane
        .kubectl(
            "alice",
            &[
                "-n",
                "production",
                "label",
                "deployment/myapp",
                "x=y",
                "--dry-run=server",
            ],
        )
        .ok
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the webhook never answered"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    plane.echo = true;

    say("Argo CD's application controller created production/myapp with its tracking annotation");
    plane.kubectl(
        "admin",
        &[
            "-n",
            "production",
            "get",
            "deployment/myapp",
            "-o",
            "jsonpath={.metadata.annotations}",
        ],
    );

    say("alice edits it by hand: denied, with the drifted path and where to change it");
    plane.kubectl(
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

    say(
        "server-side dry runs: scaling passes (replicas are ignored for Deployments), an annotation would be denied",
    );
    plane.kubectl(
        "alice",
        &[
            "-n",
            "production",
            "scale",
            "deployment/myapp",
            "--replicas=5",
            "--dry-run=server",
        ],
    );
    plane.kubectl(
        "alice",
        &[
            "-n",
            "production",
            "annotate",
            "deployment/myapp",
            "owner=alice",
            "--dry-run=server",
        ],
    );

    say("sam, on call, breaks glass for one hour: allowed, loudly, and audited");
    let expires = (jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1)).to_string();
    let patch = format!(
        r#"{{"metadata":{{"annotations":{{"driftguard.io/break-glass":"INC-7 checkout down","driftguard.io/break-glass-expires":"{expires}"}}}},"spec":{{"template":{{"spec":{{"containers":[{{"name":"app","image":"nginx:1.28-hotfix"}}]}}}}}}}}"#
    );
    plane.kubectl(
        "sam",
        &[
            "-n",
            "production",
            "patch",
            "deployment/myapp",
            "-p",
            &patch,
        ],
    );
    say("driftguard's audit record of that write (stdout of driftguard serve)");
    if let Some(record) = dg
        .audit()
        .into_iter()
        .rev()
        .find(|r| !r["breakGlass"].is_null())
    {
        println!("{}", serde_json::to_string_pretty(&record).unwrap());
    }
    say("done; everything is torn down");
}
