//! What the watches publish: every cache's sources as one, each Argo CD
//! installation apart, and the tools of unread watches lending nothing.

use std::sync::Arc;

use super::Source;
use crate::cluster::source_cache::{SourceCache, add_lister};
use crate::policy::Application;
use crate::policy::argocd::DiffMode;
use crate::policy::flux::FluxSource;
use crate::policy::ignore::RuleSet;
use crate::sources::Sources;

/// All caches' sources as one: each Argo CD installation apart, the listed
/// objects merged (the first lister named, as within one cache). A cache
/// with a tool's watch `unread` lends none of that tool's loosenings, even
/// from objects already listed (an AppProject not read yet may refuse an
/// Application): no ignore rules, sync accounts or service accounts, and
/// Argo CD's legacy diff. What only makes decisions stricter stays: the
/// records' listed objects, where Applications deploy and HelmReleases
/// install, the instance label and the installation id.
pub(super) fn snapshot(caches: &[SourceCache], unread: &[Source]) -> Sources {
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
            for (key, by) in part.planned.iter() {
                add_lister(&mut merged, &mut more, key, by);
            }
            for (key, others) in part.more_listers.iter() {
                for by in others {
                    add_lister(&mut merged, &mut more, key, &Arc::new(by.clone()));
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::source_cache::Kind;
    use kube::api::DynamicObject;

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
        let lister = |key: &str| match all.planned.get(key).map(|m| &**m) {
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
        let listed: Vec<_> = all.planned.keys().map(|k| &**k).collect();
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
}
