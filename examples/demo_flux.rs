//! `scripts/demo.sh --flux`: the real Flux in the loop. A commit is synced,
//! a person's `kubectl edit` is denied, on call breaks glass and the hotfix
//! survives Flux's reconciles, and at expiry Git wins. Commands are echoed.

use driftguard_testkit::control_plane;
use driftguard_testkit::gitops;

use std::time::Duration;

use control_plane::*;
use gitops::*;

const POLICY: &str = "tests/data/gitops-policy.yaml";

const WEB: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: production}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: "nginx:1.27"}]}
"#;

const ONCALL: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: break-glass-oncall}
rules:
  - apiGroups: [kustomize.toolkit.fluxcd.io]
    resources: [kustomizations]
    verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: break-glass-oncall}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: break-glass-oncall}
subjects: [{kind: Group, name: sre-oncall, apiGroup: rbac.authorization.k8s.io}]
"#;

/// driftguard's break-glass sweeper lists and patches armed objects.
const SWEEPER: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: driftguard-sweeper}
rules: [{apiGroups: ["*"], resources: ["*"], verbs: [list, patch]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: driftguard-sweeper}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: driftguard-sweeper}
subjects: [{kind: User, name: driftguard}]
"#;

fn say(text: &str) {
    println!("\n### {text}");
}

/// Runs `kubectl ARGS` as `user` with extra environment, echoed like the plane's.
fn run(plane: &ControlPlane, user: &str, env: &[(&str, String)], args: &[&str]) {
    println!("$ kubectl {}   # as {user}", args.join(" "));
    let out = kubectl_command()
        .env("KUBECONFIG", plane.kubeconfig(user))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .args(args)
        .output()
        .expect("kubectl runs");
    print!("{}", String::from_utf8_lossy(&out.stdout));
    print!("{}", String::from_utf8_lossy(&out.stderr));
}

fn image(plane: &ControlPlane) -> String {
    get_json(plane, &["-n", "production", "deployment", "web"])
        .and_then(|d| field(&d, "/spec/template/spec/containers/0/image"))
        .unwrap_or_default()
}

fn main() {
    say(
        "building (or reusing) the real Flux controllers, then etcd, kube-apiserver and driftguard",
    );
    let tools = Tools::build();
    let mut plane = ControlPlane::start("demo-flux");
    plane.prepare(&["argocd", "flux-system", "production", "driftguard"]);
    plane.apply_admin(ONCALL);
    plane.apply_admin(SWEEPER);
    let repo = GitRepo::new(&plane, &tools);
    let commit = repo.commit("web", &[("apps/web.yaml", Some(WEB))]);
    let _flux = Flux::start(&plane, &tools);
    let policy = format!("{ROOT}/{POLICY}");
    let dg = Driftguard::start(
        &plane,
        &[
            &format!("--policy={policy}"),
            &plane.driftguard_kubeconfig_flag(),
            "--watch-flux",
            "--break-glass-sweep-interval=2s",
        ],
    );
    dg.register(&plane, &policy);
    let created = plane.kubectl(
        "admin",
        &[
            "-n",
            "driftguard",
            "create",
            "configmap",
            "driftguard-policy",
            &format!("--from-file=policy.yaml={policy}"),
        ],
    );
    assert!(created.ok, "{created}");
    plane.apply_admin(&format!(
        "apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\nmetadata: {{name: repo, namespace: flux-system}}\nspec: {{interval: 1m, url: '{}', ref: {{branch: main}}}}\n---\napiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {{name: apps, namespace: flux-system}}\nspec: {{interval: 1m, path: ./apps, prune: true, wait: false, sourceRef: {{kind: GitRepository, name: repo}}}}\n",
        repo.http_url
    ));

    say(&format!(
        "commit {} is synced by Flux, through driftguard",
        &commit[..8]
    ));
    Flux::reconcile(&plane, "flux-system", "apps", Some(&commit));
    plane.echo = true;
    plane.kubectl(
        "admin",
        &[
            "-n",
            "production",
            "get",
            "deployment/web",
            "-o",
            "jsonpath={.metadata.labels}{'\\n'}{.spec.template.spec.containers[0].image}{'\\n'}",
        ],
    );

    say(
        "alice runs `kubectl edit` (the editor swaps the image): denied, with what drifted and where to change it",
    );
    run(
        &plane,
        "alice",
        &[("KUBE_EDITOR", "sed -i s/nginx:1.27/nginx:by-hand/".into())],
        &["-n", "production", "edit", "deployment/web"],
    );

    say("sam, on call, breaks glass for 30 s: Flux is paused for this object in the same write");
    let bin = plane.dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(
        format!("{ROOT}/target/release/kubectl-driftguard"),
        bin.join("kubectl-driftguard"),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    run(
        &plane,
        "sam",
        &[("PATH", path)],
        &[
            "driftguard",
            "break-glass",
            "deployment/web",
            "-n",
            "production",
            "--reason",
            "INC-7 checkout down",
            "--for",
            "30s",
        ],
    );
    plane.kubectl(
        "sam",
        &[
            "-n",
            "production",
            "set",
            "image",
            "deployment/web",
            "web=nginx:1.27-hotfix",
        ],
    );
    plane.echo = false;

    say("Flux reconciles twice: the hotfix holds");
    for _ in 0..2 {
        Flux::reconcile(&plane, "flux-system", "apps", None);
        println!("image after a reconcile: {}", image(&plane));
    }

    say(
        "at expiry driftguard ends the break-glass and lifts the pause; Flux's next reconcile restores Git",
    );
    eventually(
        "the break-glass to be swept",
        Duration::from_secs(90),
        || {
            let d = get_json(&plane, &["-n", "production", "deployment", "web"]).ok_or("gone")?;
            match field(&d, "/metadata/annotations/driftguard.io~1break-glass") {
                None => Ok(()),
                Some(_) => Err("still armed".to_owned()),
            }
        },
    );
    Flux::reconcile(&plane, "flux-system", "apps", None);
    println!("image after expiry and a reconcile: {}", image(&plane));
    say("done; everything is torn down");
}
