//! The webhooks compared field by field with their rendering from the policy
//! in force, beside what the probes find. The probes vary what the policy
//! decides about; a hand edit can skip on anything else (a namespace, a
//! name, a label value, a field manager), which no finite set of probes
//! covers. So everything but what the operator chooses on purpose (the
//! namespaces excluded by name, failurePolicy, timeout, where it calls) must
//! be as rendered:
//! - a rule or condition more than rendered can only skip more: `skips`;
//! - one fewer can only send more: `sends`;
//! - a condition changed both ways is classified by the probes, and is
//!   `edited` when they find no write it treats differently;
//! - a selector, matchPolicy or path other than rendered: `skips`.

use std::collections::BTreeSet;

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, RuleWithOperations, ValidatingWebhook, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::{Difference, Direction};

const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The fields of either kind of webhook that decide what is sent where.
pub(super) struct Shape<'a> {
    pub(super) name: &'a str,
    rules: &'a [RuleWithOperations],
    conditions: &'a [MatchCondition],
    namespace_selector: Option<&'a LabelSelector>,
    object_selector: Option<&'a LabelSelector>,
    match_policy: Option<&'a str>,
    client: &'a WebhookClientConfig,
}

impl<'a> From<&'a ValidatingWebhook> for Shape<'a> {
    fn from(w: &'a ValidatingWebhook) -> Self {
        Shape {
            name: &w.name,
            rules: w.rules.as_deref().unwrap_or_default(),
            conditions: w.match_conditions.as_deref().unwrap_or_default(),
            namespace_selector: w.namespace_selector.as_ref(),
            object_selector: w.object_selector.as_ref(),
            match_policy: w.match_policy.as_deref(),
            client: &w.client_config,
        }
    }
}

impl<'a> From<&'a MutatingWebhook> for Shape<'a> {
    fn from(w: &'a MutatingWebhook) -> Self {
        Shape {
            name: &w.name,
            rules: w.rules.as_deref().unwrap_or_default(),
            conditions: w.match_conditions.as_deref().unwrap_or_default(),
            namespace_selector: w.namespace_selector.as_ref(),
            object_selector: w.object_selector.as_ref(),
            match_policy: w.match_policy.as_deref(),
            client: &w.client_config,
        }
    }
}

/// Conditions changed both ways, for the probes to classify.
pub(super) struct Changed {
    pub(super) webhook: String,
    pub(super) conditions: Vec<String>,
}

/// `live` against `need` (the same role), the path it must call
/// (`/validate` or `/mutate`). Differences go to `out`; conditions changed
/// both ways are returned.
pub(super) fn compare(
    live: &Shape,
    need: &Shape,
    path: &str,
    out: &mut Vec<Difference>,
) -> Option<Changed> {
    let mut say = |direction, what: String| {
        out.push(Difference {
            direction,
            text: format!("the webhook `{}`: {what}", live.name),
        })
    };
    let (live_rules, need_rules) = (tuples(live.rules), tuples(need.rules));
    for r in need_rules
        .iter()
        .filter(|n| !live_rules.iter().any(|l| covers(l, n)))
    {
        say(Direction::Skips, format!("no rule sends {}", show(r)));
    }
    for r in live_rules
        .iter()
        .filter(|l| !need_rules.iter().any(|n| covers(n, l)))
    {
        say(
            Direction::Sends,
            format!("its rule sends {}, which the policy never judges", show(r)),
        );
    }
    if live.object_selector.is_some_and(|s| !empty(s)) {
        say(
            Direction::Skips,
            "an objectSelector: objects its labels leave out are never sent".into(),
        );
    }
    if live.match_policy.is_some_and(|p| p != "Equivalent") {
        say(
            Direction::Skips,
            "matchPolicy is not Equivalent: writes through another API version are not sent".into(),
        );
    }
    if !ends_with(live.client, path) {
        say(
            Direction::Skips,
            format!("it calls another path than `{path}`, whose answers judge nothing here"),
        );
    }
    if !same_shape(live.namespace_selector, need.namespace_selector) {
        say(Direction::Skips, "its namespaceSelector is not the rendered one (namespaces excluded by name, and `driftguard.io/ignore`): it may leave out namespaces by labels".into());
    }
    let key = |c: &MatchCondition| (c.name.clone(), c.expression.clone());
    let live_set: BTreeSet<_> = live.conditions.iter().map(key).collect();
    let need_set: BTreeSet<_> = need.conditions.iter().map(key).collect();
    let extra: Vec<_> = live_set
        .difference(&need_set)
        .map(|(n, _)| n.clone())
        .collect();
    let missing: Vec<_> = need_set
        .difference(&live_set)
        .map(|(n, _)| n.clone())
        .collect();
    match (extra.is_empty(), missing.is_empty()) {
        (true, true) => None,
        (false, true) => {
            for name in extra {
                say(
                    Direction::Skips,
                    format!(
                        "its condition `{name}` is not rendered from the policy in force; one more condition can only skip more"
                    ),
                );
            }
            None
        }
        (true, false) => {
            for name in missing {
                say(
                    Direction::Sends,
                    format!(
                        "the condition `{name}` is missing: it is called for more than the policy judges"
                    ),
                );
            }
            None
        }
        (false, false) => {
            let mut conditions = extra;
            conditions.extend(missing);
            conditions.dedup();
            Some(Changed {
                webhook: live.name.to_owned(),
                conditions,
            })
        }
    }
}

/// The namespaces a webhook excludes by name (the operator's
/// `--exclude-namespace`, kube-system, driftguard's own).
pub(super) fn excluded_by_name(selector: Option<&LabelSelector>) -> Vec<String> {
    selector
        .into_iter()
        .flat_map(|s| s.match_expressions.iter().flatten())
        .filter(|e| e.key == NAME_LABEL && e.operator == "NotIn")
        .flat_map(|e| e.values.iter().flatten().cloned())
        .collect()
}

/// The same requirements as rendered, but for the names excluded.
fn same_shape(live: Option<&LabelSelector>, need: Option<&LabelSelector>) -> bool {
    let requirements = |s: Option<&LabelSelector>| {
        let s = s.cloned().unwrap_or_default();
        let labels = s.match_labels.unwrap_or_default();
        let expressions: Vec<_> = s
            .match_expressions
            .unwrap_or_default()
            .into_iter()
            .map(|e| {
                let values = if e.key == NAME_LABEL { None } else { e.values };
                (e.key, e.operator, values)
            })
            .collect();
        (labels, expressions)
    };
    requirements(live) == requirements(need)
}

fn empty(s: &LabelSelector) -> bool {
    s.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && s.match_expressions.as_ref().is_none_or(|e| e.is_empty())
}

fn ends_with(client: &WebhookClientConfig, path: &str) -> bool {
    match (&client.service, &client.url) {
        (Some(service), _) => service.path.as_deref() == Some(path),
        (None, Some(url)) => url.trim_end_matches('/').ends_with(path),
        (None, None) => false,
    }
}

/// One (group, version, resource, operation, scope) a rule registers.
type Tuple = [String; 5];

fn tuples(rules: &[RuleWithOperations]) -> Vec<Tuple> {
    let list = |v: &Option<Vec<String>>| v.clone().unwrap_or_default();
    let mut out = Vec::new();
    for r in rules {
        let scope = r.scope.clone().unwrap_or_else(|| "*".into());
        for g in list(&r.api_groups) {
            for v in list(&r.api_versions) {
                for res in list(&r.resources) {
                    for op in list(&r.operations) {
                        out.push([g.clone(), v.clone(), res.clone(), op, scope.clone()]);
                    }
                }
            }
        }
    }
    out
}

/// `outer` registers everything `inner` does (`*` for a group, version,
/// operation or scope; `*`, `*/*` and `*/sub` for resources, as the
/// apiserver's rule matcher reads them).
fn covers(outer: &Tuple, inner: &Tuple) -> bool {
    let field = |o: &str, i: &str| o == "*" || o == i;
    let (o_res, o_sub) = outer[2].split_once('/').unwrap_or((&outer[2], ""));
    let (i_res, i_sub) = inner[2].split_once('/').unwrap_or((&inner[2], ""));
    let resource = (o_res == "*" || o_res == i_res) && (o_sub == "*" || o_sub == i_sub);
    field(&outer[0], &inner[0])
        && field(&outer[1], &inner[1])
        && resource
        && field(&outer[3], &inner[3])
        && field(&outer[4], &inner[4])
}

fn show(t: &Tuple) -> String {
    format!("{} {}/{}/{} ({})", t[3], t[0], t[1], t[2], t[4])
}
