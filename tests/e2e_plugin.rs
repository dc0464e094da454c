//! `kubectl driftguard` end to end: a real kube-apiserver and etcd, driftguard
//! registered through real webhook configurations, and the machine's kubectl
//! finding `kubectl-driftguard` on PATH. Under CI=true (and everywhere else) a
//! control plane that cannot start fails the test.

use driftguard_testkit::control_plane;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

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
    verbs: [list, watch, patch]
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
type Step = (&'static str, fn(&Env) -> Scenario);

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

struct Env {
    plane: ControlPlane,
    /// A directory holding only a `kubectl-driftguard` symlink, first on PATH.
    bin: PathBuf,
    dg: Driftguard,
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
        let Ok(mut tcp) = std::net::TcpStream::connect(("127.0.0.1", self.dg.probe)) else {
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
    let dg = Driftguard::start(
        &plane,
        &[
            &format!("--policy={}", policy.display()),
            &format!("--argocd-application={ROOT}/tests/data/seed/argocd-application.yaml"),
            &plane.driftguard_kubeconfig_flag(),
            "--break-glass-sweep-interval=2s",
        ],
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
    Env { plane, bin, dg }
}

fn plugin_list_shows_it(e: &Env) -> Scenario {
    let out = e.kubectl("admin", "plugin list");
    ensure!(
        out.code == 0 && out.stdout.contains("kubectl-driftguard"),
        "kubectl plugin list: {out}"
    );
    Ok(())
}

fn break_glass_refused_granted_ended(e: &Env) -> Scenario {
    let args = [
        "break-glass",
        "deploy/myapp",
        "-n",
        "production",
        "--reason",
        "INC-42 hotfix",
        "--for",
        "1h",
    ];
    let out = e.plugin("alice", &args);
    ensure!(out.code == 1, "alice was not refused: {out}");
    // The server's answer, in driftguard's own words; the ConfigMap's copy
    // of the policy only adds a hint.
    ensure!(
        out.stderr.contains("denied: admission webhook \"")
            && out.stderr.contains(
                "driftguard: alice is not authorized to break glass on Deployment production/myapp"
            )
            && out.stderr.contains("nothing was written")
            && out.stderr.contains("hint: user alice (groups: developers")
            && out
                .stderr
                .contains("allows users [sam] and groups [incident]"),
        "the refusal is not the webhook's: {out}"
    );
    let annotations = e.annotations();
    ensure!(
        annotations.get("driftguard.io/break-glass").is_none(),
        "alice's refusal wrote: {annotations}"
    );
    let app = e.application();
    ensure!(
        app.get("argocd.argoproj.io/skip-reconcile").is_none(),
        "alice's refusal paused the Application: {app}"
    );
    let mut too_long = args;
    too_long[7] = "3h";
    let out = e.plugin("sam", &too_long);
    ensure!(
        out.code == 1
            && out.stderr.contains("denied: admission webhook \"")
            && out.stderr.contains("is more than 2h ahead")
            && out
                .stderr
                .contains("hint: --for 3h is longer than breakGlass.maxDuration 2h"),
        "--for 3h with maxDuration 2h: {out}"
    );
    let app = e.application();
    ensure!(
        app.get("argocd.argoproj.io/skip-reconcile").is_none(),
        "a refused break-glass paused the Application: {app}"
    );
    // The same refusal, machine-readable.
    let out = e.plugin("sam", &[&too_long[..], &["-o", "json"]].concat());
    let r: serde_json::Value = serde_json::from_str(&out.stdout)
        .map_err(|err| format!("break-glass -o json: {err}: {out}"))?;
    ensure!(
        out.code == 1
            && r["action"] == "refused"
            && r["user"] == "sam"
            && r["reason"] == "INC-42 hotfix"
            && r["expires"].is_null()
            && r["object"]
                == serde_json::json!({"kind": "Deployment", "name": "myapp", "namespace": "production"})
            && r["refusal"]
                .as_str()
                .is_some_and(|t| t.starts_with("admission webhook \"")
                    && t.contains("is more than 2h ahead"))
            && r["hint"]
                .as_str()
                .is_some_and(|t| t.contains("maxDuration")),
        "break-glass -o json, refused: {out}"
    );

    let out = e.plugin("sam", &args);
    ensure!(out.code == 0, "sam's break-glass: {out}");
    ensure!(
        out.stdout.contains("expires") || out.stdout.contains("until"),
        "no expiry printed: {out}"
    );
    // Argo CD is paused for it: skip-reconcile on the Application, which
    // records the object; the object records the pause and carries the label.
    ensure!(
        out.stdout
            .contains("Argo CD Application argocd/myapp is paused (skip-reconcile) until "),
        "the pause is not reported: {out}"
    );
    let app = e.application();
    ensure!(
        app["argocd.argoproj.io/skip-reconcile"] == "true"
            && app["driftguard.io/break-glass-paused-for"] == "apps/Deployment:production/myapp",
        "the Application is not paused for deployment/myapp: {app}"
    );
    let meta = e.metadata("deployment/myapp");
    ensure!(
        meta["annotations"]["driftguard.io/break-glass-paused"]
            == "argocd.argoproj.io/skip-reconcile"
            && meta["labels"]["driftguard.io/break-glass"] == "true",
        "the object does not record the pause: {meta}"
    );
    let annotations = e.annotations();
    ensure!(
        annotations["driftguard.io/break-glass"] == "INC-42 hotfix",
        "reason annotation: {annotations}"
    );
    let expires = annotations["driftguard.io/break-glass-expires"]
        .as_str()
        .unwrap_or_default();
    let at: jiff::Timestamp = expires
        .parse()
        .map_err(|err| format!("expiry {expires:?} is not RFC 3339: {err}"))?;
    let ahead = at.duration_since(jiff::Timestamp::now());
    ensure!(
        ahead > jiff::SignedDuration::from_mins(55) && ahead <= jiff::SignedDuration::from_hours(1),
        "expiry {expires} is not about 1h ahead"
    );
    // The break-glass works: sam's manual change is now allowed.
    let out = e.kubectl(
        "sam",
        "-n production set image deployment/myapp app=nginx:1.28",
    );
    ensure!(out.code == 0, "sam's change under break-glass: {out}");
    let out = e.plugin(
        "alice",
        &[
            "explain",
            "deployment/myapp",
            "-n",
            "production",
            "-o",
            "json",
        ],
    );
    let r: serde_json::Value = serde_json::from_str(&out.stdout)
        .map_err(|err| format!("explain -o json: {err}: {out}"))?;
    ensure!(
        r["breakGlass"]["onObject"]["state"] == "active"
            && r["breakGlass"]["onObject"]["reason"] == "INC-42 hotfix",
        "explain does not show the active break-glass: {r}"
    );

    let out = e.plugin(
        "sam",
        &[
            "break-glass",
            "deployment/myapp",
            "-n",
            "production",
            "--end",
            "-o",
            "yaml",
        ],
    );
    ensure!(
        out.code == 0
            && out.stdout.contains("action: ended")
            && out.stdout.contains("user: sam")
            && out.stdout.contains("state: resumed"),
        "--end -o yaml: {out}"
    );
    let meta = e.metadata("deployment/myapp");
    let annotations = &meta["annotations"];
    ensure!(
        annotations.get("driftguard.io/break-glass").is_none()
            && annotations
                .get("driftguard.io/break-glass-expires")
                .is_none()
            && annotations
                .get("driftguard.io/break-glass-paused")
                .is_none()
            && meta["labels"].get("driftguard.io/break-glass").is_none(),
        "--end left annotations or the label: {meta}"
    );
    let app = e.application();
    ensure!(
        app.get("argocd.argoproj.io/skip-reconcile").is_none()
            && app.get("driftguard.io/break-glass-paused-for").is_none(),
        "--end did not resume the Application: {app}"
    );
    Ok(())
}

/// A Flux object: the pause is `reconcile: disabled` in the arming write,
/// the object stays judged while paused, and `--end` removes what arming added.
fn break_glass_pauses_flux(e: &Env) -> Scenario {
    let out = e.plugin(
        "sam",
        &[
            "break-glass",
            "cm/flux-hotfix",
            "-n",
            "production",
            "--reason",
            "INC-50",
            "--for",
            "1h",
        ],
    );
    ensure!(
        out.code == 0
            && out
                .stdout
                .contains("Flux will not reconcile configmap/flux-hotfix until ")
            && out.stdout.contains("Git wins again after that"),
        "sam's break-glass on a Flux object: {out}"
    );
    let meta = e.metadata("cm/flux-hotfix");
    ensure!(
        meta["annotations"]["kustomize.toolkit.fluxcd.io/reconcile"] == "disabled"
            && meta["annotations"]["driftguard.io/break-glass-paused"]
                == "kustomize.toolkit.fluxcd.io/reconcile"
            && meta["labels"]["driftguard.io/break-glass"] == "true",
        "not paused for Flux: {meta}"
    );
    // Paused by driftguard, it is still judged: alice is denied, sam allowed.
    let out = e.kubectl(
        "alice",
        "-n production patch configmap/flux-hotfix -p {\"data\":{\"MODE\":\"alice\"}}",
    );
    ensure!(
        out.code != 0 && out.stderr.contains("driftguard"),
        "alice's edit of a paused object went through: {out}"
    );
    let out = e.kubectl(
        "sam",
        "-n production patch configmap/flux-hotfix -p {\"data\":{\"MODE\":\"hotfix\"}}",
    );
    ensure!(out.code == 0, "sam's hotfix under break-glass: {out}");
    // Unauthorized, alice may not end a break-glass in force.
    let out = e.kubectl(
        "alice",
        "-n production annotate configmap/flux-hotfix driftguard.io/break-glass- driftguard.io/break-glass-expires- driftguard.io/break-glass-paused- kustomize.toolkit.fluxcd.io/reconcile-",
    );
    ensure!(out.code != 0, "alice ended sam's break-glass: {out}");
    let out = e.plugin(
        "sam",
        &["break-glass", "cm/flux-hotfix", "-n", "production", "--end"],
    );
    ensure!(
        out.code == 0
            && out
                .stdout
                .contains("Flux reconciles configmap/flux-hotfix from Git again"),
        "--end: {out}"
    );
    let meta = e.metadata("cm/flux-hotfix");
    ensure!(
        meta["annotations"]
            .as_object()
            .is_none_or(|a| !a
                .keys()
                .any(|k| k.starts_with("driftguard.io/")
                    || k == "kustomize.toolkit.fluxcd.io/reconcile"))
            && meta["labels"].get("driftguard.io/break-glass").is_none(),
        "--end left something: {meta}"
    );
    Ok(())
}

/// rita may break glass (group incident) but may read neither driftguard's
/// policy ConfigMap nor Applications: the server's dry run decides, not the
/// embedded default the plugin falls back to (which allows no one). A copy
/// of the policy that says yes decides nothing either.
fn break_glass_is_decided_by_the_server(e: &Env) -> Scenario {
    let arm = |target: &str| {
        e.plugin(
            "rita",
            &[
                "break-glass",
                target,
                "-n",
                "production",
                "--reason",
                "INC-7",
                "--for",
                "30m",
            ],
        )
    };
    let end = |target: &str| {
        e.plugin(
            "rita",
            &["break-glass", target, "-n", "production", "--end"],
        )
    };
    let cleaned = |meta: &serde_json::Value| {
        meta["annotations"]
            .as_object()
            .is_none_or(|a| !a.keys().any(|k| k.starts_with("driftguard.io/")))
            && meta["labels"].get("driftguard.io/break-glass").is_none()
    };
    let out = arm("cm/rita-flux");
    ensure!(
        out.code == 0
            && out
                .stderr
                .contains("cannot read the policy from ConfigMap driftguard/driftguard-policy")
            && out
                .stdout
                .contains("Flux will not reconcile configmap/rita-flux until "),
        "rita's break-glass without the policy ConfigMap: {out}"
    );
    let meta = e.metadata("cm/rita-flux");
    ensure!(
        meta["annotations"]["driftguard.io/break-glass"] == "INC-7"
            && meta["annotations"]["kustomize.toolkit.fluxcd.io/reconcile"] == "disabled"
            && meta["labels"]["driftguard.io/break-glass"] == "true",
        "rita's break-glass is not armed: {meta}"
    );
    let out = end("cm/rita-flux");
    ensure!(
        out.code == 0 && cleaned(&e.metadata("cm/rita-flux")),
        "rita's --end: {out}"
    );

    // An Argo CD object whose Application rita may not read: armed without
    // a pause, with a warning that names the command that pauses it by hand.
    let out = arm("cm/rita-argo");
    ensure!(
        out.code == 0
            && out.stderr.contains(
                "warning: Argo CD is NOT paused for configmap/rita-argo: self-heal may revert the hotfix"
            )
            && out.stderr.contains(
                "`kubectl annotate applications.argoproj.io -n argocd myapp argocd.argoproj.io/skip-reconcile=true`"
            )
            && out
                .stdout
                .contains("cannot get Argo CD Application argocd/myapp"),
        "rita's break-glass on an Argo CD object: {out}"
    );
    let meta = e.metadata("cm/rita-argo");
    ensure!(
        meta["annotations"]["driftguard.io/break-glass"] == "INC-7"
            && meta["annotations"]
                .get("driftguard.io/break-glass-paused")
                .is_none()
            && meta["labels"]["driftguard.io/break-glass"] == "true",
        "armed without a pause, the object must carry no pause marker: {meta}"
    );
    let app = e.application();
    ensure!(
        app.get("argocd.argoproj.io/skip-reconcile").is_none(),
        "the Application was paused: {app}"
    );
    let out = end("cm/rita-argo");
    ensure!(
        out.code == 0 && cleaned(&e.metadata("cm/rita-argo")),
        "rita's --end of the Argo CD object: {out}"
    );

    // alice names a copy of the policy that grants her break-glass: the
    // server, whose policy does not, refuses; nothing is paused or written.
    e.plane.apply_admin(
        r#"{"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "alice-policy", "namespace": "production"},
            "data": {"policy.yaml": "breakGlass:\n  allowedUsers: [alice]\n"}}"#,
    );
    let out = e.plugin(
        "alice",
        &[
            "break-glass",
            "deploy/myapp",
            "-n",
            "production",
            "--reason",
            "mine",
            "--for",
            "1h",
            "--policy-configmap",
            "production/alice-policy",
        ],
    );
    ensure!(
        out.code == 1
            && out.stderr.contains("denied: admission webhook \"")
            && out
                .stderr
                .contains("alice is not authorized to break glass on Deployment production/myapp")
            && !out.stderr.contains("hint:"),
        "a policy copy granting alice decided: {out}"
    );
    ensure!(
        e.annotations().get("driftguard.io/break-glass").is_none()
            && e.application()
                .get("argocd.argoproj.io/skip-reconcile")
                .is_none(),
        "alice's refused break-glass wrote something"
    );
    let out = e.plane.kubectl(
        "admin",
        &["-n", "production", "delete", "configmap", "alice-policy"],
    );
    ensure!(out.ok, "{out}");
    Ok(())
}

/// An Argo CD object whose Application does not exist: the break-glass is
/// armed (the server allows it) with a warning and the command that pauses
/// the Application by hand; `--require-pause` refuses it instead.
fn an_application_that_cannot_be_paused(e: &Env) -> Scenario {
    let args = [
        "break-glass",
        "cm/ghost-settings",
        "-n",
        "production",
        "--reason",
        "INC-9",
        "--for",
        "30m",
    ];
    let out = e.plugin("sam", &[&args[..], &["--require-pause"]].concat());
    ensure!(
        out.code == 1
            && out.stderr.contains(
                "refused: --require-pause: Argo CD is NOT paused for configmap/ghost-settings: Argo CD Application argocd/ghost not found"
            )
            && out.stderr.contains("nothing was written"),
        "--require-pause with no Application: {out}"
    );
    let meta = e.metadata("cm/ghost-settings");
    ensure!(
        meta["annotations"]
            .get("driftguard.io/break-glass")
            .is_none()
            && meta["labels"].get("driftguard.io/break-glass").is_none(),
        "--require-pause wrote: {meta}"
    );
    let out = e.plugin("sam", &[&args[..], &["-o", "json"]].concat());
    let r: serde_json::Value = serde_json::from_str(&out.stdout)
        .map_err(|err| format!("break-glass -o json: {err}: {out}"))?;
    let cmd = "kubectl annotate applications.argoproj.io -n argocd ghost argocd.argoproj.io/skip-reconcile=true";
    ensure!(
        out.code == 0
            && r["action"] == "granted"
            && r["pause"]["state"] == "not-paused"
            && r["pause"]["pauseByHand"] == cmd
            && r["pause"]["warning"]
                .as_str()
                .is_some_and(|w| w.contains("self-heal may revert the hotfix"))
            && out.stderr.contains(&format!("`{cmd}`")),
        "break-glass with no Application: {out}"
    );
    let meta = e.metadata("cm/ghost-settings");
    ensure!(
        meta["annotations"]["driftguard.io/break-glass"] == "INC-9"
            && meta["annotations"]
                .get("driftguard.io/break-glass-paused")
                .is_none()
            && meta["labels"]["driftguard.io/break-glass"] == "true",
        "not armed: {meta}"
    );
    // It works: sam's hotfix is allowed.
    let out = e.kubectl(
        "sam",
        "-n production patch configmap/ghost-settings -p {\"data\":{\"MODE\":\"hotfix\"}}",
    );
    ensure!(out.code == 0, "sam's hotfix under break-glass: {out}");
    let out = e.plugin(
        "sam",
        &[
            "break-glass",
            "cm/ghost-settings",
            "-n",
            "production",
            "--end",
        ],
    );
    let meta = e.metadata("cm/ghost-settings");
    ensure!(
        out.code == 0
            && meta["annotations"]
                .get("driftguard.io/break-glass")
                .is_none(),
        "--end: {out} {meta}"
    );
    Ok(())
}

/// The sweeper: break-glasses armed for a few seconds on a Flux and an Argo
/// CD object end by themselves, the pause with them; the webhook allowed
/// driftguard's own write as `break-glass-ended`.
fn the_sweeper_ends_expired_break_glass(e: &Env) -> Scenario {
    let before = e.metric("driftguard_break_glass_expired_total");
    let arm = |target: &str| {
        e.plugin(
            "sam",
            &[
                "break-glass",
                target,
                "-n",
                "production",
                "--reason",
                "INC-51 short",
                "--for",
                "6s",
            ],
        )
    };
    let out = arm("cm/argo-hotfix");
    ensure!(out.code == 0, "arming configmap/argo-hotfix for 6s: {out}");
    let app = e.application();
    ensure!(
        app["driftguard.io/break-glass-paused-for"] == "/ConfigMap:production/argo-hotfix"
            && app["argocd.argoproj.io/skip-reconcile"] == "true",
        "the Application is not paused for configmap/argo-hotfix: {app}"
    );
    let out = arm("cm/flux-hotfix");
    ensure!(out.code == 0, "arming configmap/flux-hotfix for 6s: {out}");
    poll(
        "the sweeper to end both break-glasses",
        Duration::from_secs(60),
        || {
            let flux = e.metadata("cm/flux-hotfix");
            let argo = e.metadata("cm/argo-hotfix");
            let app = e.application();
            let clean = |m: &serde_json::Value| {
                m["annotations"].as_object().is_none_or(|a| {
                    !a.keys().any(|k| {
                        k.starts_with("driftguard.io/")
                            || k == "kustomize.toolkit.fluxcd.io/reconcile"
                    })
                }) && m["labels"].get("driftguard.io/break-glass").is_none()
            };
            if clean(&flux)
                && clean(&argo)
                && app.get("argocd.argoproj.io/skip-reconcile").is_none()
                && app.get("driftguard.io/break-glass-paused-for").is_none()
            {
                Ok(())
            } else {
                Err(format!(
                    "flux-hotfix {flux}; argo-hotfix {argo}; application {app}"
                ))
            }
        },
    )?;
    let after = e.metric("driftguard_break_glass_expired_total");
    ensure!(
        after >= before + 2,
        "driftguard_break_glass_expired_total {before} -> {after}"
    );
    let ended: Vec<_> =
        e.dg.audit()
            .into_iter()
            .filter(|r| {
                r["endpoint"] == "validate"
                    && r["user"] == "driftguard"
                    && r["reason"] == "break-glass-ended"
                    && r["verdict"] == "allow"
            })
            .collect();
    ensure!(
        ["flux-hotfix", "argo-hotfix"]
            .iter()
            .all(|n| ended.iter().any(|r| r["name"] == *n)),
        "no break-glass-ended audit records by driftguard: {ended:?}"
    );
    Ok(())
}

/// A break-glass ended by hand (an authorized user removes its keys; the
/// Application's pause is not theirs to lift): the sweeper finds the pause
/// from the Application's own list and lifts it.
fn a_pause_left_behind_is_lifted(e: &Env) -> Scenario {
    let out = e.plugin(
        "sam",
        &[
            "break-glass",
            "cm/argo-hotfix",
            "-n",
            "production",
            "--reason",
            "INC-52 ended by hand",
            "--for",
            "30m",
        ],
    );
    ensure!(out.code == 0, "arming configmap/argo-hotfix: {out}");
    let app = e.application();
    ensure!(
        app["driftguard.io/break-glass-paused-for"] == "/ConfigMap:production/argo-hotfix",
        "the Application is not paused for configmap/argo-hotfix: {app}"
    );
    let removed = r#"{"metadata":{"labels":{"driftguard.io/break-glass":null},"annotations":{"driftguard.io/break-glass":null,"driftguard.io/break-glass-expires":null,"driftguard.io/break-glass-paused":null}}}"#;
    let out = e.plane.kubectl(
        "sam",
        &[
            "-n",
            "production",
            "patch",
            "cm/argo-hotfix",
            "--type=merge",
            "-p",
            removed,
        ],
    );
    ensure!(out.ok, "sam ends the break-glass by hand: {out}");
    poll(
        "the sweeper to lift the pause left behind",
        Duration::from_secs(60),
        || {
            let app = e.application();
            if app.get("argocd.argoproj.io/skip-reconcile").is_none()
                && app.get("driftguard.io/break-glass-paused-for").is_none()
            {
                Ok(())
            } else {
                Err(format!("application {app}"))
            }
        },
    )
}

/// Objects that carry the break-glass label, and even expired break-glass
/// annotations and Flux's labels, but that driftguard never armed: a Pod and
/// a ReplicaSet (a template copies all of it), an object with a controller
/// owner, and one with the label alone. Stripping the label from them would
/// release and recreate Pods on every sweep.
fn decoys() -> String {
    let labels = r#"{app: decoy, driftguard.io/break-glass: "true", kustomize.toolkit.fluxcd.io/name: apps, kustomize.toolkit.fluxcd.io/namespace: flux-system}"#;
    let expired = r#"{driftguard.io/break-glass: "copied by a template", driftguard.io/break-glass-expires: "2020-01-01T00:00:00Z"}"#;
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: decoy-pod
  namespace: production
  labels: {labels}
  annotations: {expired}
spec:
  containers: [{{name: c, image: registry.invalid/decoy}}]
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: decoy-rs
  namespace: production
  labels: {labels}
  annotations: {expired}
spec:
  replicas: 0
  selector: {{matchLabels: {{app: decoy, driftguard.io/break-glass: "true"}}}}
  template:
    metadata: {{labels: {labels}}}
    spec:
      containers: [{{name: c, image: registry.invalid/decoy}}]
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: decoy-owned
  namespace: production
  labels: {labels}
  annotations: {expired}
  ownerReferences: [{{apiVersion: v1, kind: ConfigMap, name: flux-settings, uid: 6b1b2c3d-0000-4000-8000-000000000001, controller: true}}]
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: decoy-label-only
  namespace: production
  labels: {labels}
"#
    )
}

/// The sweeper leaves the [`decoys`] alone while it ends a real break-glass.
fn the_sweeper_touches_only_what_driftguard_armed(e: &Env) -> Scenario {
    let out = e
        .plane
        .kubectl_as_stdin(FLUX, &["apply", "-f", "-"], Some(&decoys()));
    ensure!(out.ok, "the decoys: {out}");
    let out = e.plugin(
        "sam",
        &[
            "break-glass",
            "cm/flux-hotfix",
            "-n",
            "production",
            "--reason",
            "INC-53 beside decoys",
            "--for",
            "4s",
        ],
    );
    ensure!(out.code == 0, "arming configmap/flux-hotfix for 4s: {out}");
    poll(
        "the sweeper to end the real break-glass",
        Duration::from_secs(60),
        || {
            let meta = e.metadata("cm/flux-hotfix");
            match meta["labels"].get("driftguard.io/break-glass") {
                None => Ok(()),
                Some(_) => Err(format!("flux-hotfix {meta}")),
            }
        },
    )?;
    // Two more sweeps (2 s apart) for any decoy listed after the real one.
    // A fixed wait, kept: a sweep that leaves an object alone changes nothing
    // a test can see (no metric, no request), so there is no state to poll.
    std::thread::sleep(Duration::from_secs(5));
    for target in [
        "pod/decoy-pod",
        "replicaset/decoy-rs",
        "cm/decoy-owned",
        "cm/decoy-label-only",
    ] {
        let meta = e.metadata(target);
        ensure!(
            meta["labels"]["driftguard.io/break-glass"] == "true",
            "the sweeper patched {target}, which driftguard never armed: {meta}"
        );
    }
    // The plugin refuses to arm what the sweeper would never end.
    let out = e.plugin(
        "sam",
        &[
            "break-glass",
            "rs/decoy-rs",
            "-n",
            "production",
            "--reason",
            "INC-53",
            "--for",
            "10m",
        ],
    );
    ensure!(
        out.code == 2 && out.stderr.contains("Pods and ReplicaSets are never armed"),
        "arming a ReplicaSet: {out}"
    );
    Ok(())
}

/// More drifted paths than the denial's message names (5), one longer than
/// a warning line (120 characters): `preview -o json` returns every one
/// whole, read from the denial's `details.causes` through the real apiserver.
fn preview_names_every_drifted_path_whole(e: &Env) -> Scenario {
    let long = format!("LONG_{}", "K".repeat(140));
    let mut keys: Vec<String> = (0..6).map(|i| format!("KEY_{i}")).collect();
    keys.push(long.clone());
    let data: serde_json::Map<String, serde_json::Value> = keys
        .iter()
        .map(|k| (k.clone(), serde_json::json!("x")))
        .collect();
    let patch = serde_json::json!({ "data": data }).to_string();
    let out = e.plugin(
        "alice",
        &[
            "preview",
            "cm/settings",
            "-n",
            "production",
            "-p",
            &patch,
            "-o",
            "json",
        ],
    );
    ensure!(out.code == 1, "a drifting ConfigMap patch: {out}");
    let report: serde_json::Value = serde_json::from_str(&out.stdout)
        .map_err(|err| format!("-o json is not JSON: {err}: {out}"))?;
    let mut got: Vec<String> = report["driftedPaths"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p.as_str().map(str::to_owned))
        .collect();
    got.sort();
    let mut want: Vec<String> = keys.iter().map(|k| format!("/data/{k}")).collect();
    want.sort();
    ensure!(
        got == want && report["driftedPathsComplete"] == true,
        "every drifted path, whole: want {want:?}, got {report}"
    );
    // The message itself stays short: five paths and a count.
    ensure!(
        report["message"]
            .as_str()
            .is_some_and(|m| m.contains("(and 2 more)")),
        "the denial's message: {report}"
    );
    // Warn mode: allowed, so no denial carries the paths; each is one
    // warning line, and the long one is cut there: preview says the list is
    // incomplete rather than report a cut path.
    let out = e
        .plane
        .kubectl_as_stdin(ARGO, &["apply", "-f", "-"], Some(WARN_SETTINGS));
    ensure!(out.ok, "{out}");
    let preview = |patch: &str| -> Result<serde_json::Value, String> {
        let out = e.plugin(
            "alice",
            &[
                "preview",
                "cm/warn-settings",
                "-n",
                "production",
                "-p",
                patch,
                "-o",
                "json",
            ],
        );
        ensure!(out.code == 0, "a drifting patch in warn mode: {out}");
        serde_json::from_str(&out.stdout).map_err(|err| format!("not JSON: {err}: {out}"))
    };
    let report = preview(r#"{"data":{"A":"x","B":"x"}}"#)?;
    ensure!(
        report["driftedPaths"] == serde_json::json!(["/data/A", "/data/B"])
            && report["driftedPathsComplete"] == true,
        "warn mode, two short paths: {report}"
    );
    let patch = serde_json::json!({"data": {"A": "y", &long: "x"}}).to_string();
    let report = preview(&patch)?;
    ensure!(
        report["driftedPaths"] == serde_json::json!(["/data/A"])
            && report["driftedPathsComplete"] == false,
        "warn mode, a path longer than a warning line: {report}"
    );
    Ok(())
}

/// A ConfigMap of the seed Application in warn mode.
const WARN_SETTINGS: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: warn-settings
  namespace: production
  annotations:
    argocd.argoproj.io/tracking-id: "myapp:/ConfigMap:production/warn-settings"
    driftguard.io/mode: warn
data: {MODE: normal}
"#;

fn preview_allowed_and_denied(e: &Env) -> Scenario {
    let before = e.annotations();
    // The seed Application ignores /spec/replicas of its Deployments.
    let out = e.plugin(
        "alice",
        &[
            "preview",
            "deployment/myapp",
            "-n",
            "production",
            "--replicas",
            "5",
        ],
    );
    ensure!(out.code == 0, "an ignored field: {out}");
    ensure!(out.stdout.contains("allowed"), "no verdict: {out}");
    let out = e.plugin(
        "alice",
        &[
            "preview",
            "deploy/myapp",
            "-n",
            "production",
            "--set-image",
            "app=nginx:9.9",
        ],
    );
    ensure!(
        out.code == 1,
        "a drifting image change was not denied: {out}"
    );
    ensure!(
        out.stdout
            .contains("/spec/template/spec/containers/0/image")
            && out.stdout.contains("denied"),
        "the denial does not name the drifted path: {out}"
    );
    let out = e.plugin(
        "alice",
        &[
            "preview",
            "cm/settings",
            "-n",
            "production",
            "-p",
            r#"{"data":{"LOG_LEVEL":"debug"}}"#,
            "-o",
            "json",
        ],
    );
    ensure!(out.code == 1, "a drifting ConfigMap patch: {out}");
    let report: serde_json::Value = serde_json::from_str(&out.stdout)
        .map_err(|err| format!("-o json is not JSON: {err}: {out}"))?;
    ensure!(
        report["allowed"] == false
            && report["driftedPaths"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p == "/data/LOG_LEVEL")),
        "-o json report: {report}"
    );
    // -f FILE: the whole object, replaced (dry run), once with an ignored
    // change and once with a drifting one.
    let got = e.plane.kubectl(
        "admin",
        &["-n", "production", "get", "deployment/myapp", "-o", "json"],
    );
    ensure!(got.ok, "{got}");
    let mut object: serde_json::Value = serde_json::from_str(&got.stdout).unwrap();
    object["spec"]["replicas"] = serde_json::json!(7);
    let file = e.plane.dir.join("myapp-replicas.json");
    std::fs::write(&file, object.to_string()).unwrap();
    let path = file.display().to_string();
    let out = e.plugin(
        "alice",
        &[
            "preview",
            "deployment/myapp",
            "-n",
            "production",
            "-f",
            &path,
        ],
    );
    ensure!(out.code == 0, "-f with an ignored change: {out}");
    object["spec"]["template"]["spec"]["containers"][0]["image"] = serde_json::json!("nginx:6.6");
    std::fs::write(&file, object.to_string()).unwrap();
    let out = e.plugin(
        "alice",
        &[
            "preview",
            "deployment/myapp",
            "-n",
            "production",
            "-f",
            &path,
        ],
    );
    ensure!(
        out.code == 1
            && out
                .stdout
                .contains("/spec/template/spec/containers/0/image"),
        "-f with a drifting change: {out}"
    );
    let out = e.plugin(
        "alice",
        &["preview", "cm/settings", "-n", "production", "-f", &path],
    );
    ensure!(out.code == 2, "-f holding another object: {out}");
    // Dry runs change nothing.
    let image = e.plane.kubectl(
        "admin",
        &[
            "-n",
            "production",
            "get",
            "deployment/myapp",
            "-o",
            "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image}",
        ],
    );
    ensure!(
        image.stdout != "5 nginx:9.9" && e.annotations() == before,
        "a preview wrote: {image}"
    );
    Ok(())
}

fn explain_an_argo_cd_object(e: &Env) -> Scenario {
    let out = e.plugin(
        "alice",
        &["explain", "deployment/myapp", "-n", "production"],
    );
    ensure!(out.code == 0, "explain: {out}");
    for needle in [
        "Argo CD Application argocd/myapp",
        "repo https://github.com/myorg/gitops-repo.git",
        "path applications/myapp, diff three-way",
        "enforce (from the policy's default mode (ConfigMap driftguard/driftguard-policy))",
        "covers now: /spec/replicas",
        "you are alice",
        "you may not break glass",
    ] {
        ensure!(
            out.stdout.contains(needle),
            "explain lacks {needle:?}: {out}"
        );
    }
    let out = e.plugin(
        "sam",
        &["explain", "deploy/myapp", "-n", "production", "-o", "json"],
    );
    ensure!(out.code == 0, "explain -o json: {out}");
    let r: serde_json::Value = serde_json::from_str(&out.stdout)
        .map_err(|err| format!("-o json is not JSON: {err}: {out}"))?;
    ensure!(
        r["managedBy"]["name"] == "myapp"
            && r["managedBy"]["kind"] == "Application"
            && r["mode"]["mode"] == "enforce"
            && r["breakGlass"]["youMayBreakGlass"] == true
            && r["ignoreRules"].as_array().is_some_and(|rules| rules
                .iter()
                .any(|rule| rule["coversNow"][0] == "/spec/replicas")),
        "explain -o json: {r}"
    );
    // Argo CD v3.6's per-resource rule, as Argo CD's sync writes it from Git.
    let annotate = |value: &str| {
        e.plane.kubectl_as(
            ARGO,
            &[
                "-n",
                "production",
                "annotate",
                "--overwrite",
                "deployment/myapp",
                value,
            ],
        )
    };
    let image = "/spec/template/spec/containers/0/image";
    let out = annotate(&format!(
        "argocd.argoproj.io/ignore-differences=jsonPointers: [{image}]"
    ));
    ensure!(out.ok, "{out}");
    let out = e.plugin(
        "alice",
        &["explain", "deploy/myapp", "-n", "production", "-o", "json"],
    );
    let _ = annotate("argocd.argoproj.io/ignore-differences-");
    ensure!(out.code == 0, "explain -o json: {out}");
    let r: serde_json::Value = serde_json::from_str(&out.stdout)
        .map_err(|err| format!("-o json is not JSON: {err}: {out}"))?;
    ensure!(
        r["ignoreRules"]
            .as_array()
            .is_some_and(|rules| rules.iter().any(|rule| {
                rule["from"] == "argocd.argoproj.io/ignore-differences"
                    && rule["coversNow"][0] == image
            })),
        "explain shows no rule from the annotation: {r}"
    );
    Ok(())
}

fn status_up_then_a_configuration_missing(e: &Env) -> Scenario {
    // A real denial (an Event), and a break-glass that is still active.
    let out = e.kubectl("alice", "-n production label configmap/settings by=hand");
    ensure!(out.code != 0, "alice's label went through: {out}");
    let out = e.plugin(
        "sam",
        &[
            "break-glass",
            "cm/settings",
            "-n",
            "production",
            "--reason",
            // Terminal controls in a reason (anyone allowed to break glass
            // writes it) would erase and rewrite status lines: escaped.
            "INC-43\u{1b}[2K\rforged",
            "--for",
            "30m",
        ],
    );
    ensure!(out.code == 0, "{out}");
    poll("status to list the Events", Duration::from_secs(15), || {
        let out = e.plugin("admin", &["status"]);
        if out.stdout.contains("ConfigMap production/settings until")
            && out.stdout.contains("INC-43\\u{1b}[2K\\rforged")
            && !out.stdout.contains(['\u{1b}', '\r'])
            && !out.stdout.contains("Deployment production/myapp until")
            && out.stdout.contains("Recent DriftBlocked Events:\n")
            && out.stdout.contains("ConfigMap production/settings: ")
        {
            Ok(())
        } else {
            Err(out.to_string())
        }
    })?;
    // A break-glass set by hand (kubectl annotate, as sam, whom the policy
    // allows): the scan finds it without any BreakGlassUsed Event.
    let expires = (jiff::Timestamp::now().round(jiff::Unit::Second).unwrap()
        + jiff::SignedDuration::from_mins(20))
    .to_string();
    let out = e.kubectl(
        "sam",
        &format!(
            "-n production annotate configmap/flux-settings driftguard.io/break-glass=INC-44-by-hand driftguard.io/break-glass-expires={expires}"
        ),
    );
    ensure!(out.code == 0, "sam's kubectl annotate: {out}");
    ensure!(
        out.stderr
            .contains("Flux will revert this hotfix on its next reconcile:")
            && out
                .stderr
                .contains("`kubectl driftguard break-glass`, which pauses Flux for this object"),
        "a break-glass without a pause does not warn: {out}"
    );
    // As if the apiserver's event TTL had passed: every BreakGlassUsed Event
    // deleted, both break-glasses are still listed.
    let events = e.plane.kubectl(
        "admin",
        &[
            "delete",
            "events.events.k8s.io",
            "-A",
            "--field-selector",
            "reason=BreakGlassUsed",
        ],
    );
    ensure!(events.ok, "deleting the BreakGlassUsed Events: {events}");
    let events = e.plane.kubectl(
        "admin",
        &[
            "get",
            "events.events.k8s.io",
            "-A",
            "--field-selector",
            "reason=BreakGlassUsed",
            "-o",
            "name",
        ],
    );
    ensure!(
        events.ok && events.stdout.trim().is_empty(),
        "BreakGlassUsed Events left: {events}"
    );
    let out = e.plugin("admin", &["status", "-o", "json"]);
    let r: serde_json::Value =
        serde_json::from_str(&out.stdout).map_err(|err| format!("status -o json: {err}: {out}"))?;
    let listed = r["activeBreakGlass"].as_array().is_some_and(|list| {
        list.iter().any(|b| {
            b["object"] == "ConfigMap production/flux-settings"
                && b["kind"] == "ConfigMap"
                && b["namespace"] == "production"
                && b["name"] == "flux-settings"
                && b["reason"] == "INC-44-by-hand"
                && b["expires"] == expires.as_str()
        }) && list.iter().any(|b| {
            b["object"] == "ConfigMap production/settings"
                && b["reason"] == "INC-43\u{1b}[2K\rforged"
        })
    });
    ensure!(
        listed
            && r["breakGlassScan"]["typesNotReadable"] == 0
            && r["breakGlassScan"]["typesListed"].as_u64() > Some(10),
        "status -o json lacks the annotated ConfigMap: {r}"
    );
    // sam may list ConfigMaps but not Secrets (nor most types): the types
    // sam may not list are skipped and counted, the break-glass still listed.
    let out = e.plugin("sam", &["status", "-o", "json"]);
    let r: serde_json::Value = serde_json::from_str(&out.stdout)
        .map_err(|err| format!("status -o json as sam: {err}: {out}"))?;
    ensure!(
        out.code == 0
            && r["breakGlassScan"]["typesNotReadable"].as_u64() > Some(0)
            && r["breakGlassScan"]["notReadable"]
                .as_array()
                .is_some_and(|l| l.iter().any(|t| t == "secrets"))
            && r["activeBreakGlass"].as_array().is_some_and(|l| l
                .iter()
                .any(|b| b["object"] == "ConfigMap production/flux-settings")),
        "status -o json as sam: {r}"
    );
    let out = e.plugin("sam", &["status"]);
    ensure!(
        out.code == 0
            && out.stdout.contains(" types not readable, not searched: ")
            && out
                .stdout
                .contains("ConfigMap production/flux-settings until "),
        "status as sam: {out}"
    );
    let out = e.plugin("admin", &["status"]);
    ensure!(out.code == 0, "status: {out}");
    for needle in [
        "ValidatingWebhookConfiguration driftguard: present",
        "MutatingWebhookConfiguration driftguard: present",
        "failurePolicy Fail, caBundle present",
        ", reachable from here, caBundle verifies its certificate",
        "Policy: ConfigMap driftguard/dg-driftguard-policy",
        "ConfigMap production/flux-settings until ",
        // Armed by the plugin (Argo CD paused) and by hand (nothing paused).
        "INC-43\\u{1b}[2K\\rforged (paused: argocd.argoproj.io/skip-reconcile)",
        "INC-44-by-hand (nothing paused: the GitOps tool may revert it)",
        "status: ok",
    ] {
        ensure!(
            out.stdout.contains(needle),
            "status lacks {needle:?}: {out}"
        );
    }
    let out = e.plugin("admin", &["status", "-o", "json"]);
    let r: serde_json::Value =
        serde_json::from_str(&out.stdout).map_err(|err| format!("status -o json: {err}: {out}"))?;
    ensure!(r["healthy"] == true, "status -o json: {r}");
    ensure!(
        r["metrics"]["reachable"] == false,
        "status without --metrics-url of URL webhooks: {r}"
    );
    // driftguard's probe port, read directly: the policy reload counters.
    let url = format!("http://127.0.0.1:{}/metrics", e.dg.probe);
    let out = e.plugin("admin", &["status", "--metrics-url", &url]);
    ensure!(
        out.code == 0
            && out.stdout.contains("Metrics: (")
            && out.stdout.contains("policy reloads 0 ok, 0 failed")
            && out.stdout.contains("decision timeouts 0")
            && out.stdout.contains("internal errors 0"),
        "status --metrics-url: {out}"
    );
    let out = e.plugin("admin", &["status", "--metrics-url", &url, "-o", "json"]);
    let r: serde_json::Value = serde_json::from_str(&out.stdout)
        .map_err(|err| format!("status --metrics-url -o json: {err}: {out}"))?;
    ensure!(
        r["metrics"]["reachable"] == true && r["metrics"]["policyReloads"]["failure"] == 0,
        "status --metrics-url -o json: {r}"
    );
    // A broken policy file, then the good one again: one failed reload, one ok.
    // Each written whole and renamed in: a reload that reads the file between
    // `write`'s truncation and its data sees an empty policy (seen under load).
    let policy = e.plane.dir.join("plugin-policy.yaml");
    let replace = |text: &str| {
        let tmp = e.plane.dir.join("plugin-policy.yaml.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &policy).unwrap();
    };
    replace("mode: [not a mode\n");
    let counted = |needle: &'static str| {
        poll(needle, Duration::from_secs(10), || {
            let out = e.plugin("admin", &["status", "--metrics-url", &url]);
            if out.stdout.contains(needle) {
                Ok(())
            } else {
                Err(out.to_string())
            }
        })
    };
    let failed = counted("policy reloads 0 ok, 1 failed");
    replace(POLICY);
    failed?;
    counted("policy reloads 1 ok, 1 failed")?;
    // Which policy is in force: the server's digest, compared with the
    // ConfigMap the plugin reads (the chart's dg one holds another policy).
    let out = e.plugin("admin", &["status", "--metrics-url", &url]);
    let digest = driftguard::policy::digest(POLICY);
    ensure!(
        out.stdout.contains(&format!(
            "Policy in force (server): {digest} from {}, mode enforce: DIFFERS from ConfigMap driftguard/dg-driftguard-policy",
            policy.display()
        )),
        "status does not show the policy in force: {out}"
    );
    let out = e.plane.kubectl(
        "admin",
        &[
            "-n",
            "driftguard",
            "create",
            "configmap",
            "same-policy",
            &format!("--from-file=policy.yaml={}", policy.display()),
        ],
    );
    ensure!(out.ok, "{out}");
    let out = e.plugin(
        "admin",
        &[
            "status",
            "--metrics-url",
            &url,
            "--policy-configmap",
            "driftguard/same-policy",
        ],
    );
    ensure!(
        out.stdout.contains(&format!(
            "{digest} from {}, mode enforce: the same as ConfigMap driftguard/same-policy",
            policy.display()
        )),
        "status does not match the server's policy with the ConfigMap's: {out}"
    );
    // alice may not read webhook configurations: exit 2, naming what was forbidden.
    let out = e.plugin("alice", &["status"]);
    ensure!(
        out.code == 2
            && out.stderr.contains("forbidden")
            && out.stderr.contains("validatingwebhookconfigurations"),
        "status as alice: {out}"
    );
    // A caBundle from another CA: the serving certificate does not verify.
    let other = driftguard::certs::Authority::new("another CA").unwrap();
    let bundle =
        serde_json::to_value(k8s_openapi::ByteString(other.cert_pem.into_bytes())).unwrap();
    let patch = serde_json::json!([{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": bundle}]);
    let out = e.plane.kubectl(
        "admin",
        &[
            "patch",
            "validatingwebhookconfiguration",
            "driftguard",
            "--type=json",
            "-p",
            &patch.to_string(),
        ],
    );
    ensure!(out.ok, "{out}");
    let out = e.plugin("admin", &["status"]);
    ensure!(
        out.code == 1 && out.stdout.contains("caBundle does NOT verify"),
        "status with a wrong caBundle: {out}"
    );
    let gone = e.plane.kubectl(
        "admin",
        &["delete", "mutatingwebhookconfiguration", "driftguard"],
    );
    ensure!(gone.ok, "{gone}");
    let out = e.plugin("admin", &["status"]);
    ensure!(
        out.code == 1
            && out
                .stdout
                .contains("MutatingWebhookConfiguration driftguard: MISSING"),
        "status without the mutating configuration: {out}"
    );
    // The chart's pair instead (release dg): found by its labels without --name.
    let gone = e.plane.kubectl(
        "admin",
        &["delete", "validatingwebhookconfiguration", "driftguard"],
    );
    ensure!(gone.ok, "{gone}");
    e.plane.apply_admin(
        &render_chart(
            &e.plane,
            e.dg.port,
            &["policy.breakGlass.allowedUsers={sam}"],
        )
        .webhooks,
    );
    let out = e.plugin("admin", &["status"]);
    ensure!(
        out.code == 0
            && out
                .stdout
                .contains("ValidatingWebhookConfiguration dg-driftguard: present")
            && out
                .stdout
                .contains("MutatingWebhookConfiguration dg-driftguard: present"),
        "status with the chart's configurations: {out}"
    );
    Ok(())
}

/// A Service-mode pair `svcprobe` (nothing matches its rules; the apiserver
/// never calls it) and the Secret the chart would mount, `dgsvc/svcprobe-tls`.
fn service_webhook(ca_pem: &str, leaf_pem: &str) -> String {
    let b64 = |pem: &str| {
        serde_json::to_value(k8s_openapi::ByteString(pem.as_bytes().to_vec()))
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned()
    };
    let hook = |kind: &str| {
        format!(
            r#"---
apiVersion: admissionregistration.k8s.io/v1
kind: {kind}
metadata: {{name: svcprobe}}
webhooks:
  - name: svcprobe.driftguard.io
    clientConfig:
      service: {{namespace: dgsvc, name: svcprobe, path: /validate, port: 443}}
      caBundle: {}
    rules: [{{apiGroups: [example.invalid], apiVersions: [v1], operations: [CREATE], resources: [nothings]}}]
    failurePolicy: Ignore
    sideEffects: None
    admissionReviewVersions: [v1]
"#,
            b64(ca_pem)
        )
    };
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: dgsvc}}
---
apiVersion: v1
kind: Secret
metadata: {{name: svcprobe-tls, namespace: dgsvc}}
type: kubernetes.io/tls
data: {{tls.crt: {}, tls.key: {}}}
{}{}"#,
        b64(leaf_pem),
        b64("unused"),
        hook("ValidatingWebhookConfiguration"),
        hook("MutatingWebhookConfiguration")
    )
}

fn status_of_a_service_webhook(e: &Env) -> Scenario {
    let dns = "svcprobe.dgsvc.svc".to_owned();
    let ca = driftguard::certs::Authority::new("chart CA").unwrap();
    let (leaf, _) = ca
        .leaf("svcprobe", std::slice::from_ref(&dns), &[])
        .unwrap();
    e.plane.apply_admin(&service_webhook(&ca.cert_pem, &leaf));
    let out = e.plugin("admin", &["status", "--name", "svcprobe"]);
    ensure!(
        out.stdout.contains(
            "caBundle verifies tls.crt of Secret dgsvc/svcprobe-tls for svcprobe.dgsvc.svc"
        ) && out
            .stdout
            .contains("calls service dgsvc/svcprobe, 0 ready endpoint(s)"),
        "status of a Service webhook: {out}"
    );
    // The Secret now holds a leaf from another CA.
    let other = driftguard::certs::Authority::new("another CA").unwrap();
    let (foreign, _) = other.leaf("svcprobe", &[dns], &[]).unwrap();
    e.plane
        .apply_admin(&service_webhook(&ca.cert_pem, &foreign));
    let out = e.plugin("admin", &["status", "--name", "svcprobe", "-o", "json"]);
    let r: serde_json::Value =
        serde_json::from_str(&out.stdout).map_err(|err| format!("status -o json: {err}: {out}"))?;
    let check = &r["configurations"][0]["webhooks"][0]["servingCertificate"];
    ensure!(
        out.code == 1
            && check["caBundleVerifies"] == false
            && check["text"]
                .as_str()
                .is_some_and(|t| t.contains("does NOT verify")),
        "status with a serving certificate from another CA: {out}"
    );
    // Its /metrics through the apiserver's service proxy: no such Service, reported.
    ensure!(
        r["metrics"]["reachable"] == false
            && r["metrics"]["from"] == "service dgsvc/svcprobe port probes",
        "status of a Service webhook without pods, metrics: {r}"
    );
    // sam may read webhook configurations but not Secrets (nor EndpointSlices):
    // the caBundle is not checked, which is said, and the exit code stays 0.
    e.plane.apply_admin(
        r#"apiVersion: rbac.authorization.k8s.io/v1
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
"#,
    );
    let out = e.plugin("sam", &["status", "--name", "svcprobe"]);
    ensure!(
        out.code == 0
            && out.stdout.contains(
                "caBundle not checked: cannot read Secret dgsvc/svcprobe-tls (needs get on secrets in namespace dgsvc)"
            ),
        "status as sam, who may not read the Secret: {out}"
    );
    for kind in [
        "validatingwebhookconfiguration",
        "mutatingwebhookconfiguration",
    ] {
        let gone = e.plane.kubectl("admin", &["delete", kind, "svcprobe"]);
        ensure!(gone.ok, "{gone}");
    }
    Ok(())
}

fn explain_a_flux_object(e: &Env) -> Scenario {
    // --kubeconfig given to the plugin itself, after its name, as kubectl passes it.
    let kubeconfig = format!("--kubeconfig={}", e.plane.kubeconfig("alice").display());
    let out = e.plugin(
        "admin",
        &[
            "explain",
            "configmap/flux-settings",
            "-n",
            "production",
            &kubeconfig,
        ],
    );
    ensure!(out.code == 0, "explain: {out}");
    for needle in [
        "Flux Kustomization flux-system/apps",
        "covers now: /data/LOG_LEVEL",
        "you are alice",
    ] {
        ensure!(
            out.stdout.contains(needle),
            "explain lacks {needle:?}: {out}"
        );
    }
    // The Kustomization names no account: applied as the controller's own,
    // unless Flux runs with --default-service-account.
    ensure!(
        !out.stdout.contains("Flux reconcile as"),
        "explain names an account the Kustomization does not: {out}"
    );
    let out = e.plugin(
        "alice",
        &[
            "explain",
            "configmap/flux-settings",
            "-n",
            "production",
            "--flux-default-service-account=flux-applier",
        ],
    );
    let account = "Flux reconcile as system:serviceaccount:flux-system:flux-applier";
    ensure!(
        out.code == 0 && out.stdout.contains(account),
        "explain lacks {account:?}: {out}"
    );
    Ok(())
}

fn policy_found_by_the_charts_labels(e: &Env) -> Scenario {
    // A tenant plants a chart-labelled `*-policy` ConfigMap in their own
    // namespace, granting themselves break-glass: never read.
    let planted = r#"{"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "tenant-policy", "namespace": "production",
                     "labels": {"app.kubernetes.io/name": "driftguard"}},
        "data": {"policy.yaml": "breakGlass:\n  allowedUsers: [alice]\n"}}"#;
    e.plane.apply_admin(planted);
    // The chart installed as release dg: ConfigMap dg-driftguard-policy, not the default name.
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
    let out = e.plugin("alice", &["explain", "deploy/myapp", "-n", "production"]);
    ensure!(
        out.code == 0
            && !out.stdout.contains("tenant-policy")
            && !out.stdout.contains("allowed users [alice]")
            && out
                .stdout
                .contains("Policy:      ConfigMap driftguard/dg-driftguard-policy")
            && out.stdout.contains("allowed users [sam]")
            && !out.stderr.contains("embedded default"),
        "the chart's ConfigMap was not found by its labels: {out}"
    );
    // Named explicitly but missing: the embedded default, with a warning.
    let out = e.plugin(
        "alice",
        &[
            "explain",
            "deploy/myapp",
            "-n",
            "production",
            "--policy-configmap",
            "driftguard/nope",
        ],
    );
    ensure!(
        out.code == 0
            && out.stderr.contains("embedded default")
            && out.stdout.contains("Policy:      embedded default"),
        "a missing --policy-configmap: {out}"
    );
    let out = e.plane.kubectl(
        "admin",
        &["-n", "production", "delete", "configmap", "tenant-policy"],
    );
    ensure!(out.ok, "{out}");
    Ok(())
}

/// alice may impersonate every service account of kube-system, which the
/// default policy trusts (`system:serviceaccount:kube-system:*`). The rule is
/// `edit`'s, spelled out: without kube-controller-manager the aggregated
/// `edit` ClusterRole has no rules.
const ALICE_ACTS_AS_KUBE_SYSTEM: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: impersonate-service-accounts, namespace: kube-system}
rules:
  - apiGroups: [""]
    resources: [serviceaccounts]
    verbs: [impersonate]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-acts-as-service-accounts, namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: impersonate-service-accounts}
subjects:
  - {kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}
"#;

fn status_names_who_may_act_as_a_trusted_identity(e: &Env) -> Scenario {
    e.plane.apply_admin(ALICE_ACTS_AS_KUBE_SYSTEM);
    let result = (|| {
        // The path is real: alice is now a trusted identity whenever she likes.
        let out = e.kubectl(
            "alice",
            "--as=system:serviceaccount:kube-system:anyone auth whoami",
        );
        ensure!(
            out.code == 0
                && out
                    .stdout
                    .contains("system:serviceaccount:kube-system:anyone"),
            "alice acting as a kube-system account: {out}"
        );
        let out = e.plugin("admin", &["status"]);
        for needle in [
            "Trusted identities others can act as: ",
            "  system:serviceaccount:kube-system:* (trusted.users), in namespace kube-system:\n    User alice through RoleBinding kube-system/alice-acts-as-service-accounts (Role kube-system/impersonate-service-accounts): impersonate serviceaccounts\n",
            // testkit RBAC (control_plane.rs): developers and sre-oncall create pods in every namespace.
            "Group developers, Group sre-oncall through ClusterRoleBinding workload-editors (ClusterRole workload-editor): create pods",
            "status: ok",
        ] {
            ensure!(
                out.stdout.contains(needle),
                "status lacks {needle:?}: {out}"
            );
        }
        // A warning: the exit code stays the webhooks'.
        ensure!(out.code == 0, "status with a finding: {out}");
        let out = e.plugin("admin", &["status", "-o", "json"]);
        let r: serde_json::Value = serde_json::from_str(&out.stdout)
            .map_err(|err| format!("status -o json: {err}: {out}"))?;
        let reach = &r["trustedIdentityReach"];
        let named = reach["findings"].as_array().is_some_and(|l| {
            l.iter().any(|f| {
                f["identity"] == "system:serviceaccount:kube-system:*"
                    && f["trustedBy"] == "trusted.users"
                    && f["namespace"] == "kube-system"
                    && f["binding"] == "RoleBinding kube-system/alice-acts-as-service-accounts"
                    && f["subjects"] == serde_json::json!(["User alice"])
                    && f["ways"]
                        == serde_json::json!([{"how": "impersonate serviceaccounts", "names": []}])
            })
        });
        ensure!(
            out.code == 0 && reach["checked"] == true && named,
            "status -o json lacks alice's binding: {reach}"
        );
        // system:masters (cluster-admin) may remove the webhooks: named apart.
        ensure!(
            reach["clusterAdmins"]
                .as_array()
                .is_some_and(|l| l.iter().any(|a| a
                    .as_str()
                    .is_some_and(|a| a.contains("Group system:masters")))),
            "status -o json: cluster admins: {reach}"
        );
        // sam may not list RBAC objects: said, and the exit code stays 0.
        let out = e.plugin("sam", &["status"]);
        ensure!(
            out.code == 0
                && out.stdout.contains(
                    "Trusted identities others can act as: not checked: clusterroles.rbac.authorization.k8s.io is forbidden: User \"sam\" cannot list resource \"clusterroles\""
                )
                && out.stdout.contains("(and 3 more refused)\n"),
            "status as sam: {out}"
        );
        Ok(())
    })();
    let out = e.plane.kubectl(
        "admin",
        &[
            "-n",
            "kube-system",
            "delete",
            "rolebinding/alice-acts-as-service-accounts",
            "role/impersonate-service-accounts",
        ],
    );
    ensure!(out.ok, "cleaning up: {out}");
    result
}

/// The same reach through constrained impersonation (beta, on by default
/// since v1.36; k8s.io/apiserver `impersonation/mode.go`): `impersonate:serviceaccount`
/// on the accounts in authentication.k8s.io, and `impersonate-on:serviceaccount:create`
/// on what `kubectl auth whoami` creates. No legacy `impersonate` anywhere.
const ALICE_ACTS_AS_KUBE_SYSTEM_CONSTRAINED: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: constrained-impersonation, namespace: kube-system}
rules:
  - apiGroups: [authentication.k8s.io]
    resources: [serviceaccounts]
    verbs: ["impersonate:serviceaccount"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-constrained, namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: constrained-impersonation}
subjects:
  - {kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: whoami-as-service-accounts}
rules:
  - apiGroups: [authentication.k8s.io]
    resources: [selfsubjectreviews]
    verbs: ["impersonate-on:serviceaccount:create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: alice-whoami-as-service-accounts}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: whoami-as-service-accounts}
subjects:
  - {kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}
"#;

/// The apiserver's minor version (`kubectl version`).
fn server_minor(e: &Env) -> Result<u32, String> {
    let out = e.kubectl("admin", "version -o json");
    let v: serde_json::Value = serde_json::from_str(&out.stdout)
        .map_err(|err| format!("kubectl version: {err}: {out}"))?;
    v["serverVersion"]["minor"]
        .as_str()
        .and_then(|m| m.trim_end_matches('+').parse().ok())
        .ok_or_else(|| format!("no server minor version: {out}"))
}

fn status_names_constrained_impersonation(e: &Env) -> Scenario {
    e.plane.apply_admin(ALICE_ACTS_AS_KUBE_SYSTEM_CONSTRAINED);
    let result = (|| {
        let out = e.kubectl(
            "alice",
            "--as=system:serviceaccount:kube-system:anyone auth whoami",
        );
        // Off by default before v1.36: the path exists only from then on.
        if server_minor(e)? >= 36 {
            ensure!(
                out.code == 0
                    && out
                        .stdout
                        .contains("system:serviceaccount:kube-system:anyone"),
                "alice acting as a kube-system account by constrained impersonation: {out}"
            );
        } else {
            // kubectl words the 403 of the impersonation as its own.
            ensure!(
                out.code != 0
                    && out
                        .stderr
                        .contains("selfsubjectreviews API is not enabled in the cluster or you do not have permission"),
                "constrained impersonation before v1.36: {out}"
            );
        }
        let out = e.plugin("admin", &["status"]);
        let needle = "  system:serviceaccount:kube-system:* (trusted.users), in namespace kube-system:\n    User alice through RoleBinding kube-system/alice-constrained (Role kube-system/constrained-impersonation): impersonate:serviceaccount serviceaccounts\n";
        ensure!(
            out.code == 0 && out.stdout.contains(needle),
            "status lacks {needle:?}: {out}"
        );
        Ok(())
    })();
    let out = e.plane.kubectl(
        "admin",
        &[
            "delete",
            "-n",
            "kube-system",
            "rolebinding/alice-constrained",
            "role/constrained-impersonation",
        ],
    );
    let cluster = e.plane.kubectl(
        "admin",
        &[
            "delete",
            "clusterrolebinding/alice-whoami-as-service-accounts",
            "clusterrole/whoami-as-service-accounts",
        ],
    );
    ensure!(out.ok && cluster.ok, "cleaning up: {out} {cluster}");
    result
}

fn usage_and_access_errors_exit_2(e: &Env) -> Scenario {
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
}

#[test]
fn kubectl_driftguard_against_a_real_control_plane() {
    let env = setup();
    let scenarios: [Step; 18] = [
        ("plugin list", plugin_list_shows_it),
        ("preview", preview_allowed_and_denied),
        (
            "preview names every drifted path whole",
            preview_names_every_drifted_path_whole,
        ),
        ("explain", explain_an_argo_cd_object),
        ("explain flux", explain_a_flux_object),
        ("break-glass", break_glass_refused_granted_ended),
        ("break-glass pauses Flux", break_glass_pauses_flux),
        (
            "break-glass is decided by the server",
            break_glass_is_decided_by_the_server,
        ),
        (
            "an Application that cannot be paused",
            an_application_that_cannot_be_paused,
        ),
        (
            "the sweeper ends expired break-glass",
            the_sweeper_ends_expired_break_glass,
        ),
        ("a pause left behind", a_pause_left_behind_is_lifted),
        (
            "the sweeper touches only what driftguard armed",
            the_sweeper_touches_only_what_driftguard_armed,
        ),
        ("errors", usage_and_access_errors_exit_2),
        ("policy by labels", policy_found_by_the_charts_labels),
        ("status of a Service webhook", status_of_a_service_webhook),
        (
            "status names who may act as a trusted identity",
            status_names_who_may_act_as_a_trusted_identity,
        ),
        (
            "status names constrained impersonation",
            status_names_constrained_impersonation,
        ),
        // Last: it breaks the webhook configurations.
        ("status", status_up_then_a_configuration_missing),
    ];
    let mut failures = Vec::new();
    for (name, scenario) in scenarios {
        // A panic (a helper's assert) names its scenario too.
        let _scenario = Named(name);
        if let Err(e) = scenario(&env) {
            failures.push(format!("scenario {name}: {e}"));
        }
    }
    // driftguard down: status says its URL does not answer (exit 1).
    let mut env = env;
    env.dg.stop();
    let out = env.plugin("admin", &["status"]);
    if out.code != 1 || !out.stdout.contains("NOT REACHABLE") {
        failures.push(format!("status with driftguard down: {out}"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
