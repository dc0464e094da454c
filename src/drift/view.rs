//! The normalized object ([`super::normalize`]'s copy) as a view of the
//! original: the same members, borrowed. Only the top level, `metadata` and
//! its label and annotation maps differ from the original, so only those are
//! built; everything under them is the original's own value.
//!
//! Copying both objects was over a third of a small update's decision, and
//! the copy is needed only where an ignore rule removes something the two
//! objects differ in: [`without_copies`] says when it is not.

use std::collections::HashSet;

use serde_json::Value;

use super::normalize::{self, BOOKKEEPING_ANNOTATIONS, SERVER_METADATA, Token};
use crate::deadline::{Deadline, Stopped};
use crate::policy::path::{self, Path, Segment};

/// A member of the view: an original value, or a map the view filtered.
pub(super) enum Node<'a> {
    Value(&'a Value),
    Map(Vec<(&'a str, Node<'a>)>),
}

/// The view of `obj`, or `None` for a shape it does not mirror (a top level
/// or `metadata` that is not an object, labels that are not a map): those
/// are normalized by copy. The apiserver never sends them.
pub(super) fn of(obj: &Value) -> Option<Node<'_>> {
    let mut top = Vec::new();
    for (key, value) in obj.as_object()? {
        match key.as_str() {
            "status" => {}
            "metadata" => {
                let meta = metadata(value)?;
                if !meta.is_empty() {
                    top.push((key.as_str(), Node::Map(meta)));
                }
            }
            _ => top.push((key.as_str(), Node::Value(value))),
        }
    }
    Some(Node::Map(top))
}

fn metadata(meta: &Value) -> Option<Vec<(&str, Node<'_>)>> {
    let mut out = Vec::new();
    for (key, value) in meta.as_object()? {
        let key = key.as_str();
        if key == "managedFields" || SERVER_METADATA.contains(&key) {
            continue;
        }
        let skipped: &[&str] = match key {
            "annotations" => &BOOKKEEPING_ANNOTATIONS,
            "labels" => &[],
            _ => {
                out.push((key, Node::Value(value)));
                continue;
            }
        };
        let entries: Vec<_> = match value {
            Value::Object(map) => map
                .iter()
                .filter(|(k, _)| !skipped.contains(&k.as_str()))
                .map(|(k, v)| (k.as_str(), Node::Value(v)))
                .collect(),
            // Absent, as the copy has it.
            Value::Null => Vec::new(),
            Value::Array(items) if items.is_empty() => Vec::new(),
            _ => return None,
        };
        if !entries.is_empty() {
            out.push((key, Node::Map(entries)));
        }
    }
    Some(out)
}

fn member<'n, 'a>(entries: &'n [(&'a str, Node<'a>)], key: &str) -> Option<&'n Node<'a>> {
    entries.iter().find(|(k, _)| *k == key).map(|(_, n)| n)
}

/// Whether `path` names something in the view (as `path::get` on the copy).
fn contains(node: &Node, path: &[Segment]) -> bool {
    match (node, path.split_first()) {
        (_, None) => true,
        (Node::Value(v), Some(_)) => path::get(v, path).is_some(),
        (Node::Map(entries), Some((first, rest))) => {
            member(entries, &path::key_str(first)).is_some_and(|n| contains(n, rest))
        }
    }
}

/// [`normalize::drifted_paths`] of the two copies, read off the views; `None`
/// where the views' shapes part (they never do for the same locations).
fn drifted_paths(
    old: &Node,
    new: &Node,
    deadline: &Deadline,
) -> Result<Option<Vec<String>>, Stopped> {
    let mut out = Vec::new();
    let walked = diff_into(old, new, &mut Vec::new(), &mut out, deadline)?;
    Ok(walked.then_some(out))
}

/// Whether the views' shapes matched all the way (else `out` is partial).
fn diff_into<'a>(
    old: &Node<'a>,
    new: &Node<'a>,
    at: &mut Vec<Token<'a>>,
    out: &mut Vec<String>,
    deadline: &Deadline,
) -> Result<bool, Stopped> {
    match (old, new) {
        (Node::Value(a), Node::Value(b)) => {
            normalize::diff_into(a, b, at, out, deadline)?;
            Ok(true)
        }
        // As `normalize::diff_into` walks two objects.
        (Node::Map(a), Node::Map(b)) => {
            deadline.checkpoint()?;
            for (key, after) in b {
                at.push(Token::Key(key));
                match member(a, key) {
                    Some(before) => {
                        if !diff_into(before, after, at, out, deadline)? {
                            return Ok(false);
                        }
                    }
                    None => out.push(normalize::pointer(at)),
                }
                at.pop();
            }
            for (key, _) in a.iter().filter(|(k, _)| member(b, k).is_none()) {
                deadline.checkpoint()?;
                at.push(Token::Key(key));
                out.push(normalize::pointer(at));
                at.pop();
            }
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// What removing `paths` removes from the view: those it names, deeper and
/// higher-indexed first, without repeats (as `path::remove_all_pruning` orders them).
fn removed(view: &Node, mut paths: Vec<Path>) -> Vec<Path> {
    paths.retain(|p| contains(view, &p.0));
    path::sort_for_removal(&mut paths);
    paths
}

/// The drifted paths read off the views, or the paths each object's rules
/// name, for copies.
pub(super) type ReadOff = Result<Vec<String>, (Vec<Path>, Vec<Path>)>;

/// The drifted paths of `normalize::normalize_pair`'s two copies, when
/// they follow from the views alone: the rules' paths in each object
/// (`old_paths`, `new_paths`) remove nothing from either, or remove the same paths from both
/// and every difference lies under one of them (the copies are then equal:
/// outside those paths the two objects have the same members, and removing
/// the same paths from both prunes the same containers). Otherwise the
/// paths each object names, for the copies. The property test below does
/// not fail without the same-paths condition; it is kept because the
/// argument above needs it.
/// `Err` only when the decision must stop.
pub(super) fn without_copies(
    (old, new): (&Value, &Value),
    (old_paths, new_paths): (Vec<Path>, Vec<Path>),
    deadline: &Deadline,
) -> Result<ReadOff, Stopped> {
    let (Some(old_view), Some(new_view)) = (of(old), of(new)) else {
        return Ok(Err((old_paths, new_paths)));
    };
    let (old_removed, new_removed) = (removed(&old_view, old_paths), removed(&new_view, new_paths));
    let Some(drifted) = drifted_paths(&old_view, &new_view, deadline)? else {
        return Ok(Err((old_removed, new_removed)));
    };
    if old_removed.is_empty() && new_removed.is_empty() {
        return Ok(Ok(drifted));
    }
    if old_removed == new_removed {
        // Each drifted path's own prefixes looked up, not every pointer
        // tried: drifted × pointers was quadratic in what a writer and an
        // Application's rules can make large.
        let pointers: HashSet<String> = old_removed.iter().map(Path::to_pointer).collect();
        let mut all_under = true;
        for d in &drifted {
            deadline.checkpoint()?;
            let prefixes = d.match_indices('/').map(|(i, _)| &d[..i]);
            if !prefixes.chain([d.as_str()]).any(|p| pointers.contains(p)) {
                all_under = false;
                break;
            }
        }
        if all_under {
            return Ok(Ok(Vec::new()));
        }
    }
    Ok(Err((old_removed, new_removed)))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    use serde_json::{Value, json};

    use super::super::normalize::{drifted_paths, drifted_paths_under, normalize_pair};
    use crate::deadline::Deadline;
    use crate::policy::IgnoreRule;
    use crate::policy::schema::IgnoreDifference;

    /// Keys that escape (`~`, `/`) and read as indices (`0`, `-1`).
    const KEYS: [&str; 6] = ["a", "b", "0", "-1", "c~d", "e/f"];
    const ANNOTATIONS: [&str; 5] = [
        "x",
        "y",
        "kubectl.kubernetes.io/last-applied-configuration",
        "driftguard.io/drift",
        "driftguard.io/break-glass",
    ];
    /// What the rules name: present or not, in the view or left out of it,
    /// map members and array items.
    const POINTERS: [&str; 17] = [
        "/spec/a",
        "/spec/a/0",
        "/spec/a/1",
        "/spec/a/-1",
        "/spec/a/b",
        "/spec/b",
        "/spec/c~0d",
        "/spec/e~1f/a",
        "/data",
        "/status",
        "/status/a",
        "/metadata",
        "/metadata/labels",
        "/metadata/labels/x",
        "/metadata/annotations",
        "/metadata/annotations/x",
        "/metadata/resourceVersion",
    ];
    /// managedFields entries of manager `m`, for a managedFieldsManagers rule.
    fn owned(choice: usize) -> Value {
        let fields = [
            json!({"f:spec": {"f:a": {}}}),
            json!({"f:spec": {"f:b": {}, "f:a": {"f:0": {}}}}),
            json!({"f:metadata": {"f:annotations": {"f:x": {}}}}),
            json!({"f:status": {"f:a": {}}}),
        ];
        json!([{"manager": "m", "operation": "Update", "fieldsType": "FieldsV1",
                "fieldsV1": fields[choice % fields.len()]}])
    }

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            Just(json!({})),
            Just(json!([])),
            (0..3i64).prop_map(Value::from),
            prop::sample::select(vec!["p", "q"]).prop_map(Value::from),
        ]
    }

    fn tree() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                map_of(inner),
            ]
        })
    }

    fn map_of(values: impl Strategy<Value = Value>) -> impl Strategy<Value = Value> {
        prop::collection::btree_map(prop::sample::select(KEYS.to_vec()), values, 0..4)
            .prop_map(|m| m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    }

    fn string_map(keys: &'static [&'static str]) -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            Just(json!({})),
            Just(json!([])),
            prop::collection::btree_map(
                prop::sample::select(keys.to_vec()),
                prop::sample::select(vec!["1", "2"]),
                0..4
            )
            .prop_map(|m| json!(m)),
        ]
    }

    fn object() -> impl Strategy<Value = Value> {
        (
            prop::option::of(string_map(&["x", "y"])),
            prop::option::of(string_map(&ANNOTATIONS)),
            prop::option::of(0..8usize),
            any::<bool>(),
            prop::option::weighted(0.9, (map_of(tree()), tree())),
            prop::option::of(tree()),
            prop::option::of(tree()),
        )
            .prop_map(|(labels, annotations, fields, rv, spec, status, data)| {
                let mut meta = serde_json::Map::new();
                meta.insert("name".into(), json!("n"));
                for (key, value) in [("labels", labels), ("annotations", annotations)] {
                    if let Some(v) = value {
                        meta.insert(key.into(), v);
                    }
                }
                if let Some(choice) = fields {
                    meta.insert("managedFields".into(), owned(choice));
                }
                if rv {
                    meta.insert("resourceVersion".into(), json!("7"));
                }
                // Mostly with the member most rules name.
                let spec = spec.map(|(mut spec, a)| {
                    spec.as_object_mut().map(|m| m.entry("a").or_insert(a));
                    spec
                });
                let mut obj = json!({"apiVersion": "v1", "kind": "K", "metadata": meta});
                for (key, value) in [("spec", spec), ("status", status), ("data", data)] {
                    if let Some(v) = value {
                        obj[key] = v;
                    }
                }
                obj
            })
    }

    /// An edit at a pointer: a new value, or removal.
    fn edited(mut obj: Value, edits: Vec<(usize, Option<Value>)>) -> Value {
        for (at, value) in edits {
            let pointer = POINTERS[at % POINTERS.len()];
            let (parent, last) = pointer.rsplit_once('/').unwrap();
            let last = last.replace("~1", "/").replace("~0", "~");
            match (obj.pointer_mut(parent), value) {
                (Some(Value::Object(map)), Some(v)) => {
                    map.insert(last, v);
                }
                (Some(Value::Object(map)), None) => {
                    map.remove(&last);
                }
                (Some(Value::Array(items)), v) => match (last.parse::<usize>(), v) {
                    (Ok(i), Some(v)) if i < items.len() => items[i] = v,
                    (Ok(i), None) if i < items.len() => {
                        items.remove(i);
                    }
                    _ => {}
                },
                _ => {}
            }
        }
        obj
    }

    /// A stored object, the same object edited, and the rules.
    fn case() -> impl Strategy<Value = (Value, Value, Vec<IgnoreRule>)> {
        (
            object(),
            prop::collection::vec(
                (0..POINTERS.len(), prop::option::weighted(0.8, tree())),
                0..4,
            ),
            prop::option::of(0..8usize),
            prop::collection::vec(0..POINTERS.len(), 0..4),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(old, edits, fields, mut pointers, managers, cover)| {
                // Half the time the rules name what was edited.
                if cover {
                    pointers.extend(edits.iter().map(|(at, _)| *at));
                }
                let mut new = edited(old.clone(), edits);
                if let (Some(choice), Some(meta)) = (fields, new.pointer_mut("/metadata"))
                    && let Some(meta) = meta.as_object_mut()
                {
                    meta.insert("managedFields".into(), owned(choice));
                }
                let rule = IgnoreRule::compile(
                    &IgnoreDifference {
                        group: "*".into(),
                        kind: "*".into(),
                        json_pointers: pointers.iter().map(|i| POINTERS[*i].into()).collect(),
                        managed_fields_managers: if managers { vec!["m".into()] } else { vec![] },
                        ..Default::default()
                    },
                    "t".into(),
                )
                .unwrap();
                (old, new, vec![rule])
            })
    }

    fn by_copy(old: &Value, new: &Value, rules: &[&IgnoreRule]) -> Vec<String> {
        let none = Deadline::none();
        let (old_n, new_n) = normalize_pair(old, new, rules, &mut Vec::new(), &none).unwrap();
        drifted_paths(&old_n, &new_n, &none).unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn the_view_finds_what_the_copies_find((old, new, rules) in case()) {
            let rules: Vec<&IgnoreRule> = rules.iter().collect();
            prop_assert_eq!(
                drifted_paths_under(&old, &new, &rules, &mut Vec::new(), &Deadline::none()).unwrap(),
                by_copy(&old, &new, &rules)
            );
        }
    }

    /// The property above is worth something only if the cases reach each
    /// way out of `without_copies`, removals included.
    #[test]
    fn the_cases_reach_every_answer() {
        let (mut runner, strategy) = (TestRunner::deterministic(), case());
        let (mut plain, mut all_ignored, mut copied) = (0, 0, 0);
        for _ in 0..2000 {
            let (old, new, rules) = strategy.new_tree(&mut runner).unwrap().current();
            let rules: Vec<&IgnoreRule> = rules.iter().collect();
            let (mut o, mut n) = (Vec::new(), Vec::new());
            for rule in &rules {
                let (a, b) = rule
                    .paths_pair(
                        &crate::policy::jq::JqInput::new(&old),
                        &crate::policy::jq::JqInput::new(&new),
                        Some((&old, &new)),
                        &mut Vec::new(),
                        &Deadline::none(),
                    )
                    .unwrap();
                o.extend(a);
                n.extend(b);
            }
            match super::without_copies((&old, &new), (o, n), &Deadline::none()).unwrap() {
                // The rules hid every difference there was.
                Ok(paths) if paths.is_empty() && !by_copy(&old, &new, &[]).is_empty() => {
                    all_ignored += 1
                }
                Ok(_) => plain += 1,
                Err(_) => copied += 1,
            }
        }
        assert!(
            plain > 200 && all_ignored > 100 && copied > 200,
            "{plain} {all_ignored} {copied}"
        );
    }

    #[test]
    fn the_benchmarks_review_is_judged_without_copies() {
        let review: Value = serde_json::from_str(include_str!(
            "../../benches/data/configmap-annotation-patch.json"
        ))
        .unwrap();
        let (old, new) = (
            &review["request"]["oldObject"],
            &review["request"]["object"],
        );
        let rule = IgnoreRule::compile(
            &IgnoreDifference {
                kind: "ConfigMap".into(),
                json_pointers: vec!["/metadata/annotations/bench.driftguard.io~1seq".into()],
                ..Default::default()
            },
            "t".into(),
        )
        .unwrap();
        let paths = rule
            .paths_pair(
                &crate::policy::jq::JqInput::new(old),
                &crate::policy::jq::JqInput::new(new),
                None,
                &mut Vec::new(),
                &Deadline::none(),
            )
            .unwrap();
        assert_ne!(old, new);
        assert_eq!(
            super::without_copies((old, new), paths, &Deadline::none()),
            Ok(Ok(Vec::new()))
        );
    }
}
