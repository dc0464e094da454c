//! The mutating webhook's patch on a warn-mode managed object: the fuzzer
//! shapes the stored object, the edit, the user and the annotations; whenever
//! the reply carries a JSONPatch, it must apply to the object, and change
//! nothing but the `driftguard.io/drift` annotation (and create the
//! annotations map when the object had none).
#![no_main]

use std::sync::LazyLock;

use driftguard::drift::Verdict;
use driftguard::{Endpoint, Policy, judge};
use jiff::Timestamp;
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};

const DRIFT: &str = "driftguard.io/drift";
const TRACKING: &str = "argocd.argoproj.io/tracking-id";

/// The embedded default: `dev-*` namespaces are in warn mode.
static POLICY: LazyLock<Policy> = LazyLock::new(Policy::embedded);

/// Keys the engine and the patch care about, so the fuzzer meets them often.
const KEYS: &[&str] = &[
    "spec",
    "replicas",
    "template",
    "metadata",
    "annotations",
    "labels",
    "status",
    "managedFields",
    DRIFT,
    TRACKING,
    "driftguard.io/mode",
    "driftguard.io/break-glass",
    "app.kubernetes.io/instance",
    "kustomize.toolkit.fluxcd.io/name",
    "a/b",
    "~0~1",
    "",
];

const USERS: &[&str] = &[
    "alice",
    "system:serviceaccount:argocd:argocd-application-controller",
    "system:node:n1",
    "system:serviceaccount:flux-system:kustomize-controller",
    "",
];

fn key(u: &mut Unstructured) -> Result<String> {
    Ok(if u.ratio(3, 4)? {
        (*u.choose(KEYS)?).to_owned()
    } else {
        u.arbitrary()?
    })
}

fn string(u: &mut Unstructured) -> Result<String> {
    Ok(match u.int_in_range(0..=3)? {
        0 => "myapp:apps/Deployment:dev-fuzz/myapp".to_owned(),
        1 => "{\"user\":\"x\",\"paths\":[]}".to_owned(),
        _ => u.arbitrary()?,
    })
}

fn value(u: &mut Unstructured, depth: u32) -> Result<Value> {
    let pick = if depth == 0 { 4 } else { 6 };
    Ok(match u.int_in_range(0..=pick)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => json!(u.arbitrary::<i32>()?),
        3 | 4 => Value::String(string(u)?),
        5 => Value::Array(
            (0..u.int_in_range(0..=3)?)
                .map(|_| value(u, depth - 1))
                .collect::<Result<_>>()?,
        ),
        _ => Value::Object(
            (0..u.int_in_range(0..=4)?)
                .map(|_| Ok((key(u)?, value(u, depth - 1)?)))
                .collect::<Result<_>>()?,
        ),
    })
}

/// A string map (labels, annotations), or its absence or `null`: `ObjectMeta`
/// refuses anything else, and so does the apiserver.
fn string_map(u: &mut Unstructured, must: &[(&str, String)]) -> Result<Option<Value>> {
    let mut map = Map::new();
    for _ in 0..u.int_in_range(0..=3)? {
        map.insert(key(u)?, Value::String(string(u)?));
    }
    for (k, v) in must {
        map.insert((*k).to_owned(), Value::String(v.clone()));
    }
    Ok(match u.int_in_range(0..=5)? {
        0 if must.is_empty() => None,
        1 if must.is_empty() => Some(Value::Null),
        _ => Some(Value::Object(map)),
    })
}

fn object(u: &mut Unstructured, tracked: bool) -> Result<Value> {
    let must: Vec<(&str, String)> = if tracked {
        vec![(TRACKING, "myapp:apps/Deployment:dev-fuzz/myapp".to_owned())]
    } else {
        Vec::new()
    };
    let mut metadata = json!({"name": "myapp", "namespace": "dev-fuzz"});
    if let Some(a) = string_map(u, &must)? {
        metadata["annotations"] = a;
    }
    if let Some(l) = string_map(u, &[])? {
        metadata["labels"] = l;
    }
    let mut obj = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata});
    for _ in 0..u.int_in_range(0..=3)? {
        let k = key(u)?;
        if !matches!(k.as_str(), "metadata" | "apiVersion" | "kind") {
            obj[k] = value(u, 3)?;
        }
    }
    Ok(obj)
}

fn scenario(u: &mut Unstructured) -> Result<(Value, Value, String, bool)> {
    // The stored object carries Argo CD's tracking id: it is managed.
    let old = object(u, true)?;
    // The edit may keep, change or drop it.
    let new = if u.ratio(1, 4)? {
        old.clone()
    } else {
        let tracked = u.arbitrary()?;
        object(u, tracked)?
    };
    Ok((old, new, (*u.choose(USERS)?).to_owned(), u.arbitrary()?))
}

fn review(old: &Value, new: &Value, user: &str, dry_run: bool) -> Vec<u8> {
    let gvk = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
    let gvr = json!({"group": "apps", "version": "v1", "resource": "deployments"});
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "fuzz",
            "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
            "name": "myapp", "namespace": "dev-fuzz",
            "operation": "UPDATE",
            "userInfo": {"username": user, "groups": ["system:authenticated"]},
            "object": new, "oldObject": old,
            "dryRun": dry_run,
        }
    }))
    .unwrap()
}

fn annotations(obj: &mut Value) -> Option<&mut Value> {
    obj.pointer_mut("/metadata/annotations")
}

fuzz_target!(|data: &[u8]| {
    let Ok((old, new, user, dry_run)) = scenario(&mut Unstructured::new(data)) else {
        return;
    };
    let now: Timestamp = "2026-11-30T12:00:00Z".parse().unwrap();
    let body = review(&old, &new, &user, dry_run);
    let judged = judge(&POLICY, &body, Endpoint::Mutate, None, now)
        .unwrap_or_else(|e| panic!("a well-formed review refused: {e}"));
    let response = judged.response.response.as_ref().expect("a response");
    assert!(
        response.allowed,
        "the mutating webhook denied: {response:?}"
    );
    let Some(patch) = &response.patch else {
        // An UPDATE with an object always gets the record in warn mode.
        assert_ne!(
            judged.decision.verdict,
            Verdict::Warn,
            "warn without a patch"
        );
        return;
    };
    let patch: json_patch::Patch = serde_json::from_slice(patch).expect("the patch is a JSONPatch");
    let mut patched = new.clone();
    json_patch::patch(&mut patched, &patch)
        .unwrap_or_else(|e| panic!("the patch does not apply: {e}\npatch {patch:?}\nto {new}"));
    let text = serde_json::to_string(&patched).unwrap();
    let mut patched: Value = serde_json::from_str(&text).expect("the patched object parses");

    // The record: a JSON string naming the user.
    let record = patched
        .pointer(&format!(
            "/metadata/annotations/{}",
            DRIFT.replace('/', "~1")
        ))
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no {DRIFT} string after the patch: {patched}"));
    let record: Value = serde_json::from_str(record).expect("the record is JSON");
    assert_eq!(record["user"], user, "the record names another user");

    // Nothing else changed.
    let mut before = new.clone();
    if annotations(&mut before).is_some_and(|a| a.is_object()) {
        annotations(&mut before)
            .unwrap()
            .as_object_mut()
            .unwrap()
            .remove(DRIFT);
        annotations(&mut patched)
            .unwrap()
            .as_object_mut()
            .unwrap()
            .remove(DRIFT);
    } else {
        // The patch created the map: it holds the record only.
        let created = annotations(&mut patched).unwrap();
        assert!(
            created.as_object().is_some_and(|m| m.len() == 1),
            "created {created}"
        );
        for obj in [&mut before, &mut patched] {
            obj["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("annotations");
        }
    }
    assert_eq!(before, patched, "the patch changed more than {DRIFT}");
});
