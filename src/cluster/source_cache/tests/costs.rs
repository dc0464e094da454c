//! Sources over their cost caps: refused in the stricter direction.

use super::*;

/// `team_app` with `rules` glob ignore rules (the measured attack: one rule
/// costs about 18 KiB compiled).
fn costly_app(uid: &str, ns: &str, lists: &str, rules: usize) -> DynamicObject {
    let mut a = team_app(uid, ns, lists);
    a.data["spec"]["ignoreDifferences"] = (0..rules)
        .map(|r| json!({"group": "*", "kind": format!("Kind{r}*"), "jsonPointers": ["/spec"]}))
        .collect();
    a
}

/// Ignore rules that take an Application over the per-source cap.
pub(super) fn rules_over_the_cap() -> Value {
    costly_app("x", "team-a", "a", 6000).data["spec"]["ignoreDifferences"].take()
}

/// Whether the Application of `ns` is published, and its rules.
fn rules_of(cache: &SourceCache, ns: &str) -> Option<usize> {
    let s = cache.snapshot();
    let app = s.argocd[0].applications.iter().find(|a| a.name == ns);
    app.map(|a| a.rules.len())
}

/// A tenant's Application over the per-source cap lends no rule, yet still
/// claims and lists (widened to whole namespaces); another namespace's
/// Application is untouched. Back under the cap, it is admitted again.
#[test]
fn an_application_over_its_cost_cap_is_refused_and_others_still_apply() {
    let mut cache = tenants(Limits::default());
    cache.apply(Kind::Application, &costly_app("u1", "team-a", "a", 6000));
    cache.apply(Kind::Application, &team_app("u2", "team-b", "b"));
    assert_eq!(rules_of(&cache, "team-a"), Some(0));
    assert_eq!(rules_of(&cache, "team-b"), Some(1));
    assert_eq!(cache.refused(Kind::Application, Cap::Source), 1);
    assert!(cache.charged() < 2 << 20, "{}", cache.charged());
    let s = cache.snapshot();
    let lister = |key: &str| s.lister(key).map(ToString::to_string);
    // Every name in the namespace it listed, none dropped.
    for name in ["a", "anything"] {
        assert_eq!(
            lister(&format!("apps/Deployment:shop/{name}")).as_deref(),
            Some("Argo CD application team-a/team-a")
        );
    }
    assert_eq!(
        lister("apps/Deployment:shop/b").as_deref(),
        Some("Argo CD application team-b/team-b")
    );
    assert_eq!(lister("apps/Deployment:elsewhere/a"), None);
    // Its account stays: the same as without its rules.
    assert_eq!(s.argocd[0].sync_accounts.len(), 0, "impersonation is off");
    cache.apply(Kind::Application, &costly_app("u1", "team-a", "a", 3));
    assert_eq!(rules_of(&cache, "team-a"), Some(3));
    assert_eq!(cache.refused(Kind::Application, Cap::Source), 0);
    assert_eq!(cache.snapshot().lister("apps/Deployment:shop/x"), None);
}

/// A namespace's sources share its cap: the one that passes it is refused,
/// another namespace's still fit, and Argo CD's own namespace is bound by the
/// total alone. A delete frees the room for the next event.
#[test]
fn a_namespaces_sources_share_its_cap() {
    let mut probe = tenants(Limits::default());
    probe.apply(Kind::Application, &costly_app("u0", "team-x", "x", 10));
    let one = probe.charged();
    let mut cache = tenants(Limits {
        per_source: 2 * one,
        per_namespace: 2 * one + one / 2,
        total: 6 * one,
    });
    let app = |uid: &str, ns: &str| {
        let mut a = costly_app(uid, ns, uid, 10);
        a.data["metadata"]["name"] = json!(format!("{ns}-{uid}"));
        a
    };
    for uid in ["u1", "u2", "u3"] {
        cache.apply(Kind::Application, &app(uid, "team-a"));
    }
    cache.apply(Kind::Application, &app("u4", "team-b"));
    assert_eq!(cache.refused(Kind::Application, Cap::Namespace), 1);
    let s = cache.snapshot();
    let rules = |name: &str| {
        let a = s.argocd[0].applications.iter().find(|a| a.name == name);
        a.map(|a| a.rules.len())
    };
    assert_eq!(rules("team-a-u1"), Some(10));
    assert_eq!(rules("team-a-u2"), Some(10));
    assert_eq!(rules("team-a-u3"), Some(0));
    assert_eq!(rules("team-b-u4"), Some(10));
    // Argo CD's namespace: three fit where a tenant's holds two.
    for uid in ["u5", "u6", "u7"] {
        cache.apply(Kind::Application, &app(uid, "argocd"));
    }
    assert_eq!(cache.refused(Kind::Application, Cap::Namespace), 1);
    assert_eq!(cache.refused(Kind::Application, Cap::Total), 1, "u7");
    cache.delete(Kind::Application, &app("u1", "team-a"));
    cache.apply(Kind::Application, &app("u3", "team-a"));
    assert_eq!(cache.refused(Kind::Application, Cap::Namespace), 0);
    let s = cache.snapshot();
    let a = s.argocd[0]
        .applications
        .iter()
        .find(|a| a.name == "team-a-u3");
    assert_eq!(a.map(|a| a.rules.len()), Some(10));
}

/// A Kustomization over the cap keeps its account and its inventory,
/// widened, and lends no rule.
#[test]
fn a_kustomization_over_its_cost_cap_keeps_its_account_and_inventory() {
    let mut k = kustomization(
        "k1",
        "team-a",
        Some("deployer"),
        json!({"inventory": {"entries": [{"id": "team-a_web_apps_Deployment", "v": "v1"}]}}),
    );
    k.data["spec"]["ignore"] = (0..500)
        .map(|r| json!({"paths": ["/spec"], "target": {"kind": format!("K{r}*")}}))
        .collect();
    let mut cache = SourceCache::new("argocd").without_argocd();
    cache.apply(Kind::Kustomization, &k);
    assert_eq!(cache.refused(Kind::Kustomization, Cap::Source), 1);
    let s = cache.snapshot();
    assert!(s.flux[0].rules.is_empty());
    assert_eq!(
        s.flux[0].service_account.as_deref(),
        Some("system:serviceaccount:team-a:deployer")
    );
    let lister = s
        .lister("apps/Deployment:team-a/other")
        .map(ToString::to_string);
    assert_eq!(lister.as_deref(), Some("Flux Kustomization team-a/apps"));
}
