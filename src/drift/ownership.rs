//! Who manages an object: Argo CD (tracking annotation or instance label) or
//! Flux (kustomize / helm toolkit labels). Children with a controller
//! ownerReference are not top-level GitOps objects.

use std::fmt;

use serde_json::Value;

use super::inputs::{Input, Inputs};

/// The keys ownership is read from: defined with the other decision
/// inputs ([`super::inputs`]), so that inputs does not import ownership.
pub(crate) use super::inputs::{
    FLUX_HELM_NAME, FLUX_KUSTOMIZE_NAME, FLUX_RECONCILE, HELM_DRIFT_DETECTION,
};
/// Which Argo CD installation tracks an object (`common.AnnotationInstallationID`).
pub const ARGOCD_INSTALLATION_ID: &str = "argocd.argoproj.io/installation-id";
/// argocd-cm's key for an installation's id.
pub const ARGOCD_CM_INSTALLATION_ID: &str = "installationID";

/// Argo CD's own rule (`getAppInstanceValue` in `util/argo/resource_tracking.go`,
/// v3.6.1): an installation with an id (`installation`) tracks an object only
/// when the object's [`ARGOCD_INSTALLATION_ID`] annotation (`object`) equals
/// it; one without an id tracks every object, whatever id the object carries.
pub fn installation_tracks(installation: Option<&str>, object: Option<&str>) -> bool {
    match installation.filter(|id| !id.is_empty()) {
        None => true,
        Some(id) => object == Some(id),
    }
}

/// The GitOps object that manages an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Manager {
    /// An Argo CD Application.
    ArgoCd {
        /// Its name.
        application: String,
        /// Its namespace, when the tracking names one (apps in any namespace);
        /// `None` is Argo CD's own namespace.
        application_namespace: Option<String>,
    },
    /// A Flux Kustomization.
    FluxKustomization {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// A Flux HelmRelease.
    FluxHelmRelease {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

impl Manager {
    /// `Argo CD` or `Flux`.
    pub fn tool(&self) -> &'static str {
        match self {
            Manager::ArgoCd { .. } => "Argo CD",
            Manager::FluxKustomization { .. } | Manager::FluxHelmRelease { .. } => "Flux",
        }
    }
}

impl fmt::Display for Manager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Manager::ArgoCd {
                application,
                application_namespace: Some(ns),
            } => write!(f, "Argo CD application {ns}/{application}"),
            Manager::ArgoCd { application, .. } => write!(f, "Argo CD application {application}"),
            Manager::FluxKustomization { namespace, name } => {
                write!(f, "Flux Kustomization {namespace}/{name}")
            }
            Manager::FluxHelmRelease { namespace, name } => {
                write!(f, "Flux HelmRelease {namespace}/{name}")
            }
        }
    }
}

/// The controller that owns the object, as `Kind/name`, if any.
pub fn controller_owner(inputs: &Inputs) -> Option<String> {
    inputs.get(Input::ControllerOwner).map(|r| {
        let kind = r.get("kind").and_then(Value::as_str).unwrap_or("?");
        let name = r.get("name").and_then(Value::as_str).unwrap_or("?");
        format!("{kind}/{name}")
    })
}

/// Which detector made a [`Claim`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detector {
    TrackingAnnotation,
    /// The policy's `gitops.argocd.instanceLabel`.
    InstanceLabel,
    /// A watched argocd-cm's `application.instanceLabelKey`, under label tracking.
    ArgoCdInstanceLabel,
    FluxKustomizeLabels,
    FluxHelmLabels,
}

impl Detector {
    pub fn as_str(self) -> &'static str {
        match self {
            Detector::TrackingAnnotation => "tracking annotation",
            Detector::InstanceLabel => "instance label",
            Detector::ArgoCdInstanceLabel => "argocd-cm instance label",
            Detector::FluxKustomizeLabels => "Flux Kustomization labels",
            Detector::FluxHelmLabels => "Flux HelmRelease labels",
        }
    }
}

/// One detector's word that `manager` manages the object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub manager: Manager,
    pub by: Detector,
}

/// Every claim on the object, one per manager, in the order: Argo CD
/// tracking annotation, Flux Kustomization labels, Flux HelmRelease labels,
/// Argo CD instance label (the policy's key, then `instance_labels`, the
/// keys watched argocd-cms configure). The object is managed when any
/// detector claims it: a detector that finds no claim (a tracking id naming
/// another object, an instance label beside Helm's release annotation) never
/// turns another's off. Inputs of a detector the policy turns off are never
/// read (absent).
pub fn claims(inputs: &Inputs, instance_labels: &[&str]) -> Vec<Claim> {
    let mut out: Vec<Claim> = Vec::new();
    let mut add = |manager: Manager, by| {
        if !out.iter().any(|c| c.manager == manager) {
            out.push(Claim { manager, by });
        }
    };
    if let Some(manager) = inputs
        .non_empty(Input::ArgoTrackingAnnotation)
        .and_then(|id| tracking_id_manager(id, inputs))
    {
        add(manager, Detector::TrackingAnnotation);
    }
    for (name, namespace, by) in [
        (
            Input::FluxKustomizeName,
            Input::FluxKustomizeNamespace,
            Detector::FluxKustomizeLabels,
        ),
        (
            Input::FluxHelmName,
            Input::FluxHelmNamespace,
            Detector::FluxHelmLabels,
        ),
    ] {
        if let Some(name) = inputs.non_empty(name) {
            let (namespace, name) = (
                inputs.non_empty(namespace).unwrap_or_default().to_owned(),
                name.to_owned(),
            );
            let manager = if by == Detector::FluxKustomizeLabels {
                Manager::FluxKustomization { namespace, name }
            } else {
                Manager::FluxHelmRelease { namespace, name }
            };
            add(manager, by);
        }
    }
    // Helm sets this annotation, never `helm template` (which Argo CD runs):
    // beside it, an instance label names a Helm release.
    if inputs.non_empty(Input::HelmReleaseAnnotation).is_none() {
        if let Some(app) = inputs.non_empty(Input::ArgoInstanceLabel) {
            add(argo_app(app), Detector::InstanceLabel);
        }
        for app in instance_labels.iter().filter_map(|k| inputs.label(k)) {
            add(argo_app(app), Detector::ArgoCdInstanceLabel);
        }
    }
    out
}

/// The first of [`claims`] under the policy's detectors alone: which tool
/// the plugin pauses and the sweeper looks after.
pub fn detect(inputs: &Inputs) -> Option<Manager> {
    claims(inputs, &[]).into_iter().next().map(|c| c.manager)
}

/// Argo CD's tracking id is `<app>:<group>/<kind>:<namespace>/<name>`. Like
/// Argo CD, an id naming another object (copied metadata) is not ownership.
fn tracking_id_manager(id: &str, obj: &Inputs) -> Option<Manager> {
    let mut parts = id.splitn(3, ':');
    let app = parts.next().filter(|a| !a.is_empty())?;
    if let (Some(group_kind), Some(ns_name)) = (parts.next(), parts.next()) {
        let (_, kind) = group_kind.split_once('/').unwrap_or(("", group_kind));
        let (ns, name) = ns_name.split_once('/').unwrap_or(("", ns_name));
        let names_other = (!obj.kind.is_empty() && obj.kind != kind)
            || (!obj.name.is_empty() && obj.name != name)
            || (!obj.namespace.is_empty() && !ns.is_empty() && obj.namespace != ns);
        if names_other {
            return None;
        }
    }
    Some(argo_app(app))
}

fn argo_app(app: &str) -> Manager {
    match app.split_once('_') {
        Some((ns, name)) => Manager::ArgoCd {
            application: name.to_owned(),
            application_namespace: Some(ns.to_owned()),
        },
        None => Manager::ArgoCd {
            application: app.to_owned(),
            application_namespace: None,
        },
    }
}

/// Flux's per-object opt-outs, on the stored object (label or annotation):
/// such an object is not reconciled, so its changes are not drift. Adding one by
/// hand is a change to a decision input, and so drift. An object carrying
/// driftguard's break-glass pause marker is not opted out: the opt-out is
/// driftguard's own pause for the break-glass window, and the object stays
/// judged (otherwise anyone could edit it while Flux looks away).
pub fn opted_out(inputs: &Inputs, manager: &Manager) -> Option<String> {
    if inputs.get(Input::BreakGlassPaused).is_some() {
        return None;
    }
    let key = flux_opt_out(manager)?;
    opt_out_set(inputs, manager).then(|| format!("{key}: disabled (unmanaged by {manager})"))
}

/// The per-object opt-out key of a Flux manager (`None` for Argo CD, which
/// has none).
pub fn flux_opt_out(manager: &Manager) -> Option<&'static str> {
    match manager {
        Manager::FluxKustomization { .. } => Some(FLUX_RECONCILE),
        Manager::FluxHelmRelease { .. } => Some(HELM_DRIFT_DETECTION),
        Manager::ArgoCd { .. } => None,
    }
}

/// Whether the object carries its Flux manager's opt-out, `disabled`, as a
/// label or an annotation.
pub fn opt_out_set(inputs: &Inputs, manager: &Manager) -> bool {
    let (label, annotation) = match manager {
        Manager::FluxKustomization { .. } => {
            (Input::FluxReconcileLabel, Input::FluxReconcileAnnotation)
        }
        Manager::FluxHelmRelease { .. } => (
            Input::HelmDriftDetectionLabel,
            Input::HelmDriftDetectionAnnotation,
        ),
        Manager::ArgoCd { .. } => return false,
    };
    [label, annotation]
        .into_iter()
        .any(|i| inputs.non_empty(i) == Some("disabled"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use serde_json::json;

    fn obj(labels: Value, annotations: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "prod", "labels": labels, "annotations": annotations}})
    }

    #[test]
    fn an_installation_with_an_id_tracks_only_objects_with_it() {
        assert!(installation_tracks(Some("hub"), Some("hub")));
        assert!(!installation_tracks(Some("hub"), None));
        assert!(!installation_tracks(Some("hub"), Some("")));
        assert!(!installation_tracks(Some("hub"), Some("spoke")));
        // Without an id (absent or empty), every object, as Argo CD v3.6.1
        // does: seen pruning another installation's object in the fleet e2e.
        for none in [None, Some("")] {
            for object in [None, Some(""), Some("hub")] {
                assert!(installation_tracks(none, object), "{none:?} {object:?}");
            }
        }
    }

    #[test]
    fn detects_each_manager() {
        let p = Policy::embedded();
        let argo = obj(
            json!({}),
            json!({"argocd.argoproj.io/tracking-id": "myapp:apps/Deployment:prod/web"}),
        );
        assert_eq!(
            detect(&Inputs::read(&argo, &p)),
            Some(Manager::ArgoCd {
                application: "myapp".into(),
                application_namespace: None
            })
        );
        let any_ns = obj(
            json!({}),
            json!({"argocd.argoproj.io/tracking-id": "team-a_myapp:apps/Deployment:prod/web"}),
        );
        assert_eq!(
            detect(&Inputs::read(&any_ns, &p)).unwrap().to_string(),
            "Argo CD application team-a/myapp"
        );
        let flux = obj(
            json!({"kustomize.toolkit.fluxcd.io/name": "myapp", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}),
            json!({}),
        );
        assert_eq!(
            detect(&Inputs::read(&flux, &p)).unwrap().to_string(),
            "Flux Kustomization flux-system/myapp"
        );
        let helm = obj(
            json!({"helm.toolkit.fluxcd.io/name": "redis", "helm.toolkit.fluxcd.io/namespace": "db"}),
            json!({}),
        );
        assert_eq!(
            detect(&Inputs::read(&helm, &p)).unwrap().to_string(),
            "Flux HelmRelease db/redis"
        );
        let label = obj(json!({"app.kubernetes.io/instance": "myapp"}), json!({}));
        assert_eq!(
            detect(&Inputs::read(&label, &p)).unwrap().to_string(),
            "Argo CD application myapp"
        );
    }

    #[test]
    fn helm_installed_release_label_is_not_argo_cd() {
        let p = Policy::embedded();
        let o = obj(
            json!({"app.kubernetes.io/instance": "redis"}),
            json!({"meta.helm.sh/release-name": "redis"}),
        );
        assert_eq!(detect(&Inputs::read(&o, &p)), None);
    }

    #[test]
    fn copied_tracking_id_is_not_ownership() {
        let p = Policy::embedded();
        let o = obj(
            json!({}),
            json!({"argocd.argoproj.io/tracking-id": "myapp:apps/Deployment:prod/other"}),
        );
        assert_eq!(detect(&Inputs::read(&o, &p)), None);
    }

    #[test]
    fn a_claim_one_detector_rejects_leaves_the_others() {
        let p = Policy::embedded();
        let o = obj(
            json!({"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
                   "app.kubernetes.io/instance": "web", "team.io/app": "shop"}),
            json!({"argocd.argoproj.io/tracking-id": "myapp:apps/Deployment:prod/other"}),
        );
        let got: Vec<String> = claims(&Inputs::read(&o, &p), &["team.io/app"])
            .iter()
            .map(|c| format!("{} by {}", c.manager, c.by.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                "Flux Kustomization flux-system/apps by Flux Kustomization labels",
                "Argo CD application web by instance label",
                "Argo CD application shop by argocd-cm instance label"
            ]
        );
        // One manager claimed twice is one claim, by the first detector.
        let twice = obj(
            json!({"app.kubernetes.io/instance": "myapp"}),
            json!({"argocd.argoproj.io/tracking-id": "myapp:apps/Deployment:prod/web"}),
        );
        let got = claims(&Inputs::read(&twice, &p), &[]);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].by, Detector::TrackingAnnotation);
    }

    #[test]
    fn unmanaged_and_children() {
        let p = Policy::embedded();
        assert_eq!(
            detect(&Inputs::read(&obj(json!({"app": "x"}), json!({})), &p)),
            None
        );
        let child = json!({"metadata": {"ownerReferences": [
            {"kind": "ReplicaSet", "name": "web-1", "controller": true}]}});
        assert_eq!(
            controller_owner(&Inputs::read(&child, &p)).as_deref(),
            Some("ReplicaSet/web-1")
        );
    }
}
