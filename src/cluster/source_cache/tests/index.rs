//! The index of listed objects is updated by the object that changed: after
//! any sequence of events it equals the index built from scratch (the scan
//! it replaced, kept here as the oracle), and one change visits only its
//! own listing's keys.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

/// The index as the full scan built it before it was incremental.
fn rebuilt(cache: &SourceCache) -> (crate::drift::Index, Listed<Vec<Manager>>) {
    let (mut index, mut more) = (crate::drift::Index::default(), Listed::new());
    let counts = |uid: &str| cache.applications.get(uid).is_none_or(|e| e.counts);
    for (uid, p) in cache.planned.iter().filter(|(uid, _)| counts(uid)) {
        let project = cache
            .applications
            .get(uid)
            .and_then(|e| cache.project(&e.project));
        for key in &p.keys {
            if project.is_none_or(|project| cache.this_cluster.lets_deploy(project, key)) {
                add_lister(&mut index, &mut more, key, &p.by);
            }
        }
    }
    (index, more)
}

/// What a scope resolves to, comparable.
fn scopes(sources: &Sources) -> Vec<(String, String)> {
    let mut scopes: Vec<_> = sources
        .scopes
        .iter()
        .map(|s| (s.key.clone(), format!("{:?}", s.project)))
        .collect();
    scopes.sort();
    scopes
}

fn expected_scopes(cache: &SourceCache, index: &crate::drift::Index) -> Vec<(String, String)> {
    let mut scopes: Vec<_> = index
        .keys()
        .filter_map(|key| {
            let project = cache.project(planned::project_of(key)?);
            Some((
                key.to_string(),
                format!("{:?}", project.map(|p| Arc::new(p.clone()))),
            ))
        })
        .collect();
    scopes.sort();
    scopes
}

const NAMESPACES: [&str; 3] = ["shop", "team-b", "kube-system"];

/// The objects `mask` picks: Deployments `web` and `db` of [`NAMESPACES`],
/// and Namespace `kube-new`, as (group, kind, namespace, name).
fn picked(mask: u8) -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
    let mut all: Vec<_> = NAMESPACES
        .iter()
        .flat_map(|ns| {
            [
                ("apps", "Deployment", *ns, "web"),
                ("apps", "Deployment", *ns, "db"),
            ]
        })
        .collect();
    all.push(("", "Namespace", "", "kube-new"));
    (0..all.len())
        .filter(|i| mask & (1 << i) != 0)
        .map(|i| all[i])
        .collect()
}

#[derive(Clone, Debug)]
enum Op {
    App {
        uid: usize,
        ns: usize,
        name: usize,
        team: bool,
        mask: u8,
        flood: bool,
    },
    DeleteApp(usize),
    Kustomization {
        uid: usize,
        tenant: bool,
        mask: u8,
    },
    DeleteKustomization(usize),
    Project {
        destinations: usize,
        open: bool,
    },
    DeleteProject,
    Params(bool),
    RelistApps(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..5usize, 0..3usize, 0..2usize, any::<bool>(), any::<u8>(), prop::bool::weighted(0.2))
            .prop_map(|(uid, ns, name, team, mask, flood)| Op::App { uid, ns, name, team, mask, flood }),
        1 => (0..5usize).prop_map(Op::DeleteApp),
        2 => (0..3usize, any::<bool>(), any::<u8>())
            .prop_map(|(uid, tenant, mask)| Op::Kustomization { uid, tenant, mask }),
        1 => (0..3usize).prop_map(Op::DeleteKustomization),
        1 => (0..4usize, any::<bool>()).prop_map(|(destinations, open)| Op::Project { destinations, open }),
        1 => Just(Op::DeleteProject),
        1 => any::<bool>().prop_map(Op::Params),
        1 => any::<u8>().prop_map(Op::RelistApps),
    ]
}

fn application(
    uid: usize,
    ns: usize,
    name: usize,
    team: bool,
    mask: u8,
    flood: bool,
) -> DynamicObject {
    let mut resources: Vec<Value> = picked(mask)
        .into_iter()
        .map(|(g, k, ns, n)| json!({"group": g, "kind": k, "namespace": ns, "name": n}))
        .collect();
    if flood {
        // Refused for its cost, past 16 namespaces: a project listing.
        resources.extend((0..20).map(|i| json!({"group": "apps", "kind": "Deployment", "namespace": format!("team-x{i}"), "name": "web"})));
    }
    let (name, ns) = (["web", "api"][name], ["argocd", "team-a", "team-b"][ns]);
    let destination = ["shop", "shop2"][uid % 2];
    serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": ns,
                     "uid": format!("a{uid}")},
        "spec": {"project": if team { "team" } else { "default" },
                 "destination": {"server": "https://kubernetes.default.svc",
                                 "namespace": destination}},
        "status": {"resources": resources}
    }))
    .unwrap()
}

fn project(destinations: usize, open: bool) -> DynamicObject {
    let destinations = [
        json!([{"server": "https://kubernetes.default.svc", "namespace": "shop"}]),
        json!([{"server": "*", "namespace": "*"}]),
        json!([{"server": "*", "namespace": "team-*"}]),
        json!([{"server": "*", "namespace": "*"}, {"server": "*", "namespace": "!kube-system"}]),
    ][destinations]
        .clone();
    let sources = if open { json!(["team-*"]) } else { json!([]) };
    let mut p = team_project(sources);
    p.data["spec"]["destinations"] = destinations;
    p.data["spec"]["clusterResourceWhitelist"] = json!([{"group": "", "kind": "Namespace"}]);
    p
}

fn flux(uid: usize, tenant: bool, mask: u8) -> DynamicObject {
    let entries: Vec<Value> = picked(mask)
        .into_iter()
        .map(|(g, k, ns, n)| json!({"id": format!("{ns}_{n}_{g}_{k}"), "v": "v1"}))
        .collect();
    let ns = if tenant { "shop" } else { "flux-system" };
    let account = tenant.then_some("reconciler");
    kustomization(
        &format!("k{uid}"),
        ns,
        account,
        json!({"inventory": {"entries": entries}}),
    )
}

/// Applies `op`, keeping the Applications in the cluster in `apps`.
fn run(cache: &mut SourceCache, apps: &mut BTreeMap<usize, DynamicObject>, op: &Op) {
    match *op {
        Op::App {
            uid,
            ns,
            name,
            team,
            mask,
            flood,
        } => {
            let a = application(uid, ns, name, team, mask, flood);
            cache.apply(Kind::Application, &a);
            apps.insert(uid, a);
        }
        Op::DeleteApp(uid) => {
            if let Some(a) = apps.remove(&uid) {
                cache.delete(Kind::Application, &a);
            }
        }
        Op::Kustomization { uid, tenant, mask } => {
            cache.apply(Kind::Kustomization, &flux(uid, tenant, mask));
        }
        Op::DeleteKustomization(uid) => {
            cache.delete(Kind::Kustomization, &flux(uid, false, 0));
        }
        Op::Project { destinations, open } => {
            cache.apply(Kind::AppProject, &project(destinations, open));
        }
        Op::DeleteProject => {
            cache.delete(Kind::AppProject, &project(0, true));
        }
        Op::Params(open) => {
            let namespaces = if open { "team-*" } else { "other" };
            let params = json!({"application.namespaces": namespaces});
            cache.apply_params_cm(Some(&configmap("argocd-cmd-params-cm", params)));
        }
        Op::RelistApps(mask) => {
            apps.retain(|uid, _| mask & (1 << uid) != 0);
            let listed: Vec<_> = apps.values().cloned().collect();
            cache.relist(Kind::Application, &listed);
        }
    }
}

fn check(cache: &SourceCache) -> Result<(), TestCaseError> {
    let (index, more) = rebuilt(cache);
    let s = cache.snapshot();
    prop_assert_eq!(&*s.planned, &index);
    prop_assert_eq!(&*s.more_listers, &more);
    prop_assert_eq!(scopes(&s), expected_scopes(cache, &index));
    // Nothing held for a key no longer listed.
    prop_assert!(cache.by_key.keys().all(|k| index.contains_key(k)));
    // The Applications' views answer as a scan of the list, in order, would.
    let at = |a: Option<&crate::policy::Application>| a.map(|a| a as *const _);
    for w in &s.argocd {
        let names = w
            .applications
            .iter()
            .map(|a| (a.name.as_str(), a.namespace.as_deref()));
        for (name, namespace) in names.chain([("absent", None)]) {
            let scan = w.applications.iter().map(|a| &**a);
            let scan = scan
                .clone()
                .find(|a| a.tracks(name, namespace, w.namespace()));
            prop_assert_eq!(
                at(w.applications.named(name, namespace, w.namespace())),
                at(scan)
            );
        }
        for destination in ["shop", "shop2", "absent"] {
            let scan = w.applications.iter().map(|a| &**a);
            let scan = scan
                .clone()
                .find(|a| a.destination_namespace.as_deref() == Some(destination));
            prop_assert_eq!(at(w.applications.deploying_into(destination)), at(scan));
        }
    }
    Ok(())
}

/// Small enough that an Application listing a flood is refused and widened.
const LIMITS: Limits = Limits {
    per_source: 9_000,
    per_namespace: 1 << 30,
    total: 1 << 30,
};

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn the_index_equals_one_built_from_scratch(ops in prop::collection::vec(op(), 1..30)) {
        let mut cache = tenants(LIMITS);
        let mut apps = BTreeMap::new();
        for op in &ops {
            run(&mut cache, &mut apps, op);
            check(&cache)?;
        }
    }
}

/// An ApplicationSet creating Applications one by one: each visits its own
/// keys only, so N of them cost O(N), not O(N²).
#[test]
fn an_application_change_visits_only_its_own_keys() {
    let mut cache = tenants(Limits::default());
    let app = |i: usize, names: &[&str]| {
        let mut a = team_app(&format!("u{i}"), "team-a", "web");
        a.metadata.name = Some(format!("app-{i}"));
        a.data["status"]["resources"] = names
            .iter()
            .map(|n| json!({"group": "apps", "kind": "Deployment", "namespace": "shop", "name": format!("{n}-{i}")}))
            .collect();
        a
    };
    for i in 0..500 {
        cache.apply(Kind::Application, &app(i, &["web", "db"]));
    }
    assert_eq!(cache.snapshot().planned.len(), 1000);
    cache.keys_published = 0;
    cache.apply(Kind::Application, &app(7, &["web", "db", "api"]));
    assert_eq!(cache.keys_published, 3);
    cache.keys_published = 0;
    cache.delete(Kind::Application, &app(8, &[]));
    assert_eq!(cache.keys_published, 2);
    assert_eq!(cache.snapshot().planned.len(), 999);
}

/// A key is held once, however many listings and maps name it, and every
/// key of a listing points at one lister: 100,000 listed objects cost their
/// text once.
#[test]
fn a_key_and_its_lister_are_held_once() {
    let mut cache = tenants(Limits::default());
    let app = |uid: &str, name: &str| {
        let mut a = team_app(uid, "team-a", "web");
        a.metadata.name = Some(name.into());
        a.data["status"]["resources"] = json!([
            {"group": "apps", "kind": "Deployment", "namespace": "shop", "name": "web"},
            {"group": "apps", "kind": "Deployment", "namespace": "shop", "name": "db"}]);
        a
    };
    cache.apply(Kind::Application, &app("u1", "one"));
    cache.apply(Kind::Application, &app("u2", "two"));
    let index = cache.snapshot().planned;
    let (key, first) = index.get_key_value("apps/Deployment:shop/web").unwrap();
    for uid in ["u1", "u2"] {
        let listed = &cache.planned[uid].keys[0];
        assert!(Arc::ptr_eq(listed, key), "{uid} holds a copy of the key");
        assert!(Arc::ptr_eq(
            cache.by_key.get_key_value(&**key).unwrap().0,
            key
        ));
    }
    let db = index.get("apps/Deployment:shop/db").unwrap();
    assert!(Arc::ptr_eq(first, db) && Arc::ptr_eq(first, &cache.planned["u1"].by));
}

/// The index is charged before it is held: an Application whose listing
/// fits the per-source cap only without its place in the index is refused.
#[test]
fn the_index_is_charged_before_it_is_held() {
    let a = team_app("u1", "argocd", "web");
    let keys = ["apps/Deployment:shop/web".to_owned()];
    let lister = "argocd".len() * 2;
    let unindexed = source_cost::entry(false, &a.data, true) + source_cost::listed(&keys, lister);
    let limits = Limits {
        per_source: unindexed,
        ..Limits::default()
    };
    let mut cache = SourceCache::new("argocd").with_limits(limits);
    cache.apply(Kind::Application, &a);
    assert_eq!(cache.refused(Kind::Application, Cap::Source), 1);
    let fits = Limits {
        per_source: unindexed + source_cost::indexed(&keys, lister),
        ..Limits::default()
    };
    let mut cache = SourceCache::new("argocd").with_limits(fits);
    cache.apply(Kind::Application, &a);
    assert_eq!(cache.refused(Kind::Application, Cap::Source), 0);
}
