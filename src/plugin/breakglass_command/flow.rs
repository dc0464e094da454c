//! Arming and ending against the cluster, in the order that keeps a hotfix
//! safe: the exact write is asked about as a server-side dry run first; for
//! Flux the pause is in that same write; for Argo CD the Application is
//! paused first (and, when ending, resumed after the object is ended, as
//! the sweeper does), so the hotfix is never exposed to a self-heal while
//! driftguard already allows it. An Application that cannot be paused does
//! not stop the break-glass: it is armed with a warning that names the
//! command that pauses it by hand, unless `--require-pause` asks for a
//! refusal instead.

use std::cell::OnceCell;

use jiff::Timestamp;
use kube::Resource as _;
use kube::api::{Patch, PatchParams};
use kube::core::DynamicObject;
use serde_json::Value;

use super::application_access::{
    SetCheck, application_error, application_set_check, read_application, update_application,
};
use super::report::{PauseReport, Unpaused, armed_report, ended_report, lift_failed_report};
use crate::breakglass::application::{
    AppChange, AppState, ApplicationError, CONFLICT_RETRIES, SKIP_RECONCILE, application_resource,
};
use crate::breakglass::ending::{self, Ending, Lift};
use crate::breakglass::pause::{self, Plan};
use crate::drift::breakglass_state::PAUSED;
use crate::plugin::PluginError;
use crate::plugin::api::{Api, Refusal, Reply, Resource};
use crate::plugin::installation;
use crate::plugin::out::errln;
use crate::policy::argocd::{IN_CLUSTER_NAME, IN_CLUSTER_SERVER, ThisCluster};

#[cfg(test)]
mod fake_cluster_tests;

/// A write's result: the apiserver's reply, or driftguard's denial.
pub(super) enum Written {
    Done(Reply, PauseReport),
    /// Refused by the server (its dry run or the write itself).
    Denied(Refusal),
    /// `--require-pause` and the tool cannot be paused: why.
    Unpausable(String),
}

/// The object under break-glass and what is needed to pause its tool.
pub(super) struct Target<'a> {
    pub api: &'a Api,
    /// Where the Argo CD Applications are: `api`, or a hub's.
    pub apps: &'a Api,
    /// kubectl's flags that reach the hub, when the Applications are there.
    pub hub: Option<String>,
    pub resource: &'a Resource,
    pub name: &'a str,
    pub shown: &'a str,
    pub policy: &'a crate::policy::Policy,
    pub argocd_namespace: &'a str,
    /// `--cluster-name`: what a hub calls this cluster.
    pub cluster_names: &'a [String],
    /// Without `--cluster-name`, in a spoke: what driftguard's answer to a
    /// dry run says the hub calls this cluster, or why it says nothing
    /// ([`crate::cluster::hub::names_told`]). Learned once.
    pub told: OnceCell<Result<Vec<String>, String>>,
    pub require_pause: bool,
    /// Why no Argo CD Application may be paused for the object (neither
    /// Argo CD is known to track it), if so.
    pub no_pause: Option<String>,
}

/// The server's answer to a dry run.
enum Asked {
    /// Allowed (its warnings learned from: [`Target::learn`]).
    Allowed,
    /// Refused by a webhook.
    Refused(Refusal),
    /// The object changed since it was read: read again.
    Conflict,
}

/// Why driftguard told no names: its answer carried none.
const NOT_TOLD: &str = "driftguard's answer did not say what the hub calls this cluster (driftguard serve without --argocd-kubeconfig or of an older release, or you may not break glass)";

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

impl<'a> Target<'a> {
    /// The same object, its Application read and paused where `chosen` says.
    pub fn at(self, chosen: installation::Chosen<'a>) -> Self {
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

    /// The server's answer to `body` as a dry run; what it tells of the
    /// hub's names for this cluster is learned ([`Self::learn`]).
    async fn ask(&self, body: &Value) -> Result<Asked, PluginError> {
        match self.patch(body, true).await? {
            None => Ok(Asked::Conflict),
            Some(Ok(reply)) => {
                self.learn(&reply.warnings);
                Ok(Asked::Allowed)
            }
            Some(Err(refusal)) if refusal.by_webhook() => Ok(Asked::Refused(refusal)),
            Some(Err(refusal)) => Err(PluginError::from_refusal(refusal)),
        }
    }

    /// Whether what the hub calls this cluster must be learned from
    /// driftguard before `plan` can be judged: in a spoke, for Argo CD,
    /// without `--cluster-name`, not learned yet.
    fn names_wanted(&self, plan: &Plan) -> bool {
        matches!(plan, Plan::ArgoCd { .. })
            && self.hub.is_some()
            && self.cluster_names.is_empty()
            && self.told.get().is_none()
    }

    /// Keeps what an allowed dry run's `warnings` tell of the hub's names
    /// for this cluster (the first answer only): driftguard serve, which
    /// reads the hub, says it to those who may break glass.
    fn learn(&self, warnings: &[String]) {
        if self.hub.is_none() || !self.cluster_names.is_empty() {
            return;
        }
        let told = match crate::cluster::hub::names_told(warnings) {
            Ok(Some(names)) => Ok(names),
            Ok(None) => Err(NOT_TOLD.to_owned()),
            Err(why) => Err(why),
        };
        let _ = self.told.set(told);
    }

    /// The names a hub calls this cluster by: `--cluster-name`, else what
    /// driftguard told; with how they were learned, for messages.
    fn names(&self) -> Option<(&[String], &'static str)> {
        if !self.cluster_names.is_empty() {
            return Some((self.cluster_names, "--cluster-name"));
        }
        match self.told.get() {
            Some(Ok(names)) => Some((names, "as driftguard serve says the hub calls it")),
            _ => None,
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
        match (&self.hub, self.names()) {
            (Some(_), None) => None,
            (Some(_), Some((names, _))) => Some(ThisCluster::named(names)),
            (None, _) => Some(ThisCluster::default()),
        }
    }

    /// Why what the hub calls this cluster is not known.
    fn names_unknown(&self) -> String {
        let why = match self.told.get() {
            Some(Err(why)) => why.as_str(),
            _ => NOT_TOLD,
        };
        format!(
            "{why}; give --cluster-name with what the hub calls this cluster (its Applications' spec.destination server or name, as driftguard serve's --cluster-name)"
        )
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
                "cannot tell whether {shown} deploys to this cluster: {}, and break-glass pauses it if it does",
                self.names_unknown()
            ));
        };
        if !here.deploys_elsewhere(app) {
            return None;
        }
        let this = match self.names() {
            Some((names, "--cluster-name")) => format!("--cluster-name {}", names.join(",")),
            Some((names, how)) => format!("{}, {how}", names.join(",")),
            None => format!("{IN_CLUSTER_SERVER} or {IN_CLUSTER_NAME}"),
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
    pub async fn arm(&self, reason: &str, at: Timestamp) -> Result<Written, PluginError> {
        let expires = at.to_string();
        // Whether this run added the object to its Application's pause, across retries.
        let mut added = false;
        for _ in 0..CONFLICT_RETRIES {
            let object = self.get().await?;
            let rv = object["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default();
            if let Some(why) = pause::runtime_child(&object, &self.resource.group) {
                return Err(PluginError::Usage(format!(
                    "{}: {why}; break-glass the GitOps-managed object it comes from instead",
                    self.shown
                )));
            }
            let plan = self.plan(&object);
            // In a spoke, driftguard says what the hub calls this cluster in
            // its answer to a dry run of this arming (not yet paused).
            if self.names_wanted(&plan) {
                let unpaused = pause::arm_patch_unpaused(reason, &expires, rv);
                if let Asked::Conflict = self.ask(&unpaused).await? {
                    continue;
                }
            }
            let pausable = self.pausable(&plan).await?;
            let pauses = match &pausable {
                Pausable::NotArgoCd => true,
                Pausable::Application(set) => set.holds(),
                Pausable::Unreadable(_) => false,
            };
            let mut body = if pauses {
                pause::arm_patch(&plan, reason, &expires, rv)
            } else {
                pause::arm_patch_unpaused(reason, &expires, rv)
            };
            // The server decides, before anything is written.
            match self.ask(&body).await? {
                Asked::Conflict => continue,
                Asked::Refused(refusal) => {
                    if added {
                        self.undo_pause(&plan).await;
                    }
                    return Ok(Written::Denied(refusal));
                }
                Asked::Allowed => {}
            }
            let (app, set, failed) = match pausable {
                Pausable::Unreadable(unpaused) => (None, SetCheck::NotGenerated, Some(unpaused)),
                Pausable::NotArgoCd => (None, SetCheck::NotGenerated, None),
                Pausable::Application(set) if !pauses => (None, set, None),
                Pausable::Application(set) => {
                    match self.pause_application(&plan, &mut added).await? {
                        Ok(app) => (app, set, None),
                        Err(unpaused) => {
                            // No pause: the write carries no marker of one.
                            body = pause::arm_patch_unpaused(reason, &expires, rv);
                            (None, set, Some(unpaused))
                        }
                    }
                }
            };
            let paused = app.is_some();
            let report = armed_report(&plan, app, &set, failed.as_ref(), self.shown, &expires);
            if let Some(written) = self.write(&body, &plan, added, report).await? {
                if paused && matches!(written, Written::Done(..)) {
                    self.pause_again(&plan).await;
                }
                return Ok(written);
            }
        }
        Err(self.kept_changing())
    }

    /// Pauses the Application of an Argo CD `plan` (nothing otherwise):
    /// where it stands now, or why it could not be paused. `added`: whether
    /// this run added the object to its pause, across retries.
    async fn pause_application(
        &self,
        plan: &Plan,
        added: &mut bool,
    ) -> Result<Result<Option<AppState>, Unpaused>, PluginError> {
        let Plan::ArgoCd {
            namespace,
            name,
            entry,
        } = plan
        else {
            return Ok(Ok(None));
        };
        let change = AppChange::Pause(entry);
        match update_application(self.apps, namespace, name, change).await {
            Ok(outcome) => {
                *added |= !outcome.was_listed && matches!(outcome.state, AppState::PausedFor(_));
                Ok(Ok(Some(outcome.state)))
            }
            Err(PluginError::Access(why)) => Ok(Err(self.unpaused(why, false))),
            Err(e) => Err(e),
        }
    }

    /// The arming write `body`, once the server allowed it; `None` on a
    /// conflict (read again). With `--require-pause`, a tool that could not
    /// be paused writes nothing; a refused write undoes the pause this run
    /// `added`.
    async fn write(
        &self,
        body: &Value,
        plan: &Plan,
        added: bool,
        report: PauseReport,
    ) -> Result<Option<Written>, PluginError> {
        if self.require_pause && report.state == "not-paused" && report.tool.is_some() {
            if added {
                self.undo_pause(plan).await;
            }
            return Ok(Some(Written::Unpausable(report.text)));
        }
        let Some(reply) = self.patch(body, false).await? else {
            return Ok(None);
        };
        match reply {
            Ok(reply) => Ok(Some(Written::Done(reply, report))),
            Err(refusal) => {
                if added {
                    self.undo_pause(plan).await;
                }
                if refusal.by_webhook() {
                    Ok(Some(Written::Denied(refusal)))
                } else {
                    Err(PluginError::from_refusal(refusal))
                }
            }
        }
    }

    /// After the arming landed: the Application is read again and paused
    /// again if a sweeper lifted the pause while the arming was on its way
    /// (it saw the pause held by no armed object); said on stderr.
    async fn pause_again(&self, plan: &Plan) {
        let mut added = false;
        match self.pause_application(plan, &mut added).await {
            Ok(Ok(_)) if added => errln!(
                "warning: the pause of {}'s Argo CD Application was lifted while the arming was on its way; paused it again",
                self.shown
            ),
            Ok(Ok(_)) => {}
            Ok(Err(unpaused)) => errln!(
                "warning: cannot read {}'s Argo CD Application again after arming: {}; check that it is still paused",
                self.shown,
                unpaused.why
            ),
            Err(e) => errln!(
                "warning: cannot read {}'s Argo CD Application again after arming: {e}; check that it is still paused (`kubectl driftguard status`)",
                self.shown
            ),
        }
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
            errln!(
                "warning: Argo CD Application {namespace}/{name} stays paused for {entry}: {e}; remove it with `kubectl driftguard break-glass {} --end`",
                self.shown
            );
        }
    }

    /// Asks the server with a dry run of the ending write; when it allows
    /// it, ends the break-glass as the sweeper does
    /// ([`ending::end_break_glass`]: everything arming added removed from
    /// the object, then the Argo CD Application resumed).
    pub async fn end(&self) -> Result<Written, PluginError> {
        let ar = self.resource.api_resource();
        for _ in 0..CONFLICT_RETRIES {
            let object = self.get().await?;
            let meta = &object["metadata"];
            let rv = meta["resourceVersion"].as_str().unwrap_or_default();
            let annotations = &meta["annotations"];
            let marker = annotations[PAUSED].as_str();
            let body = pause::end_patch(annotations, rv);
            // Asked first: its answer may say what the hub calls this cluster.
            match self.ask(&body).await? {
                Asked::Conflict => continue,
                Asked::Refused(refusal) => return Ok(Written::Denied(refusal)),
                Asked::Allowed => {}
            }
            let here = self.where_to_lift(marker).await?;
            let at = ending::Installation {
                client: self.apps.client(),
                namespace: self.argocd_namespace,
                hub: self.hub.is_some(),
                deploys_here: here.as_ref(),
            };
            let ending =
                ending::end_break_glass(self.api.client(), &[at], &ar, &object, self.policy).await;
            if let Some(written) = self.ended(marker, ending).await? {
                return Ok(written);
            }
        }
        Err(self.kept_changing())
    }

    /// What the cluster holding the Applications calls this one, for
    /// ending a break-glass whose pause `marker` is read: refused, writing
    /// nothing, when the Application it paused cannot be lifted rightly.
    async fn where_to_lift(
        &self,
        marker: Option<&str>,
    ) -> Result<Option<ThisCluster>, PluginError> {
        // The marker is the record of the Application to resume: never
        // dropped while that Application is known to be out of reach
        // (in a hub), since ending goes first and the lift after.
        if marker == Some(SKIP_RECONCILE) && self.hub.is_none() && !self.serves_applications().await
        {
            return Err(PluginError::Usage(format!(
                "{} paused its Argo CD Application, and this cluster has no Applications: they are in a hub; give --argocd-kubeconfig (or --argocd-context) with your credentials for it, so that --end lifts the pause there (nothing was written)",
                self.shown
            )));
        }
        // Only an Application that deploys here holds a pause of ours.
        let here = self.here();
        if marker == Some(SKIP_RECONCILE) && here.is_none() {
            return Err(PluginError::Usage(format!(
                "{} paused its Argo CD Application, and {}, so that --end lifts the pause only from an Application that deploys here (nothing was written)",
                self.shown,
                self.names_unknown()
            )));
        }
        Ok(here)
    }

    /// What ending did, as the command's result; `None`: the object changed
    /// since it was read (read again).
    async fn ended(
        &self,
        marker: Option<&str>,
        ending: Ending,
    ) -> Result<Option<Written>, PluginError> {
        Ok(Some(match ending {
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
            Ending::Changed => return Ok(None),
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
                let refusal = Refusal {
                    code,
                    message,
                    warnings: Vec::new(),
                    details: None,
                };
                return Err(PluginError::from_refusal(refusal));
            }
            Ending::Failed {
                code: None,
                message,
            } => return Err(PluginError::Access(message)),
        }))
    }

    /// The Application's side of an ended break-glass, for the report; what
    /// needs a look by hand is said on stderr.
    fn lifted(&self, lift: Lift) -> Option<(String, AppState)> {
        match lift {
            Lift::NotPaused => None,
            Lift::Unnamed => {
                errln!(
                    "warning: {} says it paused an Argo CD Application, but no longer names one: check {} on its Application",
                    self.shown,
                    crate::breakglass::application::SKIP_RECONCILE
                );
                None
            }
            Lift::Gone(app) => {
                errln!(
                    "warning: Argo CD Application {app} not found: nothing to resume (if Applications live in another namespace, give --argocd-namespace)"
                );
                Some((app, AppState::NotListed))
            }
            Lift::Lifted(app, state) => Some((app, state)),
            // Reported by `lift_failed` instead.
            Lift::Failed { .. } => None,
        }
    }

    /// The report when the object was ended but Application `application`'s
    /// pause could not be lifted ([`lift_failed_report`]), from a fresh read
    /// of the Application where one is possible.
    async fn lift_failed(
        &self,
        marker: Option<&str>,
        application: &str,
        entry: &str,
        error: ApplicationError,
    ) -> PauseReport {
        let (namespace, name) = application.split_once('/').unwrap_or_default();
        let read = self
            .apps
            .get_object(&application_resource(), Some(namespace), name)
            .await;
        let app = match read {
            Ok(Ok(app)) => Some(app),
            _ => None,
        };
        let why = application_error(namespace, name, error);
        let hub = self.hub.as_deref();
        lift_failed_report(
            marker,
            application,
            entry,
            hub,
            app.as_ref(),
            &why,
            self.shown,
        )
    }

    fn kept_changing(&self) -> PluginError {
        PluginError::Access(format!(
            "{} kept changing ({CONFLICT_RETRIES} conflicting writes); try again",
            self.shown
        ))
    }
}
