//! `kubectl driftguard break-glass KIND/NAME --reason TEXT --for DURATION`
//! and `--end`: the exact write is first sent as a server-side dry run, so
//! driftguard's own answer, under the policy in force, decides; only then is
//! the GitOps tool paused for this object with the tool's own control and
//! break-glass armed, or both ended (see [`crate::breakglass::pause`]). The copy of the
//! policy in the chart's ConfigMap never decides: it only explains a refusal.
//!
//! For Flux the pause is in the same write as the two annotations; for Argo
//! CD the Application is paused first (and resumed first when ending), so the
//! hotfix is never exposed to a self-heal while driftguard already allows it.
//! An Application that cannot be paused does not stop the break-glass: it is
//! armed with a warning that names the command that pauses it by hand,
//! unless `--require-pause` asks for a refusal instead.

use std::process::ExitCode;

use jiff::{SignedDuration, Timestamp};
use kube::Resource as _;
use kube::api::{Patch, PatchParams};
use kube::core::DynamicObject;
use serde::Serialize;
use serde_json::Value;

use super::api::{Api, ArgoCdArgs, Identity, Refusal, Reply, Resource};
use super::installation;
use super::pause::{
    CONFLICT_RETRIES, SetCheck, application_error, application_set_check, read_application,
    update_application,
};
use super::{LoadedPolicy, Output, PluginError, PolicySource, print_structured, split_target};
use crate::breakglass::application::{AppChange, AppState};
use crate::breakglass::ending::{self, Ending, Lift};
use crate::breakglass::pause::Plan;
use crate::policy::argocd::{IN_CLUSTER_NAME, IN_CLUSTER_SERVER, ThisCluster};
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
    /// cluster, as driftguard serve's --cluster-name (repeatable, or
    /// comma-separated): an Argo CD destination `server` URL (with `://`) or
    /// `name`. A hub's Application is paused, and its pause lifted, only when
    /// its spec.destination is one of these.
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

/// What was paused or resumed, for the report (`pause` in JSON).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct PauseReport {
    tool: Option<&'static str>,
    /// The annotation that pauses, and where it is.
    control: Option<&'static str>,
    target: Option<String>,
    /// paused | already-paused | resumed | still-paused | not-paused | lift-failed
    state: &'static str,
    paused_for: Vec<String>,
    /// The ApplicationSet that generated the paused Application, if one did.
    application_set: Option<String>,
    text: String,
    /// Why the tool may undo the hotfix (it could not be paused): said on stderr.
    warning: Option<String>,
    /// The command that pauses the tool by hand, where one would hold.
    pause_by_hand: Option<String>,
    /// Ending: the command that lifts the Application's pause by hand, when
    /// the object was ended but the lift failed (state `lift-failed`).
    lift_by_hand: Option<String>,
}

/// What `break-glass -o json|yaml` prints.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report<'a> {
    object: ObjectRef<'a>,
    /// granted | refused | ended
    action: &'static str,
    user: &'a str,
    reason: Option<&'a str>,
    /// RFC 3339; null unless granted.
    expires: Option<String>,
    /// Why it was refused (the server's words, whole); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<String>,
    /// After a denial by the server: what the policy's copy suggests (may be null).
    #[serde(skip_serializing_if = "Option::is_none")]
    hint: Option<Option<String>>,
    /// When granted or ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pause: Option<&'a PauseReport>,
}

#[derive(Debug, Serialize)]
struct ObjectRef<'a> {
    kind: &'a str,
    name: &'a str,
    /// Null for a cluster-scoped object.
    namespace: Option<&'a str>,
}

/// A write's result: the apiserver's reply, or driftguard's denial.
enum Written {
    Done(Reply, PauseReport),
    /// Refused by the server (its dry run or the write itself).
    Denied(Refusal),
    /// `--require-pause` and the tool cannot be paused: why.
    Unpausable(String),
}

pub async fn run(api: &Api, source: &PolicySource, args: Args) -> Result<ExitCode, PluginError> {
    let (kind, name) = split_target(&args.target)?;
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
    // The ConfigMap's copy only detects the GitOps tool (as the server does)
    // and explains a refusal; the server's dry run decides.
    let loaded = source.load(api).await?;
    let me = api.whoami().await?;
    let shown = format!("{}/{name}", resource.kind.to_ascii_lowercase());
    let where_ = if resource.namespaced {
        format!(" in namespace {}", api.namespace)
    } else {
        String::new()
    };
    let result = |action: &'static str, expires: Option<String>, refused: Option<&str>| Report {
        object: ObjectRef {
            kind: &resource.kind,
            name,
            namespace: resource.namespaced.then_some(api.namespace.as_str()),
        },
        action,
        user: &me.username,
        reason,
        expires,
        refusal: refused.map(str::to_owned),
        hint: None,
        pause: None,
    };
    // In a spoke, the Applications are in the hub: paused and resumed there
    // with the user's own credentials for it; with this cluster's own Argo
    // CD too, in the one whose installation id the object carries.
    let hub = args.argocd.connect(api).await?;
    let (argocd, argocd_namespace) = (&args.argocd, args.argocd_namespace.as_str());
    let object = (&resource, name, &loaded.policy);
    let chosen =
        installation::choose_for(api, hub.as_ref(), argocd, argocd_namespace, object).await?;
    if let Some(why) = &chosen.unsure {
        eprintln!("warning: {}", printable(why));
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
    let (reply, pause) = match written {
        Written::Done(reply, pause) => (reply, pause),
        Written::Denied(refusal) => {
            for w in &refusal.warnings {
                eprintln!("Warning: {}", printable(w));
            }
            // The server's own words, whole: they are the answer.
            eprintln!("denied: {}", printable(&refusal.message));
            eprintln!("nothing was written");
            let hint = hint(&loaded, &me, duration);
            if let Some(hint) = &hint {
                eprintln!("hint: {}", printable(hint));
            }
            if args.output != Output::Text {
                let mut r = result("refused", None, Some(&refusal.message));
                r.hint = Some(hint);
                print_structured(&r, args.output)?;
            }
            return Ok(ExitCode::from(1));
        }
        Written::Unpausable(why) => {
            eprintln!("refused: --require-pause: {}", printable(&why));
            eprintln!("nothing was written");
            if args.output != Output::Text {
                let why = format!("--require-pause: {why}");
                print_structured(&result("refused", None, Some(&why)), args.output)?;
            }
            return Ok(ExitCode::from(1));
        }
    };
    for w in &reply.warnings {
        eprintln!("Warning: {}", printable(w));
    }
    if let Some(warning) = &pause.warning {
        eprintln!("warning: {}", printable(warning));
    }
    if args.output != Output::Text {
        let mut r = match expires {
            Some((at, _)) => result("granted", Some(at.to_string()), None),
            None => result("ended", None, None),
        };
        r.pause = Some(&pause);
        print_structured(&r, args.output)?;
        return Ok(exit_code(&pause));
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
    Ok(exit_code(&pause))
}

/// 0, or 2 (an access error) when the object was ended but its
/// Application's pause could not be lifted: left for the user to finish.
fn exit_code(pause: &PauseReport) -> ExitCode {
    if pause.state == "lift-failed" {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

/// The object under break-glass and what is needed to pause its tool.
struct Target<'a> {
    api: &'a Api,
    /// Where the Argo CD Applications are: `api`, or a hub's.
    apps: &'a Api,
    /// kubectl's flags that reach the hub, when the Applications are there.
    hub: Option<String>,
    resource: &'a Resource,
    name: &'a str,
    shown: &'a str,
    policy: &'a crate::policy::Policy,
    argocd_namespace: &'a str,
    /// `--cluster-name`: what a hub calls this cluster.
    cluster_names: &'a [String],
    require_pause: bool,
    /// Why no Argo CD Application may be paused for the object (neither
    /// Argo CD is known to track it), if so.
    no_pause: Option<String>,
}

/// Whether the Argo CD Application of an object can be paused, read before
/// anything is written.
enum Pausable {
    /// Not Argo CD: the pause, if any, is in the arming write itself.
    NotArgoCd,
    /// The Application was read; whether an ApplicationSet keeps the pause.
    Application(SetCheck),
    /// The Application could not be read.
    Unreadable(Unpaused),
}

/// Why an Argo CD Application was not paused, and where it was looked for.
#[derive(Clone, Debug)]
struct Unpaused {
    why: String,
    /// kubectl's flags that reach the hub holding the Applications, if given.
    hub: Option<String>,
    /// No hub was given and this cluster does not serve Applications: they
    /// are in a hub that deploys here (a fleet's spoke).
    elsewhere: bool,
    /// Whether pausing it by hand is the remedy: not for an Application that
    /// deploys to another cluster, or may, whose pause stops that cluster's sync.
    by_hand: bool,
}

impl<'a> Target<'a> {
    /// The same object, its Application read and paused where `chosen` says.
    fn at(self, chosen: installation::Chosen<'a>) -> Self {
        Target {
            apps: chosen.api,
            hub: chosen.hub,
            argocd_namespace: chosen.namespace,
            no_pause: chosen.unsure.filter(|_| chosen.no_pause),
            ..self
        }
    }

    async fn get(&self) -> Result<Value, PluginError> {
        match self.api.get_target(self.resource, self.name).await? {
            Ok(o) => Ok(o),
            Err(r) => Err(PluginError::from_refusal(r)),
        }
    }

    fn plan(&self, object: &Value) -> Plan {
        crate::breakglass::pause::plan(
            object,
            &self.resource.group,
            self.policy,
            self.argocd_namespace,
        )
    }

    /// A merge patch of the object (with `dry_run`, a server-side dry run:
    /// every admission webhook answers, nothing is stored); `None` on a
    /// conflict (read again).
    async fn patch(
        &self,
        body: &Value,
        dry_run: bool,
    ) -> Result<Option<Result<Reply, Refusal>>, PluginError> {
        // Sent raw: the reply's `Warning:` headers and a webhook's refusal
        // are shown to the user as the apiserver sent them.
        let ns = self
            .resource
            .namespaced
            .then_some(self.api.namespace.as_str());
        let url = DynamicObject::url_path(&self.resource.api_resource(), ns);
        let params = PatchParams {
            dry_run,
            ..Default::default()
        };
        let request = kube::core::Request::new(url)
            .patch(self.name, &params, &Patch::Merge(body))
            .map_err(|e| PluginError::Usage(format!("patch {}: {e}", self.shown)))?;
        let reply = self.api.send(request).await?;
        Ok(match reply {
            Err(r) if r.code == 409 => None,
            other => Some(other),
        })
    }

    /// The server's answer to `body` as a dry run: `Ok(None)` allowed,
    /// `Ok(Some(_))` refused by a webhook, `Err(())` a conflict (read again).
    async fn ask(&self, body: &Value) -> Result<Result<Option<Refusal>, ()>, PluginError> {
        match self.patch(body, true).await? {
            None => Ok(Err(())),
            Some(Ok(_)) => Ok(Ok(None)),
            Some(Err(refusal)) if refusal.by_webhook() => Ok(Ok(Some(refusal))),
            Some(Err(refusal)) => Err(PluginError::from_refusal(refusal)),
        }
    }

    async fn pausable(&self, plan: &Plan) -> Result<Pausable, PluginError> {
        let Plan::ArgoCd {
            namespace, name, ..
        } = plan
        else {
            return Ok(Pausable::NotArgoCd);
        };
        if let Some(why) = &self.no_pause {
            return Ok(Pausable::Unreadable(self.unpaused(why.clone(), false)));
        }
        let app = match read_application(self.apps, namespace, name).await {
            Ok(app) => app,
            Err(PluginError::Access(why)) => {
                let elsewhere = self.hub.is_none() && !self.serves_applications().await;
                return Ok(Pausable::Unreadable(self.unpaused(why, elsewhere)));
            }
            Err(e) => return Err(e),
        };
        if let Some(why) = self.why_not_here(&app) {
            let unpaused = Unpaused {
                by_hand: false,
                ..self.unpaused(why, false)
            };
            return Ok(Pausable::Unreadable(unpaused));
        }
        let set = application_set_check(self.apps, namespace, name, &app).await?;
        Ok(Pausable::Application(set))
    }

    fn unpaused(&self, why: String, elsewhere: bool) -> Unpaused {
        Unpaused {
            why,
            hub: self.hub.clone(),
            elsewhere,
            by_hand: true,
        }
    }

    /// What the cluster holding the Applications calls this one: a hub, what
    /// --cluster-name says (`None`: not given, so unknown); this cluster's
    /// own Argo CD, in-cluster.
    fn here(&self) -> Option<ThisCluster> {
        match &self.hub {
            Some(_) if self.cluster_names.is_empty() => None,
            Some(_) => Some(ThisCluster::named(self.cluster_names)),
            None => Some(ThisCluster::default()),
        }
    }

    /// Why Application `app` must not be paused for the object: it deploys
    /// to another cluster, whose objects its pause list holds and whose sync
    /// the pause stops, judged as the sweeper judges what it may lift
    /// ([`ThisCluster::deploys_elsewhere`]); or, in a hub without
    /// --cluster-name, that cannot be told.
    fn why_not_here(&self, app: &Value) -> Option<String> {
        let meta = &app["metadata"];
        let shown = format!(
            "Application {}/{}{}",
            meta["namespace"].as_str().unwrap_or_default(),
            meta["name"].as_str().unwrap_or_default(),
            if self.hub.is_some() {
                " in the hub"
            } else {
                ""
            }
        );
        let Some(here) = self.here() else {
            return Some(format!(
                "cannot tell whether {shown} deploys to this cluster: give --cluster-name with what the hub calls it (its Applications' spec.destination server or name, as driftguard serve's --cluster-name), and break-glass pauses it if it does"
            ));
        };
        if !here.deploys_elsewhere(app) {
            return None;
        }
        let this = if self.hub.is_some() {
            format!("--cluster-name {}", self.cluster_names.join(","))
        } else {
            format!("{IN_CLUSTER_SERVER} or {IN_CLUSTER_NAME}")
        };
        Some(format!(
            "{shown} deploys to another cluster (spec.destination {}), not this one ({this}), so its pause would stop that cluster's sync",
            app["spec"]["destination"]
        ))
    }

    /// Whether this cluster serves Argo CD's Application type (discovery,
    /// already read to resolve the object's kind). A spoke usually does not:
    /// its Applications are in the hub. Unknown (discovery failed) counts as served.
    async fn serves_applications(&self) -> bool {
        !matches!(
            self.api.resolve("applications.argoproj.io").await,
            Err(PluginError::Usage(_))
        )
    }

    /// Asks the server with a dry run of the arming write; when it allows
    /// it, pauses the tool (Argo CD: the Application first, best effort),
    /// then arms break-glass; a pause this run added is undone when the
    /// arming write is refused. An Application that cannot be paused, or
    /// whose ApplicationSet would remove the pause, is not paused, and the
    /// report warns (with `--require-pause`: nothing is written).
    async fn arm(&self, reason: &str, at: Timestamp) -> Result<Written, PluginError> {
        let expires = at.to_string();
        // Whether this run added the object to its Application's pause, across retries.
        let mut added = false;
        for _ in 0..CONFLICT_RETRIES {
            let object = self.get().await?;
            let rv = object["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default();
            if let Some(why) =
                crate::breakglass::pause::runtime_child(&object, &self.resource.group)
            {
                return Err(PluginError::Usage(format!(
                    "{}: {why}; break-glass the GitOps-managed object it comes from instead",
                    self.shown
                )));
            }
            let plan = self.plan(&object);
            let pausable = self.pausable(&plan).await?;
            let pauses = match &pausable {
                Pausable::NotArgoCd => true,
                Pausable::Application(set) => set.holds(),
                Pausable::Unreadable(_) => false,
            };
            let mut body = if pauses {
                crate::breakglass::pause::arm_patch(&plan, reason, &expires, rv)
            } else {
                crate::breakglass::pause::arm_patch_unpaused(reason, &expires, rv)
            };
            // The server decides, before anything is written.
            match self.ask(&body).await? {
                Err(()) => continue,
                Ok(Some(refusal)) => {
                    if added {
                        self.undo_pause(&plan).await;
                    }
                    return Ok(Written::Denied(refusal));
                }
                Ok(None) => {}
            }
            let mut app = None;
            let mut failed = match &pausable {
                Pausable::Unreadable(unpaused) => Some(unpaused.clone()),
                _ => None,
            };
            if let (
                true,
                Plan::ArgoCd {
                    namespace,
                    name,
                    entry,
                },
            ) = (pauses, &plan)
            {
                let change = AppChange::Pause(entry);
                match update_application(self.apps, namespace, name, change).await {
                    Ok(outcome) => {
                        added |=
                            !outcome.was_listed && matches!(outcome.state, AppState::PausedFor(_));
                        app = Some(outcome.state);
                    }
                    Err(PluginError::Access(why)) => {
                        failed = Some(self.unpaused(why, false));
                        // No pause: the write carries no marker of one.
                        body = crate::breakglass::pause::arm_patch_unpaused(reason, &expires, rv);
                    }
                    Err(e) => return Err(e),
                }
            }
            let set = match &pausable {
                Pausable::Application(set) => set.clone(),
                _ => SetCheck::NotGenerated,
            };
            let report = armed_report(&plan, app, &set, failed.as_ref(), self.shown, &expires);
            if self.require_pause && report.state == "not-paused" && report.tool.is_some() {
                if added {
                    self.undo_pause(&plan).await;
                }
                return Ok(Written::Unpausable(report.text));
            }
            let Some(reply) = self.patch(&body, false).await? else {
                continue;
            };
            return match reply {
                Ok(reply) => Ok(Written::Done(reply, report)),
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
            update_application(self.apps, namespace, name, AppChange::Resume(entry)).await
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

    /// Asks the server with a dry run of the ending write; when it allows
    /// it, ends the break-glass as the sweeper does
    /// ([`ending::end_break_glass`]: everything arming added removed from
    /// the object, then the Argo CD Application resumed).
    async fn end(&self) -> Result<Written, PluginError> {
        let ar = self.resource.api_resource();
        for _ in 0..CONFLICT_RETRIES {
            let object = self.get().await?;
            let meta = &object["metadata"];
            let rv = meta["resourceVersion"].as_str().unwrap_or_default();
            let annotations = &meta["annotations"];
            let marker = annotations[crate::drift::breakglass_state::PAUSED].as_str();
            // The marker is the record of the Application to resume: never
            // dropped while that Application is known to be out of reach
            // (in a hub), since ending goes first and the lift after.
            if marker == Some(crate::breakglass::application::SKIP_RECONCILE)
                && self.hub.is_none()
                && !self.serves_applications().await
            {
                return Err(PluginError::Usage(format!(
                    "{} paused its Argo CD Application, and this cluster has no Applications: they are in a hub; give --argocd-kubeconfig (or --argocd-context) with your credentials for it, so that --end lifts the pause there (nothing was written)",
                    self.shown
                )));
            }
            // Only an Application that deploys here holds a pause of ours.
            let here = self.here();
            if marker == Some(crate::breakglass::application::SKIP_RECONCILE) && here.is_none() {
                return Err(PluginError::Usage(format!(
                    "{} paused its Argo CD Application; give --cluster-name with what the hub calls this cluster, so that --end lifts the pause only from an Application that deploys here (nothing was written)",
                    self.shown
                )));
            }
            let body = crate::breakglass::pause::end_patch(annotations, rv);
            match self.ask(&body).await? {
                Err(()) => continue,
                Ok(Some(refusal)) => return Ok(Written::Denied(refusal)),
                Ok(None) => {}
            }
            let at = ending::Installation {
                client: self.apps.client(),
                namespace: self.argocd_namespace,
                hub: self.hub.is_some(),
                deploys_here: here.as_ref(),
            };
            let ending =
                ending::end_break_glass(self.api.client(), &[at], &ar, &object, self.policy).await;
            return Ok(match ending {
                Ending::Ended {
                    application,
                    warnings,
                } => {
                    let reply = Reply { warnings };
                    let report = match application {
                        Lift::Failed {
                            application,
                            entry,
                            error,
                            ..
                        } => self.lift_failed(marker, &application, &entry, error).await,
                        lift => ended_report(marker, self.lifted(lift), self.shown),
                    };
                    Written::Done(reply, report)
                }
                Ending::Changed => continue,
                Ending::Refused {
                    code,
                    message,
                    warnings,
                } => Written::Denied(Refusal {
                    code,
                    message,
                    warnings,
                    details: None,
                }),
                Ending::Failed {
                    code: Some(code),
                    message,
                } => {
                    let warnings = Vec::new();
                    let refusal = Refusal {
                        code,
                        message,
                        warnings,
                        details: None,
                    };
                    return Err(PluginError::from_refusal(refusal));
                }
                Ending::Failed {
                    code: None,
                    message,
                } => return Err(PluginError::Access(message)),
            });
        }
        Err(self.kept_changing())
    }

    /// The Application's side of an ended break-glass, for the report; what
    /// needs a look by hand is said on stderr.
    fn lifted(&self, lift: Lift) -> Option<(String, AppState)> {
        match lift {
            Lift::NotPaused => None,
            Lift::Unnamed => {
                eprintln!(
                    "warning: {} says it paused an Argo CD Application, but no longer names one: check {} on its Application",
                    self.shown,
                    crate::breakglass::application::SKIP_RECONCILE
                );
                None
            }
            Lift::Gone(app) => {
                eprintln!(
                    "warning: Argo CD Application {} not found: nothing to resume (if Applications live in another namespace, give --argocd-namespace)",
                    printable(&app)
                );
                Some((app, AppState::NotListed))
            }
            Lift::Lifted(app, state) => Some((app, state)),
            // Reported by `lift_failed` instead.
            Lift::Failed { .. } => None,
        }
    }

    /// The report when the object was ended but Application `application`'s
    /// pause could not be lifted: it stays paused, with nothing on the
    /// object recording it any more. The command to lift it by hand comes
    /// from a fresh read of the Application where one is possible.
    async fn lift_failed(
        &self,
        marker: Option<&str>,
        application: &str,
        entry: &str,
        error: ending::ApplicationError,
    ) -> PauseReport {
        let (namespace, name) = application.split_once('/').unwrap_or_default();
        let read = self
            .apps
            .get_object(
                &crate::breakglass::application::application_resource(),
                Some(namespace),
                name,
            )
            .await;
        let app = match read {
            Ok(Ok(app)) => Some(app),
            _ => None,
        };
        let kubectl = match &self.hub {
            Some(flags) => format!("kubectl {flags}"),
            None => "kubectl".to_owned(),
        };
        let Some(cmd) = crate::breakglass::application::lift_by_hand(
            &kubectl,
            namespace,
            name,
            entry,
            app.as_ref(),
        ) else {
            // Lifted meanwhile (the sweeper, say): nothing left of ours.
            let lifted = Some((application.to_owned(), AppState::NotListed));
            return ended_report(marker, lifted, self.shown);
        };
        let mut r = ended_report(marker, None, self.shown);
        let there = if self.hub.is_some() {
            " in the hub"
        } else {
            ""
        };
        let others = if app.is_none() {
            format!(
                " (if {} lists other objects too, remove only {entry} from it)",
                crate::breakglass::application::PAUSED_FOR
            )
        } else {
            String::new()
        };
        let why = application_error(namespace, name, error);
        r.tool = Some("Argo CD");
        r.control = Some(crate::breakglass::application::SKIP_RECONCILE);
        r.target = Some(format!("Application {application}"));
        r.state = "lift-failed";
        r.text = format!(
            "Argo CD Application {application} is NOT resumed{there}: {why}; it stays paused for {}, so Git is not restored",
            self.shown
        );
        r.warning = Some(format!(
            "the break-glass on {} is ended, but Argo CD Application {application}{there} stays paused: lift it by hand with `{cmd}`{others}; driftguard's expiry sweeper, if it runs for this cluster, also lifts it as a pause left behind at a later sweep, once it may patch the Application",
            self.shown
        ));
        r.lift_by_hand = Some(cmd);
        r
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
    failed: Option<&Unpaused>,
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
        warning: None,
        pause_by_hand: None,
        lift_by_hand: None,
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
            r.control = Some(crate::breakglass::application::SKIP_RECONCILE);
            r.target = Some(format!("Application {namespace}/{name}"));
            let keys = crate::breakglass::application::APPLICATION_PAUSE.join(", ");
            let fix = format!(
                "to let break-glass pause it, list {keys} in the ApplicationSet's spec.preservedFields.annotations (see docs/break-glass.md)"
            );
            let risk = format!(
                "self-heal may revert the hotfix: with selfHeal, Argo CD may revert changes to {shown} at any time, though driftguard allows them until {until}"
            );
            if let Some(Unpaused {
                why,
                by_hand: false,
                ..
            }) = failed
            {
                r.text = format!("Argo CD is NOT paused for {shown}: {why}; {risk}");
                r.warning = Some(format!(
                    "Argo CD is NOT paused for {shown}: self-heal may revert the hotfix at any time; {why}"
                ));
                return r;
            }
            if let Some(Unpaused {
                why,
                hub,
                elsewhere,
                ..
            }) = failed
            {
                let app = format!("applications.argoproj.io -n {namespace} {name}");
                let skip = crate::breakglass::application::SKIP_RECONCILE;
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
                return r;
            }
            let unheld = |set: &str| {
                Some(format!(
                    "Argo CD is NOT paused for {shown}: self-heal may revert the hotfix at any time; ApplicationSet {namespace}/{set} is not known to keep a pause (see docs/break-glass.md)"
                ))
            };
            match set {
                SetCheck::NotGenerated => {}
                SetCheck::Keeps { set } => r.application_set = Some(set.clone()),
                SetCheck::Drops { set, dropped } => {
                    r.application_set = Some(set.clone());
                    r.text = format!(
                        "Argo CD is NOT paused: Application {namespace}/{name} is generated by ApplicationSet {namespace}/{set}, whose controller rewrites its annotations and would remove {} within seconds, so no pause was written; {risk}; {fix}",
                        dropped.join(" and ")
                    );
                    r.warning = unheld(set);
                    return r;
                }
                SetCheck::Unreadable { set, why } => {
                    r.application_set = Some(set.clone());
                    r.text = format!(
                        "Argo CD is NOT paused: Application {namespace}/{name} is generated by ApplicationSet {namespace}/{set}, which could not be read ({why}) to check that it keeps a pause, so no pause was written; {risk}; pausing needs get on applicationsets.argoproj.io, and {fix}"
                    );
                    r.warning = unheld(set);
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
            .and_then(crate::drift::breakglass_state::paused_annotation)
            .or(app
                .as_ref()
                .map(|_| crate::breakglass::application::SKIP_RECONCILE)),
        target: None,
        state: "not-paused",
        paused_for: Vec::new(),
        application_set: None,
        text: String::new(),
        warning: None,
        pause_by_hand: None,
        lift_by_hand: None,
    };
    if let Some(key) = marker.and_then(crate::drift::breakglass_state::paused_annotation) {
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
mod fake;

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

    /// What the hub calls this cluster in the fake-cluster tests.
    const SPOKE: &str = "https://spoke-1.example:6443";

    /// Arms ConfigMap p/x on a [`fake`] cluster: the result, the requests
    /// made in order, and their bodies.
    async fn arm_on(
        cluster: fake::Cluster,
        require_pause: bool,
    ) -> (Written, Vec<String>, Vec<Value>) {
        run_on(cluster, require_pause, true).await
    }

    /// Ends the break-glass on ConfigMap p/x on a [`fake`] cluster, as
    /// [`arm_on`] arms it.
    async fn end_on(cluster: fake::Cluster) -> (Written, Vec<String>, Vec<Value>) {
        run_on(cluster, false, false).await
    }

    /// The type of every object the fake-cluster tests arm.
    fn config_maps() -> Resource {
        Resource {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
            namespaced: true,
        }
    }

    async fn run_on(
        cluster: fake::Cluster,
        require_pause: bool,
        arm: bool,
    ) -> (Written, Vec<String>, Vec<Value>) {
        let log = fake::Log::default();
        let api = fake::api(cluster, log.clone());
        let resource = config_maps();
        let policy = crate::policy::Policy::embedded();
        let target = Target {
            api: &api,
            apps: &api,
            hub: None,
            resource: &resource,
            name: "x",
            shown: "configmap/x",
            policy: &policy,
            argocd_namespace: "argocd",
            cluster_names: &[],
            require_pause,
            no_pause: None,
        };
        let written = if arm {
            let at = Timestamp::now() + SignedDuration::from_mins(30);
            target.arm("INC-1", at).await.unwrap()
        } else {
            target.end().await.unwrap()
        };
        // Discovery (whether Applications are served here) is not the object's story.
        let log = log.lock().unwrap().clone().into_iter();
        let log = log.filter(|(r, _)| r != "GET /api" && r != "GET /apis");
        let (requests, bodies) = log.unzip();
        (written, requests, bodies)
    }

    fn dry_run() -> String {
        format!("PATCH {}?dryRun=All", fake::OBJECT)
    }

    #[tokio::test]
    async fn a_refusal_by_the_server_writes_nothing_and_pauses_nothing() {
        let cluster = fake::Cluster {
            deny: true,
            application: true,
            armed: false,
            ..Default::default()
        };
        let (written, requests, _) = arm_on(cluster, false).await;
        let Written::Denied(refusal) = written else {
            panic!("not denied: {requests:?}");
        };
        assert!(
            refusal.message.starts_with(
                "admission webhook \"validate.driftguard.io\" denied the request: driftguard: bob"
            ),
            "{}",
            refusal.message
        );
        assert_eq!(
            requests,
            [
                format!("GET {}", fake::OBJECT),
                format!("GET {}", fake::APP),
                dry_run()
            ]
        );
    }

    #[tokio::test]
    async fn the_dry_run_comes_first_then_the_pause_then_the_same_write() {
        let cluster = fake::Cluster {
            deny: false,
            application: true,
            armed: false,
            ..Default::default()
        };
        let (written, requests, bodies) = arm_on(cluster, false).await;
        let Written::Done(_, report) = written else {
            panic!("not armed: {requests:?}");
        };
        assert_eq!(report.state, "paused");
        assert_eq!(
            requests,
            [
                format!("GET {}", fake::OBJECT),
                format!("GET {}", fake::APP),
                dry_run(),
                format!("GET {}", fake::APP),
                format!("PATCH {}", fake::APP),
                format!("PATCH {}", fake::OBJECT),
            ]
        );
        // The write asked about is the write made.
        assert_eq!(bodies[2], bodies[5]);
        assert_eq!(
            bodies[5]["metadata"]["annotations"][crate::drift::breakglass_state::PAUSED],
            crate::breakglass::application::SKIP_RECONCILE
        );
    }

    #[tokio::test]
    async fn ending_asks_first_then_sends_the_same_write_then_resumes_the_application() {
        let cluster = fake::Cluster {
            deny: false,
            application: true,
            armed: true,
            ..Default::default()
        };
        let (written, requests, bodies) = end_on(cluster).await;
        let Written::Done(_, report) = written else {
            panic!("not ended: {requests:?}");
        };
        assert_eq!(report.state, "resumed");
        assert_eq!(report.target.as_deref(), Some("Application argocd/myapp"));
        let requests: Vec<&str> = requests.iter().map(|r| r.trim_end_matches('?')).collect();
        assert_eq!(
            requests,
            [
                format!("GET {}", fake::OBJECT),
                dry_run(),
                format!("PATCH {}", fake::OBJECT),
                format!("GET {}", fake::APP),
                format!("PATCH {}", fake::APP),
            ]
        );
        // The write asked about is the write made.
        assert_eq!(bodies[1], bodies[2]);
        assert_eq!(report.lift_by_hand, None);
    }

    /// The object is ended first; a lift refused after leaves the
    /// Application paused: said, with the command that lifts it by hand,
    /// and an exit status of 2.
    #[tokio::test]
    async fn a_lift_refused_after_the_ending_says_how_to_lift_it_by_hand() {
        let cluster = fake::Cluster {
            application: true,
            armed: true,
            app_read_only: true,
            ..Default::default()
        };
        let (written, requests, _) = end_on(cluster).await;
        let Written::Done(_, report) = written else {
            panic!("not ended: {requests:?}");
        };
        assert_eq!(
            requests,
            [
                format!("GET {}", fake::OBJECT),
                dry_run(),
                format!("PATCH {}", fake::OBJECT),
                format!("GET {}", fake::APP),
                format!("PATCH {}", fake::APP),
                // Read again for the command by hand.
                format!("GET {}", fake::APP),
            ]
        );
        assert_eq!(report.state, "lift-failed");
        let cmd = "kubectl annotate applications.argoproj.io -n argocd myapp argocd.argoproj.io/skip-reconcile- driftguard.io/break-glass-paused-for-";
        assert_eq!(report.lift_by_hand.as_deref(), Some(cmd));
        assert!(report.text.contains("cannot patch"), "{}", report.text);
        let warning = report.warning.as_deref().unwrap_or_default();
        for said in [
            "the break-glass on configmap/x is ended",
            cmd,
            "expiry sweeper, if it runs for this cluster, also lifts it",
        ] {
            assert!(warning.contains(said), "{said:?} not in {warning}");
        }
        assert_eq!(exit_code(&report), ExitCode::from(2));
    }

    #[tokio::test]
    async fn an_ending_the_server_refuses_resumes_nothing() {
        let cluster = fake::Cluster {
            deny: true,
            application: true,
            armed: true,
            ..Default::default()
        };
        let (written, requests, _) = end_on(cluster).await;
        assert!(matches!(written, Written::Denied(_)), "{requests:?}");
        assert_eq!(requests, [format!("GET {}", fake::OBJECT), dry_run()]);
    }

    #[tokio::test]
    async fn an_application_that_cannot_be_read_is_armed_unpaused_with_a_warning() {
        let cluster = fake::Cluster {
            deny: false,
            application: false,
            armed: false,
            ..Default::default()
        };
        let (written, requests, bodies) = arm_on(cluster, false).await;
        let Written::Done(_, report) = written else {
            panic!("not armed: {requests:?}");
        };
        assert_eq!(
            requests,
            [
                format!("GET {}", fake::OBJECT),
                format!("GET {}", fake::APP),
                dry_run(),
                format!("PATCH {}", fake::OBJECT),
            ]
        );
        assert_eq!(bodies[2], bodies[3]);
        let annotations = &bodies[3]["metadata"]["annotations"];
        assert_eq!(annotations[crate::drift::breakglass_state::REASON], "INC-1");
        assert!(
            annotations
                .get(crate::drift::breakglass_state::PAUSED)
                .is_none(),
            "{annotations}"
        );
        assert_eq!(report.state, "not-paused");
        assert!(
            report
                .warning
                .as_deref()
                .is_some_and(|w| w.contains("self-heal may revert the hotfix")),
            "{:?}",
            report.warning
        );
        assert_eq!(
            report.pause_by_hand.as_deref(),
            Some(
                "kubectl annotate applications.argoproj.io -n argocd myapp argocd.argoproj.io/skip-reconcile=true"
            )
        );

        // --require-pause: the server is asked, then nothing is written.
        let (written, requests, _) = arm_on(cluster, true).await;
        let Written::Unpausable(why) = written else {
            panic!("not refused: {requests:?}");
        };
        assert!(why.contains("Argo CD is NOT paused"), "{why}");
        assert_eq!(requests.last(), Some(&dry_run()));
        assert!(
            !requests.contains(&format!("PATCH {}", fake::OBJECT)),
            "{requests:?}"
        );
    }

    /// In a spoke (`--argocd-kubeconfig`): the object is read, asked about
    /// and written in the spoke; the Application is read, paused and resumed
    /// in the hub.
    #[tokio::test]
    async fn in_a_spoke_the_hubs_application_is_paused_and_resumed_there() {
        let resource = config_maps();
        let policy = crate::policy::Policy::embedded();
        for arm in [true, false] {
            let (spoke_log, hub_log) = (fake::Log::default(), fake::Log::default());
            let cluster = |application| fake::Cluster {
                deny: false,
                application,
                armed: !arm,
                destination: Some(SPOKE),
                ..Default::default()
            };
            let spoke = fake::api(cluster(false), spoke_log.clone());
            let hub = fake::api(cluster(true), hub_log.clone());
            let target = Target {
                api: &spoke,
                apps: &hub,
                hub: Some("--kubeconfig hub.yaml".into()),
                resource: &resource,
                name: "x",
                shown: "configmap/x",
                policy: &policy,
                argocd_namespace: "argocd",
                cluster_names: &[SPOKE.to_owned()],
                require_pause: true,
                no_pause: None,
            };
            let written = if arm {
                let at = Timestamp::now() + SignedDuration::from_mins(30);
                target.arm("INC-1", at).await.unwrap()
            } else {
                target.end().await.unwrap()
            };
            let requests = |log: &fake::Log| -> Vec<String> {
                log.lock().unwrap().iter().map(|(r, _)| r.clone()).collect()
            };
            let Written::Done(_, report) = written else {
                panic!(
                    "not done: {:?} {:?}",
                    requests(&spoke_log),
                    requests(&hub_log)
                );
            };
            assert_eq!(report.state, if arm { "paused" } else { "resumed" });
            let (spoke, hub) = (requests(&spoke_log), requests(&hub_log));
            assert!(spoke.iter().all(|r| !r.contains(fake::APP)), "{spoke:?}");
            assert_eq!(
                spoke.last().map(String::as_str),
                Some(format!("PATCH {}", fake::OBJECT).as_str())
            );
            assert_eq!(
                hub.iter()
                    .filter(|r| *r == &format!("PATCH {}", fake::APP))
                    .count(),
                1,
                "{hub:?}"
            );
            assert!(hub.iter().all(|r| r.contains(fake::APP)), "{hub:?}");
        }
    }

    /// Issue 35: an Application that deploys to another cluster is never
    /// paused for an object here, though the object's tracking id names it
    /// (a hub's, or this cluster's own): the object is armed unpaused with
    /// why, and `--require-pause` refuses; `--end` lifts no pause there. In
    /// a hub without --cluster-name, where it deploys cannot be told: not
    /// paused, and `--end` refuses to guess.
    #[tokio::test]
    async fn an_application_that_deploys_to_another_cluster_is_never_paused() {
        const OTHER: &str = "https://spoke-2.example:6443";
        let resource = config_maps();
        let policy = crate::policy::Policy::embedded();
        let spoke = [SPOKE.to_owned()];
        // (in the hub, --cluster-name, where the Application deploys): what
        // the report says when it is not paused.
        type Case<'a> = (bool, &'a [String], &'static str, Option<&'static str>);
        let cases: [Case; 5] = [
            (true, &spoke, SPOKE, None),
            (true, &spoke, OTHER, Some("deploys to another cluster")),
            (true, &[], SPOKE, Some("give --cluster-name")),
            (false, &[], IN_CLUSTER_SERVER, None),
            (false, &spoke, OTHER, Some("deploys to another cluster")),
        ];
        let requests = |log: &fake::Log, request: &str| -> Vec<Value> {
            let log = log.lock().unwrap();
            let matching = log.iter().filter(|(r, _)| r == request);
            matching.map(|(_, body)| body.clone()).collect()
        };
        let (write, pause) = (
            format!("PATCH {}", fake::OBJECT),
            format!("PATCH {}", fake::APP),
        );
        for (arm, require_pause) in [(true, false), (true, true), (false, false)] {
            for (hub, names, destination, unpaused) in cases {
                let case = format!("hub {hub}, {names:?}, to {destination}, arm {arm}");
                let (here_log, hub_log) = (fake::Log::default(), fake::Log::default());
                let cluster = fake::Cluster {
                    application: true,
                    armed: !arm,
                    destination: Some(destination),
                    ..Default::default()
                };
                let (here, there) = (
                    fake::api(cluster, here_log.clone()),
                    fake::api(cluster, hub_log.clone()),
                );
                let target = Target {
                    api: &here,
                    apps: if hub { &there } else { &here },
                    hub: hub.then(|| "--kubeconfig hub.yaml".to_owned()),
                    resource: &resource,
                    name: "x",
                    shown: "configmap/x",
                    policy: &policy,
                    argocd_namespace: "argocd",
                    cluster_names: names,
                    require_pause,
                    no_pause: None,
                };
                let apps_log = if hub { &hub_log } else { &here_log };
                if !arm {
                    let ended = target.end().await;
                    let paused = requests(apps_log, &pause);
                    match (unpaused, ended) {
                        (None, Ok(Written::Done(_, r))) => {
                            assert_eq!((r.state, paused.len()), ("resumed", 1), "{case}")
                        }
                        (Some("give --cluster-name"), Err(PluginError::Usage(why))) => {
                            assert!(why.contains("give --cluster-name"), "{case}: {why}");
                            assert_eq!(requests(&here_log, &write), [] as [Value; 0], "{case}");
                        }
                        (Some(_), Ok(Written::Done(_, r))) => {
                            assert_eq!((r.state, paused.len()), ("not-paused", 0), "{case}");
                            assert_eq!(requests(&here_log, &write).len(), 1, "{case}");
                        }
                        (_, _) => panic!("{case}: ended otherwise"),
                    }
                    continue;
                }
                let at = Timestamp::now() + SignedDuration::from_mins(30);
                let written = target.arm("INC-1", at).await.unwrap();
                let (paused, writes) = (requests(apps_log, &pause), requests(&here_log, &write));
                let Some(why) = unpaused else {
                    assert!(matches!(written, Written::Done(..)), "{case}");
                    assert_eq!(paused.len(), 1, "{case}");
                    continue;
                };
                assert_eq!(paused, [] as [Value; 0], "{case}: paused");
                match written {
                    Written::Unpausable(text) if require_pause => {
                        assert!(text.contains(why), "{case}: {text}");
                        assert_eq!(writes, [] as [Value; 0], "{case}");
                    }
                    Written::Done(_, r) if !require_pause => {
                        assert_eq!((r.state, r.tool), ("not-paused", Some("Argo CD")), "{case}");
                        // No command to pause it by hand: that is the harm.
                        assert_eq!(r.pause_by_hand, None, "{case}");
                        let warning = r.warning.unwrap_or_default();
                        for said in ["self-heal may revert the hotfix", why] {
                            assert!(warning.contains(said), "{case}: {said:?} not in {warning}");
                        }
                        let annotations = &writes[0]["metadata"]["annotations"];
                        assert_eq!(annotations[crate::drift::breakglass_state::REASON], "INC-1");
                        assert!(
                            annotations
                                .get(crate::drift::breakglass_state::PAUSED)
                                .is_none(),
                            "{case}: {annotations}"
                        );
                    }
                    _ => panic!("{case}: armed otherwise"),
                }
            }
        }
    }

    /// With a hub's Argo CD and this cluster's own (in `gitops`), each with
    /// an Application `myapp`: the one of the installation whose id the
    /// object carries is paused and resumed, in its cluster. Ids that cannot
    /// tell fall back to the hub, said; ids that rule the hub out pause nothing.
    #[tokio::test]
    async fn with_two_argo_cds_the_application_of_the_objects_installation_is_paused() {
        let resource = config_maps();
        let policy = crate::policy::Policy::embedded();
        let args = ArgoCdArgs {
            argocd_kubeconfig: Some("hub.yaml".into()),
            argocd_context: None,
            local_argocd_namespace: Some("gitops".into()),
        };
        let (hub_id, spoke_id) = (Some(Some("hub")), Some(Some("spoke")));
        let spoke_names = [SPOKE.to_owned()];
        type Case = (
            Option<&'static str>,
            Option<Option<&'static str>>,
            Option<Option<&'static str>>,
        );
        // (the object's id, the hub's argocd-cm, this cluster's; None:
        // forbidden): where the Application is paused, and whether the
        // user is told the ids could not tell.
        let cases: [(Case, &str, bool); 6] = [
            ((Some("spoke"), hub_id, spoke_id), "here", false),
            ((Some("hub"), hub_id, spoke_id), "hub", false),
            ((None, hub_id, Some(None)), "here", false),
            ((Some("spoke"), None, spoke_id), "here", false),
            ((Some("spoke"), None, None), "hub", true),
            ((Some("other"), hub_id, spoke_id), "nowhere", true),
        ];
        for (arm, ((object_id, hub_cm, spoke_cm), want, unsure)) in [true, false]
            .into_iter()
            .flat_map(|arm| cases.map(|c| (arm, c)))
        {
            let case = format!("{object_id:?} {hub_cm:?} {spoke_cm:?}, arm {arm}");
            let (spoke_log, hub_log) = (fake::Log::default(), fake::Log::default());
            let cluster = |argocd_cm| fake::Cluster {
                application: true,
                armed: !arm,
                object_id,
                argocd_cm,
                ..Default::default()
            };
            let spoke = fake::api(cluster(spoke_cm), spoke_log.clone());
            let hub = fake::api(cluster(hub_cm), hub_log.clone());
            let object = (&resource, "x", &policy);
            let chosen = installation::choose_for(&spoke, Some(&hub), &args, "argocd", object)
                .await
                .unwrap();
            assert_eq!(
                chosen.unsure.is_some(),
                unsure,
                "{case}: {:?}",
                chosen.unsure
            );
            let target = Target {
                api: &spoke,
                apps: &spoke,
                hub: None,
                resource: &resource,
                name: "x",
                shown: "configmap/x",
                policy: &policy,
                argocd_namespace: "argocd",
                cluster_names: &spoke_names,
                require_pause: false,
                no_pause: None,
            }
            .at(chosen);
            let written = if arm {
                let at = Timestamp::now() + SignedDuration::from_mins(30);
                target.arm("INC-1", at).await.unwrap()
            } else {
                target.end().await.unwrap()
            };
            let Written::Done(_, report) = written else {
                panic!("{case}: not done");
            };
            let patched = |log: &fake::Log| -> Vec<String> {
                let log = log.lock().unwrap();
                let apps = log.iter().map(|(r, _)| r.clone());
                apps.filter(|r| r.starts_with("PATCH /apis/argoproj.io/"))
                    .collect()
            };
            let (here, there) = (patched(&spoke_log), patched(&hub_log));
            let got = match (here.len(), there.len()) {
                (1, 0) if here[0].contains("/namespaces/gitops/") => "here",
                (0, 1) if there[0].contains("/namespaces/argocd/") => "hub",
                (0, 0) => "nowhere",
                _ => "wrong",
            };
            // Ending lifts only a pause that lists the object: with the hub
            // ruled out, this cluster's is the one to look in.
            let want = if arm || want != "nowhere" {
                want
            } else {
                "here"
            };
            assert_eq!(got, want, "{case}: {here:?} {there:?}");
            let state = match (want, arm) {
                ("nowhere", _) => "not-paused",
                (_, true) => "paused",
                (_, false) => "resumed",
            };
            assert_eq!(report.state, state, "{case}: {}", report.text);
            if want == "nowhere" && arm {
                // The by-hand command is for this cluster, with why.
                let cmd = "kubectl annotate applications.argoproj.io -n gitops myapp argocd.argoproj.io/skip-reconcile=true";
                assert_eq!(report.pause_by_hand.as_deref(), Some(cmd), "{case}");
                assert!(
                    report.text.contains("neither has its id"),
                    "{}",
                    report.text
                );
            }
        }
        // An argocd-cm that sets no id: the policy's installationID stands
        // for it, as in the decision.
        let yaml = "gitops:\n  argocd: {installationID: spoke}\n";
        let with_id = crate::policy::Policy::from_yaml(yaml, "p.yaml").unwrap();
        let cluster = |object_id, argocd_cm| fake::Cluster {
            application: true,
            object_id,
            argocd_cm,
            ..Default::default()
        };
        let spoke = fake::api(cluster(Some("spoke"), Some(None)), fake::Log::default());
        let hub = fake::api(cluster(None, Some(Some("hub"))), fake::Log::default());
        let object = (&resource, "x", &with_id);
        let chosen = installation::choose_for(&spoke, Some(&hub), &args, "argocd", object)
            .await
            .unwrap();
        assert_eq!(
            (chosen.namespace, chosen.hub, chosen.unsure),
            ("gitops", None, None)
        );
        // Without a hub, the flag has nothing to choose between.
        let spoke = fake::api(fake::Cluster::default(), fake::Log::default());
        let chosen = installation::choose(&spoke, None, &args, "argocd", None, &policy).await;
        assert!(matches!(chosen, Err(PluginError::Usage(_))));
    }

    #[test]
    fn the_expiry_is_whole_seconds_rfc_3339() {
        let now: Timestamp = "2026-01-01T10:00:00.75Z".parse().unwrap();
        let at = expiry(now, SignedDuration::from_mins(90)).unwrap();
        assert_eq!(at.to_string(), "2026-01-01T11:30:00Z");
    }
}
