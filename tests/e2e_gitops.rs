//! End to end with the real GitOps tools in the loop: Flux source- and
//! kustomize-controller, Argo CD application-controller and repo-server, and
//! kube-controller-manager, all built from the Go module proxy
//! (`scripts/build-tools.sh gitops`) and run against a real kube-apiserver
//! with their own CRDs. driftguard is registered through real webhook
//! configurations; people use the machine's kubectl. Under CI=true (and
//! everywhere else) a tool that cannot start fails the test.

use driftguard_testkit::control_plane;
use driftguard_testkit::gitops;
use driftguard_testkit::gitops_e2e;

use std::sync::Mutex;
use std::time::Duration;

use control_plane::*;
use gitops::*;
use gitops_e2e::*;

/// One control plane with its controllers at a time: two cores.
static SERIAL: Mutex<()> = Mutex::new(());

const KUSTOMIZE_SA: &str = "system:serviceaccount:flux-system:kustomize-controller";

const WEB: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: production}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: web
          image: nginx:1.27
          env: [{name: MODE, value: live}]
"#;

const WORKER: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: worker, namespace: production}
spec:
  replicas: 1
  selector: {matchLabels: {app: worker}}
  template:
    metadata: {labels: {app: worker}}
    spec: {containers: [{name: worker, image: "busybox:1.36"}]}
"#;

const SERVICE: &str = r#"apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: production
  annotations: {example.com/owner: shop}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
"#;

const CRON: &str = r#"apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: production}
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: job, image: "busybox:1.36"}]
"#;

const SETTINGS: &str = r#"apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: production}
data: {LOG_LEVEL: info}
"#;

const TENANT_CONFIG: &str = r#"apiVersion: v1
kind: ConfigMap
metadata: {name: tenant-config, namespace: tenant-a}
data: {color: blue}
"#;

/// The tenant's reconciler may edit ConfigMaps in its namespace only.
const TENANT_RBAC: &str = r#"apiVersion: v1
kind: ServiceAccount
metadata: {name: reconciler, namespace: tenant-a}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: reconciler, namespace: tenant-a}
rules:
  - apiGroups: [""]
    resources: [configmaps]
    verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reconciler, namespace: tenant-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: reconciler}
subjects: [{kind: ServiceAccount, name: reconciler, namespace: tenant-a}]
"#;

/// The repository every Kustomization here reads.
fn git_repository(url: &str) -> String {
    format!(
        r#"apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {{name: repo, namespace: flux-system}}
spec:
  interval: 1m
  url: {url}
  ref: {{branch: main}}
"#
    )
}

/// Kustomization tenant-a/tenant, applied as `account` (none: the
/// controller's default).
fn tenant_kustomization(account: Option<&str>) -> String {
    let account = account.map_or(String::new(), |a| format!("  serviceAccountName: {a}\n"));
    format!(
        r#"apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {{name: tenant, namespace: tenant-a}}
spec:
  interval: 1m
  path: ./tenant
  prune: true
  wait: false
  timeout: 1m
{account}  sourceRef: {{kind: GitRepository, name: repo, namespace: flux-system}}
"#
    )
}

fn flux_objects(url: &str) -> String {
    let (repository, tenant) = (
        git_repository(url),
        tenant_kustomization(Some("reconciler")),
    );
    format!(
        r#"{repository}---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {{name: apps, namespace: flux-system}}
spec:
  interval: 1m
  path: ./apps
  prune: true
  wait: false
  timeout: 1m
  sourceRef: {{kind: GitRepository, name: repo}}
---
{tenant}"#
    )
}

/// Flux's multi-tenancy lockdown: the tenant's Kustomization names no
/// account, and kustomize-controller runs with `--default-service-account`.
fn lockdown_objects(url: &str) -> String {
    format!("{}---\n{}", git_repository(url), tenant_kustomization(None))
}

/// sam, on call, runs `kubectl driftguard break-glass deployment/web` in
/// production (the plugin installed as the chart would have it).
fn break_glass_web(plane: &ControlPlane, reason: &str, duration: &str) -> Kubectl {
    let bin = install_plugin(plane);
    let args = [
        "break-glass",
        "deployment/web",
        "-n",
        "production",
        "--reason",
        reason,
        "--for",
        duration,
    ];
    let out = plugin(plane, &bin, "sam", &args);
    assert!(out.ok, "sam breaks glass: {out}");
    out
}

/// `kubectl set image deployment/web web=IMAGE` in production, as `user` or,
/// with `as_account`, as that service account.
fn set_web_image(plane: &ControlPlane, user: &str, as_account: bool, image: &str) -> Kubectl {
    let container = format!("web={image}");
    let args = [
        "-n",
        "production",
        "set",
        "image",
        "deployment/web",
        container.as_str(),
    ];
    if as_account {
        plane.kubectl_as(user, &args)
    } else {
        plane.kubectl(user, &args)
    }
}

#[test]
fn flux_applies_through_driftguard_and_agrees_on_what_is_drift() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (tools, plane, _kcm, repo) = start(
        "gitops-flux",
        &["argocd", "flux-system", "production", "tenant-a"],
    );
    plane.apply_admin(TENANT_RBAC);
    let first = repo.commit(
        "apps",
        &[
            ("apps/web.yaml", Some(WEB)),
            ("apps/worker.yaml", Some(WORKER)),
            ("apps/service.yaml", Some(SERVICE)),
            ("apps/cron.yaml", Some(CRON)),
            ("apps/settings.yaml", Some(SETTINGS)),
            ("tenant/config.yaml", Some(TENANT_CONFIG)),
        ],
    );
    let flux = Flux::start(&plane, &tools);
    let dg = Driftguard::start(
        &plane,
        &[
            &format!("--policy={ROOT}/{POLICY}"),
            &plane.driftguard_kubeconfig_flag(),
            "--watch-flux",
            "--break-glass-sweep-interval=2s",
        ],
    );
    dg.register(&plane, &format!("{ROOT}/{POLICY}"));
    plane.apply_admin(&flux_objects(&repo.http_url));

    // A commit is applied through driftguard: Flux's own identity passes.
    Flux::reconcile(&plane, "flux-system", "apps", Some(&first));
    assert_eq!(
        image(&plane, "production", "web").as_deref(),
        Some("nginx:1.27")
    );
    let web = get_json(&plane, &["-n", "production", "deployment", "web"]).unwrap();
    assert_eq!(
        field(&web, "/metadata/labels/kustomize.toolkit.fluxcd.io~1name").as_deref(),
        Some("apps"),
        "Flux labels what it applies"
    );
    // kube-controller-manager runs: the Deployment got its ReplicaSet.
    eventually("a ReplicaSet for web", Duration::from_secs(60), || {
        let rs = ok(
            plane.kubectl(
                "admin",
                &[
                    "-n",
                    "production",
                    "get",
                    "rs",
                    "-l",
                    "app=web",
                    "-o",
                    "name",
                ],
            ),
            "list ReplicaSets",
        );
        if rs.stdout.trim().is_empty() {
            Err("none yet".into())
        } else {
            Ok(())
        }
    });

    // A human edit is denied, naming the Kustomization.
    let out = set_web_image(&plane, "alice", false, "nginx:hotfix");
    denied(&out, "Flux Kustomization flux-system/apps").unwrap();

    // An ignored field Git does not set: Flux removes what kubectl wrote, so
    // driftguard denies it and says why; written by another field manager
    // (a mesh injector, say) it is allowed, and Flux leaves it.
    let annotate = |manager: Option<&str>| {
        let mut args = vec!["-n", "production", "annotate"];
        args.extend(manager);
        args.extend(["service/web", "example.com/note=by-hand"]);
        plane.kubectl("alice", &args)
    };
    denied(&annotate(None), "Flux removes what kubectl wrote").unwrap();
    ok(
        annotate(Some("--field-manager=mesh-injector")),
        "ignored annotation on the Service, its own field manager",
    );
    // An ignored field that Flux applies from Git (replicas: 2): Flux would
    // revert it, so driftguard denies it and says why.
    let out = plane.kubectl(
        "alice",
        &[
            "-n",
            "production",
            "scale",
            "deployment/web",
            "--replicas=5",
        ],
    );
    denied(&out, "kustomize-controller").unwrap();

    // Flux's own drift correction passes: a trusted change is healed.
    ok(
        set_web_image(&plane, OPERATOR, true, "nginx:1.26"),
        "the operator's change",
    );
    Flux::reconcile(&plane, "flux-system", "apps", None);
    assert_eq!(
        image(&plane, "production", "web").as_deref(),
        Some("nginx:1.27"),
        "{}",
        flux.logs()
    );
    let svc = get_json(&plane, &["-n", "production", "service", "web"]).unwrap();
    assert_eq!(
        field(&svc, "/metadata/annotations/example.com~1note").as_deref(),
        Some("by-hand"),
        "Flux leaves a field it does not apply alone"
    );

    // A new commit, a prune, and the tenant's reconciler writing as itself.
    let tenant_config = TENANT_CONFIG.replace("blue", "green");
    let second = repo.commit(
        "upgrade web, retire worker and nightly",
        &[
            (
                "apps/web.yaml",
                Some(&WEB.replace("nginx:1.27", "nginx:1.28")),
            ),
            ("apps/worker.yaml", None),
            ("apps/cron.yaml", None),
            ("tenant/config.yaml", Some(&tenant_config)),
        ],
    );
    Flux::reconcile(&plane, "flux-system", "apps", Some(&second));
    assert_eq!(
        image(&plane, "production", "web").as_deref(),
        Some("nginx:1.28")
    );
    assert!(
        get_json(&plane, &["-n", "production", "cronjob", "nightly"]).is_none(),
        "pruned"
    );
    assert!(
        get_json(&plane, &["-n", "production", "deployment", "worker"]).is_none(),
        "pruned"
    );
    // The garbage collector removes the pruned Deployment's ReplicaSets.
    eventually(
        "worker's ReplicaSets to be collected",
        Duration::from_secs(60),
        || {
            let rs = ok(
                plane.kubectl(
                    "admin",
                    &[
                        "-n",
                        "production",
                        "get",
                        "rs",
                        "-l",
                        "app=worker",
                        "-o",
                        "name",
                    ],
                ),
                "list ReplicaSets",
            );
            if rs.stdout.trim().is_empty() {
                Ok(())
            } else {
                Err(rs.stdout)
            }
        },
    );
    Flux::reconcile(&plane, "tenant-a", "tenant", Some(&second));
    let cm = get_json(&plane, &["-n", "tenant-a", "configmap", "tenant-config"]).unwrap();
    assert_eq!(
        field(&cm, "/data/color").as_deref(),
        Some("green"),
        "the tenant's update"
    );
    let tenant_writes: Vec<_> = dg
        .audit()
        .into_iter()
        .filter(|r| r["user"] == "system:serviceaccount:tenant-a:reconciler")
        .collect();
    assert!(
        !tenant_writes.is_empty() && tenant_writes.iter().all(|r| r["verdict"] == "allow"),
        "the tenant's writes reach driftguard and are allowed: {tenant_writes:?}"
    );
    assert!(
        dg.audit().iter().all(|r| r["user"] != KUSTOMIZE_SA),
        "kustomize-controller's writes are skipped by matchConditions"
    );

    // Break-glass survives Flux's reconciles until it expires; then Git wins.
    let out = break_glass_web(&plane, "INC-7 checkout down", "45s");
    let web = get_json(&plane, &["-n", "production", "deployment", "web"]).unwrap();
    assert_eq!(
        field(
            &web,
            "/metadata/annotations/kustomize.toolkit.fluxcd.io~1reconcile"
        )
        .as_deref(),
        Some("disabled"),
        "arming pauses Flux for this object: {out}"
    );
    ok(
        set_web_image(&plane, "sam", false, "nginx:1.28-hotfix"),
        "sam's hotfix",
    );
    let out = set_web_image(&plane, "alice", false, "nginx:alice");
    denied(&out, "Flux Kustomization flux-system/apps").unwrap();
    for _ in 0..3 {
        Flux::reconcile(&plane, "flux-system", "apps", None);
        assert_eq!(
            image(&plane, "production", "web").as_deref(),
            Some("nginx:1.28-hotfix"),
            "the hotfix holds through Flux's reconciles"
        );
    }
    wait_break_glass_ended(&plane, "production", "web");
    Flux::reconcile(&plane, "flux-system", "apps", None);
    assert_eq!(
        image(&plane, "production", "web").as_deref(),
        Some("nginx:1.28"),
        "Git wins after expiry"
    );

    // A person's delete of the namespace would take the tenant's Flux
    // objects with it (Kustomization tenant-a/tenant's real inventory): refused.
    let out = plane.kubectl(
        "admin",
        &["delete", "namespace", "tenant-a", "--wait=false"],
    );
    assert!(
        !out.ok
            && out.stderr.contains("/ConfigMap:tenant-a/tenant-config")
            && out.stderr.contains("Flux Kustomization tenant-a/"),
        "{out}"
    );
    // Flux may; the namespace controller then empties it of managed objects.
    ok(
        plane.kubectl_as(FLUX, &["delete", "namespace", "tenant-a", "--wait=false"]),
        "delete tenant-a",
    );
    eventually(
        "namespace tenant-a to be gone",
        Duration::from_secs(90),
        || match get_json(&plane, &["namespace", "tenant-a"]) {
            None => Ok(()),
            Some(ns) => Err(field(&ns, "/status").unwrap_or_default()),
        },
    );
    let denied_system: Vec<_> = dg
        .audit()
        .into_iter()
        .filter(|r| {
            r["verdict"] == "deny" && r["user"].as_str().is_some_and(|u| u.starts_with("system:"))
        })
        .collect();
    assert!(
        denied_system.is_empty(),
        "no system write denied: {denied_system:?}"
    );
    drop(flux);
}

/// A PreSync hook: Argo CD runs it before every sync and waits for it.
const MIGRATE: &str = r#"apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
  namespace: production
  annotations:
    argocd.argoproj.io/hook: PreSync
    argocd.argoproj.io/hook-delete-policy: BeforeHookCreation
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers: [{name: migrate, image: "busybox:1.36"}]
"#;

const TEAM_CONFIG: &str = r#"apiVersion: v1
kind: ConfigMap
metadata: {name: team-config, namespace: NS}
data: {owner: team}
"#;

/// The deployer Argo CD impersonates for team-c syncs may edit ConfigMaps
/// there, and (to show driftguard's trust is per Application) in production.
const DEPLOYER_RBAC: &str = r#"apiVersion: v1
kind: ServiceAccount
metadata: {name: deployer, namespace: team-c}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: configmap-editor}
rules:
  - apiGroups: [""]
    resources: [configmaps]
    verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: deployer, namespace: team-c}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: configmap-editor}
subjects: [{kind: ServiceAccount, name: deployer, namespace: team-c}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: deployer, namespace: production}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: configmap-editor}
subjects: [{kind: ServiceAccount, name: deployer, namespace: team-c}]
---
apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata: {name: tenants, namespace: argocd}
spec:
  sourceRepos: ['*']
  destinations: [{server: '*', namespace: 'team-c'}]
  destinationServiceAccounts:
    - {server: 'https://kubernetes.default.svc', namespace: team-c, defaultServiceAccount: deployer}
"#;

#[test]
fn argocd_syncs_through_driftguard_and_agrees_on_what_is_drift() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (tools, plane, _kcm, repo) = start(
        "gitops-argocd",
        &["argocd", "production", "team-b", "team-c"],
    );
    let first = repo.commit(
        "myapp",
        &[
            ("myapp/web.yaml", Some(WEB)),
            ("myapp/service.yaml", Some(SERVICE)),
            ("myapp/cron.yaml", Some(CRON)),
            ("myapp/settings.yaml", Some(SETTINGS)),
            ("myapp/migrate.yaml", Some(MIGRATE)),
            (
                "labelled/config.yaml",
                Some(&TEAM_CONFIG.replace("NS", "team-b")),
            ),
            (
                "tenant/config.yaml",
                Some(&TEAM_CONFIG.replace("NS", "team-c")),
            ),
        ],
    );
    let argo = ArgoCd::start(&plane, &tools, "");
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
    let url = repo.file_url();
    plane.apply_admin(&application(
        "myapp",
        "default",
        &url,
        "myapp",
        "production",
    ));

    // A sync, with its PreSync hook Job, through driftguard.
    wait_synced(&plane, &argo, "myapp", &first);
    let web = get_json(&plane, &["-n", "production", "deployment", "web"]).unwrap();
    assert_eq!(
        field(
            &web,
            "/metadata/annotations/argocd.argoproj.io~1tracking-id"
        )
        .as_deref(),
        Some("myapp:apps/Deployment:production/web"),
        "Argo CD v3 tracks by annotation"
    );
    let job = get_json(&plane, &["-n", "production", "job", "migrate"]).expect("the hook Job ran");
    assert!(
        field(&job, "/status/succeeded").as_deref() == Some("1"),
        "hook Job: {job}"
    );

    // A human edit is denied, naming the Application and its repository.
    let out = set_web_image(&plane, "alice", false, "nginx:hotfix");
    denied(&out, "Argo CD application myapp").unwrap();
    denied(&out, &url).unwrap();
    // Ignored fields, kubectl edit and replace, and break-glass run in every
    // sync and diff mode in tests/e2e_argocd_modes.rs.

    // Self-heal: a trusted change is reverted by Argo CD, through driftguard.
    ok(
        set_web_image(&plane, OPERATOR, true, "nginx:1.26"),
        "the operator's change",
    );
    eventually(
        "Argo CD to self-heal web",
        Duration::from_secs(60),
        || match image(&plane, "production", "web") {
            Some(i) if i == "nginx:1.27" => Ok(()),
            other => Err(format!("{other:?}\n{}", argo.logs())),
        },
    );

    // A prune.
    let second = repo.commit("retire nightly", &[("myapp/cron.yaml", None)]);
    ArgoCd::hard_refresh(&plane, "myapp");
    wait_synced(&plane, &argo, "myapp", &second);
    eventually(
        "nightly to be pruned",
        Duration::from_secs(60),
        || match get_json(&plane, &["-n", "production", "cronjob", "nightly"]) {
            None => Ok(()),
            Some(_) => Err("still there".into()),
        },
    );

    // Tracking by label.
    plane.apply_admin(&argocd_settings(
        "  application.resourceTrackingMethod: label\n",
    ));
    plane.apply_admin(&application(
        "labelled", "default", &url, "labelled", "team-b",
    ));
    wait_synced(&plane, &argo, "labelled", &second);
    let cm = get_json(&plane, &["-n", "team-b", "configmap", "team-config"]).unwrap();
    assert_eq!(
        field(&cm, "/metadata/labels/app.kubernetes.io~1instance").as_deref(),
        Some("labelled")
    );
    let out = plane.kubectl(
        "alice",
        &[
            "-n",
            "team-b",
            "patch",
            "configmap",
            "team-config",
            "-p",
            r#"{"data":{"owner":"me"}}"#,
        ],
    );
    denied(&out, "Argo CD application labelled").unwrap();

    // Sync impersonation: the deployer service account writes, and
    // driftguard trusts it for exactly this Application's objects.
    plane.apply_admin(&argocd_settings(
        "  application.resourceTrackingMethod: annotation\n  application.sync.impersonation.enabled: \"true\"\n",
    ));
    plane.apply_admin(DEPLOYER_RBAC);
    // Server-side diff: Argo CD compares through server-side dry-run applies,
    // as the impersonated account, and those dry runs reach driftguard too.
    let tenant = application("tenant", "tenants", &url, "tenant", "team-c").replace(
        "metadata: {name: tenant, namespace: argocd}",
        "metadata: {name: tenant, namespace: argocd, annotations: {argocd.argoproj.io/compare-options: ServerSideDiff=true}}",
    );
    plane.apply_admin(&tenant);
    wait_synced(&plane, &argo, "tenant", &second);
    let third = repo.commit(
        "team-c owner",
        &[(
            "tenant/config.yaml",
            Some(
                &TEAM_CONFIG
                    .replace("NS", "team-c")
                    .replace("owner: team", "owner: team-c"),
            ),
        )],
    );
    ArgoCd::hard_refresh(&plane, "tenant");
    wait_synced(&plane, &argo, "tenant", &third);
    let cm = get_json(&plane, &["-n", "team-c", "configmap", "team-config"]).unwrap();
    assert_eq!(field(&cm, "/data/owner").as_deref(), Some("team-c"));
    let deployer: Vec<_> = dg
        .audit()
        .into_iter()
        .filter(|r| r["user"] == "system:serviceaccount:team-c:deployer")
        .collect();
    assert!(
        deployer
            .iter()
            .any(|r| r["operation"] == "UPDATE" && r["dryRun"] == false)
            && deployer.iter().any(|r| r["dryRun"] == true)
            && deployer.iter().all(|r| r["verdict"] == "allow"),
        "the impersonated writes reach driftguard and are allowed: {deployer:?}"
    );
    // The same identity on another Application's object is a manual change.
    let out = plane.kubectl_as(
        "system:serviceaccount:team-c:deployer",
        &[
            "-n",
            "production",
            "patch",
            "configmap",
            "settings",
            "-p",
            r#"{"data":{"LOG_LEVEL":"debug"}}"#,
        ],
    );
    denied(&out, "Argo CD application myapp").unwrap();
}

/// Under Flux's multi-tenancy lockdown (`--default-service-account`),
/// kustomize-controller applies a Kustomization that names no account as
/// the default account of the Kustomization's namespace. driftguard trusts
/// it for that Kustomization's objects only when told the same name
/// (`--flux-default-service-account`); without it the writes are a
/// person's, and denied.
#[test]
fn flux_lockdown_applies_as_the_default_account_driftguard_is_told_of() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (tools, plane, _kcm, repo) =
        start("gitops-lockdown", &["argocd", "flux-system", "tenant-a"]);
    plane.apply_admin(TENANT_RBAC);
    let first = repo.commit("tenant", &[("tenant/config.yaml", Some(TENANT_CONFIG))]);
    let flux = Flux::start_with(&plane, &tools, &["--default-service-account=reconciler"]);
    let mut dg = Driftguard::start(
        &plane,
        &[
            &format!("--policy={ROOT}/{POLICY}"),
            &plane.driftguard_kubeconfig_flag(),
            "--watch-flux",
        ],
    );
    dg.register(&plane, &format!("{ROOT}/{POLICY}"));
    plane.apply_admin(&lockdown_objects(&repo.http_url));

    // Not told: the reconciler's apply is judged as a person's write.
    eventually(
        "the tenant's apply to be refused by driftguard",
        Duration::from_secs(90),
        || {
            let k = get_json(&plane, &["-n", "tenant-a", "kustomization", "tenant"])
                .ok_or("no Kustomization")?;
            let text = k["status"]["conditions"].to_string();
            if text.contains("denied the request") {
                Ok(())
            } else {
                Err(format!("conditions: {text}"))
            }
        },
    );
    assert!(get_json(&plane, &["-n", "tenant-a", "configmap", "tenant-config"]).is_none());
    let refused = dg.audit();
    assert!(
        refused
            .iter()
            .any(|r| r["user"] == "system:serviceaccount:tenant-a:reconciler"
                && r["verdict"] == "deny"),
        "the default account's write reached driftguard and was denied: {refused:?}"
    );

    // Told: the same writes are the tenant's Kustomization's own.
    dg.restart_with(&[], &["--flux-default-service-account=reconciler"]);
    Flux::reconcile(&plane, "tenant-a", "tenant", Some(&first));
    let cm = get_json(&plane, &["-n", "tenant-a", "configmap", "tenant-config"]);
    assert_eq!(
        cm.as_ref().and_then(|c| field(c, "/data/color")).as_deref(),
        Some("blue"),
        "{}",
        flux.logs()
    );
    // Only for what the Kustomization applies: a person is still refused.
    let out = plane.kubectl(
        "alice",
        &[
            "-n",
            "tenant-a",
            "patch",
            "configmap",
            "tenant-config",
            "-p",
            r#"{"data":{"color":"red"}}"#,
        ],
    );
    denied(&out, "Flux Kustomization tenant-a/tenant").unwrap();
}
