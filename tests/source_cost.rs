//! A source refused for its cost (`--source-max-bytes`) never loosens a
//! decision: generated Applications and Kustomizations, their ignore rules
//! and what their status lists, judged with every source admitted and with
//! every source refused; each write is judged at least as strictly refused.

use driftguard::cluster::source_cache::{Kind, SourceCache, strip};
use driftguard::cluster::source_cost::Limits;
use driftguard::drift::Verdict;
use driftguard::sources::Sources;
use driftguard::{Endpoint, Policy, judge_request};
use kube::api::DynamicObject;
use proptest::prelude::*;
use serde_json::{Value, json};

/// Argo CD ignore rules an Application may carry.
fn argocd_rule(i: usize) -> Value {
    [
        json!({"group": "apps", "kind": "Deployment", "jsonPointers": ["/spec/replicas"]}),
        json!({"group": "*", "kind": "Deploy*", "jsonPointers": ["/metadata/labels"]}),
        json!({"group": "apps", "kind": "Deployment", "name": "web",
               "jqPathExpressions": [".spec.template.spec.containers[].image"]}),
        json!({"group": "*", "kind": "*", "jsonPointers": ["/spec"]}),
        json!({"group": "apps", "kind": "Deployment", "name": "db", "jsonPointers": ["/spec/template"]}),
    ][i % 5]
        .clone()
}

/// Flux ignore rules a Kustomization may carry.
fn flux_rule(i: usize) -> Value {
    [
        json!({"paths": ["/spec/replicas"], "target": {"kind": "Deployment"}}),
        json!({"paths": ["/metadata/labels"]}),
        json!({"paths": ["/spec/template"], "target": {"name": "web.*"}}),
        json!({"paths": [""]}),
    ][i % 4]
        .clone()
}

const NAMES: [&str; 3] = ["web", "db", "new"];
const NAMESPACES: [&str; 2] = ["production", "other"];

fn object(value: Value) -> DynamicObject {
    let mut o: DynamicObject = serde_json::from_value(value).expect("an object");
    strip(&mut o);
    o
}

#[derive(Clone, Debug)]
struct Case {
    app_rules: Vec<usize>,
    app_lists: Vec<(usize, usize)>,
    flux_rules: Vec<usize>,
    flux_lists: Vec<(usize, usize)>,
    /// The Kustomization is a tenant's, applied as an account of its namespace.
    tenant: bool,
    /// The Application's AppProject, by its destinations ([`DESTINATIONS`]).
    project: Option<usize>,
    /// The Application also lists one object in each of 20 more namespaces:
    /// refused, its listing stands for its project.
    flood: bool,
}

/// AppProject destinations: everywhere, a glob, one namespace, all but one.
fn destinations(i: usize) -> Value {
    [
        json!([{"server": "*", "namespace": "*"}]),
        json!([{"server": "*", "namespace": "prod*"}, {"server": "*", "namespace": "team-*"}]),
        json!([{"server": "https://kubernetes.default.svc", "namespace": "other"}]),
        json!([{"server": "*", "namespace": "*"}, {"server": "*", "namespace": "!production"}]),
    ][i % 4]
        .clone()
}

impl Case {
    fn sources(&self, limits: Limits) -> Sources {
        let mut cache = SourceCache::new("argocd").with_limits(limits);
        let resources: Vec<Value> = self
            .app_lists
            .iter()
            .map(|&(ns, n)| {
                json!({"group": "apps", "kind": "Deployment",
                                   "namespace": NAMESPACES[ns % 2], "name": NAMES[n % 3]})
            })
            .chain((0..if self.flood { 20 } else { 0 }).map(|i| {
                json!({"group": "apps", "kind": "Deployment", "namespace": format!("team-{i}"), "name": "x"})
            }))
            .collect();
        if let Some(p) = self.project {
            cache.apply(
                Kind::AppProject,
                &object(json!({
                    "apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
                    "metadata": {"name": "default", "namespace": "argocd", "uid": "p1"},
                    "spec": {"destinations": destinations(p)}
                })),
            );
        }
        cache.apply(Kind::Application, &object(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "myapp", "namespace": "argocd", "uid": "a1"},
            "spec": {"project": "default",
                     "destination": {"server": "https://kubernetes.default.svc", "namespace": "production"},
                     "ignoreDifferences": self.app_rules.iter().map(|&i| argocd_rule(i)).collect::<Vec<_>>()},
            "status": {"resources": resources}
        })));
        let (ns, account) = if self.tenant {
            ("production", Some("deployer"))
        } else {
            ("flux-system", None)
        };
        let entries: Vec<Value> = self
            .flux_lists
            .iter()
            .map(|&(ns, n)| json!({"id": format!("{}_{}_apps_Deployment", NAMESPACES[ns % 2], NAMES[n % 3]), "v": "v1"}))
            .collect();
        cache.apply(Kind::Kustomization, &object(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": ns, "uid": "k1"},
            "spec": {"serviceAccountName": account, "path": "./apps",
                     "sourceRef": {"kind": "GitRepository", "name": "repo"},
                     "ignore": self.flux_rules.iter().map(|&i| flux_rule(i)).collect::<Vec<_>>()},
            "status": {"inventory": {"entries": entries}}
        })));
        cache.snapshot()
    }
}

fn deployment(name: &str, claims: &Value, replicas: u32, image: &str, team: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": name, "namespace": "production", "labels": {"team": team},
                        "annotations": claims["annotations"], "uid": "d1"},
           "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "c", "image": image}]}}}})
}

fn review(user: &str, operation: &str, old: Option<&Value>, new: Option<&Value>) -> Vec<u8> {
    let obj = new.or(old).expect("an object");
    let (group, version, resource, namespace) = match obj["kind"].as_str() {
        Some("Namespace") => ("", "v1", "namespaces", ""),
        _ => ("apps", "v1", "deployments", "production"),
    };
    serde_json::to_vec(
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "00000000-0000-4000-8000-000000000001",
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "resource": {"group": group, "version": version, "resource": resource},
        "name": obj["metadata"]["name"], "namespace": namespace, "operation": operation,
        "userInfo": {"username": user, "groups": ["developers", "system:authenticated"]},
        "object": new, "oldObject": old, "dryRun": false}}),
    )
    .expect("a review")
}

/// `kubectl scale` of Deployment `name` to 5 replicas, from 1.
fn scale(user: &str, name: &str) -> Vec<u8> {
    let scale = |replicas: u32| {
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
               "metadata": {"name": name, "namespace": "production"},
               "spec": {"replicas": replicas}})
    };
    serde_json::to_vec(
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "00000000-0000-4000-8000-000000000002",
        "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "subResource": "scale",
        "name": name, "namespace": "production", "operation": "UPDATE",
        "userInfo": {"username": user, "groups": ["developers", "system:authenticated"]},
        "object": scale(5), "oldObject": scale(1), "dryRun": false}}),
    )
    .expect("a review")
}

/// The writes judged: updates of a Deployment each tool claims, creates of
/// listed and unlisted names and their scale writes, and the DELETE of its namespace.
fn writes() -> Vec<(String, Vec<u8>)> {
    let claims = [
        json!({"annotations": {"argocd.argoproj.io/tracking-id": "myapp:apps/Deployment:production/web"}}),
        json!({"annotations": {}}),
    ];
    let mut writes = Vec::new();
    for user in ["alice", "system:serviceaccount:production:deployer"] {
        for (c, claim) in claims.iter().enumerate() {
            let old = deployment("web", claim, 1, "a", "x");
            let mut flux = old.clone();
            flux["metadata"]["labels"] = json!({"team": "x",
                "kustomize.toolkit.fluxcd.io/name": "apps",
                "kustomize.toolkit.fluxcd.io/namespace": "flux-system"});
            for (what, new) in [
                ("replicas", deployment("web", claim, 2, "a", "x")),
                ("image", deployment("web", claim, 1, "b", "x")),
                ("label", deployment("web", claim, 1, "a", "y")),
            ] {
                let r = review(user, "UPDATE", Some(&old), Some(&new));
                writes.push((format!("{user} claim {c} {what}"), r));
                let mut flux_new = new.clone();
                flux_new["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"] = json!("apps");
                flux_new["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/namespace"] =
                    json!("flux-system");
                let r = review(user, "UPDATE", Some(&flux), Some(&flux_new));
                writes.push((format!("{user} flux {what}"), r));
            }
        }
        for name in NAMES {
            let new = deployment(name, &claims[1], 1, "a", "x");
            writes.push((
                format!("{user} create {name}"),
                review(user, "CREATE", None, Some(&new)),
            ));
            // A scale write whose parent is not read (`verdict` passes none):
            // what the listings and their Applications' rules say decides.
            writes.push((format!("{user} scale {name}"), scale(user, name)));
        }
        let namespace =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "production"}});
        writes.push((
            format!("{user} delete namespace"),
            review(user, "DELETE", Some(&namespace), None),
        ));
    }
    writes
}

fn rank(v: Verdict) -> u8 {
    match v {
        Verdict::Allow => 0,
        Verdict::Audit => 1,
        Verdict::Warn => 2,
        Verdict::Deny => 3,
    }
}

fn verdict(policy: &Policy, body: &[u8], sources: &Sources) -> Verdict {
    let req = driftguard::request::parse(body).expect("a review");
    let now = "2026-11-29T10:00:00Z".parse().expect("a time");
    judge_request(
        policy,
        &req,
        Endpoint::Validate,
        None,
        Some(sources),
        now,
        &driftguard::deadline::Deadline::none(),
    )
    .expect("judged")
    .decision
    .verdict
}

/// Every cap so small that every source is refused.
const REFUSE_ALL: Limits = Limits {
    per_source: 1,
    per_namespace: 1,
    total: 1,
};

fn check(case: &Case) -> Result<(), String> {
    let policy = Policy::from_yaml(
        "mode: enforce\ngitops: {argocd: {enabled: true}, flux: {enabled: true}}\n",
        "policy.yaml",
    )
    .expect("a policy");
    let admitted = case.sources(Limits::default());
    let refused = case.sources(REFUSE_ALL);
    for (what, body) in writes() {
        let (a, r) = (
            verdict(&policy, &body, &admitted),
            verdict(&policy, &body, &refused),
        );
        if rank(r) < rank(a) {
            return Err(format!("{what}: {a:?} admitted, {r:?} refused"));
        }
    }
    Ok(())
}

/// The refusal is in force: a replicas rule allows the update admitted,
/// and refused the update is denied; a listed name's CREATE stays denied.
#[test]
fn a_refused_source_lends_no_rule_and_keeps_its_listing() {
    let case = Case {
        app_rules: vec![0],
        app_lists: vec![(0, 2)],
        flux_rules: vec![],
        flux_lists: vec![],
        tenant: false,
        project: None,
        flood: false,
    };
    let policy = Policy::from_yaml(
        "mode: enforce\ngitops: {argocd: {enabled: true}}\n",
        "policy.yaml",
    )
    .unwrap();
    let writes = writes();
    let body = |name: &str| &writes.iter().find(|(w, _)| w == name).unwrap().1;
    let update = body("alice claim 0 replicas");
    assert_eq!(
        verdict(&policy, update, &case.sources(Limits::default())),
        Verdict::Allow
    );
    assert_eq!(
        verdict(&policy, update, &case.sources(REFUSE_ALL)),
        Verdict::Deny
    );
    // A scale write whose parent is unread: the listing Application's
    // replicas rule allows it admitted; refused, it lends none.
    let scale = body("alice scale new");
    assert_eq!(
        verdict(&policy, scale, &case.sources(Limits::default())),
        Verdict::Allow
    );
    assert_eq!(
        verdict(&policy, scale, &case.sources(REFUSE_ALL)),
        Verdict::Deny
    );
    // Unlisted: unknownScaleParent (warn) decides.
    let unlisted = body("alice scale db");
    assert_eq!(
        verdict(&policy, unlisted, &case.sources(Limits::default())),
        Verdict::Warn
    );
    for name in ["alice create new", "alice create db"] {
        let listed = name.ends_with("new");
        let refused = verdict(&policy, body(name), &case.sources(REFUSE_ALL));
        assert_eq!(refused, Verdict::Deny, "{name}");
        let admitted = verdict(&policy, body(name), &case.sources(Limits::default()));
        assert_eq!(admitted == Verdict::Deny, listed, "{name}");
    }
}

/// Allocations on this thread, to tell what one event costs.
struct Counting;

thread_local! {
    static ALLOCATIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

// SAFETY: every call is passed to the system allocator unchanged.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Application myapp deploying to `server`, with a replicas rule, listing
/// Deployments web and new in production, its sync status `status`.
fn myapp(server: &str, status: &str) -> DynamicObject {
    object(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "myapp", "namespace": "argocd", "uid": "a1"},
        "spec": {"project": "default",
                 "destination": {"server": server, "namespace": "production"},
                 "ignoreDifferences": [argocd_rule(0), argocd_rule(2)]},
        "status": {"sync": {"status": status}, "resources": [
            {"group": "apps", "kind": "Deployment", "namespace": "production", "name": "web"},
            {"group": "apps", "kind": "Deployment", "namespace": "production", "name": "new"}]}
    }))
}

const ELSEWHERE: &str = "https://10.0.0.1:6443";

/// Argo CD rewrites an Application's status at every reconcile: for one of
/// another cluster that costs the cache no allocation, and holding it a few bytes.
#[test]
fn a_foreign_applications_status_change_allocates_nothing() {
    let mut cache = SourceCache::new("argocd");
    cache.apply(Kind::Application, &myapp(ELSEWHERE, "Synced"));
    assert_eq!(
        cache.charged(),
        driftguard::cluster::source_cache::FOREIGN_COST
    );
    assert!(cache.charged() <= 256);
    for status in ["OutOfSync", "Synced"] {
        let event = myapp(ELSEWHERE, status);
        let before = ALLOCATIONS.with(std::cell::Cell::get);
        let changed = cache.apply(Kind::Application, &event);
        let allocated = ALLOCATIONS.with(std::cell::Cell::get) - before;
        assert_eq!((changed, allocated), (false, 0), "{status}");
    }
}

/// An Application of another cluster decides every write exactly as no
/// Application at all: its rules never apply here, even to an object whose
/// tracking id names it, and what it lists is not here.
#[test]
fn a_foreign_application_decides_as_no_application() {
    let policy = Policy::from_yaml(
        "mode: enforce\ngitops: {argocd: {enabled: true}}\n",
        "policy.yaml",
    )
    .unwrap();
    let mut foreign = SourceCache::new("argocd");
    foreign.apply(Kind::Application, &myapp(ELSEWHERE, "Synced"));
    let (foreign, none) = (foreign.snapshot(), SourceCache::new("argocd").snapshot());
    for (name, body) in writes() {
        let verdicts = (
            verdict(&policy, &body, &foreign),
            verdict(&policy, &body, &none),
        );
        assert_eq!(verdicts.0, verdicts.1, "{name}");
    }
    let (_, update) = writes()
        .into_iter()
        .find(|(w, _)| w == "alice claim 0 replicas")
        .unwrap();
    assert_eq!(verdict(&policy, &update, &foreign), Verdict::Deny);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    #[test]
    fn refusing_a_source_never_loosens_a_decision(
        app_rules in prop::collection::vec(0usize..5, 0..4),
        app_lists in prop::collection::vec((0usize..2, 0usize..3), 0..4),
        flux_rules in prop::collection::vec(0usize..4, 0..3),
        flux_lists in prop::collection::vec((0usize..2, 0usize..3), 0..4),
        tenant in any::<bool>(),
        project in prop::option::of(0usize..4),
        flood in any::<bool>(),
    ) {
        let case = Case { app_rules, app_lists, flux_rules, flux_lists, tenant, project, flood };
        prop_assert!(check(&case).is_ok(), "{:?}: {:?}", case, check(&case));
    }
}
