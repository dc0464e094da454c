//! The source cache's tests: compiling, counting, indexing and forgetting
//! the watched objects, event by event.

use super::*;
use crate::cluster::source_cost::{Cap, Limits};
use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;

fn app(uid: &str, name: &str, replicas_rule: bool, status: &str) -> DynamicObject {
    let ignore = if replicas_rule {
        json!([{"group": "apps", "kind": "Deployment", "jsonPointers": ["/spec/replicas"]}])
    } else {
        json!([])
    };
    serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": "argocd", "uid": uid},
        "spec": {"project": "default", "ignoreDifferences": ignore,
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": "shop"}},
        "status": {"sync": {"status": status}}
    }))
    .unwrap()
}

/// In a fleet the hub's Argo CD calls this cluster by its cluster
/// Secret's server; an Application of another cluster (or of the hub
/// itself, `https://kubernetes.default.svc` there) lists objects that
/// are not here, and its destination namespace is not ours to guard.
#[test]
fn a_hub_application_counts_only_where_it_deploys_here() {
    let this = ThisCluster::named(&["https://spoke-1.example:6443/".to_owned()]);
    let mut cache = SourceCache::for_cluster("argocd", this);
    let deploying = |uid: &str, name: &str, server: &str| {
        let mut a = app(uid, name, true, "Synced");
        a.data["spec"]["destination"]["server"] = json!(server);
        a.data["status"]["resources"] = json!([{"group": "apps", "kind": "Deployment",
            "namespace": "shop", "name": name, "status": "Synced"}]);
        a
    };
    cache.apply(
        Kind::Application,
        &deploying("u1", "here", "https://spoke-1.example:6443"),
    );
    cache.apply(
        Kind::Application,
        &deploying("u2", "hub", "https://kubernetes.default.svc"),
    );
    cache.apply(
        Kind::Application,
        &deploying("u3", "other", "https://spoke-2.example:6443"),
    );
    let snapshot = cache.snapshot();
    assert!(snapshot.planned.contains_key("apps/Deployment:shop/here"));
    assert!(!snapshot.planned.contains_key("apps/Deployment:shop/hub"));
    assert!(!snapshot.planned.contains_key("apps/Deployment:shop/other"));
    // The others are not compiled at all: no destination, rule or account.
    let [a] = &snapshot.argocd[0].applications[..] else {
        panic!("only the Application deploying here is held compiled");
    };
    assert_eq!(
        (
            a.name.as_str(),
            a.destination_namespace.clone(),
            a.sync_destination.clone()
        ),
        ("here", Some("shop".into()), Some("shop".into()))
    );
    assert_eq!(cache.foreign().0, 2);
    // Moved to another cluster: what it listed here is forgotten.
    cache.apply(
        Kind::Application,
        &deploying("u1", "here", "https://spoke-2.example:6443"),
    );
    assert!(
        !cache
            .snapshot()
            .planned
            .contains_key("apps/Deployment:shop/here")
    );
}

/// A spoke's cache, an Application `uid` named `name` deploying to `server`
/// with a rule and a listed object, and its status.
fn spoke() -> SourceCache {
    SourceCache::for_cluster(
        "argocd",
        ThisCluster::named(&["https://spoke-1:6443".into()]),
    )
}

fn deploying(uid: &str, name: &str, server: &str, status: &str) -> DynamicObject {
    let mut a = app(uid, name, true, status);
    a.data["spec"]["destination"]["server"] = json!(server);
    a.data["status"]["resources"] = json!([{"group": "apps", "kind": "Deployment",
        "namespace": "shop", "name": name, "status": status}]);
    a
}

const HERE: &str = "https://spoke-1:6443";
const THERE: &str = "https://spoke-2:6443";

/// Argo CD rewrites every Application's status at each reconcile: one of
/// another cluster is counted, and changes nothing held (the same compiled
/// entries, index and charge), and is held for a few bytes.
#[test]
fn a_foreign_applications_status_change_is_counted_and_changes_nothing() {
    let mut cache = spoke();
    assert!(cache.apply(Kind::Application, &deploying("u1", "web", HERE, "Synced")));
    let alone = cache.charged();
    // Arriving, it changes nothing published either: it lends nothing.
    assert!(!cache.apply(Kind::Application, &deploying("u2", "db", THERE, "Synced")));
    assert_eq!(cache.charged() - alone, FOREIGN_COST);
    const { assert!(FOREIGN_COST <= 256) };
    let before = cache.snapshot();
    for status in ["OutOfSync", "Synced", "Unknown"] {
        assert!(!cache.apply(Kind::Application, &deploying("u2", "db", THERE, status)));
    }
    assert_eq!(cache.foreign(), (1, 4));
    assert_eq!(cache.count(Kind::Application), 2);
    assert_eq!(cache.charged() - alone, FOREIGN_COST);
    let after = cache.snapshot();
    let [here] = &after.argocd[0].applications[..] else {
        panic!("the foreign Application is not compiled");
    };
    assert!(Arc::ptr_eq(&before.argocd[0].applications[0], here));
    assert!(Arc::ptr_eq(&before.planned, &after.planned));
    assert!(!after.planned.contains_key("apps/Deployment:shop/db"));
}

/// A destination that turns to this cluster counts at once, rules, listing
/// and guarded namespace; turning away, all of it goes and a uid stays.
#[test]
fn an_application_moving_here_counts_at_once_and_moving_away_lends_nothing() {
    let mut cache = spoke();
    assert!(!cache.apply(Kind::Application, &deploying("u2", "db", THERE, "Synced")));
    let foreign_only = cache.charged();
    assert!(cache.apply(Kind::Application, &deploying("u2", "db", HERE, "Synced")));
    let moved = cache.snapshot();
    let [db] = &moved.argocd[0].applications[..] else {
        panic!("moved here, it is compiled");
    };
    assert_eq!(db.destination_namespace.as_deref(), Some("shop"));
    assert!(!db.rules.is_empty());
    assert!(moved.planned.contains_key("apps/Deployment:shop/db"));
    assert_eq!(cache.foreign().0, 0);
    assert!(cache.charged() > foreign_only);
    assert!(cache.apply(Kind::Application, &deploying("u2", "db", THERE, "Synced")));
    let away = cache.snapshot();
    assert!(away.argocd[0].applications.is_empty());
    assert!(!away.planned.contains_key("apps/Deployment:shop/db"));
    assert_eq!(cache.foreign().0, 1);
    assert_eq!(cache.charged(), foreign_only);
}

/// A relist that no longer lists a foreign Application, or its delete,
/// forgets it and its charge.
#[test]
fn a_relist_or_a_delete_forgets_a_foreign_application() {
    let mut cache = spoke();
    let web = deploying("u1", "web", HERE, "Synced");
    cache.apply(Kind::Application, &web);
    let alone = cache.charged();
    let db = deploying("u2", "db", THERE, "Synced");
    cache.apply(Kind::Application, &db);
    cache.relist(Kind::Application, std::slice::from_ref(&web));
    assert_eq!((cache.foreign().0, cache.charged()), (0, alone));
    cache.apply(Kind::Application, &db);
    cache.delete(Kind::Application, &db);
    assert_eq!((cache.foreign().0, cache.charged()), (0, alone));
    assert_eq!(cache.count(Kind::Application), 1);
}

#[test]
fn a_status_change_costs_nothing_and_keeps_the_entry() {
    let mut cache = SourceCache::new("argocd");
    assert!(cache.apply(Kind::Application, &app("u1", "shop", true, "Synced")));
    let before = cache.snapshot();
    assert!(!cache.apply(Kind::Application, &app("u1", "shop", true, "OutOfSync")));
    let after = cache.snapshot();
    // The same compiled Application, not a copy.
    assert!(Arc::ptr_eq(
        &before.argocd[0].applications[0],
        &after.argocd[0].applications[0]
    ));
    assert!(cache.apply(Kind::Application, &app("u1", "shop", false, "OutOfSync")));
    let changed = cache.snapshot();
    assert!(!Arc::ptr_eq(
        &before.argocd[0].applications[0],
        &changed.argocd[0].applications[0]
    ));
    assert!(changed.argocd[0].applications[0].rules.is_empty());
}

#[test]
fn an_application_set_taking_ownership_recompiles_the_application() {
    let mut cache = SourceCache::new("argocd");
    let mut a = app("u1", "shop-prod", true, "Synced");
    assert!(cache.apply(Kind::Application, &a));
    assert_eq!(
        cache.snapshot().argocd[0].applications[0].application_set,
        None
    );
    // Not the controller owner: not the set that generated it.
    a.metadata.owner_references =
        serde_json::from_value(json!([{"apiVersion": "argoproj.io/v1alpha1",
        "kind": "ApplicationSet", "name": "shop", "uid": "s1"}]))
        .unwrap();
    assert!(!cache.apply(Kind::Application, &a));
    a.metadata.owner_references.as_mut().unwrap()[0].controller = Some(true);
    assert!(cache.apply(Kind::Application, &a));
    assert_eq!(
        cache.snapshot().argocd[0].applications[0]
            .describe_source()
            .as_deref(),
        Some("generated by ApplicationSet argocd/shop")
    );
}

#[test]
fn only_the_changed_object_is_recompiled() {
    let mut cache = SourceCache::new("argocd");
    cache.relist(
        Kind::Application,
        &[app("u1", "a", true, "x"), app("u2", "b", true, "x")],
    );
    let before = cache.snapshot();
    cache.apply(Kind::Application, &app("u2", "b", false, "x"));
    let after = cache.snapshot();
    assert!(Arc::ptr_eq(
        &before.argocd[0].applications[0],
        &after.argocd[0].applications[0]
    ));
    assert!(!Arc::ptr_eq(
        &before.argocd[0].applications[1],
        &after.argocd[0].applications[1]
    ));
}

#[test]
fn a_relist_drops_what_is_gone_and_a_delete_removes() {
    let mut cache = SourceCache::new("argocd");
    cache.relist(
        Kind::Application,
        &[app("u1", "a", true, "x"), app("u2", "b", true, "x")],
    );
    assert!(cache.relist(Kind::Application, &[app("u2", "b", true, "x")]));
    assert_eq!(cache.snapshot().argocd[0].applications.len(), 1);
    assert!(!cache.relist(Kind::Application, &[app("u2", "b", true, "y")]));
    assert!(cache.delete(Kind::Application, &app("u2", "b", true, "x")));
    assert!(cache.snapshot().argocd[0].applications.is_empty());
}

/// A relist's objects are charged and applied as they arrive (each one
/// under the caps before the next is read), and only its end drops what it
/// did not list: nothing is held uncharged while a list is paged in.
#[test]
fn a_relists_objects_are_charged_as_they_arrive() {
    let mut cache = SourceCache::new("argocd");
    cache.relist(Kind::Application, &[app("u1", "a", true, "x")]);
    let one = cache.charged();
    cache.relist_start(Kind::Application);
    cache.relist_apply(Kind::Application, &app("u2", "b", true, "x"));
    cache.relist_apply(Kind::Application, &app("u3", "c", true, "x"));
    assert_eq!(
        cache.count(Kind::Application),
        3,
        "u1 not dropped before the end"
    );
    assert!(
        cache.charged() >= 3 * one,
        "{} < 3 x {one}",
        cache.charged()
    );
    assert!(cache.relist_done(Kind::Application));
    assert_eq!(cache.count(Kind::Application), 2);
    assert!(
        !cache.relist_done(Kind::Application),
        "no relist in progress"
    );
    assert_eq!(cache.count(Kind::Application), 2);
}

#[test]
fn argocd_cm_is_keyed_by_the_keys_read() {
    let cm = |extra: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": "argocd-cm"}, "data": {
            "resource.customizations.ignoreDifferences.apps_Deployment": "jsonPointers:\n- /spec/replicas\n",
            "url": extra}}))
        .unwrap()
    };
    let mut cache = SourceCache::new("argocd");
    assert!(cache.apply_cm(Some(&cm("a"))));
    assert!(!cache.apply_cm(Some(&cm("b"))), "a key never read");
    assert_eq!(cache.snapshot().argocd[0].overrides.len(), 1);
    assert!(cache.apply_cm(None));
    assert_eq!(cache.snapshot().argocd[0].overrides.len(), 0);
}

/// Two Argo CDs in one cluster are told apart by argocd-cm's
/// `installationID`: a change of it alone is a change of the sources.
#[test]
fn argocd_cm_gives_the_installation_its_id() {
    let cm = |id: &str| -> ConfigMap {
        serde_json::from_value(
            json!({"metadata": {"name": "argocd-cm"}, "data": {"installationID": id}}),
        )
        .unwrap()
    };
    let mut cache = SourceCache::new("argocd");
    assert_eq!(cache.snapshot().argocd[0].installation_id, None);
    assert!(cache.apply_cm(Some(&cm("hub"))));
    assert_eq!(
        cache.snapshot().argocd[0].installation_id.as_deref(),
        Some("hub")
    );
    assert!(cache.apply_cm(Some(&cm(""))), "emptied");
    assert_eq!(cache.snapshot().argocd[0].installation_id, None);
    // A cache of Flux alone lends no Argo CD installation.
    let flux = SourceCache::new("argocd").without_argocd();
    assert!(flux.snapshot().argocd.is_empty());
}

/// Kustomization `ns/apps` applied as `account`, with `status`.
fn kustomization(uid: &str, ns: &str, account: Option<&str>, status: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "apps", "namespace": ns, "uid": uid},
        "spec": {"serviceAccountName": account, "path": "./apps",
                 "sourceRef": {"kind": "GitRepository", "name": "repo"}},
        "status": status
    }))
    .unwrap()
}

/// Flux's multi-tenancy lockdown: a source without its own account is
/// applied as the default one of its namespace; its own account wins.
#[test]
fn flux_default_service_account_is_the_account_of_a_source_without_one() {
    let kustomization = |uid: &str, ns: &str, account| kustomization(uid, ns, account, json!({}));
    let accounts = |default: Option<&str>| {
        let mut cache = SourceCache::new("argocd")
            .with_flux_default_service_account(default.map(str::to_owned));
        cache.apply(Kind::Kustomization, &kustomization("u1", "tenant-a", None));
        cache.apply(
            Kind::Kustomization,
            &kustomization("u2", "tenant-b", Some("own")),
        );
        let mut accounts: Vec<_> = cache
            .snapshot()
            .flux
            .iter()
            .map(|s| s.service_account.clone())
            .collect();
        accounts.sort();
        accounts
    };
    assert_eq!(
        accounts(Some("reconciler")),
        [
            Some("system:serviceaccount:tenant-a:reconciler".to_owned()),
            Some("system:serviceaccount:tenant-b:own".to_owned()),
        ]
    );
    assert_eq!(
        accounts(None),
        [None, Some("system:serviceaccount:tenant-b:own".to_owned())]
    );
}

fn configmap(name: &str, data: Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap()
}

/// An Application of project `team` in `ns`, named after it, with an
/// ignore rule, listing Deployment `shop/<lists>`.
fn team_app(uid: &str, ns: &str, lists: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": ns, "namespace": ns, "uid": uid},
        "spec": {"project": "team",
                 "ignoreDifferences": [{"group": "apps", "kind": "Deployment", "jsonPointers": ["/spec/replicas"]}],
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": "shop"}},
        "status": {"resources": [{"group": "apps", "kind": "Deployment", "namespace": "shop", "name": lists}]}
    }))
    .unwrap()
}

fn team_project(source_namespaces: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
        "metadata": {"name": "team", "namespace": "argocd", "uid": "p1"},
        "spec": {"sourceNamespaces": source_namespaces, "destinationServiceAccounts": [
            {"server": "*", "namespace": "*", "defaultServiceAccount": "sa"}],
            "destinations": [{"server": "https://kubernetes.default.svc", "namespace": "shop"}]}
    }))
    .unwrap()
}

/// Argo CD reconciles an Application outside its own namespace only when
/// argocd-cmd-params-cm's `application.namespaces` and its AppProject's
/// `sourceNamespaces` both admit it. One it does not lends no rule and
/// no account, and lists nothing: a tenant's Application, whose status
/// the tenant writes, cannot claim another team's names. Either list
/// changing moves Applications in or out without a relist.
#[test]
fn an_application_counts_only_where_argo_cd_reconciles_it() {
    let mut cache = SourceCache::new("argocd");
    let impersonation = json!({"application.sync.impersonation.enabled": "true"});
    cache.apply_cm(Some(&configmap("argocd-cm", impersonation)));
    cache.apply(Kind::AppProject, &team_project(json!(["team-*"])));
    // u0 sorts first: before, the first lister of a name was the squatter.
    cache.apply(Kind::Application, &team_app("u0", "intruder", "argocd"));
    for (uid, ns) in [
        ("u1", "argocd"),
        ("u2", "team-a"),
        ("u3", "ops"),
        ("u4", "team-z"),
    ] {
        cache.apply(Kind::Application, &team_app(uid, ns, ns));
    }
    let counted = |cache: &SourceCache| {
        let s = cache.snapshot();
        let names = |i: &mut dyn Iterator<Item = String>| {
            let mut v: Vec<String> = i.collect();
            v.sort();
            v
        };
        let rules = names(&mut s.argocd[0].applications.iter().map(|a| a.name.clone()));
        let accounts = names(
            &mut s.argocd[0]
                .sync_accounts
                .iter()
                .map(|a| a.application.clone()),
        );
        let listed = names(
            &mut s
                .planned
                .keys()
                .map(|k| k.replace("apps/Deployment:shop/", "")),
        );
        assert_eq!(rules, accounts);
        assert_eq!(rules, listed);
        assert_eq!(
            s.planned["apps/Deployment:shop/argocd"].to_string(),
            "Argo CD application argocd/argocd"
        );
        rules
    };
    // No argocd-cmd-params-cm: Argo CD's own namespace only.
    assert_eq!(counted(&cache), ["argocd"]);
    let params = |namespaces: &str| {
        configmap(
            "argocd-cmd-params-cm",
            json!({"application.namespaces": namespaces}),
        )
    };
    assert!(cache.apply_params_cm(Some(&params("team-a, ops"))));
    // ops: the project does not list it; team-z: not enabled.
    assert_eq!(counted(&cache), ["argocd", "team-a"]);
    assert!(cache.apply_params_cm(Some(&params("team-*,ops"))));
    assert_eq!(counted(&cache), ["argocd", "team-a", "team-z"]);
    cache.apply(Kind::AppProject, &team_project(json!(["team-*", "ops"])));
    assert_eq!(counted(&cache), ["argocd", "ops", "team-a", "team-z"]);
    // Moved to a project that does not exist: out.
    let mut moved = team_app("u2", "team-a", "team-a");
    moved.data["spec"]["project"] = json!("other");
    assert!(cache.apply(Kind::Application, &moved));
    assert_eq!(counted(&cache), ["argocd", "ops", "team-z"]);
    assert!(cache.apply_params_cm(None));
    assert_eq!(counted(&cache), ["argocd"]);
    assert!(!cache.apply_params_cm(None), "unchanged");
}

/// A Kustomization or HelmRelease applying to another cluster lends
/// nothing here: with any `spec.kubeConfig` when Flux runs here; without
/// one (the hub itself) or through another spoke's Secret, in a hub.
#[test]
fn a_flux_source_applying_elsewhere_lends_nothing() {
    let source = |kind: Kind, name: &str, kube_config: Value| -> DynamicObject {
        let api = match kind {
            Kind::Kustomization => "kustomize.toolkit.fluxcd.io/v1",
            _ => "helm.toolkit.fluxcd.io/v2",
        };
        serde_json::from_value(json!({
            "apiVersion": api, "kind": kind.as_str(),
            "metadata": {"name": name, "namespace": "flux-system", "uid": name},
            "spec": {"kubeConfig": kube_config, "serviceAccountName": "sa",
                     "ignore": [{"paths": ["/spec/replicas"]}],
                     "driftDetection": {"ignore": [{"paths": ["/spec/replicas"]}]}},
            "status": {"inventory": {"entries": [{"id": format!("flux-system_{name}_apps_Deployment"), "v": "v1"}]}}
        }))
        .unwrap()
    };
    let lending = |mut cache: SourceCache| {
        for kind in [Kind::Kustomization, Kind::HelmRelease] {
            for (at, config) in [
                ("here", Value::Null),
                ("spoke-1", json!({"secretRef": {"name": "spoke-1"}})),
                ("spoke-2", json!({"secretRef": {"name": "spoke-2"}})),
                ("provider", json!({"configMapRef": {"name": "gke"}})),
            ] {
                let name = format!("{}-{at}", kind.as_str().to_lowercase());
                cache.apply(kind, &source(kind, &name, config));
            }
        }
        let s = cache.snapshot();
        let mut lenders: Vec<String> = s.flux.iter().map(|f| f.name.clone()).collect();
        lenders.sort();
        let listed: Vec<String> = s.planned.keys().map(|k| k.to_string()).collect();
        (lenders, listed)
    };
    let local = SourceCache::new("argocd").without_argocd();
    assert_eq!(
        lending(local),
        (
            vec!["helmrelease-here".to_owned(), "kustomization-here".into()],
            vec!["apps/Deployment:flux-system/kustomization-here".to_owned()]
        )
    );
    let hub = SourceCache::new("argocd")
        .without_argocd()
        .with_hub_flux(vec!["spoke-1".into()]);
    assert_eq!(
        lending(hub),
        (
            vec![
                "helmrelease-spoke-1".to_owned(),
                "kustomization-spoke-1".into()
            ],
            vec!["apps/Deployment:flux-system/kustomization-spoke-1".to_owned()]
        )
    );
}

/// argocd-cm's tracking method and instance label, read as Argo CD
/// v3.6.1 reads them: verbatim, empty meaning the default.
#[test]
fn argocd_cm_gives_the_instance_label_only_when_tracking_by_label() {
    let label = |data: Value| {
        let mut cache = SourceCache::new("argocd");
        cache.apply_cm(Some(&configmap("argocd-cm", data)));
        cache.snapshot().argocd[0].instance_label.clone()
    };
    const METHOD: &str = "application.resourceTrackingMethod";
    const KEY: &str = "application.instanceLabelKey";
    let default = Some("app.kubernetes.io/instance".to_owned());
    assert_eq!(label(json!({})), None, "annotation by default");
    assert_eq!(label(json!({METHOD: "", KEY: "x"})), None);
    assert_eq!(label(json!({METHOD: "annotation", KEY: "x"})), None);
    assert_eq!(label(json!({METHOD: "label"})), default);
    assert_eq!(label(json!({METHOD: "label", KEY: ""})), default);
    assert_eq!(
        label(json!({METHOD: "annotation+label", KEY: "example.com/app"})).as_deref(),
        Some("example.com/app")
    );
    for other in ["Label", " label", "label+annotation", "labels"] {
        assert_eq!(label(json!({METHOD: other})), None, "{other:?}");
    }
    // A change of the method alone is a change of the sources.
    let mut cache = SourceCache::new("argocd");
    cache.apply_cm(Some(&configmap("argocd-cm", json!({}))));
    assert!(cache.apply_cm(Some(&configmap("argocd-cm", json!({METHOD: "label"})))));
}

#[test]
fn strip_drops_status_operation_and_managed_fields() {
    let mut a = app("u1", "a", true, "x");
    a.data["operation"] = json!({"sync": {}});
    let hash = content_hash(&a);
    strip(&mut a);
    assert!(a.data.get("status").is_none() && a.data.get("operation").is_none());
    assert_eq!(content_hash(&a), hash);
    // The objects an Application lists survive, by identity only.
    let mut listed = app("u1", "a", true, "x");
    listed.data["status"]["resources"] = json!([{"group": "apps", "kind": "Deployment",
        "namespace": "shop", "name": "web", "status": "OutOfSync", "health": {"status": "Missing"}}]);
    strip(&mut listed);
    assert_eq!(
        listed.data["status"],
        json!({"resources": [{"group": "apps", "kind": "Deployment", "namespace": "shop", "name": "web"}]})
    );
}

/// A tenant's Kustomization (applied as an account of its namespace) lists
/// only its own namespace's objects: its status is the tenant's to write.
/// kustomize-controller's own Kustomization lists wherever it applies.
#[test]
fn a_tenants_inventory_speaks_only_for_its_namespace() {
    let with_inventory = |uid: &str, ns: &str, account| {
        let entries = json!([
            {"id": format!("{ns}_own_apps_Deployment"), "v": "v1"},
            {"id": "production_db_apps_Deployment", "v": "v1"},
            {"id": "_production__Namespace", "v": "v1"}]);
        kustomization(uid, ns, account, json!({"inventory": {"entries": entries}}))
    };
    let listed = |k: DynamicObject, default: Option<&str>| {
        let mut cache = SourceCache::new("argocd")
            .with_flux_default_service_account(default.map(str::to_owned));
        cache.apply(Kind::Kustomization, &k);
        let mut keys: Vec<String> = cache
            .snapshot()
            .planned
            .keys()
            .map(|k| k.to_string())
            .collect();
        keys.sort();
        keys
    };
    let tenant = ["apps/Deployment:team-a/own"];
    assert_eq!(
        listed(with_inventory("u1", "team-a", Some("tenant")), None),
        tenant
    );
    assert_eq!(
        listed(with_inventory("u1", "team-a", None), Some("reconciler")),
        tenant
    );
    assert_eq!(
        listed(with_inventory("u1", "flux-system", None), None),
        [
            "/Namespace:/production",
            "apps/Deployment:flux-system/own",
            "apps/Deployment:production/db"
        ]
    );
}

/// A cache where Argo CD reconciles the Applications of `team-*`.
fn tenants(limits: Limits) -> SourceCache {
    let mut cache = SourceCache::new("argocd").with_limits(limits);
    let params = json!({"application.namespaces": "team-*"});
    cache.apply_params_cm(Some(&configmap("argocd-cmd-params-cm", params)));
    cache.apply(Kind::AppProject, &team_project(json!(["team-*"])));
    cache
}

mod costs;
mod index;
mod listed;
