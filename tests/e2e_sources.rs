//! End to end, cluster integration: driftguard reads Argo CD Applications,
//! AppProjects, argocd-cm and Flux Kustomizations from a real apiserver (minimal CRDs in
//! tests/data/crds), with exactly its own minimal RBAC, and judges with them.

use driftguard_testkit::control_plane;

use std::time::Duration;

use control_plane::*;

const TENANT: &str = "system:serviceaccount:tenant-a:reconciler";

fn application(ignore_replicas: bool) -> String {
    let ignore = if ignore_replicas {
        "  ignoreDifferences:\n    - group: apps\n      kind: Deployment\n      jsonPointers: [/spec/replicas]\n"
    } else {
        ""
    };
    format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {{name: shop, namespace: argocd}}\nspec:\n  project: default\n  source: {{repoURL: 'https://git.example.com/shop.git', path: deploy, targetRevision: main}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: shop}}\n{ignore}"
    )
}

const OBJECTS: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: shop
  namespace: shop
  annotations: {argocd.argoproj.io/tracking-id: "shop:apps/Deployment:shop/shop"}
spec:
  replicas: 1
  selector: {matchLabels: {app: shop}}
  template:
    metadata: {labels: {app: shop}}
    spec: {containers: [{name: shop, image: "nginx:1.27"}]}
"#;

const FLUX: &str = r#"
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: apps, namespace: tenant-a}
spec:
  interval: 5m
  prune: true
  path: ./apps
  serviceAccountName: reconciler
  sourceRef: {kind: GitRepository, name: repo}
  ignore:
    - paths: [/spec/replicas]
      target: {kind: Deployment}
"#;

/// Retries `f` until it holds: the sources update through watches.
fn eventually(what: &str, f: impl FnMut() -> Result<(), String>) {
    wait_for(what, Duration::from_secs(20), f)
}

#[test]
fn argo_cd_and_flux_are_sources_of_truth() {
    let mut plane = ControlPlane::start("sources");
    plane.prepare(&["argocd", "flux-system", "shop", "tenant-a"]);
    plane.apply_crds(&[
        "argocd-application",
        "flux-kustomization",
        "flux-helmrelease",
    ]);
    plane.apply_admin(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: reconciler, namespace: tenant-a}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: workload-editor}\nsubjects:\n  - {kind: ServiceAccount, name: reconciler, namespace: tenant-a}\n"
    );
    plane.apply_admin(&application(true));
    plane.apply_admin(FLUX);
    let out = plane.kubectl_as_stdin(ARGO, &["apply", "-f", "-"], Some(OBJECTS));
    assert!(out.ok, "{out}");
    let out = plane.kubectl_as_stdin(TENANT, &["apply", "-f", "-"], Some(TENANT_WEB_DEPLOYMENT));
    assert!(out.ok, "{out}");

    // No policy file: the embedded default, plus what Argo CD and Flux say.
    let dg = Driftguard::start(
        &plane,
        &[
            "--watch-argocd",
            "--watch-flux",
            &plane.driftguard_kubeconfig_flag(),
        ],
    );
    dg.register(&plane, &format!("{ROOT}/src/policy/default-policy.yaml"));

    // The Application's own ignoreDifferences apply to its objects.
    eventually("scale allowed by the Application's rule", || {
        let out = plane.kubectl(
            "alice",
            &["-n", "shop", "scale", "deployment/shop", "--replicas=3"],
        );
        if out.ok { Ok(()) } else { Err(out.to_string()) }
    });
    let out = plane.kubectl(
        "alice",
        &[
            "-n",
            "shop",
            "set",
            "image",
            "deployment/shop",
            "shop=nginx:1.28",
        ],
    );
    assert!(!out.ok, "{out}");
    assert!(
        out.stderr
            .contains("Argo CD application shop (https://git.example.com/shop.git, path deploy)"),
        "{out}"
    );

    // Changing the Application takes effect without a restart.
    plane.apply_admin(&application(false));
    eventually("scale denied once the rule is gone", || {
        let out = plane.kubectl(
            "alice",
            &["-n", "shop", "scale", "deployment/shop", "--replicas=4"],
        );
        if !out.ok && out.stderr.contains("/spec/replicas") {
            Ok(())
        } else {
            Err(out.to_string())
        }
    });

    // argocd-cm resource customizations apply to every Argo CD object.
    plane.apply_admin(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: argocd-cm, namespace: argocd}\ndata:\n  resource.customizations.ignoreDifferences.apps_Deployment: |\n    jsonPointers:\n    - /metadata/labels/team\n",
    );
    eventually("label ignored through argocd-cm", || {
        let out = plane.kubectl(
            "alice",
            &[
                "-n",
                "shop",
                "label",
                "--overwrite",
                "deployment/shop",
                "team=checkout",
            ],
        );
        if out.ok { Ok(()) } else { Err(out.to_string()) }
    });

    // Flux multi-tenancy: the tenant's service account is trusted for its own objects only.
    let out = plane.kubectl_as(
        TENANT,
        &[
            "-n",
            "tenant-a",
            "set",
            "image",
            "deployment/web",
            "web=nginx:1.28",
        ],
    );
    assert!(
        out.ok,
        "the Kustomization's own service account was refused: {out}"
    );
    let out = plane.kubectl_as(
        TENANT,
        &[
            "-n",
            "shop",
            "set",
            "image",
            "deployment/shop",
            "shop=nginx:1.29",
        ],
    );
    assert!(!out.ok, "a tenant changed another tool's object: {out}");
    let out = plane.kubectl(
        "alice",
        &[
            "-n",
            "tenant-a",
            "set",
            "image",
            "deployment/web",
            "web=nginx:1.29",
        ],
    );
    assert!(!out.ok, "{out}");
    assert!(
        out.stderr.contains(
            "Flux Kustomization tenant-a/apps (GitRepository tenant-a/repo, path ./apps)"
        ),
        "{out}"
    );
    // The Kustomization's spec.ignore.
    let out = plane.kubectl(
        "alice",
        &["-n", "tenant-a", "scale", "deployment/web", "--replicas=2"],
    );
    assert!(out.ok, "{out}");

    // Opt-out: adding it by hand is drift; once the tenant sets it, the object is unmanaged.
    let out = plane.kubectl(
        "alice",
        &[
            "-n",
            "tenant-a",
            "annotate",
            "deployment/web",
            "kustomize.toolkit.fluxcd.io/reconcile=disabled",
        ],
    );
    assert!(!out.ok, "{out}");
    let out = plane.kubectl_as(
        TENANT,
        &[
            "-n",
            "tenant-a",
            "annotate",
            "deployment/web",
            "kustomize.toolkit.fluxcd.io/reconcile=disabled",
        ],
    );
    assert!(out.ok, "{out}");
    let out = plane.kubectl(
        "alice",
        &[
            "-n",
            "tenant-a",
            "set",
            "image",
            "deployment/web",
            "web=nginx:1.30",
        ],
    );
    assert!(out.ok, "opted-out object still judged: {out}");
    let audited = dg
        .audit()
        .into_iter()
        .any(|r| r["name"] == "web" && r["reason"] == "out-of-scope" && r["user"] == "alice");
    assert!(audited, "the opted-out write is audited as such");

    // A tenant's Application in its own namespace, which Argo CD does not
    // reconcile (no argocd-cmd-params-cm application.namespaces), listing
    // another team's name in the status it may write (the CRD has no status
    // subresource). Applied before the status patch below: once that
    // counts, the watch has seen this too.
    plane.apply_admin(&format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {{name: squatter, namespace: tenant-a}}\nspec:\n  project: default\n  destination: {{server: 'https://kubernetes.default.svc', namespace: shop}}\nstatus:\n  resources: [{SQUATTED}]\n"
    ));

    // What the tools list in their status, a person may not create first:
    // a Missing object of the Application, an inventory entry of the
    // Kustomization.
    let out = plane.kubectl(
        "admin",
        &[
            "-n",
            "argocd",
            "patch",
            "application/shop",
            "--type=merge",
            "-p",
            r#"{"status":{"resources":[{"group":"apps","version":"v1","kind":"Deployment","namespace":"shop","name":"shop-next","status":"OutOfSync","health":{"status":"Missing"}}]}}"#,
        ],
    );
    assert!(out.ok, "{out}");
    let out = plane.kubectl(
        "admin",
        &[
            "-n",
            "tenant-a",
            "patch",
            "kustomization/apps",
            // The test CRD has no status subresource (Flux's own does).
            "--type=merge",
            "-p",
            r#"{"status":{"inventory":{"entries":[{"id":"tenant-a_worker_apps_Deployment","v":"v1"}]}}}"#,
        ],
    );
    assert!(out.ok, "{out}");
    for (namespace, name, by) in [
        ("shop", "shop-next", "Argo CD application argocd/shop"),
        ("tenant-a", "worker", "Flux Kustomization tenant-a/apps"),
    ] {
        let create = |dry_run: bool| {
            let mut args = vec![
                "-n",
                namespace,
                "create",
                "deployment",
                name,
                "--image=nginx:1.27",
            ];
            if dry_run {
                args.push("--dry-run=server");
            }
            plane.kubectl("alice", &args)
        };
        // Dry runs until the watch has the status: nothing is created meanwhile.
        eventually(&format!("creating {name} by hand refused"), || {
            let out = create(true);
            if !out.ok && out.stderr.contains(&format!("is listed by {by}")) {
                Ok(())
            } else {
                Err(out.to_string())
            }
        });
        let out = create(false);
        assert!(
            !out.ok && out.stderr.contains(&format!("is listed by {by}")),
            "{out}"
        );
    }
    // An object no tool lists, and one only an Application Argo CD does not
    // reconcile lists: no one's.
    for name in ["unlisted", "squatted"] {
        let args = [
            "-n",
            "shop",
            "create",
            "deployment",
            name,
            "--image=nginx:1.27",
        ];
        let out = plane.kubectl("alice", &args);
        assert!(out.ok, "{name}: {out}");
    }
}

const SQUATTED: &str = "{group: apps, version: v1, kind: Deployment, namespace: shop, name: squatted, status: OutOfSync, health: {status: Missing}}";

const SSA_OBJECT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: ssa
  namespace: shop
  annotations: {argocd.argoproj.io/tracking-id: "shop:apps/Deployment:shop/ssa"}
spec:
  replicas: 1
  selector: {matchLabels: {app: ssa}}
  template:
    metadata: {labels: {app: ssa}}
    spec: {containers: [{name: ssa, image: "nginx:1.27"}]}
"#;

#[test]
fn owned_fields_precision_judges_only_what_the_gitops_tool_owns() {
    let mut plane = ControlPlane::start("owned");
    plane.prepare(&["argocd", "shop"]);
    // Server-side apply as Argo CD does it (field manager argocd-controller),
    // and client-side apply (last-applied-configuration).
    let out = plane.kubectl_as_stdin(
        ARGO,
        &[
            "apply",
            "--server-side",
            "--field-manager=argocd-controller",
            "-f",
            "-",
        ],
        Some(SSA_OBJECT),
    );
    assert!(out.ok, "{out}");
    let out = plane.kubectl_as_stdin(ARGO, &["apply", "-f", "-"], Some(OBJECTS));
    assert!(out.ok, "{out}");
    let policy = plane.dir.join("owned-policy.yaml");
    std::fs::write(&policy, "precision: ownedFields\n").unwrap();
    let dg = Driftguard::start(
        &plane,
        &[
            &format!("--policy={}", policy.display()),
            &plane.driftguard_kubeconfig_flag(),
        ],
    );
    dg.register(&plane, &policy.display().to_string());

    for name in ["ssa", "shop"] {
        let target = format!("deployment/{name}");
        eventually("the webhook answers", || {
            let out = plane.kubectl(
                "alice",
                &[
                    "-n",
                    "shop",
                    "set",
                    "image",
                    &target,
                    &format!("{name}=nginx:6.6"),
                    "--dry-run=server",
                ],
            );
            if !out.ok && out.stderr.contains("driftguard") {
                Ok(())
            } else {
                Err(out.to_string())
            }
        });
        // A field the GitOps tool owns: drift.
        let out = plane.kubectl(
            "alice",
            &[
                "-n",
                "shop",
                "set",
                "image",
                &target,
                &format!("{name}=nginx:6.6"),
            ],
        );
        assert!(
            !out.ok
                && out
                    .stderr
                    .contains("/spec/template/spec/containers/0/image"),
            "{name}: {out}"
        );
        // A field it does not own: allowed, with a warning, and recorded on the object.
        let out = plane.kubectl("alice", &["-n", "shop", "label", &target, "team=checkout"]);
        assert!(out.ok, "{name}: {out}");
        assert!(
            out.stderr.contains("does not own /metadata/labels"),
            "{name}: {out}"
        );
        let out = plane.kubectl(
            "admin",
            &[
                "-n",
                "shop",
                "get",
                &target,
                "-o",
                r"jsonpath={.metadata.annotations.driftguard\.io/drift}",
            ],
        );
        assert!(out.stdout.contains("/metadata/labels"), "{name}: {out}");
    }
}

/// The account Argo CD syncs Application `shop` as, by its AppProject.
const DEPLOYER: &str = "system:serviceaccount:shop:deployer";

const IMPERSONATION: &str = r#"
apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata: {name: shop, namespace: argocd}
spec:
  destinations: [{server: 'https://kubernetes.default.svc', namespace: shop}]
  destinationServiceAccounts:
    - {server: 'https://kubernetes.default.svc', namespace: shop, defaultServiceAccount: deployer}
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: shop, namespace: argocd}
spec:
  project: shop
  source: {repoURL: 'https://git.example.com/shop.git', path: deploy, targetRevision: main}
  destination: {server: 'https://kubernetes.default.svc', namespace: shop}
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: other, namespace: argocd}
spec:
  project: default
  source: {repoURL: 'https://git.example.com/other.git', path: deploy, targetRevision: main}
  destination: {name: in-cluster, namespace: shop}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: deployer, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: workload-editor}
subjects:
  - {kind: ServiceAccount, name: deployer, namespace: shop}
"#;

const OTHER_OBJECT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: other
  namespace: shop
  annotations: {argocd.argoproj.io/tracking-id: "other:apps/Deployment:shop/other"}
spec:
  replicas: 1
  selector: {matchLabels: {app: other}}
  template:
    metadata: {labels: {app: other}}
    spec: {containers: [{name: other, image: "nginx:1.27"}]}
"#;

fn argocd_cm(impersonation: bool) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: argocd-cm, namespace: argocd}}\ndata:\n  application.sync.impersonation.enabled: \"{impersonation}\"\n"
    )
}

/// Argo CD v3.6 syncing as the AppProject's destination service account:
/// that account is trusted for its Application's objects and nothing else.
#[test]
fn argo_cd_sync_impersonation_is_trusted_for_that_application_only() {
    let mut plane = ControlPlane::start("impersonation");
    plane.prepare(&["argocd", "shop"]);
    plane.apply_crds(&["argocd-application", "argocd-appproject"]);
    plane.apply_admin(IMPERSONATION);
    plane.apply_admin(&argocd_cm(true));
    for objects in [OBJECTS, OTHER_OBJECT] {
        let out = plane.kubectl_as_stdin(ARGO, &["apply", "-f", "-"], Some(objects));
        assert!(out.ok, "{out}");
    }
    let dg = Driftguard::start(
        &plane,
        &["--watch-argocd", &plane.driftguard_kubeconfig_flag()],
    );
    dg.register(&plane, &format!("{ROOT}/src/policy/default-policy.yaml"));
    let set_image = |user: &str, name: &str, image: &str| {
        let target = format!("deployment/{name}");
        let container = format!("{name}={image}");
        let args = ["-n", "shop", "set", "image", &target, &container];
        if user.starts_with("system:serviceaccount:") {
            plane.kubectl_as(user, &args)
        } else {
            plane.kubectl(user, &args)
        }
    };
    eventually("the webhook denies alice", || {
        let out = set_image("alice", "shop", "nginx:1.28");
        if !out.ok && out.stderr.contains("driftguard") {
            Ok(())
        } else {
            Err(out.to_string())
        }
    });

    // Argo CD syncing shop as its project's account: allowed.
    let out = set_image(DEPLOYER, "shop", "nginx:1.28");
    assert!(out.ok, "the impersonated sync account was refused: {out}");
    let trusted = dg
        .audit()
        .into_iter()
        .any(|r| r["user"] == DEPLOYER && r["name"] == "shop" && r["reason"] == "controller");
    assert!(
        trusted,
        "the sync account's write is audited as a controller's"
    );
    // The same account on another Application's object, in the same namespace.
    let out = set_image(DEPLOYER, "other", "nginx:1.28");
    assert!(
        !out.ok,
        "the account changed another Application's object: {out}"
    );
    assert!(out.stderr.contains("Argo CD application other"), "{out}");

    // Impersonation off: Argo CD syncs as its controller, the account is nobody.
    plane.apply_admin(&argocd_cm(false));
    eventually("the account is denied once impersonation is off", || {
        let out = set_image(DEPLOYER, "shop", "nginx:1.29");
        if !out.ok && out.stderr.contains("driftguard") {
            Ok(())
        } else {
            Err(out.to_string())
        }
    });
}

/// Two Deployments of Flux Kustomization flux-system/apps, applied as
/// kustomize-controller applies them (server-side, its field manager): Git
/// sets `replicas` for `web`, not for `autoscaled`.
const FLUX_APPLIED: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: apps
  labels: {kustomize.toolkit.fluxcd.io/name: apps, kustomize.toolkit.fluxcd.io/namespace: flux-system}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: "nginx:1.27"}]}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: autoscaled
  namespace: apps
  labels: {kustomize.toolkit.fluxcd.io/name: apps, kustomize.toolkit.fluxcd.io/namespace: flux-system}
spec:
  selector: {matchLabels: {app: autoscaled}}
  template:
    metadata: {labels: {app: autoscaled}}
    spec: {containers: [{name: autoscaled, image: "nginx:1.27"}]}
"#;

/// A policy rule ignoring `/spec/replicas` does not let `kubectl scale` change
/// what kustomize-controller applies from Git: Flux would set it back.
#[test]
fn an_ignore_rule_does_not_hide_what_flux_reapplies() {
    let mut plane = ControlPlane::start("reapply");
    plane.prepare(&["argocd", "flux-system", "apps"]);
    let out = plane.kubectl_as_stdin(
        control_plane::FLUX,
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=kustomize-controller",
            "-f",
            "-",
        ],
        Some(FLUX_APPLIED),
    );
    assert!(out.ok, "{out}");
    let policy = plane.dir.join("replicas-policy.yaml");
    std::fs::write(
        &policy,
        "ignoreDifferences:\n  - {group: apps, kind: Deployment, jsonPointers: [/spec/replicas]}\n",
    )
    .unwrap();
    let dg = Driftguard::start(
        &plane,
        &[
            &format!("--policy={}", policy.display()),
            &plane.driftguard_kubeconfig_flag(),
        ],
    );
    dg.register(&plane, &policy.display().to_string());
    let scale = |name: &str, replicas: u32| {
        plane.kubectl(
            "alice",
            &[
                "-n",
                "apps",
                "scale",
                &format!("deployment/{name}"),
                &format!("--replicas={replicas}"),
            ],
        )
    };
    eventually("kubectl scale of Git's replicas denied", || {
        let out = scale("web", 5);
        if !out.ok && out.stderr.contains("driftguard") {
            Ok(())
        } else {
            Err(out.to_string())
        }
    });
    let out = scale("web", 5);
    assert!(
        out.stderr.contains(
            "Flux applies /spec/replicas from Git (kustomize-controller owns it) and would revert this change"
        ),
        "{out}"
    );
    // Not in Git: kustomize-controller does not own it, and the rule applies.
    let out = scale("autoscaled", 5);
    assert!(out.ok, "{out}");
}

/// HelmRelease served at v2beta1 only (an older Flux): driftguard reads v2.
const HELMRELEASE_V2BETA1: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: helmreleases.helm.toolkit.fluxcd.io}
spec:
  group: helm.toolkit.fluxcd.io
  scope: Namespaced
  names: {kind: HelmRelease, listKind: HelmReleaseList, plural: helmreleases, singular: helmrelease}
  versions:
    - name: v2beta1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

/// A watched kind served at another version only is never taken for "not
/// installed" (which would leave the sources empty with a warning): /readyz
/// names it and the metric says so. A kind whose group is not served at all
/// (Kustomization here) is still "not installed".
#[test]
fn a_source_served_at_another_version_is_reported_not_taken_for_absent() {
    let mut plane = ControlPlane::start("versions");
    plane.prepare(&["argocd", "flux-system"]);
    plane.apply_admin(HELMRELEASE_V2BETA1);
    eventually("the v2beta1 CRD to be served", || {
        let out = plane.kubectl(
            "admin",
            &["get", "helmreleases.v2beta1.helm.toolkit.fluxcd.io", "-A"],
        );
        if out.ok { Ok(()) } else { Err(out.to_string()) }
    });
    let args = Driftguard::serve_args(
        &plane,
        &["127.0.0.1"],
        &["--watch-flux", &plane.driftguard_kubeconfig_flag()],
    );
    let served = serve_driftguard_unready(&Driftguard::binary(), 0, &args);
    eventually("/readyz to name the version mismatch", || {
        let (status, body) = served.probe_get("/readyz");
        let metrics = served.probe_get("/metrics").1;
        if status == 503
            && body.contains("served at another API version: HelmRelease: driftguard reads helm.toolkit.fluxcd.io/v2, the apiserver serves helm.toolkit.fluxcd.io at v2beta1 only")
            && metrics.contains("driftguard_sources_version_mismatch{source=\"HelmRelease\"} 1")
            && !metrics.contains("driftguard_sources_version_mismatch{source=\"Kustomization\"} 1")
        {
            Ok(())
        } else {
            Err(format!("{status} {body:?}; stderr: {}", served.proc.stderr_tail(10)))
        }
    });
    // Served at v2 as well (the tool upgraded): ready, the mismatch cleared
    // (within the watch's backoff, at most 30 s apart).
    plane.apply_admin(&HELMRELEASE_V2BETA1.replace(
        "      schema:\n        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}\n",
        "      schema:\n        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}\n    - name: v2\n      served: true\n      storage: false\n      schema:\n        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}\n",
    ));
    wait_for("ready once v2 is served", Duration::from_secs(60), || {
        let (status, body) = served.probe_get("/readyz");
        let metrics = served.probe_get("/metrics").1;
        if status == 200
            && metrics.contains("driftguard_sources_version_mismatch{source=\"HelmRelease\"} 0")
        {
            Ok(())
        } else {
            Err(format!("{status} {body:?}"))
        }
    });
}

/// Deletes whose own objects are not managed, but that take managed ones
/// with them: the namespace controller's deletes that follow are trusted,
/// and a CRD's custom resources go with no admission call at all.
const CASCADES: &str = r#"
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: apps, namespace: flux-system}
spec:
  interval: 5m
  prune: true
  path: ./apps
  sourceRef: {kind: GitRepository, name: repo}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: team
  labels: {kustomize.toolkit.fluxcd.io/name: apps, kustomize.toolkit.fluxcd.io/namespace: flux-system}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: "nginx:1.27"}]}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: web
  namespace: monitored
  labels: {kustomize.toolkit.fluxcd.io/name: apps, kustomize.toolkit.fluxcd.io/namespace: flux-system}
spec:
  selector: {matchLabels: {app: web}}
"#;

/// Who may delete Namespaces and CRDs: the developers here, so that only
/// driftguard stands in the way.
const DELETERS: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: namespace-and-crd-deleter}
rules:
  - apiGroups: [""]
    resources: [namespaces]
    verbs: [get, list, delete]
  - apiGroups: [apiextensions.k8s.io]
    resources: [customresourcedefinitions]
    verbs: [get, list, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: namespace-and-crd-deleters}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: namespace-and-crd-deleter}
subjects:
  - {kind: Group, name: developers, apiGroup: rbac.authorization.k8s.io}
"#;

#[test]
fn deletes_that_cascade_to_managed_objects_are_refused() {
    let mut plane = ControlPlane::start("cascades");
    plane.prepare(&["argocd", "flux-system", "team", "monitored", "scratch"]);
    plane.apply_crds(&["flux-kustomization", "monitoring"]);
    plane.apply_admin(DELETERS);
    let out = plane.kubectl_as_stdin(control_plane::FLUX, &["apply", "-f", "-"], Some(CASCADES));
    assert!(out.ok, "{out}");
    // What kustomize-controller records once it applied them.
    let out = plane.kubectl(
        "admin",
        &[
            "-n",
            "flux-system",
            "patch",
            "kustomization/apps",
            "--type=merge",
            "-p",
            r#"{"status":{"inventory":{"entries":[{"id":"team_web_apps_Deployment","v":"v1"},{"id":"monitored_web_monitoring.coreos.com_ServiceMonitor","v":"v1"}]}}}"#,
        ],
    );
    assert!(out.ok, "{out}");
    // Flux only: the Argo CD detector is off, so no destination guard helps.
    let policy = plane.dir.join("flux-only.yaml");
    std::fs::write(&policy, "gitops: {argocd: {enabled: false}}\n").unwrap();
    let dg = Driftguard::start(
        &plane,
        &[
            "--watch-flux",
            &format!("--policy={}", policy.display()),
            &plane.driftguard_kubeconfig_flag(),
        ],
    );
    dg.register(&plane, &policy.display().to_string());

    let by = "Flux Kustomization flux-system/apps";
    eventually("deleting the namespace refused", || {
        let out = plane.kubectl(
            "alice",
            &["delete", "namespace", "team", "--dry-run=server"],
        );
        if !out.ok && out.stderr.contains(by) {
            Ok(())
        } else {
            Err(out.to_string())
        }
    });
    let out = plane.kubectl("alice", &["delete", "namespace", "team", "--wait=false"]);
    assert!(!out.ok, "{out}");
    assert!(
        out.stderr
            .contains("deletes 1 managed object (apps/Deployment:team/web, managed by Flux Kustomization flux-system/apps)"),
        "{out}"
    );
    assert!(out.stderr.contains("Remove them from Git"), "{out}");
    let phase = plane.kubectl(
        "admin",
        &["get", "namespace", "team", "-o", "jsonpath={.status.phase}"],
    );
    assert_eq!(phase.stdout, "Active", "{phase}");
    assert!(
        plane
            .kubectl("admin", &["-n", "team", "get", "deployment/web"])
            .ok
    );

    let out = plane.kubectl(
        "alice",
        &[
            "delete",
            "crd",
            "servicemonitors.monitoring.coreos.com",
            "--wait=false",
        ],
    );
    assert!(!out.ok, "{out}");
    assert!(
        out.stderr.contains(
            "deletes 1 managed object (monitoring.coreos.com/ServiceMonitor:monitored/web, managed by Flux Kustomization flux-system/apps)"
        ),
        "{out}"
    );
    let out = plane.kubectl("admin", &["-n", "monitored", "get", "servicemonitor/web"]);
    assert!(out.ok, "the custom resource is gone: {out}");

    // What takes no managed object with it is not driftguard's business.
    let out = plane.kubectl("alice", &["delete", "namespace", "scratch", "--wait=false"]);
    assert!(out.ok, "{out}");
    let out = plane.kubectl(
        "alice",
        &[
            "delete",
            "crd",
            "prometheusrules.monitoring.coreos.com",
            "--wait=false",
        ],
    );
    assert!(out.ok, "{out}");
    // The tool itself may.
    let out = plane.kubectl_as(
        control_plane::FLUX,
        &["delete", "namespace", "team", "--wait=false"],
    );
    assert!(out.ok, "{out}");
}
