//! Break-glass: an authorized identity may override drift protection for a
//! bounded time by annotating the object with a reason and an expiry.

use jiff::Timestamp;

use super::inputs::{Input, Inputs};
use crate::policy::Policy;

pub const REASON: &str = "driftguard.io/break-glass";
pub const EXPIRES: &str = "driftguard.io/break-glass-expires";

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
    let invalid = |why: String| BreakGlass::Invalid { why, changed };
    let reason = match reason.map(str::trim) {
        Some(r) if !r.is_empty() => r,
        _ => return invalid(format!("annotation {REASON} must give a reason")),
    };
    let Some(expires) = expires else {
        return invalid(format!("annotation {EXPIRES} is missing (RFC 3339 time)"));
    };
    let at: Timestamp = match expires.parse() {
        Ok(t) => t,
        Err(_) => return invalid(format!("{EXPIRES} `{expires}` is not an RFC 3339 time")),
    };
    if at <= now {
        return invalid(format!("break-glass expired at {expires}"));
    }
    let max = policy.break_glass.max_duration;
    if at.duration_since(now) > max {
        return invalid(format!("{EXPIRES} `{expires}` is more than {max:#} ahead"));
    }
    BreakGlass::Valid {
        used: BreakGlassUse {
            user: user.to_owned(),
            reason: reason.to_owned(),
            expires: expires.to_owned(),
        },
        changed,
    }
}
