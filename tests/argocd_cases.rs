//! Argo CD's own ignoreDifferences test cases (tests/data/upstream, transcribed
//! with sources), run through the decision users run: each rule becomes a
//! policy loaded from text, each case object a GitOps-managed stored object,
//! and each expectation a manual UPDATE that must be allowed (the path is
//! ignored) or denied (it is not). We match Argo CD except where it silently
//! fails; those cases are listed with the reason.

use driftguard_testkit::common;

use common::{Outcome, Review, run, with, without};
use driftguard::Policy;
use driftguard::drift::Finding;
use driftguard::policy::ignore::{IgnoreRule, Target};
use driftguard::policy::schema::IgnoreDifference;
use serde_json::{Value, json};

fn cases() -> Vec<Value> {
    serde_json::from_str(&common::repo_file(
        "tests/data/upstream/argocd_normalizer_cases.json",
    ))
    .unwrap()
}

/// An Argo CD rule record as our schema: overrides keyed `group/kind`, `kind` (core) or `*/*`.
fn to_rule(r: &Value, strip_paths: bool) -> IgnoreDifference {
    let (group, kind) = match r.get("overrideKey").and_then(Value::as_str) {
        Some(key) => match key.split_once('/') {
            Some((g, k)) => (g.to_owned(), k.to_owned()),
            None => (String::new(), key.to_owned()),
        },
        // A bare trusted-managers record applies to every kind.
        None if r.get("kind").is_none() => ("*".to_owned(), "*".to_owned()),
        None => (
            r.get("group")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            r.get("kind")
                .and_then(Value::as_str)
                .unwrap_or("*")
                .to_owned(),
        ),
    };
    let list = |k: &str| -> Vec<String> {
        if strip_paths && k != "managedFieldsManagers" {
            return vec![];
        }
        r.get(k)
            .and_then(Value::as_array)
            .map(|a| a.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default()
    };
    IgnoreDifference {
        group,
        kind,
        name: r
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        namespace: r
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        json_pointers: list("jsonPointers"),
        jq_path_expressions: list("jqPathExpressions"),
        managed_fields_managers: list("managedFieldsManagers"),
    }
}

/// The case's rules as a driftguard policy, loaded from text like a user's file
/// (JSON is YAML).
fn policy_for(rules: &[Value], strip_paths: bool) -> Result<Policy, String> {
    let defs: Vec<Value> = rules
        .iter()
        .map(|r| {
            let d = to_rule(r, strip_paths);
            json!({"group": d.group, "kind": d.kind, "name": d.name, "namespace": d.namespace,
                   "jsonPointers": d.json_pointers, "jqPathExpressions": d.jq_path_expressions,
                   "managedFieldsManagers": d.managed_fields_managers})
        })
        .collect();
    let text = serde_json::to_string_pretty(&json!({ "ignoreDifferences": defs })).unwrap();
    Policy::from_yaml(&text, "case.yaml").map_err(|e| e.to_string())
}

/// `obj` as an Argo CD-tracked object in namespace `production` (where the
/// review builder puts every request).
fn tracked(obj: &Value) -> Value {
    let mut out = obj.clone();
    let api = out["apiVersion"].as_str().unwrap().to_owned();
    let group = api.split_once('/').map_or("", |(g, _)| g).to_owned();
    let kind = out["kind"].as_str().unwrap().to_owned();
    let name = out["metadata"]["name"].as_str().unwrap().to_owned();
    out["metadata"]["namespace"] = json!("production");
    out["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"] =
        json!(format!("app:{group}/{kind}:production/{name}"));
    out
}

/// A different value of the same shape class: what a manual edit writes.
fn edited(v: &Value) -> Value {
    match v {
        Value::String(s) => json!(format!("{s}-edited")),
        Value::Number(n) => json!(n.as_i64().unwrap_or(0) + 1),
        Value::Bool(b) => json!(!b),
        _ => json!("edited"),
    }
}

/// A manual edit of `pointer` in `stored`: removed, and (for a scalar) changed.
fn edits(stored: &Value, pointer: &str) -> Vec<Value> {
    let mut out = vec![without(stored, pointer)];
    if let Some(v) = stored
        .pointer(pointer)
        .filter(|v| !v.is_object() && !v.is_array())
    {
        out.push(with(stored, pointer, edited(v)));
    }
    out
}

fn assert_ignored(label: &str, policy: &Policy, stored: &Value, pointer: &str) {
    for new in edits(stored, pointer) {
        let out = run(policy, &Review::update(stored.clone(), new));
        assert!(
            out.allowed() && out.decision.finding == Finding::NoDrift,
            "{label}: an edit of {pointer} must be ignored; got {:?} {:?}",
            out.decision.finding,
            out.decision.drifted_paths
        );
    }
}

fn assert_judged(label: &str, policy: &Policy, stored: &Value, pointer: &str) -> Outcome {
    let mut last = None;
    for new in edits(stored, pointer) {
        let out = run(policy, &Review::update(stored.clone(), new));
        assert!(
            !out.allowed()
                && out
                    .decision
                    .drifted_paths
                    .iter()
                    .any(|p| p.starts_with(pointer) || pointer.starts_with(p.as_str())),
            "{label}: an edit of {pointer} must be drift; got {:?} {:?}",
            out.decision.finding,
            out.decision.drifted_paths
        );
        last = Some(out);
    }
    last.unwrap()
}

/// An unchanged write is allowed without rule failures.
fn assert_rules_quiet(label: &str, policy: &Policy, stored: &Value) {
    let out = run(policy, &Review::update(stored.clone(), stored.clone()));
    assert!(out.allowed(), "{label}: an unchanged write is allowed");
    assert!(
        out.decision.rule_failures.is_empty(),
        "{label}: {:?}",
        out.decision.rule_failures
    );
}

/// Every expectation as edits: `absent`/`empty` paths are ignored, paths with a
/// value are still judged.
fn check_expectations(label: &str, policy: &Policy, stored: &Value, expect: &Value) -> usize {
    let Some(map) = expect.as_object() else {
        return 0;
    };
    let mut checked = 0;
    for (pointer, want) in map {
        match want.as_str() {
            Some("absent") | Some("empty") => {
                if stored.pointer(pointer).is_some() {
                    assert_ignored(label, policy, stored, pointer);
                    checked += 1;
                }
            }
            // The shape of what is left, not a field: covered by its members.
            Some(s) if s.starts_with("length ") => {}
            _ => {
                assert_judged(label, policy, stored, pointer);
                checked += 1;
            }
        }
    }
    checked
}

/// Argo CD splices the text into `del(%s)`, so `.nothing) | … |= …` runs as a
/// value rewrite and its failure is only logged. We parse the expression on its
/// own first and reject it when the policy loads.
const DIVERGES_SPLICED_EXPRESSION: [&str; 2] = [
    "TestJQPathExpressionReturnsHelpfulError",
    "TestNormalizeFailureLogIncludesResourceContext",
];

#[test]
fn ignore_normalizer_cases() {
    let mut ran = 0;
    for case in cases() {
        let api = case["api"].as_str().unwrap();
        if !api.contains("IgnoreNormalizer")
            && !api.contains("jqNormalizerPatch")
            && !api.contains("ignoreNormalizer.patches")
        {
            continue;
        }
        let source = case["source"].as_str().unwrap();
        let label = source.split_once(' ').unwrap().1;
        let loaded = policy_for(case["rules"].as_array().unwrap(), false);
        let expect = &case["expect"];
        if expect["constructor_error"] == json!(true)
            || DIVERGES_SPLICED_EXPRESSION
                .iter()
                .any(|d| label.starts_with(d))
        {
            let err = loaded.expect_err(label);
            assert!(err.contains("jqPathExpressions[0]"), "{label}: {err}");
            ran += 1;
            continue;
        }
        if expect.get("apply_error_contains").is_some() {
            // Argo CD cuts a runaway jq off after 1s and silently skips the rule;
            // driftguard refuses it when the policy loads, so a rule can never
            // silently stop protecting.
            let err = loaded.expect_err(label);
            assert!(err.contains("until"), "{label}: {err}");
            ran += 1;
            continue;
        }
        let policy = loaded.unwrap_or_else(|e| panic!("{label}: {e}"));
        let stored = tracked(&case["object"]);
        let mut checked = 0;
        for p in expect["removed"].as_array().into_iter().flatten() {
            assert_ignored(label, &policy, &stored, p.as_str().unwrap());
            checked += 1;
        }
        for p in expect["kept"].as_array().into_iter().flatten() {
            assert_judged(label, &policy, &stored, p.as_str().unwrap());
            checked += 1;
        }
        checked += check_expectations(label, &policy, &stored, &expect["values"]);
        if expect["unchanged"] == json!(true) {
            // The rule fails on the object: it ignores nothing, and says so.
            let rule = &case["rules"][0]["jqPathExpressions"][0];
            let new = with(&stored, "/spec/fakeField", json!({"foo": 1}));
            let out = run(&policy, &Review::update(stored.clone(), new));
            assert!(!out.allowed(), "{label}: a failing rule ignores nothing");
            assert_eq!(
                out.decision.rule_failures.len(),
                1,
                "{label}: {rule} must be reported"
            );
            checked += 1;
        }
        if expect.get("apply_errors").is_some() {
            // Missing pointers are skipped silently: no failure, nothing ignored.
            let out = run(&policy, &Review::update(stored.clone(), stored.clone()));
            assert!(
                out.allowed() && out.decision.rule_failures.is_empty(),
                "{label}"
            );
            assert_judged(
                label,
                &policy,
                &stored,
                "/spec/template/spec/containers/0/image",
            );
            checked += 1;
        }
        if checked == 0 {
            // Only "no error": rules that select nothing (missing pointers) must
            // neither fail nor hide an edit.
            assert_rules_quiet(label, &policy, &stored);
        }
        ran += 1;
    }
    assert_eq!(ran, 13, "every ignore-normalizer case runs");
}

#[test]
fn has_ignore_difference_matching_cases() {
    let mut ran = 0;
    for case in cases() {
        if !case["api"]
            .as_str()
            .unwrap()
            .contains("HasIgnoreDifference")
        {
            continue;
        }
        let label = case["source"].as_str().unwrap().split_once(' ').unwrap().1;
        let q = &case["query"];
        let s = |k: &str| q[k].as_str().unwrap_or("").to_owned();
        let (g, k, n, ns) = (s("group"), s("kind"), s("name"), s("namespace"));
        let target = Target {
            group: &g,
            kind: &k,
            name: &n,
            namespace: &ns,
        };
        // These records use placeholder paths ("some.json.pointer"); only matching is under test.
        let found = case["rules"].as_array().unwrap().iter().any(|r| {
            IgnoreRule::compile(&to_rule(r, true), "rule".into())
                .unwrap()
                .matches(&target)
        });
        assert_eq!(found, case["expect"]["found"].as_bool().unwrap(), "{label}");
        // The same rules load as a policy, as a user would write them.
        policy_for(case["rules"].as_array().unwrap(), true)
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        ran += 1;
    }
    assert_eq!(ran, 11);
}

/// Argo CD ignores fields that the named managers own in the live object. The
/// live object is the stored one; a manual edit that keeps managedFields as
/// they are (the manager still owns the field afterwards) is what these cases
/// describe. An edit that moves ownership away is drift: see tests/sequences.rs.
#[test]
fn managed_fields_cases() {
    let mut ran = 0;
    for case in cases() {
        let api = case["api"].as_str().unwrap();
        if !(api.starts_with("managedfields.Normalize") || api.starts_with("diff.Normalize")) {
            continue;
        }
        let label = case["source"].as_str().unwrap().split_once(' ').unwrap().1;
        let live = &case["object"]["live"];
        if live.is_null() || case["object"]["desired"].is_null() {
            continue; // "no-op if live/desired is nil": the admission path always has both objects.
        }
        let policy = policy_for(case["rules"].as_array().unwrap(), false)
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        let stored = tracked(live);
        let expect = &case["expect"];
        let mut checked = check_expectations(label, &policy, &stored, &expect["live_after"]);
        if expect["live_unchanged"] == json!(true) {
            assert_judged(label, &policy, &stored, "/spec/replicas");
            checked += 1;
        }
        if let Some(kept) = expect["live_unchanged"].as_object() {
            for pointer in kept.keys() {
                assert_judged(label, &policy, &stored, pointer);
                checked += 1;
            }
        }
        if checked == 0 {
            assert_rules_quiet(label, &policy, &stored);
        }
        ran += 1;
    }
    assert!(ran >= 7, "ran {ran} managed-fields cases");
}
