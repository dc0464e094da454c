//! What one watched source may cost ("one byte budget"): an over-estimate of
//! the bytes its compiled entry will hold, counted from the object before
//! anything is compiled or indexed, and charged against a cap per source, per
//! namespace and in total. The figures it over-approximates are measured by
//! `cargo run --example source_cost` (docs/testing.md).
//!
//! A source over a cap is refused in the stricter direction only
//! ([`super::source_cache`]): it lends no ignore rule; what it lists still
//! guards, widened to each namespace it names; its claims, account and diff
//! mode are read as if admitted. argocd-cm and AppProjects, written by Argo CD's
//! administrators alone, are not charged.

use std::collections::HashMap;

use serde_json::Value;

/// The caps (`serve --source-max-bytes` and the two below). The defaults:
/// 4 MiB is about 200 glob rules, 4,000 literal ones or 10,000 listed
/// objects, where Applications carry tens of rules; the total leaves the
/// chart's 256 MiB limit room for the review budget and the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::Args)]
pub struct Limits {
    /// Estimated bytes one watched Application, Kustomization or HelmRelease
    /// may cost compiled (its rules and the objects its status lists); one
    /// over it is refused: its ignore rules do not apply, and what it lists
    /// guards its whole namespaces.
    #[arg(long = "source-max-bytes", env = "DRIFTGUARD_SOURCE_MAX_BYTES", default_value_t = 4 << 20)]
    pub per_source: usize,
    /// The same, summed over one namespace's sources; Argo CD's own
    /// namespace, where only its administrators write, is bound by the total alone.
    #[arg(long = "namespace-sources-max-bytes", env = "DRIFTGUARD_NAMESPACE_SOURCES_MAX_BYTES", default_value_t = 32 << 20)]
    pub per_namespace: usize,
    /// The same, summed over every watched source.
    #[arg(long = "sources-max-bytes", env = "DRIFTGUARD_SOURCES_MAX_BYTES", default_value_t = 128 << 20)]
    pub total: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            per_source: 4 << 20,
            per_namespace: 32 << 20,
            total: 128 << 20,
        }
    }
}

/// Which cap refused a source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Cap {
    /// `--source-max-bytes`: the source alone.
    Source,
    /// `--namespace-sources-max-bytes`: its namespace's sources together.
    Namespace,
    /// `--sources-max-bytes`: every watched source together.
    Total,
}

impl Cap {
    /// Every cap, in a fixed order.
    pub(crate) const ALL: [Cap; 3] = [Cap::Source, Cap::Namespace, Cap::Total];

    /// Its name in the `cap` label of `driftguard_sources_refused`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Cap::Source => "source",
            Cap::Namespace => "namespace",
            Cap::Total => "total",
        }
    }
}

/// Any compiled entry, before its rules (an Application's place in its
/// installation's views by name and by destination included).
const BASE: usize = 4096;
/// One rule, plus 4 bytes per byte of its text and its origin's.
const RULE: usize = 640;
/// A glob group or kind, plus 48 bytes per byte.
const GLOB: usize = 10 * 1024;
/// A jq expression, plus [`JQ_TOKEN`] per token (jaq compiles each part of
/// it, at most 256, to a few nodes; a dense one measured 186 bytes a part).
const JQ: usize = 10 * 1024;
const JQ_TOKEN: usize = 256;
/// A Flux target's `name` or `namespace` regex: compiled with this size
/// limit, which bounds it whatever its text.
const REGEX: usize = crate::sources::TARGET_REGEX_SIZE;
/// A listed object, plus 3 bytes per byte of its key and 1 per byte of its
/// lister's name and namespace (cloned with each).
const LISTED: usize = 320;

/// A listed object's place in the index of who lists what (the source
/// cache's `planned_index`, its lists by uid, and their persistent map's
/// nodes), plus 2 bytes per byte of its key and 1 per byte of its lister's
/// name and namespace (held there again).
const INDEXED: usize = 192;

/// What globset reads as syntax ([`crate::policy::pattern`]).
fn glob(pattern: &str) -> usize {
    if pattern.contains(['*', '?', '[', ']', '{', '}', '\\']) {
        GLOB + 48 * pattern.len()
    } else {
        0
    }
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or_default()
}

fn texts(value: Option<&Value>) -> impl Iterator<Item = &str> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(text)
}

/// At least the tokens of a jq expression, counted without parsing it: each
/// run of word characters, and each other character but a space.
fn tokens(expr: &str) -> usize {
    let mut count = 0;
    let mut in_word = false;
    for c in expr.chars() {
        let word = c.is_alphanumeric() || c == '_' || c == '$';
        count += usize::from(!(c.is_whitespace() || word && in_word));
        in_word = word;
    }
    count
}

/// The bytes of every string (and key) in `value`.
fn string_bytes(value: &Value) -> usize {
    match value {
        Value::String(s) => s.len(),
        Value::Array(items) => items.iter().map(string_bytes).sum(),
        Value::Object(map) => map.iter().map(|(k, v)| k.len() + string_bytes(v)).sum(),
        _ => 0,
    }
}

/// The estimate for an Application's (`flux: false`) or a Kustomization's
/// or HelmRelease's compiled entry, without what it lists: the spec's other
/// strings, then each ignore rule unless `rules` is false (refused).
pub fn entry(flux: bool, data: &Value, rules: bool) -> usize {
    let meta = |k: &str| {
        data.pointer(&format!("/metadata/{k}"))
            .map_or(0, |v| text(v).len())
    };
    let origin = meta("name") + meta("namespace") + 48;
    let spec = data.get("spec").unwrap_or(&Value::Null);
    let ignore = ignore_rules(flux, spec);
    let rule_bytes: usize = ignore.iter().map(|r| string_bytes(r)).sum();
    let mut cost = BASE + 2 * string_bytes(spec).saturating_sub(rule_bytes);
    for rule in ignore.into_iter().filter(|_| rules) {
        cost += RULE + 4 * (origin + string_bytes(rule));
        if flux {
            let target = |k: &str| rule.pointer(&format!("/target/{k}")).map_or("", text);
            // Flux reads an empty group or kind as `*`.
            cost += ["group", "kind"]
                .map(|k| glob(Some(target(k)).filter(|t| !t.is_empty()).unwrap_or("*")))
                .iter()
                .sum::<usize>();
            cost += ["name", "namespace"]
                .iter()
                .filter(|k| !target(k).is_empty())
                .map(|k| REGEX + 2 * target(k).len())
                .sum::<usize>();
        } else {
            cost += glob(rule.get("group").map_or("", text));
            cost += glob(rule.get("kind").map_or("", text));
            let jq = texts(rule.get("jqPathExpressions"));
            cost += jq.map(|e| JQ + JQ_TOKEN * tokens(e)).sum::<usize>();
        }
    }
    cost
}

/// The ignore rules of a spec: an Application's `ignoreDifferences`, a
/// Kustomization's `ignore`, a HelmRelease's `driftDetection.ignore`.
fn ignore_rules(flux: bool, spec: &Value) -> Vec<&Value> {
    let at = |p: &str| spec.pointer(p).and_then(Value::as_array);
    let lists = if flux {
        [at("/ignore"), at("/driftDetection/ignore")]
    } else {
        [at("/ignoreDifferences"), None]
    };
    lists.into_iter().flatten().flatten().collect()
}

/// The same object, refused: without its ignore rules, the only part of it
/// that loosens a decision.
pub(crate) fn without_rules(flux: bool, data: &mut Value) {
    let spec = data.get_mut("spec").and_then(Value::as_object_mut);
    if let Some(spec) = spec {
        if flux {
            spec.remove("ignore");
            if let Some(d) = spec
                .get_mut("driftDetection")
                .and_then(Value::as_object_mut)
            {
                d.remove("ignore");
            }
        } else {
            spec.remove("ignoreDifferences");
        }
    }
}

/// The estimate for listing `keys` by a source named `lister` bytes long.
pub(crate) fn listed(keys: &[String], lister: usize) -> usize {
    keys.iter().map(|k| LISTED + 3 * k.len() + lister).sum()
}

/// What the index's views (`drift::listed`) hold per namespace and per
/// custom kind a listing names: an entry of the view's map, the first node
/// of its set of keys and the name, charged for each distinct one a listing
/// names (a listing that spreads its objects over namespaces and kinds of
/// their own costs this per object).
const VIEWED: usize = 512;

/// The estimate for indexing `keys` listed by a source named `lister` bytes
/// long: charged with [`listed`], before the index holds them.
pub(crate) fn indexed(keys: &[String], lister: usize) -> usize {
    let mut views: std::collections::HashSet<(bool, &str)> = std::collections::HashSet::new();
    for key in keys {
        let (namespace, kind) = crate::drift::listed::places(key);
        views.insert((false, namespace));
        views.extend(kind.map(|k| (true, k)));
    }
    let keyed: usize = keys.iter().map(|k| INDEXED + 2 * k.len() + lister).sum();
    keyed + VIEWED * views.len()
}

/// What each source is charged, by uid, and the sums.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// The caps charged against.
    pub(crate) limits: Limits,
    charged: HashMap<String, (String, usize)>,
    by_namespace: HashMap<String, usize>,
    total: usize,
    /// What refused sources are charged (part of `total`): it never counts
    /// against another source's total cap, or one namespace's refused
    /// sources could get every other namespace's refused too.
    forced: HashMap<String, usize>,
    forced_total: usize,
}

impl Ledger {
    pub(crate) fn new(limits: Limits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// Charges `uid` (of `namespace`) `cost` in place of what it was charged,
    /// unless that passes a cap; `capped`: whether the namespace cap binds.
    pub(crate) fn charge(
        &mut self,
        uid: &str,
        namespace: &str,
        cost: usize,
        capped: bool,
    ) -> Result<(), Cap> {
        let before = self.charged.get(uid).map_or(0, |c| c.1);
        let in_namespace = self.by_namespace.get(namespace).copied().unwrap_or(0);
        if cost > self.limits.per_source {
            return Err(Cap::Source);
        }
        if capped && in_namespace - before.min(in_namespace) + cost > self.limits.per_namespace {
            return Err(Cap::Namespace);
        }
        let admitted = self.total - self.forced_total;
        let before_admitted = if self.forced.contains_key(uid) {
            0
        } else {
            before
        };
        if admitted - before_admitted.min(admitted) + cost > self.limits.total {
            return Err(Cap::Total);
        }
        self.force(uid, namespace, cost);
        self.forced_total -= self.forced.remove(uid).unwrap_or(0);
        Ok(())
    }

    /// Charges a refused source's strict form, whatever the caps: it lends
    /// nothing, and what it holds is bounded by [`listed`] of its namespaces.
    pub(crate) fn force(&mut self, uid: &str, namespace: &str, cost: usize) {
        self.release(uid);
        self.forced.insert(uid.to_owned(), cost);
        self.forced_total += cost;
        self.charged
            .insert(uid.to_owned(), (namespace.to_owned(), cost));
        *self.by_namespace.entry(namespace.to_owned()).or_default() += cost;
        self.total += cost;
    }

    pub(crate) fn release(&mut self, uid: &str) {
        self.forced_total -= self.forced.remove(uid).unwrap_or(0);
        if let Some((namespace, cost)) = self.charged.remove(uid) {
            self.total -= cost;
            if let Some(sum) = self.by_namespace.get_mut(&namespace) {
                *sum -= cost;
                if *sum == 0 {
                    self.by_namespace.remove(&namespace);
                }
            }
        }
    }

    pub(crate) fn total(&self) -> usize {
        self.total
    }

    pub(crate) fn limit(&self, cap: Cap) -> usize {
        match cap {
            Cap::Source => self.limits.per_source,
            Cap::Namespace => self.limits.per_namespace,
            Cap::Total => self.limits.total,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cap_refuses_and_leaves_the_charge_as_it_was() {
        let mut l = Ledger::new(Limits {
            per_source: 10,
            per_namespace: 15,
            total: 25,
        });
        assert_eq!(l.charge("a", "t1", 11, true), Err(Cap::Source));
        l.charge("a", "t1", 8, true).unwrap();
        assert_eq!(l.charge("b", "t1", 8, true), Err(Cap::Namespace));
        // Unbound by the namespace cap (Argo CD's own namespace).
        l.charge("b", "t1", 7, false).unwrap();
        // A source charged again replaces its own charge.
        l.charge("a", "t1", 8, true).unwrap();
        l.charge("c", "t2", 10, true).unwrap();
        assert_eq!(l.charge("d", "t3", 1, true), Err(Cap::Total));
        l.release("c");
        l.charge("d", "t3", 1, true).unwrap();
        assert_eq!(l.total(), 16);
    }

    /// One namespace's refused sources, however many, never get another
    /// namespace's source refused on the total cap.
    #[test]
    fn refused_sources_never_count_against_others_total() {
        let mut l = Ledger::new(Limits {
            per_source: 10,
            per_namespace: 15,
            total: 25,
        });
        l.charge("a", "tenant", 10, true).unwrap();
        for i in 0..20 {
            let uid = format!("filler-{i}");
            assert_eq!(l.charge(&uid, "tenant", 10, true), Err(Cap::Namespace));
            l.force(&uid, "tenant", 8);
        }
        l.charge("p", "argocd", 10, false).unwrap();
        l.charge("q", "other", 5, true).unwrap();
        assert_eq!(l.charge("r", "other", 1, true), Err(Cap::Total));
        assert_eq!(l.total(), 10 + 20 * 8 + 10 + 5);
        // A refused source that fits again is charged as admitted.
        l.release("a");
        (1..20).for_each(|i| l.release(&format!("filler-{i}")));
        l.charge("filler-0", "tenant", 10, true).unwrap();
        assert_eq!(l.charge("s", "other", 1, true), Err(Cap::Total));
        assert_eq!(l.total(), 25);
    }

    #[test]
    fn globs_and_jq_cost_more_than_literal_rules() {
        let app = |rule: Value| {
            json!({"metadata": {"name": "a", "namespace": "t"},
                                       "spec": {"ignoreDifferences": [rule]}})
        };
        let literal = entry(false, &app(json!({"kind": "Deployment"})), true);
        let glob = entry(false, &app(json!({"kind": "Deploy*"})), true);
        let jq = entry(
            false,
            &app(json!({"kind": "D", "jqPathExpressions": [".a"]})),
            true,
        );
        assert!(literal < BASE + 2048, "{literal}");
        assert!(glob > literal + GLOB);
        assert!(jq > literal + JQ);
        assert_eq!(tokens(".a[] | select(.name == \"c1\")"), 15);
        let mut refused = app(json!({"kind": "Deploy*"}));
        assert_eq!(
            entry(false, &refused, false),
            BASE + 2 * "ignoreDifferences".len()
        );
        without_rules(false, &mut refused);
        assert_eq!(entry(false, &refused, true), BASE);
    }
}
