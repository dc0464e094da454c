//! What Flux's kustomize-controller re-applies from Git. It applies every
//! object of a Kustomization with server-side apply, forcing conflicts, as
//! field manager `kustomize-controller`: on the next reconcile a field in that
//! manager's Apply entry of managedFields is set back to Git's value, whatever
//! driftguard's ignore rules say, and a field outside it is left alone. Only
//! the Kustomization's own `spec.ignore` makes Flux keep a changed field (it
//! adopts the in-cluster value). So an ignore rule may not hide a change to a
//! field kustomize-controller owns: the user would be told "allowed" and see
//! the change vanish.
//!
//! A leaf of its managedFields that holds a map or a list is either atomic
//! (Git's whole value, re-applied whole) or a map or struct that Git left
//! empty (`resources: {}`, `annotations: {}`): server-side apply then owns
//! nothing inside, and what others add there stays. Without the schema, the
//! stored object tells them apart: an empty value, or fields inside owned by
//! another manager (impossible under an atomic field), mean Git left it empty.

use serde_json::Value;

use super::{atomic_maps, normalize};
use crate::deadline::{Deadline, Stopped};
use crate::policy::IgnoreRule;
use crate::policy::ignore::{
    FieldSet, Locator, entry_text, has_leaf_under, leaves_where, locate_leaves,
};
use crate::policy::overlap::PointerSet;

pub const KUSTOMIZE_CONTROLLER: &str = "kustomize-controller";

/// kustomize-controller's entry for applying the object itself: Apply, not
/// an Update or a subresource.
fn is_applied(entry: &Value) -> bool {
    entry_text(entry, "manager") == KUSTOMIZE_CONTROLLER
        && entry_text(entry, "operation") == "Apply"
        && entry_text(entry, "subresource").is_empty()
}

/// FieldsV1 leaves kustomize-controller owns in `obj` by applying it.
pub fn applied_leaves(obj: &Value, deadline: &Deadline) -> Result<FieldSet, Stopped> {
    leaves_where(obj, is_applied, deadline)
}

/// FieldsV1 leaves every other managedFields entry of `obj` owns.
fn other_leaves(obj: &Value, deadline: &Deadline) -> Result<FieldSet, Stopped> {
    leaves_where(obj, |e| !is_applied(e), deadline)
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
    deadline: &Deadline,
) -> Result<Vec<String>, Stopped> {
    let owned = applied_leaves(old, deadline)?;
    let shown: PointerSet = shown.iter().map(String::as_str).collect();
    let (mut in_old, mut in_new) = (Locator::new(deadline), Locator::new(deadline));
    // Raw values first: most writes change no owned field that a rule hides,
    // and only those that do are normalized again.
    let mut candidates: Vec<(&Vec<String>, String)> = Vec::new();
    for keys in &owned {
        deadline.checkpoint()?;
        let (before, after) = (in_old.leaf(keys, old)?, in_new.leaf(keys, new)?);
        if before.as_ref().map(|(_, v)| v) == after.as_ref().map(|(_, v)| v) {
            continue;
        }
        let Some((path, _)) = before.or(after) else {
            continue;
        };
        let pointer = path.to_pointer();
        if !shown.overlaps(&pointer) {
            candidates.push((keys, pointer));
        }
    }
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    // As Flux compares them: without its own ignored paths, empties as absent.
    let (old_f, new_f) =
        normalize::normalize_pair(old, new, flux_rules, &mut Vec::new(), deadline)?;
    let others = other_leaves(old, deadline)?;
    let (mut in_old, mut in_new) = (Locator::new(deadline), Locator::new(deadline));
    let (api_version, kind) = (
        old["apiVersion"].as_str().unwrap_or_default(),
        old["kind"].as_str().unwrap_or_default(),
    );
    let mut out = Vec::new();
    for (keys, pointer) in candidates {
        deadline.checkpoint()?;
        // Empty in the stored object: Git left it empty (or Flux keeps it).
        let Some((_, stored)) = in_old.leaf(keys, &old_f)? else {
            continue;
        };
        // A map owned as one leaf that the schema keeps key by key was
        // applied empty (`updateStrategy: {}`): Flux resets nothing in it.
        let left_empty = normalize::is_empty(stored)
            || ((stored.is_object() || stored.is_array()) && has_leaf_under(&others, keys))
            || (stored.is_object() && atomic_maps::is_granular(api_version, kind, &pointer));
        if !left_empty && Some(stored) != in_new.leaf(keys, &new_f)?.map(|(_, v)| v) {
            out.push(pointer);
        }
    }
    Ok(out)
}

/// Whether this write rewrites managedFields in a way [`hidden_reverts`]
/// reads: it takes fields away from kustomize-controller, or gives another
/// manager fields inside one of kustomize-controller's (which would make an
/// atomic field look left empty by Git), without changing those fields. A
/// field a write changes moves to its writer (the apiserver records that) and
/// is judged as that change; ownership moved without a change would make a
/// later change to the field look like one Flux keeps.
pub fn ownership_rewritten(old: &Value, new: &Value, deadline: &Deadline) -> Result<bool, Stopped> {
    let (applied, applied_new) = (
        applied_leaves(old, deadline)?,
        applied_leaves(new, deadline)?,
    );
    let (others, others_new) = (other_leaves(old, deadline)?, other_leaves(new, deadline)?);
    let dropped = applied.difference(&applied_new);
    // Given inside one of kustomize-controller's leaves: one of its
    // prefixes is such a leaf.
    let gained = others_new
        .difference(&others)
        .filter(|k| (1..k.len()).any(|n| applied.contains(&k[..n])));
    let moved: Vec<&Vec<String>> = dropped.chain(gained).collect();
    if moved.is_empty() {
        return Ok(false);
    }
    let (old_n, new_n) = normalize::normalize_pair(old, new, &[], &mut Vec::new(), deadline)?;
    let (mut in_old, mut in_new) = (Locator::new(deadline), Locator::new(deadline));
    for keys in moved {
        deadline.checkpoint()?;
        if in_old.leaf(keys, &old_n)?.map(|(_, v)| v) == in_new.leaf(keys, &new_n)?.map(|(_, v)| v)
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Managers whose fields kustomize-controller takes over before each apply
/// (v1.9.6 `applyOpts.Cleanup.FieldManagers`, matched as prefixes, Apply or
/// Update, never a subresource): `kubectl apply`, `kubectl edit`, `patch`,
/// `label`, `annotate`, `set`... write as `kubectl` or `kubectl-<verb>`.
const CLEANED_UP: [&str; 2] = ["kubectl", "before-first-apply"];

fn is_cleaned_up(entry: &Value) -> bool {
    let manager = entry_text(entry, "manager");
    CLEANED_UP.iter().any(|p| manager.starts_with(p))
        && matches!(entry_text(entry, "operation"), "Apply" | "Update")
        && entry_text(entry, "subresource").is_empty()
}

/// Pointers of the fields this write changes that `shown` does not name and
/// that a `kubectl*` field manager owns afterwards: Flux's next reconcile
/// takes them over and applies Git, so a field Git does not set is removed
/// and one it sets is reset, whatever an ignore rule says. Written with
/// another field manager, a field Git does not set stays (and an ignore rule
/// then rightly allows it). `flux_rules` are the Kustomization's own rules.
pub fn cleaned_up(
    old: &Value,
    new: &Value,
    shown: &[String],
    flux_rules: &[&IgnoreRule],
    deadline: &Deadline,
) -> Result<Vec<String>, Stopped> {
    let leaves = leaves_where(new, is_cleaned_up, deadline)?;
    let kubectl_owned: PointerSet = locate_leaves(&leaves, new, deadline)?
        .iter()
        .map(|p| p.to_pointer())
        .collect();
    if kubectl_owned.is_empty() {
        return Ok(Vec::new());
    }
    let shown: PointerSet = shown.iter().map(String::as_str).collect();
    let (old_f, new_f) =
        normalize::normalize_pair(old, new, flux_rules, &mut Vec::new(), deadline)?;
    let mut out = Vec::new();
    for p in normalize::drifted_paths(&old_f, &new_f, deadline)? {
        deadline.checkpoint()?;
        if !p.starts_with(MANAGED_FIELDS) && !shown.overlaps(&p) && kubectl_owned.overlaps(&p) {
            out.push(p);
        }
    }
    Ok(out)
}

const MANAGED_FIELDS: &str = "/metadata/managedFields";

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
        assert_eq!(
            hidden_reverts(&old, &new, &[], &[], &Deadline::none()).unwrap(),
            ["/spec/replicas"]
        );
        // Already a drifted path (no rule hid it): nothing to add.
        let shown = ["/spec/replicas".to_owned()];
        assert!(
            hidden_reverts(&old, &new, &shown, &[], &Deadline::none())
                .unwrap()
                .is_empty()
        );
        let image = deployment(2, "web:2");
        assert_eq!(
            hidden_reverts(&old, &image, &[], &[], &Deadline::none()).unwrap(),
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
        assert!(
            hidden_reverts(&old, &new, &[], &[], &Deadline::none())
                .unwrap()
                .is_empty()
        );
        // Owned by kustomize-controller through Update (before SSA): not re-applied.
        let mut update = deployment(2, "web:1");
        update["metadata"]["managedFields"][0]["operation"] = json!("Update");
        let scaled = with_replicas(&update, 5);
        assert!(
            hidden_reverts(&update, &scaled, &[], &[], &Deadline::none())
                .unwrap()
                .is_empty()
        );
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
        assert!(
            hidden_reverts(&old, &new, &[], &[&rule], &Deadline::none())
                .unwrap()
                .is_empty()
        );
    }

    /// `web`'s container as Git wrote it: `resources: {}` (a struct left
    /// empty) and `command` (an atomic list), with `fields` of others.
    fn with_container(resources: Value, command: Value, others: Value) -> Value {
        let mut d = deployment(2, "web:1");
        let fields = &mut d["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:template"]["f:spec"]
            ["f:containers"]["k:{\"name\":\"web\"}"];
        fields["f:resources"] = json!({});
        fields["f:command"] = json!({});
        let container = &mut d["spec"]["template"]["spec"]["containers"][0];
        container["resources"] = resources;
        container["command"] = command;
        d["metadata"]["managedFields"].as_array_mut().unwrap().push(
            json!({"manager": "kubectl-set", "operation": "Update", "apiVersion": "apps/v1",
                         "fieldsType": "FieldsV1", "fieldsV1": others}),
        );
        d
    }

    #[test]
    fn what_others_add_where_git_left_a_map_empty_is_kept_an_atomic_list_is_not() {
        let limits = json!({"limits": {"cpu": "1"}});
        let owns_limits = json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
            "k:{\"name\":\"web\"}": {"f:resources": {"f:limits": {"f:cpu": {}}}}}}}}});
        // `kubectl set resources` on `resources: {}`, first and second time.
        let git = with_container(json!({}), json!(["serve"]), json!({}));
        let set = with_container(limits.clone(), json!(["serve"]), owns_limits.clone());
        assert!(
            hidden_reverts(&git, &set, &[], &[], &Deadline::none())
                .unwrap()
                .is_empty()
        );
        let again = with_container(
            json!({"limits": {"cpu": "2"}}),
            json!(["serve"]),
            owns_limits.clone(),
        );
        assert!(
            hidden_reverts(&set, &again, &[], &[], &Deadline::none())
                .unwrap()
                .is_empty()
        );
        // An atomic list is Git's whole value.
        let command = with_container(json!({}), json!(["debug"]), json!({}));
        assert_eq!(
            hidden_reverts(&git, &command, &[], &[], &Deadline::none()).unwrap(),
            ["/spec/template/spec/containers/0/command"]
        );
        // A manual write claiming for another manager what is inside the atomic
        // list (so that it looks left empty by Git) changes ownership, not the list.
        let forged = with_container(
            json!({}),
            json!(["serve"]),
            json!({"f:spec": {"f:template": {"f:spec": {
            "f:containers": {"k:{\"name\":\"web\"}": {"f:command": {"v:\"serve\"": {}}}}}}}}),
        );
        assert!(ownership_rewritten(&git, &forged, &Deadline::none()).unwrap());
        // The apiserver recording `kubectl set resources` is not a rewrite.
        assert!(!ownership_rewritten(&git, &set, &Deadline::none()).unwrap());
    }

    fn with_replicas(obj: &Value, replicas: i64) -> Value {
        let mut out = obj.clone();
        out["spec"]["replicas"] = json!(replicas);
        out
    }

    /// `old` with annotation `example.com/note` added by `manager` (Update).
    fn annotated_by(old: &Value, manager: &str, subresource: Option<&str>) -> Value {
        let mut new = old.clone();
        new["metadata"]["annotations"] = json!({"example.com/note": "by hand"});
        let mut entry = json!({"manager": manager, "operation": "Update", "apiVersion": "apps/v1",
            "time": "2026-11-29T10:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:example.com/note": {}}}}});
        if let Some(sub) = subresource {
            entry["subresource"] = json!(sub);
        }
        new["metadata"]["managedFields"]
            .as_array_mut()
            .unwrap()
            .push(entry);
        new
    }

    #[test]
    fn what_kubectl_writes_is_cleaned_up_and_other_managers_keep_theirs() {
        let old = deployment(2, "web:1");
        for manager in [
            "kubectl-annotate",
            "kubectl-edit",
            "kubectl",
            "before-first-apply",
        ] {
            let new = annotated_by(&old, manager, None);
            assert_eq!(
                cleaned_up(&old, &new, &[], &[], &Deadline::none()).unwrap(),
                ["/metadata/annotations"],
                "{manager}"
            );
            // Already shown as drift: nothing to add.
            let shown = ["/metadata/annotations".to_owned()];
            assert!(
                cleaned_up(&old, &new, &shown, &[], &Deadline::none())
                    .unwrap()
                    .is_empty()
            );
        }
        for (manager, sub) in [
            ("mesh-injector", None),
            ("kubectl-annotate", Some("status")),
        ] {
            let new = annotated_by(&old, manager, sub);
            assert!(
                cleaned_up(&old, &new, &[], &[], &Deadline::none())
                    .unwrap()
                    .is_empty(),
                "{manager}"
            );
        }
    }

    #[test]
    fn dropping_ownership_without_a_change_is_detected() {
        let old = deployment(2, "web:1");
        let mut disowned = old.clone();
        disowned["metadata"]["managedFields"]
            .as_array_mut()
            .unwrap()
            .remove(0);
        assert!(ownership_rewritten(&old, &disowned, &Deadline::none()).unwrap());
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
        assert!(!ownership_rewritten(&old, &scaled, &Deadline::none()).unwrap());
        // Growing it is not a drop either.
        assert!(!ownership_rewritten(&disowned, &old, &Deadline::none()).unwrap());
        assert!(!ownership_rewritten(&old, &old, &Deadline::none()).unwrap());
    }
}
