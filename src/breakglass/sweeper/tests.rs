//! The sweeper against a fake apiserver.
use std::sync::Mutex;

use http::{Request, Response};
use http_body_util::BodyExt;
use kube::client::Body;

use super::applications::APPLICATION_PAGE;
use super::*;
use crate::breakglass::application::{PAUSED_FOR, SKIP_RECONCILE};
use serde_json::json;

const SPOKE: &str = "https://spoke-1.example:6443";
const APPS: &str = "/apis/argoproj.io/v1alpha1";

/// `METHOD path` of every request, in order.
type Log = Arc<Mutex<Vec<String>>>;

/// An Application paused by driftguard for `entry`, deploying to `server`.
fn app(namespace: &str, name: &str, entry: &str, server: &str) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": "3",
            "annotations": {SKIP_RECONCILE: "true", PAUSED_FOR: entry}},
        "spec": {"destination": {"server": server, "namespace": "prod"}}})
}

/// A fake apiserver holding `apps`: listed, read and patched.
fn cluster(apps: Vec<Value>, log: Log) -> kube::Client {
    cluster_with(apps, Vec::new(), log)
}

/// Whether `path` is object `a`'s, of resource `plural` under `prefix`.
fn at_path(path: &str, prefix: &str, plural: &str, a: &Value) -> bool {
    let m = &a["metadata"];
    path == format!(
        "{prefix}/namespaces/{}/{plural}/{}",
        m["namespace"].as_str().unwrap(),
        m["name"].as_str().unwrap()
    )
}

/// [`cluster`], also serving the apps/v1 Deployments `deployments` (the
/// objects pause entries name) and taking record writes.
fn cluster_with(apps: Vec<Value>, deployments: Vec<Value>, log: Log) -> kube::Client {
    cluster_answering(
        apps,
        deployments,
        log,
        Arc::new(|_: &str, _: &str, _: &str| None),
    )
}

/// An answer a test gives before [`cluster_with`]'s own, from the method,
/// path and query: `(code, body)`.
type Answer = Arc<dyn Fn(&str, &str, &str) -> Option<(u16, Value)> + Send + Sync>;

/// [`cluster_with`], asking `answer` first.
fn cluster_answering(
    apps: Vec<Value>,
    deployments: Vec<Value>,
    log: Log,
    answer: Answer,
) -> kube::Client {
    let service = tower::service_fn(move |request: Request<Body>| {
        let (apps, deployments, log) = (apps.clone(), deployments.clone(), log.clone());
        let answer = answer.clone();
        async move {
            let (method, path) = (
                request.method().to_string(),
                request.uri().path().to_owned(),
            );
            let query = request.uri().query().unwrap_or_default().to_owned();
            let _ = request.into_body().collect().await;
            let list = path == format!("{APPS}/applications");
            let logged = match list {
                true => format!("{method} {path}?{query}"),
                false => format!("{method} {path}"),
            };
            log.lock().unwrap().push(logged);
            let path_ = &path;
            let at = |prefix, plural| move |a: &&Value| at_path(path_, prefix, plural, a);
            let (code, body) = if let Some(answered) = answer(&method, &path, &query) {
                answered
            } else if list {
                // Pages as the apiserver serves them: `limit`, and an
                // opaque `continue` (here the offset) while more remain.
                let param = |name: &str| {
                    (query.split('&'))
                        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                        .and_then(|v| v.parse::<usize>().ok())
                };
                let from = param("continue").unwrap_or(0).min(apps.len());
                let to = param("limit").map_or(apps.len(), |n| (from + n).min(apps.len()));
                let more = (to < apps.len()).then(|| to.to_string());
                (
                    200,
                    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationList",
                        "metadata": {"continue": more}, "items": apps[from..to]}),
                )
            } else if let Some(app) = apps.iter().find(at(APPS, "applications")) {
                (200, app.clone())
            } else if let Some(d) = deployments.iter().find(at("/apis/apps/v1", "deployments")) {
                (200, d.clone())
            } else if path == "/apis/apps" || path == "/apis" {
                let v1 = json!({"groupVersion": "apps/v1", "version": "v1"});
                let group = json!({"kind": "APIGroup", "apiVersion": "v1", "name": "apps",
                    "versions": [v1], "preferredVersion": v1});
                let list = json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]});
                (200, if path == "/apis" { list } else { group })
            } else if path == "/apis/apps/v1" {
                (
                    200,
                    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apps/v1",
                    "resources": [{"name": "deployments", "namespaced": true, "kind": "Deployment",
                        "singularName": "deployment", "verbs": ["get", "list", "patch"]}]}),
                )
            } else if method == "PATCH"
                && path.starts_with("/api/v1/namespaces/driftguard/configmaps/")
            {
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "r"}}),
                )
            } else {
                (
                    404,
                    json!({"kind": "Status", "code": 404, "reason": "NotFound", "message": "not found"}),
                )
            };
            let response = Response::builder()
                .status(code)
                .body(Body::from(body.to_string().into_bytes()))
                .unwrap();
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    kube::Client::new(service, "default")
}

/// A hub's Argo CD and this cluster's own: pauses no armed object holds
/// any more are lifted in both, but in the hub only on Applications that
/// deploy here; without --local-argocd-namespace, only the hub is asked.
#[tokio::test]
async fn pauses_left_behind_are_lifted_in_both_clusters_never_another_clusters() {
    let entry = "apps/Deployment:prod/web";
    for local in [true, false] {
        let (here_log, hub_log) = (Log::default(), Log::default());
        let here = cluster(
            vec![app(
                "gitops",
                "web",
                entry,
                "https://kubernetes.default.svc",
            )],
            here_log.clone(),
        );
        // Another cluster's web holds the same entry, for its own Deployment.
        let hub = cluster(
            vec![
                app("argocd", "web", entry, "https://spoke-2.example:6443"),
                app("argocd", "api", entry, SPOKE),
            ],
            hub_log.clone(),
        );
        let argocd = ToolSources {
            hub: Some(hub),
            local: local.then(|| "gitops".into()),
            cluster_names: vec![SPOKE.into()],
        };
        let options = options(argocd, &here);
        let policy = PolicyHandle::new(crate::policy::Policy::embedded());
        let mut sweeper = Sweeper::new(here, policy, Arc::new(Metrics::default()), options);
        look_twice(&mut sweeper).await;
        let patched = |log: &Log| -> Vec<String> {
            log.lock()
                .unwrap()
                .iter()
                .filter(|r| r.starts_with("PATCH"))
                .cloned()
                .collect()
        };
        let here_patched: &[String] = if local {
            &[format!("PATCH {APPS}/namespaces/gitops/applications/web")]
        } else {
            let asked = here_log.lock().unwrap().clone();
            assert!(
                !asked.iter().any(|r| r.contains("applications")),
                "{asked:?}"
            );
            &[]
        };
        assert_eq!(patched(&here_log), here_patched, "local {local}");
        assert_eq!(
            patched(&hub_log),
            [format!("PATCH {APPS}/namespaces/argocd/applications/api")],
            "local {local}"
        );
    }
}

/// Applications are listed a page at a time, however many the hub holds:
/// a pause left behind on the third page is lifted, and no list asks for
/// more than a page.
#[tokio::test]
async fn applications_are_listed_a_page_at_a_time() {
    let entry = "apps/Deployment:prod/web";
    let log = Log::default();
    let mut apps: Vec<Value> = (0..120)
        .map(|i| {
            let mut a = app("argocd", &format!("a{i:03}"), entry, SPOKE);
            a["metadata"]["annotations"] = json!({});
            a
        })
        .collect();
    apps[110] = app("argocd", "a110", entry, "https://kubernetes.default.svc");
    let patched = patched_by_two_looks(cluster(apps, log.clone()), &log).await;
    assert_eq!(
        patched,
        [format!("PATCH {APPS}/namespaces/argocd/applications/a110")]
    );
    let lists: Vec<String> = (log.lock().unwrap().iter())
        .filter(|r| r.starts_with(&format!("GET {APPS}/applications?")))
        .cloned()
        .collect();
    assert_eq!(lists.len(), 6, "three pages, two looks: {lists:?}");
    let page = format!("limit={APPLICATION_PAGE}");
    assert!(lists.iter().all(|r| r.contains(&page)), "{lists:?}");
}

/// With --argocd-application-selector the hub's Applications are listed as
/// the watch lists them, by the selector; this cluster's own, all.
#[tokio::test]
async fn the_hub_is_listed_by_the_application_selector() {
    let (here_log, hub_log) = (Log::default(), Log::default());
    let here = cluster(Vec::new(), here_log.clone());
    let argocd = ToolSources {
        hub: Some(cluster(Vec::new(), hub_log.clone())),
        local: Some("gitops".into()),
        cluster_names: vec![SPOKE.into()],
    };
    let mut options = options(argocd, &here);
    options.application_selector = Some("driftguard.io/cluster=spoke-1".into());
    let policy = PolicyHandle::new(crate::policy::Policy::embedded());
    let mut sweeper = Sweeper::new(here, policy, Arc::new(Metrics::default()), options);
    sweeper.lift_orphaned_pauses().await;
    let lists = |log: &Log| -> Vec<String> {
        (log.lock().unwrap().iter())
            .filter(|r| r.starts_with(&format!("GET {APPS}/applications?")))
            .cloned()
            .collect()
    };
    let selected = "labelSelector=driftguard.io%2Fcluster%3Dspoke-1";
    let (hub, here) = (lists(&hub_log), lists(&here_log));
    assert!(
        !hub.is_empty() && hub.iter().all(|r| r.contains(selected)),
        "{hub:?}"
    );
    assert!(
        !here.is_empty() && !here.iter().any(|r| r.contains("labelSelector")),
        "{here:?}"
    );
}

/// Two looks at pauses left behind, the second past the grace.
async fn look_twice(sweeper: &mut Sweeper) {
    sweeper.lift_orphaned_pauses().await;
    sweeper.orphans.age(ORPHAN_GRACE * 2);
    sweeper.lift_orphaned_pauses().await;
}

/// A pause whose object is armed without a record (an arming the
/// webhook did not see) is kept, and the object recorded.
#[tokio::test]
async fn a_pause_whose_object_is_armed_unrecorded_is_kept_and_recorded() {
    let entry = "apps/Deployment:prod/web";
    let log = Log::default();
    let armed = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "prod", "resourceVersion": "7",
            "annotations": {"argocd.argoproj.io/tracking-id": "web:apps/Deployment:prod/web",
                breakglass_state::PAUSED: SKIP_RECONCILE,
                breakglass_state::REASON: "INC-7", EXPIRES: "2030-01-01T00:00:00Z"}}});
    let here = cluster_with(
        vec![app(
            "argocd",
            "web",
            entry,
            "https://kubernetes.default.svc",
        )],
        vec![armed],
        log.clone(),
    );
    let patched = patched_by_two_looks(here, &log).await;
    assert_eq!(patched.len(), 1, "{patched:?}");
    assert!(
        patched[0].starts_with("PATCH /api/v1/namespaces/driftguard/configmaps/driftguard-armed-"),
        "{patched:?}"
    );
}

/// The sweeper's options with its records in `driftguard`.
fn options(argocd: ToolSources<String>, here: &kube::Client) -> Options {
    Options {
        interval: Duration::from_secs(60),
        argocd_namespace: "argocd".into(),
        lease: None,
        argocd,
        application_selector: None,
        records: Recorder::new(here.clone(), "driftguard"),
    }
}

/// Without a hub, this cluster may be another's hub: its Applications
/// that deploy there hold that cluster's pauses, never lifted from here.
#[tokio::test]
async fn without_a_hub_only_pauses_of_applications_deploying_here_are_lifted() {
    let entry = "apps/Deployment:prod/web";
    let log = Log::default();
    let here = cluster(
        vec![
            app("argocd", "web", entry, SPOKE),
            app("argocd", "api", entry, "https://kubernetes.default.svc"),
        ],
        log.clone(),
    );
    let patched = patched_by_two_looks(here, &log).await;
    assert_eq!(
        patched,
        [format!("PATCH {APPS}/namespaces/argocd/applications/api")]
    );
}

/// An expired break-glass lifts the pause only of an Application that
/// deploys here, in whichever cluster it looks: the hub's as
/// --cluster-name names this cluster, this cluster's own as in-cluster.
#[tokio::test]
async fn every_installation_lifts_only_applications_deploying_here() {
    let hub = || Some(cluster(Vec::new(), Log::default()));
    for (argocd_hub, local) in [(hub(), true), (hub(), false), (None, false)] {
        let here = cluster(Vec::new(), Log::default());
        let argocd = ToolSources {
            hub: argocd_hub,
            local: local.then(|| "gitops".into()),
            cluster_names: vec![SPOKE.into()],
        };
        let options = options(argocd, &here);
        let policy = PolicyHandle::new(crate::policy::Policy::embedded());
        let sweeper = Sweeper::new(here, policy, Arc::new(Metrics::default()), options);
        let judged: Vec<_> = sweeper
            .installations()
            .iter()
            .map(|at| (at.hub, at.deploys_here.cloned()))
            .collect();
        let (in_hub, in_here) = (
            (true, Some(ThisCluster::named(&[SPOKE.to_owned()]))),
            (false, Some(ThisCluster::default())),
        );
        let with_hub = sweeper.options.argocd.hub.is_some();
        let want = match (with_hub, local) {
            (true, true) => vec![in_here, in_hub],
            (true, false) => vec![in_hub],
            _ => vec![in_here],
        };
        assert_eq!(judged, want, "hub {with_hub}, local {local}");
    }
}

#[test]
fn a_refused_lift_says_where_and_how_to_lift_it_by_hand() {
    let entry = "apps/Deployment:production/web";
    let hub = lift_failed("argocd/web", entry, true);
    for said in [
        "Application argocd/web's pause in the hub (--argocd-kubeconfig) for apps/Deployment:production/web",
        "tries again at each sweep, as a pause left behind",
        "hub identity needs patch on applications.argoproj.io",
        "`kubectl --kubeconfig <hub kubeconfig> annotate applications.argoproj.io -n argocd web argocd.argoproj.io/skip-reconcile- driftguard.io/break-glass-paused-for-`",
        "remove only apps/Deployment:production/web",
    ] {
        assert!(hub.contains(said), "{said:?} not in {hub}");
    }
    let here = lift_failed("argocd/web", entry, false);
    assert!(!here.contains("hub"), "{here}");
    assert!(
        here.contains("`kubectl annotate applications.argoproj.io -n argocd web "),
        "{here}"
    );
}

/// An ending that meets a conflict (the object changed since it was read:
/// a status write, a rollout) keeps the record, to be read again; it is
/// never taken for ended (attacker review, issue 40, finding 1).
#[tokio::test]
async fn an_ending_that_conflicts_keeps_the_record() {
    let log = Log::default();
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": "prod", "resourceVersion": "7",
            "labels": {"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"},
            "annotations": {breakglass_state::PAUSED: "kustomize.toolkit.fluxcd.io/reconcile",
                "kustomize.toolkit.fluxcd.io/reconcile": "disabled",
                breakglass_state::REASON: "INC-7", EXPIRES: "2020-01-01T00:00:00Z"}}});
    let service = {
        let log = log.clone();
        tower::service_fn(move |request: Request<Body>| {
            let (object, log) = (object.clone(), log.clone());
            async move {
                let (method, path) = (
                    request.method().to_string(),
                    request.uri().path().to_owned(),
                );
                log.lock().unwrap().push(format!("{method} {path}"));
                let (code, body) = match (method.as_str(), path.as_str()) {
                    ("GET", "/api/v1/namespaces/prod/configmaps/cm") => (200, object),
                    ("GET", "/api/v1") => (
                        200,
                        json!({"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                            {"name": "configmaps", "namespaced": true, "kind": "ConfigMap", "verbs": ["get", "patch"]}]}),
                    ),
                    ("PATCH", "/api/v1/namespaces/prod/configmaps/cm") => (
                        409,
                        json!({"kind": "Status", "code": 409, "reason": "Conflict", "message": "changed"}),
                    ),
                    _ => (200, json!({"kind": "Status", "code": 200})),
                };
                let response = Response::builder()
                    .status(code)
                    .body(Body::from(body.to_string().into_bytes()))
                    .unwrap();
                Ok::<_, std::convert::Infallible>(response)
            }
        })
    };
    let here = kube::Client::new(service, "default");
    let policy = PolicyHandle::new(crate::policy::Policy::embedded());
    let options = options(ToolSources::default(), &here);
    let mut sweeper = Sweeper::new(here, policy, Arc::new(Metrics::default()), options);
    let name = Armed {
        ar: ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        namespace: "prod".into(),
        name: "cm".into(),
        expires: None,
        recorded: None,
        look: None,
    }
    .record_name();
    let record: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name, "resourceVersion": "3"},
        "data": {"apiVersion": "v1", "kind": "ConfigMap", "resource": "configmaps",
            "namespace": "prod", "name": "cm", "expires": "2020-01-01T00:00:00Z",
            "recorded": "2020-01-01T00:00:00Z"}}))
    .unwrap();
    sweeper
        .records
        .update(Ok(kube::runtime::watcher::Event::Apply(record)));
    sweeper.check().await;
    let asked = log.lock().unwrap().clone();
    assert!(
        asked.contains(&"PATCH /api/v1/namespaces/prod/configmaps/cm".to_owned()),
        "{asked:?}"
    );
    assert!(
        !asked.iter().any(|r| r.starts_with("DELETE")),
        "the record was deleted: {asked:?}"
    );
    assert!(sweeper.records.held.contains_key(&name));
}

/// The PATCHes a sweeper without a hub sends over [`look_twice`].
async fn patched_by_two_looks(here: kube::Client, log: &Log) -> Vec<String> {
    let options = options(ToolSources::default(), &here);
    let policy = PolicyHandle::new(crate::policy::Policy::embedded());
    let mut sweeper = Sweeper::new(here, policy, Arc::new(Metrics::default()), options);
    look_twice(&mut sweeper).await;
    let log = log.lock().unwrap();
    log.iter()
        .filter(|r| r.starts_with("PATCH"))
        .cloned()
        .collect()
}

mod orphaned;
mod sequences;
