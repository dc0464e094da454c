//! What `kubectl driftguard break-glass` computes from what it found and
//! did in the cluster: what was paused or resumed ([`PauseReport`]), in
//! words and as data, and the whole answer ([`Report`], `-o json|yaml`).
//! Pure: [`super::render`] prints it.

use serde::Serialize;
use serde_json::Value;

use super::application_access::SetCheck;
use crate::breakglass::application::{APPLICATION_PAUSE, AppState, PAUSED_FOR, SKIP_RECONCILE};
use crate::breakglass::pause::Plan;
use crate::drift::breakglass_state::paused_annotation;
use crate::drift::ownership::FLUX_RECONCILE;
use crate::plugin::PluginError;

/// What was paused or resumed, for the report (`pause` in JSON).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PauseReport {
    pub tool: Option<&'static str>,
    /// The annotation that pauses, and where it is.
    pub control: Option<&'static str>,
    pub target: Option<String>,
    /// paused | already-paused | resumed | still-paused | not-paused | lift-failed
    pub state: &'static str,
    pub paused_for: Vec<String>,
    /// The ApplicationSet that generated the paused Application, if one did.
    pub application_set: Option<String>,
    pub text: String,
    /// Why the tool may undo the hotfix (it could not be paused): said on stderr.
    pub warning: Option<String>,
    /// The command that pauses the tool by hand, where one would hold.
    pub pause_by_hand: Option<String>,
    /// Ending: the command that lifts the Application's pause by hand, when
    /// the object was ended but the lift failed (state `lift-failed`).
    pub lift_by_hand: Option<String>,
}

/// What `break-glass -o json|yaml` prints.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Report<'a> {
    pub object: ObjectRef<'a>,
    /// granted | refused | ended
    pub action: &'static str,
    pub user: &'a str,
    pub reason: Option<&'a str>,
    /// RFC 3339; null unless granted.
    pub expires: Option<String>,
    /// Why it was refused (the server's words, whole); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// After a denial by the server: what the policy's copy suggests (may be null).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<Option<String>>,
    /// When granted or ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause: Option<&'a PauseReport>,
}

#[derive(Debug, Serialize)]
pub(super) struct ObjectRef<'a> {
    pub kind: &'a str,
    pub name: &'a str,
    /// Null for a cluster-scoped object.
    pub namespace: Option<&'a str>,
}

/// Why an Argo CD Application was not paused, and where it was looked for.
#[derive(Clone, Debug)]
pub(super) struct Unpaused {
    pub why: String,
    /// kubectl's flags that reach the hub holding the Applications, if given.
    pub hub: Option<String>,
    /// No hub was given and this cluster does not serve Applications: they
    /// are in a hub that deploys here (a fleet's spoke).
    pub elsewhere: bool,
    /// Whether pausing it by hand is the remedy: not for an Application that
    /// deploys to another cluster, or may, whose pause stops that cluster's sync.
    pub by_hand: bool,
}

impl PauseReport {
    /// Nothing paused, nothing said yet.
    fn not_paused() -> Self {
        PauseReport {
            tool: None,
            control: None,
            target: None,
            state: "not-paused",
            paused_for: Vec::new(),
            application_set: None,
            text: String::new(),
            warning: None,
            pause_by_hand: None,
            lift_by_hand: None,
        }
    }
}

/// What arming paused, in words and as data.
pub(super) fn armed_report(
    plan: &Plan,
    app: Option<AppState>,
    set: &SetCheck,
    failed: Option<&Unpaused>,
    shown: &str,
    until: &str,
) -> PauseReport {
    let mut r = PauseReport::not_paused();
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
            let what = if *key == FLUX_RECONCILE {
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
            r.control = Some(SKIP_RECONCILE);
            r.target = Some(format!("Application {namespace}/{name}"));
            let armed = ArmedApplication {
                namespace,
                name,
                shown,
                until,
            };
            return match (failed, set) {
                (Some(failed), _) => armed.not_paused(r, failed),
                (None, SetCheck::Drops { .. } | SetCheck::Unreadable { .. }) => {
                    armed.undone_by_set(r, set)
                }
                (None, _) => armed.paused(r, app, set),
            };
        }
    }
    r
}

/// An object armed under Argo CD: its Application and the words the
/// reports about it share.
struct ArmedApplication<'a> {
    namespace: &'a str,
    name: &'a str,
    shown: &'a str,
    until: &'a str,
}

impl ArmedApplication<'_> {
    fn risk(&self) -> String {
        format!(
            "self-heal may revert the hotfix: with selfHeal, Argo CD may revert changes to {} at any time, though driftguard allows them until {}",
            self.shown, self.until
        )
    }

    /// The Application could not be paused: why, and, where pausing it by
    /// hand is the remedy, the command that does.
    fn not_paused(&self, mut r: PauseReport, failed: &Unpaused) -> PauseReport {
        let (namespace, name, shown, risk) = (self.namespace, self.name, self.shown, self.risk());
        let Unpaused {
            why,
            hub,
            elsewhere,
            by_hand,
        } = failed;
        if !by_hand {
            r.text = format!("Argo CD is NOT paused for {shown}: {why}; {risk}");
            r.warning = Some(format!(
                "Argo CD is NOT paused for {shown}: self-heal may revert the hotfix at any time; {why}"
            ));
            return r;
        }
        let app = format!("applications.argoproj.io -n {namespace} {name}");
        let skip = SKIP_RECONCILE;
        let (kubectl, there, flag) = match (hub, elsewhere) {
            (Some(flags), _) => (format!("kubectl {flags}"), " in the hub", ""),
            (None, true) => (
                "kubectl --context <hub>".to_owned(),
                " in the hub whose Argo CD deploys here (this cluster has no Applications)",
                "; or give --argocd-kubeconfig (or --argocd-context) with your credentials for the hub, and break-glass pauses it there and driftguard lifts it at expiry",
            ),
            (None, false) => ("kubectl".to_owned(), "", ""),
        };
        let cmd = format!("{kubectl} annotate {app} {skip}=true");
        r.text = format!(
            "Argo CD is NOT paused for {shown}: {why}; {risk}; pause it by hand{there} with `{cmd}` (driftguard does not lift that pause: resume it when done with `{kubectl} annotate {app} {skip}-`){flag}"
        );
        r.warning = Some(format!(
            "Argo CD is NOT paused for {shown}: self-heal may revert the hotfix at any time; pause Application {namespace}/{name} by hand{there}: `{cmd}`{flag}"
        ));
        r.pause_by_hand = Some(cmd);
        r
    }

    /// The Application's ApplicationSet would undo the pause, or could not
    /// be read to tell: no pause was written.
    fn undone_by_set(&self, mut r: PauseReport, set: &SetCheck) -> PauseReport {
        let (namespace, name, shown, risk) = (self.namespace, self.name, self.shown, self.risk());
        let keys = APPLICATION_PAUSE.join(", ");
        let fix = format!(
            "to let break-glass pause it, list {keys} in the ApplicationSet's spec.preservedFields.annotations (see docs/break-glass.md)"
        );
        let generated = |set: &str| {
            format!(
                "Argo CD is NOT paused: Application {namespace}/{name} is generated by ApplicationSet {namespace}/{set}"
            )
        };
        let (set, text) = match set {
            SetCheck::Drops { set, dropped } => (
                set,
                format!(
                    "{}, whose controller rewrites its annotations and would remove {} within seconds, so no pause was written; {risk}; {fix}",
                    generated(set),
                    dropped.join(" and ")
                ),
            ),
            SetCheck::Unreadable { set, why } => (
                set,
                format!(
                    "{}, which could not be read ({why}) to check that it keeps a pause, so no pause was written; {risk}; pausing needs get on applicationsets.argoproj.io, and {fix}",
                    generated(set)
                ),
            ),
            SetCheck::NotGenerated | SetCheck::Keeps { .. } => return r,
        };
        r.application_set = Some(set.clone());
        r.text = text;
        r.warning = Some(format!(
            "Argo CD is NOT paused for {shown}: self-heal may revert the hotfix at any time; ApplicationSet {namespace}/{set} is not known to keep a pause (see docs/break-glass.md)"
        ));
        r
    }

    /// The pause was written (`PausedFor`), or someone else's was there.
    fn paused(&self, mut r: PauseReport, app: Option<AppState>, set: &SetCheck) -> PauseReport {
        let (namespace, name, until) = (self.namespace, self.name, self.until);
        if let SetCheck::Keeps { set } = set {
            r.application_set = Some(set.clone());
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
                    let keys = APPLICATION_PAUSE.join(", ");
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
        r
    }
}

/// What ending resumed, in words and as data.
pub(super) fn ended_report(
    marker: Option<&str>,
    app: Option<(String, AppState)>,
    shown: &str,
) -> PauseReport {
    let mut r = PauseReport {
        control: marker
            .and_then(paused_annotation)
            .or(app.as_ref().map(|_| SKIP_RECONCILE)),
        ..PauseReport::not_paused()
    };
    if let Some(key) = marker.and_then(paused_annotation) {
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

/// The report when the object was ended but Application `application`'s
/// pause could not be lifted (`why`): it stays paused, with nothing on the
/// object recording it any more. The command to lift it by hand is made
/// from `app`, the Application as read again, where it could be; `hub`:
/// kubectl's flags that reach the hub holding it.
pub(super) fn lift_failed_report(
    marker: Option<&str>,
    application: &str,
    entry: &str,
    hub: Option<&str>,
    app: Option<&Value>,
    why: &PluginError,
    shown: &str,
) -> PauseReport {
    let (namespace, name) = application.split_once('/').unwrap_or_default();
    let kubectl = match hub {
        Some(flags) => format!("kubectl {flags}"),
        None => "kubectl".to_owned(),
    };
    let Some(cmd) =
        crate::breakglass::application::lift_by_hand(&kubectl, namespace, name, entry, app)
    else {
        // Lifted meanwhile (the sweeper, say): nothing left of ours.
        let lifted = Some((application.to_owned(), AppState::NotListed));
        return ended_report(marker, lifted, shown);
    };
    let mut r = ended_report(marker, None, shown);
    let there = if hub.is_some() { " in the hub" } else { "" };
    let others = if app.is_none() {
        format!(" (if {PAUSED_FOR} lists other objects too, remove only {entry} from it)")
    } else {
        String::new()
    };
    r.tool = Some("Argo CD");
    r.control = Some(SKIP_RECONCILE);
    r.target = Some(format!("Application {application}"));
    r.state = "lift-failed";
    r.text = format!(
        "Argo CD Application {application} is NOT resumed{there}: {why}; it stays paused for {shown}, so Git is not restored"
    );
    r.warning = Some(format!(
        "the break-glass on {shown} is ended, but Argo CD Application {application}{there} stays paused: lift it by hand with `{cmd}`{others}; driftguard's expiry sweeper, if it runs for this cluster, also lifts it as a pause left behind at a later sweep, once it may patch the Application"
    ));
    r.lift_by_hand = Some(cmd);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_report_keeps_its_json_field_names() {
        let keys = |r: &Report| {
            let v = serde_json::to_value(r).unwrap();
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort_unstable();
            (k, v)
        };
        let pause = ended_report(Some("kustomize.toolkit.fluxcd.io/reconcile"), None, "cm/x");
        let granted = Report {
            object: ObjectRef {
                kind: "ConfigMap",
                name: "x",
                namespace: Some("p"),
            },
            action: "granted",
            user: "sam",
            reason: Some("INC-1"),
            expires: Some("2030-01-01T00:00:00Z".into()),
            refusal: None,
            hint: None,
            pause: Some(&pause),
        };
        let (k, v) = keys(&granted);
        assert_eq!(
            k,
            ["action", "expires", "object", "pause", "reason", "user"]
        );
        assert_eq!(
            v["object"],
            json!({"kind": "ConfigMap", "name": "x", "namespace": "p"})
        );
        let mut pause_keys: Vec<&str> = v["pause"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        pause_keys.sort_unstable();
        assert_eq!(
            pause_keys,
            [
                "applicationSet",
                "control",
                "liftByHand",
                "pauseByHand",
                "pausedFor",
                "state",
                "target",
                "text",
                "tool",
                "warning"
            ]
        );
        assert_eq!(v["pause"]["state"], "resumed");
        let refused = Report {
            action: "refused",
            expires: None,
            refusal: Some("denied".into()),
            hint: Some(None),
            pause: None,
            ..granted
        };
        let (k, v) = keys(&refused);
        assert_eq!(
            k,
            [
                "action", "expires", "hint", "object", "reason", "refusal", "user"
            ]
        );
        assert!(v["hint"].is_null() && v["expires"].is_null());
    }

    #[test]
    fn an_application_that_cannot_be_paused_is_a_warning_with_the_command() {
        let argo = Plan::ArgoCd {
            namespace: "argocd".into(),
            name: "ghost".into(),
            entry: "/ConfigMap:p/x".into(),
        };
        let why = "cannot patch Argo CD Application argocd/ghost: forbidden";
        let refused = Unpaused {
            why: why.into(),
            hub: None,
            elsewhere: false,
            by_hand: true,
        };
        let r = armed_report(
            &argo,
            None,
            &SetCheck::NotGenerated,
            Some(&refused),
            "configmap/x",
            "T",
        );
        let cmd = "kubectl annotate applications.argoproj.io -n argocd ghost argocd.argoproj.io/skip-reconcile=true";
        assert_eq!((r.state, r.tool), ("not-paused", Some("Argo CD")));
        assert_eq!(r.pause_by_hand.as_deref(), Some(cmd));
        let warning = r.warning.clone().unwrap();
        assert!(
            warning.contains("self-heal may revert the hotfix") && warning.contains(cmd),
            "{warning}"
        );
        assert!(
            r.text.contains(why) && r.text.contains("skip-reconcile-`"),
            "{}",
            r.text
        );
        assert_eq!(serde_json::to_value(&r).unwrap()["pauseByHand"], cmd);
        assert_eq!(
            serde_json::to_value(&r).unwrap()["warning"],
            warning.as_str()
        );
        assert!(!r.text.contains("--argocd-kubeconfig"), "{}", r.text);
        // Not readable here and no hub given: the command for the hub, and the flag.
        let missing = Unpaused {
            why: "Argo CD Application argocd/ghost not found".into(),
            hub: None,
            elsewhere: true,
            by_hand: true,
        };
        let r = armed_report(
            &argo,
            None,
            &SetCheck::NotGenerated,
            Some(&missing),
            "x",
            "T",
        );
        let cmd = "kubectl --context <hub> annotate applications.argoproj.io -n argocd ghost argocd.argoproj.io/skip-reconcile=true";
        assert_eq!(r.pause_by_hand.as_deref(), Some(cmd));
        let warning = r.warning.clone().unwrap();
        for text in [&warning, &r.text] {
            assert!(
                text.contains("self-heal may revert the hotfix")
                    && text.contains(cmd)
                    && text.contains("--argocd-kubeconfig"),
                "{text}"
            );
        }
        // A hub given that refuses: the command with the same flags.
        let hub = Unpaused {
            why: why.into(),
            hub: Some("--kubeconfig /hub.yaml --context ops".into()),
            elsewhere: false,
            by_hand: true,
        };
        let r = armed_report(&argo, None, &SetCheck::NotGenerated, Some(&hub), "x", "T");
        let cmd = "kubectl --kubeconfig /hub.yaml --context ops annotate applications.argoproj.io -n argocd ghost argocd.argoproj.io/skip-reconcile=true";
        assert_eq!(r.pause_by_hand.as_deref(), Some(cmd));
        assert!(r.text.contains("in the hub"), "{}", r.text);
        // A pause that holds warns of nothing.
        let held = Some(AppState::PausedFor(vec!["/ConfigMap:p/x".into()]));
        let r = armed_report(&argo, held, &SetCheck::NotGenerated, None, "x", "T");
        assert_eq!(
            (r.state, r.warning, r.pause_by_hand),
            ("paused", None, None)
        );
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
            None,
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
        let r = armed_report(
            &helm,
            None,
            &SetCheck::NotGenerated,
            None,
            "deployment/web",
            "T",
        );
        assert!(r.text.contains("will not correct drift of"), "{}", r.text);
        let theirs = Plan::AlreadyOptedOut {
            key: FLUX_RECONCILE,
            manager: kustomization,
        };
        assert_eq!(
            armed_report(&theirs, None, &SetCheck::NotGenerated, None, "x", "T").state,
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
            None,
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
            None,
            "x",
            "T",
        );
        assert_eq!(r.state, "already-paused");
        assert_eq!(
            armed_report(
                &Plan::Unmanaged,
                None,
                &SetCheck::NotGenerated,
                None,
                "x",
                "T"
            )
            .state,
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
        let r = armed_report(&argo, held, &keeps, None, "deployment/web", "T");
        assert_eq!(r.state, "paused");
        assert!(
            r.text
                .contains("its ApplicationSet argocd/web keeps the pause"),
            "{}",
            r.text
        );
        assert_eq!(serde_json::to_value(&r).unwrap()["applicationSet"], "web");

        let drops = SetCheck::Drops {
            set: "web".into(),
            dropped: vec![crate::breakglass::application::SKIP_RECONCILE],
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
            let r = armed_report(&argo, None, set, None, "deployment/web", "T");
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
            Some(crate::breakglass::application::SKIP_RECONCILE),
            Some(("argocd/myapp".into(), AppState::Resumed)),
            "deployment/web",
        );
        assert!(r.text.contains("argocd/myapp resumes"), "{}", r.text);
        let r = ended_report(
            Some(crate::breakglass::application::SKIP_RECONCILE),
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
}
