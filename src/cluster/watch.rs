//! `--watch-argocd` and `--watch-flux`: watches over Applications, the
//! AppProjects and the `argocd-cm` ConfigMap in Argo CD's namespace,
//! Kustomizations and HelmReleases. An event recompiles only its object, and
//! only when what driftguard reads of it changed ([`SourceCache`]); the
//! decision reads an immutable snapshot swapped in whole, so it never waits
//! for a writer. A watch that fails or lags never blocks admission: the last
//! good sources keep serving, their age is a metric, and only a cache that
//! was never filled keeps driftguard unready. A kind whose CRD is not
//! installed counts as filled and empty.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher::Event;
use kube::runtime::{WatchStreamExt, watcher};

use super::source_cache::{Kind, SourceCache, strip};
use crate::metrics::{Metrics, SourceLabels};
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
    /// Taken by the watch tasks only, one event at a time; readers use `handle`.
    cache: Mutex<SourceCache>,
    /// Watches whose first list has not completed yet.
    pending: AtomicUsize,
    /// When a watch last reported: the sources were current then.
    last_change: Mutex<Instant>,
}

impl Watches {
    /// Ready once every watch has been filled at least once.
    pub fn filled(&self) -> bool {
        self.pending.load(Ordering::SeqCst) == 0
    }

    fn count(&self, kind: Kind) -> usize {
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .count(kind)
    }

    pub fn age_seconds(&self) -> f64 {
        self.last_change
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
            .as_secs_f64()
    }

    /// Applies one event to the cache; publishes a snapshot only if the
    /// sources changed.
    fn update(&self, change: impl FnOnce(&mut SourceCache) -> bool) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if change(&mut cache) {
            self.handle.replace(cache.snapshot());
        }
        *self.last_change.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }
}

pub struct WatchOptions {
    pub argocd: bool,
    pub argocd_namespace: String,
    pub flux: bool,
}

/// Starts the watches and returns the shared state they keep current.
pub fn spawn(client: kube::Client, options: &WatchOptions, metrics: Arc<Metrics>) -> Arc<Watches> {
    let watches = Arc::new(Watches {
        handle: SourcesHandle::default(),
        cache: Mutex::new(SourceCache::new(&options.argocd_namespace)),
        pending: AtomicUsize::new(0),
        last_change: Mutex::new(Instant::now()),
    });
    let dynamic = |group: &str, version: &str, kind: &str| {
        ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
    };
    if options.argocd {
        let ar = dynamic("argoproj.io", "v1alpha1", "Application");
        let api = Api::<DynamicObject>::all_with(client.clone(), &ar);
        watch_dynamic(&watches, api, Kind::Application, metrics.clone());
        // Argo CD reads an Application's project from its own namespace only.
        let ar = dynamic("argoproj.io", "v1alpha1", "AppProject");
        let api =
            Api::<DynamicObject>::namespaced_with(client.clone(), &options.argocd_namespace, &ar);
        watch_dynamic(&watches, api, Kind::AppProject, metrics.clone());
        let api = Api::<ConfigMap>::namespaced(client.clone(), &options.argocd_namespace);
        let config = watcher::Config::default().fields("metadata.name=argocd-cm");
        let stream = watcher(api, config)
            .modify(|cm: &mut ConfigMap| cm.metadata.managed_fields = None)
            .default_backoff();
        let mut listed: Option<ConfigMap> = None;
        run(
            &watches,
            stream,
            "argocd-cm",
            metrics.clone(),
            move |w, event| match event {
                Event::Init => listed = None,
                Event::InitApply(cm) => listed = Some(cm),
                Event::InitDone => w.update(|c| c.apply_cm(listed.take().as_ref())),
                Event::Apply(cm) => w.update(|c| c.apply_cm(Some(&cm))),
                Event::Delete(_) => w.update(|c| c.apply_cm(None)),
            },
        );
    }
    if options.flux {
        let ar = dynamic("kustomize.toolkit.fluxcd.io", "v1", "Kustomization");
        let api = Api::<DynamicObject>::all_with(client.clone(), &ar);
        watch_dynamic(&watches, api, Kind::Kustomization, metrics.clone());
        let ar = dynamic("helm.toolkit.fluxcd.io", "v2", "HelmRelease");
        let api = Api::<DynamicObject>::all_with(client, &ar);
        watch_dynamic(&watches, api, Kind::HelmRelease, metrics);
    }
    watches
}

/// A watch over one dynamic kind. kube's `predicate_filter` is not used: it
/// sees applied objects only, and a source cache needs deletes and relist
/// boundaries too; [`SourceCache`] keeps the same per-uid hash itself.
fn watch_dynamic(
    watches: &Arc<Watches>,
    api: Api<DynamicObject>,
    kind: Kind,
    metrics: Arc<Metrics>,
) {
    let stream = watcher(api, watcher::Config::default())
        .modify(strip)
        .default_backoff();
    // A relist's objects, applied together once it completes.
    let mut listed = Vec::new();
    let cached = metrics
        .sources_objects
        .get_or_create(&SourceLabels {
            source: kind.as_str(),
        })
        .clone();
    run(watches, stream, kind.as_str(), metrics, move |w, event| {
        match event {
            Event::Init => listed.clear(),
            Event::InitApply(o) => listed.push(o),
            Event::InitDone => {
                let objects = std::mem::take(&mut listed);
                w.update(|c| c.relist(kind, &objects));
            }
            Event::Apply(o) => w.update(|c| c.apply(kind, &o)),
            Event::Delete(o) => w.update(|c| c.delete(kind, &o)),
        }
        cached.set(w.count(kind) as i64);
    });
}

fn run<K, S>(
    watches: &Arc<Watches>,
    stream: S,
    what: &'static str,
    metrics: Arc<Metrics>,
    mut on_event: impl FnMut(&Watches, Event<K>) + Send + 'static,
) where
    K: Send + 'static,
    S: futures_util::Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
{
    watches.pending.fetch_add(1, Ordering::SeqCst);
    let watches = watches.clone();
    tokio::spawn(async move {
        let mut filled = false;
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => {
                    let done = matches!(event, Event::InitDone);
                    on_event(&watches, event);
                    if done && !filled {
                        filled = true;
                        watches.pending.fetch_sub(1, Ordering::SeqCst);
                        tracing::info!(source = what, "watch filled");
                    }
                }
                Err(e) => {
                    metrics.reject_watch(what);
                    if not_installed(&e) && !filled {
                        // The CRD is not installed: nothing to learn, nothing to wait for.
                        filled = true;
                        watches.pending.fetch_sub(1, Ordering::SeqCst);
                        tracing::warn!(
                            source = what,
                            "not installed in this cluster; watching nothing"
                        );
                    } else {
                        tracing::warn!(source = what, error = %e, "watch failed; serving the last good sources");
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
