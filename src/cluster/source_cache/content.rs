//! What driftguard reads of a watched object: its content's hash, the
//! argocd-cm keys, and the object stripped of everything else.

use std::hash::{Hash, Hasher};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::DynamicObject;
use serde_json::Value;

use crate::drift::ownership::ARGOCD_CM_INSTALLATION_ID;
use crate::policy::argocd::{INSTANCE_LABEL_KEY, TRACKING_METHOD_KEY};
use crate::policy::impersonation;

/// What driftguard reads of a watched object: its name, namespace, controller
/// owner (an Application's ApplicationSet, named in denials) and spec.
/// Status, annotations and managedFields never change a decision.
pub(crate) fn content_hash(object: &DynamicObject) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    object.metadata.name.hash(&mut h);
    object.metadata.namespace.hash(&mut h);
    for r in object.metadata.owner_references.iter().flatten() {
        if r.controller == Some(true) {
            (&r.api_version, &r.kind, &r.name).hash(&mut h);
        }
    }
    hash_value(object.data.get("spec").unwrap_or(&Value::Null), &mut h);
    h.finish()
}

/// The argocd-cm keys driftguard reads, and their values.
pub(super) fn cm_data(cm: Option<&ConfigMap>) -> serde_json::Map<String, Value> {
    cm.and_then(|cm| cm.data.as_ref())
        .into_iter()
        .flatten()
        .filter(|(k, _)| {
            k.starts_with("resource.customizations.ignoreDifferences.")
                || k.as_str() == impersonation::ENABLED_KEY
                || k.as_str() == ARGOCD_CM_INSTALLATION_ID
                || k.as_str() == INSTANCE_LABEL_KEY
                || k.as_str() == TRACKING_METHOD_KEY
        })
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

/// Hashes JSON without serializing it.
pub(super) fn hash_value(value: &Value, h: &mut impl Hasher) {
    match value {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => (1u8, b).hash(h),
        Value::Number(n) => (2u8, n.to_string()).hash(h),
        Value::String(s) => (3u8, s).hash(h),
        Value::Array(items) => {
            (4u8, items.len()).hash(h);
            items.iter().for_each(|v| hash_value(v, h));
        }
        Value::Object(map) => {
            (5u8, map.len()).hash(h);
            for (k, v) in map {
                k.hash(h);
                hash_value(v, h);
            }
        }
    }
}

/// The object as JSON, for the readers in [`sources`].
pub(super) fn to_value(object: &DynamicObject) -> Option<Value> {
    serde_json::to_value(object).ok()
}

/// Drops what driftguard never reads before an object is held or hashed.
pub fn strip(object: &mut DynamicObject) {
    object.metadata.managed_fields = None;
    if let Some(data) = object.data.as_object_mut() {
        let status = data.remove("status");
        data.remove("operation");
        // All but the objects the tools list ([`planned`]), by identity only.
        if let Some(kept) = status.as_ref().and_then(listed_objects) {
            data.insert("status".into(), kept);
        }
    }
}

/// [`strip`] for an Application of another cluster, of which nothing is
/// read ([`super::foreign`]): its status is dropped whole, never copied.
pub(crate) fn strip_foreign(object: &mut DynamicObject) {
    object.metadata.managed_fields = None;
    if let Some(data) = object.data.as_object_mut() {
        data.remove("status");
        data.remove("operation");
    }
}

/// An Application's `status.resources` (group, kind, namespace and name of
/// each) and a Kustomization's `status.inventory`, without the rest.
pub(super) fn listed_objects(status: &Value) -> Option<Value> {
    let mut kept = serde_json::Map::new();
    if let Some(resources) = status.get("resources").and_then(Value::as_array) {
        let identity = |r: &Value| {
            ["group", "kind", "namespace", "name"]
                .into_iter()
                .filter_map(|k| r.get(k).map(|v| (k.to_owned(), v.clone())))
                .collect::<serde_json::Map<_, _>>()
        };
        let list = resources.iter().map(|r| Value::Object(identity(r)));
        kept.insert("resources".into(), list.collect());
    }
    if let Some(inventory) = status.get("inventory") {
        kept.insert("inventory".into(), inventory.clone());
    }
    (!kept.is_empty()).then_some(Value::Object(kept))
}
