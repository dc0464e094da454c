//! End to end with the real Argo CD applicationset-controller (issue 22, item
//! 4): ApplicationSets generate the Applications that the real
//! application-controller syncs through driftguard, registered as the real
//! webhook. The applicationset-controller rewrites every Application it
//! generated to its template, annotations included (argo-cd v3.6.1
//! `createOrUpdateInCluster`), keeping only `spec.preservedFields`: so
//! break-glass pauses a generated Application only when its ApplicationSet
//! keeps the pause, and says plainly when it does not. Under CI=true (and
//! everywhere else) a tool that cannot start fails the test.

use driftguard_testkit::control_plane;
use driftguard_testkit::gitops;
use driftguard_testkit::gitops_e2e;

use std::path::Path;
use std::time::{Duration, Instant};

use control_plane::*;
use gitops::*;
use gitops_e2e::{DRIFTGUARD_EXTRA_RBAC, POLICY, install_plugin, plugin};

const SKIP_RECONCILE: &str = "argocd.argoproj.io/skip-reconcile";
const PAUSED_FOR: &str = "driftguard.io/break-glass-paused-for";

const WEB: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: production}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: "nginx:1.27"}]}
"#;

const API: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: production}
spec:
  replicas: 1
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec: {containers: [{name: api, image: "busybox:1.36"}]}
"#;

/// An ApplicationSet with a list generator: one Application, `NAME-prod`,
/// syncing path NAME of the repository with self-heal. PRESERVED is the
/// `spec.preservedFields` block (or nothing).
const APPLICATION_SET: &str = r#"apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: NAME, namespace: argocd}
spec:
  goTemplate: true
  goTemplateOptions: ["missingkey=error"]
  generators:
    - list:
        elements: [{env: prod}]
PRESERVED  template:
    metadata:
      name: 'NAME-{{.env}}'
      annotations: {example.com/team: shop}
    spec:
      project: default
      source: {repoURL: 'GIT_REPO', targetRevision: main, path: NAME}
      destination: {server: https://kubernetes.default.svc, namespace: production}
      syncPolicy:
        automated: {prune: true, selfHeal: true}
"#;

/// What an ApplicationSet must say for break-glass to pause its Applications.
const KEEPS_THE_PAUSE: &str = r#"  preservedFields:
    annotations: [argocd.argoproj.io/skip-reconcile, driftguard.io/break-glass-paused-for]
"#;

fn application_set(name: &str, url: &str, preserved: &str) -> String {
    APPLICATION_SET
        .replace("NAME", name)
        .replace("GIT_REPO", url)
        .replace("PRESERVED", preserved)
}

/// sam, on call, breaks glass on `deployment/NAME` in production for `duration`.
fn break_glass(plane: &ControlPlane, bin: &Path, deploy: &str, duration: &str) -> Kubectl {
    let target = format!("deployment/{deploy}");
    let args = [
        "break-glass",
        target.as_str(),
        "-n",
        "production",
        "--reason",
        "INC-22 checkout down",
        "--for",
        duration,
    ];
    let out = plugin(plane, bin, "sam", &args);
    assert!(out.ok, "sam breaks glass on {target}: {out}");
    out
}

fn set_image(plane: &ControlPlane, user: &str, deploy: &str, image: &str) -> Kubectl {
    let container = format!("{deploy}={image}");
    plane.kubectl(
        user,
        &[
            "-n",
            "production",
            "set",
            "image",
            &format!("deployment/{deploy}"),
            &container,
        ],
    )
}

fn image(plane: &ControlPlane, deploy: &str) -> Option<String> {
    get_json(plane, &["-n", "production", "deployment", deploy])
        .and_then(|d| field(&d, "/spec/template/spec/containers/0/image"))
}

fn application(plane: &ControlPlane, name: &str) -> Option<serde_json::Value> {
    get_json(plane, &["-n", "argocd", "application", name])
}

/// The Application's value of annotation `key`.
fn app_annotation(plane: &ControlPlane, name: &str, key: &str) -> Option<String> {
    application(plane, name).and_then(|a| {
        a["metadata"]["annotations"]
            .get(key)
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    })
}

/// Waits until ApplicationSet `set` has generated Application `app` (its
/// controller owner) and Argo CD synced it at `revision`.
fn wait_generated_and_synced(
    plane: &ControlPlane,
    argo: &ArgoCd,
    set: &str,
    app: &str,
    revision: &str,
) {
    eventually(
        &format!("ApplicationSet {set} to generate {app}, synced at {revision}"),
        Duration::from_secs(240),
        || {
            let a = application(plane, app).ok_or("not generated yet")?;
            let owner = a["metadata"]["ownerReferences"]
                .as_array()
                .and_then(|refs| {
                    refs.iter()
                        .find(|r| r["kind"] == "ApplicationSet" && r["controller"] == true)
                })
                .and_then(|r| r["name"].as_str())
                .unwrap_or_default()
                .to_owned();
            let sync = field(&a, "/status/sync/status").unwrap_or_default();
            let at = field(&a, "/status/sync/revision").unwrap_or_default();
            let op = field(&a, "/status/operationState/phase").unwrap_or_default();
            if owner == set && sync == "Synced" && at == revision && op == "Succeeded" {
                Ok(())
            } else {
                Err(format!(
                    "owner={owner:?} sync={sync} revision={at} operation={op}\n{}",
                    argo.logs()
                ))
            }
        },
    );
}

/// A denial as a person sees it.
fn denied(out: &Kubectl, needle: &str) {
    assert!(
        !out.ok && out.stderr.contains("denied") && out.stderr.contains(needle),
        "expected a denial naming {needle:?}: {out}"
    );
}

/// Waits until the sweeper has ended the break-glass on `deploy`.
fn wait_break_glass_ended(plane: &ControlPlane, deploy: &str) {
    eventually(
        "the break-glass to expire and be swept",
        Duration::from_secs(120),
        || {
            let d = get_json(plane, &["-n", "production", "deployment", deploy]).ok_or("gone")?;
            let left: Vec<&str> = [
                "driftguard.io/break-glass",
                "driftguard.io/break-glass-expires",
                "driftguard.io/break-glass-paused",
            ]
            .into_iter()
            .filter(|k| d["metadata"]["annotations"].get(*k).is_some())
            .collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("still there: {left:?}"))
            }
        },
    );
}

#[test]
fn break_glass_holds_on_a_generated_application_only_where_its_application_set_keeps_the_pause() {
    let start = Instant::now();
    let lap = |what: &str| {
        eprintln!(
            "[e2e_appset {:>6.1}s] {what}",
            start.elapsed().as_secs_f64()
        )
    };
    let tools = Tools::build();
    let mut plane = ControlPlane::start("appset");
    plane.prepare(&["argocd", "production"]);
    plane.apply_admin(DRIFTGUARD_EXTRA_RBAC);
    let repo = GitRepo::new(&plane, &tools);
    let first = repo.commit(
        "web and api",
        &[("web/web.yaml", Some(WEB)), ("api/api.yaml", Some(API))],
    );
    let argo = ArgoCd::start(&plane, &tools, "");
    let _appset_controller = argo.start_applicationset_controller(&plane, &tools);
    let _dg = {
        let dg = Driftguard::start(
            &plane,
            &[
                &format!("--policy={ROOT}/{POLICY}"),
                &plane.driftguard_kubeconfig_flag(),
                "--watch-argocd",
                "--break-glass-sweep-interval=2s",
            ],
        );
        dg.register(&plane, &format!("{ROOT}/{POLICY}"));
        dg
    };
    let bin = install_plugin(&plane);
    let url = repo.file_url();
    lap("control plane, Argo CD (3 controllers) and driftguard up");

    // 1. Each ApplicationSet generates its Application, which syncs through driftguard.
    plane.apply_admin(&application_set("web", &url, KEEPS_THE_PAUSE));
    plane.apply_admin(&application_set("api", &url, ""));
    wait_generated_and_synced(&plane, &argo, "web", "web-prod", &first);
    wait_generated_and_synced(&plane, &argo, "api", "api-prod", &first);
    assert_eq!(image(&plane, "web").as_deref(), Some("nginx:1.27"));
    lap("ApplicationSets generated web-prod and api-prod, both synced");

    // 2. A human edit is denied, naming the Application and its ApplicationSet.
    let out = set_image(&plane, "alice", "web", "nginx:hotfix");
    eprintln!("alice: {}", out.stderr.trim());
    denied(&out, "Argo CD application web-prod");
    denied(&out, "generated by ApplicationSet argocd/web");
    denied(&out, &url);

    // 3. Break-glass where the ApplicationSet keeps the pause: it holds
    // against self-heal while the applicationset-controller reconciles the
    // Application, and Git is restored at expiry.
    let armed_at = Instant::now();
    let out = break_glass(&plane, &bin, "web", "40s");
    eprintln!("sam: {}", out.stdout.trim());
    assert!(
        out.stdout
            .contains("Argo CD Application argocd/web-prod is paused (skip-reconcile)")
            && out
                .stdout
                .contains("its ApplicationSet argocd/web keeps the pause"),
        "{out}"
    );
    assert_eq!(
        app_annotation(&plane, "web-prod", SKIP_RECONCILE).as_deref(),
        Some("true")
    );
    ArgoCd::refresh_application_set(&plane, "web");
    let app = application(&plane, "web-prod").unwrap();
    assert_eq!(
        field(
            &app,
            "/metadata/annotations/argocd.argoproj.io~1skip-reconcile"
        )
        .as_deref(),
        Some("true"),
        "the reconciled Application keeps the pause: {}",
        app["metadata"]
    );
    assert_eq!(
        field(&app, "/metadata/annotations/example.com~1team").as_deref(),
        Some("shop"),
        "and the template's own annotation"
    );
    ok(
        set_image(&plane, "sam", "web", "nginx:1.27-hotfix"),
        "sam's hotfix",
    );
    let hotfix_holds = || match (
        image(&plane, "web"),
        app_annotation(&plane, "web-prod", SKIP_RECONCILE),
    ) {
        (Some(i), Some(s)) if i == "nginx:1.27-hotfix" && s == "true" => Ok(()),
        other => Err(format!("image, skip-reconcile: {other:?}\n{}", argo.logs())),
    };
    holds(
        "the hotfix under selfHeal: true",
        Duration::from_secs(8),
        hotfix_holds,
    );
    ArgoCd::refresh_application_set(&plane, "web");
    holds(
        "the hotfix after another ApplicationSet reconcile",
        Duration::from_secs(6),
        hotfix_holds,
    );
    lap("the hotfix held under the generated Application's pause");
    wait_break_glass_ended(&plane, "web");
    assert!(
        armed_at.elapsed() >= Duration::from_secs(38),
        "the break-glass lasted its whole duration"
    );
    assert_eq!(app_annotation(&plane, "web-prod", SKIP_RECONCILE), None);
    assert_eq!(app_annotation(&plane, "web-prod", PAUSED_FOR), None);
    eventually(
        "Git to win after expiry (self-heal)",
        Duration::from_secs(120),
        || match image(&plane, "web") {
            Some(i) if i == "nginx:1.27" => Ok(()),
            other => Err(format!("{other:?}\n{}", argo.logs())),
        },
    );
    lap("expired, swept, and Git restored");

    // 4. An ApplicationSet that keeps nothing: the plugin writes no pause and
    // says so; a pause written anyway is removed by the controller, and
    // self-heal reverts the change driftguard allows.
    let out = break_glass(&plane, &bin, "api", "5m");
    eprintln!("sam: {}", out.stdout.trim());
    assert!(
        out.stdout.contains(
            "Argo CD is NOT paused: Application argocd/api-prod is generated by ApplicationSet argocd/api"
        ) && out.stdout.contains(
            "would remove argocd.argoproj.io/skip-reconcile and driftguard.io/break-glass-paused-for within seconds"
        ) && !out.stdout.contains("is paused (skip-reconcile)")
            && !out.stdout.contains("the pause within its sweep interval"),
        "{out}"
    );
    assert_eq!(app_annotation(&plane, "api-prod", SKIP_RECONCILE), None);
    let api = get_json(&plane, &["-n", "production", "deployment", "api"]).unwrap();
    assert!(
        api["metadata"]["annotations"]
            .get("driftguard.io/break-glass-paused")
            .is_none(),
        "no pause recorded on the object: {}",
        api["metadata"]
    );
    ok(
        plane.kubectl(
            "admin",
            &[
                "-n",
                "argocd",
                "annotate",
                "application/api-prod",
                &format!("{SKIP_RECONCILE}=true"),
            ],
        ),
        "a pause by hand",
    );
    eventually(
        "the applicationset-controller to remove the pause",
        Duration::from_secs(60),
        || match app_annotation(&plane, "api-prod", SKIP_RECONCILE) {
            None => Ok(()),
            Some(v) => Err(format!("{SKIP_RECONCILE}={v}")),
        },
    );
    ok(
        set_image(&plane, "sam", "api", "busybox:1.37"),
        "allowed under break-glass",
    );
    eventually(
        "self-heal to revert it, as the plugin said",
        Duration::from_secs(90),
        || match image(&plane, "api") {
            Some(i) if i == "busybox:1.36" => Ok(()),
            other => Err(format!("{other:?}\n{}", argo.logs())),
        },
    );
    let out = plugin(
        &plane,
        &bin,
        "sam",
        &["break-glass", "deployment/api", "-n", "production", "--end"],
    );
    assert!(out.ok, "{out}");
    lap("the ApplicationSet without preservedFields: no pause claimed");
}
