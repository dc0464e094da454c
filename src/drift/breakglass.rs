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
            why: format!("break-glass expired at {expires}"),
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
            State::Expired { expires } => Some(format!("break-glass expired at {expires}")),
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
            why: format!("{EXPIRES} `{expires}` is not an RFC 3339 time"),
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
            why: format!("{EXPIRES} `{expires}` is more than {max:#} ahead"),
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
