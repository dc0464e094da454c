//! End to end, issue 20 item 3: a scaler is a deputy. On a real
//! kube-apiserver with kube-controller-manager (its HPA controller writing as
//! `system:serviceaccount:kube-system:horizontal-pod-autoscaler`, an identity
//! the policy trusts), alice may not `kubectl scale` an Argo CD-managed
//! Deployment, and may not have the HPA controller do it for her either;
//! where the policy ignores `/spec/replicas`, she may, and it does. Under
//! CI=true (and everywhere else) a component that cannot start fails the test.

use driftguard_testkit::control_plane;
use driftguard_testkit::gitops;

use std::time::Duration;

use control_plane::*;
use gitops::*;

/// A Deployment Argo CD manages, at one replica.
const MANAGED: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
  annotations: {argocd.argoproj.io/tracking-id: "shop:apps/Deployment:shop/web"}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: "nginx:1.27"}]}
"#;

/// The same, unmanaged: the control that shows the HPA controller works here.
const UNMANAGED: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: free, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: free}}
  template:
    metadata: {labels: {app: free}}
    spec: {containers: [{name: free, image: "nginx:1.27"}]}
"#;

/// An autoscaling/v1 HPA pinning `web` at 3, written as a manifest.
const PINNING_HPA: &str = r#"
apiVersion: autoscaling/v1
kind: HorizontalPodAutoscaler
metadata: {name: pin, namespace: shop}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 3
  maxReplicas: 3
"#;

/// Developers may manage HPAs (the e2e `workload-editor` role has none).
const HPA_RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: hpa-editor}
rules:
  - apiGroups: [autoscaling]
    resources: [horizontalpodautoscalers]
    verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: hpa-editors}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: hpa-editor}
subjects:
  - {kind: Group, name: developers, apiGroup: rbac.authorization.k8s.io}
"#;

/// The HPA controller's first pass happens once the HPA exists; a minute
/// covers kube-controller-manager's start on a loaded machine.
const CONTROLLER: Duration = Duration::from_secs(90);

fn replicas(plane: &ControlPlane, name: &str) -> Option<String> {
    get_json(plane, &["-n", "shop", "deployment", name]).and_then(|d| field(&d, "/spec/replicas"))
}

fn wait_for_replicas(plane: &ControlPlane, name: &str, want: &str) {
    wait_for(
        &format!("deployment/{name} at {want} replicas"),
        CONTROLLER,
        || match replicas(plane, name) {
            Some(r) if r == want => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
}

fn autoscale(plane: &ControlPlane, deployment: &str, n: u32) -> Kubectl {
    plane.kubectl(
        "alice",
        &[
            "-n",
            "shop",
            "autoscale",
            &format!("deployment/{deployment}"),
            &format!("--min={n}"),
            &format!("--max={n}"),
        ],
    )
}

#[test]
fn a_scaler_cannot_make_the_hpa_controller_drift_a_managed_deployment() {
    let tools = Tools::build();
    let mut plane = ControlPlane::start("deputies");
    plane.prepare(&["argocd", "shop"]);
    plane.apply_admin(HPA_RBAC);
    let _kcm = start_controller_manager(&plane, &tools);
    let out = plane.kubectl_as_stdin(ARGO, &["apply", "-f", "-"], Some(MANAGED));
    assert!(out.ok, "{out}");
    let out = plane.kubectl_stdin("alice", &["apply", "-f", "-"], Some(UNMANAGED));
    assert!(out.ok, "{out}");

    let default_policy = format!("{ROOT}/src/policy/default-policy.yaml");
    let mut dg = Driftguard::start(
        &plane,
        &[
            &format!("--policy={default_policy}"),
            &plane.driftguard_kubeconfig_flag(),
        ],
    );
    dg.register(&plane, &default_policy);
    wait_for("kubectl scale denied", Duration::from_secs(30), || {
        let out = plane.kubectl(
            "alice",
            &["-n", "shop", "scale", "deployment/web", "--replicas=3"],
        );
        if !out.ok && out.stderr.contains("driftguard") {
            Ok(())
        } else {
            Err(out.to_string())
        }
    });

    // The same write through the HPA controller: denied at the HPA.
    let out = autoscale(&plane, "web", 3);
    assert!(!out.ok, "kubectl autoscale of a managed Deployment: {out}");
    assert!(
        out.stderr
            .contains("would scale Deployment shop/web, managed by Argo CD application shop")
            && out.stderr.contains("/spec/replicas"),
        "{out}"
    );
    let out = plane.kubectl_stdin("alice", &["apply", "-f", "-"], Some(PINNING_HPA));
    assert!(
        !out.ok,
        "an autoscaling/v1 HPA at a managed Deployment: {out}"
    );
    let hpas = plane.kubectl("admin", &["-n", "shop", "get", "hpa", "-o", "name"]);
    assert!(hpas.ok && hpas.stdout.trim().is_empty(), "{hpas}");

    // The control: at an unmanaged Deployment the HPA is allowed and the
    // controller scales it, so the controller runs and the managed
    // Deployment kept its replica because of the denial.
    let out = autoscale(&plane, "free", 2);
    assert!(out.ok, "{out}");
    wait_for_replicas(&plane, "free", "2");
    assert_eq!(replicas(&plane, "web").as_deref(), Some("1"));
    // Retargeting that HPA at the managed Deployment is an UPDATE, which
    // only the main webhook's scaler condition sends (the creates webhook
    // sees CREATEs only).
    let out = plane.kubectl(
        "alice",
        &[
            "-n",
            "shop",
            "patch",
            "hpa/free",
            "--type=merge",
            "-p",
            r#"{"spec":{"scaleTargetRef":{"name":"web"}}}"#,
        ],
    );
    assert!(!out.ok, "an HPA retargeted at a managed Deployment: {out}");
    assert!(
        out.stderr.contains("would scale Deployment shop/web"),
        "{out}"
    );

    // A policy that ignores the Deployment's replicas (as Argo CD's docs
    // recommend with an HPA): allowed, and the controller scales it.
    let ignoring = plane.dir.join("replicas-ignored.yaml");
    std::fs::write(
        &ignoring,
        "ignoreDifferences:\n  - {group: apps, kind: Deployment, jsonPointers: [/spec/replicas]}\n",
    )
    .unwrap();
    let ignoring = ignoring.display().to_string();
    dg.restart(Some(&[&format!("--policy={ignoring}")]));
    dg.register(&plane, &ignoring);
    let out = autoscale(&plane, "web", 3);
    assert!(
        out.ok,
        "kubectl autoscale with /spec/replicas ignored: {out}"
    );
    wait_for_replicas(&plane, "web", "3");
}
