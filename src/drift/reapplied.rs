//! What Flux's kustomize-controller re-applies from Git. It applies every
//! object of a Kustomization with server-side apply, forcing conflicts, as
//! field manager `kustomize-controller`: on the next reconcile a field in that
//! manager's Apply entry of managedFields is set back to Git's value, whatever
//! driftguard's ignore rules say, and a field outside it is left alone. Only
//! the Kustomization's own `spec.ignore` makes Flux keep a changed field (it
//! adopts the in-cluster value). So an ignore rule may not hide a change to a
//! field kustomize-controller owns: the user would be told "allowed" and see
//! the change vanish.

use serde_json::Value;

use super::normalize;
use crate::policy::IgnoreRule;
use crate::policy::ignore::{FieldSet, entry_text, leaves_where, locate_leaf};
use crate::policy::path::is_under;

pub const KUSTOMIZE_CONTROLLER: &str = "kustomize-controller";

/// FieldsV1 leaves kustomize-controller owns in `obj` by applying the object
/// itself: its Apply entry, not an Update or a subresource entry.
pub fn applied_leaves(obj: &Value) -> FieldSet {
    leaves_where(obj, |e| {
        entry_text(e, "manager") == KUSTOMIZE_CONTROLLER
            && entry_text(e, "operation") == "Apply"
            && entry_text(e, "subresource").is_empty()
    })
}

/// Pointers of the fields kustomize-controller owns in `old` that this write
/// changes and that `shown` (the drifted paths so far) does not name: an
/// ignore rule hid them, and Flux will revert them. `flux_rules` are the
/// Kustomization's own ignore rules, whose paths Flux keeps.
pub fn hidden_reverts(
    old: &Value,
    new: &Value,
    shown: &[String],
    flux_rules: &[&IgnoreRule],
) -> Vec<String> {
    let owned = applied_leaves(old);
    // Raw values first: most writes change no owned field that a rule hides,
    // and only those that do are normalized again.
    let candidates: Vec<(&Vec<String>, String)> = owned
        .iter()
        .filter_map(|keys| {
            let (before, after) = (locate_leaf(keys, old), locate_leaf(keys, new));
            if before.as_ref().map(|(_, v)| v) == after.as_ref().map(|(_, v)| v) {
                return None;
            }
            let pointer = before.or(after)?.0.to_pointer();
            let named = shown
                .iter()
                .any(|q| is_under(&pointer, q) || is_under(q, &pointer));
            (!named).then_some((keys, pointer))
        })
        .collect();
    if candidates.is_empty() {
        return Vec::new();
    }
    // As Flux compares them: without its own ignored paths, empties as absent.
    let (old_f, new_f) = normalize::normalize_pair(old, new, flux_rules, &mut Vec::new());
    candidates
        .into_iter()
        .filter(|(keys, _)| value(keys, &old_f) != value(keys, &new_f))
        .map(|(_, pointer)| pointer)
        .collect()
}

/// Whether this write takes fields away from kustomize-controller without
/// changing them, i.e. rewrites managedFields. A field a write changes moves
/// to its writer (the apiserver records that) and is judged as a change; one
/// dropped unchanged would make a later change to it look unowned.
pub fn ownership_dropped(old: &Value, new: &Value) -> bool {
    let after = applied_leaves(new);
    let dropped: Vec<Vec<String>> = applied_leaves(old).difference(&after).cloned().collect();
    if dropped.is_empty() {
        return false;
    }
    let (old_n, new_n) = normalize::normalize_pair(old, new, &[], &mut Vec::new());
    dropped
        .iter()
        .any(|keys| value(keys, &old_n) == value(keys, &new_n))
}

fn value<'a>(keys: &[String], obj: &'a Value) -> Option<&'a Value> {
    locate_leaf(keys, obj).map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A Deployment as kustomize-controller v1.9.6 leaves it: its Apply entry
    /// owns what Git sets, kube-controller-manager's Update entry the rest.
    fn deployment(replicas: i64, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "apps",
                "labels": {"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"},
                "managedFields": [
                    {"manager": "kustomize-controller", "operation": "Apply", "apiVersion": "apps/v1",
                     "time": "2026-11-29T09:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {
                        "f:metadata": {"f:labels": {"f:kustomize.toolkit.fluxcd.io/name": {}, "f:kustomize.toolkit.fluxcd.io/namespace": {}}},
                        "f:spec": {"f:replicas": {}, "f:selector": {}, "f:template": {
                            "f:metadata": {"f:labels": {"f:app": {}}},
                            "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}}},
                    {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "apps/v1",
                     "time": "2026-11-29T09:00:01Z", "fieldsType": "FieldsV1", "subresource": "status",
                     "fieldsV1": {"f:status": {"f:replicas": {}}}}
                ]},
            "spec": {"replicas": replicas, "paused": false, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": image}]}}}
        })
    }

    #[test]
    fn an_owned_change_not_shown_is_reverted() {
        let (old, new) = (deployment(2, "web:1"), deployment(5, "web:1"));
        assert_eq!(hidden_reverts(&old, &new, &[], &[]), ["/spec/replicas"]);
        // Already a drifted path (no rule hid it): nothing to add.
        let shown = ["/spec/replicas".to_owned()];
        assert!(hidden_reverts(&old, &new, &shown, &[]).is_empty());
        let image = deployment(2, "web:2");
        assert_eq!(
            hidden_reverts(&old, &image, &[], &[]),
            ["/spec/template/spec/containers/0/image"]
        );
    }

    #[test]
    fn a_field_kustomize_controller_does_not_own_is_left_to_the_rules() {
        let old = deployment(2, "web:1");
        let mut new = old.clone();
        new["spec"]["paused"] = json!(true);
        new["spec"]["template"]["spec"]["containers"][0]["env"] =
            json!([{"name": "A", "value": "1"}]);
        assert!(hidden_reverts(&old, &new, &[], &[]).is_empty());
        // Owned by kustomize-controller through Update (before SSA): not re-applied.
        let mut update = deployment(2, "web:1");
        update["metadata"]["managedFields"][0]["operation"] = json!("Update");
        let scaled = with_replicas(&update, 5);
        assert!(hidden_reverts(&update, &scaled, &[], &[]).is_empty());
    }

    #[test]
    fn the_kustomizations_own_ignore_rules_keep_the_change() {
        let rule = IgnoreRule::from_flux(
            "apps",
            "Deployment",
            &["/spec/replicas".to_owned()],
            "Kustomization flux-system/apps ignore[0]".into(),
        )
        .unwrap();
        let (old, new) = (deployment(2, "web:1"), deployment(5, "web:1"));
        assert!(hidden_reverts(&old, &new, &[], &[&rule]).is_empty());
    }

    fn with_replicas(obj: &Value, replicas: i64) -> Value {
        let mut out = obj.clone();
        out["spec"]["replicas"] = json!(replicas);
        out
    }

    #[test]
    fn dropping_ownership_without_a_change_is_detected() {
        let old = deployment(2, "web:1");
        let mut disowned = old.clone();
        disowned["metadata"]["managedFields"]
            .as_array_mut()
            .unwrap()
            .remove(0);
        assert!(ownership_dropped(&old, &disowned));
        // The apiserver moving a changed field to its writer is not a drop.
        let mut scaled = with_replicas(&old, 5);
        scaled["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]
            .as_object_mut()
            .unwrap()
            .remove("f:replicas");
        scaled["metadata"]["managedFields"]
            .as_array_mut()
            .unwrap()
            .push(json!({"manager": "kubectl", "operation": "Update", "apiVersion": "apps/v1",
                         "fieldsType": "FieldsV1", "subresource": "scale", "fieldsV1": {"f:spec": {"f:replicas": {}}}}));
        assert!(!ownership_dropped(&old, &scaled));
        // Growing it is not a drop either.
        assert!(!ownership_dropped(&disowned, &old));
        assert!(!ownership_dropped(&old, &old));
    }
}
