//! The break-glass expiry sweeper: when a break-glass stops granting, hand
//! the object back to Git. One replica sweeps, the holder of a Lease
//! ([`crate::breakglass::lease`]). It watches the armed set's records alone
//! ([`record`]: one ConfigMap per armed object, written by the webhook before
//! it allows the arming), never a type per CRD, and reads an armed object
//! when its recorded expiry comes (and every [`VERIFY`] in any case): for
//! each whose break-glass grants nothing any more ([`breakglass_state::state`])
//! it removes what arming added, then lifts the pause the marker recorded
//! ([`ending`]), then drops the record; a lift that fails is retried by the
//! pass over pauses left behind ([`Sweeper::lift_orphaned_pauses`]). The
//! webhook allows that write whoever sends it (`break-glass-ended`), so the
//! sweeper needs no special identity. Errors are logged and retried at the
//! next check; nothing here can fail a review.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, PartialObjectMeta};
use serde_json::{Value, json};

use super::application::{self, AppChange, AppState};
use super::ending::{self, Ending, Installation, Lift};
use super::lease;
use super::pause;
use super::record::{Armed, Recorder};
use crate::cluster::hub::ToolSources;
use crate::drift::breakglass_state::{self, EXPIRES};
use crate::drift::inputs::Inputs;
use crate::metrics::Metrics;
use crate::policy::argocd::ThisCluster;
use crate::service::PolicyHandle;
use applications::{Listed, Reconciled, list_applications};
use orphans::{App, Orphan, Orphans};
use records::Records;
use scan::Scan;
use served::{Found, Served};

/// How long an Application's pause must have been held by no armed object
/// before the sweeper lifts it as left behind: the pause is written before
/// the arming, which may land up to [`record::GRACE`] after it was sent.
const ORPHAN_GRACE: Duration = super::record::GRACE;
/// Every recorded object is read at least this often, whatever its
/// recorded expiry: a break-glass ended or changed by a write the webhook
/// did not see (an excluded namespace, a webhook failing open) is found.
const VERIFY: Duration = Duration::from_secs(300);

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
    /// `--argocd-application-selector`: the hub's Applications read for
    /// pauses left behind, as the watch reads them. Without it, every one
    /// of the hub's, a page at a time, every sweep.
    pub application_selector: Option<String>,
    /// Where the armed set's records are (`--break-glass-namespace`).
    pub records: Recorder,
}

/// Starts the sweeper on the current runtime.
pub fn spawn(client: kube::Client, policy: PolicyHandle, metrics: Arc<Metrics>, options: Options) {
    tracing::info!(interval = ?options.interval, lease = ?options.lease, records = options.records.namespace(), "break-glass expiry sweeper started");
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
    /// The armed set's records, kept by one watch.
    records: Records,
    /// Where the records' types are served now.
    served: Served,
    /// Application pauses no armed object holds, with when they were first
    /// seen so: lifted once they have been orphaned for [`ORPHAN_GRACE`], so
    /// that the moment between pausing an Application and arming the object
    /// (the plugin does both, in that order), and a watch event still on its
    /// way, are never mistaken for one; and whose turn it is ([`orphans`]).
    orphans: Orphans,
    /// The paced scan for armed objects without a record.
    scan: Scan,
}

/// What reading a recorded object found.
enum Read {
    /// Its metadata, as `{kind, metadata}`.
    Object(Value),
    /// It does not exist.
    Gone,
    /// It could not be read now.
    Failed(kube::Error),
    /// Its type is served by no version now (the record names its group
    /// and resource).
    Unserved,
}

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
            records: Records::default(),
            served: Served::new(client.clone()),
            client,
            policy,
            metrics,
            options,
            orphans: Orphans::default(),
            scan: Scan::default(),
        }
    }

    /// Sweeps while this replica leads: one watch of the records, a check
    /// when a record changes or the earliest expiry comes, the Applications'
    /// pauses read once per interval, and the paced [`scan`] of every type
    /// it may sweep. The watch stops when the lead is lost.
    async fn lead(&mut self, leading: &AtomicBool) {
        let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
        let namespace = self.options.records.namespace().to_owned();
        let mut watch = records::watch(self.client.clone(), &namespace, tx.clone());
        let mut check = Instant::now();
        let mut orphan_check = Instant::now() + self.options.interval;
        let mut relist = Instant::now();
        self.scan = Scan::default();
        while leading.load(Ordering::SeqCst) {
            let wake = (check.min(self.scan.next)).min(Instant::now() + Duration::from_secs(1));
            tokio::select! {
                Some(update) = rx.recv() => {
                    if self.records.update(update) {
                        check = Instant::now();
                    }
                }
                () = tokio::time::sleep_until(wake.into()) => {}
            }
            if !self.records.synced {
                continue;
            }
            for armed in self.records.take_deleted() {
                self.record_again(armed).await;
            }
            if Instant::now() >= check {
                check = self.check().await;
            }
            if Instant::now() >= self.scan.next {
                self.scan_step().await;
            }
            // Records left out at the bound are read again once there is room.
            if self.records.room_for_more() && Instant::now() >= relist {
                watch.abort();
                watch = records::watch(self.client.clone(), &namespace, tx.clone());
                relist = Instant::now() + self.options.interval;
            }
            if Instant::now() >= orphan_check {
                self.lift_orphaned_pauses().await;
                orphan_check = Instant::now() + self.options.interval;
            }
        }
        tracing::info!("break-glass sweeper: not leading; watch stopped");
        watch.abort();
        self.records = Records::default();
        self.orphans.clear();
    }

    /// A record deleted by someone else while its object may be armed:
    /// written again if the object, read now, is armed.
    async fn record_again(&mut self, mut armed: Armed) {
        let Read::Object(object) = self.read(&mut armed).await else {
            return;
        };
        let policy = self.policy.current();
        if pause::not_armable(&object, &armed.ar.group, &policy).is_none() {
            tracing::warn!(object = %armed.entry(), "break-glass sweeper: the record of an armed object was deleted; recording it again");
            self.record(&armed).await;
        }
    }

    /// Reads every recorded object that is due ([`Held::due`]), ends each
    /// break-glass that grants nothing any more and drops records whose
    /// object is not armed once settled; returns when to check again: the
    /// earliest expiry or settling still ahead, or one interval from now.
    async fn check(&mut self) -> Instant {
        let now = jiff::Timestamp::now();
        let policy = self.policy.current();
        let due: Vec<String> = (self.records.held.iter())
            .filter(|(_, h)| h.due(now))
            .map(|(name, _)| name.clone())
            .collect();
        for name in due {
            let Some(mut armed) = self.records.held.get(&name).map(|h| h.armed.clone()) else {
                continue;
            };
            let object = match self.read(&mut armed).await {
                Read::Object(object) => Some(object),
                Read::Gone => None,
                Read::Failed(e) => {
                    let times = self.records.failed(&name);
                    if times.is_power_of_two() {
                        let forbidden = matches!(&e, kube::Error::Api(s) if s.code == 403);
                        let rbac = if forbidden {
                            " (it needs get and patch on its type)"
                        } else {
                            ""
                        };
                        tracing::warn!(object = %armed.entry(), error = %e, times, "break-glass sweeper: cannot read an armed object{rbac}; tried again later, less often");
                    }
                    continue;
                }
                Read::Unserved => {
                    let times = self.records.failed(&name);
                    if times.is_power_of_two() {
                        let r#type = format!("{}/{}", armed.ar.group, armed.ar.plural);
                        tracing::warn!(object = %armed.entry(), r#type = %r#type, times, "break-glass sweeper: a recorded object's type is served by no version now (its CRD removed, or its versions no longer served): it cannot be read or ended until it is served again; tried again later, less often");
                    }
                    continue;
                }
            };
            self.records.served_as(&name, armed.ar.clone());
            match object
                .as_ref()
                .map(|o| (o, sweep(o, &armed.ar.group, &policy, now)))
            {
                Some((object, Ok(true))) => match self.end(&armed.ar, object).await {
                    true => {
                        self.records.ended(&name);
                        self.forget(&name).await;
                    }
                    false => self.records.unread(&name),
                },
                Some((object, Ok(false))) => {
                    let expires = object["metadata"]["annotations"][EXPIRES]
                        .as_str()
                        .and_then(|e| e.parse().ok());
                    self.records.read(&name, true, expires);
                }
                None | Some((_, Err(_))) => {
                    tracing::debug!(object = %armed.entry(), "break-glass sweeper: recorded but not armed");
                    let settled = self.records.held.get(&name).is_some_and(|h| h.settled(now));
                    match settled || self.records.ended_here(&name) {
                        true => self.forget(&name).await,
                        false => self.records.read(&name, false, None),
                    }
                }
            }
        }
        let next = (self.records.held.values())
            .filter_map(|h| h.next_look(now))
            .filter_map(|at| Duration::try_from(at.duration_since(now)).ok())
            // A moment past it, so that it has passed when checked.
            .map(|left| Instant::now() + left + Duration::from_millis(50))
            .min();
        let every = Instant::now() + self.options.interval;
        next.map_or(every, |at| at.min(every))
    }

    /// The recorded object's metadata, as `{kind, metadata}`, read by its
    /// group and resource at the version served now, which `armed` takes.
    async fn read(&self, armed: &mut Armed) -> Read {
        match self
            .served
            .resource(&armed.ar.group, &armed.ar.plural)
            .await
        {
            Found::At(ar) => armed.ar = ar,
            Found::Unserved => return Read::Unserved,
            Found::Failed(e) => return Read::Failed(e),
        }
        let api = match armed.namespace.as_str() {
            "" => Api::<DynamicObject>::all_with(self.client.clone(), &armed.ar),
            ns => Api::<DynamicObject>::namespaced_with(self.client.clone(), ns, &armed.ar),
        };
        match api.get_metadata_opt(&armed.name).await {
            Ok(Some(meta)) => {
                Read::Object(json!({"kind": armed.ar.kind, "metadata": meta.metadata}))
            }
            Ok(None) => Read::Gone,
            Err(e) => {
                // A plain-text 404: the version discovery gave stopped being served.
                if matches!(&e, kube::Error::Api(s) if s.code == 404) {
                    self.served.forget(&armed.ar.api_version);
                }
                Read::Failed(e)
            }
        }
    }

    /// Deletes record `name` if it is still the version held: one the
    /// webhook wrote again meanwhile (a new arming) stays, and is read again.
    async fn forget(&mut self, name: &str) {
        let Some(rv) = self
            .records
            .held
            .get(name)
            .map(|h| h.resource_version.clone())
        else {
            return;
        };
        match self.options.records.forget(name, &rv).await {
            Ok(true) => self.records.remove(name),
            Ok(false) => self.records.unread(name),
            Err(e) => {
                tracing::warn!(record = name, error = %e, "break-glass sweeper: cannot delete a record (it needs delete on ConfigMaps in its namespace); next tick")
            }
        }
    }

    /// One request of the scan for armed objects without a record
    /// ([`scan`]); each found is recorded.
    async fn scan_step(&mut self) {
        let mut found = Vec::new();
        let client = self.client.clone();
        (self.scan)
            .step(&client, |ar, meta| found.push((ar.clone(), meta)))
            .await;
        if found.is_empty() {
            return;
        }
        let recorded: BTreeSet<String> = (self.records.held.values())
            .map(|h| h.armed.entry())
            .collect();
        let policy = self.policy.current();
        for (ar, meta) in found {
            let object = json!({"kind": ar.kind, "metadata": meta.metadata});
            let namespace = meta.metadata.namespace.unwrap_or_default();
            let name = meta.metadata.name.unwrap_or_default();
            let entry = pause::entry(&ar.group, &ar.kind, &namespace, &name);
            if recorded.contains(&entry)
                || pause::not_armable(&object, &ar.group, &policy).is_some()
            {
                continue;
            }
            // Bounded: armed objects nobody recorded may be a tenant's own
            // (applied from their Git, or in a namespace the webhook
            // excludes); they never take a place at the bound, and cost at
            // most SCAN_RECORDS writes a round.
            let full = self.records.over > 0 || self.records.held.len() >= records::MAX_RECORDS;
            if full || !self.scan.may_record() {
                continue;
            }
            let armed = Armed::found(ar, namespace, name);
            self.record(&armed).await;
        }
    }

    /// Records `armed`, found armed without a record.
    async fn record(&self, armed: &Armed) {
        match self
            .options
            .records
            .record(armed, Duration::from_secs(10))
            .await
        {
            Ok(()) => {
                tracing::info!(object = %armed.entry(), "break-glass sweeper: found an armed object without a record; recorded it")
            }
            Err(e) => {
                tracing::warn!(object = %armed.entry(), error = %e, "break-glass sweeper: cannot record an armed object")
            }
        }
    }

    /// Whether the object a pause entry (`group/Kind:namespace/name`) names
    /// is armed, read now; recorded if it is. `Err(why)` when it cannot be
    /// told (its type not found, the object unreadable), which keeps the
    /// pause as armed does: one is lifted only when its object is known to
    /// hold none. The caller says why, at most once an hour per entry.
    async fn entry_armed(&self, entry: &str, groups: &mut Groups) -> Result<bool, String> {
        let Some((ar, namespace, name)) = resolve_entry(&self.client, entry, groups).await else {
            return Err("a pause entry names a type it cannot find".into());
        };
        let mut armed = Armed::found(ar, namespace, name);
        match self.read(&mut armed).await {
            Read::Gone => Ok(false),
            Read::Unserved => {
                Err("the type a pause entry names is served by no version now".into())
            }
            Read::Failed(e) => Err(format!("cannot read the object a pause entry names ({e})")),
            Read::Object(object) => {
                let policy = self.policy.current();
                let is_armed = pause::not_armable(&object, &armed.ar.group, &policy).is_none();
                if is_armed {
                    self.record(&armed).await;
                }
                Ok(is_armed)
            }
        }
    }

    /// However a break-glass ended (its keys removed by hand, its object
    /// deleted, a restart in between), the Application pause it held is
    /// lifted: found from the Applications' own `PAUSED_FOR` lists, not from
    /// the armed objects alone, in every cluster holding Applications. Only
    /// Applications Argo CD reconciles are read ([`applications`]); a pass
    /// takes its entries fairly, and one not lifted waits ([`orphans`]).
    async fn lift_orphaned_pauses(&mut self) {
        let armed: BTreeSet<String> = (self.records.held.values())
            .filter(|h| h.may_be_armed())
            .map(|h| h.armed.entry())
            .collect();
        let now = Instant::now();
        let Listed {
            found,
            unlisted,
            mut argocd,
            unread,
        } = self.list_orphans(&armed).await;
        for (hub, e) in unread {
            if self.orphans.warn_settings(hub, now) {
                tracing::warn!(error = %e, hub, "break-glass sweeper: cannot list argocd-cmd-params-cm in Argo CD's namespace; until it can, only pauses left behind in that namespace are lifted (said again in an hour at most)");
            }
        }
        self.orphans.found(now, found, unlisted);
        // Each Application and group read once a pass, and at most
        // MAX_ORPHANS_PER_PASS entries, taken fairly: forged lists cost a
        // bounded pass and never take a real entry's place.
        let due = self.orphans.due(now, ORPHAN_GRACE, MAX_ORPHANS_PER_PASS);
        let (mut ours, mut groups) = (BTreeMap::<App, bool>::new(), Groups::new());
        let wait = self.options.interval;
        for key in due {
            let (hub, namespace, name, entry) = &key;
            let app: App = (*hub, namespace.clone(), name.clone());
            let holds = match ours.get(&app) {
                Some(holds) => *holds,
                None => {
                    let settings = argocd.get_mut(hub).expect("listed this pass");
                    let holds = match self.holds_ours(*hub, namespace, name, settings).await {
                        Ok(holds) => holds,
                        Err(e) => {
                            if self.orphans.warn_settings(*hub, now) {
                                tracing::warn!(error = %e, hub, "break-glass sweeper: cannot list the AppProject of an Application outside Argo CD's namespace; until it can, its pauses left behind stay (said again in an hour at most)");
                            }
                            false
                        }
                    };
                    *ours.entry(app.clone()).or_insert(holds)
                }
            };
            if !holds {
                self.orphans.wait_app(&app, now, wait);
                continue;
            }
            // Its object read now: one armed without a record (an arming the
            // webhook did not see) keeps its pause, and is recorded.
            match self.entry_armed(entry, &mut groups).await {
                Ok(false) => {}
                Ok(true) => {
                    self.orphans.wait(&key, now, wait);
                    continue;
                }
                Err(why) => {
                    if self.orphans.wait(&key, now, wait) {
                        tracing::warn!(object = %entry, "break-glass sweeper: {why}; the pause stays (said again in an hour at most)");
                    }
                    continue;
                }
            }
            // Judged again on the read the lift writes from.
            let here = Some(self.here(*hub));
            let resume = AppChange::Resume(entry);
            match application::change(self.argocd(*hub), namespace, name, resume, here).await {
                Ok(changed) => {
                    self.orphans.settled(&key);
                    let state = changed.map_or(AppState::NotListed, |c| c.state);
                    tracing::info!(application = %format!("{namespace}/{name}"), object = %entry, ?state, hub, "break-glass ended without lifting its pause: lifted")
                }
                Err(e) => {
                    self.metrics.break_glass_lift_failures.inc();
                    let application = format!("{namespace}/{name}");
                    match self.orphans.wait(&key, now, wait) {
                        true => {
                            let what = lift_failed(&application, entry, *hub);
                            tracing::warn!(%application, object = %entry, error = %e, hub, "break-glass sweeper: a pause left behind: {what} (said again in an hour at most)")
                        }
                        false => {
                            tracing::debug!(%application, object = %entry, error = %e, hub, "break-glass sweeper: a pause left behind, still refused")
                        }
                    }
                }
            }
        }
        if let n @ 1.. = self.orphans.held_back() {
            tracing::warn!(
                held_back = n,
                "break-glass sweeper: {n} more pauses left behind could not be lifted this pass (each warned about at a later try; all counted in driftguard_break_glass_lift_failures_total)"
            );
        }
    }

    /// Every cluster's Applications listed: the entries of their pauses that
    /// no armed object (`armed`) holds, in namespaces Argo CD takes.
    async fn list_orphans(&self, armed: &BTreeSet<String>) -> Listed {
        let mut out = Listed::default();
        for at in self.installations() {
            let mut listed: Vec<Orphan> = Vec::new();
            let each = |app: PartialObjectMeta<DynamicObject>| {
                let meta = serde_json::to_value(&app.metadata).unwrap_or_default();
                let (namespace, name) = (
                    app.metadata.namespace.unwrap_or_default(),
                    app.metadata.name.unwrap_or_default(),
                );
                for entry in application::orphaned(&meta["annotations"], armed) {
                    listed.push((at.hub, namespace.clone(), name.clone(), entry));
                }
            };
            let selector = self.options.application_selector.as_deref();
            if !list_applications(at.client, selector.filter(|_| at.hub), each).await {
                // Not listed now: what was seen there waits, untouched.
                out.unlisted.insert(at.hub);
                continue;
            }
            // A namespace Argo CD does not take holds no pause of ours.
            let mut settings = Reconciled::new(at.namespace);
            if listed.iter().any(|key| key.1 != at.namespace)
                && let Err(e) = settings.read_namespaces(at.client).await
            {
                out.unread.push((at.hub, e));
            }
            out.found
                .extend(listed.into_iter().filter(|key| settings.admits(&key.1)));
            out.argocd.insert(at.hub, settings);
        }
        out
    }

    /// Whether Application `namespace/name`, of the hub (`hub`) or this
    /// cluster, may hold a pause of ours: Argo CD reconciles it (`argocd`:
    /// that cluster's settings, [`applications`]) and it deploys here. Not
    /// when it cannot be read to tell; `Err` when its AppProject cannot. In this cluster too: if it is
    /// another cluster's hub, that cluster's break-glasses pause its
    /// Applications that deploy there.
    async fn holds_ours(
        &self,
        hub: bool,
        namespace: &str,
        name: &str,
        argocd: &mut Reconciled,
    ) -> Result<bool, kube::Error> {
        let client = self.argocd(hub);
        let api = Api::<DynamicObject>::namespaced_with(
            client.clone(),
            namespace,
            &application::application_resource(),
        );
        let app = match api.get(name).await {
            Ok(app) => serde_json::to_value(app).unwrap_or_default(),
            Err(_) => return Ok(false),
        };
        if self.here(hub).deploys_elsewhere(&app) {
            return Ok(false);
        }
        argocd.reconciles(client, &app).await
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
    /// failures wait for the next tick. Returns whether it was ended: an
    /// object changed since it was read (a 409, which no webhook saw) is
    /// read again, its record kept.
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
                false
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

/// The type and object a pause entry (`group/Kind:namespace/name`) names,
/// its type found by one discovery request for its group; `None` when the
/// entry does not read or its type is not served.
async fn resolve_entry(
    client: &kube::Client,
    entry: &str,
    groups: &mut Groups,
) -> Option<(ApiResource, String, String)> {
    let (group_kind, object) = entry.split_once(':')?;
    let (group, kind) = group_kind.rsplit_once('/')?;
    let (namespace, name) = object.split_once('/')?;
    if !groups.contains_key(group) {
        let served = kube::discovery::oneshot::group(client, group).await.ok();
        groups.insert(group.to_owned(), served);
    }
    let (ar, _) = groups.get(group)?.as_ref()?.recommended_kind(kind)?;
    Some((ar, namespace.to_owned(), name.to_owned()))
}

/// The groups discovered in one pass over pauses left behind, each asked once.
type Groups = BTreeMap<String, Option<kube::discovery::ApiGroup>>;

/// The most pauses left behind one pass reads objects for; the rest wait.
const MAX_ORPHANS_PER_PASS: usize = 256;

mod applications;
mod orphans;
mod records;
mod scan;
mod served;

#[cfg(test)]
mod tests;
