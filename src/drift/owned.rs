//! `precision: ownedFields`: only changes to fields the GitOps tool owns are
//! drift. Under server-side apply those are the fields of its field manager in
//! the stored object's managedFields; under client-side apply, the fields of
//! `kubectl.kubernetes.io/last-applied-configuration`. Anything else is what
//! Argo CD or Flux would not revert either.

use serde_json::Value;

use std::collections::{BTreeSet, HashMap, HashSet};

use super::atomic_maps;
use crate::deadline::{Deadline, Stopped};
use crate::policy::ignore::{
    FieldSet, Locator, entry_text, has_leaf_under, leaves_where, locate_leaves, owned_leaves,
};
use crate::policy::overlap::PointerSet;
use crate::policy::path::{Path, escape};

/// The field managers of Argo CD and Flux under server-side apply.
pub const GITOPS_MANAGERS: [&str; 3] = [
    "argocd-controller",
    "kustomize-controller",
    "helm-controller",
];

pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Whether `new` gives the GitOps tools' managers a field they did not own
/// in `old`. A map they owned keys of, left owning only itself (`"."`) when
/// another writer took its last key, is not a new field: owning the map
/// removes none of its keys at the next apply.
pub fn tool_ownership_grown(
    old: &Value,
    new: &Value,
    deadline: &Deadline,
) -> Result<bool, Stopped> {
    // Most writes leave the tools' entries as they were: skip the leaf sets.
    fn tool_entries(o: &Value) -> Vec<Option<&Value>> {
        o.get("metadata")
            .and_then(|m| m.get("managedFields"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|e| GITOPS_MANAGERS.contains(&entry_text(e, "manager")))
            .map(|e| e.get("fieldsV1"))
            .collect()
    }
    if tool_entries(old) == tool_entries(new) {
        return Ok(false);
    }
    let (before, after) = (
        owned_leaves(old, &GITOPS_MANAGERS, deadline)?,
        owned_leaves(new, &GITOPS_MANAGERS, deadline)?,
    );
    for leaf in &after {
        deadline.checkpoint()?;
        if !before.contains(leaf) && !has_leaf_under(&before, leaf) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The last-applied annotation's pointer, when this write changes what it
/// says (parsed: re-serializing it the same way is no change).
pub fn last_applied_changed(old: &Value, new: &Value) -> Option<String> {
    fn raw(o: &Value) -> Option<&Value> {
        o.get("metadata")?.get("annotations")?.get(LAST_APPLIED)
    }
    let (old, new) = (raw(old), raw(new));
    // Most writes leave it as it was: the same text needs no parse.
    if old == new {
        return None;
    }
    let read = |text: Option<&Value>| {
        let text = text?;
        Some(
            text.as_str()
                .and_then(|t| serde_json::from_str::<Value>(t).ok())
                .unwrap_or_else(|| text.clone()),
        )
    };
    (read(old) != read(new)).then(|| format!("/metadata/annotations/{}", escape(LAST_APPLIED)))
}

/// What the GitOps tool owns in an object.
#[derive(Debug, Default)]
pub struct Owned {
    /// Fields owned with everything in them.
    whole: PointerSet,
    /// Maps owned only as present: applied empty where the schema keeps keys
    /// apart ([`atomic_maps::is_granular`]), so what the apiserver defaulted
    /// in them is no one's. Flux applies a StatefulSet's `updateStrategy: {}`
    /// (Go's zero value), and its next apply resets nothing inside.
    presence: PointerSet,
    /// The managedFields leaves among `whole` that sit in a keyed list entry
    /// (`k:{"containerPort":8080}`), by their pointer in the stored object.
    /// The tools compare such an entry by its key, wherever it is in the
    /// list: a write that inserts another entry before it moves it, and the
    /// diff by position then shows it changed although it is not.
    keyed: HashMap<String, Vec<String>>,
}

impl Owned {
    /// Whether a change at `pointer`, from `old` to `new`, changes something
    /// owned: an owned field, something in one or containing one (an owned
    /// keyed entry only if its value by key changed), or the presence of an
    /// owned map.
    fn touches<'a>(
        &self,
        pointer: &str,
        (old, new): (&'a Value, &'a Value),
        (in_old, in_new): (&mut Locator<'a>, &mut Locator<'a>),
    ) -> Result<bool, Stopped> {
        for owned in self.whole.overlapping(pointer) {
            let changed = match self.keyed.get(owned) {
                None => true,
                Some(keys) => {
                    in_old.leaf(keys, old)?.map(|(_, v)| v)
                        != in_new.leaf(keys, new)?.map(|(_, v)| v)
                }
            };
            if changed {
                return Ok(true);
            }
        }
        Ok(self.presence.contains(pointer) || self.presence.has_below(pointer))
    }

    /// A managedFields leaf, located in `stored`.
    fn insert_leaf<'a>(
        &mut self,
        stored: &'a Value,
        keys: &[String],
        locator: &mut Locator<'a>,
    ) -> Result<(), Stopped> {
        let Some((path, _)) = locator.leaf(keys, stored)? else {
            return Ok(());
        };
        let pointer = path.to_pointer();
        if keys.iter().any(|k| k.starts_with("k:")) {
            self.keyed.insert(pointer.clone(), keys.to_vec());
        }
        self.insert(stored, pointer);
        Ok(())
    }

    fn insert(&mut self, stored: &Value, pointer: String) {
        let (api_version, kind) = (
            stored["apiVersion"].as_str().unwrap_or_default(),
            stored["kind"].as_str().unwrap_or_default(),
        );
        let non_empty_map = stored
            .pointer(&pointer)
            .and_then(Value::as_object)
            .is_some_and(|m| !m.is_empty());
        if non_empty_map && atomic_maps::is_granular(api_version, kind, &pointer) {
            self.presence.insert(pointer);
        } else {
            self.whole.insert(pointer);
        }
    }
}

/// The fields the GitOps tool owns in `stored`.
/// An Update entry (client-side apply, `kubectl apply` as Argo CD does it by
/// default) also owns what the apiserver defaulted on create, which the tool
/// never compares: where the last-applied annotation exists, it and the Apply
/// entries say what the tool owns; elsewhere every entry of its managers does.
/// The switch is the annotation alone, which a manual write may not add
/// ([`ownership_taken`]); never an entry a client-chosen fieldManager writes.
/// Without `record_counts` (an Argo CD Application under Server-Side Diff,
/// which syncs by server-side apply) the annotation is not read.
pub fn owned_pointers(
    stored: &Value,
    record_counts: bool,
    deadline: &Deadline,
) -> Result<Owned, Stopped> {
    let mut owned = Owned::default();
    let mut locator = Locator::new(deadline);
    let Some(applied) = last_applied(stored).filter(|_| record_counts) else {
        for keys in &owned_leaves(stored, &GITOPS_MANAGERS, deadline)? {
            deadline.checkpoint()?;
            owned.insert_leaf(stored, keys, &mut locator)?;
        }
        return Ok(owned);
    };
    let applied_entries = leaves_where(
        stored,
        |e| {
            GITOPS_MANAGERS.contains(&entry_text(e, "manager"))
                && entry_text(e, "operation") == "Apply"
        },
        deadline,
    )?;
    for keys in &applied_entries {
        deadline.checkpoint()?;
        owned.insert_leaf(stored, keys, &mut locator)?;
    }
    let mut declared = Vec::new();
    leaves(&applied, &mut String::new(), &mut declared, deadline)?;
    // A list or map Git declares that the apiserver keeps whole (atomic: a
    // container's args, a Role's rules, a LabelSelector, a custom resource's
    // lists) is one value to Argo CD's client-side diff: an entry or key
    // added by hand is a change to it. A built-in kind's atomic maps are read
    // from its schema, which no write moves; lists, and a custom resource's
    // maps, from managedFields, which show such a value as one leaf, in
    // whichever entry holds it (Argo CD writes RBAC objects under another
    // manager than `argocd-controller`). A keyed list's entries and a granular
    // map's keys stay apart (what the apiserver defaulted in them is not Git's).
    let declared: BTreeSet<String> = declared.into_iter().collect();
    let declares_below = |p: &str| {
        let under = format!("{p}/");
        (declared.range(under.clone()..).next()).is_some_and(|d| d.starts_with(&under))
    };
    let every_leaf = leaves_where(stored, |_| true, deadline)?;
    let mut atomic: Vec<String> = locate_leaves(&every_leaf, stored, deadline)?
        .iter()
        .map(Path::to_pointer)
        .filter(|p| {
            stored
                .pointer(p)
                .is_some_and(|v| v.is_array() || v.is_object())
        })
        .filter(|p| declares_below(p) || owned.whole.has_below(p) || owned.presence.has_below(p))
        .collect();
    // The kind's schema looked up once, not per declared field.
    let schema = atomic_maps::AtomicMaps::of(
        stored["apiVersion"].as_str().unwrap_or_default(),
        stored["kind"].as_str().unwrap_or_default(),
    );
    for (d, maps) in declared.iter().filter_map(|d| Some((d, schema.as_ref()?))) {
        deadline.checkpoint()?;
        let ancestors = d.match_indices('/').skip(1).map(|(at, _)| &d[..at]);
        atomic.extend(
            ancestors
                .filter(|p| maps.contains(p))
                .filter(|p| stored.pointer(p).is_some_and(Value::is_object))
                .map(str::to_owned),
        );
    }
    for p in declared.into_iter().chain(atomic) {
        owned.insert(stored, p);
    }
    Ok(owned)
}

fn last_applied(obj: &Value) -> Option<Value> {
    obj.get("metadata")?
        .get("annotations")?
        .get(LAST_APPLIED)?
        .as_str()
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
}

/// What a manual write takes away from the GitOps tool's ownership: fields it
/// owned before and not after. Ownership is a decision input under
/// `precision: ownedFields` (an unowned field may change by hand), so a write
/// that shrinks it, e.g. by rewriting managedFields or the last-applied
/// annotation, is drift: otherwise the next write to those fields is allowed.
/// Growth only makes later writes stricter, and `kubectl apply` grows the
/// last-applied annotation, so it is not drift. Without `record_counts` the
/// annotation says nothing about ownership ([`owned_pointers`]).
pub fn ownership_taken(
    old: &Value,
    new: &Value,
    record_counts: bool,
    deadline: &Deadline,
) -> Result<Vec<String>, Stopped> {
    let mut out = Vec::new();
    let (before, after): (FieldSet, FieldSet) = (
        owned_leaves(old, &GITOPS_MANAGERS, deadline)?,
        owned_leaves(new, &GITOPS_MANAGERS, deadline)?,
    );
    // A field this write changes moves to its writer (the apiserver records
    // that) and is judged as that change; ownership moved without a change
    // is what would make a later change to the field look unowned.
    let (mut in_old, mut in_new) = (Locator::new(deadline), Locator::new(deadline));
    for keys in before.difference(&after) {
        deadline.checkpoint()?;
        if in_old.leaf(keys, old)?.map(|(_, v)| v) == in_new.leaf(keys, new)?.map(|(_, v)| v) {
            out.push("/metadata/managedFields".to_owned());
            break;
        }
    }
    let applied = |o: &Value| {
        let mut leaves_out = Vec::new();
        if let Some(applied) = last_applied(o) {
            leaves(&applied, &mut String::new(), &mut leaves_out, deadline)?;
        }
        Ok(leaves_out)
    };
    if !record_counts {
        return Ok(out);
    }
    let after: HashSet<String> = applied(new)?.into_iter().collect();
    // Adding the annotation where there was none switches ownership to it
    // (owned_pointers), which could shrink what the tool owns.
    let added = last_applied(old).is_none() && last_applied(new).is_some();
    if added || applied(old)?.iter().any(|p| !after.contains(p)) {
        out.push(format!("/metadata/annotations/{}", escape(LAST_APPLIED)));
    }
    Ok(out)
}

/// Whether `new` leaves a field the GitOps tool owns in `old` to neither the
/// tool nor a person's `kubectl*` manager (where the apiserver moves what a
/// `kubectl` write changes): a field-manager of the writer's choosing, or none.
pub fn ownership_handed_off(
    old: &Value,
    new: &Value,
    deadline: &Deadline,
) -> Result<bool, Stopped> {
    let kept = leaves_where(
        new,
        |e| {
            let manager = entry_text(e, "manager");
            GITOPS_MANAGERS.contains(&manager) || manager.starts_with("kubectl")
        },
        deadline,
    )?;
    Ok(owned_leaves(old, &GITOPS_MANAGERS, deadline)?
        .iter()
        .any(|keys| !kept.contains(keys)))
}

fn leaves(
    value: &Value,
    prefix: &mut String,
    out: &mut Vec<String>,
    deadline: &Deadline,
) -> Result<(), Stopped> {
    deadline.checkpoint()?;
    let len = prefix.len();
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                prefix.push('/');
                prefix.push_str(&escape(k));
                leaves(v, prefix, out, deadline)?;
                prefix.truncate(len);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, v) in items.iter().enumerate() {
                prefix.push_str(&format!("/{i}"));
                leaves(v, prefix, out, deadline)?;
                prefix.truncate(len);
            }
        }
        _ => out.push(prefix.clone()),
    }
    Ok(())
}

/// Splits drifted paths into those touching owned fields and the rest. A path
/// counts as owned when it lies under an owned field or contains one (removing
/// a whole container removes the owned image in it).
pub fn partition(
    paths: Vec<String>,
    owned: &Owned,
    always: &[String],
    (old, new): (&Value, &Value),
    deadline: &Deadline,
) -> Result<(Vec<String>, Vec<String>), Stopped> {
    let always: HashSet<&str> = always.iter().map(String::as_str).collect();
    let (mut in_old, mut in_new) = (Locator::new(deadline), Locator::new(deadline));
    let (mut drift, mut other) = (Vec::new(), Vec::new());
    for p in paths {
        deadline.checkpoint()?;
        if always.contains(p.as_str())
            || owned.touches(&p, (old, new), (&mut in_old, &mut in_new))?
        {
            drift.push(p);
        } else {
            other.push(p);
        }
    }
    Ok((drift, other))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_map_left_owning_itself_is_not_grown_ownership() {
        let fields = |f: serde_json::Value| {
            serde_json::json!({"metadata": {"managedFields": [{"manager": "argocd-controller",
                "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": f}]}})
        };
        let old = fields(serde_json::json!({"f:data": {".": {}, "f:LOG_LEVEL": {}}}));
        let taken = fields(serde_json::json!({"f:data": {".": {}}}));
        assert!(!super::tool_ownership_grown(&old, &taken, &Deadline::none()).unwrap());
        let grown = fields(serde_json::json!({"f:data": {".": {}, "f:LOG_LEVEL": {}, "f:X": {}}}));
        assert!(super::tool_ownership_grown(&old, &grown, &Deadline::none()).unwrap());
        let replicas = fields(serde_json::json!({"f:data": {".": {}, "f:LOG_LEVEL": {}},
                                                  "f:spec": {"f:replicas": {}}}));
        assert!(super::tool_ownership_grown(&old, &replicas, &Deadline::none()).unwrap());
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn a_declared_atomic_list_is_owned_whole_under_client_side_apply() {
        let stored = json!({
            "metadata": {
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration":
                    "{\"spec\":{\"ports\":[8080],\"containers\":[{\"name\":\"app\",\"args\":[\"run\"]}]}}"},
                "managedFields": [
                  {"manager": "argocd-v3.6.1", "operation": "Update", "fieldsV1": {"f:spec": {"f:ports": {}}}},
                  {"manager": "argocd-controller", "operation": "Update", "fieldsV1": {"f:spec": {
                    "f:size": {},
                    "f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:name": {}, "f:args": {}, "f:imagePullPolicy": {}}}
                  }}}
                ]
            },
            "spec": {"ports": [8080, 9], "size": 1,
                     "containers": [{"name": "app", "args": ["run", "--x"], "imagePullPolicy": "Always"}]}
        });
        let owned = owned_pointers(&stored, true, &Deadline::none()).unwrap();
        let paths = vec![
            "/spec/ports/1".to_owned(),
            "/spec/containers/0/args/1".to_owned(),
            "/spec/containers/0/imagePullPolicy".to_owned(),
            "/spec/size".to_owned(),
        ];
        let (drift, other) =
            partition(paths, &owned, &[], (&stored, &stored), &Deadline::none()).unwrap();
        assert_eq!(drift, vec!["/spec/ports/1", "/spec/containers/0/args/1"]);
        assert_eq!(
            other,
            vec!["/spec/containers/0/imagePullPolicy", "/spec/size"],
            "what the apiserver defaulted stays unowned"
        );
    }

    #[test]
    fn a_declared_atomic_map_is_owned_whole_under_client_side_apply() {
        // e2e_oracle ORACLE_SEED=1796443343: Argo CD's client-side diff
        // reports a matchLabels key added by hand to a PDB's selector.
        let stored = json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration":
                    "{\"spec\":{\"selector\":{\"matchLabels\":{\"app\":\"o\"}}}}"},
                "labels": {"app": "o", "team": "x"},
                "managedFields": [
                  {"manager": "argocd-controller", "operation": "Update", "fieldsV1": {
                    "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {"f:selector": {}}}}
                ]
            },
            "spec": {"selector": {"matchLabels": {"app": "o", "by-hand": "1"}}}
        });
        let owned = owned_pointers(&stored, true, &Deadline::none()).unwrap();
        let paths = vec![
            "/spec/selector/matchLabels/by-hand".to_owned(),
            "/metadata/labels/team".to_owned(),
        ];
        let (drift, other) =
            partition(paths, &owned, &[], (&stored, &stored), &Deadline::none()).unwrap();
        assert_eq!(drift, vec!["/spec/selector/matchLabels/by-hand"]);
        assert_eq!(
            other,
            vec!["/metadata/labels/team"],
            "a granular map's keys stay apart"
        );
        // Read from the schema, not from managedFields: with the entry that
        // held the selector dropped by a write, it is still owned whole.
        let mut dropped = stored.clone();
        dropped["metadata"]["managedFields"] = json!([]);
        let owned = owned_pointers(&dropped, true, &Deadline::none()).unwrap();
        let paths = vec!["/spec/selector/matchLabels/by-hand".to_owned()];
        let (drift, _) =
            partition(paths, &owned, &[], (&dropped, &dropped), &Deadline::none()).unwrap();
        assert_eq!(drift, vec!["/spec/selector/matchLabels/by-hand"]);
    }

    #[test]
    fn owned_by_server_side_apply_and_by_last_applied() {
        let stored = json!({
            "metadata": {
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{\"paused\":false}}"},
                "managedFields": [
                    {"manager": "argocd-controller", "operation": "Apply", "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}}}}}}}},
                    {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"f:spec": {"f:minReadySeconds": {}}}}
                ]
            },
            "spec": {"paused": false, "minReadySeconds": 5, "template": {"spec": {"containers": [{"name": "app", "image": "a:1"}]}}}
        });
        let owned = owned_pointers(&stored, true, &Deadline::none()).unwrap();
        assert!(
            owned
                .whole
                .contains("/spec/template/spec/containers/0/image"),
            "{owned:?}"
        );
        assert!(owned.whole.contains("/spec/paused"));
        let paths = vec![
            "/spec/template/spec/containers/0/image".to_owned(),
            "/spec/minReadySeconds".to_owned(),
            "/spec/template/spec/containers/0".to_owned(),
            "/metadata/labels/team".to_owned(),
        ];
        let mut edited = stored.clone();
        edited["spec"]["template"]["spec"]["containers"][0]["image"] = json!("a:2");
        let (drift, other) =
            partition(paths, &owned, &[], (&stored, &edited), &Deadline::none()).unwrap();
        assert_eq!(
            drift,
            vec![
                "/spec/template/spec/containers/0/image",
                "/spec/template/spec/containers/0"
            ]
        );
        assert_eq!(
            other,
            vec!["/spec/minReadySeconds", "/metadata/labels/team"]
        );
    }

    /// Flux applies a StatefulSet's `updateStrategy: {}` (Go's zero value)
    /// and owns it as one bare leaf, like the atomic `selector`: only the
    /// schema says the first owns nothing the apiserver defaulted inside
    /// (the generative oracle: Flux kept a `partition` changed by hand).
    #[test]
    fn a_map_applied_empty_owns_only_its_presence() {
        let stored = json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"managedFields": [{"manager": "kustomize-controller", "operation": "Apply",
                "fieldsV1": {"f:spec": {"f:selector": {}, "f:updateStrategy": {}}}}]},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                     "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}}
        });
        let owned = owned_pointers(&stored, true, &Deadline::none()).unwrap();
        let paths = vec![
            "/spec/updateStrategy/rollingUpdate/partition".to_owned(),
            "/spec/selector/matchLabels/app".to_owned(),
            "/spec/updateStrategy".to_owned(),
            "/spec".to_owned(),
        ];
        let (drift, other) =
            partition(paths, &owned, &[], (&stored, &stored), &Deadline::none()).unwrap();
        assert_eq!(
            drift,
            vec![
                "/spec/selector/matchLabels/app",
                "/spec/updateStrategy",
                "/spec"
            ]
        );
        assert_eq!(other, vec!["/spec/updateStrategy/rollingUpdate/partition"]);

        // A kind whose schema driftguard does not know: owned whole.
        let mut widget = stored.clone();
        widget["apiVersion"] = json!("example.com/v1");
        let owned = owned_pointers(&widget, true, &Deadline::none()).unwrap();
        let (drift, _) = partition(
            vec!["/spec/updateStrategy/rollingUpdate/partition".to_owned()],
            &owned,
            &[],
            (&widget, &widget),
            &Deadline::none(),
        )
        .unwrap();
        assert_eq!(drift.len(), 1);
    }

    /// A port inserted before the one Argo CD applied moves it to index 1:
    /// the diff by position shows index 0 changed, but the owned entry is
    /// the same by its key, as Server-Side Diff compares it (the generative
    /// oracle: a client-side `kubectl apply` of a new port, Synced).
    #[test]
    fn a_keyed_entry_moved_by_an_insert_is_unchanged() {
        let port = |p: u16| json!({"containerPort": p, "protocol": "TCP"});
        let stored = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"managedFields": [{"manager": "argocd-controller", "operation": "Apply",
                "fieldsV1": {"f:spec": {"f:ports": {
                    "k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}}}}]},
            "spec": {"ports": [port(8080)]}
        });
        let owned = owned_pointers(&stored, false, &Deadline::none()).unwrap();
        let inserted = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": stored["metadata"],
            "spec": {"ports": [port(9), port(8080)]}});
        let paths = vec![
            "/spec/ports/0/containerPort".to_owned(),
            "/spec/ports/1".to_owned(),
        ];
        let (drift, _) = partition(
            paths.clone(),
            &owned,
            &[],
            (&stored, &inserted),
            &Deadline::none(),
        )
        .unwrap();
        assert!(drift.is_empty(), "{drift:?}");
        // The owned entry itself changed, wherever it went: drift.
        let replaced = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": stored["metadata"],
            "spec": {"ports": [port(9)]}});
        let (drift, _) = partition(
            vec!["/spec/ports/0/containerPort".to_owned()],
            &owned,
            &[],
            (&stored, &replaced),
            &Deadline::none(),
        )
        .unwrap();
        assert_eq!(drift, vec!["/spec/ports/0/containerPort"]);
    }
}
