//! `--watch-argocd` and `--watch-flux`: reflectors over Applications, the
//! AppProjects and the `argocd-cm` ConfigMap in Argo CD's namespace,
//! Kustomizations and HelmReleases. Every change
//! rebuilds the [`Sources`] the decision reads; a watch that fails or lags
//! never blocks admission: the last good sources keep serving, their age is a
//! metric, and only a cache that was never filled keeps driftguard unready.
//! A kind whose CRD is not installed counts as filled and empty.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;

use crate::metrics::Metrics;
use crate::sources::{self, FluxKind, Sources};

/// The sources in force, replaced whole on every change.
#[derive(Clone, Default)]
pub struct SourcesHandle(Arc<RwLock<Arc<Sources>>>);

impl SourcesHandle {
    pub fn current(&self) -> Arc<Sources> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn replace(&self, sources: Sources) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(sources);
    }
}

#[derive(Default)]
struct Stores {
    applications: Option<Store<DynamicObject>>,
    app_projects: Option<Store<DynamicObject>>,
    argocd_cm: Option<Store<ConfigMap>>,
    kustomizations: Option<Store<DynamicObject>>,
    helmreleases: Option<Store<DynamicObject>>,
}

pub struct Watches {
    pub handle: SourcesHandle,
    stores: Mutex<Stores>,
    /// Where Argo CD runs: its AppProjects and argocd-cm are read there.
    argocd_namespace: String,
    /// Watches whose first list has not completed yet.
    pending: AtomicUsize,
    last_change: Mutex<Instant>,
}

impl Watches {
    /// Ready once every watch has been filled at least once.
    pub fn filled(&self) -> bool {
        self.pending.load(Ordering::SeqCst) == 0
    }

    pub fn age_seconds(&self) -> f64 {
        self.last_change
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
            .as_secs_f64()
    }

    fn rebuild(&self) {
        let stores = self.stores.lock().unwrap_or_else(|e| e.into_inner());
        let values = |store: &Option<Store<DynamicObject>>| -> Vec<Value> {
            store
                .as_ref()
                .map(|s| {
                    s.state()
                        .iter()
                        .filter_map(|o| serde_json::to_value(o.as_ref()).ok())
                        .collect()
                })
                .unwrap_or_default()
        };
        let (applications, mut errors) = sources::applications(&values(&stores.applications));
        let (projects, project_errors) = sources::app_projects(&values(&stores.app_projects));
        errors.extend(project_errors);
        let cm: serde_json::Map<String, Value> = stores
            .argocd_cm
            .as_ref()
            .and_then(|s| s.state().first().cloned())
            .and_then(|cm| cm.data.clone())
            .map(|data| {
                data.into_iter()
                    .map(|(k, v)| (k, Value::String(v)))
                    .collect()
            })
            .unwrap_or_default();
        let (argocd_overrides, cm_errors) = sources::argocd_overrides(&cm);
        errors.extend(cm_errors);
        let argocd_sync_accounts = sources::sync_accounts(
            &applications,
            &projects,
            crate::policy::impersonation::enabled(&cm),
            &self.argocd_namespace,
        );
        let mut flux = Vec::new();
        for (kind, store) in [
            (FluxKind::Kustomization, &stores.kustomizations),
            (FluxKind::HelmRelease, &stores.helmreleases),
        ] {
            for value in values(store) {
                match sources::flux_from_value(kind, &value) {
                    Ok(source) => flux.push(source),
                    Err(e) => errors.push(e),
                }
            }
        }
        for e in errors {
            tracing::warn!(error = %e, "a GitOps source was left out");
        }
        self.handle.replace(Sources {
            applications,
            argocd_overrides,
            flux,
            argocd_sync_accounts,
        });
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
        stores: Mutex::new(Stores::default()),
        argocd_namespace: options.argocd_namespace.clone(),
        pending: AtomicUsize::new(0),
        last_change: Mutex::new(Instant::now()),
    });
    let dynamic = |group: &str, version: &str, kind: &str| {
        ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
    };
    if options.argocd {
        let ar = dynamic("argoproj.io", "v1alpha1", "Application");
        let api = Api::<DynamicObject>::all_with(client.clone(), &ar);
        let store = watch_dynamic(&watches, api, ar, "Application", metrics.clone());
        watches.stores.lock().unwrap().applications = Some(store);
        // Argo CD reads an Application's project from its own namespace only.
        let ar = dynamic("argoproj.io", "v1alpha1", "AppProject");
        let api =
            Api::<DynamicObject>::namespaced_with(client.clone(), &options.argocd_namespace, &ar);
        let store = watch_dynamic(&watches, api, ar, "AppProject", metrics.clone());
        watches.stores.lock().unwrap().app_projects = Some(store);
        let writer = reflector::store::Writer::<ConfigMap>::default();
        watches.stores.lock().unwrap().argocd_cm = Some(writer.as_reader());
        let api = Api::<ConfigMap>::namespaced(client.clone(), &options.argocd_namespace);
        let config = watcher::Config::default().fields("metadata.name=argocd-cm");
        run(
            &watches,
            reflector::reflector(writer, watcher(api, config)).default_backoff(),
            "argocd-cm",
            metrics.clone(),
        );
    }
    if options.flux {
        let ar = dynamic("kustomize.toolkit.fluxcd.io", "v1", "Kustomization");
        let api = Api::<DynamicObject>::all_with(client.clone(), &ar);
        let store = watch_dynamic(&watches, api, ar, "Kustomization", metrics.clone());
        watches.stores.lock().unwrap().kustomizations = Some(store);
        let ar = dynamic("helm.toolkit.fluxcd.io", "v2", "HelmRelease");
        let api = Api::<DynamicObject>::all_with(client, &ar);
        let store = watch_dynamic(&watches, api, ar, "HelmRelease", metrics);
        watches.stores.lock().unwrap().helmreleases = Some(store);
    }
    watches
}

fn watch_dynamic(
    watches: &Arc<Watches>,
    api: Api<DynamicObject>,
    ar: ApiResource,
    what: &'static str,
    metrics: Arc<Metrics>,
) -> Store<DynamicObject> {
    let writer = reflector::store::Writer::<DynamicObject>::new(ar);
    let reader = writer.as_reader();
    run(
        watches,
        reflector::reflector(writer, watcher(api, watcher::Config::default())).default_backoff(),
        what,
        metrics,
    );
    reader
}

fn run<K, S>(watches: &Arc<Watches>, stream: S, what: &'static str, metrics: Arc<Metrics>)
where
    K: Send + 'static,
    S: futures_util::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    watches.pending.fetch_add(1, Ordering::SeqCst);
    let watches = watches.clone();
    tokio::spawn(async move {
        let mut filled = false;
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::InitDone)
                | Ok(watcher::Event::Apply(_))
                | Ok(watcher::Event::Delete(_)) => {
                    if !filled && matches!(event, Ok(watcher::Event::InitDone)) {
                        filled = true;
                        watches.pending.fetch_sub(1, Ordering::SeqCst);
                        tracing::info!(source = what, "watch filled");
                    }
                    if filled {
                        watches.rebuild();
                    }
                }
                Ok(_) => {}
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
