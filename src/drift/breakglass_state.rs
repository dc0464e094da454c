//! Break-glass in the decision: an authorized identity may override drift
//! protection for a bounded time by annotating the object with a reason and
//! an expiry. Here: the state of one object's break-glass (the one function
//! the webhook, the sweeper, `explain` and `status` read it with), who may
//! arm it ([`evaluate`]), and which write ends it ([`candidate`]).
//!
//! Ending a break-glass is the write that removes its two annotations, the
//! pause marker, the label, and the Flux opt-out that the marker says
//! driftguard added, and nothing else. It only hands the object back to Git,
//! so anyone may write it once the break-glass grants nothing (expired or
//! invalid): that is what lets the expiry sweeper write without a special
//! identity. Ending one still in force is for identities allowed to break
//! glass. The write must take away every one of those keys and leave the
//! object in scope, so no opt-out is left behind without the marker that
//! neutralised it, and nothing a later write is judged by changes.

use crate::text::quote;
use jiff::Timestamp;
use serde_json::Value;

use super::inputs::{Input, Inputs};
use super::ownership::{FLUX_RECONCILE, HELM_DRIFT_DETECTION, Manager};
use crate::policy::Policy;

/// The keys break-glass is read from: defined with the other decision
/// inputs ([`super::inputs`]), named here as break-glass names them.
pub use super::inputs::{
    BREAK_GLASS_EXPIRES as EXPIRES, BREAK_GLASS_LABEL as LABEL, BREAK_GLASS_PAUSED as PAUSED,
    BREAK_GLASS_REASON as REASON,
};

/// A break-glass in force on the object, as the decision reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BreakGlassUse {
    /// Who set it.
    pub user: String,
    /// The reason annotation.
    pub reason: String,
    /// The expiry annotation, as written.
    pub expires: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BreakGlass {
    /// No break-glass annotations, or ones left over that this writer did not set.
    None,
    /// `changed`: this write set the annotations (arming break-glass).
    Valid { used: BreakGlassUse, changed: bool },
    /// The writer added, changed or removed the annotations without being allowed to.
    Unauthorized,
    /// An authorized writer's annotations are wrong: the text says why.
    Invalid { why: String, changed: bool },
}

/// Reads break-glass from `carrier` (the new object; the old one for DELETE).
/// `previous` is the stored object when the write could have changed the annotations.
pub fn evaluate(
    carrier: &Inputs,
    previous: Option<&Inputs>,
    user: &str,
    groups: &[String],
    policy: &Policy,
    now: Timestamp,
) -> BreakGlass {
    // Compared as stored: a value that is not a string is a change too.
    let changed = previous.is_some_and(|prev| {
        [Input::BreakGlassReason, Input::BreakGlassExpires]
            .into_iter()
            .any(|i| prev.get(i) != carrier.get(i))
    });
    if !policy.break_glass.allowed.contains(user, groups) {
        // Removing them by hand is a change to a decision input like any other.
        return if changed {
            BreakGlass::Unauthorized
        } else {
            BreakGlass::None
        };
    }
    match state(carrier, policy, now) {
        State::None | State::Ended => BreakGlass::None,
        State::Active { reason, expires } => BreakGlass::Valid {
            used: BreakGlassUse {
                user: user.to_owned(),
                reason,
                expires,
            },
            changed,
        },
        State::Expired { expires } => BreakGlass::Invalid {
            why: format!("break-glass expired at {}", quote(&expires)),
            changed,
        },
        State::Invalid { why } => BreakGlass::Invalid { why, changed },
    }
}

/// What the break-glass on one object is now, whoever set it. The webhook,
/// the expiry sweeper, `kubectl driftguard explain` and `status` all read it
/// from here, so none of them can call active what another refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// No break-glass annotations and none of driftguard's bookkeeping.
    None,
    /// A reason, and an expiry in the future within `maxDuration`: it grants.
    Active { reason: String, expires: String },
    /// The expiry has passed; the annotations are still there.
    Expired { expires: String },
    /// Annotations that grant nothing (no reason, no or an unreadable expiry,
    /// more than `maxDuration` ahead): why.
    Invalid { why: String },
    /// The annotations are gone but driftguard's pause marker is left: an
    /// end not finished, which the sweeper finishes.
    Ended,
}

impl State {
    /// Whether it overrides drift protection now.
    pub fn grants(&self) -> bool {
        matches!(self, State::Active { .. })
    }

    /// `none`, `active`, `expired`, `invalid` or `ended`, as reports print it.
    pub fn name(&self) -> &'static str {
        match self {
            State::None => "none",
            State::Active { .. } => "active",
            State::Expired { .. } => "expired",
            State::Invalid { .. } => "invalid",
            State::Ended => "ended",
        }
    }

    /// Why it grants nothing, for the states that carry annotations.
    pub fn why_not(&self) -> Option<String> {
        match self {
            State::Expired { expires } => {
                Some(format!("break-glass expired at {}", quote(expires)))
            }
            State::Invalid { why } => Some(why.clone()),
            _ => None,
        }
    }
}

/// The break-glass state of `carrier` at `now` under `policy`.
pub fn state(carrier: &Inputs, policy: &Policy, now: Timestamp) -> State {
    let reason = carrier.text(Input::BreakGlassReason);
    let expires = carrier.text(Input::BreakGlassExpires);
    if reason.is_none() && expires.is_none() {
        // Compared as stored: a non-string annotation is still an annotation.
        let annotated = [Input::BreakGlassReason, Input::BreakGlassExpires]
            .into_iter()
            .any(|i| carrier.get(i).is_some());
        // The label alone is anyone's to set; the pause marker is a decision
        // input only driftguard's break-glass writes.
        let bookkeeping = carrier.get(Input::BreakGlassPaused).is_some();
        return match (annotated, bookkeeping) {
            (true, _) => State::Invalid {
                why: format!("annotations {REASON} and {EXPIRES} must be strings"),
            },
            (false, true) => State::Ended,
            (false, false) => State::None,
        };
    }
    let reason = match reason.map(str::trim) {
        Some(r) if !r.is_empty() => r,
        _ => {
            return State::Invalid {
                why: format!("annotation {REASON} must give a reason"),
            };
        }
    };
    let Some(expires) = expires else {
        return State::Invalid {
            why: format!("annotation {EXPIRES} is missing (RFC 3339 time)"),
        };
    };
    let Ok(at) = expires.parse::<Timestamp>() else {
        return State::Invalid {
            why: format!("{EXPIRES} `{}` is not an RFC 3339 time", quote(expires)),
        };
    };
    if at <= now {
        return State::Expired {
            expires: expires.to_owned(),
        };
    }
    let max = policy.break_glass.max_duration;
    if at.duration_since(now) > max {
        return State::Invalid {
            why: format!("{EXPIRES} `{}` is more than {max:#} ahead", quote(expires)),
        };
    }
    State::Active {
        reason: reason.to_owned(),
        expires: expires.to_owned(),
    }
}

/// Whether the break-glass on `carrier` grants anything now (whoever set
/// it): a reason, and an expiry in the future within `maxDuration`.
pub fn grants(carrier: &Inputs, policy: &Policy, now: Timestamp) -> bool {
    state(carrier, policy, now).grants()
}

/// A break-glass on an object of Argo CD or Flux without driftguard's pause
/// (set with `kubectl annotate`, say): the tool will undo the hotfix on its
/// next reconcile. Two lines, as warnings are cut at 120 characters.
pub fn warn_unpaused(carrier: &Inputs, manager: Option<&Manager>, notes: &mut Vec<String>) {
    let Some(tool) = manager.map(Manager::tool) else {
        return;
    };
    if carrier.get(Input::BreakGlassPaused).is_some() {
        return;
    }
    notes.push(format!(
        "{tool} will revert this hotfix on its next reconcile:"
    ));
    notes.push(format!(
        "arm break-glass with `kubectl driftguard break-glass`, which pauses {tool} for this object"
    ));
}

/// The marker of a pause put on the Argo CD Application (the key it sets there).
pub const SKIP_RECONCILE: &str = "argocd.argoproj.io/skip-reconcile";

/// The Flux opt-out annotation that a pause marker says driftguard set on
/// the object itself; `None` for Argo CD (paused on its Application) and for
/// values driftguard never writes.
pub fn paused_annotation(marker: &str) -> Option<&'static str> {
    [FLUX_RECONCILE, HELM_DRIFT_DETECTION]
        .into_iter()
        .find(|k| *k == marker)
}

/// The annotations that ending a break-glass removes, given the pause marker
/// stored on the object.
pub fn annotations(marker: Option<&str>) -> Vec<&'static str> {
    let mut keys = vec![REASON, EXPIRES, PAUSED];
    keys.extend(marker.and_then(paused_annotation));
    keys
}

/// The labels that ending a break-glass removes.
pub const LABELS: [&str; 1] = [LABEL];

/// For an UPDATE from `old` to `new`: when it may end the break-glass on
/// `old`, the stored object without the keys it removes, for the caller to
/// diff against `new` (the write ends the break-glass when nothing else
/// drifted). `None` when `old` carries none of the keys, when its
/// break-glass still grants and the writer may not end it
/// (`may_end_in_force`), or when `new` keeps or changes any of them.
pub fn candidate(
    old: &Value,
    new: &Value,
    stored: &Inputs,
    may_end_in_force: bool,
    policy: &Policy,
    now: Timestamp,
) -> Option<Value> {
    let keys = keyed(stored);
    if !keys.iter().any(|(section, key)| has(old, section, key)) {
        return None;
    }
    if grants(stored, policy, now) && !may_end_in_force {
        return None;
    }
    if keys.iter().any(|(section, key)| has(new, section, key)) {
        return None;
    }
    let mut trimmed = old.clone();
    for (section, key) in keys {
        if let Some(map) = trimmed
            .pointer_mut(&format!("/metadata/{section}"))
            .and_then(Value::as_object_mut)
        {
            map.remove(key);
        }
    }
    Some(trimmed)
}

/// Every (section, key) that ending the break-glass on `stored` removes.
fn keyed(stored: &Inputs) -> Vec<(&'static str, &'static str)> {
    let marker = stored.text(Input::BreakGlassPaused);
    annotations(marker)
        .into_iter()
        .map(|k| ("annotations", k))
        .chain(LABELS.map(|k| ("labels", k)))
        .collect()
}

fn has(obj: &Value, section: &str, key: &str) -> bool {
    obj.get("metadata")
        .and_then(|m| m.get(section))
        .and_then(|s| s.get(key))
        .is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn flux(annotations: Value, labels: Value) -> Value {
        let mut l = json!({"kustomize.toolkit.fluxcd.io/name": "apps",
                           "kustomize.toolkit.fluxcd.io/namespace": "flux-system"});
        for (k, v) in labels.as_object().unwrap() {
            l[k] = v.clone();
        }
        json!({"kind": "ConfigMap", "metadata": {"name": "c", "namespace": "p",
               "labels": l, "annotations": annotations}})
    }

    fn armed(expires: &str) -> Value {
        flux(
            json!({REASON: "INC-1", EXPIRES: expires, PAUSED: FLUX_RECONCILE,
                   FLUX_RECONCILE: "disabled", "team": "a"}),
            json!({LABEL: "true"}),
        )
    }

    fn now() -> Timestamp {
        "2026-11-29T10:00:00Z".parse().unwrap()
    }

    #[test]
    fn only_a_complete_removal_of_a_break_glass_that_grants_nothing() {
        let policy = Policy::embedded();
        let old = armed("2026-11-29T09:00:00Z");
        let stored = Inputs::read(&old, &policy);
        let restored = flux(json!({"team": "a"}), json!({}));
        let trimmed = candidate(&old, &restored, &stored, false, &policy, now()).unwrap();
        assert_eq!(trimmed["metadata"]["annotations"], json!({"team": "a"}));
        assert_eq!(
            trimmed["metadata"]["labels"],
            restored["metadata"]["labels"]
        );

        // The opt-out the marker names must go too, and so must every other key.
        let mut kept = restored.clone();
        kept["metadata"]["annotations"][FLUX_RECONCILE] = json!("disabled");
        assert!(candidate(&old, &kept, &stored, false, &policy, now()).is_none());
        let mut kept = restored.clone();
        kept["metadata"]["labels"][LABEL] = json!("true");
        assert!(candidate(&old, &kept, &stored, false, &policy, now()).is_none());

        // Still in force: only for someone allowed to end it.
        let live = armed("2026-11-29T11:00:00Z");
        let stored = Inputs::read(&live, &policy);
        assert!(candidate(&live, &restored, &stored, false, &policy, now()).is_none());
        assert!(candidate(&live, &restored, &stored, true, &policy, now()).is_some());

        // Nothing of driftguard's on the object: nothing to end.
        let plain = flux(json!({"team": "a"}), json!({}));
        let stored = Inputs::read(&plain, &policy);
        assert!(candidate(&plain, &plain, &stored, true, &policy, now()).is_none());
    }

    #[test]
    fn an_opt_out_the_marker_does_not_name_is_not_removed() {
        assert_eq!(paused_annotation(FLUX_RECONCILE), Some(FLUX_RECONCILE));
        assert_eq!(paused_annotation("argocd.argoproj.io/skip-reconcile"), None);
        assert_eq!(annotations(None), vec![REASON, EXPIRES, PAUSED]);
        assert_eq!(
            annotations(Some(HELM_DRIFT_DETECTION)),
            vec![REASON, EXPIRES, PAUSED, HELM_DRIFT_DETECTION]
        );
    }
}
