//! Property tests: with JSON-pointer rules, a write is allowed exactly when every
//! edited path lies under an ignored pointer; an unchanged write is never drift.

use driftguard_testkit::common;

use common::{Review, run};
use driftguard::Policy;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const KEYS: [&str; 4] = ["a", "b", "c", "d"];

/// Non-empty objects (an empty one equals absent, by design) with scalar leaves.
fn tree() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        (1i64..50).prop_map(|n| json!(n)),
        "[x-z]{1,3}".prop_map(Value::String)
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop::collection::btree_map(prop::sample::select(KEYS.to_vec()), inner, 1..4).prop_map(
            |m| {
                Value::Object(
                    m.into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect::<Map<_, _>>(),
                )
            },
        )
    })
    .prop_filter("objects only", Value::is_object)
}

fn pointer() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(KEYS.to_vec()), 1..4)
        .prop_map(|ks| format!("/{}", ks.join("/")))
}

#[derive(Clone, Debug)]
enum Edit {
    Set(String, Value),
    Remove(String),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (pointer(), (50i64..99).prop_map(|n| json!(n))).prop_map(|(p, v)| Edit::Set(p, v)),
        pointer().prop_map(Edit::Remove),
    ]
}

/// Every scalar leaf as pointer → value; an empty map below the top is a
/// leaf too (`{}` is not absent: an empty selector selects everything).
fn leaves(v: &Value) -> std::collections::BTreeMap<String, Value> {
    fn walk(v: &Value, prefix: String, out: &mut std::collections::BTreeMap<String, Value>) {
        match v {
            Value::Object(m) if m.is_empty() && !prefix.is_empty() => {
                out.insert(prefix, v.clone());
            }
            Value::Object(m) => m
                .iter()
                .for_each(|(k, c)| walk(c, format!("{prefix}/{k}"), out)),
            other => {
                out.insert(prefix, other.clone());
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(v, String::new(), &mut out);
    out
}

fn apply(spec: &mut Value, e: &Edit) {
    match e {
        Edit::Set(p, v) => {
            let tokens: Vec<&str> = p[1..].split('/').collect();
            let mut node = spec;
            for t in &tokens[..tokens.len() - 1] {
                if !node.get(*t).is_some_and(Value::is_object) {
                    node[*t] = json!({});
                }
                node = node.get_mut(*t).unwrap();
            }
            node[*tokens.last().unwrap()] = v.clone();
        }
        Edit::Remove(p) => {
            let (parent, last) = p.rsplit_once('/').unwrap();
            let parent = if parent.is_empty() {
                Some(&mut *spec)
            } else {
                spec.pointer_mut(parent)
            };
            if let Some(Value::Object(m)) = parent {
                m.remove(last);
            }
        }
    }
}

fn deployment(spec: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": "production",
                        "annotations": {"argocd.argoproj.io/tracking-id": "app:apps/Deployment:production/web"}},
           "spec": spec})
}

fn under(path: &str, prefix: &str) -> bool {
    path == prefix || path.starts_with(&format!("{prefix}/"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn allowed_exactly_when_every_edit_is_under_an_ignored_pointer(
        spec in tree(),
        edits in prop::collection::vec(edit(), 1..4),
        ignored in prop::collection::vec(pointer(), 0..4),
    ) {
        let mut new_spec = spec.clone();
        for e in &edits {
            apply(&mut new_spec, e);
        }
        // Ground truth, independent of the engine: the scalar leaves that differ.
        let (old_leaves, new_leaves) = (leaves(&spec), leaves(&new_spec));
        let edited: Vec<String> = old_leaves.iter().filter(|(p, v)| new_leaves.get(*p) != Some(*v))
            .chain(new_leaves.iter().filter(|(p, v)| old_leaves.get(*p) != Some(*v)))
            .map(|(p, _)| format!("/spec{p}"))
            .collect();
        let pointers: Vec<String> = ignored.iter().map(|p| format!("/spec{p}")).collect();
        let policy = Policy::from_yaml(
            &format!("ignoreDifferences:\n  - group: apps\n    kind: Deployment\n    jsonPointers: {}\n", serde_json::to_string(&pointers).unwrap()),
            "prop.yaml",
        ).unwrap();
        let out = run(&policy, &Review::update(deployment(spec), deployment(new_spec)));
        let expected = edited.iter().all(|e| pointers.iter().any(|p| under(e, p)));
        prop_assert_eq!(out.allowed(), expected, "edited {:?} ignored {:?} drifted {:?}", edited, pointers, out.decision.drifted_paths);
    }

    /// Normalizing both sides alike means an unchanged write is never drift,
    /// whatever the rules ignore.
    #[test]
    fn an_unchanged_write_is_never_drift(spec in tree(), ignored in prop::collection::vec(pointer(), 0..3)) {
        let pointers: Vec<String> = ignored.iter().map(|p| format!("/spec{p}")).collect();
        let policy = Policy::from_yaml(
            &format!("ignoreDifferences:\n  - group: apps\n    kind: Deployment\n    jsonPointers: {}\n", serde_json::to_string(&pointers).unwrap()),
            "prop.yaml",
        ).unwrap();
        let obj = deployment(spec);
        let out = run(&policy, &Review::update(obj.clone(), obj));
        prop_assert!(out.allowed());
        prop_assert!(out.decision.drifted_paths.is_empty());
    }
}
