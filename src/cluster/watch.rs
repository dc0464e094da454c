//! `--watch-argocd` and `--watch-flux`: watches over Applications, the
//! AppProjects and the `argocd-cm` and `argocd-cmd-params-cm` ConfigMaps in
//! Argo CD's namespace,
//! Kustomizations and HelmReleases. An event recompiles only its object, and
//! only when what driftguard reads of it changed ([`SourceCache`]); the
//! decision reads an immutable snapshot swapped in whole, so it never waits
//! for a writer. A watch that fails or lags never blocks admission: the last
//! good sources keep serving, their age is a metric. A watch that never
//! listed (a hub out of reach since start) is unread: its tool's loosenings
//! are left out of the snapshot until it lists ([`Sources::unread`]), so
//! decisions take the strictest reading meanwhile. A kind whose CRD is not
//! installed counts as filled and empty.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher::Event;
use kube::runtime::{WatchStreamExt, watcher};

use super::source_cache::{Kind, SourceCache, strip};
use super::source_cost::{Cap, Limits};
use crate::metrics::{Metrics, RefusedLabels, SourceLabels};
use crate::policy::Application;
use crate::policy::app_namespaces;
use crate::policy::argocd::{DiffMode, ThisCluster};
use crate::policy::flux::FluxSource;
use crate::policy::ignore::RuleSet;
use crate::sources::Sources;

/// The sources in force, replaced whole on every change. The lock is held
/// only to clone or store the pointer, never while compiling.
#[derive(Clone, Default)]
pub struct SourcesHandle(Arc<RwLock<Arc<Sources>>>);

impl SourcesHandle {
    pub fn current(&self) -> Arc<Sources> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn replace(&self, sources: Sources) {
        let sources = Arc::new(sources);
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = sources;
    }
}

pub struct Watches {
    pub handle: SourcesHandle,
    /// Taken by the watch tasks only, one event at a time; readers use
    /// `handle`. The first holds Flux and the Argo CD read first (the hub's
    /// when there is one); the second, this cluster's own Argo CD beside a
    /// hub's (`--local-argocd-namespace`).
    caches: Mutex<Vec<SourceCache>>,
    /// Watches whose first list has not completed yet.
    unread: Mutex<Vec<Source>>,
    /// When a watch last reported: the sources were current then.
    last_change: Mutex<Instant>,
    /// Watched kinds whose group the apiserver serves, but not at the
    /// version driftguard reads, each described.
    mismatched: Mutex<BTreeMap<&'static str, String>>,
}

impl Watches {
    /// The watches never filled, by name.
    pub fn unread(&self) -> Vec<&'static str> {
        let unread = self.unread.lock().unwrap_or_else(|e| e.into_inner());
        unread.iter().map(|u| u.label).collect()
    }

    /// `source` listed for the first time: the snapshot gains its tool's
    /// rules, unless another of that tool's watches is still unread.
    fn filled_now(&self, source: Source) {
        let mut unread = self.unread.lock().unwrap_or_else(|e| e.into_inner());
        unread.retain(|u| u.label != source.label);
        drop(unread);
        self.publish(&self.caches.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// Publishes the caches' snapshot; called with the caches locked, so
    /// that the last one published is the current one.
    fn publish(&self, caches: &[SourceCache]) {
        let unread = self
            .unread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        self.handle.replace(snapshot(caches, &unread));
    }

    /// Objects of `kind` in cache `at`, and those refused by each cap.
    fn count(&self, at: usize, kind: Kind) -> (usize, [usize; 3]) {
        let caches = self.caches.lock().unwrap_or_else(|e| e.into_inner());
        let refused = Cap::ALL.map(|cap| caches[at].refused(kind, cap));
        (caches[at].count(kind), refused)
    }

    /// Watched kinds served at another version only, described.
    pub fn mismatched(&self) -> Vec<String> {
        self.mismatched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    fn set_mismatch(&self, what: &'static str, why: Option<String>) {
        let mut map = self.mismatched.lock().unwrap_or_else(|e| e.into_inner());
        match why {
            Some(why) => map.insert(what, why),
            None => map.remove(what),
        };
    }

    pub fn age_seconds(&self) -> f64 {
        self.last_change
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
            .as_secs_f64()
    }

    /// Applies one event to cache `at`; publishes a snapshot only if the
    /// sources changed.
    /// A change published with the next [`Self::update`] (a relist's
    /// objects: one snapshot when it completes, not one per object).
    fn update_quietly(&self, at: usize, change: impl FnOnce(&mut SourceCache)) {
        let mut caches = self.caches.lock().unwrap_or_else(|e| e.into_inner());
        change(&mut caches[at]);
    }

    fn update(&self, at: usize, change: impl FnOnce(&mut SourceCache) -> bool) {
        let mut caches = self.caches.lock().unwrap_or_else(|e| e.into_inner());
        if change(&mut caches[at]) {
            self.publish(&caches);
        }
        *self.last_change.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }
}

/// One watch: the cache it fills, its tool, and its name in metrics and logs.
#[derive(Clone, Copy, Debug)]
struct Source {
    at: usize,
    flux: bool,
    label: &'static str,
}

/// All caches' sources as one: each Argo CD installation apart, the listed
/// objects merged (the first lister named, as within one cache). A cache
/// with a tool's watch `unread` lends none of that tool's loosenings, even
/// from objects already listed (an AppProject not read yet may refuse an
/// Application): no ignore rules, sync accounts or service accounts, and
/// Argo CD's legacy diff. What only makes decisions stricter stays: the
/// records' listed objects, where Applications deploy and HelmReleases
/// install, the instance label and the installation id.
fn snapshot(caches: &[SourceCache], unread: &[Source]) -> Sources {
    let unread_in = |at: usize, flux: bool| unread.iter().any(|u| u.at == at && u.flux == flux);
    let mut parts = caches.iter().enumerate().map(|(at, cache)| {
        let mut part = cache.snapshot();
        if unread_in(at, false) {
            for argocd in &mut part.argocd {
                argocd.applications = argocd.applications.iter().map(strict_app).collect();
                argocd.overrides = Arc::default();
                argocd.sync_accounts.clear();
            }
        }
        if unread_in(at, true) {
            part.flux = part.flux.iter().map(strict_flux).collect();
        }
        part
    });
    let mut all = parts.next().unwrap_or_default();
    for mut part in parts {
        all.argocd.extend(std::mem::take(&mut part.argocd));
        all.flux.extend(std::mem::take(&mut part.flux));
        if !part.planned.is_empty() {
            let mut merged = (*all.planned).clone();
            let mut more = (*all.more_listers).clone();
            for (key, by) in part.listings() {
                super::source_cache::add_lister(&mut merged, &mut more, key, by);
            }
            all.planned = Arc::new(merged);
            all.more_listers = Arc::new(more);
        }
        if !part.scopes.is_empty() {
            let mut scopes = (*all.scopes).clone();
            scopes.extend(part.scopes.iter().cloned());
            all.scopes = Arc::new(scopes);
        }
    }
    all.unread = unread.iter().map(|u| u.label).collect();
    all
}

/// An Application without what would loosen a decision (its ignore rules,
/// a server-side diff) while its installation is not fully read.
fn strict_app(app: &Arc<Application>) -> Arc<Application> {
    Arc::new(Application {
        name: app.name.clone(),
        namespace: app.namespace.clone(),
        repo_url: app.repo_url.clone(),
        path: app.path.clone(),
        destination_namespace: app.destination_namespace.clone(),
        project: app.project.clone(),
        sync_destination: app.sync_destination.clone(),
        sync_servers: app.sync_servers.clone(),
        application_set: app.application_set.clone(),
        rules: RuleSet::default(),
        diff: DiffMode::Legacy,
    })
}

/// A Flux object without what would loosen a decision (its ignore rules,
/// the service account it impersonates) while its Flux is not fully read.
fn strict_flux(source: &Arc<FluxSource>) -> Arc<FluxSource> {
    Arc::new(FluxSource {
        kind: source.kind,
        namespace: source.namespace.clone(),
        name: source.name.clone(),
        service_account: None,
        source: source.source.clone(),
        rules: Vec::new(),
        release_namespace: source.release_namespace.clone(),
    })
}

pub struct WatchOptions {
    pub argocd: bool,
    pub argocd_namespace: String,
    /// Beside a hub's Argo CD, this cluster's own, in this namespace.
    pub local_argocd_namespace: Option<String>,
    pub flux: bool,
    /// A hub's Argo CD (its Applications, AppProjects and argocd-cm live
    /// there), instead of this cluster's.
    pub argocd_hub: Option<kube::Client>,
    /// A hub's Flux (its Kustomizations and HelmReleases), instead of this
    /// cluster's.
    pub flux_hub: Option<kube::Client>,
    /// The names a hub knows this cluster by (`--cluster-name`).
    pub cluster_names: Vec<String>,
    /// Flux's `--default-service-account` (`--flux-default-service-account`).
    pub flux_default_service_account: Option<String>,
    /// Beside a hub's Flux, this cluster's own (`--local-flux`).
    pub local_flux: bool,
    /// What each source may cost (`--source-max-bytes` and the others),
    /// applied to each cache.
    pub limits: Limits,
}

/// Starts the watches and returns the shared state they keep current.
pub fn spawn(client: kube::Client, options: &WatchOptions, metrics: Arc<Metrics>) -> Arc<Watches> {
    let this_cluster = match options.argocd_hub {
        Some(_) => ThisCluster::named(&options.cluster_names),
        None => ThisCluster::default(),
    };
    let mut cache = SourceCache::for_cluster(&options.argocd_namespace, this_cluster);
    if options.flux_hub.is_some() {
        cache = cache.with_hub_flux(options.cluster_names.clone());
    }
    if !options.argocd {
        cache = cache.without_argocd();
    }
    cache = cache.with_flux_default_service_account(options.flux_default_service_account.clone());
    let local_argocd = options
        .local_argocd_namespace
        .as_ref()
        .filter(|_| options.argocd && options.argocd_hub.is_some());
    let mut caches = vec![cache];
    caches.extend(local_argocd.map(|ns| SourceCache::new(ns)));
    // This cluster's own Flux beside a hub's, in a cache of its own: a
    // Kustomization with `spec.kubeConfig` applies elsewhere from here.
    let local_flux =
        (options.local_flux && options.flux && options.flux_hub.is_some()).then(|| {
            let flux = SourceCache::new(&options.argocd_namespace)
                .without_argocd()
                .with_flux_default_service_account(options.flux_default_service_account.clone());
            caches.push(flux);
            caches.len() - 1
        });
    let caches = caches
        .into_iter()
        .map(|c| c.with_limits(options.limits))
        .collect();
    let watches = Arc::new(Watches {
        handle: SourcesHandle::default(),
        caches: Mutex::new(caches),
        unread: Mutex::new(Vec::new()),
        last_change: Mutex::new(Instant::now()),
        mismatched: Mutex::new(BTreeMap::new()),
    });
    if options.argocd {
        let first = options.argocd_hub.as_ref().unwrap_or(&client);
        let labels = [
            "Application",
            "AppProject",
            "argocd-cm",
            "argocd-cmd-params-cm",
        ];
        watch_argocd(
            &watches,
            first,
            &options.argocd_namespace,
            (0, labels),
            &metrics,
        );
    }
    if let Some(namespace) = local_argocd {
        let labels = [
            "local Application",
            "local AppProject",
            "local argocd-cm",
            "local argocd-cmd-params-cm",
        ];
        watch_argocd(&watches, &client, namespace, (1, labels), &metrics);
    }
    if options.flux {
        let first = options.flux_hub.as_ref().unwrap_or(&client);
        let labels = ["Kustomization", "HelmRelease"];
        watch_flux(&watches, first, (0, labels), &metrics);
    }
    if let Some(at) = local_flux {
        let labels = ["local Kustomization", "local HelmRelease"];
        watch_flux(&watches, &client, (at, labels), &metrics);
    }
    // Every watch is registered unread: publish before the first decision.
    watches.publish(&watches.caches.lock().unwrap_or_else(|e| e.into_inner()));
    watches
}

/// The watches over one Flux, the Kustomizations and HelmReleases of the
/// cluster `client` reaches, into cache `at`; `labels` name them in metrics
/// and logs.
fn watch_flux(
    watches: &Arc<Watches>,
    client: &kube::Client,
    (at, labels): (usize, [&'static str; 2]),
    metrics: &Arc<Metrics>,
) {
    let dynamic = |group: &str, version: &str, kind: &str| {
        ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
    };
    let kinds = [
        (
            Kind::Kustomization,
            dynamic("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
        ),
        (
            Kind::HelmRelease,
            dynamic("helm.toolkit.fluxcd.io", "v2", "HelmRelease"),
        ),
    ];
    for ((kind, ar), label) in kinds.into_iter().zip(labels) {
        let api = Api::<DynamicObject>::all_with(client.clone(), &ar);
        let served = Served::new(client, &ar);
        watch_dynamic(watches, api, served, kind, (at, label), metrics.clone());
    }
}

/// The watches over one Argo CD installation, in `namespace` of the cluster
/// `client` reaches, into cache `at`; `labels` name its Applications,
/// AppProjects, argocd-cm and argocd-cmd-params-cm in metrics and logs.
fn watch_argocd(
    watches: &Arc<Watches>,
    client: &kube::Client,
    namespace: &str,
    (at, labels): (usize, [&'static str; 4]),
    metrics: &Arc<Metrics>,
) {
    let ar = crate::breakglass::application::application_resource();
    let api = Api::<DynamicObject>::all_with(client.clone(), &ar);
    let served = Served::new(client, &ar);
    let kind = Kind::Application;
    watch_dynamic(watches, api, served, kind, (at, labels[0]), metrics.clone());
    // Argo CD reads an Application's project from its own namespace only.
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "argoproj.io",
        "v1alpha1",
        "AppProject",
    ));
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &ar);
    let served = Served::new(client, &ar);
    let kind = Kind::AppProject;
    watch_dynamic(watches, api, served, kind, (at, labels[1]), metrics.clone());
    type ApplyCm = fn(&mut SourceCache, Option<&ConfigMap>) -> bool;
    let cms: [(&str, ApplyCm); 2] = [
        ("argocd-cm", SourceCache::apply_cm),
        (app_namespaces::CMD_PARAMS_CM, SourceCache::apply_params_cm),
    ];
    for ((name, apply), label) in cms.into_iter().zip(labels[2..].iter().copied()) {
        let api = Api::<ConfigMap>::namespaced(client.clone(), namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let stream = watcher(api, config)
            .modify(|cm: &mut ConfigMap| cm.metadata.managed_fields = None)
            .default_backoff();
        let mut listed: Option<ConfigMap> = None;
        run(
            watches,
            stream,
            None,
            Source {
                at,
                flux: false,
                label,
            },
            metrics.clone(),
            move |w, event| match event {
                Event::Init => listed = None,
                Event::InitApply(cm) => listed = Some(cm),
                Event::InitDone => w.update(at, |c| apply(c, listed.take().as_ref())),
                Event::Apply(cm) => w.update(at, |c| apply(c, Some(&cm))),
                Event::Delete(_) => w.update(at, |c| apply(c, None)),
            },
        );
    }
}

/// Objects per list page of a watched source kind (kube's default is 500).
const LIST_PAGE: u32 = 50;

/// A watch over one dynamic kind. kube's `predicate_filter` is not used: it
/// sees applied objects only, and a source cache needs deletes and relist
/// boundaries too; [`SourceCache`] keeps the same per-uid hash itself.
fn watch_dynamic(
    watches: &Arc<Watches>,
    api: Api<DynamicObject>,
    served: Served,
    kind: Kind,
    (at, label): (usize, &'static str),
    metrics: Arc<Metrics>,
) {
    // Small pages: a page of tenants' objects (up to 1.5 MiB each in etcd)
    // is held whole before `strip` and the cost caps see it.
    let stream = watcher(api, watcher::Config::default().page_size(LIST_PAGE))
        .modify(strip)
        .default_backoff();
    let cached = metrics
        .sources_objects
        .get_or_create(&SourceLabels { source: label })
        .clone();
    let refused = Cap::ALL.map(|cap| {
        let labels = RefusedLabels {
            source: label,
            cap: cap.as_str(),
        };
        metrics.sources_refused.get_or_create(&labels).clone()
    });
    run(
        watches,
        stream,
        Some(served),
        Source {
            at,
            flux: matches!(kind, Kind::Kustomization | Kind::HelmRelease),
            label,
        },
        metrics,
        move |w, event| {
            // A relist's objects are charged and applied as they arrive,
            // never held until it completes; its end drops what it missed.
            match event {
                Event::Init => w.update_quietly(at, |c| c.relist_start(kind)),
                Event::InitApply(o) => w.update_quietly(at, |c| {
                    c.relist_apply(kind, &o);
                }),
                Event::InitDone => w.update(at, |c| {
                    c.relist_done(kind);
                    true
                }),
                Event::Apply(o) => w.update(at, |c| c.apply(kind, &o)),
                Event::Delete(o) => w.update(at, |c| c.delete(kind, &o)),
            }
            let (count, over) = w.count(at, kind);
            cached.set(count as i64);
            for (gauge, n) in refused.iter().zip(over) {
                gauge.set(n as i64);
            }
        },
    );
}

/// What a 404 for a watched kind means: its group not served at all (the
/// CRD is not installed), or served at other versions only (a Flux or Argo
/// CD older or newer than driftguard reads), which must never pass for
/// "not installed": the sources would stay empty without a word.
struct Served {
    client: kube::Client,
    group: String,
    version: String,
    kind: String,
}

impl Served {
    fn new(client: &kube::Client, ar: &ApiResource) -> Self {
        Self {
            client: client.clone(),
            group: ar.group.clone(),
            version: ar.version.clone(),
            kind: ar.kind.clone(),
        }
    }

    /// `None` when the kind is not served at any version of its group (its
    /// CRD is not installed); else the versions that serve it. Those include
    /// ours only in a race with the CRD's creation: the watch retries then.
    async fn other_versions(&self) -> Result<Option<Vec<String>>, kube::Error> {
        let groups = self.client.list_api_groups().await?;
        let Some(group) = groups.groups.into_iter().find(|g| g.name == self.group) else {
            return Ok(None);
        };
        let mut serving = Vec::new();
        for version in group.versions {
            let resources = self
                .client
                .list_api_group_resources(&version.group_version)
                .await?;
            if resources
                .resources
                .iter()
                .any(|r| r.kind == self.kind && !r.name.contains('/'))
            {
                serving.push(version.version);
            }
        }
        Ok((!serving.is_empty()).then_some(serving))
    }

    fn describe(&self, what: &str, versions: &[String]) -> String {
        format!(
            "{what}: driftguard reads {}/{}, the apiserver serves {} at {} only",
            self.group,
            self.version,
            self.group,
            versions.join(", ")
        )
    }
}

fn run<K, S>(
    watches: &Arc<Watches>,
    stream: S,
    served: Option<Served>,
    source: Source,
    metrics: Arc<Metrics>,
    mut on_event: impl FnMut(&Watches, Event<K>) + Send + 'static,
) where
    K: Send + 'static,
    S: futures_util::Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
{
    let what = source.label;
    let unread = metrics
        .sources_unread
        .get_or_create(&SourceLabels { source: what })
        .clone();
    unread.set(1);
    (watches.unread.lock().unwrap_or_else(|e| e.into_inner())).push(source);
    let watches = watches.clone();
    tokio::spawn(async move {
        let mut filled = false;
        let mismatch = metrics
            .sources_version_mismatch
            .get_or_create(&SourceLabels { source: what })
            .clone();
        let failing = metrics
            .sources_failing
            .get_or_create(&SourceLabels { source: what })
            .clone();
        let mut failing_since: Option<Instant> = None;
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if event.is_ok() {
                failing_since = None;
                failing.set(0.0);
            } else {
                let since = *failing_since.get_or_insert_with(Instant::now);
                failing.set(since.elapsed().as_secs_f64());
            }
            match event {
                Ok(event) => {
                    let done = matches!(event, Event::InitDone);
                    on_event(&watches, event);
                    if done {
                        watches.set_mismatch(what, None);
                        mismatch.set(0);
                    }
                    if done && !filled {
                        filled = true;
                        unread.set(0);
                        watches.filled_now(source);
                        tracing::info!(source = what, "watch filled");
                    }
                }
                Err(e) => {
                    metrics.reject_watch(what);
                    let other_versions = match (&served, not_installed(&e) && !filled) {
                        (_, false) => Err(None),
                        (None, true) => Ok(None),
                        (Some(s), true) => s.other_versions().await.map_err(Some),
                    };
                    match other_versions {
                        Ok(None) => {
                            // The CRD is not installed: nothing to learn, nothing to wait for.
                            filled = true;
                            unread.set(0);
                            watches.filled_now(source);
                            tracing::warn!(
                                source = what,
                                "not installed in this cluster; watching nothing"
                            );
                        }
                        Ok(Some(versions))
                            if served
                                .as_ref()
                                .is_some_and(|s| versions.contains(&s.version)) =>
                        {
                            tracing::warn!(
                                source = what,
                                "not served a moment ago, served now: retrying"
                            );
                        }
                        Ok(Some(versions)) => {
                            let why = served
                                .as_ref()
                                .map(|s| s.describe(what, &versions))
                                .unwrap_or_default();
                            if mismatch.get() == 0 {
                                tracing::error!(
                                    source = what,
                                    "{why}: not ready until it is served at that version (upgrade or downgrade driftguard or the tool, or turn its detector off in the policy)"
                                );
                            }
                            watches.set_mismatch(what, Some(why));
                            mismatch.set(1);
                        }
                        Err(Some(d)) => {
                            tracing::warn!(source = what, error = %d, "a watched kind is not served, and discovery failed: retrying");
                        }
                        Err(None) => {
                            tracing::warn!(source = what, error = %e, "watch failed; serving the last good sources");
                        }
                    }
                }
            }
        }
    });
}

/// The apiserver does not serve the resource (404): its CRD is not installed.
/// kube turns a 404 without a JSON `Status` body into `Error::Api` too.
fn not_installed(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::WatchError(status) => status.code == 404,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    /// A hub's Argo CD and this cluster's own stay two installations in the
    /// published sources; what each lists is merged, the first lister kept.
    #[test]
    fn the_caches_publish_one_installation_each() {
        let app = |uid: &str, ns: &str, listed: &str| -> DynamicObject {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": "web", "namespace": ns, "uid": uid},
                "spec": {"destination": {"server": "https://kubernetes.default.svc", "namespace": "shop"}},
                "status": {"resources": [{"group": "apps", "kind": "Deployment", "namespace": "shop", "name": listed}]}
            }))
            .unwrap()
        };
        let mut hub = SourceCache::new("argocd");
        let mut here = SourceCache::new("team-argocd");
        hub.apply(Kind::Application, &app("u1", "argocd", "a"));
        here.apply(Kind::Application, &app("u2", "team-argocd", "a"));
        here.apply(Kind::Application, &app("u3", "team-argocd", "b"));
        let all = snapshot(&[hub, here], &[]);
        let namespaces: Vec<_> = all.argocd.iter().map(|a| a.namespace()).collect();
        assert_eq!(namespaces, ["argocd", "team-argocd"]);
        assert_eq!(all.argocd[1].applications.len(), 2);
        let lister = |key: &str| match all.planned.get(key) {
            Some(crate::drift::Manager::ArgoCd {
                application_namespace,
                ..
            }) => application_namespace.clone(),
            _ => None,
        };
        assert_eq!(lister("apps/Deployment:shop/a").as_deref(), Some("argocd"));
        assert_eq!(
            lister("apps/Deployment:shop/b").as_deref(),
            Some("team-argocd")
        );
    }

    /// A hub's Flux and this cluster's own: both Kustomizations published,
    /// each cache reading `spec.kubeConfig` from where its Flux runs.
    #[test]
    fn a_hubs_flux_and_this_clusters_own_are_both_published() {
        let kustomization = |uid: &str, kube_config: Option<&str>| -> DynamicObject {
            let mut spec = serde_json::json!({"path": "./apps"});
            if let Some(secret) = kube_config {
                spec["kubeConfig"] = serde_json::json!({"secretRef": {"name": secret}});
            }
            serde_json::from_value(serde_json::json!({
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                "metadata": {"name": uid, "namespace": "flux-system", "uid": uid},
                "spec": spec,
                "status": {"inventory": {"entries": [{"id": format!("shop_{uid}_apps_Deployment"), "v": "v1"}]}}
            }))
            .unwrap()
        };
        let mut hub = SourceCache::new("argocd")
            .without_argocd()
            .with_hub_flux(vec!["spoke-1".into()]);
        let mut here = SourceCache::new("argocd").without_argocd();
        hub.apply(Kind::Kustomization, &kustomization("hub", Some("spoke-1")));
        here.apply(Kind::Kustomization, &kustomization("here", None));
        here.apply(
            Kind::Kustomization,
            &kustomization("remote", Some("spoke-2")),
        );
        let all = snapshot(&[hub, here], &[]);
        let mut names: Vec<_> = all.flux.iter().map(|s| s.name.as_str()).collect();
        names.sort_unstable();
        // `remote` applies to another cluster: it lends nothing here.
        assert_eq!(names, ["here", "hub"]);
        assert!(all.argocd.is_empty());
        // What each lists counts only where it applies: here.
        let listed: Vec<_> = all.planned.keys().map(String::as_str).collect();
        assert!(listed.contains(&"apps/Deployment:shop/hub"), "{listed:?}");
        assert!(listed.contains(&"apps/Deployment:shop/here"), "{listed:?}");
        assert!(
            !listed.contains(&"apps/Deployment:shop/remote"),
            "{listed:?}"
        );
    }

    /// A tool's watch never listed: none of that tool's loosenings in the
    /// cache's snapshot, not even what its other watches listed; what only
    /// makes decisions stricter (what the records list) stays, and so does
    /// the other tool's. Listed at last, the rules are back.
    #[test]
    fn an_unread_watch_lends_its_tool_no_loosening() {
        let app: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "web", "namespace": "argocd", "uid": "u1"},
            "spec": {"destination": {"server": "https://kubernetes.default.svc", "namespace": "shop"},
                     "ignoreDifferences": [{"group": "apps", "kind": "Deployment", "jsonPointers": ["/spec/replicas"]}]},
            "status": {"resources": [{"group": "apps", "kind": "Deployment", "namespace": "shop", "name": "web"}]}
        }))
        .unwrap();
        let kustomization: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "flux-system", "uid": "u2"},
            "spec": {"ignore": [{"paths": ["/spec/replicas"], "target": {"kind": "Deployment"}}]}
        }))
        .unwrap();
        let mut cache = SourceCache::new("argocd");
        cache.apply(Kind::Application, &app);
        cache.apply(Kind::Kustomization, &kustomization);
        let caches = std::slice::from_ref(&cache);
        let read = snapshot(caches, &[]);
        assert_eq!(read.argocd[0].applications.len(), 1);
        assert!(read.unread.is_empty());

        let project = |flux, label| Source { at: 0, flux, label };
        let rules = |app: &Application| {
            let target = crate::policy::Target {
                group: "apps",
                kind: "Deployment",
                name: "web",
                namespace: "shop",
            };
            app.rules.matching(&target).len()
        };
        let without_projects = snapshot(caches, &[project(false, "AppProject")]);
        let argocd = &without_projects.argocd[0];
        assert!(argocd.sync_accounts.is_empty());
        // Where it deploys still guards that Namespace; its rules are gone.
        let app = &argocd.applications[0];
        assert_eq!(app.destination_namespace.as_deref(), Some("shop"));
        assert_eq!(rules(app), 0);
        assert_eq!(rules(&read.argocd[0].applications[0]), 1);
        assert_eq!(without_projects.flux[0].rules.len(), 1, "Flux was read");
        assert!(
            without_projects
                .planned
                .contains_key("apps/Deployment:shop/web")
        );
        assert_eq!(without_projects.unread, ["AppProject"]);

        let without_flux = snapshot(caches, &[project(true, "HelmRelease")]);
        assert!(without_flux.flux[0].rules.is_empty());
        assert_eq!(
            rules(&without_flux.argocd[0].applications[0]),
            1,
            "Argo CD was read"
        );
        // Another cache's unread watch leaves this one's rules alone.
        let elsewhere = Source {
            at: 1,
            flux: false,
            label: "local Application",
        };
        assert_eq!(
            rules(&snapshot(caches, &[elsewhere]).argocd[0].applications[0]),
            1
        );
    }

    #[test]
    fn only_a_404_means_not_installed() {
        let api = |code| kube::Error::Api(Status::failure("x", "y").with_code(code).boxed());
        assert!(not_installed(&watcher::Error::InitialListFailed(api(404))));
        assert!(not_installed(&watcher::Error::WatchError(
            Status::failure("x", "y").with_code(404).boxed()
        )));
        assert!(!not_installed(&watcher::Error::InitialListFailed(api(403))));
        // A message that merely mentions 404 is not a 404.
        let text = kube::Error::Api(
            Status::failure("pod web-404 not ready", "y")
                .with_code(500)
                .boxed(),
        );
        assert!(!not_installed(&watcher::Error::WatchFailed(text)));
    }
}
