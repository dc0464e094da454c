//! The objects the sources list: indexed as they change, where their
//! project deploys, with every lister kept.

use super::costs::rules_over_the_cap;
use super::*;

#[test]
fn the_objects_an_application_lists_are_indexed_as_they_change() {
    let mut cache = SourceCache::new("argocd");
    let with_resources = |status: &str, names: &[&str]| {
        let mut a = app("u1", "shop", true, status);
        a.data["status"]["resources"] = names
            .iter()
            .map(|n| {
                json!({"group": "apps", "kind": "Deployment", "namespace": "shop", "name": n,
                            "status": status})
            })
            .collect();
        a
    };
    assert!(cache.apply(Kind::Application, &with_resources("OutOfSync", &["web"])));
    let planned = cache.snapshot().planned;
    assert_eq!(
        planned
            .get("apps/Deployment:shop/web")
            .map(ToString::to_string)
            .as_deref(),
        Some("Argo CD application argocd/shop")
    );
    // The same objects with another sync status: nothing to rebuild.
    assert!(!cache.apply(Kind::Application, &with_resources("Synced", &["web"])));
    assert!(Arc::ptr_eq(&planned, &cache.snapshot().planned));
    assert!(cache.apply(
        Kind::Application,
        &with_resources("Synced", &["web", "api"])
    ));
    assert_eq!(cache.snapshot().planned.len(), 2);
    assert!(cache.delete(Kind::Application, &app("u1", "shop", true, "x")));
    assert!(cache.snapshot().planned.is_empty());
}

/// What a tenant's Application lists counts only where its AppProject lets
/// it deploy here (Argo CD never syncs the rest): a forged `status` guards
/// no other team's names, widened or not; the project changing moves the
/// index without a relist.
#[test]
fn a_listing_counts_only_where_the_project_deploys() {
    let mut cache = tenants(Limits::default());
    let forged = |uid: &str, namespaces: &[&str]| {
        let mut a = team_app(uid, "team-a", "web");
        a.data["status"]["resources"] = namespaces
            .iter()
            .map(
                |ns| json!({"group": "apps", "kind": "Deployment", "namespace": ns, "name": "web"}),
            )
            .chain([json!({"group": "", "kind": "Namespace", "name": "kube-new"})])
            .collect();
        a
    };
    cache.apply(
        Kind::Application,
        &forged("u1", &["shop", "kube-system", "team-b"]),
    );
    let listed = |cache: &SourceCache, key: &str| cache.snapshot().lister(key).is_some();
    assert!(listed(&cache, "apps/Deployment:shop/web"));
    assert!(!listed(&cache, "apps/Deployment:kube-system/web"));
    assert!(!listed(&cache, "apps/Deployment:team-b/web"));
    assert!(
        !listed(&cache, "/Namespace:/kube-new"),
        "no cluster-scoped kind whitelisted"
    );
    // Refused for its cost, it still lists only where it may deploy: 5,000
    // forged namespaces widen to `shop`, never to every namespace.
    let many: Vec<String> = (0..5_000).map(|i| format!("ns-{i}")).collect();
    let mut costly = forged(
        "u1",
        &many
            .iter()
            .map(String::as_str)
            .chain(["shop"])
            .collect::<Vec<_>>(),
    );
    costly.data["spec"]["ignoreDifferences"] = rules_over_the_cap();
    cache.apply(Kind::Application, &costly);
    assert_eq!(cache.refused(Kind::Application, Cap::Source), 1);
    assert!(listed(&cache, "apps/Deployment:shop/anything"));
    assert!(!listed(&cache, "apps/Deployment:ns-1/web"));
    assert!(!listed(&cache, "apps/Deployment:kube-system/anything"));
    // Past 16 namespaces its project allows (a glob), the listing stands for
    // the project: every namespace it deploys to, never every namespace.
    let mut globbed = team_project(json!(["team-*"]));
    globbed.data["spec"]["destinations"] = json!([{"server": "*", "namespace": "team-*"}]);
    cache.apply(Kind::AppProject, &globbed);
    let teams: Vec<String> = (0..5_000).map(|i| format!("team-x{i}")).collect();
    let mut costly = forged("u1", &teams.iter().map(String::as_str).collect::<Vec<_>>());
    costly.data["spec"]["ignoreDifferences"] = rules_over_the_cap();
    cache.apply(Kind::Application, &costly);
    assert_eq!(cache.refused(Kind::Application, Cap::Source), 1);
    assert!(listed(&cache, "apps/Deployment:team-new/anything"));
    assert!(!listed(&cache, "apps/Deployment:kube-system/anything"));
    assert!(!listed(&cache, "/Namespace:/anything"));
    let s = cache.snapshot();
    let scope = planned::within_project("team");
    assert!(s.covers(&scope, "team-b") && !s.covers(&scope, "shop"));
    assert!(cache.charged() < 64 << 10, "constant: {}", cache.charged());
    // The project opened to every namespace but kube-system, and Namespaces.
    let mut project = team_project(json!(["team-*"]));
    project.data["spec"]["destinations"] = json!([
        {"server": "*", "namespace": "*"},
        {"server": "*", "namespace": "!kube-system"}
    ]);
    project.data["spec"]["clusterResourceWhitelist"] = json!([{"group": "", "kind": "Namespace"}]);
    cache.apply(Kind::AppProject, &project);
    cache.apply(
        Kind::Application,
        &forged("u1", &["shop", "kube-system", "team-b"]),
    );
    assert!(listed(&cache, "apps/Deployment:team-b/web"));
    assert!(
        !listed(&cache, "apps/Deployment:kube-system/web"),
        "denied by `!`"
    );
    assert!(listed(&cache, "/Namespace:/kube-new"));
}

/// An object two tools list is listed by both, whichever was read first: a
/// CREATE is then judged by each (`drift::pipeline`), never by whichever
/// source's uid sorts first.
#[test]
fn an_object_two_tools_list_keeps_both_listers() {
    for order in [["u1", "u2"], ["u2", "u1"]] {
        let mut cache = SourceCache::new("argocd");
        cache.apply(Kind::Application, &team_app(order[0], "argocd", "web"));
        let flux = kustomization(
            order[1],
            "flux-system",
            None,
            json!({"inventory": {"entries": [{"id": "shop_web_apps_Deployment", "v": "v1"}]}}),
        );
        cache.apply(Kind::Kustomization, &flux);
        let s = cache.snapshot();
        let listers: Vec<String> = s
            .listers("apps/Deployment:shop/web")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(listers.len(), 2, "{order:?}: {listers:?}");
    }
}
