//! Compiled `ignoreDifferences` rules and the paths they select in an object.

use std::collections::BTreeSet;

use serde_json::Value;

use super::jq::{JqInput, JqPath};
pub use super::locator::Locator;
use super::path::Path;
use super::pattern::Pattern;
use super::schema::IgnoreDifference;
use crate::deadline::{Deadline, Stopped};

/// What a rule is matched against: the object's group/kind and identity.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// The object's API group (`""` for the core group).
    pub group: &'a str,
    /// Its kind.
    pub kind: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Its namespace (`""` when cluster-scoped).
    pub namespace: &'a str,
}

/// One compiled `ignoreDifferences` entry: which objects it applies to and
/// the paths it hides there.
#[derive(Debug)]
pub struct IgnoreRule {
    group: Pattern,
    kind: Pattern,
    name: String,
    namespace: String,
    /// Its `jsonPointers`.
    pub pointers: Vec<Path>,
    /// Its `jqPathExpressions`.
    pub jq: Vec<JqPath>,
    /// Its `managedFieldsManagers`: fields these field managers own are ignored.
    pub managers: Vec<String>,
    /// Where the rule came from, for messages: `policy ignoreDifferences[2]`.
    pub origin: String,
}

/// Rules indexed by literal kind, so that a thousand rules for other kinds cost
/// a binary search, not a thousand glob matches. The index holds positions
/// only (the kinds are the rules' own): thousands of Applications each carry
/// a set, and a map per set cost more than its rules.
#[derive(Debug, Default)]
pub struct RuleSet {
    rules: Box<[IgnoreRule]>,
    /// The rules of a literal kind, by kind and then position.
    by_kind: Box<[u32]>,
    /// The rules whose kind is a glob, by position.
    globbed: Box<[u32]>,
}

impl RuleSet {
    /// The set of `rules`, indexed.
    pub fn new(rules: Vec<IgnoreRule>) -> Self {
        let rules = rules.into_boxed_slice();
        let (mut by_kind, globbed): (Vec<u32>, Vec<u32>) =
            (0..rules.len() as u32).partition(|&i| rules[i as usize].literal_kind().is_some());
        by_kind.sort_by_key(|&i| (rules[i as usize].literal_kind(), i));
        Self {
            rules,
            by_kind: by_kind.into(),
            globbed: globbed.into(),
        }
    }

    /// The rules that apply to `target`, in the order they were written.
    pub fn matching<'s>(&'s self, target: &Target) -> Vec<&'s IgnoreRule> {
        let kind_of = |i: &u32| self.rules[*i as usize].literal_kind();
        let from = self
            .by_kind
            .partition_point(|i| kind_of(i) < Some(target.kind));
        let literal = self.by_kind[from..]
            .iter()
            .take_while(|i| kind_of(i) == Some(target.kind));
        let mut indices: Vec<u32> = literal.chain(&self.globbed).copied().collect();
        indices.sort_unstable();
        indices
            .into_iter()
            .map(|i| &self.rules[i as usize])
            .filter(|r| r.matches(target))
            .collect()
    }

    /// Every rule, in the order written.
    pub fn iter(&self) -> impl Iterator<Item = &IgnoreRule> {
        self.rules.iter()
    }

    /// How many rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// A rule that could not be evaluated on an object: it ignored nothing there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleFailure {
    /// The rule's [`IgnoreRule::origin`].
    pub origin: String,
    /// The jq expression that failed.
    pub expression: String,
    /// jq's error.
    pub error: String,
}

impl RuleFailure {
    /// One line for notes and logs.
    pub fn describe(&self) -> String {
        format!(
            "{} jq `{}` failed: {}",
            self.origin, self.expression, self.error
        )
    }
}

/// A rule that does not compile: `item` names the entry (`ignoreDifferences[2].jqPathExpressions[0]`).
#[derive(Clone, Debug, thiserror::Error)]
pub struct RuleError {
    /// The refused entry.
    pub item: String,
    /// Why it was refused.
    pub reason: String,
    /// Set when a jq expression was refused at a known place in its text, so
    /// that a caller holding the file can point into it.
    pub jq: Option<JqSpot>,
    /// The refused JSON pointer as written, for a caller to find in the file.
    pub pointer: Option<String>,
}

/// Which `jqPathExpressions` entry of the rule was refused, and where in it.
#[derive(Clone, Debug)]
pub struct JqSpot {
    /// The entry's index in `jqPathExpressions`.
    pub index: usize,
    /// The expression as written.
    pub expression: String,
    /// Byte offset in `expression`.
    pub offset: usize,
}

impl JqSpot {
    /// `line L, column C` (1-based, in characters) within the expression.
    pub fn line_column(&self) -> (usize, usize) {
        let before = self
            .expression
            .get(..self.offset)
            .unwrap_or(&self.expression);
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        (
            before.matches('\n').count() + 1,
            before[line_start..].chars().count() + 1,
        )
    }
}

impl RuleError {
    fn new(item: String, reason: impl ToString) -> Self {
        Self {
            item,
            reason: reason.to_string(),
            jq: None,
            pointer: None,
        }
    }
}

/// Without the file: the position within the expression.
impl std::fmt::Display for RuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.jq {
            Some(spot) if spot.expression.contains('\n') => {
                let (line, column) = spot.line_column();
                write!(
                    f,
                    "{}: at line {line}, column {column} of the expression: {}",
                    self.item, self.reason
                )
            }
            Some(spot) => write!(
                f,
                "{}: at column {} of the expression: {}",
                self.item,
                spot.line_column().1,
                self.reason
            ),
            None => write!(f, "{}: {}", self.item, self.reason),
        }
    }
}

impl IgnoreRule {
    /// Compiles one `ignoreDifferences` entry; `origin` names it in messages.
    pub fn compile(def: &IgnoreDifference, origin: String) -> Result<Self, RuleError> {
        let at = |what: &str, i: usize| format!("{origin}.{what}[{i}]");
        let pointers = def
            .json_pointers
            .iter()
            .enumerate()
            .map(|(i, p)| {
                Path::parse_pointer(p).map_err(|e| RuleError {
                    pointer: Some(p.clone()),
                    ..RuleError::new(at("jsonPointers", i), e)
                })
            })
            .collect::<Result<_, _>>()?;
        let jq = def
            .jq_path_expressions
            .iter()
            .enumerate()
            .map(|(i, e)| {
                JqPath::compile(e).map_err(|err| RuleError {
                    item: at("jqPathExpressions", i),
                    reason: err.to_string(),
                    jq: err.offset().map(|offset| JqSpot {
                        index: i,
                        expression: e.clone(),
                        offset,
                    }),
                    pointer: None,
                })
            })
            .collect::<Result<_, _>>()?;
        if def.kind.is_empty() {
            return Err(RuleError::new(
                origin,
                "`kind` is required (use \"*\" for every kind)",
            ));
        }
        Ok(Self {
            group: Pattern::new(&def.group)
                .map_err(|e| RuleError::new(format!("{origin}.group"), e))?,
            kind: Pattern::new(&def.kind)
                .map_err(|e| RuleError::new(format!("{origin}.kind"), e))?,
            name: def.name.clone(),
            namespace: def.namespace.clone(),
            pointers,
            jq,
            managers: def.managed_fields_managers.clone(),
            origin,
        })
    }

    /// A rule from Flux (`spec.ignore`, `spec.driftDetection.ignore`): JSON
    /// pointers only, where `""` is the whole object, as Flux defines it.
    pub fn from_flux(
        group: &str,
        kind: &str,
        paths: &[String],
        origin: String,
    ) -> Result<Self, RuleError> {
        let glob = |s: &str| {
            if s.is_empty() {
                "*".to_owned()
            } else {
                s.to_owned()
            }
        };
        let pointers = paths
            .iter()
            .map(|p| {
                if p.is_empty() {
                    Ok(Path::default())
                } else {
                    Path::parse_pointer(p)
                }
            })
            .collect::<Result<_, _>>()
            .map_err(|e| RuleError::new(origin.clone(), e))?;
        Ok(Self {
            group: Pattern::new(&glob(group)).map_err(|e| RuleError::new(origin.clone(), e))?,
            kind: Pattern::new(&glob(kind)).map_err(|e| RuleError::new(origin.clone(), e))?,
            name: String::new(),
            namespace: String::new(),
            pointers,
            jq: Vec::new(),
            managers: Vec::new(),
            origin,
        })
    }

    /// A rule for one object alone, already chosen by the caller (Argo CD's
    /// per-resource annotation): every group and kind, JSON pointers only.
    pub fn for_one_object(pointers: Vec<Path>, origin: String) -> Self {
        Self {
            group: Pattern::new("*").expect("`*` is a pattern"),
            kind: Pattern::new("*").expect("`*` is a pattern"),
            name: String::new(),
            namespace: String::new(),
            pointers,
            jq: Vec::new(),
            managers: Vec::new(),
            origin,
        }
    }

    /// The kind when it is written without glob characters.
    fn literal_kind(&self) -> Option<&str> {
        let kind = self.kind.source();
        (!kind.contains(['*', '?', '[', '{', '\\'])).then_some(kind)
    }

    /// Argo CD matching: group and kind are globs; name and namespace are exact,
    /// and empty means any.
    pub fn matches(&self, t: &Target) -> bool {
        self.group.is_match(t.group)
            && self.kind.is_match(t.kind)
            && (self.name.is_empty() || self.name == t.name)
            && (self.namespace.is_empty() || self.namespace == t.namespace)
    }

    /// The paths this rule drops from the stored and the incoming object. jq
    /// expressions whose subtree did not change are skipped (see
    /// [`JqPath::sees_no_change`]); a failure is reported once per expression.
    /// `with_managed_fields` are the stored and incoming objects as received
    /// (before normalization drops managedFields), whose managedFields say
    /// which fields `managedFieldsManagers` own.
    pub fn paths_pair(
        &self,
        old: &JqInput,
        new: &JqInput,
        with_managed_fields: Option<(&Value, &Value)>,
        failures: &mut Vec<RuleFailure>,
        deadline: &Deadline,
    ) -> Result<(Vec<Path>, Vec<Path>), Stopped> {
        let (mut old_paths, mut new_paths) = (self.pointers.clone(), self.pointers.clone());
        for jq in &self.jq {
            if jq.sees_no_change(old.value(), new.value()) {
                continue;
            }
            let mut error = None;
            for (input, out) in [(old, &mut old_paths), (new, &mut new_paths)] {
                match jq.paths(input, deadline)? {
                    Ok(paths) => out.extend(paths),
                    Err(e) => error = error.or(Some(e)),
                }
            }
            if let Some(error) = error {
                failures.push(RuleFailure {
                    origin: self.origin.clone(),
                    expression: jq.source().to_owned(),
                    error: error.to_string(),
                });
            }
        }
        if let (false, Some((old_raw, new_raw))) = (self.managers.is_empty(), with_managed_fields) {
            // Ignored only where the manager owns the field before and after the
            // write: a manual change moves ownership away (Argo CD then sees the
            // field as drift too), and a field claimed for the manager by this
            // write (a client-chosen fieldManager) is not the manager's yet.
            let before = owned_leaves(old_raw, &self.managers, deadline)?;
            let owned: FieldSet = owned_leaves(new_raw, &self.managers, deadline)?
                .intersection(&before)
                .cloned()
                .collect();
            old_paths.extend(locate_leaves(&owned, old.value(), deadline)?);
            new_paths.extend(locate_leaves(&owned, new.value(), deadline)?);
        }
        Ok((old_paths, new_paths))
    }
}

/// managedFields leaves, each as its FieldsV1 keys (`f:spec`, `k:{"name":"app"}`, ...).
pub type FieldSet = BTreeSet<Vec<String>>;

/// The FieldsV1 leaves that any of `managers` own in `obj.metadata.managedFields`.
/// A leaf is a node with no children but `"."`: owned whole. A node with
/// children is not owned whole, so fields other managers own inside it stay.
pub fn owned_leaves<M: AsRef<str>>(
    obj: &Value,
    managers: &[M],
    deadline: &Deadline,
) -> Result<FieldSet, Stopped> {
    leaves_where(
        obj,
        |entry| {
            let manager = entry_text(entry, "manager");
            managers.iter().any(|m| m.as_ref() == manager)
        },
        deadline,
    )
}

/// The FieldsV1 leaves of the managedFields entries that `keep` selects.
pub fn leaves_where(
    obj: &Value,
    keep: impl Fn(&Value) -> bool,
    deadline: &Deadline,
) -> Result<FieldSet, Stopped> {
    let mut out = FieldSet::new();
    let entries = obj
        .get("metadata")
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array);
    for entry in entries.into_iter().flatten().filter(|e| keep(e)) {
        if let Some(fields) = entry.get("fieldsV1") {
            collect_leaves(fields, &mut Vec::new(), &mut out, deadline)?;
        }
    }
    Ok(out)
}

/// Whether `set` holds a leaf strictly under `keys` (a longer leaf starting
/// with it): those sort right after `keys`, so one look suffices.
pub fn has_leaf_under(set: &FieldSet, keys: &[String]) -> bool {
    use std::ops::Bound;
    set.range::<[String], _>((Bound::Excluded(keys), Bound::Unbounded))
        .next()
        .is_some_and(|o| o.len() > keys.len() && o.starts_with(keys))
}

/// A string field of a managedFields entry (`manager`, `operation`,
/// `subresource`); absent or not a string reads as `""`.
pub fn entry_text<'a>(entry: &'a Value, field: &str) -> &'a str {
    entry.get(field).and_then(Value::as_str).unwrap_or_default()
}

fn collect_leaves(
    fields: &Value,
    prefix: &mut Vec<String>,
    out: &mut FieldSet,
    deadline: &Deadline,
) -> Result<(), Stopped> {
    let Some(map) = fields.as_object() else {
        return Ok(());
    };
    for (key, sub) in map.iter().filter(|(k, _)| *k != ".") {
        deadline.checkpoint()?;
        prefix.push(key.clone());
        if sub.as_object().is_none_or(|m| m.keys().all(|k| k == ".")) {
            out.insert(prefix.clone());
        } else {
            collect_leaves(sub, prefix, out, deadline)?;
        }
        prefix.pop();
    }
    Ok(())
}

/// Where each FieldsV1 leaf is in `obj`; leaves `obj` does not have are skipped.
pub fn locate_leaves(
    leaves: &FieldSet,
    obj: &Value,
    deadline: &Deadline,
) -> Result<Vec<Path>, Stopped> {
    let mut locator = Locator::new(deadline);
    let mut out = Vec::new();
    for keys in leaves {
        deadline.checkpoint()?;
        out.extend(locator.leaf(keys, obj)?.map(|(path, _)| path));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(yaml: &str) -> IgnoreRule {
        let def: IgnoreDifference = serde_saphyr::from_str(yaml).unwrap();
        IgnoreRule::compile(&def, "test".into()).unwrap()
    }

    #[test]
    fn matches_argo_cd_style() {
        let r = rule("group: apps\nkind: Deploy*\nnamespace: prod\n");
        let t = |g, k, ns| Target {
            group: g,
            kind: k,
            name: "x",
            namespace: ns,
        };
        assert!(r.matches(&t("apps", "Deployment", "prod")));
        assert!(!r.matches(&t("apps", "Deployment", "dev")));
        assert!(!r.matches(&t("", "Deployment", "prod")));
        let core = rule("kind: Service\n");
        assert!(core.matches(&t("", "Service", "a")));
        assert!(!core.matches(&t("apps", "Service", "a")));
    }

    #[test]
    fn managed_fields_leaves_and_list_keys() {
        let stored = json!({"metadata": {"managedFields": [
            {"manager": "hpa", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "mesh", "fieldsV1": {"f:spec": {"f:containers": {
                "k:{\"name\":\"istio-proxy\"}": {".": {}},
                "k:{\"name\":\"app\"}": {".": {}, "f:image": {}}}}}},
            {"manager": "kubectl", "fieldsV1": {"f:spec": {"f:paused": {}}}}
        ]}});
        let obj = json!({"spec": {"replicas": 3, "paused": false, "containers": [
            {"name": "app", "image": "a:1"}, {"name": "istio-proxy"}]}});
        let managers = vec!["hpa".to_owned(), "mesh".to_owned()];
        let none = Deadline::none();
        let owned = owned_leaves(&stored, &managers, &none).unwrap();
        let mut got: Vec<String> = locate_leaves(&owned, &obj, &none)
            .unwrap()
            .iter()
            .map(Path::to_pointer)
            .collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                "/spec/containers/0/image",
                "/spec/containers/1",
                "/spec/replicas"
            ]
        );
    }

    #[test]
    fn rejects_bad_pointer_with_origin() {
        let def: IgnoreDifference =
            serde_saphyr::from_str("kind: X\njsonPointers: [spec]\n").unwrap();
        let err = IgnoreRule::compile(&def, "policy ignoreDifferences[0]".into())
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("policy ignoreDifferences[0].jsonPointers[0]"),
            "{err}"
        );
    }
}
