//! Argo CD v3.6's per-resource ignore rules: the annotation
//! `argocd.argoproj.io/ignore-differences`, a YAML map whose `jsonPointers`
//! Argo CD ignores for that object alone, merged with the Application's rules
//! (`util/argo/diff/ignore.go`, `ExtractIgnoreDifferencesFromAnnotations`).
//!
//! Argo CD reads it from the manifest in Git; driftguard reads it from the
//! stored object, which Argo CD's sync made equal to Git (a manual change to
//! the annotation is drift: it is a decision input, [`super::inputs`]).
//! Argo CD skips an annotation that does not parse or lists no pointers, and
//! a pointer that does not resolve removes nothing; driftguard does the same
//! (so it is never looser than Argo CD) and says why in the decision's notes.

use serde_json::Value;

use super::inputs::ARGO_IGNORE_DIFFERENCES;
use crate::policy::ignore::IgnoreRule;
use crate::policy::path::Path;

/// The longest annotation read, and the most pointers taken from it. Argo CD
/// reads any, but a larger one ignores nothing here (stricter, never looser):
/// each pointer's segments cost about 60 bytes per byte in a decision, so
/// this bounds what an annotation costs (`server::budget::PER_REVIEW_BYTES`).
pub const MAX_BYTES: usize = 8 * 1024;
pub const MAX_POINTERS: usize = 32;

/// What the annotation on `object` means.
#[derive(Debug)]
pub enum Annotated {
    Absent,
    /// Present, but Argo CD ignores nothing by it: why.
    Skipped(String),
    /// Over [`MAX_BYTES`] or [`MAX_POINTERS`]: Argo CD would read it,
    /// driftguard ignores nothing by it (stricter): why.
    TooLarge(String),
    /// The rule, and the pointers Argo CD cannot resolve (ignored nothing), if any.
    Rule(Box<IgnoreRule>, Vec<String>),
}

impl Annotated {
    /// Why it ignores nothing, or less than it says, if so: a decision's note.
    pub fn note(&self) -> Option<String> {
        let why = match self {
            Annotated::Rule(_, unresolved) if !unresolved.is_empty() => format!(
                "these pointers resolve nothing, for Argo CD as for driftguard: {unresolved:?}"
            ),
            Annotated::Skipped(why) => format!("ignores nothing; Argo CD skips it too: {why}"),
            Annotated::TooLarge(why) => format!(
                "ignores nothing here, though Argo CD reads it: {why} (driftguard's bound; ask \
                 for what it ignores in the Application's ignoreDifferences instead)"
            ),
            _ => return None,
        };
        Some(format!("{ARGO_IGNORE_DIFFERENCES} on this object: {why}"))
    }
}

/// The annotation's rule for `object` (the stored object, for a write).
pub fn rule(object: &Value) -> Annotated {
    let Some(value) = object
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(ARGO_IGNORE_DIFFERENCES))
    else {
        return Annotated::Absent;
    };
    let Some(text) = value.as_str().filter(|t| !t.is_empty()) else {
        return Annotated::Absent;
    };
    if text.len() > MAX_BYTES {
        return Annotated::TooLarge(format!("it is {} bytes, over {MAX_BYTES}", text.len()));
    }
    let pointers = match pointers(text) {
        Ok(p) if p.is_empty() => return Annotated::Skipped("it lists no jsonPointers".into()),
        Ok(p) if p.len() > MAX_POINTERS => {
            return Annotated::TooLarge(format!(
                "it lists {} jsonPointers, over {MAX_POINTERS}",
                p.len()
            ));
        }
        Ok(p) => p,
        Err(why) => return Annotated::Skipped(why),
    };
    let mut paths = Vec::new();
    let mut unresolved = Vec::new();
    for p in pointers {
        // The empty pointer is the whole object: Argo CD's JSON patch cannot
        // remove the root, so it ignores nothing.
        match Path::parse_pointer(&p) {
            Ok(path) => paths.push(path),
            Err(_) => unresolved.push(p),
        }
    }
    if paths.is_empty() {
        return Annotated::Skipped(format!(
            "none of its jsonPointers is a JSON pointer Argo CD can resolve: {unresolved:?}"
        ));
    }
    let origin = format!("{ARGO_IGNORE_DIFFERENCES} on the object");
    Annotated::Rule(
        Box::new(IgnoreRule::for_one_object(paths, origin)),
        unresolved,
    )
}

/// The `jsonPointers` of the annotation's YAML, as Argo CD decodes it
/// (`sigs.k8s.io/yaml` into a struct: YAML to JSON, then Go's
/// `encoding/json`, whose field names match without regard to case, and
/// which ignores other keys).
fn pointers(text: &str) -> Result<Vec<String>, String> {
    let parsed: Value = crate::policy::yaml::from_str(text)
        .map_err(|e| format!("it is not YAML ({})", first_line(&e.to_string())))?;
    let Some(map) = parsed.as_object() else {
        return Err("it is not a YAML map with jsonPointers".into());
    };
    // encoding/json: the last matching key wins.
    let Some(list) = map
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("jsonPointers"))
        .map(|(_, v)| v)
        .next_back()
    else {
        return Ok(Vec::new());
    };
    match list {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::String(s) => Ok(s.clone()),
                other => Err(format!("jsonPointers holds a non-string: {other}")),
            })
            .collect(),
        other => Err(format!("jsonPointers is not a list: {other}")),
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn on(value: &str) -> Value {
        json!({"metadata": {"annotations": {ARGO_IGNORE_DIFFERENCES: value}}})
    }

    fn pointers_of(a: &Annotated) -> Vec<String> {
        match a {
            Annotated::Rule(rule, _) => rule.pointers.iter().map(Path::to_pointer).collect(),
            other => panic!("no rule: {other:?}"),
        }
    }

    /// Argo CD's own example (common/common.go).
    #[test]
    fn argo_cds_example_ignores_replicas() {
        let a = rule(&on("jsonPointers:\n- /spec/replicas"));
        assert_eq!(pointers_of(&a), ["/spec/replicas"]);
    }

    #[test]
    fn field_names_match_as_encoding_json_does() {
        let a = rule(&on("JSONPointers: [/spec/replicas]\nother: 1"));
        assert_eq!(pointers_of(&a), ["/spec/replicas"]);
    }

    #[test]
    fn what_argo_cd_skips_ignores_nothing_and_says_why() {
        for (value, why) in [
            ("- /spec/replicas", "not a YAML map"),
            ("jsonPointers: /spec/replicas", "not a list"),
            ("jsonPointers: [1]", "non-string"),
            ("jsonPointers: []", "no jsonPointers"),
            ("jqPathExpressions: [.spec]", "no jsonPointers"),
            ("jsonPointers: [\"\", spec]", "can resolve"),
            ("{{", "not YAML"),
        ] {
            match rule(&on(value)) {
                Annotated::Skipped(text) => assert!(text.contains(why), "{value}: {text}"),
                other => panic!("{value}: {other:?}"),
            }
        }
        for value in [
            format!("jsonPointers: [{}]", vec!["/x"; MAX_BYTES / 4].join(", ")),
            format!(
                "jsonPointers: [{}]",
                vec!["/x"; MAX_POINTERS + 1].join(", ")
            ),
        ] {
            let a = rule(&on(&value));
            assert!(matches!(a, Annotated::TooLarge(_)), "{a:?}");
            assert!(a.note().unwrap().contains("though Argo CD reads it"));
        }
        assert!(matches!(
            rule(&on(&format!(
                "jsonPointers: [{}]",
                vec!["/x"; MAX_POINTERS].join(", ")
            ))),
            Annotated::Rule(..)
        ));
        assert!(matches!(rule(&json!({})), Annotated::Absent));
        assert!(matches!(rule(&on("")), Annotated::Absent));
    }

    #[test]
    fn unresolvable_pointers_are_named_and_the_rest_kept() {
        match rule(&on("jsonPointers: [/spec/replicas, \"\", data]")) {
            Annotated::Rule(rule, unresolved) => {
                assert_eq!(rule.pointers.len(), 1);
                assert_eq!(unresolved, ["", "data"]);
            }
            other => panic!("{other:?}"),
        }
    }
}
