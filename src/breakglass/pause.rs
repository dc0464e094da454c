//! What arming a break-glass pauses, and what ending it undoes, as merge
//! patches: shared by `kubectl driftguard break-glass` and the server's
//! expiry sweeper. Plain data in, patch bodies out; callers send them.
//!
//! Each GitOps tool is paused with its own documented control, for exactly
//! one object where the tool allows it:
//! - Flux Kustomization: `kustomize.toolkit.fluxcd.io/reconcile: disabled` on
//!   the object (kustomize-controller neither applies nor prunes it);
//! - Flux HelmRelease: `helm.toolkit.fluxcd.io/driftDetection: disabled` on
//!   the object (helm-controller leaves it out of drift detection and
//!   correction; a new release still applies the chart);
//! - Argo CD: `argocd.argoproj.io/skip-reconcile: "true"` on the Application
//!   (the controller skips the whole Application), shared by every object of
//!   that Application under break-glass, listed in
//!   `driftguard.io/break-glass-paused-for`.
//!
//! What driftguard did not add it never removes: a Flux opt-out or an
//! Application skip-reconcile that was there before is left alone.
//!
//! The Argo CD side is in [`super::application`].

use serde_json::{Map, Value, json};

use crate::drift::breakglass_state;
use crate::drift::breakglass_state::{EXPIRES, LABEL, PAUSED, REASON};
use crate::drift::inputs::{Input, Inputs};
use crate::drift::ownership::{self, Manager};
use crate::policy::Policy;

use super::application::SKIP_RECONCILE;

/// How arming a break-glass pauses the GitOps tool for one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// No GitOps manager under the policy's detectors: nothing to pause.
    Unmanaged,
    /// Flux already skips the object: an opt-out driftguard did not set,
    /// left as it is (and not recorded as driftguard's).
    AlreadyOptedOut { key: &'static str, manager: Manager },
    /// Flux: `key: disabled` on the object, in the arming write.
    Flux { key: &'static str, manager: Manager },
    /// Argo CD: pause the Application first, then arm the object.
    ArgoCd {
        namespace: String,
        name: String,
        /// This object in the Application's `PAUSED_FOR` list.
        entry: String,
    },
}

impl Plan {
    /// What the object's pause marker records, if anything.
    fn marker(&self) -> Option<&'static str> {
        match self {
            Plan::Flux { key, .. } => Some(key),
            Plan::ArgoCd { .. } => Some(SKIP_RECONCILE),
            Plan::Unmanaged | Plan::AlreadyOptedOut { .. } => None,
        }
    }
}

/// The object's entry in an Application's `PAUSED_FOR` list.
pub fn entry(group: &str, kind: &str, namespace: &str, name: &str) -> String {
    format!("{group}/{kind}:{namespace}/{name}")
}

/// How to pause the tool that manages `obj` (which must carry its `kind`),
/// detected as the decision detects it. An Argo CD Application lives in the
/// namespace of an `ns_app` tracking id, else in `argocd_namespace`.
pub fn plan(obj: &Value, group: &str, policy: &Policy, argocd_namespace: &str) -> Plan {
    let inputs = Inputs::read(obj, policy);
    let Some(manager) = ownership::detect(&inputs) else {
        return Plan::Unmanaged;
    };
    if let Manager::ArgoCd {
        application,
        application_namespace,
    } = &manager
    {
        return Plan::ArgoCd {
            namespace: application_namespace
                .clone()
                .unwrap_or_else(|| argocd_namespace.to_owned()),
            name: application.clone(),
            entry: entry(group, inputs.kind, inputs.namespace, inputs.name),
        };
    }
    let Some(key) = ownership::flux_opt_out(&manager) else {
        return Plan::Unmanaged;
    };
    let ours = inputs.text(Input::BreakGlassPaused) == Some(key);
    if ownership::opt_out_set(&inputs, &manager) && !ours {
        Plan::AlreadyOptedOut { key, manager }
    } else {
        Plan::Flux { key, manager }
    }
}

/// Why `obj` is a runtime object that break-glass never arms, if it is: a
/// Pod, a ReplicaSet, or anything with a controller owner (which recreates
/// it from a template). Break-glass goes on the managed parent instead.
pub fn runtime_child(obj: &Value, group: &str) -> Option<&'static str> {
    let kind = obj["kind"].as_str().unwrap_or_default();
    if (group.is_empty() && kind == "Pod") || (group == "apps" && kind == "ReplicaSet") {
        return Some("Pods and ReplicaSets are never armed");
    }
    let controlled = obj["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["controller"] == true));
    controlled.then_some("it has a controller owner, which recreates it")
}

/// Why the expiry sweeper and the plugin leave an object alone although it
/// may carry the break-glass label, if they must. The label alone is never
/// enough: anyone can put it on a Pod template, and stripping it from Pods
/// (or from ReplicaSets, or anything a controller recreates from a template)
/// would release and recreate them on every sweep. An object qualifies only
/// when it is not a runtime child, is managed under the policy's detectors,
/// and carries the pause marker arming would have written for it, or, where
/// arming paused nothing, both break-glass annotations.
pub fn not_armable(obj: &Value, group: &str, policy: &Policy) -> Option<&'static str> {
    if let Some(why) = runtime_child(obj, group) {
        return Some(why);
    }
    let inputs = Inputs::read(obj, policy);
    if ownership::detect(&inputs).is_none() {
        return Some("no GitOps tool manages it");
    }
    match inputs.get(Input::BreakGlassPaused) {
        // The marker is a decision input only a break-glass writes: with it,
        // a break-glass whose annotations were taken off by hand (ended) or
        // broken (invalid) is still driftguard's to finish.
        Some(marker) if marker.as_str() != plan(obj, group, policy, "").marker() => {
            Some("its pause marker is not the one driftguard writes for its manager")
        }
        Some(_) => None,
        None if inputs.get(Input::BreakGlassReason).is_none()
            || inputs.get(Input::BreakGlassExpires).is_none() =>
        {
            Some("it carries no break-glass annotations")
        }
        None => None,
    }
}

/// The arming write: both annotations, the pause marker and the Flux opt-out
/// (when the plan pauses something), and the label; with a resourceVersion
/// precondition, since the plan was read from that version.
pub fn arm_patch(plan: &Plan, reason: &str, expires: &str, resource_version: &str) -> Value {
    let mut annotations = Map::new();
    annotations.insert(REASON.into(), json!(reason));
    annotations.insert(EXPIRES.into(), json!(expires));
    if let Some(marker) = plan.marker() {
        annotations.insert(PAUSED.into(), json!(marker));
    }
    if let Plan::Flux { key, .. } = plan {
        annotations.insert((*key).into(), json!("disabled"));
    }
    json!({"metadata": {
        "resourceVersion": resource_version,
        "annotations": annotations,
        "labels": {LABEL: "true"},
    }})
}

/// The arming write when the tool is not paused (an ApplicationSet would
/// undo the pause): the annotations and the label, no pause marker.
pub fn arm_patch_unpaused(reason: &str, expires: &str, resource_version: &str) -> Value {
    arm_patch(&Plan::Unmanaged, reason, expires, resource_version)
}

/// The ending write for an object whose annotations are `annotations`:
/// every key arming added, removed (the Flux opt-out only when its marker
/// names it); with a resourceVersion precondition.
pub fn end_patch(annotations: &Value, resource_version: &str) -> Value {
    let marker = annotations.get(PAUSED).and_then(Value::as_str);
    let removed: Map<String, Value> = breakglass_state::annotations(marker)
        .into_iter()
        .map(|k| (k.to_owned(), Value::Null))
        .collect();
    let labels: Map<String, Value> = breakglass_state::LABELS
        .into_iter()
        .map(|k| (k.to_owned(), Value::Null))
        .collect();
    json!({"metadata": {
        "resourceVersion": resource_version,
        "annotations": removed,
        "labels": labels,
    }})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breakglass::application::paused_application;
    use crate::drift::ownership::{FLUX_RECONCILE, HELM_DRIFT_DETECTION};

    fn obj(labels: Value, annotations: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "prod", "labels": labels, "annotations": annotations}})
    }

    fn flux_labels() -> Value {
        json!({"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"})
    }

    #[test]
    fn the_sweeper_touches_only_what_driftguard_armed() {
        let p = Policy::embedded();
        // What arming a Flux object writes, applied to it.
        let mut armed = obj(flux_labels(), json!({}));
        let plan = plan(&armed, "apps", &p, "argocd");
        json_patch::merge(
            &mut armed,
            &arm_patch(&plan, "INC-1", "2026-01-01T11:00:00Z", "1"),
        );
        assert_eq!(not_armable(&armed, "apps", &p), None, "{armed}");

        let with = |f: &dyn Fn(&mut Value)| {
            let mut o = armed.clone();
            f(&mut o);
            not_armable(&o, "apps", &p)
        };
        let mut label_only = obj(flux_labels(), json!({}));
        label_only["metadata"]["labels"][LABEL] = json!("true");
        assert!(not_armable(&label_only, "apps", &p).is_some());
        // A Pod or ReplicaSet carrying everything arming writes (a template copies it).
        for (group, kind) in [("", "Pod"), ("apps", "ReplicaSet")] {
            let mut o = armed.clone();
            o["kind"] = json!(kind);
            assert!(not_armable(&o, group, &p).is_some(), "{kind}");
        }
        assert!(
            with(&|o| o["metadata"]["ownerReferences"] =
                json!([{"kind": "Deployment", "name": "web", "controller": true}]))
            .is_some()
        );
        assert!(with(&|o| o["metadata"]["labels"] = json!({LABEL: "true"})).is_some());
        // A break-glass broken or ended by hand keeps driftguard's marker: still
        // driftguard's to finish. Without the marker, both annotations are needed.
        let without_expiry = |o: &mut Value| {
            o["metadata"]["annotations"]
                .as_object_mut()
                .unwrap()
                .remove(EXPIRES);
        };
        assert_eq!(with(&without_expiry), None);
        assert!(
            with(&|o| {
                without_expiry(o);
                o["metadata"]["annotations"]
                    .as_object_mut()
                    .unwrap()
                    .remove(PAUSED);
            })
            .is_some()
        );
        assert!(with(&|o| o["metadata"]["annotations"][PAUSED] = json!(SKIP_RECONCILE)).is_some());
        // Owned by someone, but not a controller: still armed.
        assert!(
            with(
                &|o| o["metadata"]["ownerReferences"] = json!([{"kind": "ConfigMap", "name": "x"}])
            )
            .is_none()
        );
    }

    #[test]
    fn a_flux_object_is_paused_on_itself_unless_someone_else_opted_it_out() {
        let p = Policy::embedded();
        let plan = plan(&obj(flux_labels(), json!({})), "apps", &p, "argocd");
        assert!(
            matches!(
                plan,
                Plan::Flux {
                    key: FLUX_RECONCILE,
                    ..
                }
            ),
            "{plan:?}"
        );
        let body = arm_patch(&plan, "INC-1", "2026-01-01T11:00:00Z", "42");
        assert_eq!(
            body,
            json!({"metadata": {"resourceVersion": "42",
                "annotations": {REASON: "INC-1", EXPIRES: "2026-01-01T11:00:00Z",
                                PAUSED: FLUX_RECONCILE, FLUX_RECONCILE: "disabled"},
                "labels": {LABEL: "true"}}})
        );

        let theirs = obj(flux_labels(), json!({FLUX_RECONCILE: "disabled"}));
        let plan = super::plan(&theirs, "apps", &p, "argocd");
        assert!(matches!(plan, Plan::AlreadyOptedOut { .. }), "{plan:?}");
        let body = arm_patch(&plan, "INC-1", "2026-01-01T11:00:00Z", "42");
        assert_eq!(
            body["metadata"]["annotations"],
            json!({REASON: "INC-1", EXPIRES: "2026-01-01T11:00:00Z"})
        );
        // Re-arming an object paused by driftguard keeps the pause its own.
        let ours = obj(
            flux_labels(),
            json!({FLUX_RECONCILE: "disabled", PAUSED: FLUX_RECONCILE}),
        );
        assert!(matches!(
            super::plan(&ours, "apps", &p, "argocd"),
            Plan::Flux { .. }
        ));

        let helm = obj(
            json!({"helm.toolkit.fluxcd.io/name": "web", "helm.toolkit.fluxcd.io/namespace": "db"}),
            json!({}),
        );
        assert!(matches!(
            super::plan(&helm, "apps", &p, "argocd"),
            Plan::Flux {
                key: HELM_DRIFT_DETECTION,
                ..
            }
        ));
    }

    #[test]
    fn an_argo_cd_object_pauses_its_application() {
        let p = Policy::embedded();
        let o = obj(
            json!({}),
            json!({"argocd.argoproj.io/tracking-id": "team-a_shop:apps/Deployment:prod/web"}),
        );
        assert_eq!(
            plan(&o, "apps", &p, "argocd"),
            Plan::ArgoCd {
                namespace: "team-a".into(),
                name: "shop".into(),
                entry: "apps/Deployment:prod/web".into()
            }
        );
        let o = obj(json!({"app.kubernetes.io/instance": "shop"}), json!({}));
        let Plan::ArgoCd { namespace, .. } = plan(&o, "apps", &p, "gitops") else {
            panic!("not Argo CD");
        };
        assert_eq!(namespace, "gitops");
        let body = arm_patch(&plan(&o, "apps", &p, "gitops"), "r", "t", "7");
        assert_eq!(body["metadata"]["annotations"][PAUSED], SKIP_RECONCILE);
        assert_eq!(body["metadata"]["annotations"].get(SKIP_RECONCILE), None);
        assert_eq!(
            plan(&obj(json!({}), json!({})), "apps", &p, "argocd"),
            Plan::Unmanaged
        );
    }

    #[test]
    fn ending_removes_what_arming_added() {
        let body = end_patch(
            &json!({PAUSED: FLUX_RECONCILE, FLUX_RECONCILE: "disabled"}),
            "9",
        );
        assert_eq!(
            body,
            json!({"metadata": {"resourceVersion": "9",
                "annotations": {REASON: null, EXPIRES: null, PAUSED: null, FLUX_RECONCILE: null},
                "labels": {LABEL: null}}})
        );
        // Someone else's opt-out, not named by the marker, stays.
        let body = end_patch(&json!({FLUX_RECONCILE: "disabled"}), "9");
        assert_eq!(body["metadata"]["annotations"].get(FLUX_RECONCILE), None);
        assert!(paused_application(&json!({PAUSED: SKIP_RECONCILE})));
        assert!(!paused_application(&json!({PAUSED: FLUX_RECONCILE})));
    }
}
