//! Break-glass through the webhook, as the end-to-end tests arm it: a
//! Flux-managed ConfigMap armed by sam as `kubectl driftguard break-glass`
//! would, and the records the webhook writes for the sweeper.

use std::time::Duration;

use crate::control_plane::ControlPlane;
use crate::process::wait_for;

/// A Flux-managed ConfigMap, not armed.
pub fn flux_configmap(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: {name}
  namespace: production
  labels:
    kustomize.toolkit.fluxcd.io/name: apps
    kustomize.toolkit.fluxcd.io/namespace: flux-system
data: {{LOG_LEVEL: debug}}
"#
    )
}

/// Arms ConfigMap `name` as `kubectl driftguard break-glass` does (both
/// annotations, the pause marker and Flux's opt-out, the label), as sam,
/// through the webhook, for `seconds`, until its record (in `records`)
/// shows the webhook judged it: a new webhook configuration takes a moment
/// to apply.
pub fn arm(plane: &ControlPlane, name: &str, seconds: i64, records: &str) {
    let patch = |expires: &str| {
        serde_json::json!({"metadata": {
            "labels": {"driftguard.io/break-glass": "true"},
            "annotations": {
                "driftguard.io/break-glass": "INC-7 hotfix",
                "driftguard.io/break-glass-expires": expires,
                "driftguard.io/break-glass-paused": "kustomize.toolkit.fluxcd.io/reconcile",
                "kustomize.toolkit.fluxcd.io/reconcile": "disabled"}}})
        .to_string()
    };
    wait_for("sam to arm a break-glass", Duration::from_secs(30), || {
        let expires = (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(seconds))
            .round(jiff::Unit::Second)
            .unwrap()
            .to_string();
        let out = plane.kubectl(
            "sam",
            &[
                "-n",
                "production",
                "patch",
                "configmap",
                name,
                "--type=merge",
                "-p",
                &patch(&expires),
            ],
        );
        if !out.ok {
            return Err(format!("{out}"));
        }
        let recorded = recorded(plane, records);
        match recorded.contains(&format!("production/{name}")) {
            true => Ok(()),
            false => Err(format!("armed, not recorded: {recorded:?}")),
        }
    });
}

/// The objects the records in `namespace` name, as `namespace/name`.
pub fn recorded(plane: &ControlPlane, namespace: &str) -> Vec<String> {
    let out = plane.kubectl(
        "admin",
        &[
            "-n",
            namespace,
            "get",
            "configmaps",
            "-l",
            "driftguard.io/break-glass-record",
            "-o",
            "jsonpath={range .items[*]}{.data.namespace}/{.data.name}{\"\\n\"}{end}",
        ],
    );
    assert!(out.ok, "{out}");
    out.stdout.lines().map(str::to_owned).collect()
}

/// sam may patch ConfigMaps in production (the aggregated `edit` role is
/// empty without kube-controller-manager).
pub const SAM_EDITS_PRODUCTION: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: sam-edits, namespace: production}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [get, list, patch]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: sam-edits, namespace: production}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: sam-edits}
subjects: [{kind: User, name: sam, apiGroup: rbac.authorization.k8s.io}]
"#;

/// The sweeper's grant on the type it ends, for driftguard's own user.
pub const SWEEPS_CONFIGMAPS: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: driftguard-sweeps-configmaps}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [get, list, patch]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: driftguard-sweeps-configmaps}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: driftguard-sweeps-configmaps}
subjects: [{kind: User, name: driftguard, apiGroup: rbac.authorization.k8s.io}]
"#;

/// Creates CRDs `from..to` ([`crds`]), 100 per apply, and waits until every
/// CRD is established.
pub fn install_crds(plane: &ControlPlane, from: usize, to: usize) {
    for chunk in (from..to).step_by(100) {
        let yaml = crds(chunk, (chunk + 100).min(to));
        let out = plane.kubectl_stdin("admin", &["apply", "-f", "-"], Some(&yaml));
        assert!(out.ok, "{out}");
    }
    let wait = [
        "wait",
        "--for=condition=established",
        "crd",
        "--all",
        "--timeout=600s",
    ];
    let out = plane.kubectl("admin", &wait);
    assert!(out.ok, "{out}");
}

/// CRDs `from..to`, each a namespaced `Widget` in group `load<i>.example.com`:
/// types an apiserver serves that nothing refers to.
fn crds(from: usize, to: usize) -> String {
    (from..to)
        .map(|i| {
            format!(
                r#"---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: widgets.load{i}.example.com}}
spec:
  group: load{i}.example.com
  names: {{kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}
"#
            )
        })
        .collect()
}
