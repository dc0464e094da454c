//! `kubectl driftguard break-glass KIND/NAME --reason TEXT --for DURATION`
//! and `--end`: the two annotations in one merge-patch write, after checking
//! the caller against the policy in force.

use std::process::ExitCode;

use http::Method;
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use super::api::{Api, Identity};
use super::{LoadedPolicy, Output, PluginError, PolicySource, print_structured, split_target};
use crate::drift::breakglass::{EXPIRES, REASON};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The object: KIND/NAME (deployment/myapp, deploy/myapp, cm/settings, ...).
    target: String,
    /// Why: shown in the warning, the audit record and the BreakGlassUsed Event.
    #[arg(long, required_unless_present = "end")]
    reason: Option<String>,
    /// How long, e.g. 30m, 1h, 1h30m; at most the policy's breakGlass.maxDuration.
    #[arg(long = "for", required_unless_present = "end")]
    duration: Option<String>,
    /// Remove break-glass from the object instead.
    #[arg(long, conflicts_with_all = ["reason", "duration"])]
    end: bool,
    /// Output format: text, or json or yaml (object, action granted, refused
    /// or ended, user, reason, expires).
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

pub async fn run(api: &Api, source: &PolicySource, args: Args) -> Result<ExitCode, PluginError> {
    let (kind, name) = split_target(&args.target)?;
    // Everything that can refuse is checked before anything is written.
    let duration =
        match &args.duration {
            Some(text) => Some(crate::policy::parse_duration(text).map_err(|e| {
                PluginError::Usage(format!("--for {text}: {e} (e.g. 30m, 1h, 1h30m)"))
            })?),
            None => None,
        };
    let reason = args.reason.as_deref().map(str::trim);
    if reason == Some("") {
        return Err(PluginError::Usage("--reason must not be empty".into()));
    }
    let resource = api.resolve(kind).await?;
    let loaded = source.load(api).await?;
    let me = api.whoami().await?;
    let path = resource.path(&api.namespace, name);
    let shown = format!("{}/{name}", resource.kind.to_ascii_lowercase());
    let where_ = if resource.namespaced {
        format!(" in namespace {}", api.namespace)
    } else {
        String::new()
    };
    let result = |action: &str, expires: Option<String>, refused: Option<&str>| {
        let mut r = json!({
            "object": {"kind": resource.kind, "name": name,
                       "namespace": resource.namespaced.then_some(&api.namespace)},
            "action": action,
            "user": me.username,
            "reason": reason,
            "expires": expires,
        });
        if let Some(why) = refused {
            r["refusal"] = json!(why);
        }
        r
    };
    if let Some(why) = refusal(&loaded, &me, duration) {
        eprintln!("refused: {why}");
        eprintln!("nothing was written");
        if args.output != Output::Text {
            print_structured(&result("refused", None, Some(&why)), args.output)?;
        }
        return Ok(ExitCode::from(1));
    }
    let (patch, expires) = match (args.end, reason, duration) {
        (true, _, _) => (
            json!({"metadata": {"annotations": {REASON: Value::Null, EXPIRES: Value::Null}}}),
            None,
        ),
        (false, Some(reason), Some(duration)) => {
            let expires = expiry(Timestamp::now(), duration)?;
            (
                json!({"metadata": {"annotations": {REASON: reason, EXPIRES: expires.to_string()}}}),
                Some((expires, duration)),
            )
        }
        _ => {
            return Err(PluginError::Usage(
                "give --reason and --for, or --end".into(),
            ));
        }
    };
    let reply = api
        .call(
            Method::PATCH,
            &path,
            Some("application/merge-patch+json"),
            Some(&patch),
        )
        .await?;
    match reply {
        Ok(reply) => {
            for w in &reply.warnings {
                eprintln!("Warning: {w}");
            }
            if args.output != Output::Text {
                let r = match expires {
                    Some((at, _)) => result("granted", Some(at.to_string()), None),
                    None => result("ended", None, None),
                };
                print_structured(&r, args.output)?;
                return Ok(ExitCode::SUCCESS);
            }
            match expires {
                Some((at, duration)) => {
                    println!(
                        "break-glass set on {shown}{where_} by {} for {duration:#}, until {at}",
                        me.username
                    );
                    println!(
                        "until then, manual changes to it by identities allowed to break glass are allowed (with a warning, audited, and a BreakGlassUsed Event)"
                    );
                    println!(
                        "at {at} it expires: driftguard judges changes as drift again, and the annotations stay until `kubectl driftguard break-glass {} --end`; the GitOps tool may revert manual changes at its next sync, so put the fix in Git",
                        args.target
                    );
                }
                None => {
                    println!("break-glass removed from {shown}{where_}");
                    println!("changes to it by hand are judged as drift again");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(refusal) if refusal.by_webhook() => {
            for w in &refusal.warnings {
                eprintln!("Warning: {w}");
            }
            eprintln!("denied: {}", refusal.message);
            if args.output != Output::Text {
                print_structured(
                    &result("refused", None, Some(&refusal.message)),
                    args.output,
                )?;
            }
            Ok(ExitCode::from(1))
        }
        Err(refusal) => Err(PluginError::from_refusal(refusal)),
    }
}

/// Why the policy refuses this caller or duration, before any write.
fn refusal(
    loaded: &LoadedPolicy,
    me: &Identity,
    duration: Option<SignedDuration>,
) -> Option<String> {
    let bg = &loaded.policy.break_glass;
    let origin = &loaded.origin;
    if bg.allowed.is_empty() {
        return Some(format!(
            "break-glass is disabled in the policy in force ({origin}): breakGlass.allowedUsers and allowedGroups are empty"
        ));
    }
    if !bg.allowed.contains(&me.username, &me.groups) {
        let (users, groups) = bg.allowed.patterns();
        return Some(format!(
            "user {} (groups: {}) may not break glass: the policy in force ({origin}) allows users [{}] and groups [{}]",
            me.username,
            me.groups.join(", "),
            users.join(", "),
            groups.join(", ")
        ));
    }
    match duration {
        Some(d) if d > bg.max_duration => Some(format!(
            "--for {d:#} is longer than breakGlass.maxDuration {:#} ({origin})",
            bg.max_duration
        )),
        _ => None,
    }
}

/// `now + duration`, to the second (RFC 3339 without fractions).
fn expiry(now: Timestamp, duration: SignedDuration) -> Result<Timestamp, PluginError> {
    let at = now
        .checked_add(duration)
        .map_err(|e| PluginError::Usage(format!("--for {duration:#}: {e}")))?;
    Timestamp::from_second(at.as_second())
        .map_err(|e| PluginError::Usage(format!("--for {duration:#}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loaded(yaml: &str) -> LoadedPolicy {
        LoadedPolicy {
            policy: crate::policy::Policy::from_yaml(yaml, "p.yaml").unwrap(),
            origin: "ConfigMap driftguard/driftguard-policy".into(),
        }
    }

    fn who(user: &str, groups: &[&str]) -> Identity {
        Identity {
            username: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    #[test]
    fn the_policy_refuses_before_any_write() {
        let off = loaded("breakGlass: {allowedUsers: []}\n");
        let why = refusal(&off, &who("sam", &[]), None).unwrap();
        assert!(why.contains("disabled"), "{why}");

        let on =
            loaded("breakGlass: {allowedUsers: [sam], allowedGroups: [sre-*], maxDuration: 2h}\n");
        let why = refusal(&on, &who("alice", &["developers"]), None).unwrap();
        assert!(
            why.contains("alice") && why.contains("[sam]") && why.contains("[sre-*]"),
            "{why}"
        );
        assert_eq!(
            refusal(&on, &who("sam", &[]), Some(SignedDuration::from_hours(2))),
            None
        );
        assert_eq!(refusal(&on, &who("bob", &["sre-oncall"]), None), None);
        let why = refusal(&on, &who("sam", &[]), Some(SignedDuration::from_hours(3))).unwrap();
        assert!(why.contains("maxDuration"), "{why}");
    }

    #[test]
    fn the_expiry_is_whole_seconds_rfc_3339() {
        let now: Timestamp = "2026-01-01T10:00:00.75Z".parse().unwrap();
        let at = expiry(now, SignedDuration::from_mins(90)).unwrap();
        assert_eq!(at.to_string(), "2026-01-01T11:30:00Z");
    }
}
