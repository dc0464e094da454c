//! What the fleet end-to-end tests share (`tests/e2e_fleet.rs`, the tools'
//! objects written by the test; `tests/e2e_fleet_gitops.rs`, the real tools
//! in the hub): the hub grants of driftguard and of the on-call engineer,
//! the sweeper's grant in the spoke, and driftguard's source metrics.
use std::time::Duration;

use crate::control_plane::*;

/// What driftguard may do in the hub: read Applications and AppProjects, and
/// argocd-cm and argocd-cmd-params-cm by name. Nothing else, no writes.
pub const HUB_READER_RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: driftguard-hub-reader}
rules:
  - apiGroups: [argoproj.io]
    resources: [applications, appprojects]
    verbs: [get, list, watch]
  - apiGroups: [kustomize.toolkit.fluxcd.io]
    resources: [kustomizations]
    verbs: [get, list, watch]
  - apiGroups: [helm.toolkit.fluxcd.io]
    resources: [helmreleases]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: driftguard-hub-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: driftguard-hub-reader}
subjects: [{kind: User, name: spoke-1-driftguard}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: driftguard-hub-reader, namespace: argocd}
rules:
  - apiGroups: [""]
    resources: [configmaps]
    resourceNames: [argocd-cm, argocd-cmd-params-cm]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: driftguard-hub-reader, namespace: argocd}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: driftguard-hub-reader}
subjects: [{kind: User, name: spoke-1-driftguard}]
"#;

/// The one grant driftguard's sweeper needs in the hub to lift a
/// break-glass pause: patch on Applications (in the namespaces it pauses).
pub const HUB_LIFTER_RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: driftguard-hub-lifter, namespace: argocd}
rules:
  - apiGroups: [argoproj.io]
    resources: [applications]
    verbs: [patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: driftguard-hub-lifter, namespace: argocd}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: driftguard-hub-lifter}
subjects: [{kind: User, name: spoke-1-driftguard}]
"#;

/// The on-call engineer's own grant in the hub: read and patch Applications,
/// and read the Kustomizations (what `explain` reads).
pub const HUB_ONCALL_RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: application-pauser, namespace: argocd}
rules:
  - apiGroups: [argoproj.io]
    resources: [applications]
    verbs: [get, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: application-pauser, namespace: argocd}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: application-pauser}
subjects: [{kind: User, name: oncall}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: kustomization-reader, namespace: flux-system}
rules:
  - apiGroups: [kustomize.toolkit.fluxcd.io]
    resources: [kustomizations]
    verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: kustomization-reader, namespace: flux-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: kustomization-reader}
subjects: [{kind: User, name: oncall}]
"#;

/// The sweeper's grant in the spoke: list, watch and patch Deployments.
pub const SWEEPER_RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: driftguard-break-glass-sweeper}
rules:
  - apiGroups: [apps]
    resources: [deployments]
    verbs: [list, watch, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: driftguard-break-glass-sweeper}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: driftguard-break-glass-sweeper}
subjects: [{kind: User, name: driftguard}]
"#;

/// A counter or gauge of driftguard's `/metrics`, summed over its labels.
pub fn metric(dg: &Driftguard, name: &str) -> f64 {
    let (_, body) = probe_get(dg.probe, "/metrics");
    body.lines()
        .filter_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
        .sum()
}

/// `driftguard_sources_failing_seconds` of the watch of `source`
/// (`Application`, `Kustomization`, ...).
pub fn failing_seconds(dg: &Driftguard, source: &str) -> Option<f64> {
    let (_, body) = probe_get(dg.probe, "/metrics");
    let prefix = format!("driftguard_sources_failing_seconds{{source=\"{source}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
}

/// Waits until the failing seconds of `source` satisfy `want`.
pub fn wait_failing(dg: &Driftguard, source: &str, what: &str, want: impl Fn(f64) -> bool) {
    wait_for(what, Duration::from_secs(30), || {
        match failing_seconds(dg, source) {
            Some(s) if want(s) => Ok(()),
            other => Err(format!("{source}: {other:?}")),
        }
    });
}

/// The annotations of the hub's Application `argocd/name`.
pub fn hub_application(hub: &ControlPlane, name: &str) -> serde_json::Value {
    let out = hub.kubectl(
        "admin",
        &[
            "-n",
            "argocd",
            "get",
            &format!("application/{name}"),
            "-o",
            "jsonpath={.metadata.annotations}",
        ],
    );
    assert!(out.ok, "{out}");
    serde_json::from_str(&out.stdout).unwrap_or_default()
}

/// Argo CD's pause of an Application, and driftguard's record of who holds it.
pub const SKIP: &str = "argocd.argoproj.io/skip-reconcile";
pub const PAUSED_FOR: &str = "driftguard.io/break-glass-paused-for";

/// alice annotates deployment/web in the spoke's `production`: a change
/// only a rule ignoring annotations allows.
pub fn annotate_web(spoke: &ControlPlane, value: &str) -> Kubectl {
    spoke.kubectl(
        "alice",
        &[
            "-n",
            "production",
            "annotate",
            "--overwrite",
            "deployment/web",
            &format!("example.com/note={value}"),
        ],
    )
}
