//! What is watched: one Flux (Kustomizations, HelmReleases), one Argo CD
//! installation (Applications, AppProjects, argocd-cm and
//! argocd-cmd-params-cm), and how each event reaches its cache.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher::Event;
use kube::runtime::{WatchStreamExt, watcher};

use super::task::{Served, run};
use super::{Source, Watches};
use crate::cluster::source_cache::{Kind, SourceCache, strip, strip_foreign};
use crate::cluster::source_cost::Cap;
use crate::metrics::{Metrics, RefusedLabels, SourceLabels};
use crate::policy::app_namespaces;
use crate::policy::argocd::ThisCluster;

/// The watches over one Flux, the Kustomizations and HelmReleases of the
/// cluster `client` reaches, into cache `at`; `labels` name them in metrics
/// and logs.
pub(super) fn watch_flux(
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
        let watched = (kind, None, None);
        watch_dynamic(watches, api, served, watched, (at, label), metrics.clone());
    }
}

/// The watches over one Argo CD installation, in `namespace` of the cluster
/// `client` reaches (which calls this cluster `here`), into cache `at`;
/// `selector` chooses the Applications read; `labels` name its Applications,
/// AppProjects, argocd-cm and argocd-cmd-params-cm in metrics and logs.
pub(super) fn watch_argocd(
    watches: &Arc<Watches>,
    client: &kube::Client,
    (namespace, here): (&str, ThisCluster),
    selector: Option<&str>,
    (at, labels): (usize, [&'static str; 4]),
    metrics: &Arc<Metrics>,
) {
    let ar = crate::breakglass::application::application_resource();
    let api = Api::<DynamicObject>::all_with(client.clone(), &ar);
    let served = Served::new(client, &ar);
    let watched = (Kind::Application, Some(here), selector);
    watch_dynamic(
        watches,
        api,
        served,
        watched,
        (at, labels[0]),
        metrics.clone(),
    );
    // Argo CD reads an Application's project from its own namespace only.
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "argoproj.io",
        "v1alpha1",
        "AppProject",
    ));
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &ar);
    let served = Served::new(client, &ar);
    let watched = (Kind::AppProject, None, None);
    watch_dynamic(
        watches,
        api,
        served,
        watched,
        (at, labels[1]),
        metrics.clone(),
    );
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

/// A watch over one dynamic kind (Applications with what Argo CD calls this
/// cluster, whose others are held as foreign), of the objects a label
/// selector matches if one is given. kube's `predicate_filter` is
/// not used: it sees applied objects only, and a source cache needs deletes
/// and relist boundaries too; [`SourceCache`] keeps the same per-uid hash itself.
fn watch_dynamic(
    watches: &Arc<Watches>,
    api: Api<DynamicObject>,
    served: Served,
    (kind, here, selector): (Kind, Option<ThisCluster>, Option<&str>),
    (at, label): (usize, &'static str),
    metrics: Arc<Metrics>,
) {
    // Small pages: a page of tenants' objects (up to 1.5 MiB each in etcd)
    // is held whole before `strip` and the cost caps see it.
    let mut config = watcher::Config::default().page_size(LIST_PAGE);
    if let Some(selector) = selector {
        config = config.labels(selector);
    }
    let stream = watcher(api, config)
        .modify(move |o| match &here {
            Some(here) if here.deploys_elsewhere(&o.data) => strip_foreign(o),
            _ => strip(o),
        })
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
    let labels = SourceLabels { source: label };
    let foreign = metrics.sources_foreign.get_or_create(&labels).clone();
    let skipped = metrics
        .sources_foreign_events
        .get_or_create(&labels)
        .clone();
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
            let (count, over, (held, events)) = w.count(at, kind);
            cached.set(count as i64);
            for (gauge, n) in refused.iter().zip(over) {
                gauge.set(n as i64);
            }
            if kind == Kind::Application {
                foreign.set(held as i64);
                skipped.inc_by(events.saturating_sub(skipped.get()));
            }
        },
    );
}

/// Refuses to start on an Application label selector the apiserver that
/// `client` reaches cannot parse: the watch would fail on every retry, and
/// the spoke would judge without its Applications. Only a list refused with
/// the selector and served without it blames the selector; a hub that does not
/// answer within `wait` (at most 10 s) is left to the watch and
/// `--sources-wait`, as without a selector.
pub async fn check_application_selector(
    client: &kube::Client,
    selector: &str,
    wait: std::time::Duration,
) -> anyhow::Result<()> {
    let ar = crate::breakglass::application::application_resource();
    let api = Api::<DynamicObject>::all_with(client.clone(), &ar);
    let list = |labels: Option<&str>| {
        let mut params = kube::api::ListParams::default().limit(1);
        params.label_selector = labels.map(str::to_owned);
        let api = api.clone();
        async move { api.list_metadata(&params).await }
    };
    let check = async {
        match list(Some(selector)).await {
            Err(kube::Error::Api(s)) if s.code == 400 && list(None).await.is_ok() => Err(s.message),
            _ => Ok(()),
        }
    };
    let wait = wait.min(std::time::Duration::from_secs(10));
    match tokio::time::timeout(wait, check).await {
        Ok(Err(message)) => {
            anyhow::bail!(
                "--argocd-application-selector {selector:?}: the hub refused it: {message}"
            )
        }
        Ok(Ok(())) => Ok(()),
        Err(_) => {
            tracing::warn!(
                selector,
                "--argocd-application-selector: the hub did not answer its check; the watch will tell"
            );
            Ok(())
        }
    }
}
