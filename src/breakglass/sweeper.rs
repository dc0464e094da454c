//! The break-glass expiry sweeper: when a break-glass stops granting, hand
//! the object back to Git. One replica sweeps, the holder of a Lease
//! ([`crate::breakglass::lease`]). It watches, as metadata only, every type it
//! may list and patch with the label selector `driftguard.io/break-glass`
//! (the label alone is not enough, see [`pause::not_armable`]), and checks
//! the armed objects when one changes and when the earliest expiry comes: for
//! each whose break-glass grants nothing any more ([`breakglass_state::state`]) it
//! removes what arming added, then lifts the pause the marker recorded
//! ([`ending`]); a lift that fails is retried by the pass over pauses left
//! behind ([`Sweeper::lift_orphaned_pauses`]). The webhook allows that write whoever sends it
//! (`break-glass-ended`), so the sweeper needs no special identity. Errors
//! are logged and retried at the next check; nothing here can fail a review.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, ListParams, PartialObjectMeta};
use serde_json::Value;

use super::application::{self, AppChange, AppState};
use super::ending::{self, Ending, Installation, Lift};
use super::lease;
use super::pause;
use crate::cluster::hub::ToolSources;
use crate::drift::breakglass_state::{self, EXPIRES};
use crate::drift::inputs::Inputs;
use crate::metrics::Metrics;
use crate::policy::argocd::ThisCluster;
use crate::service::PolicyHandle;
use watches::{REDISCOVER, Update, Watches, type_key};

/// How long an Application's pause must have been held by no armed object
/// before the sweeper lifts it as left behind.
const ORPHAN_GRACE: Duration = Duration::from_secs(20);
/// How the sweeper runs (`driftguard serve`'s flags).
pub struct Options {
    /// The longest wait between two checks of the armed objects.
    pub interval: Duration,
    /// Where Argo CD Applications live when a tracking id names no namespace.
    pub argocd_namespace: String,
    /// The Lease (namespace, name) that elects the one replica that sweeps;
    /// `None`: this process sweeps alone (one replica, or outside a cluster).
    pub lease: Option<(String, String)>,
    /// Where the Applications are: with `--argocd-kubeconfig`, a hub's
    /// (their pauses lifted there, which needs `patch` on applications) and,
    /// with `--local-argocd-namespace`, this cluster's own too; only the
    /// pauses of Applications that deploy here (`--cluster-name` in the
    /// hub) are this sweeper's to find left behind.
    pub argocd: ToolSources<String>,
}

/// Starts the sweeper on the current runtime.
pub fn spawn(client: kube::Client, policy: PolicyHandle, metrics: Arc<Metrics>, options: Options) {
    tracing::info!(interval = ?options.interval, lease = ?options.lease, "break-glass expiry sweeper started");
    let leading = match &options.lease {
        Some((namespace, name)) => lease::elect(client.clone(), namespace, name, metrics.clone()),
        None => {
            metrics.break_glass_sweeper_leader.set(1);
            Arc::new(AtomicBool::new(true))
        }
    };
    let mut sweeper = Sweeper::new(client, policy, metrics, options);
    tokio::spawn(async move {
        loop {
            if leading.load(Ordering::SeqCst) {
                sweeper.lead(&leading).await;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
}

struct Sweeper {
    client: kube::Client,
    /// `--cluster-name`, read once: what the hub calls this cluster.
    this_cluster: ThisCluster,
    /// What this cluster's own Argo CD calls it.
    in_cluster: ThisCluster,
    policy: PolicyHandle,
    metrics: Arc<Metrics>,
    options: Options,
    /// The armed objects of each type, kept by a metadata watch selected by
    /// the break-glass label.
    watches: Watches,
    /// Application pauses no armed object holds, as (in the hub, namespace,
    /// name, entry), with when they were first seen so: lifted once they have been
    /// orphaned for [`ORPHAN_GRACE`], so that the moment between pausing an
    /// Application and arming the object (the plugin does both, in that
    /// order), and a watch event still on its way, are never mistaken for one.
    orphans: BTreeMap<Orphan, Instant>,
}

/// An Application's pause entry: (in the hub, namespace, name, entry).
type Orphan = (bool, String, String, String);

impl Sweeper {
    fn new(
        client: kube::Client,
        policy: PolicyHandle,
        metrics: Arc<Metrics>,
        options: Options,
    ) -> Self {
        Sweeper {
            this_cluster: options.argocd.this_cluster(),
            in_cluster: ThisCluster::default(),
            watches: Watches::new(client.clone()),
            client,
            policy,
            metrics,
            options,
            orphans: BTreeMap::new(),
        }
    }

    /// Sweeps while this replica leads: one metadata watch per type selected
    /// by the break-glass label (each type costs the apiserver a watch, not
    /// a list every interval), a check when an armed object changes or the
    /// earliest expiry comes, and the Applications' pauses read once per
    /// interval. Every watch stops when the lead is lost.
    async fn lead(&mut self, leading: &AtomicBool) {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Update>(1024);
        let mut rediscover = Instant::now();
        let mut check = Instant::now();
        let mut orphan_check = Instant::now() + self.options.interval;
        while leading.load(Ordering::SeqCst) {
            let now = Instant::now();
            if now >= rediscover {
                self.watches.rediscover(&tx).await;
                rediscover = now + REDISCOVER;
            }
            self.watches.retry_refused(&tx);
            let wake = check.min(rediscover).min(now + Duration::from_secs(1));
            tokio::select! {
                Some((key, update)) = rx.recv() => {
                    if self.watches.update(&key, update) {
                        check = Instant::now();
                    }
                }
                () = tokio::time::sleep_until(wake.into()) => {}
            }
            if Instant::now() >= check {
                check = self.check().await;
            }
            // Only types whose watch has listed everything count: a pause
            // held for an object of a type not yet (or never) listed stays.
            if Instant::now() >= orphan_check {
                let (armed, listed) = self.armed_and_listed();
                self.lift_orphaned_pauses(&armed, &listed).await;
                orphan_check = Instant::now() + self.options.interval;
            }
        }
        tracing::info!("break-glass sweeper: not leading; watches stopped");
        for w in std::mem::take(&mut self.watches.watched).into_values() {
            w.task.abort();
        }
        self.orphans.clear();
    }

    /// Ends every armed break-glass that grants nothing any more, and
    /// returns when to check again: at the earliest expiry still ahead, or
    /// one interval from now, whichever comes first.
    async fn check(&mut self) -> Instant {
        let now = jiff::Timestamp::now();
        let policy = self.policy.current();
        let mut next = Instant::now() + self.options.interval;
        let mut due = Vec::new();
        for w in self.watches.watched.values() {
            for object in w.objects.values() {
                match sweep(object, &w.ar.group, &policy, now) {
                    Err(why) => {
                        tracing::debug!(kind = %w.ar.kind, name = %object["metadata"]["name"], why, "break-glass sweeper: labelled but not armed by driftguard; left alone");
                    }
                    Ok(true) => due.push((w.ar.clone(), object.clone())),
                    Ok(false) => {
                        let expires = object["metadata"]["annotations"][EXPIRES]
                            .as_str()
                            .and_then(|e| e.parse::<jiff::Timestamp>().ok());
                        let left =
                            expires.and_then(|at| Duration::try_from(at.duration_since(now)).ok());
                        if let Some(left) = left {
                            // A moment past the expiry, so that it is expired when checked.
                            next = next.min(Instant::now() + left + Duration::from_millis(50));
                        }
                    }
                }
            }
        }
        for (ar, object) in due {
            // Forgotten once done with, so that a check before its watch
            // event arrives never ends it again from a stale copy (which
            // would first take a new break-glass's entry off the Application).
            if self.end(&ar, &object).await
                && let Some(w) = self.watches.watched.get_mut(&type_key(&ar))
            {
                let id = (
                    object["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    object["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                );
                if w.objects.get(&id) == Some(&object) {
                    w.objects.remove(&id);
                }
            }
        }
        next
    }

    /// The armed objects (`pause::entry`) and the types whose watch has
    /// listed them all, for [`Sweeper::lift_orphaned_pauses`].
    fn armed_and_listed(&self) -> (BTreeSet<String>, BTreeSet<String>) {
        let policy = self.policy.current();
        let mut armed = BTreeSet::new();
        let mut listed = BTreeSet::new();
        for (key, w) in &self.watches.watched {
            if !w.synced {
                continue;
            }
            listed.insert(key.clone());
            for object in w.objects.values() {
                if pause::not_armable(object, &w.ar.group, &policy).is_none() {
                    armed.insert(pause::entry(
                        &w.ar.group,
                        &w.ar.kind,
                        object["metadata"]["namespace"].as_str().unwrap_or_default(),
                        object["metadata"]["name"].as_str().unwrap_or_default(),
                    ));
                }
            }
        }
        (armed, listed)
    }

    /// However a break-glass ended (its keys removed by hand, its object
    /// deleted, a restart in between), the Application pause it held is
    /// lifted: found from the Applications' own `PAUSED_FOR` lists, not from
    /// the armed objects alone, in every cluster holding Applications.
    async fn lift_orphaned_pauses(&mut self, armed: &BTreeSet<String>, listed: &BTreeSet<String>) {
        let (mut orphans, mut unlisted) = (BTreeMap::new(), BTreeSet::new());
        for at in self.installations() {
            let Some(apps) = list_applications(at.client).await else {
                // Not listed now: what was seen there waits, untouched.
                let kept = self.orphans.iter().filter(|(key, _)| key.0 == at.hub);
                orphans.extend(kept.map(|(key, since)| (key.clone(), *since)));
                unlisted.insert(at.hub);
                continue;
            };
            for app in apps {
                let meta = serde_json::to_value(&app.metadata).unwrap_or_default();
                let (namespace, name) = (
                    app.metadata.namespace.unwrap_or_default(),
                    app.metadata.name.unwrap_or_default(),
                );
                for entry in
                    application::orphaned(&meta["annotations"], armed, |gk| listed.contains(gk))
                {
                    let key = (at.hub, namespace.clone(), name.clone(), entry);
                    let since = self.orphans.get(&key).copied().unwrap_or_else(Instant::now);
                    orphans.insert(key, since);
                }
            }
        }
        let mut elsewhere = BTreeSet::new();
        for ((hub, namespace, name, entry), since) in &orphans {
            if since.elapsed() < ORPHAN_GRACE || unlisted.contains(hub) {
                continue;
            }
            // An Application that deploys to another cluster lists that
            // cluster's armed objects, not ours: never lifted from here.
            let app = (*hub, namespace.clone(), name.clone());
            if elsewhere.contains(&app) || self.deploys_elsewhere(*hub, namespace, name).await {
                elsewhere.insert(app);
                continue;
            }
            // Judged again on the read the lift writes from.
            let here = Some(self.here(*hub));
            let resume = AppChange::Resume(entry);
            match application::change(self.argocd(*hub), namespace, name, resume, here).await {
                Ok(changed) => {
                    let state = changed.map_or(AppState::NotListed, |c| c.state);
                    tracing::info!(application = %format!("{namespace}/{name}"), object = %entry, ?state, hub, "break-glass ended without lifting its pause: lifted")
                }
                Err(e) => {
                    self.metrics.break_glass_lift_failures.inc();
                    let application = format!("{namespace}/{name}");
                    let what = lift_failed(&application, entry, *hub);
                    tracing::warn!(%application, object = %entry, error = %e, hub, "break-glass sweeper: a pause left behind: {what}")
                }
            }
        }
        self.orphans = orphans;
    }

    /// Whether Application `namespace/name`, of the hub (`hub`) or this
    /// cluster, deploys to a cluster other than this one, or cannot be read
    /// to tell. In this cluster too: if it is another cluster's hub, that
    /// cluster's break-glasses pause its Applications that deploy there.
    async fn deploys_elsewhere(&self, hub: bool, namespace: &str, name: &str) -> bool {
        let api = Api::<DynamicObject>::namespaced_with(
            self.argocd(hub).clone(),
            namespace,
            &application::application_resource(),
        );
        match api.get(name).await {
            Ok(app) => self
                .here(hub)
                .deploys_elsewhere(&serde_json::to_value(app).unwrap_or_default()),
            Err(_) => true,
        }
    }

    /// What the cluster holding the Applications (the hub, `hub`, or this
    /// one) calls this cluster: only an Application that deploys here holds
    /// a pause of ours, as only such is paused by the plugin.
    fn here(&self, hub: bool) -> &ThisCluster {
        if hub {
            &self.this_cluster
        } else {
            &self.in_cluster
        }
    }

    /// The client for Argo CD Applications: the hub's (`hub`), or this cluster's.
    fn argocd(&self, hub: bool) -> &kube::Client {
        match &self.options.argocd.hub {
            Some(client) if hub => client,
            _ => &self.client,
        }
    }

    /// Where Applications are: this cluster's own Argo CD (with
    /// `--local-argocd-namespace`) first, since it answers while a hub is
    /// down, then the hub's, or the one cluster that holds them. In each,
    /// only an Application deploying here may hold a pause of ours.
    fn installations(&self) -> Vec<Installation<'_>> {
        let hub = self.options.argocd.hub.as_ref();
        let mut out = Vec::new();
        if let Some(namespace) = self.options.argocd.beside_hub() {
            out.push(Installation {
                client: &self.client,
                namespace,
                hub: false,
                deploys_here: Some(self.here(false)),
            });
        }
        out.push(Installation {
            client: hub.unwrap_or(&self.client),
            namespace: &self.options.argocd_namespace,
            hub: hub.is_some(),
            deploys_here: Some(self.here(hub.is_some())),
        });
        out
    }

    /// Ends the break-glass on the object ([`ending::end_break_glass`]);
    /// failures wait for the next tick. Returns whether the object is done
    /// with: ended, or changed or gone since it was seen (its next watch
    /// event says what it is now).
    async fn end(&self, ar: &ApiResource, object: &Value) -> bool {
        let meta = &object["metadata"];
        let name = meta["name"].as_str().unwrap_or_default();
        let namespace = meta["namespace"].as_str().unwrap_or_default();
        let annotations = &meta["annotations"];
        let shown = format!("{} {}{name}", ar.kind, ns_prefix(namespace));
        let policy = self.policy.current();
        let installations = self.installations();
        let ending =
            ending::end_break_glass(&self.client, &installations, ar, object, &policy).await;
        match ending {
            Ending::Ended { application, .. } => {
                self.metrics.break_glass_expired.inc();
                let application = match application {
                    Lift::NotPaused => "-".to_owned(),
                    Lift::Unnamed => {
                        tracing::warn!(object = %shown, "break-glass sweeper: the pause marker names Argo CD, but the object names no Application; ended the break-glass on the object only");
                        "-".to_owned()
                    }
                    Lift::Gone(app) => format!("{app} not found"),
                    Lift::Lifted(app, AppState::Resumed) => format!("{app} resumed"),
                    Lift::Lifted(app, AppState::PausedFor(l)) => {
                        format!("{app} still paused for {}", l.join(","))
                    }
                    Lift::Lifted(app, _) => format!("{app} not paused by driftguard"),
                    Lift::Failed {
                        application,
                        hub,
                        entry,
                        error,
                    } => {
                        // The object is ended: its pause is left behind, and
                        // the pass over those lifts it (retried and counted
                        // there) once it may.
                        self.metrics.break_glass_lift_failures.inc();
                        let what = lift_failed(&application, &entry, hub);
                        tracing::warn!(object = %shown, %application, %error, "break-glass sweeper: ended the expired break-glass on {shown}, but {what}");
                        format!("{application} NOT resumed")
                    }
                };
                tracing::info!(
                    object = %shown,
                    expires = annotations[EXPIRES].as_str().unwrap_or("(missing)"),
                    paused = annotations[breakglass_state::PAUSED].as_str().unwrap_or("(nothing)"),
                    %application,
                    "break-glass expired: removed it and driftguard's pause; the GitOps tool restores Git"
                );
                true
            }
            // Changed since it was listed (or another replica won): the next tick sees it again.
            Ending::Changed => {
                tracing::debug!(object = %shown, "break-glass sweeper: object changed; next tick");
                true
            }
            Ending::Refused { message, .. } => {
                tracing::warn!(object = %shown, error = %message, "break-glass sweeper: a webhook refused ending the break-glass; trying again next tick");
                false
            }
            Ending::Failed { code, message } => {
                tracing::warn!(object = %shown, ?code, error = %message, "break-glass sweeper: cannot end the break-glass; trying again next tick");
                false
            }
        }
    }
}

/// Every Application's metadata in the cluster of `client`; `None` (logged)
/// when they cannot be listed. No Application type: none.
async fn list_applications(client: &kube::Client) -> Option<Vec<PartialObjectMeta<DynamicObject>>> {
    let api = Api::<DynamicObject>::all_with(client.clone(), &application::application_resource());
    match api.list_metadata(&ListParams::default()).await {
        Ok(apps) => Some(apps.items),
        Err(kube::Error::Api(s)) if s.code == 404 => Some(Vec::new()),
        Err(e) => {
            tracing::warn!(error = %e, "break-glass sweeper: cannot list Applications to find pauses left behind");
            None
        }
    }
}

/// What the sweeper says when it cannot lift Application `application`'s
/// pause for `entry` (its break-glass ended): it stays paused, the sweeper
/// tries again at each sweep as a pause left behind, and what mends it now.
fn lift_failed(application: &str, entry: &str, hub: bool) -> String {
    let (namespace, name) = application.split_once('/').unwrap_or_default();
    let (where_, kubectl, grant) = if hub {
        (
            " in the hub (--argocd-kubeconfig)",
            "kubectl --kubeconfig <hub kubeconfig>",
            "driftguard's hub identity needs patch on applications.argoproj.io there",
        )
    } else {
        (
            "",
            "kubectl",
            "driftguard needs get, list and patch on applications.argoproj.io",
        )
    };
    let by_hand =
        application::lift_by_hand(kubectl, namespace, name, entry, None).unwrap_or_default();
    format!(
        "cannot lift Argo CD Application {application}'s pause{where_} for {entry}: it stays paused, so Git is not restored; the sweeper tries again at each sweep, as a pause left behind ({grant}); or lift it now with the credentials of someone who may patch the Application: `{by_hand}` (if {} lists other objects too, remove only {entry} from it)",
        application::PAUSED_FOR
    )
}

fn ns_prefix(namespace: &str) -> String {
    if namespace.is_empty() {
        String::new()
    } else {
        format!("{namespace}/")
    }
}

/// The sweeper's answer for one labelled object: `Err(why)` when driftguard
/// did not arm it (the label alone is anyone's to set), else whether its
/// break-glass is due to end: every [`breakglass_state::State`] but active.
pub(crate) fn sweep(
    object: &serde_json::Value,
    group: &str,
    policy: &crate::policy::Policy,
    now: jiff::Timestamp,
) -> Result<bool, &'static str> {
    if let Some(why) = pause::not_armable(object, group, policy) {
        return Err(why);
    }
    Ok(!breakglass_state::state(&Inputs::read(object, policy), policy, now).grants())
}

mod watches;

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use http::{Request, Response};
    use http_body_util::BodyExt;
    use kube::client::Body;

    use super::*;
    use crate::breakglass::application::{PAUSED_FOR, SKIP_RECONCILE};
    use serde_json::json;

    const SPOKE: &str = "https://spoke-1.example:6443";
    const APPS: &str = "/apis/argoproj.io/v1alpha1";

    /// `METHOD path` of every request, in order.
    type Log = Arc<Mutex<Vec<String>>>;

    /// An Application paused by driftguard for `entry`, deploying to `server`.
    fn app(namespace: &str, name: &str, entry: &str, server: &str) -> Value {
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": "3",
                "annotations": {SKIP_RECONCILE: "true", PAUSED_FOR: entry}},
            "spec": {"destination": {"server": server, "namespace": "prod"}}})
    }

    /// A fake apiserver holding `apps`: listed, read and patched.
    fn cluster(apps: Vec<Value>, log: Log) -> kube::Client {
        let service = tower::service_fn(move |request: Request<Body>| {
            let (apps, log) = (apps.clone(), log.clone());
            async move {
                let (method, path) = (
                    request.method().to_string(),
                    request.uri().path().to_owned(),
                );
                let _ = request.into_body().collect().await;
                log.lock().unwrap().push(format!("{method} {path}"));
                let named = |a: &&Value| {
                    let m = &a["metadata"];
                    path == format!(
                        "{APPS}/namespaces/{}/applications/{}",
                        m["namespace"].as_str().unwrap(),
                        m["name"].as_str().unwrap()
                    )
                };
                let (code, body) = if path == format!("{APPS}/applications") {
                    (
                        200,
                        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationList", "metadata": {}, "items": apps}),
                    )
                } else if let Some(app) = apps.iter().find(named) {
                    (200, app.clone())
                } else {
                    (
                        404,
                        json!({"kind": "Status", "code": 404, "message": "not found"}),
                    )
                };
                let response = Response::builder()
                    .status(code)
                    .body(Body::from(body.to_string().into_bytes()))
                    .unwrap();
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        kube::Client::new(service, "default")
    }

    /// A hub's Argo CD and this cluster's own: pauses no armed object holds
    /// any more are lifted in both, but in the hub only on Applications that
    /// deploy here; without --local-argocd-namespace, only the hub is asked.
    #[tokio::test]
    async fn pauses_left_behind_are_lifted_in_both_clusters_never_another_clusters() {
        let entry = "apps/Deployment:prod/web";
        for local in [true, false] {
            let (here_log, hub_log) = (Log::default(), Log::default());
            let here = cluster(
                vec![app(
                    "gitops",
                    "web",
                    entry,
                    "https://kubernetes.default.svc",
                )],
                here_log.clone(),
            );
            // Another cluster's web holds the same entry, for its own Deployment.
            let hub = cluster(
                vec![
                    app("argocd", "web", entry, "https://spoke-2.example:6443"),
                    app("argocd", "api", entry, SPOKE),
                ],
                hub_log.clone(),
            );
            let options = Options {
                interval: Duration::from_secs(60),
                argocd_namespace: "argocd".into(),
                lease: None,
                argocd: ToolSources {
                    hub: Some(hub),
                    local: local.then(|| "gitops".into()),
                    cluster_names: vec![SPOKE.into()],
                },
            };
            let policy = PolicyHandle::new(crate::policy::Policy::embedded());
            let mut sweeper = Sweeper::new(here, policy, Arc::new(Metrics::default()), options);
            look_twice(&mut sweeper).await;
            let patched = |log: &Log| -> Vec<String> {
                log.lock()
                    .unwrap()
                    .iter()
                    .filter(|r| r.starts_with("PATCH"))
                    .cloned()
                    .collect()
            };
            let here_patched: &[String] = if local {
                &[format!("PATCH {APPS}/namespaces/gitops/applications/web")]
            } else {
                assert!(here_log.lock().unwrap().is_empty(), "{here_log:?}");
                &[]
            };
            assert_eq!(patched(&here_log), here_patched, "local {local}");
            assert_eq!(
                patched(&hub_log),
                [format!("PATCH {APPS}/namespaces/argocd/applications/api")],
                "local {local}"
            );
        }
    }

    /// Two looks at pauses left behind, the second past the grace.
    async fn look_twice(sweeper: &mut Sweeper) {
        let (armed, listed) = (
            BTreeSet::new(),
            BTreeSet::from(["apps/Deployment".to_owned()]),
        );
        sweeper.lift_orphaned_pauses(&armed, &listed).await;
        for since in sweeper.orphans.values_mut() {
            *since -= ORPHAN_GRACE * 2;
        }
        sweeper.lift_orphaned_pauses(&armed, &listed).await;
    }

    /// Without a hub, this cluster may be another's hub: its Applications
    /// that deploy there hold that cluster's pauses, never lifted from here.
    #[tokio::test]
    async fn without_a_hub_only_pauses_of_applications_deploying_here_are_lifted() {
        let entry = "apps/Deployment:prod/web";
        let log = Log::default();
        let here = cluster(
            vec![
                app("argocd", "web", entry, SPOKE),
                app("argocd", "api", entry, "https://kubernetes.default.svc"),
            ],
            log.clone(),
        );
        let options = Options {
            interval: Duration::from_secs(60),
            argocd_namespace: "argocd".into(),
            lease: None,
            argocd: ToolSources::default(),
        };
        let policy = PolicyHandle::new(crate::policy::Policy::embedded());
        let mut sweeper = Sweeper::new(here, policy, Arc::new(Metrics::default()), options);
        look_twice(&mut sweeper).await;
        let log = log.lock().unwrap();
        let patched: Vec<&String> = log.iter().filter(|r| r.starts_with("PATCH")).collect();
        assert_eq!(
            patched,
            [&format!("PATCH {APPS}/namespaces/argocd/applications/api")]
        );
    }

    /// An expired break-glass lifts the pause only of an Application that
    /// deploys here, in whichever cluster it looks: the hub's as
    /// --cluster-name names this cluster, this cluster's own as in-cluster.
    #[tokio::test]
    async fn every_installation_lifts_only_applications_deploying_here() {
        let hub = || Some(cluster(Vec::new(), Log::default()));
        for (argocd_hub, local) in [(hub(), true), (hub(), false), (None, false)] {
            let options = Options {
                interval: Duration::from_secs(60),
                argocd_namespace: "argocd".into(),
                lease: None,
                argocd: ToolSources {
                    hub: argocd_hub,
                    local: local.then(|| "gitops".into()),
                    cluster_names: vec![SPOKE.into()],
                },
            };
            let policy = PolicyHandle::new(crate::policy::Policy::embedded());
            let here = cluster(Vec::new(), Log::default());
            let sweeper = Sweeper::new(here, policy, Arc::new(Metrics::default()), options);
            let judged: Vec<_> = sweeper
                .installations()
                .iter()
                .map(|at| (at.hub, at.deploys_here.cloned()))
                .collect();
            let (in_hub, in_here) = (
                (true, Some(ThisCluster::named(&[SPOKE.to_owned()]))),
                (false, Some(ThisCluster::default())),
            );
            let with_hub = sweeper.options.argocd.hub.is_some();
            let want = match (with_hub, local) {
                (true, true) => vec![in_here, in_hub],
                (true, false) => vec![in_hub],
                _ => vec![in_here],
            };
            assert_eq!(judged, want, "hub {with_hub}, local {local}");
        }
    }

    #[test]
    fn a_refused_lift_says_where_and_how_to_lift_it_by_hand() {
        let entry = "apps/Deployment:production/web";
        let hub = lift_failed("argocd/web", entry, true);
        for said in [
            "Application argocd/web's pause in the hub (--argocd-kubeconfig) for apps/Deployment:production/web",
            "tries again at each sweep, as a pause left behind",
            "hub identity needs patch on applications.argoproj.io",
            "`kubectl --kubeconfig <hub kubeconfig> annotate applications.argoproj.io -n argocd web argocd.argoproj.io/skip-reconcile- driftguard.io/break-glass-paused-for-`",
            "remove only apps/Deployment:production/web",
        ] {
            assert!(hub.contains(said), "{said:?} not in {hub}");
        }
        let here = lift_failed("argocd/web", entry, false);
        assert!(!here.contains("hub"), "{here}");
        assert!(
            here.contains("`kubectl annotate applications.argoproj.io -n argocd web "),
            "{here}"
        );
    }
}
