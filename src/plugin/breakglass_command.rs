//! `kubectl driftguard break-glass KIND/NAME --reason TEXT --for DURATION`
//! and `--end`: the exact write is first sent as a server-side dry run, so
//! driftguard's own answer, under the policy in force, decides; only then is
//! the GitOps tool paused for this object with the tool's own control and
//! break-glass armed, or both ended (see [`crate::breakglass`]). The copy of
//! the policy in the chart's ConfigMap never decides: it only explains a
//! refusal.
//!
//! Here: the arguments and the command's course; [`flow`] arms and ends
//! against the cluster, [`report`] says what that did, [`render`] prints it,
//! [`application_access`] reads and writes the Argo CD Application as the user.

mod application_access;
mod flow;
mod render;
mod report;

#[cfg(test)]
mod fake;

use std::process::ExitCode;

use jiff::{SignedDuration, Timestamp};

use super::api::{Api, ArgoCdArgs, Identity};
use super::installation;
use super::out::errln;
use super::{LoadedPolicy, Output, PluginError, PolicySource, split_target};
use flow::Target;

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
    /// Remove break-glass (and driftguard's pause) from the object instead.
    #[arg(long, conflicts_with_all = ["reason", "duration"])]
    end: bool,
    /// Refuse, writing nothing, when the GitOps tool cannot be paused for the
    /// object (an Argo CD Application that cannot be read or patched, or whose
    /// ApplicationSet would remove the pause), instead of arming with a warning.
    #[arg(long, conflicts_with = "end")]
    require_pause: bool,
    /// Where Argo CD Applications live when the tracking id names none.
    #[arg(long, default_value = "argocd")]
    argocd_namespace: String,
    #[command(flatten)]
    argocd: ArgoCdArgs,
    /// What the hub (--argocd-kubeconfig, --argocd-context) calls this
    /// cluster (repeatable, or comma-separated): an Argo CD destination
    /// `server` URL (with `://`) or `name`. A hub's Application is paused,
    /// and its pause lifted, only when its spec.destination is one of these.
    /// Default: what driftguard serve (its --cluster-name) says in its answer
    /// to the dry run, to those who may break glass; this overrides it.
    #[arg(
        long = "cluster-name",
        env = "DRIFTGUARD_CLUSTER_NAMES",
        value_delimiter = ','
    )]
    cluster_names: Vec<String>,
    /// Output format: text, or json or yaml (object, action granted, refused
    /// or ended, user, reason, expires, pause).
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

/// Runs the command: 0 armed or ended, 1 refused (by the server, or
/// `--require-pause`), 2 an access error or a pause left to lift by hand.
pub async fn run(api: &Api, source: &PolicySource, args: Args) -> Result<ExitCode, PluginError> {
    let (kind, name) = split_target(&args.target)?;
    let (reason, duration) = reason_and_duration(&args)?;
    let resource = api.resolve(kind).await?;
    // The ConfigMap's copy only detects the GitOps tool (as the server does)
    // and explains a refusal; the server's dry run decides.
    let loaded = source.load(api).await?;
    let me = api.whoami().await?;
    let shown = format!("{}/{name}", resource.kind.to_ascii_lowercase());
    // In a spoke, the Applications are in the hub: paused and resumed there
    // with the user's own credentials for it; with this cluster's own Argo
    // CD too, in the one whose installation id the object carries.
    let hub = args.argocd.connect(api).await?;
    let (argocd, argocd_namespace) = (&args.argocd, args.argocd_namespace.as_str());
    let object = (&resource, name, &loaded.policy);
    let chosen =
        installation::choose_for(api, hub.as_ref(), argocd, argocd_namespace, object).await?;
    if let Some(why) = &chosen.unsure {
        errln!("warning: {why}");
    }
    let target = Target {
        api,
        apps: api,
        hub: None,
        resource: &resource,
        name,
        shown: &shown,
        policy: &loaded.policy,
        argocd_namespace: &args.argocd_namespace,
        cluster_names: &args.cluster_names,
        require_pause: args.require_pause,
        no_pause: None,
        told: Default::default(),
    }
    .at(chosen);
    let (written, expires) = match (args.end, reason, duration) {
        (true, _, _) => (target.end().await?, None),
        (false, Some(reason), Some(duration)) => {
            let at = expiry(Timestamp::now(), duration)?;
            (target.arm(reason, at).await?, Some((at, duration)))
        }
        _ => {
            return Err(PluginError::Usage(
                "give --reason and --for, or --end".into(),
            ));
        }
    };
    let answer = render::Answer {
        output: args.output,
        target: &args.target,
        resource: &resource,
        name,
        namespace: &api.namespace,
        shown: &shown,
        user: &me.username,
        reason,
    };
    answer.written(written, expires, || hint(&loaded, &me, duration))
}

/// `--reason`, trimmed and not empty, and `--for`, read.
fn reason_and_duration(args: &Args) -> Result<(Option<&str>, Option<SignedDuration>), PluginError> {
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
    Ok((reason, duration))
}

/// After the server's refusal: what the copy of the policy read from the
/// cluster says about this caller and duration, if it explains anything.
/// Never a decision (the copy may differ from the policy in force), and
/// nothing from the embedded default, which says nothing about the cluster.
fn hint(loaded: &LoadedPolicy, me: &Identity, duration: Option<SignedDuration>) -> Option<String> {
    if !loaded.from_cluster() {
        return None;
    }
    let bg = &loaded.policy.break_glass;
    let origin = &loaded.origin;
    if bg.allowed.is_empty() {
        return Some(format!(
            "the policy in {origin} disables break-glass: breakGlass.allowedUsers and allowedGroups are empty"
        ));
    }
    if !bg.allowed.contains(&me.username, &me.groups) {
        let (users, groups) = bg.allowed.patterns();
        return Some(format!(
            "user {} (groups: {}) may not break glass: the policy in {origin} allows users [{}] and groups [{}]",
            me.username,
            me.groups.join(", "),
            users.join(", "),
            groups.join(", ")
        ));
    }
    match duration {
        Some(d) if d > bg.max_duration => Some(format!(
            "--for {d:#} is longer than breakGlass.maxDuration {:#} in {origin}",
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
    fn the_policy_copy_only_explains_a_refusal() {
        let off = loaded("breakGlass: {allowedUsers: []}\n");
        let why = hint(&off, &who("sam", &[]), None).unwrap();
        assert!(why.contains("disables break-glass"), "{why}");

        let on =
            loaded("breakGlass: {allowedUsers: [sam], allowedGroups: [sre-*], maxDuration: 2h}\n");
        let why = hint(&on, &who("alice", &["developers"]), None).unwrap();
        assert!(
            why.contains("alice") && why.contains("[sam]") && why.contains("[sre-*]"),
            "{why}"
        );
        assert_eq!(
            hint(&on, &who("sam", &[]), Some(SignedDuration::from_hours(2))),
            None
        );
        assert_eq!(hint(&on, &who("bob", &["sre-oncall"]), None), None);
        let why = hint(&on, &who("sam", &[]), Some(SignedDuration::from_hours(3))).unwrap();
        assert!(why.contains("maxDuration"), "{why}");

        // The embedded default refuses everyone, and knows nothing of the cluster.
        let embedded = LoadedPolicy {
            policy: crate::policy::Policy::embedded(),
            origin: "embedded default".into(),
        };
        assert!(!embedded.from_cluster());
        assert_eq!(hint(&embedded, &who("alice", &[]), None), None);
    }

    #[test]
    fn the_expiry_is_whole_seconds_rfc_3339() {
        let now: Timestamp = "2026-01-01T10:00:00.75Z".parse().unwrap();
        let at = expiry(now, SignedDuration::from_mins(90)).unwrap();
        assert_eq!(at.to_string(), "2026-01-01T11:30:00Z");
    }
}
