//! `kubectl driftguard` end to end: a real kube-apiserver and etcd, driftguard
//! registered through real webhook configurations, and the machine's kubectl
//! finding `kubectl-driftguard` on PATH. Under CI=true (and everywhere else) a
//! control plane that cannot start fails the test.
//!
//! Each scenario is its own test; they share one control plane and one
//! driftguard ([`ENV`], set up by the first test), one test at a time in
//! whatever order libtest runs them. They share objects too (production/myapp,
//! the Application argocd/myapp and its pause, the policy ConfigMap, the
//! webhook configurations), so a scenario puts back what it changes that
//! another one reads: a break-glass is ended, the policy ConfigMap and the
//! webhook configurations restored, grants revoked.

use driftguard_testkit::control_plane;
use driftguard_testkit::shared::{Shared, on_keeper};

use std::path::PathBuf;
use std::process::Stdio;

use control_plane::*;

/// The policy in force: break-glass for user sam and group incident, at most 2h.
const POLICY: &str =
    "breakGlass:\n  allowedUsers: [sam]\n  allowedGroups: [incident]\n  maxDuration: 2h\n";

/// rita (group incident) may break glass, and edit workloads in production
/// only: she may read neither driftguard's policy ConfigMap nor Applications.
const RITA_RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: incident-workload-editors, namespace: production}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: workload-editor}
subjects:
  - {kind: Group, name: incident, apiGroup: rbac.authorization.k8s.io}
"#;

/// A Flux object and an Argo CD object of the seed Application myapp for
/// rita's break-glass, and an Argo CD object whose Application `ghost` does
/// not exist.
const UNPAUSABLE_OBJECTS: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: ghost-settings
  namespace: production
  annotations: {argocd.argoproj.io/tracking-id: "ghost:/ConfigMap:production/ghost-settings"}
data: {MODE: normal}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: rita-argo
  namespace: production
  annotations: {argocd.argoproj.io/tracking-id: "myapp:/ConfigMap:production/rita-argo"}
data: {MODE: normal}
"#;

const RITA_FLUX: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: rita-flux
  namespace: production
  labels: {kustomize.toolkit.fluxcd.io/name: apps, kustomize.toolkit.fluxcd.io/namespace: flux-system}
data: {MODE: normal}
"#;

/// What the Argo CD application owns beside [`MYAPP_DEPLOYMENT`].
const OTHER_OBJECTS: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: production
  annotations: {argocd.argoproj.io/tracking-id: "myapp:/ConfigMap:production/settings"}
data: {LOG_LEVEL: info}
"#;

fn objects() -> String {
    format!("{MYAPP_DEPLOYMENT}---{OTHER_OBJECTS}")
}

/// A Flux Kustomization that ignores /data/LOG_LEVEL of its ConfigMaps, and one of them.
const FLUX_OBJECTS: &str = r#"
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: apps, namespace: flux-system}
spec:
  interval: 5m
  prune: true
  path: ./apps
  sourceRef: {kind: GitRepository, name: fleet}
  ignore:
    - paths: [/data/LOG_LEVEL]
      target: {kind: ConfigMap}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: flux-settings
  namespace: production
  labels: {kustomize.toolkit.fluxcd.io/name: apps, kustomize.toolkit.fluxcd.io/namespace: flux-system}
data: {LOG_LEVEL: info}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: flux-hotfix
  namespace: production
  labels: {kustomize.toolkit.fluxcd.io/name: apps, kustomize.toolkit.fluxcd.io/namespace: flux-system}
data: {MODE: normal}
"#;

/// An Argo CD object of the seed Application myapp, for the expiry sweeper.
const ARGO_HOTFIX: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: argo-hotfix
  namespace: production
  annotations: {argocd.argoproj.io/tracking-id: "myapp:/ConfigMap:production/argo-hotfix"}
data: {MODE: normal}
"#;

/// Breaking glass on an Argo CD object pauses its Application: sre-oncall may
/// patch Applications. driftguard's expiry sweeper may list and patch the
/// kinds these tests arm (and Pods and ReplicaSets, which it must leave
/// alone), and lift an Application's pause (the chart's
/// breakGlass.sweepRules, narrowed).
const PAUSE_RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: application-pauser}
rules:
  - apiGroups: [argoproj.io]
    resources: [applications]
    verbs: [get, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: application-pausers}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: application-pauser}
subjects:
  - {kind: Group, name: sre-oncall, apiGroup: rbac.authorization.k8s.io}
  - {kind: User, name: driftguard, apiGroup: rbac.authorization.k8s.io}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: driftguard-break-glass-sweeper}
rules:
  - apiGroups: ["", apps]
    resources: [configmaps, deployments, pods, replicasets]
    verbs: [get, list, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: driftguard-break-glass-sweeper}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: driftguard-break-glass-sweeper}
subjects:
  - {kind: User, name: driftguard, apiGroup: rbac.authorization.k8s.io}
"#;

/// People may read Argo CD Applications (explain shows repo and path).
const READ_APPLICATIONS: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: application-reader}
rules:
  - apiGroups: [argoproj.io]
    resources: [applications]
    verbs: [get, list]
  - apiGroups: [kustomize.toolkit.fluxcd.io]
    resources: [kustomizations]
    verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: application-readers}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: application-reader}
subjects:
  - {kind: Group, name: developers, apiGroup: rbac.authorization.k8s.io}
  - {kind: Group, name: sre-oncall, apiGroup: rbac.authorization.k8s.io}
"#;

type Scenario = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

/// Fields drop in order: driftguard before the control plane, whose
/// apiserver would otherwise wait on driftguard's watches as it shuts down.
struct Env {
    /// `None` only while a test restarts it.
    dg: Option<Driftguard>,
    plane: ControlPlane,
    /// A directory holding only a `kubectl-driftguard` symlink, first on PATH.
    bin: PathBuf,
}

/// The environment every test here runs in.
static ENV: Shared<Env> = Shared::new();

/// Runs `scenario` in [`ENV`]; its `Err` fails the test.
fn run(scenario: impl FnOnce(&Env) -> Scenario) {
    run_mut(|e| scenario(e))
}

/// [`run`] for a scenario that restarts driftguard.
fn run_mut(scenario: impl FnOnce(&mut Env) -> Scenario) {
    ENV.with(setup, |e| {
        if let Err(why) = scenario(e) {
            panic!("{why}");
        }
    })
}

/// What `kubectl driftguard ...` printed, and its exit code.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit={} stdout={:?} stderr={:?}",
            self.code, self.stdout, self.stderr
        )
    }
}

impl Env {
    fn dg(&self) -> &Driftguard {
        self.dg
            .as_ref()
            .expect("driftguard is back after every test")
    }

    /// The real kubectl, as `user` (KUBECONFIG), with the plugin on PATH.
    fn kubectl(&self, user: &str, line: &str) -> Run {
        let path = format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = kubectl_command()
            .env("PATH", path)
            .env("KUBECONFIG", self.plane.kubeconfig(user))
            .args(line.split_whitespace())
            .stdin(Stdio::null())
            .output()
            .expect("kubectl runs");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// `kubectl driftguard` with arguments that may contain spaces.
    fn plugin(&self, user: &str, args: &[&str]) -> Run {
        let path = format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = kubectl_command()
            .env("PATH", path)
            .env("KUBECONFIG", self.plane.kubeconfig(user))
            .arg("driftguard")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("kubectl runs");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// `{annotations, labels}` of `kind/name` in production, as admin.
    /// The objects the armed set's records name (`namespace/name`), in
    /// driftguard's kubeconfig namespace.
    fn records(&self) -> Vec<String> {
        driftguard_testkit::armed::recorded(&self.plane, "default")
    }

    fn metadata(&self, target: &str) -> serde_json::Value {
        let out = self.plane.kubectl(
            "admin",
            &[
                "-n",
                "production",
                "get",
                target,
                "-o",
                "jsonpath={.metadata}",
            ],
        );
        assert!(out.ok, "{out}");
        let meta: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_default();
        serde_json::json!({"annotations": meta.get("annotations").cloned().unwrap_or(serde_json::json!({})),
                           "labels": meta.get("labels").cloned().unwrap_or(serde_json::json!({}))})
    }

    /// The annotations of Argo CD Application argocd/myapp.
    fn application(&self) -> serde_json::Value {
        let out = self.plane.kubectl(
            "admin",
            &[
                "-n",
                "argocd",
                "get",
                "applications.argoproj.io/myapp",
                "-o",
                "jsonpath={.metadata.annotations}",
            ],
        );
        assert!(out.ok, "{out}");
        serde_json::from_str(&out.stdout).unwrap_or(serde_json::json!({}))
    }

    /// A counter from driftguard's probe port.
    fn metric(&self, name: &str) -> u64 {
        use std::io::{Read, Write};
        let Ok(mut tcp) = std::net::TcpStream::connect(("127.0.0.1", self.dg().probe)) else {
            return 0;
        };
        let _ = tcp.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n");
        let mut text = String::new();
        let _ = tcp.read_to_string(&mut text);
        text.lines()
            .filter_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .sum::<f64>() as u64
    }

    fn annotations(&self) -> serde_json::Value {
        let out = self.plane.kubectl(
            "admin",
            &[
                "-n",
                "production",
                "get",
                "deployment/myapp",
                "-o",
                "jsonpath={.metadata.annotations}",
            ],
        );
        assert!(out.ok, "{out}");
        serde_json::from_str(&out.stdout).unwrap_or_default()
    }
}

fn setup() -> Env {
    let mut plane = ControlPlane::start("plugin");
    plane.prepare(&["production", "argocd", "flux-system", "driftguard"]);
    plane.add_user("rita", &["incident"]);
    let policy = plane.dir.join("plugin-policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let dg = Driftguard::start_with_env(
        &plane,
        &["127.0.0.1"],
        &[
            &format!("--policy={}", policy.display()),
            &format!("--argocd-application={ROOT}/tests/data/seed/argocd-application.yaml"),
            &plane.driftguard_kubeconfig_flag(),
            "--break-glass-sweep-interval=2s",
        ],
        // The sweeper's debug lines say which labelled objects it left alone.
        &[("RUST_LOG", "info,driftguard::breakglass::sweeper=debug")],
    );
    dg.register(&plane, &policy.display().to_string());
    // The policy where the chart puts it: ConfigMap driftguard/driftguard-policy.
    let out = plane.kubectl(
        "admin",
        &[
            "-n",
            "driftguard",
            "create",
            "configmap",
            "driftguard-policy",
            &format!("--from-file=policy.yaml={}", policy.display()),
        ],
    );
    assert!(out.ok, "the policy ConfigMap: {out}");
    plane.apply_crds(&["argocd-application"]);
    let out = plane.kubectl(
        "admin",
        &[
            "apply",
            "-f",
            &format!("{ROOT}/tests/data/seed/argocd-application.yaml"),
        ],
    );
    assert!(out.ok, "the seed Application: {out}");
    plane.apply_crds(&["flux-kustomization"]);
    plane.apply_admin(READ_APPLICATIONS);
    plane.apply_admin(PAUSE_RBAC);
    plane.apply_admin(RITA_RBAC);
    let out = plane.kubectl_as_stdin(FLUX, &["apply", "-f", "-"], Some(FLUX_OBJECTS));
    assert!(out.ok, "Flux objects as the kustomize-controller: {out}");
    let out = plane.kubectl_as_stdin(FLUX, &["apply", "-f", "-"], Some(RITA_FLUX));
    assert!(out.ok, "{out}");
    let out = plane.kubectl_as_stdin(ARGO, &["apply", "-f", "-"], Some(UNPAUSABLE_OBJECTS));
    assert!(out.ok, "{out}");
    let out = plane.kubectl_as_stdin(ARGO, &["apply", "-f", "-"], Some(&objects()));
    assert!(out.ok, "objects as the Argo CD controller: {out}");
    let out = plane.kubectl_as_stdin(ARGO, &["apply", "-f", "-"], Some(ARGO_HOTFIX));
    assert!(out.ok, "{out}");
    plane.wait_until_webhook_denies_drift();
    let bin = plane.dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_kubectl-driftguard"),
        bin.join("kubectl-driftguard"),
    )
    .unwrap();
    Env {
        dg: Some(dg),
        plane,
        bin,
    }
}

/// Lets sam read webhook configurations (not Secrets, nor EndpointSlices),
/// for the status scenarios that run status as sam.
const SAM_READS_WEBHOOKS: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: webhook-reader}
rules:
  - apiGroups: [admissionregistration.k8s.io]
    resources: [validatingwebhookconfigurations, mutatingwebhookconfigurations]
    verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: sam-reads-webhooks}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: webhook-reader}
subjects: [{kind: User, name: sam, apiGroup: rbac.authorization.k8s.io}]
"#;

/// Runs `scenario` while sam may read webhook configurations, revoked after.
fn with_sam_reading_webhooks(e: &Env, scenario: impl FnOnce() -> Scenario) -> Scenario {
    e.plane.apply_admin(SAM_READS_WEBHOOKS);
    let result = scenario();
    let out = e.plane.kubectl(
        "admin",
        &[
            "delete",
            "clusterrolebinding/sam-reads-webhooks",
            "clusterrole/webhook-reader",
        ],
    );
    result.and(if out.ok {
        Ok(())
    } else {
        Err(format!("revoking: {out}"))
    })
}

/// The chart installed as release dg: its ConfigMap dg-driftguard-policy
/// (found by its labels) in place of driftguard/driftguard-policy.
fn chart_policy_in_place_of_default(e: &Env) -> Scenario {
    let chart = render_chart(&e.plane, 0, &["policy.breakGlass.allowedUsers={sam}"]);
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&chart.yaml).unwrap();
    let mut cm = docs
        .into_iter()
        .find(|d| d["kind"] == "ConfigMap")
        .ok_or("the chart renders no ConfigMap")?;
    cm["metadata"]["namespace"] = serde_json::json!("driftguard");
    // As `helm install` writes it: a Helm release, not an Argo CD application.
    cm["metadata"]["annotations"] = serde_json::json!({"meta.helm.sh/release-name": "dg"});
    e.plane.apply_admin(&cm.to_string());
    let out = e.plane.kubectl(
        "admin",
        &[
            "-n",
            "driftguard",
            "delete",
            "configmap",
            "driftguard-policy",
        ],
    );
    ensure!(out.ok, "{out}");
    Ok(())
}

/// Undoes [`chart_policy_in_place_of_default`]: the policy ConfigMap as set up.
fn default_policy_back(e: &Env) -> Scenario {
    let policy = e.plane.dir.join("plugin-policy.yaml");
    let out = e.plane.kubectl(
        "admin",
        &[
            "-n",
            "driftguard",
            "create",
            "configmap",
            "driftguard-policy",
            &format!("--from-file=policy.yaml={}", policy.display()),
        ],
    );
    ensure!(out.ok, "the policy ConfigMap back: {out}");
    let out = e.plane.kubectl(
        "admin",
        &[
            "-n",
            "driftguard",
            "delete",
            "configmap",
            "dg-driftguard-policy",
        ],
    );
    ensure!(out.ok, "{out}");
    Ok(())
}

#[test]
fn plugin_list_shows_it() {
    run(|e| {
        let out = e.kubectl("admin", "plugin list");
        ensure!(
            out.code == 0 && out.stdout.contains("kubectl-driftguard"),
            "kubectl plugin list: {out}"
        );
        Ok(())
    })
}

#[test]
fn usage_and_access_errors_exit_2() {
    run(|e| {
        let out = e.plugin("alice", &["explain", "secret/db", "-n", "production"]);
        ensure!(
            out.code == 2
                && out.stderr.contains("forbidden")
                && out.stderr.contains("cannot get resource \"secrets\""),
            "a forbidden read: {out}"
        );
        let out = e.plugin("alice", &["explain", "deployment/nope", "-n", "production"]);
        ensure!(
            out.code == 2 && out.stderr.contains("not found") && out.stderr.contains("nope"),
            "a missing object: {out}"
        );
        let out = e.plugin(
            "sam",
            &["break-glass", "nosuchkind/x", "-n", "production", "--end"],
        );
        ensure!(
            out.code == 2 && out.stderr.contains("nosuchkind"),
            "an unknown kind: {out}"
        );
        let out = e.plugin("sam", &["break-glass", "myapp", "--end"]);
        ensure!(out.code == 2, "no KIND/: {out}");
        Ok(())
    })
}

/// driftguard down: status says its URL does not answer (exit 1). It is
/// started again on the same port before the next test.
#[test]
fn status_with_driftguard_down() {
    run_mut(|e| {
        let mut dg = e.dg.take().expect("driftguard is up");
        dg.stop();
        let out = e.plugin("admin", &["status"]);
        // On the keeper thread, so that it dies with the test process.
        e.dg = Some(on_keeper(move || {
            dg.restart(None);
            dg
        }));
        e.plane.wait_until_webhook_denies_drift();
        ensure!(
            out.code == 1 && out.stdout.contains("NOT REACHABLE"),
            "status with driftguard down: {out}"
        );
        Ok(())
    })
}

mod break_glass;
mod preview;
mod status;
mod sweeper;
