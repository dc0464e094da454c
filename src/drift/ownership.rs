//! Who manages an object: Argo CD (tracking annotation or instance label) or
//! Flux (kustomize / helm toolkit labels). Children with a controller
//! ownerReference are not top-level GitOps objects.

use std::fmt;

use serde_json::Value;

use crate::policy::Policy;

pub const FLUX_KUSTOMIZE_NAME: &str = "kustomize.toolkit.fluxcd.io/name";
pub const FLUX_KUSTOMIZE_NAMESPACE: &str = "kustomize.toolkit.fluxcd.io/namespace";
pub const FLUX_HELM_NAME: &str = "helm.toolkit.fluxcd.io/name";
pub const FLUX_HELM_NAMESPACE: &str = "helm.toolkit.fluxcd.io/namespace";
/// Set by `helm install/upgrade`, never by `helm template` (which Argo CD uses):
/// an instance label next to it names a Helm release, not an Argo CD application.
const HELM_RELEASE_ANNOTATION: &str = "meta.helm.sh/release-name";

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "tool", rename_all = "camelCase")]
pub enum Manager {
    #[serde(rename = "argocd")]
    ArgoCd {
        application: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        application_namespace: Option<String>,
    },
    #[serde(rename = "flux-kustomization")]
    FluxKustomization { namespace: String, name: String },
    #[serde(rename = "flux-helmrelease")]
    FluxHelmRelease { namespace: String, name: String },
}

impl Manager {
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

pub fn labels(obj: &Value) -> Option<&serde_json::Map<String, Value>> {
    obj.pointer("/metadata/labels").and_then(Value::as_object)
}

pub fn annotations(obj: &Value) -> Option<&serde_json::Map<String, Value>> {
    obj.pointer("/metadata/annotations")
        .and_then(Value::as_object)
}

fn get<'a>(map: Option<&'a serde_json::Map<String, Value>>, key: &str) -> Option<&'a str> {
    map?.get(key)?.as_str().filter(|s| !s.is_empty())
}

/// The controller that owns `obj`, as `Kind/name`, if any.
pub fn controller_owner(obj: &Value) -> Option<String> {
    let refs = obj.pointer("/metadata/ownerReferences")?.as_array()?;
    refs.iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .map(|r| {
            let kind = r.get("kind").and_then(Value::as_str).unwrap_or("?");
            let name = r.get("name").and_then(Value::as_str).unwrap_or("?");
            format!("{kind}/{name}")
        })
}

/// Detects the GitOps manager of `obj`, in order: Argo CD tracking annotation,
/// Flux Kustomization labels, Flux HelmRelease labels, Argo CD instance label.
pub fn detect(obj: &Value, policy: &Policy) -> Option<Manager> {
    let labels = labels(obj);
    let annotations = annotations(obj);
    if let Some(argo) = &policy.argocd
        && let Some(id) = get(annotations, &argo.tracking_annotation)
    {
        return tracking_id_manager(id, obj);
    }
    if policy.flux {
        if let Some(name) = get(labels, FLUX_KUSTOMIZE_NAME) {
            let namespace = get(labels, FLUX_KUSTOMIZE_NAMESPACE)
                .unwrap_or_default()
                .to_owned();
            return Some(Manager::FluxKustomization {
                namespace,
                name: name.to_owned(),
            });
        }
        if let Some(name) = get(labels, FLUX_HELM_NAME) {
            let namespace = get(labels, FLUX_HELM_NAMESPACE)
                .unwrap_or_default()
                .to_owned();
            return Some(Manager::FluxHelmRelease {
                namespace,
                name: name.to_owned(),
            });
        }
    }
    let label = policy.argocd.as_ref()?.instance_label.as_deref()?;
    let app = get(labels, label)?;
    if get(annotations, HELM_RELEASE_ANNOTATION).is_some() {
        return None;
    }
    Some(argo_app(app))
}

/// Argo CD's tracking id is `<app>:<group>/<kind>:<namespace>/<name>`. Like
/// Argo CD, an id naming another object (copied metadata) is not ownership.
fn tracking_id_manager(id: &str, obj: &Value) -> Option<Manager> {
    let mut parts = id.splitn(3, ':');
    let app = parts.next().filter(|a| !a.is_empty())?;
    if let (Some(group_kind), Some(ns_name)) = (parts.next(), parts.next()) {
        let (_, kind) = group_kind.split_once('/').unwrap_or(("", group_kind));
        let (ns, name) = ns_name.split_once('/').unwrap_or(("", ns_name));
        let obj_kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
        let obj_name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let obj_ns = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let names_other = (!obj_kind.is_empty() && obj_kind != kind)
            || (!obj_name.is_empty() && obj_name != name)
            || (!obj_ns.is_empty() && !ns.is_empty() && obj_ns != ns);
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
/// hand is a change like any other, judged on the stored object.
pub fn opted_out(obj: &Value, manager: &Manager) -> Option<String> {
    let key = match manager {
        Manager::FluxKustomization { .. } => "kustomize.toolkit.fluxcd.io/reconcile",
        Manager::FluxHelmRelease { .. } => "helm.toolkit.fluxcd.io/driftDetection",
        Manager::ArgoCd { .. } => return None,
    };
    let disabled = [labels(obj), annotations(obj)]
        .into_iter()
        .any(|m| get(m, key) == Some("disabled"));
    disabled.then(|| format!("{key}: disabled (unmanaged by {manager})"))
}

/// The metadata keys by which ownership is detected: `(is_annotation, key)`.
pub fn tracking_keys(policy: &Policy) -> Vec<(bool, &str)> {
    let mut keys = Vec::new();
    if let Some(argo) = &policy.argocd {
        keys.push((true, argo.tracking_annotation.as_str()));
        if let Some(label) = &argo.instance_label {
            keys.push((false, label.as_str()));
        }
    }
    if policy.flux {
        for key in [
            FLUX_KUSTOMIZE_NAME,
            FLUX_KUSTOMIZE_NAMESPACE,
            FLUX_HELM_NAME,
            FLUX_HELM_NAMESPACE,
        ] {
            keys.push((false, key));
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value, annotations: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "prod", "labels": labels, "annotations": annotations}})
    }

    #[test]
    fn detects_each_manager() {
        let p = Policy::embedded();
        let argo = obj(
            json!({}),
            json!({"argocd.argoproj.io/tracking-id": "myapp:apps/Deployment:prod/web"}),
        );
        assert_eq!(
            detect(&argo, &p),
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
            detect(&any_ns, &p).unwrap().to_string(),
            "Argo CD application team-a/myapp"
        );
        let flux = obj(
            json!({"kustomize.toolkit.fluxcd.io/name": "myapp", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}),
            json!({}),
        );
        assert_eq!(
            detect(&flux, &p).unwrap().to_string(),
            "Flux Kustomization flux-system/myapp"
        );
        let helm = obj(
            json!({"helm.toolkit.fluxcd.io/name": "redis", "helm.toolkit.fluxcd.io/namespace": "db"}),
            json!({}),
        );
        assert_eq!(
            detect(&helm, &p).unwrap().to_string(),
            "Flux HelmRelease db/redis"
        );
        let label = obj(json!({"app.kubernetes.io/instance": "myapp"}), json!({}));
        assert_eq!(
            detect(&label, &p).unwrap().to_string(),
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
        assert_eq!(detect(&o, &p), None);
    }

    #[test]
    fn copied_tracking_id_is_not_ownership() {
        let p = Policy::embedded();
        let o = obj(
            json!({}),
            json!({"argocd.argoproj.io/tracking-id": "myapp:apps/Deployment:prod/other"}),
        );
        assert_eq!(detect(&o, &p), None);
    }

    #[test]
    fn unmanaged_and_children() {
        let p = Policy::embedded();
        assert_eq!(detect(&obj(json!({"app": "x"}), json!({})), &p), None);
        let child = json!({"metadata": {"ownerReferences": [
            {"kind": "ReplicaSet", "name": "web-1", "controller": true}]}});
        assert_eq!(
            controller_owner(&child).as_deref(),
            Some("ReplicaSet/web-1")
        );
    }
}
