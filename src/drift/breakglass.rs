//! Break-glass: an authorized identity may override drift protection for a
//! bounded time by annotating the object with a reason and an expiry.

use jiff::Timestamp;

use super::inputs::{Input, Inputs};
use super::ownership::Manager;
use crate::policy::Policy;

pub const REASON: &str = "driftguard.io/break-glass";
pub const EXPIRES: &str = "driftguard.io/break-glass-expires";
/// Set by `kubectl driftguard break-glass` next to the two annotations: the
/// key of the GitOps tool's own control that it paused for this object
/// (`kustomize.toolkit.fluxcd.io/reconcile`, `helm.toolkit.fluxcd.io/driftDetection`
/// or, on the Application, `argocd.argoproj.io/skip-reconcile`), so that
/// ending the break-glass removes exactly what driftguard added.
pub const PAUSED: &str = "driftguard.io/break-glass-paused";
/// A label (value `true`) on every object armed by the plugin: the expiry
/// sweeper finds them with a server-side label selector.
pub const LABEL: &str = "driftguard.io/break-glass";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BreakGlassUse {
    pub user: String,
    pub reason: String,
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
    let reason = carrier.text(Input::BreakGlassReason);
    let expires = carrier.text(Input::BreakGlassExpires);
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
    if reason.is_none() && expires.is_none() {
        return BreakGlass::None;
    }
    match validate(carrier, policy, now) {
        Ok((reason, expires)) => BreakGlass::Valid {
            used: BreakGlassUse {
                user: user.to_owned(),
                reason: reason.to_owned(),
                expires: expires.to_owned(),
            },
            changed,
        },
        Err(why) => BreakGlass::Invalid { why, changed },
    }
}

/// Whether the break-glass on `carrier` grants anything now (whoever set
/// it): a reason, and an expiry in the future within `maxDuration`.
pub fn grants(carrier: &Inputs, policy: &Policy, now: Timestamp) -> bool {
    validate(carrier, policy, now).is_ok()
}

/// The reason and expiry of a break-glass in force, or why it is not.
fn validate<'a>(
    carrier: &Inputs<'a>,
    policy: &Policy,
    now: Timestamp,
) -> Result<(&'a str, &'a str), String> {
    let reason = match carrier.text(Input::BreakGlassReason).map(str::trim) {
        Some(r) if !r.is_empty() => r,
        _ => return Err(format!("annotation {REASON} must give a reason")),
    };
    let Some(expires) = carrier.text(Input::BreakGlassExpires) else {
        return Err(format!("annotation {EXPIRES} is missing (RFC 3339 time)"));
    };
    let at: Timestamp = expires
        .parse()
        .map_err(|_| format!("{EXPIRES} `{expires}` is not an RFC 3339 time"))?;
    if at <= now {
        return Err(format!("break-glass expired at {expires}"));
    }
    let max = policy.break_glass.max_duration;
    if at.duration_since(now) > max {
        return Err(format!("{EXPIRES} `{expires}` is more than {max:#} ahead"));
    }
    Ok((reason, expires))
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
