//! The registration checked against the policy in force. The apiserver
//! skips writes by the webhooks' rules and matchConditions, rendered once,
//! from the policy and chart values of that day; the policy ConfigMap is
//! reloaded, and the tools' settings (argocd-cm's instance label) change,
//! without it. So the live registration can skip a write the policy in force
//! judges (a bypass nobody sees) or send writes it never judges (an outage's
//! blast radius).
//!
//! The check asks the apiserver's own dispatch ([`apiserver`], with a CEL
//! interpreter) about generated writes ([`probes`]), once with the live
//! webhooks and once with the same webhooks carrying the rules and
//! conditions that `driftguard register` and the chart render from the
//! policy in force, and judges each write with that policy and the sources:
//! - a write the live registration skips and the policy judges (deny, warn,
//!   audit; on the mutating path, a patch) is [`Direction::Skips`];
//! - a write it sends that the needed registration skips is
//!   [`Direction::Sends`] (judged by nothing, refused while driftguard is down);
//! - a condition that fails to evaluate is [`Direction::Fails`].
//!
//! The server runs it when the policy, the sources' instance labels or the
//! webhooks change (`cluster::registration`); `driftguard register --check`
//! and `kubectl driftguard status` run it too.

pub mod apiserver;
mod probes;
mod structure;

use std::collections::BTreeSet;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, ValidatingWebhook,
    ValidatingWebhookConfiguration,
};

use apiserver::{Call, Hook, Namespaces};
use probes::Probe;

use crate::cluster::register::{Options, WebhookAddress, configurations};
use crate::drift::Verdict;
use crate::policy::Policy;
use crate::sources::Sources;
use crate::{Endpoint, judge_request};

/// Which way a registration differs from what the policy needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    /// It skips writes the policy judges: they are never checked.
    Skips,
    /// It sends writes the policy never judges: refused while driftguard is
    /// down, and each one costs a call.
    Sends,
    /// A condition or selector fails: under `failurePolicy: Fail` the write
    /// is refused without a call.
    Fails,
    /// Not what the policy in force renders, though no probed write is
    /// treated differently: edited by hand, or rendered from an equivalent
    /// policy written otherwise.
    Edited,
}

impl Direction {
    /// As the metric's label and the report name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Skips => "skips",
            Direction::Sends => "sends",
            Direction::Fails => "fails",
            Direction::Edited => "edited",
        }
    }
}

/// One way the live registration differs, in words.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Difference {
    /// Which way.
    pub direction: Direction,
    /// The write probed, what each side does with it.
    pub text: String,
}

/// What to do about any difference.
pub const FIX: &str = "render the webhooks from the policy in force: `helm upgrade` with the policy values the ConfigMap was rendered from (or `driftguard register --policy <file>`); `driftguard register --check` shows what still differs";

/// Differences reported at most; the rest are counted.
const MAX_REPORTED: usize = 8;

/// The live configurations (`None`: not found) against what `policy` and
/// `sources` need. Empty when they agree.
pub fn check(
    policy: &Policy,
    sources: Option<&Sources>,
    validating: Option<&ValidatingWebhookConfiguration>,
    mutating: Option<&MutatingWebhookConfiguration>,
) -> Vec<Difference> {
    let (Some(validating), Some(mutating)) = (validating, mutating) else {
        return vec![Difference {
            direction: Direction::Skips,
            text: "the Validating- or MutatingWebhookConfiguration is missing: the apiserver sends driftguard nothing".into(),
        }];
    };
    let name = validating.metadata.name.clone().unwrap_or_default();
    let main = validating
        .list()
        .iter()
        .find(|w| role(&w.name) == "validate");
    let excluded = structure::excluded_by_name(main.and_then(|w| w.namespace_selector.as_ref()));
    let (need_v, need_m) = configurations(&options(name, excluded), policy);
    let mut differences = Vec::new();
    let mut changed = Vec::new();
    pair(
        validating.list(),
        need_v.list(),
        "/validate",
        &mut differences,
        &mut changed,
    );
    pair(
        mutating.list(),
        need_m.list(),
        "/mutate",
        &mut differences,
        &mut changed,
    );
    let mut literals = BTreeSet::new();
    for expression in conditions(validating, mutating).chain(conditions(&need_v, &need_m)) {
        probes::literals(expression, &mut literals);
    }
    let (probes, namespaces) = probes::probes(policy, sources, &literals);
    let sides = Sides {
        live_v: validating.list().iter().map(Hook::validating).collect(),
        live_m: mutating.list().iter().map(Hook::mutating).collect(),
        needed_v: need_v.list().iter().map(Hook::validating).collect(),
        needed_m: need_m.list().iter().map(Hook::mutating).collect(),
        namespaces,
    };
    let mut probed = Vec::new();
    for probe in &probes {
        compare(&sides, policy, sources, probe, &mut probed);
    }
    // A condition changed both ways goes the way the probes found; with
    // nothing found, it is only known not to be the rendered one.
    let found = |d: Direction| probed.iter().any(|p: &Difference| p.direction == d);
    let direction = match (found(Direction::Skips), found(Direction::Sends)) {
        (true, _) => Direction::Skips,
        (false, true) => Direction::Sends,
        (false, false) => Direction::Edited,
    };
    for c in changed {
        differences.push(Difference {
            direction,
            text: format!(
                "the webhook `{}`: its conditions {} are not those rendered from the policy in force",
                c.webhook,
                c.conditions.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
            ),
        });
    }
    differences.extend(probed);
    summarize(differences)
}

/// What `register` was told, for the parts the check compares: rules and
/// conditions do not depend on where the webhook is.
fn options(name: String, exclude_namespaces: Vec<String>) -> Options {
    Options {
        name,
        endpoint: WebhookAddress::Url("https://driftguard.invalid".into()),
        ca_bundle: Vec::new(),
        failure_policy: "Fail".into(),
        timeout_seconds: 5,
        exclude_namespaces,
    }
}

/// Both sides' webhooks as the apiserver holds them.
struct Sides {
    live_v: Vec<Hook>,
    live_m: Vec<Hook>,
    needed_v: Vec<Hook>,
    needed_m: Vec<Hook>,
    namespaces: Namespaces,
}

trait Webhooks {
    type Hook;
    fn list(&self) -> &[Self::Hook];
}

impl Webhooks for ValidatingWebhookConfiguration {
    type Hook = ValidatingWebhook;
    fn list(&self) -> &[ValidatingWebhook] {
        self.webhooks.as_deref().unwrap_or_default()
    }
}

impl Webhooks for MutatingWebhookConfiguration {
    type Hook = MutatingWebhook;
    fn list(&self) -> &[MutatingWebhook] {
        self.webhooks.as_deref().unwrap_or_default()
    }
}

fn conditions<'a>(
    v: &'a ValidatingWebhookConfiguration,
    m: &'a MutatingWebhookConfiguration,
) -> impl Iterator<Item = &'a str> {
    let of_v = v
        .list()
        .iter()
        .flat_map(|w| w.match_conditions.iter().flatten());
    let of_m = m
        .list()
        .iter()
        .flat_map(|w| w.match_conditions.iter().flatten());
    of_v.chain(of_m).map(|c| c.expression.as_str())
}

/// A webhook's role: `validate`, `validate-namespaces`, `mutate`, ... (its
/// name up to the first `.`).
fn role(name: &str) -> &str {
    name.split('.').next().unwrap_or(name)
}

/// Each needed webhook against the live one of its role
/// ([`structure::compare`]); a role missing or in excess is a difference in
/// itself.
fn pair<'a, W>(
    live: &'a [W],
    need: &'a [W],
    path: &str,
    differences: &mut Vec<Difference>,
    changed: &mut Vec<structure::Changed>,
) where
    structure::Shape<'a>: From<&'a W>,
{
    let live: Vec<structure::Shape> = live.iter().map(Into::into).collect();
    for n in need.iter().map(structure::Shape::from) {
        match live.iter().find(|l| role(l.name) == role(n.name)) {
            Some(l) => changed.extend(structure::compare(l, &n, path, differences)),
            None => differences.push(Difference {
                direction: Direction::Skips,
                text: format!("the webhook `{}` is missing", n.name),
            }),
        }
    }
    for l in &live {
        if !need
            .iter()
            .map(structure::Shape::from)
            .any(|n| role(n.name) == role(l.name))
        {
            differences.push(Difference {
                direction: Direction::Sends,
                text: format!(
                    "the webhook `{}` is not one the policy in force needs",
                    l.name
                ),
            });
        }
    }
}

/// Called by any of `hooks`, else why not.
fn dispatch(hooks: &[Hook], probe: &Probe, namespaces: &Namespaces) -> Call {
    let mut first = None;
    for hook in hooks {
        let outcome = hook.decide(&probe.attributes, namespaces);
        match outcome.call {
            Call::Called => return Call::Called,
            Call::Rejected(e) => return Call::Rejected(format!("{}: {e}", hook.name)),
            skipped => {
                first.get_or_insert(skipped);
            }
        }
    }
    first.unwrap_or(Call::Skipped(apiserver::Skip::Rules))
}

fn compare(
    sides: &Sides,
    policy: &Policy,
    sources: Option<&Sources>,
    probe: &Probe,
    differences: &mut Vec<Difference>,
) {
    let judged = |endpoint| judged(policy, sources, probe, endpoint);
    for (path, live, needed, endpoint) in [
        (
            "validating",
            &sides.live_v,
            &sides.needed_v,
            Endpoint::Validate,
        ),
        ("mutating", &sides.live_m, &sides.needed_m, Endpoint::Mutate),
    ] {
        let what = &probe.what;
        let text = match dispatch(live, probe, &sides.namespaces) {
            Call::Rejected(e) => Some((
                Direction::Fails,
                format!("{what}: refused without a call ({e})"),
            )),
            // The selector is the operator's opt-out, the same on both sides.
            Call::Skipped(apiserver::Skip::NamespaceSelector { .. }) => None,
            Call::Skipped(skip) => judged(endpoint).map(|verdict| {
                (
                    Direction::Skips,
                    format!("{what}: the {path} registration skips it ({skip}); the policy in force {verdict}"),
                )
            }),
            Call::Called => (dispatch(needed, probe, &sides.namespaces) != Call::Called).then(|| {
                (
                    Direction::Sends,
                    format!("{what}: the {path} registration sends it, and the policy in force allows it whatever it changes"),
                )
            }),
        };
        if let Some((direction, text)) = text {
            differences.push(Difference { direction, text });
        }
    }
}

/// What the policy does with the probe, when it is more than a plain allow.
fn judged(
    policy: &Policy,
    sources: Option<&Sources>,
    probe: &Probe,
    endpoint: Endpoint,
) -> Option<String> {
    let cannot = |e: String| Some(format!("cannot judge it ({e}), so it must be sent"));
    let body = match serde_json::to_vec(&probe.attributes.admission_review()) {
        Ok(body) => body,
        Err(e) => return cannot(e.to_string()),
    };
    let request = match crate::request::parse(&body) {
        Ok(request) => request,
        Err(e) => return cannot(e.to_string()),
    };
    let judged = match judge_request(
        policy,
        &request,
        endpoint,
        probe.parent.as_ref(),
        sources,
        jiff::Timestamp::now(),
        &crate::deadline::Deadline::none(),
    ) {
        Ok(judged) => judged,
        Err(e) => return cannot(e.to_string()),
    };
    match endpoint {
        Endpoint::Mutate => {
            let patched = judged.response.response.as_ref()?.patch.is_some();
            patched.then(|| "writes its drift record".to_owned())
        }
        _ => match judged.decision.verdict {
            Verdict::Allow => None,
            verdict => Some(format!("judges it: {}", verdict.as_str())),
        },
    }
}

/// The two configurations in a YAML stream (`helm template`'s output, or
/// `register --dry-run`'s): those named `name`, or the only one of each kind.
pub fn read_rendered(
    text: &str,
    name: &str,
) -> Result<
    (
        Option<ValidatingWebhookConfiguration>,
        Option<MutatingWebhookConfiguration>,
    ),
    String,
> {
    let documents: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(text).map_err(|e| format!("not a YAML stream: {e}"))?;
    fn pick<T: serde::de::DeserializeOwned>(
        documents: &[serde_json::Value],
        kind: &str,
        name: &str,
    ) -> Result<Option<T>, String> {
        let of_kind: Vec<_> = documents
            .iter()
            .filter(|d| d.get("kind").and_then(|k| k.as_str()) == Some(kind))
            .collect();
        let named = |d: &&&serde_json::Value| d.pointer("/metadata/name") == Some(&name.into());
        let chosen = match &of_kind[..] {
            [one] => Some(*one),
            many => many.iter().find(named).copied(),
        };
        chosen
            .map(|d| serde_json::from_value(d.clone()).map_err(|e| format!("{kind}: {e}")))
            .transpose()
    }
    Ok((
        pick(&documents, "ValidatingWebhookConfiguration", name)?,
        pick(&documents, "MutatingWebhookConfiguration", name)?,
    ))
}

/// Each once, sorted by direction; within one, a missing or extra webhook
/// (found before any probe) comes first.
fn summarize(differences: Vec<Difference>) -> Vec<Difference> {
    let mut ordered: Vec<(usize, Difference)> = differences.into_iter().enumerate().collect();
    ordered.sort_by(|(i, a), (j, b)| {
        let probed = |d: &Difference| !d.text.starts_with("the webhook `");
        (a.direction, probed(a), &a.text, i).cmp(&(b.direction, probed(b), &b.text, j))
    });
    ordered.dedup_by(|(_, a), (_, b)| a == b);
    ordered.into_iter().map(|(_, d)| d).collect()
}

/// The differences as lines for a person: every webhook-level one (a few
/// per webhook at most), then at most [`MAX_REPORTED`] probed writes and how
/// many more.
pub fn lines(differences: &[Difference]) -> Vec<String> {
    let line = |d: &Difference| format!("{}: {}", d.direction.as_str(), d.text);
    let (fields, writes): (Vec<_>, Vec<_>) = differences
        .iter()
        .partition(|d| d.text.starts_with("the webhook `"));
    let mut lines: Vec<String> = fields.into_iter().map(line).collect();
    lines.extend(writes.iter().take(MAX_REPORTED).map(|d| line(d)));
    if writes.len() > MAX_REPORTED {
        lines.push(format!("and {} more", writes.len() - MAX_REPORTED));
    }
    lines
}

/// Every direction, in the order reports list them.
pub const DIRECTIONS: [Direction; 4] = [
    Direction::Skips,
    Direction::Sends,
    Direction::Fails,
    Direction::Edited,
];

/// How many differences go which way.
pub fn count(differences: &[Difference], direction: Direction) -> usize {
    differences
        .iter()
        .filter(|d| d.direction == direction)
        .count()
}

#[cfg(test)]
mod tests;
