//! Normalize the stored and the incoming object identically, then diff them.

use serde_json::Value;

use super::{breakglass_state, view};
use crate::deadline::{Deadline, Stopped};
use crate::policy::jq::JqInput;
use crate::policy::path::{self, Path};
use crate::policy::{IgnoreRule, RuleFailure};

/// The annotation the mutating webhook writes in warn mode.
pub const DRIFT_ANNOTATION: &str = "driftguard.io/drift";

/// Set by the apiserver, or by driftguard itself: never a user's change.
pub(super) const SERVER_METADATA: [&str; 7] = [
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
pub(super) const BOOKKEEPING_ANNOTATIONS: [&str; 4] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    DRIFT_ANNOTATION,
    breakglass_state::REASON,
    breakglass_state::EXPIRES,
];

/// The drifted paths between `old` and `new` once both are normalized under
/// `rules` ([`normalize_pair`], then [`drifted_paths`]), read off the
/// originals where the rules' paths allow it (`view::without_copies`):
/// jq programs read a copy, and so does a removal the objects differ in.
pub fn drifted_paths_under(
    old: &Value,
    new: &Value,
    rules: &[&IgnoreRule],
    failures: &mut Vec<RuleFailure>,
    deadline: &Deadline,
) -> Result<Vec<String>, Stopped> {
    if rules.iter().any(|r| !r.jq.is_empty()) {
        let (old_n, new_n) = normalize_pair(old, new, rules, failures, deadline)?;
        return drifted_paths(&old_n, &new_n, deadline);
    }
    let (old_in, new_in) = (JqInput::new(old), JqInput::new(new));
    let (mut old_paths, mut new_paths) = (Vec::new(), Vec::new());
    for rule in rules {
        // Pointers and managed fields only: what they name outside the
        // view (status, managedFields) the view leaves out.
        let (o, n) = rule.paths_pair(&old_in, &new_in, Some((old, new)), failures, deadline)?;
        old_paths.extend(o);
        new_paths.extend(n);
    }
    match view::without_copies((old, new), (old_paths, new_paths), deadline)? {
        Ok(paths) => Ok(paths),
        Err(paths) => {
            let (old_n, new_n) = copies_without(old, new, paths);
            drifted_paths(&old_n, &new_n, deadline)
        }
    }
}

/// Both objects without server-managed fields and ignored paths. Rules see the objects already without status, managedFields and the
/// other server fields: driftguard never diffs them, and jq's input is half the
/// size.
pub fn normalize_pair(
    old: &Value,
    new: &Value,
    rules: &[&IgnoreRule],
    failures: &mut Vec<RuleFailure>,
    deadline: &Deadline,
) -> Result<(Value, Value), Stopped> {
    let old_n = normalized_copy(old);
    let new_n = normalized_copy(new);
    let (mut old_paths, mut new_paths) = (Vec::new(), Vec::new());
    {
        let (old_in, new_in) = (JqInput::new(&old_n), JqInput::new(&new_n));
        for rule in rules {
            // The originals: normalizing dropped managedFields.
            let (o, n) = rule.paths_pair(&old_in, &new_in, Some((old, new)), failures, deadline)?;
            old_paths.extend(o);
            new_paths.extend(n);
        }
    }
    Ok(prune_pair((old_n, new_n), (old_paths, new_paths)))
}

/// Normalized copies of `old` and `new` without the rules' `paths` in each.
fn copies_without(old: &Value, new: &Value, paths: (Vec<Path>, Vec<Path>)) -> (Value, Value) {
    prune_pair((normalized_copy(old), normalized_copy(new)), paths)
}

fn prune_pair(
    (mut old_n, mut new_n): (Value, Value),
    (old_paths, new_paths): (Vec<Path>, Vec<Path>),
) -> (Value, Value) {
    let mut removed = path::remove_all_pruning(&mut old_n, old_paths);
    removed.extend(path::remove_all_pruning(&mut new_n, new_paths));
    path::prune_like(&mut old_n, &mut new_n, &removed);
    (old_n, new_n)
}

/// A copy of `obj` without `status`, server metadata and bookkeeping
/// annotations. Cloning a map is a bulk copy, so copying first and pruning in
/// place beats filtering per member.
///
/// No other value counts as absent: `{}` is not "no selector" (a
/// `namespaceSelector: {}` selects every namespace), and the apiserver sends
/// what it stores. The equalities this relies on are in [`EQUALITIES`].
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
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in ["labels", "annotations"] {
            if meta.get(key).is_some_and(is_empty) {
                meta.remove(key);
            }
        }
        if meta.is_empty() {
            out.as_object_mut().map(|o| o.remove("metadata"));
        }
    }
    out
}

/// Every pair of different JSON values the diff treats as equal, and why
/// Kubernetes does too. Nothing else is equal: a `{}` or `[]` or `null` that
/// the client sent and the apiserver kept is compared as written.
pub const EQUALITIES: &[(&str, &str)] = &[
    (
        "metadata.labels or metadata.annotations: {} or null = absent",
        "string maps with omitempty in ObjectMeta, typed for every kind (custom resources too): \
         the apiserver stores and sends them alike",
    ),
    (
        "a map or list left empty by removing ignored paths = absent",
        "what is left is only the ignored part, which is not compared",
    ),
    (
        "status, managedFields, resourceVersion, generation, uid, creationTimestamp, selfLink, \
         deletionGracePeriodSeconds: not compared",
        "written by the apiserver or controllers, never state a person declares",
    ),
    (
        "a Scale without spec.replicas = a Scale with spec.replicas 0",
        "autoscaling/v1 Scale writes spec.replicas with omitempty: 0 is sent as absent",
    ),
];

/// `null`, `{}` or `[]`.
pub fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// RFC 6901 pointers of everything that differs between two normalized
/// objects: the paths of `json_patch::diff`'s operations, in its order,
/// without building the operations (which clone every added or replaced
/// value), and with deadline checkpoints.
pub fn drifted_paths(
    old: &Value,
    new: &Value,
    deadline: &Deadline,
) -> Result<Vec<String>, Stopped> {
    let mut out = Vec::new();
    diff_into(old, new, &mut Vec::new(), &mut out, deadline)?;
    Ok(out)
}

/// A step of the path the diff is at. The pointer is written only for a
/// difference: most members are equal, and escaping every key (and writing
/// every index) on the way down was most of the walk.
#[derive(Clone, Copy)]
pub(super) enum Token<'a> {
    Key(&'a str),
    Index(usize),
}

/// The RFC 6901 pointer of `at`.
pub(super) fn pointer(at: &[Token]) -> String {
    let mut out = String::new();
    for token in at {
        out.push('/');
        match token {
            Token::Key(key) => path::escape_into(&mut out, key),
            Token::Index(i) => out.push_str(&i.to_string()),
        }
    }
    out
}

pub(super) fn diff_into<'a>(
    old: &'a Value,
    new: &'a Value,
    at: &mut Vec<Token<'a>>,
    out: &mut Vec<String>,
    deadline: &Deadline,
) -> Result<(), Stopped> {
    deadline.checkpoint()?;
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, after) in b {
                at.push(Token::Key(key));
                match a.get(key) {
                    Some(before) => diff_into(before, after, at, out, deadline)?,
                    None => out.push(pointer(at)),
                }
                at.pop();
            }
            for key in a.keys().filter(|k| !b.contains_key(*k)) {
                deadline.checkpoint()?;
                at.push(Token::Key(key));
                out.push(pointer(at));
                at.pop();
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for i in 0..a.len().min(b.len()) {
                at.push(Token::Index(i));
                diff_into(&a[i], &b[i], at, out, deadline)?;
                at.pop();
            }
            // json_patch removes surplus items one by one at the same index.
            for i in (b.len()..a.len()).map(|_| b.len()).chain(a.len()..b.len()) {
                deadline.checkpoint()?;
                at.push(Token::Index(i));
                out.push(pointer(at));
                at.pop();
            }
        }
        _ if old == new => {}
        _ => out.push(pointer(at)),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_empty_selector_is_not_an_absent_one() {
        let old = json!({"spec": {"ingress": [{"from": [{"podSelector": {"matchLabels": {"a": "b"}}}]}]}});
        let new = json!({"spec": {"ingress": [{"from": [{"podSelector": {"matchLabels": {"a": "b"}},
                                                         "namespaceSelector": {}}]}]}});
        assert_eq!(
            drifted_paths(
                &normalized_copy(&old),
                &normalized_copy(&new),
                &Deadline::none()
            )
            .unwrap(),
            vec!["/spec/ingress/0/from/0/namespaceSelector"]
        );
        for (a, b) in [
            (json!({"x": []}), json!({})),
            (json!({"x": null}), json!({})),
        ] {
            let (a, b) = (json!({"spec": a}), json!({"spec": b}));
            assert_eq!(
                drifted_paths(
                    &normalized_copy(&a),
                    &normalized_copy(&b),
                    &Deadline::none()
                )
                .unwrap(),
                vec!["/spec/x"]
            );
        }
    }

    #[test]
    fn the_paths_are_json_patch_diffs_paths() {
        let cases = [
            (json!({"a": 1}), json!({"a": 2})),
            (json!({"a": [1, 2, 3, 4]}), json!({"a": [1]})),
            (json!({"a": [1]}), json!({"a": [0, 2, 3]})),
            (
                json!({"a/b": {"c~d": 1}, "x": null}),
                json!({"a/b": {"c~d": 2}, "y": {}}),
            ),
            (json!([{"k": 1}, 2]), json!({"k": 1})),
            (
                json!({"l": [[1, 2], {"m": [3]}]}),
                json!({"l": [[2], {"m": [3, 4]}, 5]}),
            ),
            (json!(1), json!(1)),
        ];
        for (old, new) in cases {
            let expected: Vec<String> = json_patch::diff(&old, &new)
                .0
                .iter()
                .map(|op| op.path().to_string())
                .collect();
            assert_eq!(
                drifted_paths(&old, &new, &Deadline::none()).unwrap(),
                expected,
                "{old} -> {new}"
            );
        }
    }

    #[test]
    fn empty_annotations_equal_absent() {
        let old = json!({"metadata": {"name": "a", "labels": {"a": "b"}}});
        for new in [
            json!({"metadata": {"name": "a", "labels": {"a": "b"}, "annotations": {}}}),
            json!({"metadata": {"name": "a", "labels": {"a": "b"}, "annotations": null}}),
        ] {
            assert_eq!(
                drifted_paths(
                    &normalized_copy(&old),
                    &normalized_copy(&new),
                    &Deadline::none()
                )
                .unwrap(),
                Vec::<String>::new()
            );
        }
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
        let (out, _) =
            normalize_pair(&obj, &obj, &[&rule], &mut Vec::new(), &Deadline::none()).unwrap();
        assert_eq!(out, json!({"spec": {"x": [{}]}}));
    }

    #[test]
    fn normalization_is_idempotent_and_strips_server_fields() {
        let obj = json!({"metadata": {"name": "a", "resourceVersion": "1", "generation": 2, "uid": "u",
                         "managedFields": [{}], "annotations": {"driftguard.io/drift": "x"}},
                         "spec": {"x": null, "y": []}, "status": {"ready": 1}});
        let (once, _) =
            normalize_pair(&obj, &obj, &[], &mut Vec::new(), &Deadline::none()).unwrap();
        assert_eq!(
            once,
            json!({"metadata": {"name": "a"}, "spec": {"x": null, "y": []}})
        );
        assert_eq!(
            normalize_pair(&once, &once, &[], &mut Vec::new(), &Deadline::none())
                .unwrap()
                .0,
            once
        );
    }
}
