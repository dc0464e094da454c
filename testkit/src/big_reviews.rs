//! The costliest reviews by number of drifted paths, for tests/budgets.rs and
//! the decision bench (as scripts/gen-big-reviews.py configmap-patch writes
//! them): `kubectl patch` adding `n` keys to a ConfigMap that Flux's
//! kustomize-controller or Argo CD applies. On Flux every key is also checked
//! against what kubectl owns.

use serde_json::{Value, json};

pub const UID: &str = "5b1a7f2e-9f7c-4d8e-8a51-2f4c1d9e0a11";

pub fn configmap_patch(n: usize, flux: bool) -> Vec<u8> {
    let (metadata, applied) = if flux {
        (
            json!({"labels": {"kustomize.toolkit.fluxcd.io/name": "apps",
                              "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}}),
            json!({"manager": "kustomize-controller", "operation": "Apply", "apiVersion": "v1",
                   "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:LOG_LEVEL": {}}, "f:metadata": {
                       "f:labels": {"f:kustomize.toolkit.fluxcd.io/name": {},
                                    "f:kustomize.toolkit.fluxcd.io/namespace": {}}}}}),
        )
    } else {
        (
            json!({"annotations": {"argocd.argoproj.io/tracking-id": "myapp:/ConfigMap:production/settings"}}),
            json!({"manager": "argocd-controller", "operation": "Apply", "apiVersion": "v1",
                   "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:LOG_LEVEL": {}}, "f:metadata": {
                       "f:annotations": {"f:argocd.argoproj.io/tracking-id": {}}}}}),
        )
    };
    let mut old = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "production", "uid": "u-1", "resourceVersion": "42",
                     "managedFields": [applied]},
        "data": {"LOG_LEVEL": "info"}
    });
    for (k, v) in metadata.as_object().unwrap() {
        old["metadata"][k] = v.clone();
    }
    let mut new = old.clone();
    let mut owned = serde_json::Map::new();
    for i in 0..n {
        new["data"][format!("key-{i:06}")] = json!(format!("value-{i:06}"));
        owned.insert(format!("f:key-{i:06}"), json!({}));
    }
    new["metadata"]["managedFields"]
        .as_array_mut()
        .unwrap()
        .push(
            json!({"manager": "kubectl-patch", "operation": "Update", "apiVersion": "v1",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:data": owned}}),
        );
    let gvk = json!({"group": "", "version": "v1", "kind": "ConfigMap"});
    let gvr = json!({"group": "", "version": "v1", "resource": "configmaps"});
    let review: Value = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": UID, "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": "settings", "namespace": "production", "operation": "UPDATE",
        "userInfo": {"username": "alice", "groups": ["developers", "system:authenticated"]},
        "dryRun": false, "object": new, "oldObject": old}});
    serde_json::to_vec(&review).unwrap()
}
