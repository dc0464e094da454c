//! Least privilege, proven on the real kube-apiserver: the chart's RBAC is
//! rendered and applied, driftguard runs as the chart's ServiceAccount with
//! the chart's own flags, every path that calls the API is exercised, and the
//! apiserver's audit log then shows, for driftguard's user, that no request
//! was refused (the chart grants all it uses) and that every grant of the
//! rendered ClusterRole and Roles was used (it grants nothing more), save
//! the [`UNEXERCISED`] exceptions. Under CI=true (and everywhere else) a
//! control plane that cannot start fails the test.
//!
//! Data-driven, so that a new API path needs only its step: the grants come
//! from the rendering ([`VARIANTS`]), the flags from the rendered Deployment
//! ([`local_args`]), and the paths from [`STEPS`]. A new feature that calls
//! the API adds its step there; until it does, its new grant fails the test
//! as unused.

use driftguard_testkit::control_plane;
use driftguard_testkit::rbac_audit;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use control_plane::*;
use rbac_audit::{Grant, Request};
use serde_json::{Value, json};

/// The chart values every variant shares: every feature that needs RBAC on
/// (the Argo CD and Flux watches, break-glass for sam), a short sweep.
const COMMON_SETS: &[&str] = &[
    "watch.argocd=true",
    "watch.flux=true",
    "policy.breakGlass.allowedUsers={sam}",
    "breakGlass.sweepInterval=2s",
];

/// One Helm release of the chart, installed side by side with the others
/// (its own ServiceAccount, roles and webhooks) and held to its own grants.
struct Variant {
    release: &'static str,
    /// On top of [`COMMON_SETS`].
    sets: &'static [&'static str],
}

/// With and without the expiry sweeper: its rules overlap the watches'
/// (Applications), so only a release without it shows what the watches
/// alone use.
const VARIANTS: &[Variant] = &[
    Variant {
        release: "dg",
        sets: &["breakGlass.restoreAtExpiry=true"],
    },
    Variant {
        release: "dgw",
        // No sweeper needs no break-glass (driftguard refuses one without
        // the other), so sam's arming is dg's alone to judge: this release
        // skips the on-call group's writes.
        sets: &[
            "breakGlass.restoreAtExpiry=false",
            "policy.breakGlass.allowedUsers=null",
            "policy.trusted.groups={sre-oncall}",
        ],
    },
];

/// Grants the test cannot exercise, as (release, (verb, group, resource) in
/// [`Grant::key`]'s spelling, the reason); each must exist in its release
/// and stay unused, so a stale entry fails too.
const UNEXERCISED: &[(&str, &str, &str)] = &[(
    "dg",
    "create core/configmaps",
    "a break-glass record's first write is a server-side apply: the apiserver authorizes it as create too, but audits it as patch",
)];

/// Every scale parent of the chart's `scaleParents`, as `group/resource`,
/// with an object of that kind that Argo CD application myapp manages (the
/// `kubectl scale` target). The Rollout comes from [`ROLLOUT_CRD`].
const SCALABLE: &[(&str, &str)] = &[
    ("apps/deployments", "deployment/myapp"),
    ("apps/statefulsets", "statefulset/db"),
    ("apps/replicasets", "replicaset/rs"),
    ("core/replicationcontrollers", "replicationcontroller/rc"),
    ("argoproj.io/rollouts", "rollout.argoproj.io/ro"),
];

/// What Argo CD application myapp owns beside [`MYAPP_DEPLOYMENT`]: one
/// object per other [`SCALABLE`] kind.
const SCALABLE_OBJECTS: &str = r#"
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
  namespace: production
  annotations: {argocd.argoproj.io/tracking-id: "myapp:apps/StatefulSet:production/db"}
spec:
  replicas: 1
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: "postgres:16"}]}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: rs
  namespace: production
  annotations: {argocd.argoproj.io/tracking-id: "myapp:apps/ReplicaSet:production/rs"}
spec:
  replicas: 1
  selector: {matchLabels: {app: rs}}
  template:
    metadata: {labels: {app: rs}}
    spec: {containers: [{name: rs, image: "nginx:1.27"}]}
---
apiVersion: v1
kind: ReplicationController
metadata:
  name: rc
  namespace: production
  annotations: {argocd.argoproj.io/tracking-id: "myapp:/ReplicationController:production/rc"}
spec:
  replicas: 1
  selector: {app: rc}
  template:
    metadata: {labels: {app: rc}}
    spec: {containers: [{name: rc, image: "nginx:1.27"}]}
---
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata:
  name: ro
  namespace: production
  annotations: {argocd.argoproj.io/tracking-id: "myapp:argoproj.io/Rollout:production/ro"}
spec: {replicas: 1}
"#;

/// Argo Rollouts' Rollout, reduced to what a scale needs: its scale subresource.
const ROLLOUT_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: rollouts.argoproj.io}
spec:
  group: argoproj.io
  scope: Namespaced
  names: {kind: Rollout, listKind: RolloutList, plural: rollouts, singular: rollout}
  versions:
    - name: v1alpha1
      served: true
      storage: true
      subresources:
        scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              x-kubernetes-preserve-unknown-fields: true
              properties: {replicas: {type: integer}}
            status:
              type: object
              x-kubernetes-preserve-unknown-fields: true
              properties: {replicas: {type: integer}}
"#;

/// sam's break-glass pauses Application myapp (plugin: get and patch).
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
"#;

/// The cluster-scoped kinds the chart renders; the others go to the release
/// namespace when they name none.
const CLUSTER_SCOPED: &[&str] = &[
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
];

type Scenario = Result<(), String>;
type Step = (&'static str, fn(&Env) -> Scenario);

/// Every path on which driftguard calls the API, beyond what it does by
/// itself from the start (the watches' lists and watches; the sweeper's
/// lists at every tick). A feature that calls the API adds its step here
/// (the self-guard: a change of the release's policy ConfigMap, Deployment
/// and webhook configurations, which `render_and_apply` and `start` install).
const STEPS: &[Step] = &[
    ("a denial writes a DriftBlocked Event", denial),
    ("a scale reads the parent of each kind", scale_parents),
    (
        "the sweeper ends an expired break-glass and its Application pause",
        break_glass_ended_by_the_sweeper,
    ),
];

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

/// One variant running: its rendering, its user, its process.
struct Installed {
    release: &'static str,
    user: String,
    grants: Vec<Grant>,
    dg: Driftguard,
}

struct Env {
    plane: ControlPlane,
    installed: Vec<Installed>,
}

impl Env {
    fn kubectl(&self, user: &str, line: &str) -> Kubectl {
        self.plane
            .kubectl(user, &line.split_whitespace().collect::<Vec<_>>())
    }

    /// `{annotations, labels}` of `target` in production, as admin.
    fn metadata(&self, target: &str) -> Value {
        let out = self.kubectl(
            "admin",
            &format!("-n production get {target} -o jsonpath={{.metadata}}"),
        );
        assert!(out.ok, "{out}");
        serde_json::from_str(&out.stdout).unwrap_or_default()
    }
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .unwrap()
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn sets_of(variant: &Variant) -> Vec<&'static str> {
    COMMON_SETS.iter().chain(variant.sets).copied().collect()
}

/// The rendered Deployment's `serve` flags, as a local process takes them:
/// the listen addresses and the certificate are [`Driftguard::start`]'s,
/// the policy is the rendered one at `policy`, the log stays text (the
/// start reads its port from it), and there is nothing to drain at the
/// end. Anything else passes verbatim; a new flag naming a path in the
/// container fails here until it is mapped.
fn local_args(deployment: &Value, policy: &std::path::Path) -> Vec<String> {
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("the Deployment's container has args");
    let mut local = Vec::new();
    for arg in args.iter().filter_map(Value::as_str) {
        let flag = arg.split('=').next().unwrap_or_default();
        match flag {
            "serve" | "--listen" | "--probe-listen" | "--tls-cert" | "--tls-key"
            | "--log-format" => {}
            "--policy" => local.push(format!("--policy={}", policy.display())),
            "--shutdown-delay" => local.push("--shutdown-delay=0s".into()),
            _ => {
                assert!(
                    !arg.contains("=/"),
                    "{arg}: a path in the container; map it in local_args"
                );
                local.push(arg.to_owned());
            }
        }
    }
    local
}

/// Applies `docs` as admin (a List), the namespaced ones without a
/// namespace in the release's.
fn apply_docs(plane: &ControlPlane, docs: &[Value]) {
    let items: Vec<Value> = docs
        .iter()
        .cloned()
        .map(|mut d| {
            let kind = d["kind"].as_str().unwrap_or_default().to_owned();
            if !CLUSTER_SCOPED.contains(&kind.as_str()) && d["metadata"]["namespace"].is_null() {
                d["metadata"]["namespace"] = json!("driftguard");
            }
            d
        })
        .collect();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
    let out = plane.kubectl_stdin("admin", &["apply", "-f", "-"], Some(&list));
    assert!(out.ok, "applying the rendering: {out}");
}

/// A variant's rendering, applied but not yet running.
struct Rendered {
    release: &'static str,
    sets: Vec<&'static str>,
    user: String,
    docs: Vec<Value>,
    policy: PathBuf,
}

/// Renders `variant` and applies everything but its webhooks, before any
/// release's webhooks judge it (the chart's labels name an Argo CD
/// instance, so one release's webhook would refuse another's objects).
fn render_and_apply(plane: &mut ControlPlane, variant: &Variant) -> Rendered {
    let sets = sets_of(variant);
    let rendered = render_release(plane, variant.release, 0, &sets);
    let docs = documents(&rendered.yaml);
    apply_docs(
        plane,
        &docs
            .iter()
            .filter(|d| !is_webhooks(d))
            .cloned()
            .collect::<Vec<_>>(),
    );
    let account = docs
        .iter()
        .find(|d| d["kind"] == "ServiceAccount")
        .and_then(|d| d["metadata"]["name"].as_str())
        .expect("the chart renders a ServiceAccount");
    let user = format!("system:serviceaccount:driftguard:{account}");
    plane.add_user(&user, &[]);
    let policy = plane.dir.join(format!("{}-policy.yaml", variant.release));
    std::fs::write(&policy, &rendered.policy).unwrap();
    Rendered {
        release: variant.release,
        sets,
        user,
        docs,
        policy,
    }
}

fn is_webhooks(d: &Value) -> bool {
    d["kind"]
        .as_str()
        .is_some_and(|k| k.ends_with("WebhookConfiguration"))
}

/// Starts driftguard as the release's ServiceAccount with the rendered
/// Deployment's flags, then registers the release's webhooks at its port.
fn start(plane: &ControlPlane, r: Rendered) -> Installed {
    let deployment = r
        .docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("the chart renders a Deployment");
    let mut args = local_args(deployment, &r.policy);
    args.push(format!(
        "--kubeconfig={}",
        plane.kubeconfig(&r.user).display()
    ));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let dg = Driftguard::start(plane, &refs);
    plane.apply_admin(&render_release(plane, r.release, dg.port, &r.sets).webhooks);
    Installed {
        release: r.release,
        user: r.user,
        grants: rbac_audit::grants(&r.docs),
        dg,
    }
}

fn setup() -> Env {
    let mut plane = ControlPlane::start_audited("rbac");
    plane.create_namespaces(&["production", "argocd", "flux-system", "driftguard"]);
    plane.apply_admin(RBAC);
    plane.apply_admin(CONTROLLER_RBAC);
    plane.apply_admin(PAUSE_RBAC);
    plane.apply_crds(&[
        "argocd-application",
        "argocd-appproject",
        "flux-kustomization",
        "flux-helmrelease",
    ]);
    plane.apply_admin(ROLLOUT_CRD);
    let out = plane.kubectl(
        "admin",
        &[
            "wait",
            "--for=condition=Established",
            "crd/rollouts.argoproj.io",
            "--timeout=30s",
        ],
    );
    assert!(out.ok, "{out}");
    let out = plane.kubectl(
        "admin",
        &[
            "apply",
            "-f",
            &format!("{ROOT}/tests/data/seed/argocd-application.yaml"),
        ],
    );
    assert!(out.ok, "the seed Application: {out}");
    let rendered: Vec<Rendered> = VARIANTS
        .iter()
        .map(|v| render_and_apply(&mut plane, v))
        .collect();
    let installed = rendered.into_iter().map(|r| start(&plane, r)).collect();
    let objects = format!("{MYAPP_DEPLOYMENT}---{SCALABLE_OBJECTS}");
    let out = plane.kubectl_as_stdin(ARGO, &["apply", "-f", "-"], Some(&objects));
    assert!(out.ok, "objects as the Argo CD controller: {out}");
    plane.wait_until_webhook_denies_drift();
    Env { plane, installed }
}

fn denial(e: &Env) -> Scenario {
    let out = e.kubectl("alice", "-n production label deployment/myapp by=hand");
    ensure!(
        !out.ok && out.stderr.contains("driftguard"),
        "alice's label was not denied by driftguard: {out}"
    );
    Ok(())
}

/// driftguard reads the parent of a `…/scale` write, whatever it answers.
fn scale_parents(e: &Env) -> Scenario {
    for (parent, target) in SCALABLE {
        let out = e.kubectl(
            "admin",
            &format!("-n production scale {target} --replicas=3"),
        );
        ensure!(
            out.ok || out.stderr.contains("driftguard"),
            "scale {target} ({parent}): neither done nor judged: {out}"
        );
    }
    Ok(())
}

/// sam arms break-glass on deployment/myapp for 4s with the plugin (which
/// pauses Application myapp); the sweeper lists the armed object, lifts the
/// Application's pause (get, patch) and ends the break-glass (patch).
fn break_glass_ended_by_the_sweeper(e: &Env) -> Scenario {
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-driftguard"))
        .env("KUBECONFIG", e.plane.kubeconfig("sam"))
        .arg(format!(
            "--policy-configmap=driftguard/{}-driftguard-policy",
            VARIANTS[0].release
        ))
        .args([
            "break-glass",
            "deployment/myapp",
            "-n",
            "production",
            "--reason",
            "INC-77 rbac",
            "--for",
            "4s",
        ])
        .output()
        .unwrap();
    ensure!(
        out.status.success(),
        "arming deployment/myapp: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    poll(
        "the sweeper to end the break-glass and lift the pause",
        Duration::from_secs(60),
        || {
            let meta = e.metadata("deployment/myapp");
            let app = e.kubectl(
                "admin",
                "-n argocd get applications.argoproj.io/myapp -o jsonpath={.metadata.annotations}",
            );
            let armed = meta["labels"].get("driftguard.io/break-glass").is_some();
            let paused = app.stdout.contains("driftguard.io/break-glass-paused-for");
            if !armed && !paused {
                Ok(())
            } else {
                Err(format!("deployment {meta}; application {}", app.stdout))
            }
        },
    )
}

/// What the log holds for `i` so far: its requests, and the grants no
/// request used, less [`UNEXERCISED`].
fn observed(e: &Env, i: &Installed) -> (Vec<Request>, Vec<Grant>) {
    let requests = rbac_audit::requests_of(&e.plane.audit_events(), &i.user);
    let unused = rbac_audit::unused(&i.grants, &requests)
        .into_iter()
        .filter(|g| {
            !(UNEXERCISED.iter()).any(|(release, key, _)| *release == i.release && *key == g.key())
        })
        .cloned()
        .collect();
    (requests, unused)
}

#[test]
fn the_chart_grants_exactly_what_driftguard_uses() {
    let started = Instant::now();
    let env = setup();
    let mut failures = Vec::new();
    for (name, step) in STEPS {
        if let Err(e) = step(&env) {
            failures.push(format!("step {name:?}: {e}"));
        }
    }
    // Events are written in the background and the sweeper lists every
    // tick: wait (bounded) for the last grants to be used.
    let _ = poll(
        "every grant to be used",
        Duration::from_secs(20),
        || match env
            .installed
            .iter()
            .map(|i| observed(&env, i).1.len())
            .sum::<usize>()
        {
            0 => Ok(()),
            n => Err(format!("{n} unused")),
        },
    );
    for i in &env.installed {
        let (requests, unused) = observed(&env, i);
        println!(
            "\n{} ({}): {} requests\n{}",
            i.release,
            i.user,
            requests.len(),
            rbac_audit::table(&requests)
        );
        let refused: Vec<String> = rbac_audit::refused(&requests)
            .iter()
            .map(|r| format!("{} {}/{}", r.key(), r.namespace, r.name))
            .collect();
        if !refused.is_empty() {
            failures.push(format!(
                "{}: refused (403), the chart does not grant what driftguard uses: {refused:#?}",
                i.release
            ));
        }
        if !unused.is_empty() {
            let unused: Vec<String> = unused.iter().map(Grant::to_string).collect();
            failures.push(format!(
                "{}: granted but never used (narrow the chart, add a step to STEPS, or name it in UNEXERCISED with the reason): {unused:#?}",
                i.release
            ));
        }
        for (_, key, why) in UNEXERCISED.iter().filter(|(r, _, _)| *r == i.release) {
            let granted: Vec<&Grant> = i.grants.iter().filter(|g| g.key() == *key).collect();
            if granted.is_empty() {
                failures.push(format!(
                    "{}: UNEXERCISED names {key}, which is not granted ({why})",
                    i.release
                ));
            } else if requests.iter().any(|r| granted.iter().any(|g| g.allows(r))) {
                failures.push(format!(
                    "{}: UNEXERCISED names {key}, which was used: take it out",
                    i.release
                ));
            }
        }
    }
    if !failures.is_empty() {
        for i in &env.installed {
            failures.push(format!(
                "{}'s last log lines:\n{}",
                i.release,
                i.dg.proc.stderr_tail(10)
            ));
        }
    }
    println!("e2e_rbac took {:?}", started.elapsed());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The matching the coverage rests on, against RBAC's own semantics.
#[test]
fn grants_match_requests_as_rbac_does() {
    let docs = vec![
        json!({"kind": "ClusterRole", "metadata": {"name": "c"}, "rules": [
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["list"]},
            {"apiGroups": ["apps"], "resources": ["*/scale"], "verbs": ["get"]}]}),
        json!({"kind": "Role", "metadata": {"name": "r", "namespace": "argocd"}, "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["argocd-cm"],
             "verbs": ["watch"]}]}),
    ];
    let grants = rbac_audit::grants(&docs);
    assert_eq!(grants.len(), 3, "{grants:#?}");
    let request = |verb: &str, group: &str, resource: &str, ns: &str, name: &str| Request {
        verb: verb.into(),
        group: group.into(),
        resource: resource.into(),
        namespace: ns.into(),
        name: name.into(),
        code: 200,
        non_resource: false,
    };
    let allowed = |r: &Request| -> Vec<String> {
        grants
            .iter()
            .filter(|g| g.allows(r))
            .map(|g| g.key())
            .collect()
    };
    assert_eq!(
        allowed(&request("list", "", "secrets", "x", "")),
        ["list */*"]
    );
    assert_eq!(
        allowed(&request("get", "apps", "deployments/scale", "x", "d")),
        ["get apps/*/scale"]
    );
    assert!(allowed(&request("get", "apps", "deployments", "x", "d")).is_empty());
    assert_eq!(
        allowed(&request("watch", "", "configmaps", "argocd", "argocd-cm")),
        ["watch core/configmaps"]
    );
    assert!(allowed(&request("watch", "", "configmaps", "argocd", "other")).is_empty());
    assert!(allowed(&request("watch", "", "configmaps", "argocd", "")).is_empty());
    assert!(allowed(&request("watch", "", "configmaps", "default", "argocd-cm")).is_empty());
    let events = vec![
        json!({"auditID": "1", "stage": "ResponseStarted", "verb": "watch",
               "user": {"username": "u"}, "responseStatus": {"code": 200},
               "objectRef": {"resource": "configmaps", "namespace": "argocd", "name": "argocd-cm"}}),
        json!({"auditID": "1", "stage": "ResponseComplete", "verb": "watch",
               "user": {"username": "u"}, "responseStatus": {"code": 200},
               "objectRef": {"resource": "configmaps", "namespace": "argocd", "name": "argocd-cm"}}),
        json!({"auditID": "2", "stage": "ResponseComplete", "verb": "get",
               "user": {"username": "u"}, "responseStatus": {"code": 403},
               "objectRef": {"resource": "pods", "namespace": "x", "name": "p"}}),
        json!({"auditID": "3", "stage": "ResponseComplete", "verb": "get",
               "user": {"username": "someone-else"}, "responseStatus": {"code": 200},
               "objectRef": {"resource": "pods", "namespace": "x", "name": "p"}}),
    ];
    let requests = rbac_audit::requests_of(&events, "u");
    assert_eq!(requests.len(), 2);
    assert_eq!(rbac_audit::refused(&requests).len(), 1);
    let unused: Vec<String> = rbac_audit::unused(&grants, &requests)
        .iter()
        .map(|g| g.key())
        .collect();
    assert_eq!(unused, ["get apps/*/scale", "list */*"]);
}
