//! Argo CD's own ignoreDifferences test cases (tests/data/upstream, transcribed
//! with sources), run against driftguard's rules. We match Argo CD except where
//! it silently fails or runs without bound; those cases are listed with the reason.

mod common;

use driftguard::policy::ignore::{IgnoreRule, Target};
use driftguard::policy::path::remove_all;
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

fn target_of(obj: &Value) -> (String, String, String, String) {
    let api = obj["apiVersion"].as_str().unwrap();
    let group = api.split_once('/').map_or("", |(g, _)| g).to_owned();
    (
        group,
        obj["kind"].as_str().unwrap().to_owned(),
        obj["metadata"]["name"].as_str().unwrap_or("").to_owned(),
        obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
    )
}

/// Applies every matching rule to `obj`, with ownership read from `owners`.
fn normalize(rules: &[IgnoreRule], obj: &Value, owners: &Value) -> (Value, usize) {
    let (g, k, n, ns) = target_of(obj);
    let target = Target {
        group: &g,
        kind: &k,
        name: &n,
        namespace: &ns,
    };
    let mut failures = Vec::new();
    let mut paths = Vec::new();
    let input = driftguard::policy::jq::JqInput::new(obj);
    for rule in rules.iter().filter(|r| r.matches(&target)) {
        paths.extend(rule.paths(&input, Some(owners), &mut failures));
    }
    let mut out = obj.clone();
    remove_all(&mut out, paths);
    (out, failures.len())
}

fn check_expectations(label: &str, obj: &Value, expect: &Value) {
    let Some(map) = expect.as_object() else {
        return;
    };
    for (pointer, want) in map {
        let got = obj.pointer(pointer);
        match want.as_str() {
            Some("absent") => assert!(
                got.is_none(),
                "{label}: {pointer} should be absent, is {got:?}"
            ),
            Some("empty") => assert!(
                got.is_none() || got == Some(&json!("")),
                "{label}: {pointer} should be empty"
            ),
            Some(s) if s.starts_with("length ") => {
                let n: usize = s[7..].split_whitespace().next().unwrap().parse().unwrap();
                let len = got.and_then(|v| {
                    v.as_array()
                        .map(Vec::len)
                        .or(v.as_object().map(|m| m.len()))
                });
                assert_eq!(len, Some(n), "{label}: {pointer}");
            }
            _ => assert_eq!(got, Some(want), "{label}: {pointer}"),
        }
    }
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
        let compiled: Result<Vec<IgnoreRule>, String> = case["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| IgnoreRule::compile(&to_rule(r, false), "rule".into()).map_err(String::from))
            .collect();
        let expect = &case["expect"];
        if expect["constructor_error"] == json!(true)
            || DIVERGES_SPLICED_EXPRESSION
                .iter()
                .any(|d| label.starts_with(d))
        {
            assert!(compiled.is_err(), "{label}: must be rejected at load");
            ran += 1;
            continue;
        }
        if expect.get("apply_error_contains").is_some() {
            // Deliberate difference: Argo CD runs `until(true==false; ...)`, cuts
            // it off after 1s and silently skips the rule. We refuse it when
            // the policy loads, so the rule never silently stops protecting.
            let err = compiled.expect_err(label);
            assert_eq!(
                err,
                "rule.jqPathExpressions[0]: at column 1 of the expression: `until` is not allowed: \
                 it can run without bound (allowed: field access, [], |, ',', select(...), \
                 comparisons, keys, has, test, ...)",
                "{label}"
            );
            ran += 1;
            continue;
        }
        let rules = compiled.unwrap_or_else(|e| panic!("{label}: {e}"));
        let obj = &case["object"];
        let (out, failures) = normalize(&rules, obj, obj);
        if let Some(removed) = expect["removed"].as_array() {
            for p in removed {
                assert!(
                    out.pointer(p.as_str().unwrap()).is_none(),
                    "{label}: {p} not removed"
                );
            }
        }
        if let Some(kept) = expect["kept"].as_array() {
            for p in kept {
                assert!(
                    out.pointer(p.as_str().unwrap()).is_some(),
                    "{label}: {p} removed"
                );
            }
        }
        check_expectations(label, &out, &expect["values"]);
        if expect["unchanged"] == json!(true) {
            assert_eq!(&out, obj, "{label}: must be unchanged");
            assert_eq!(failures, 1, "{label}: the failing jq must be reported");
        }
        assert!(
            expect.get("apply_error_contains").is_none(),
            "{label}: the runaway-jq case is refused at load, above"
        );
        if expect.get("apply_errors").is_some() {
            assert_eq!(&out, obj, "{label}: missing pointers are skipped silently");
            assert_eq!(failures, 0);
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
        ran += 1;
    }
    assert_eq!(ran, 11);
}

#[test]
fn managed_fields_cases() {
    let mut ran = 0;
    for case in cases() {
        let api = case["api"].as_str().unwrap();
        if !(api.starts_with("managedfields.Normalize") || api.starts_with("diff.Normalize")) {
            continue;
        }
        let label = case["source"].as_str().unwrap().split_once(' ').unwrap().1;
        let (live, desired) = (&case["object"]["live"], &case["object"]["desired"]);
        if live.is_null() || desired.is_null() {
            continue; // "no-op if live/desired is nil": the admission path always has both objects.
        }
        let rules: Vec<IgnoreRule> = case["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| IgnoreRule::compile(&to_rule(r, false), "rule".into()).unwrap())
            .collect();
        let (live_after, _) = normalize(&rules, live, live);
        let (desired_after, _) = normalize(&rules, desired, live);
        let expect = &case["expect"];
        check_expectations(label, &live_after, &expect["live_after"]);
        check_expectations(label, &desired_after, &expect["desired_after"]);
        if expect["live_unchanged"] == json!(true) {
            assert_eq!(&live_after, live, "{label}");
            assert_eq!(&desired_after, desired, "{label}");
        }
        ran += 1;
    }
    assert!(ran >= 7, "ran {ran} managed-fields cases");
}
