//! Normalize the stored and the incoming object identically, then diff them.

use serde_json::Value;

use super::breakglass;
use crate::policy::jq::JqInput;
use crate::policy::path;
use crate::policy::{IgnoreRule, RuleFailure};

/// The annotation the mutating webhook writes in warn mode.
pub const DRIFT_ANNOTATION: &str = "driftguard.io/drift";

/// Set by the apiserver, or by driftguard itself: never a user's change.
const SERVER_METADATA: [&str; 7] = [
    "resourceVersion",
    "generation",
    "managedFields",
    "uid",
    "creationTimestamp",
    "selfLink",
    "deletionGracePeriodSeconds",
];
/// Records of a write, not state: `last-applied-configuration` only mirrors the
/// fields that are diffed directly, and driftguard's own annotations are its
/// bookkeeping (break-glass is judged on its own).
const BOOKKEEPING_ANNOTATIONS: [&str; 4] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    DRIFT_ANNOTATION,
    breakglass::REASON,
    breakglass::EXPIRES,
];

/// Both objects without server-managed fields and ignored paths, with empty
/// maps, empty lists and nulls removed (Kubernetes serializes them like absent
/// fields). Rules see the objects already without status, managedFields and the
/// other server fields: driftguard never diffs them, and jq's input is half the
/// size.
pub fn normalize_pair(
    old: &Value,
    new: &Value,
    rules: &[&IgnoreRule],
    failures: &mut Vec<RuleFailure>,
) -> (Value, Value) {
    let mut old_n = normalized_copy(old);
    let mut new_n = normalized_copy(new);
    let (mut old_paths, mut new_paths) = (Vec::new(), Vec::new());
    {
        let (old_in, new_in) = (JqInput::new(&old_n), JqInput::new(&new_n));
        for rule in rules {
            // The originals: normalizing dropped managedFields.
            let (o, n) = rule.paths_pair(&old_in, &new_in, Some((old, new)), failures);
            old_paths.extend(o);
            new_paths.extend(n);
        }
    }
    path::remove_all_pruning(&mut old_n, old_paths);
    path::remove_all_pruning(&mut new_n, new_paths);
    (old_n, new_n)
}

/// A copy of `obj` without `status`, server metadata and bookkeeping
/// annotations, and without nulls, `{}` and `[]` in objects. Cloning a map is a
/// bulk copy, so copying first and pruning in place beats filtering per member.
fn normalized_copy(obj: &Value) -> Value {
    let mut out = match obj.as_object() {
        // status and managedFields are often half the object: never copy them.
        Some(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| *k != "status")
                .map(|(k, v)| match (k.as_str(), v.as_object()) {
                    ("metadata", Some(meta)) => {
                        let meta = meta.iter().filter(|(mk, _)| *mk != "managedFields");
                        (
                            k.clone(),
                            Value::Object(meta.map(|(mk, mv)| (mk.clone(), mv.clone())).collect()),
                        )
                    }
                    _ => (k.clone(), v.clone()),
                })
                .collect(),
        ),
        None => obj.clone(),
    };
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in SERVER_METADATA {
            meta.remove(key);
        }
        if let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            for key in BOOKKEEPING_ANNOTATIONS {
                annotations.remove(key);
            }
        }
    }
    prune_empty(&mut out);
    out
}

/// Removes nulls, `{}` and `[]` from objects, bottom-up. Array elements stay:
/// their positions carry meaning.
fn prune_empty(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let mut any_empty = false;
            for v in map.values_mut() {
                prune_empty(v);
                any_empty |= is_empty(v);
            }
            // Empties are rare; a read-only pass is much cheaper than `retain`.
            if any_empty {
                map.retain(|_, v| !is_empty(v));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(prune_empty),
        _ => {}
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// RFC 6901 pointers of everything that differs between two normalized objects.
pub fn drifted_paths(old: &Value, new: &Value) -> Vec<String> {
    json_patch::diff(old, new)
        .0
        .iter()
        .map(|op| op.path().to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn empty_annotations_equal_absent() {
        let old = json!({"spec": {"template": {"metadata": {"labels": {"a": "b"}}}}});
        let new =
            json!({"spec": {"template": {"metadata": {"labels": {"a": "b"}, "annotations": {}}}}});
        assert_eq!(
            drifted_paths(&normalized_copy(&old), &normalized_copy(&new)),
            Vec::<String>::new()
        );
    }

    #[test]
    fn removing_the_last_ignored_key_leaves_no_empty_map() {
        let rule = crate::policy::IgnoreRule::compile(
            &crate::policy::schema::IgnoreDifference {
                group: "*".into(),
                kind: "*".into(),
                json_pointers: vec!["/spec/template/metadata/annotations/restartedAt".into()],
                ..Default::default()
            },
            "t".into(),
        )
        .unwrap();
        let obj = json!({"spec": {"template": {"metadata": {"annotations": {"restartedAt": "now"}}}, "x": [{}]}});
        let (out, _) = normalize_pair(&obj, &obj, &[&rule], &mut Vec::new());
        assert_eq!(out, json!({"spec": {"x": [{}]}}));
    }

    #[test]
    fn normalization_is_idempotent_and_strips_server_fields() {
        let obj = json!({"metadata": {"name": "a", "resourceVersion": "1", "generation": 2, "uid": "u",
                         "managedFields": [{}], "annotations": {"driftguard.io/drift": "x"}},
                         "spec": {"x": null, "y": []}, "status": {"ready": 1}});
        let (once, _) = normalize_pair(&obj, &obj, &[], &mut Vec::new());
        assert_eq!(once, json!({"metadata": {"name": "a"}}));
        assert_eq!(normalize_pair(&once, &once, &[], &mut Vec::new()).0, once);
    }
}
