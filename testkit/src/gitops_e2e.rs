//! What the end-to-end tests with the real GitOps tools share
//! (`tests/e2e_gitops.rs`, `tests/e2e_argocd_modes.rs`, `tests/e2e_appset.rs`): their policy and
//! identities, a control plane with kube-controller-manager and a Git
//! repository, the seed's Argo CD Application, waiting for a sync, and the
//! `kubectl driftguard` plugin as on call runs it.
use std::time::Duration;

use crate::control_plane::*;
use crate::gitops::*;

pub const POLICY: &str = "tests/data/gitops-policy.yaml";

/// A trusted identity of the default policy (kube-system service accounts):
/// it plays "something changed the object" for the tools to heal.
pub const OPERATOR: &str = "system:serviceaccount:kube-system:ops-bot";

/// driftguard's RBAC beyond the e2e minimum: the break-glass expiry sweep
/// lists and patches armed objects and the Argo CD Applications it paused,
/// and `--watch-argocd` reads AppProjects (as the chart grants).
pub const DRIFTGUARD_EXTRA_RBAC: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: driftguard-gitops}
rules:
  - apiGroups: ["*"]
    resources: ["*"]
    verbs: [list, watch, patch]
  - apiGroups: [argoproj.io]
    resources: [applications, appprojects]
    verbs: [get, list, watch, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: driftguard-gitops}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: driftguard-gitops}
subjects: [{kind: User, name: driftguard}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: ops-bot}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: workload-editor}
subjects: [{kind: ServiceAccount, name: ops-bot, namespace: kube-system}]
"#;

/// On call may read the policy and pause Argo CD Applications (what
/// `kubectl driftguard break-glass` does for an Argo CD-managed object).
pub const ONCALL_RBAC: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: break-glass-oncall}
rules:
  - apiGroups: [argoproj.io]
    resources: [applications]
    verbs: [get, list, patch]
  - apiGroups: [kustomize.toolkit.fluxcd.io]
    resources: [kustomizations]
    verbs: [get, list]
  # A generated Application's ApplicationSet: does it keep the pause (docs/break-glass.md)?
  - apiGroups: [argoproj.io]
    resources: [applicationsets]
    verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: break-glass-oncall}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: break-glass-oncall}
subjects: [{kind: Group, name: sre-oncall, apiGroup: rbac.authorization.k8s.io}]
"#;

/// The policy where the chart puts it (ConfigMap driftguard/driftguard-policy,
/// which the plugin reads) and the plugin on a PATH of its own.
pub fn install_plugin(plane: &ControlPlane) -> std::path::PathBuf {
    plane.create_namespaces(&["driftguard"]);
    ok(
        plane.kubectl(
            "admin",
            &[
                "-n",
                "driftguard",
                "create",
                "configmap",
                "driftguard-policy",
                &format!("--from-file=policy.yaml={ROOT}/{POLICY}"),
            ],
        ),
        "the policy ConfigMap",
    );
    plane.apply_admin(ONCALL_RBAC);
    let bin = plane.dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(
        cargo_bin("kubectl-driftguard")
            .expect("kubectl-driftguard beside the test executable (cargo test builds it)"),
        bin.join("kubectl-driftguard"),
    )
    .unwrap();
    bin
}

/// `kubectl driftguard ARGS` as `user`, the plugin found on PATH by kubectl.
pub fn plugin(plane: &ControlPlane, bin: &std::path::Path, user: &str, args: &[&str]) -> Kubectl {
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    kubectl_command()
        .env("PATH", path)
        .env("KUBECONFIG", plane.kubeconfig(user))
        .arg("driftguard")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("kubectl runs")
        .into()
}

/// Waits until the sweeper has ended the break-glass on `ns/deploy`: its
/// annotations and label are gone once it expired.
pub fn wait_break_glass_ended(plane: &ControlPlane, ns: &str, deploy: &str) {
    eventually(
        "the break-glass to expire and be swept",
        Duration::from_secs(120),
        || {
            let d = get_json(plane, &["-n", ns, "deployment", deploy]).ok_or("gone")?;
            let annotations = d["metadata"]["annotations"].clone();
            let labels = d["metadata"]["labels"].clone();
            let left: Vec<&str> = [
                "driftguard.io/break-glass",
                "driftguard.io/break-glass-expires",
                "driftguard.io/break-glass-paused",
                "kustomize.toolkit.fluxcd.io/reconcile",
            ]
            .into_iter()
            .filter(|k| annotations.get(*k).is_some())
            .collect();
            if left.is_empty() && labels.get("driftguard.io/break-glass").is_none() {
                Ok(())
            } else {
                Err(format!("still there: {left:?} labels={labels}"))
            }
        },
    );
}

/// A denial as a person sees it.
pub fn denied(out: &Kubectl, needle: &str) -> Result<(), String> {
    if !out.ok && out.stderr.contains("denied") && out.stderr.contains(needle) {
        Ok(())
    } else {
        Err(format!("expected a denial naming {needle:?}: {out}"))
    }
}

/// The tools built, a control plane with `namespaces` and the e2e RBAC plus
/// driftguard's, kube-controller-manager running, and an empty Git repository.
pub fn start(name: &str, namespaces: &[&str]) -> (Tools, ControlPlane, Proc, GitRepo) {
    let tools = Tools::build();
    let mut plane = ControlPlane::start(name);
    plane.prepare(namespaces);
    plane.apply_admin(DRIFTGUARD_EXTRA_RBAC);
    let kcm = start_controller_manager(&plane, &tools);
    let repo = GitRepo::new(&plane, &tools);
    (tools, plane, kcm, repo)
}

pub fn image(plane: &ControlPlane, ns: &str, deploy: &str) -> Option<String> {
    get_json(plane, &["-n", ns, "deployment", deploy])
        .and_then(|d| field(&d, "/spec/template/spec/containers/0/image"))
}

/// The seed's Application, pointed at the local repository.
pub fn application(name: &str, project: &str, url: &str, path: &str, namespace: &str) -> String {
    format!(
        r#"apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {{name: {name}, namespace: argocd}}
spec:
  project: {project}
  source: {{repoURL: '{url}', targetRevision: main, path: {path}}}
  destination: {{server: https://kubernetes.default.svc, namespace: {namespace}}}
  syncPolicy:
    automated: {{prune: true, selfHeal: true}}
    syncOptions: [RespectIgnoreDifferences=true]
  ignoreDifferences:
    - group: apps
      kind: Deployment
      jsonPointers: [/spec/replicas]
    - group: ""
      kind: Pod
      jqPathExpressions: ['.spec.containers[] | select(.name == "istio-proxy")']
    - group: ""
      kind: Service
      jsonPointers: [/metadata/annotations]
    - group: batch
      kind: CronJob
      jsonPointers: [/spec/schedule]
"#
    )
}

/// Waits until `argo`'s Application `name` is Synced and Healthy-or-Progressing at `revision`,
/// playing the kubelet for hook Jobs: their Pods are marked Succeeded.
pub fn wait_synced(
    plane: &ControlPlane,
    argo: &ArgoCd,
    name: &str,
    revision: &str,
) -> serde_json::Value {
    eventually(
        &format!("Application {}/{name} synced at {revision}", argo.namespace),
        Duration::from_secs(180),
        || {
            finish_hook_pods(plane);
            let app = get_json(plane, &["-n", &argo.namespace, "application", name])
                .ok_or("no Application")?;
            let sync = field(&app, "/status/sync/status").unwrap_or_default();
            let at = field(&app, "/status/sync/revision").unwrap_or_default();
            let op = field(&app, "/status/operationState/phase").unwrap_or_default();
            if sync == "Synced" && at == revision && op == "Succeeded" {
                Ok(app)
            } else {
                Err(format!(
                    "sync={sync} revision={at} operation={op} message={:?}\n{}",
                    field(&app, "/status/operationState/message"),
                    argo.logs()
                ))
            }
        },
    )
}

/// No kubelet runs here: Pods of hook Jobs are marked Succeeded by admin, so
/// the Job controller completes the Job and Argo CD's hook phase moves on.
pub fn finish_hook_pods(plane: &ControlPlane) {
    let pods = plane.kubectl(
        "admin",
        &[
            "get",
            "pods",
            "-A",
            "-l",
            "batch.kubernetes.io/job-name",
            "-o",
            "json",
        ],
    );
    let Ok(list) = serde_json::from_str::<serde_json::Value>(&pods.stdout) else {
        return;
    };
    for pod in list["items"].as_array().into_iter().flatten() {
        if pod["status"]["phase"] != "Pending" {
            continue;
        }
        let (ns, name) = (
            pod["metadata"]["namespace"].as_str().unwrap_or_default(),
            pod["metadata"]["name"].as_str().unwrap_or_default(),
        );
        let now = "2026-01-01T00:00:00Z";
        let status = serde_json::json!({"status": {
            "phase": "Succeeded",
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
            "containerStatuses": [{"name": "migrate", "ready": false, "restartCount": 0, "image": "busybox:1.36", "imageID": "",
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}}]}});
        let _ = plane.kubectl(
            "admin",
            &[
                "-n",
                ns,
                "patch",
                "pod",
                name,
                "--subresource=status",
                "--type=merge",
                "-p",
                &status.to_string(),
            ],
        );
    }
}
