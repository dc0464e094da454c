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
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Instant;

mod kinds;
pub use kinds::check_application_selector;
mod snapshot;
mod task;

use super::hub::ToolSources;
use super::source_cache::{Kind, SourceCache};
use super::source_cost::{Cap, Limits};
use crate::metrics::Metrics;
use crate::sources::Sources;
use kinds::{watch_argocd, watch_flux};
use snapshot::snapshot;

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
        let unread = lock(&self.unread);
        unread.iter().map(|u| u.label).collect()
    }

    /// `source` listed for the first time: the snapshot gains its tool's
    /// rules, unless another of that tool's watches is still unread.
    fn filled_now(&self, source: Source) {
        let mut unread = lock(&self.unread);
        unread.retain(|u| u.label != source.label);
        drop(unread);
        self.publish(&lock(&self.caches));
    }

    /// Publishes the caches' snapshot; called with the caches locked, so
    /// that the last one published is the current one.
    fn publish(&self, caches: &[SourceCache]) {
        let unread = lock(&self.unread).clone();
        self.handle.replace(snapshot(caches, &unread));
    }

    /// Objects of `kind` in cache `at`, those refused by each cap, and the
    /// foreign Applications and their events so far.
    fn count(&self, at: usize, kind: Kind) -> (usize, [usize; 3], (usize, u64)) {
        let caches = lock(&self.caches);
        let refused = Cap::ALL.map(|cap| caches[at].refused(kind, cap));
        (caches[at].count(kind), refused, caches[at].foreign())
    }

    /// Watched kinds served at another version only, described.
    pub fn mismatched(&self) -> Vec<String> {
        lock(&self.mismatched).values().cloned().collect()
    }

    fn set_mismatch(&self, what: &'static str, why: Option<String>) {
        let mut map = lock(&self.mismatched);
        match why {
            Some(why) => map.insert(what, why),
            None => map.remove(what),
        };
    }

    pub fn age_seconds(&self) -> f64 {
        lock(&self.last_change).elapsed().as_secs_f64()
    }

    /// Applies one event to cache `at`; publishes a snapshot only if the
    /// sources changed.
    /// A change published with the next [`Self::update`] (a relist's
    /// objects: one snapshot when it completes, not one per object).
    fn update_quietly(&self, at: usize, change: impl FnOnce(&mut SourceCache)) {
        let mut caches = lock(&self.caches);
        change(&mut caches[at]);
    }

    fn update(&self, at: usize, change: impl FnOnce(&mut SourceCache) -> bool) {
        let mut caches = lock(&self.caches);
        if change(&mut caches[at]) {
            self.publish(&caches);
        }
        *lock(&self.last_change) = Instant::now();
    }
}

/// `mutex` locked; a panic while it was held left nothing half-done.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// One watch: the cache it fills, its tool, and its name in metrics and logs.
#[derive(Clone, Copy, Debug)]
struct Source {
    at: usize,
    flux: bool,
    label: &'static str,
}

pub struct WatchOptions {
    pub argocd: bool,
    pub argocd_namespace: String,
    /// Where Argo CD is read (a hub's, this cluster's own in a namespace, or both).
    pub argocd_sources: ToolSources<String>,
    /// The label selector of the hub's Applications
    /// (`--argocd-application-selector`).
    pub argocd_application_selector: Option<String>,
    pub flux: bool,
    /// Where Flux is read (a hub's, this cluster's own, or both).
    pub flux_sources: ToolSources,
    /// Flux's `--default-service-account` (`--flux-default-service-account`).
    pub flux_default_service_account: Option<String>,
    /// What each source may cost (`--source-max-bytes` and the others),
    /// applied to each cache.
    pub limits: Limits,
}

/// Starts the watches and returns the shared state they keep current.
pub fn spawn(client: kube::Client, options: &WatchOptions, metrics: Arc<Metrics>) -> Arc<Watches> {
    let (argocd, flux) = (&options.argocd_sources, &options.flux_sources);
    let mut cache = SourceCache::for_cluster(&options.argocd_namespace, argocd.this_cluster());
    if flux.hub.is_some() {
        cache = cache.with_hub_flux(flux.cluster_names.clone());
    }
    if !options.argocd {
        cache = cache.without_argocd();
    }
    cache = cache.with_flux_default_service_account(options.flux_default_service_account.clone());
    let local_argocd = argocd.beside_hub().filter(|_| options.argocd);
    let mut caches = vec![cache];
    caches.extend(local_argocd.map(|ns| SourceCache::new(ns)));
    // This cluster's own Flux beside a hub's, in a cache of its own: a
    // Kustomization with `spec.kubeConfig` applies elsewhere from here.
    let local_flux = (flux.beside_hub().is_some() && options.flux).then(|| {
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
        let first = argocd.client(&client);
        let labels = [
            "Application",
            "AppProject",
            "argocd-cm",
            "argocd-cmd-params-cm",
        ];
        let namespace = (options.argocd_namespace.as_str(), argocd.this_cluster());
        let selector = options.argocd_application_selector.as_deref();
        watch_argocd(&watches, first, namespace, selector, (0, labels), &metrics);
    }
    if let Some(namespace) = local_argocd {
        let labels = [
            "local Application",
            "local AppProject",
            "local argocd-cm",
            "local argocd-cmd-params-cm",
        ];
        let namespace = (namespace.as_str(), Default::default());
        watch_argocd(&watches, &client, namespace, None, (1, labels), &metrics);
    }
    if options.flux {
        let first = flux.client(&client);
        let labels = ["Kustomization", "HelmRelease"];
        watch_flux(&watches, first, (0, labels), &metrics);
    }
    if let Some(at) = local_flux {
        let labels = ["local Kustomization", "local HelmRelease"];
        watch_flux(&watches, &client, (at, labels), &metrics);
    }
    // Every watch is registered unread: publish before the first decision.
    watches.publish(&lock(&watches.caches));
    watches
}
