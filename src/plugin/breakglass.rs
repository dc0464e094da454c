//! `kubectl driftguard break-glass KIND/NAME --reason TEXT --for DURATION`
//! and `--end`: after checking the caller against the policy in force, pause
//! the GitOps tool for this object with the tool's own control and arm
//! break-glass, or end both (see [`crate::pause`]). For Flux the pause is in
//! the same write as the two annotations; for Argo CD the Application is
//! paused first (and resumed first when ending), so the hotfix is never
//! exposed to a self-heal while driftguard already allows it.

use std::process::ExitCode;

use http::Method;
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use super::api::{Api, Identity, Refusal, Reply, Resource};
use super::pause::{CONFLICT_RETRIES, SetCheck, application_set_check, update_application};
use super::{LoadedPolicy, Output, PluginError, PolicySource, print_structured, split_target};
use crate::pause::{AppChange, AppState, Plan};
use crate::text::printable;

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
    /// Where Argo CD Applications live when the tracking id names none.
    #[arg(long, default_value = "argocd")]
    argocd_namespace: String,
    /// Output format: text, or json or yaml (object, action granted, refused
    /// or ended, user, reason, expires, pause).
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

/// What was paused or resumed, for the report.
struct PauseReport {
    tool: Option<&'static str>,
    /// The annotation that pauses, and where it is.
    control: Option<&'static str>,
    target: Option<String>,
    /// paused | already-paused | resumed | still-paused | not-paused
    state: &'static str,
    paused_for: Vec<String>,
    /// The ApplicationSet that generated the paused Application, if one did.
    application_set: Option<String>,
    text: String,
}

impl PauseReport {
    fn json(&self) -> Value {
        json!({"tool": self.tool, "control": self.control, "target": self.target,
               "state": self.state, "pausedFor": self.paused_for,
               "applicationSet": self.application_set, "text": self.text})
    }
}

/// A write's result: the apiserver's reply, or driftguard's denial.
enum Written {
    Done(Reply, PauseReport),
    Denied(Refusal),
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
        eprintln!("refused: {}", printable(&why));
        eprintln!("nothing was written");
        if args.output != Output::Text {
            print_structured(&result("refused", None, Some(&why)), args.output)?;
        }
        return Ok(ExitCode::from(1));
    }
    let target = Target {
        api,
        resource: &resource,
        name,
        shown: &shown,
        policy: &loaded.policy,
        argocd_namespace: &args.argocd_namespace,
    };
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
    let (reply, pause) = match written {
        Written::Done(reply, pause) => (reply, pause),
        Written::Denied(refusal) => {
            for w in &refusal.warnings {
                eprintln!("Warning: {}", printable(w));
            }
            eprintln!("denied: {}", printable(&refusal.message));
            if args.output != Output::Text {
                print_structured(
                    &result("refused", None, Some(&refusal.message)),
                    args.output,
                )?;
            }
            return Ok(ExitCode::from(1));
        }
    };
    for w in &reply.warnings {
        eprintln!("Warning: {}", printable(w));
    }
    if args.output != Output::Text {
        let mut r = match expires {
            Some((at, _)) => result("granted", Some(at.to_string()), None),
            None => result("ended", None, None),
        };
        r["pause"] = pause.json();
        print_structured(&r, args.output)?;
        return Ok(ExitCode::SUCCESS);
    }
    match expires {
        Some((at, duration)) => {
            println!(
                "break-glass set on {shown}{where_} by {} for {duration:#}, until {at}",
                printable(&me.username)
            );
            println!("{}", printable(&pause.text));
            println!(
                "until then, manual changes to it by identities allowed to break glass are allowed (with a warning, audited, and a BreakGlassUsed Event)"
            );
            // Only a pause this break-glass holds is lifted at expiry.
            let what = if pause.state == "paused" {
                "the break-glass and the pause"
            } else {
                "the break-glass"
            };
            println!(
                "at {at} it expires: driftguard removes {what} within its sweep interval, and the GitOps tool restores Git; end it earlier with `kubectl driftguard break-glass {} --end`; put the fix in Git",
                args.target
            );
        }
        None => {
            println!("break-glass removed from {shown}{where_}");
            if !pause.text.is_empty() {
                println!("{}", printable(&pause.text));
            }
            println!("changes to it by hand are judged as drift again");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The object under break-glass and what is needed to pause its tool.
struct Target<'a> {
    api: &'a Api,
    resource: &'a Resource,
    name: &'a str,
    shown: &'a str,
    policy: &'a crate::policy::Policy,
    argocd_namespace: &'a str,
}

impl Target<'_> {
    fn path(&self) -> String {
        self.resource.path(&self.api.namespace, self.name)
    }

    async fn get(&self) -> Result<Value, PluginError> {
        match self.api.try_get(&self.path()).await? {
            Ok(o) => Ok(o),
            Err(r) => Err(PluginError::from_refusal(r)),
        }
    }

    fn plan(&self, object: &Value) -> Plan {
        crate::pause::plan(
            object,
            &self.resource.group,
            self.policy,
            self.argocd_namespace,
        )
    }

    /// A merge patch of the object; `None` on a conflict (read again).
    async fn patch(&self, body: &Value) -> Result<Option<Result<Reply, Refusal>>, PluginError> {
        let reply = self
            .api
            .call(
                Method::PATCH,
                &self.path(),
                Some("application/merge-patch+json"),
                Some(body),
            )
            .await?;
        Ok(match reply {
            Err(r) if r.code == 409 => None,
            other => Some(other),
        })
    }

    /// Pauses the tool for the object (Argo CD: the Application first), then
    /// arms break-glass; a pause this run added is undone when the arming
    /// write is refused. An Application whose ApplicationSet would remove
    /// the pause is not paused at all, and the report says so.
    async fn arm(&self, reason: &str, at: Timestamp) -> Result<Written, PluginError> {
        let expires = at.to_string();
        // Whether this run added the object to its Application's pause, across retries.
        let mut added = false;
        for _ in 0..CONFLICT_RETRIES {
            let object = self.get().await?;
            let rv = object["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default();
            if let Some(why) = crate::pause::runtime_child(&object, &self.resource.group) {
                return Err(PluginError::Usage(format!(
                    "{}: {why}; break-glass the GitOps-managed object it comes from instead",
                    self.shown
                )));
            }
            let plan = self.plan(&object);
            let mut app = None;
            let mut set = SetCheck::NotGenerated;
            if let Plan::ArgoCd {
                namespace,
                name,
                entry,
            } = &plan
            {
                set = application_set_check(self.api, namespace, name).await?;
                if set.holds() {
                    let change = AppChange::Pause(entry);
                    let outcome = update_application(self.api, namespace, name, change).await?;
                    added |= !outcome.was_listed && matches!(outcome.state, AppState::PausedFor(_));
                    app = Some(outcome.state);
                }
            }
            let body = if set.holds() {
                crate::pause::arm_patch(&plan, reason, &expires, rv)
            } else {
                crate::pause::arm_patch_unpaused(reason, &expires, rv)
            };
            let Some(reply) = self.patch(&body).await? else {
                continue;
            };
            return match reply {
                Ok(reply) => Ok(Written::Done(
                    reply,
                    armed_report(&plan, app, &set, self.shown, &expires),
                )),
                Err(refusal) => {
                    if added {
                        self.undo_pause(&plan).await;
                    }
                    if refusal.by_webhook() {
                        Ok(Written::Denied(refusal))
                    } else {
                        Err(PluginError::from_refusal(refusal))
                    }
                }
            };
        }
        Err(self.kept_changing())
    }

    /// After a refused arming write: take the object out of the Application's
    /// pause that this run added it to (best effort; said on stderr).
    async fn undo_pause(&self, plan: &Plan) {
        let Plan::ArgoCd {
            namespace,
            name,
            entry,
        } = plan
        else {
            return;
        };
        if let Err(e) =
            update_application(self.api, namespace, name, AppChange::Resume(entry)).await
        {
            eprintln!(
                "warning: Argo CD Application {} stays paused for {}: {}; remove it with `kubectl driftguard break-glass {} --end`",
                printable(&format!("{namespace}/{name}")),
                printable(entry),
                printable(&e.to_string()),
                self.shown
            );
        }
    }

    /// Resumes the tool (Argo CD: the Application first), then removes
    /// everything arming added to the object.
    async fn end(&self) -> Result<Written, PluginError> {
        for _ in 0..CONFLICT_RETRIES {
            let object = self.get().await?;
            let meta = &object["metadata"];
            let rv = meta["resourceVersion"].as_str().unwrap_or_default();
            let annotations = &meta["annotations"];
            let marker = annotations[crate::drift::breakglass::PAUSED].as_str();
            let mut app = None;
            if crate::pause::paused_application(annotations) {
                match self.plan(&object) {
                    Plan::ArgoCd {
                        namespace,
                        name,
                        entry,
                    } => {
                        let change = AppChange::Resume(&entry);
                        let outcome =
                            update_application(self.api, &namespace, &name, change).await?;
                        app = Some((format!("{namespace}/{name}"), outcome.state));
                    }
                    _ => eprintln!(
                        "warning: {} says it paused an Argo CD Application, but no longer names one: check {} on its Application",
                        self.shown,
                        crate::pause::SKIP_RECONCILE
                    ),
                }
            }
            let body = crate::pause::end_patch(annotations, rv);
            let Some(reply) = self.patch(&body).await? else {
                continue;
            };
            return Ok(match reply {
                Ok(reply) => Written::Done(reply, ended_report(marker, app, self.shown)),
                Err(refusal) if refusal.by_webhook() => Written::Denied(refusal),
                Err(refusal) => return Err(PluginError::from_refusal(refusal)),
            });
        }
        Err(self.kept_changing())
    }

    fn kept_changing(&self) -> PluginError {
        PluginError::Access(format!(
            "{} kept changing ({CONFLICT_RETRIES} conflicting writes); try again",
            self.shown
        ))
    }
}

/// What arming paused, in words and as data.
fn armed_report(
    plan: &Plan,
    app: Option<AppState>,
    set: &SetCheck,
    shown: &str,
    until: &str,
) -> PauseReport {
    let mut r = PauseReport {
        tool: None,
        control: None,
        target: None,
        state: "not-paused",
        paused_for: Vec::new(),
        application_set: None,
        text: String::new(),
    };
    match plan {
        Plan::Unmanaged => {
            r.text = format!("no GitOps tool manages {shown}: nothing to pause");
        }
        Plan::AlreadyOptedOut { key, manager } => {
            r.tool = Some(manager.tool());
            r.control = Some(key);
            r.target = Some("object".into());
            r.state = "already-paused";
            r.text = format!(
                "Flux already skips {shown} ({key}: disabled, set before and not by driftguard): left as it is, so driftguard does not judge it and Git does not win at expiry"
            );
        }
        Plan::Flux { key, manager } => {
            r.tool = Some(manager.tool());
            r.control = Some(key);
            r.target = Some("object".into());
            r.state = "paused";
            let what = if *key == crate::drift::ownership::FLUX_RECONCILE {
                "reconcile"
            } else {
                "correct drift of"
            };
            r.text = format!(
                "Flux will not {what} {shown} until {until}; Git wins again after that ({key}: disabled on it, for {manager})"
            );
        }
        Plan::ArgoCd {
            namespace, name, ..
        } => {
            r.tool = Some("Argo CD");
            r.control = Some(crate::pause::SKIP_RECONCILE);
            r.target = Some(format!("Application {namespace}/{name}"));
            let keys = crate::pause::APPLICATION_PAUSE.join(", ");
            let fix = format!(
                "to let break-glass pause it, list {keys} in the ApplicationSet's spec.preservedFields.annotations (see docs/break-glass.md)"
            );
            let risk = format!(
                "with selfHeal, Argo CD may revert changes to {shown} at any time; driftguard still allows them until {until}"
            );
            match set {
                SetCheck::NotGenerated => {}
                SetCheck::Keeps { set } => r.application_set = Some(set.clone()),
                SetCheck::Drops { set, dropped } => {
                    r.application_set = Some(set.clone());
                    r.text = format!(
                        "Argo CD is NOT paused: Application {namespace}/{name} is generated by ApplicationSet {namespace}/{set}, whose controller rewrites its annotations and would remove {} within seconds, so no pause was written; {risk}; {fix}",
                        dropped.join(" and ")
                    );
                    return r;
                }
                SetCheck::Unreadable { set, why } => {
                    r.application_set = Some(set.clone());
                    r.text = format!(
                        "Argo CD is NOT paused: Application {namespace}/{name} is generated by ApplicationSet {namespace}/{set}, which could not be read ({why}) to check that it keeps a pause, so no pause was written; {risk}; pausing needs get on applicationsets.argoproj.io, and {fix}"
                    );
                    return r;
                }
            }
            match app {
                Some(AppState::PausedFor(list)) => {
                    r.state = "paused";
                    r.text = format!(
                        "Argo CD Application {namespace}/{name} is paused (skip-reconcile) until {until}: no sync or self-heal of any of its objects; Git wins again after that"
                    );
                    if list.len() > 1 {
                        r.text.push_str(&format!(
                            " (the pause is shared with {} other break-glass(es))",
                            list.len() - 1
                        ));
                    }
                    if let Some(set) = &r.application_set {
                        r.text.push_str(&format!(
                            "; its ApplicationSet {namespace}/{set} keeps the pause ({keys} preserved)"
                        ));
                    }
                    r.paused_for = list;
                }
                _ => {
                    r.state = "already-paused";
                    r.text = format!(
                        "Argo CD Application {namespace}/{name} was already paused (skip-reconcile set by someone else): left as it is, and not resumed at expiry"
                    );
                }
            }
        }
    }
    r
}

/// What ending resumed, in words and as data.
fn ended_report(marker: Option<&str>, app: Option<(String, AppState)>, shown: &str) -> PauseReport {
    let mut r = PauseReport {
        tool: None,
        control: marker
            .and_then(crate::drift::restore::paused_annotation)
            .or(app.as_ref().map(|_| crate::pause::SKIP_RECONCILE)),
        target: None,
        state: "not-paused",
        paused_for: Vec::new(),
        application_set: None,
        text: String::new(),
    };
    if let Some(key) = marker.and_then(crate::drift::restore::paused_annotation) {
        r.tool = Some("Flux");
        r.target = Some("object".into());
        r.state = "resumed";
        r.text = format!("Flux reconciles {shown} from Git again ({key} removed)");
    }
    if let Some((app, state)) = app {
        r.tool = Some("Argo CD");
        r.target = Some(format!("Application {app}"));
        match state {
            AppState::Resumed => {
                r.state = "resumed";
                r.text = format!(
                    "Argo CD Application {app} resumes (skip-reconcile removed): Git wins again"
                );
            }
            AppState::PausedFor(list) => {
                r.state = "still-paused";
                r.text = format!(
                    "Argo CD Application {app} stays paused for {} other break-glass(es): {}",
                    list.len(),
                    list.join(", ")
                );
                r.paused_for = list;
            }
            _ => {
                r.text = format!(
                    "Argo CD Application {app} was not paused by driftguard for {shown}: left as it is"
                );
            }
        }
    }
    r
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
    fn the_report_says_what_was_paused_and_until_when() {
        use crate::drift::ownership::{FLUX_RECONCILE, HELM_DRIFT_DETECTION, Manager};
        let kustomization = Manager::FluxKustomization {
            namespace: "flux-system".into(),
            name: "apps".into(),
        };
        let plan = Plan::Flux {
            key: FLUX_RECONCILE,
            manager: kustomization.clone(),
        };
        let r = armed_report(
            &plan,
            None,
            &SetCheck::NotGenerated,
            "deployment/web",
            "2026-01-01T11:00:00Z",
        );
        assert!(
            r.text.starts_with(
                "Flux will not reconcile deployment/web until 2026-01-01T11:00:00Z; Git wins again after that"
            ),
            "{}",
            r.text
        );
        assert_eq!((r.state, r.control), ("paused", Some(FLUX_RECONCILE)));
        let helm = Plan::Flux {
            key: HELM_DRIFT_DETECTION,
            manager: kustomization.clone(),
        };
        let r = armed_report(&helm, None, &SetCheck::NotGenerated, "deployment/web", "T");
        assert!(r.text.contains("will not correct drift of"), "{}", r.text);
        let theirs = Plan::AlreadyOptedOut {
            key: FLUX_RECONCILE,
            manager: kustomization,
        };
        assert_eq!(
            armed_report(&theirs, None, &SetCheck::NotGenerated, "x", "T").state,
            "already-paused"
        );

        let argo = Plan::ArgoCd {
            namespace: "argocd".into(),
            name: "myapp".into(),
            entry: "apps/Deployment:p/web".into(),
        };
        let list = vec![
            "/ConfigMap:p/a".to_owned(),
            "apps/Deployment:p/web".to_owned(),
        ];
        let r = armed_report(
            &argo,
            Some(AppState::PausedFor(list.clone())),
            &SetCheck::NotGenerated,
            "deployment/web",
            "T",
        );
        assert!(
            r.text
                .starts_with("Argo CD Application argocd/myapp is paused (skip-reconcile) until T")
                && r.text.contains("shared with 1 other"),
            "{}",
            r.text
        );
        assert_eq!(r.paused_for, list);
        let r = armed_report(
            &argo,
            Some(AppState::PausedBySomeoneElse),
            &SetCheck::NotGenerated,
            "x",
            "T",
        );
        assert_eq!(r.state, "already-paused");
        assert_eq!(
            armed_report(&Plan::Unmanaged, None, &SetCheck::NotGenerated, "x", "T").state,
            "not-paused"
        );
    }

    #[test]
    fn the_report_never_claims_a_pause_an_application_set_undoes() {
        let argo = Plan::ArgoCd {
            namespace: "argocd".into(),
            name: "web-prod".into(),
            entry: "apps/Deployment:p/web".into(),
        };
        let held = Some(AppState::PausedFor(vec!["apps/Deployment:p/web".into()]));
        let keeps = SetCheck::Keeps { set: "web".into() };
        let r = armed_report(&argo, held, &keeps, "deployment/web", "T");
        assert_eq!(r.state, "paused");
        assert!(
            r.text
                .contains("its ApplicationSet argocd/web keeps the pause"),
            "{}",
            r.text
        );
        assert_eq!(r.json()["applicationSet"], "web");

        let drops = SetCheck::Drops {
            set: "web".into(),
            dropped: vec![crate::pause::SKIP_RECONCILE],
        };
        let unreadable = SetCheck::Unreadable {
            set: "web".into(),
            why: "HTTP 403: forbidden".into(),
        };
        for (set, why) in [
            (
                &drops,
                "would remove argocd.argoproj.io/skip-reconcile within seconds",
            ),
            (&unreadable, "could not be read (HTTP 403: forbidden)"),
        ] {
            let r = armed_report(&argo, None, set, "deployment/web", "T");
            assert_eq!(r.state, "not-paused");
            assert!(
                r.text.starts_with(
                    "Argo CD is NOT paused: Application argocd/web-prod is generated by ApplicationSet argocd/web"
                ) && r.text.contains(why)
                    && r.text.contains("spec.preservedFields.annotations"),
                "{}",
                r.text
            );
        }
    }

    #[test]
    fn the_end_report_says_what_resumed() {
        let r = ended_report(
            Some("kustomize.toolkit.fluxcd.io/reconcile"),
            None,
            "deployment/web",
        );
        assert_eq!((r.tool, r.state), (Some("Flux"), "resumed"));
        let r = ended_report(
            Some(crate::pause::SKIP_RECONCILE),
            Some(("argocd/myapp".into(), AppState::Resumed)),
            "deployment/web",
        );
        assert!(r.text.contains("argocd/myapp resumes"), "{}", r.text);
        let r = ended_report(
            Some(crate::pause::SKIP_RECONCILE),
            Some((
                "argocd/myapp".into(),
                AppState::PausedFor(vec!["/ConfigMap:p/a".into()]),
            )),
            "deployment/web",
        );
        assert_eq!(r.state, "still-paused");
        assert!(r.text.contains("/ConfigMap:p/a"), "{}", r.text);
        assert_eq!(ended_report(None, None, "x").state, "not-paused");
    }

    #[test]
    fn the_expiry_is_whole_seconds_rfc_3339() {
        let now: Timestamp = "2026-01-01T10:00:00.75Z".parse().unwrap();
        let at = expiry(now, SignedDuration::from_mins(90)).unwrap();
        assert_eq!(at.to_string(), "2026-01-01T11:30:00Z");
    }
}
