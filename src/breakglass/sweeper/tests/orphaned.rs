//! The pass over pauses left behind against a hub's tenants (issue 50,
//! item 4): only Applications Argo CD reconciles are read, and forged
//! entries it may not lift take no real entry's place.

use super::*;

const HERE: &str = "https://kubernetes.default.svc";
const REAL: &str = "apps/Deployment:prod/web";

/// Application `namespace/name` of `project`, paused for `entries`.
fn paused(namespace: &str, name: &str, project: &str, entries: &[String]) -> Value {
    let mut a = app(namespace, name, &entries.join(","), HERE);
    a["spec"]["project"] = json!(project);
    a
}

/// 64 forged entries (as many as a list is read for), for objects that do not exist.
fn forged(app: &str) -> Vec<String> {
    (0..64)
        .map(|i| format!("apps/Deployment:t/{app}-{i}"))
        .collect()
}

/// argocd-cmd-params-cm with `application.namespaces` = `enabled`, and the
/// AppProjects `team` (source namespaces `team-*`, `a-tenant`) and
/// `default` (none), listed by name; PATCHes in `refused` namespaces
/// answered 403.
fn argocd_settings(enabled: &'static str, refused: &'static [&'static str]) -> Answer {
    Arc::new(move |method: &str, path: &str, query: &str| {
        if path == "/api/v1/namespaces/argocd/configmaps" {
            assert!(query.contains("argocd-cmd-params-cm"), "{query}");
            let cm = json!({"metadata": {"name": "argocd-cmd-params-cm", "namespace": "argocd"},
                "data": {"application.namespaces": enabled}});
            return Some((
                200,
                json!({"apiVersion": "v1", "kind": "ConfigMapList",
                "metadata": {}, "items": [cm]}),
            ));
        }
        if path == format!("{APPS}/namespaces/argocd/appprojects") {
            let project = |name: &str, sources: Value| {
                json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
                    "metadata": {"name": name, "namespace": "argocd"},
                    "spec": {"sourceNamespaces": sources}})
            };
            let items: Vec<Value> = [
                project("team", json!(["team-*", "a-tenant"])),
                project("default", json!([])),
            ]
            .into_iter()
            .filter(|p| query.contains(&format!("%3D{}", p["metadata"]["name"].as_str().unwrap())))
            .collect();
            return Some((
                200,
                json!({"apiVersion": "argoproj.io/v1alpha1",
                "kind": "AppProjectList", "metadata": {}, "items": items}),
            ));
        }
        let forbidden = refused
            .iter()
            .any(|ns| path.starts_with(&format!("{APPS}/namespaces/{ns}/")));
        (method == "PATCH" && forbidden).then(|| {
            (403, json!({"kind": "Status", "code": 403, "reason": "Forbidden", "message": "forbidden"}))
        })
    })
}

fn sweeper_of(here: kube::Client) -> Sweeper {
    let options = options(ToolSources::default(), &here);
    let policy = PolicyHandle::new(crate::policy::Policy::embedded());
    Sweeper::new(here, policy, Arc::new(Metrics::default()), options)
}

fn requests(log: &Log, prefix: &str) -> Vec<String> {
    (log.lock().unwrap().iter())
        .filter(|r| r.starts_with(prefix))
        .cloned()
        .collect()
}

/// A tenant namespace Argo CD does not take (not in
/// `application.namespaces`), sorting before argocd, with 4 Applications of
/// 64 forged entries each: never read past the list, and argocd/web's pause
/// lifted. In a namespace it does take, only an Application whose project
/// admits that namespace is lifted, its project read by its own name only.
#[tokio::test]
async fn only_applications_argo_cd_reconciles_are_read() {
    let log = Log::default();
    let mut apps: Vec<Value> = (0..4)
        .map(|i| {
            paused(
                "a-tenant",
                &format!("t{i}"),
                "team",
                &forged(&format!("t{i}")),
            )
        })
        .collect();
    apps.push(paused("argocd", "web", "default", &[REAL.into()]));
    apps.push(paused(
        "team-a",
        "ok",
        "team",
        &["apps/Deployment:prod/ok".into()],
    ));
    apps.push(paused(
        "team-b",
        "bad",
        "default",
        &["apps/Deployment:prod/bad".into()],
    ));
    // A project name that would widen the field selector to another project.
    let sly = "team,metadata.name!=nothing";
    apps.push(paused(
        "team-a",
        "sly",
        sly,
        &["apps/Deployment:prod/sly".into()],
    ));
    let here = cluster_answering(
        apps,
        Vec::new(),
        log.clone(),
        argocd_settings("team-*", &[]),
    );
    let mut sweeper = sweeper_of(here);
    look_twice(&mut sweeper).await;
    assert_eq!(
        requests(&log, "PATCH"),
        [
            format!("PATCH {APPS}/namespaces/argocd/applications/web"),
            format!("PATCH {APPS}/namespaces/team-a/applications/ok"),
        ]
    );
    let asked = log.lock().unwrap().clone();
    assert!(
        !asked
            .iter()
            .any(|r| r.contains("/namespaces/a-tenant/") || r.contains("/namespaces/t/")),
        "{asked:?}"
    );
    // team-b's Application was read (its namespace is taken), not written.
    assert!(asked.contains(&format!("GET {APPS}/namespaces/team-b/applications/bad")));
}

/// The starvation, with the tenant's namespace taken by Argo CD and
/// its project admitting it, so that its 256 forged entries fill a pass and
/// the lift of each is refused: argocd/web is lifted in the first pass all
/// the same, and the refused entries wait: the next pass (at once) tries
/// none of them again.
#[tokio::test]
async fn forged_entries_refused_take_no_place_and_wait() {
    let log = Log::default();
    let mut apps: Vec<Value> = (0..4)
        .map(|i| {
            paused(
                "a-tenant",
                &format!("t{i}"),
                "team",
                &forged(&format!("t{i}")),
            )
        })
        .collect();
    apps.push(paused("argocd", "web", "default", &[REAL.into()]));
    let settings = argocd_settings("a-tenant", &["a-tenant"]);
    let here = cluster_answering(apps, Vec::new(), log.clone(), settings);
    let mut sweeper = sweeper_of(here);
    look_twice(&mut sweeper).await;
    let web = format!("PATCH {APPS}/namespaces/argocd/applications/web");
    let patched = requests(&log, "PATCH");
    assert!(
        patched.contains(&web),
        "{:?}",
        &patched[..patched.len().min(5)]
    );
    let refused = patched.iter().filter(|r| r.contains("a-tenant")).count();
    assert_eq!(refused, MAX_ORPHANS_PER_PASS - 1, "the rest of the pass");
    assert_eq!(
        sweeper.metrics.break_glass_lift_failures.get(),
        refused as u64
    );
    // Right after: the ones refused wait; only the one not reached is tried.
    log.lock().unwrap().clear();
    sweeper.lift_orphaned_pauses().await;
    let again = requests(&log, "PATCH");
    assert_eq!(again.len(), 1, "{again:?}");
}
