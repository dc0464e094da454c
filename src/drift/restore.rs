//! Ending a break-glass: the write that removes its two annotations, the pause
//! marker, the label, and the Flux opt-out that the marker says driftguard
//! added, and nothing else. It only hands the object back to Git, so anyone
//! may write it once the break-glass grants nothing (expired or invalid):
//! that is what lets the expiry sweeper write without a special identity.
//! Ending one still in force is for identities allowed to break glass.
//!
//! Two writes in a row: the write must take away every one of those keys and
//! leave the object in scope, so no opt-out is left behind without the marker
//! that neutralised it, and nothing a later write is judged by changes.

use jiff::Timestamp;
use serde_json::Value;

use super::breakglass::{self, EXPIRES, LABEL, PAUSED, REASON};
use super::inputs::{Input, Inputs};
use super::ownership::{FLUX_RECONCILE, HELM_DRIFT_DETECTION};
use crate::policy::Policy;

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
    if breakglass::grants(stored, policy, now) && !may_end_in_force {
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
