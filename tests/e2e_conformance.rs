//! A kubectl conformance matrix on a real kube-apiserver and etcd (issue 19).
//!
//! For a GitOps-managed Deployment, StatefulSet, Service, ConfigMap,
//! NetworkPolicy, custom resource with a scale subresource, Namespace and
//! Endpoints, every mutating kubectl command a person uses is run as alice
//! (group developers: neither a controller nor a trusted identity, and not
//! allowed to break glass). The invariant decides each verdict: the end state
//! may differ from the start state only in fields the policy ignores, and
//! never in a decision input. So every cell checks three things: the verdict
//! kubectl reports is the one the invariant gives for what the command
//! touches; a refused command left the object exactly as it was (its
//! resourceVersion included); an allowed one changed nothing but ignored
//! fields (computed from the objects before and after, not from the table).
//!
//! The matrix runs under the embedded default policy and under a policy that
//! ignores every label and annotation, each on its own control plane (the two
//! tests run side by side). A control plane that cannot start fails the test.

use driftguard_testkit::control_plane;

use std::collections::BTreeSet;
use std::fmt;
use std::time::{Duration, Instant};

use control_plane::*;
use serde_json::{Value, json};

const NS: &str = "conformance";
const TRACKED_NS: &str = "conformance-tracked";
const TRACKING: &str = "argocd.argoproj.io/tracking-id";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
const LAST_APPLIED_PTR: &str =
    "/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration";
const RESTARTED_AT_PTR: &str =
    "/spec/template/metadata/annotations/kubectl.kubernetes.io~1restartedAt";

/// Labels and annotations the decision reads (README, "What a write can never
/// change by hand"), checked as labels and as annotations: a manual change to
/// one is drift under every policy.
const INPUT_KEYS: [&str; 16] = [
    TRACKING,
    "app.kubernetes.io/instance",
    "meta.helm.sh/release-name",
    "kustomize.toolkit.fluxcd.io/name",
    "kustomize.toolkit.fluxcd.io/namespace",
    "kustomize.toolkit.fluxcd.io/reconcile",
    "kustomize.toolkit.fluxcd.io/ssa",
    "kustomize.toolkit.fluxcd.io/prune",
    "kustomize.toolkit.fluxcd.io/force",
    "helm.toolkit.fluxcd.io/name",
    "helm.toolkit.fluxcd.io/namespace",
    "helm.toolkit.fluxcd.io/driftDetection",
    "argocd.argoproj.io/sync-options",
    "argocd.argoproj.io/compare-options",
    "argocd.argoproj.io/ignore-differences",
    // Every driftguard.io/ key (mode, break-glass, the drift record) is an
    // input too: see `is_input`.
    "driftguard.io/mode",
];

/// The second policy: every label and annotation of every kind ignored. The
/// other keys keep the embedded defaults.
const IGNORE_META_POLICY: &str = "ignoreDifferences:\n  - {group: '*', kind: '*', jsonPointers: [/metadata/labels, /metadata/annotations]}\n";

/// A custom resource with the status and scale subresources.
const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      subresources:
        status: {}
        scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                replicas: {type: integer}
                color: {type: string}
            status:
              type: object
              properties:
                replicas: {type: integer}
"#;

/// alice may run every command of the matrix, so that only driftguard stands
/// between her and drift; driftguard may read a Widget, the parent of its
/// `scale` writes.
const CONFORMANCE_RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: conformance-editor}
rules:
  - apiGroups: ["", apps, networking.k8s.io, autoscaling, example.com]
    resources: [namespaces, namespaces/status, endpoints, configmaps, services, services/status,
                deployments, deployments/status, deployments/scale, statefulsets, statefulsets/status,
                statefulsets/scale, replicasets, controllerrevisions, networkpolicies,
                horizontalpodautoscalers, widgets, widgets/status, widgets/scale]
    verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: conformance-editors}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: conformance-editor}
subjects:
  - {kind: Group, name: developers, apiGroup: rbac.authorization.k8s.io}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: driftguard-widgets}
rules:
  - apiGroups: [example.com]
    resources: [widgets]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: driftguard-widgets}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: driftguard-widgets}
subjects:
  - {kind: User, name: driftguard, apiGroup: rbac.authorization.k8s.io}
"#;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Policy {
    /// `src/policy/default-policy.yaml`: ignores only `kubectl rollout
    /// restart`'s annotation on a workload's pod template.
    Default,
    /// [`IGNORE_META_POLICY`].
    IgnoreMeta,
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Policy::Default => "default policy",
            Policy::IgnoreMeta => "labels and annotations ignored",
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Manager {
    /// Written by the Argo CD application controller (client-side apply,
    /// field manager `argocd-controller`), with a tracking annotation.
    Argo,
    /// Written by kustomize-controller (server-side apply), with Flux labels.
    Flux,
}

/// What a command changes in the object, should it go through.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Touch {
    /// No field of the object (an HPA beside it, a status the apiserver keeps
    /// apart, metadata a status strategy drops).
    Nothing,
    /// A field no policy here ignores.
    Spec,
    /// Labels or annotations that are not decision inputs, written by one of
    /// kubectl's own field managers (every command here but one). On a Flux
    /// object kustomize-controller takes over and removes what such a manager
    /// wrote on its next reconcile, so no ignore rule hides it there
    /// (docs/gitops.md, "What kubectl writes, Flux removes").
    Meta,
    /// The same, written with a field manager of its own, which Flux keeps.
    OwnMeta,
    /// A decision input: never ignored.
    Input,
    /// The last-applied record. A decision input on an Argo CD object (Argo
    /// CD's client-side apply merges three ways against it) and on a Flux
    /// Kustomization's (kustomize-controller removes it at its next apply,
    /// found by tests/e2e_oracle.rs).
    LastApplied,
    /// Only `kubectl.kubernetes.io/restartedAt` on the pod template.
    RestartedAt,
    /// The object is deleted.
    Gone,
    /// A server-side apply that changes a field another manager owns: the
    /// apiserver refuses it with a conflict before any webhook is called.
    Conflicts,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Verdict {
    Allowed,
    /// Refused by driftguard (its message names it).
    Denied,
    /// Refused by the apiserver: a server-side apply conflict.
    Conflict,
    /// kubectl failed for another reason: always a mistake in the test.
    Failed,
}

impl Verdict {
    fn letter(self) -> char {
        match self {
            Verdict::Allowed => 'A',
            Verdict::Denied => 'D',
            Verdict::Conflict => 'C',
            Verdict::Failed => 'F',
        }
    }
}

/// The verdict the invariant gives a write by alice that touches `touches`.
fn expected(policy: Policy, manager: Manager, touches: &[Touch]) -> Verdict {
    if touches.contains(&Touch::Conflicts) {
        return Verdict::Conflict;
    }
    let ignored = |t: &Touch| match t {
        Touch::Nothing => true,
        Touch::Meta => policy == Policy::IgnoreMeta && manager == Manager::Argo,
        Touch::OwnMeta => policy == Policy::IgnoreMeta,
        Touch::RestartedAt => policy == Policy::Default,
        Touch::LastApplied => false,
        Touch::Spec | Touch::Input | Touch::Gone | Touch::Conflicts => false,
    };
    if touches.iter().all(ignored) {
        Verdict::Allowed
    } else {
        Verdict::Denied
    }
}

/// One managed object, and what the commands need to know about its kind.
struct Object {
    /// Its column in the matrix.
    column: &'static str,
    kind: &'static str,
    /// `resource/name`, as kubectl takes it.
    target: &'static str,
    manager: Manager,
    /// What its GitOps tool applied.
    manifest: Value,
    /// A field in the manifest that no policy ignores, and another value.
    /// A Namespace has no field a write may change, so its tracking
    /// annotation stands in (a decision input).
    field: (&'static str, Value),
    field_touch: Touch,
    /// A merge patch changing another field of that kind.
    merge: Value,
    /// A strategic merge patch changing a field (none for custom resources).
    strategic: Option<Value>,
    /// A patch of the status subresource that changes only status, and what
    /// the kind's status strategy keeps of labels and annotations sent with it.
    status: Option<StatusWrites>,
}

struct StatusWrites {
    patch: Value,
    keeps_labels: bool,
    keeps_annotations: bool,
}

enum Run {
    /// kubectl arguments (after `-n conformance`).
    Args(Vec<String>),
    /// `kubectl edit`, as `get -o json`, set `pointer` to a value, `replace -f -`.
    Edit(String, Value),
    /// `kubectl apply -f -` of a manifest, with flags.
    Apply(Value, Vec<&'static str>),
}

/// One row of an object's column. The two expectations follow from
/// `touches` by [`expected`]; `why` says what the command changes.
struct Cell {
    command: String,
    run: Run,
    touches: Vec<Touch>,
    expect_default: Verdict,
    expect_ignore_meta: Verdict,
    why: &'static str,
    /// As Argo CD, before the cell (and undone after it).
    setup: Option<(&'static str, &'static str)>,
    /// `kubectl autoscale`: the HPA must exist afterwards if allowed, and
    /// not if refused.
    hpa: bool,
}

/// The rows of one object's column, built in order.
struct Table<'a> {
    o: &'a Object,
    cells: Vec<Cell>,
}

impl Table<'_> {
    /// A label or annotation key no other cell uses.
    fn key(&self) -> String {
        format!("by-hand-{}", self.cells.len())
    }

    fn push(&mut self, command: &str, run: Run, touches: &[Touch], why: &'static str) -> &mut Cell {
        self.cells.push(Cell {
            command: command.to_owned(),
            run,
            touches: touches.to_vec(),
            expect_default: expected(Policy::Default, self.o.manager, touches),
            expect_ignore_meta: expected(Policy::IgnoreMeta, self.o.manager, touches),
            why,
            setup: None,
            hpa: false,
        });
        self.cells.last_mut().unwrap()
    }

    /// `line` split on whitespace; `{}` is the object, `{key}` [`Table::key`].
    fn kubectl(
        &mut self,
        command: &str,
        line: &str,
        touches: &[Touch],
        why: &'static str,
    ) -> &mut Cell {
        let key = self.key();
        let args = line
            .split_whitespace()
            .map(|a| a.replace("{}", self.o.target).replace("{key}", &key))
            .collect();
        self.push(command, Run::Args(args), touches, why)
    }

    /// `kubectl patch` with a JSON body (the key substituted).
    fn patch(
        &mut self,
        command: &str,
        flags: &str,
        body: &Value,
        touches: &[Touch],
        why: &'static str,
    ) {
        let body = body.to_string().replace("{key}", &self.key());
        let mut args = vec!["patch".to_owned(), self.o.target.to_owned()];
        args.extend(flags.split_whitespace().map(str::to_owned));
        args.extend(["-p".to_owned(), body]);
        self.push(command, Run::Args(args), touches, why);
    }
}

fn cells(o: &Object) -> Vec<Cell> {
    use Touch::*;
    let mut t = Table {
        o,
        cells: Vec::new(),
    };
    let f = o.field_touch;
    let (pointer, value) = (o.field.0, o.field.1.clone());
    let key = |t: &Table| t.key();

    // kubectl edit.
    t.push(
        "edit (field)",
        Run::Edit(pointer.into(), value.clone()),
        &[f, LastApplied],
        "the field, and the last-applied record replace rewrites where it exists",
    );
    let k = key(&t);
    t.push(
        "edit (label)",
        Run::Edit(format!("/metadata/labels/{k}"), json!("yes")),
        &[Meta, LastApplied],
        "a label, and the last-applied record replace rewrites where it exists",
    );

    // kubectl patch, each type.
    t.patch(
        "patch json (field)",
        "--type=json",
        &json!([{"op": "replace", "path": pointer, "value": value}]),
        &[f],
        "the field",
    );
    t.patch(
        "patch json (label)",
        "--type=json",
        &json!([{"op": "add", "path": "/metadata/labels/{key}", "value": "yes"}]),
        &[Meta],
        "a label",
    );
    t.patch(
        "patch merge (field)",
        "--type=merge",
        &o.merge,
        &[f],
        "a field",
    );
    t.patch(
        "patch merge (annotation)",
        "--type=merge",
        &json!({"metadata": {"annotations": {"{key}": "yes"}}}),
        &[Meta],
        "an annotation",
    );
    if let Some(strategic) = &o.strategic {
        t.patch("patch strategic (field)", "", strategic, &[f], "a field");
        t.patch(
            "patch strategic (label)",
            "",
            &json!({"metadata": {"labels": {"{key}": "yes"}}}),
            &[Meta],
            "a label",
        );
    }

    // kubectl apply, client-side and server-side.
    let mut changed = o.manifest.clone();
    set(&mut changed, pointer, value.clone());
    t.push(
        "apply (field)",
        Run::Apply(changed.clone(), vec![]),
        &[f, LastApplied],
        "the field, and the last-applied record",
    );
    let mut labelled = o.manifest.clone();
    set(
        &mut labelled,
        &format!("/metadata/labels/{}", key(&t)),
        json!("yes"),
    );
    t.push(
        "apply (label)",
        Run::Apply(labelled, vec![]),
        &[Meta, LastApplied],
        "a label, and the last-applied record",
    );
    let mut partial = json!({"apiVersion": o.manifest["apiVersion"], "kind": o.kind,
        "metadata": {"name": o.manifest["metadata"]["name"], "labels": {key(&t): "yes"}}});
    if let Some(ns) = o.manifest["metadata"].get("namespace") {
        partial["metadata"]["namespace"] = ns.clone();
    }
    t.push(
        "apply --server-side (label)",
        Run::Apply(partial, vec!["--server-side"]),
        &[Meta, LastApplied],
        "a label, and the last-applied record, which the apiserver keeps in step with kubectl's server-side apply where it exists",
    );
    match o.manager {
        // The apiserver forgives kubectl's server-side apply the conflicts on
        // fields the last-applied record lists (the upgrade from client-side
        // apply), so on a client-side-applied object the write goes on.
        Manager::Argo => t.push(
            "apply --server-side (field)",
            Run::Apply(changed.clone(), vec!["--server-side"]),
            &[f, LastApplied],
            "the field (conflicts on last-applied fields are forgiven), and the last-applied record",
        ),
        Manager::Flux => t.push(
            "apply --server-side (field)",
            Run::Apply(changed.clone(), vec!["--server-side"]),
            &[Conflicts],
            "kustomize-controller owns the field: a conflict, before any webhook",
        ),
    };
    t.push(
        "apply --server-side --force-conflicts",
        Run::Apply(changed, vec!["--server-side", "--force-conflicts"]),
        &[f, LastApplied],
        "the field, and the last-applied record",
    );

    // kubectl label and annotate.
    t.kubectl("label", "label {} {key}=yes", &[Meta], "a label");
    t.kubectl(
        "annotate",
        "annotate {} {key}=yes",
        &[Meta],
        "an annotation",
    );
    t.kubectl(
        "label --field-manager=mesh-injector",
        "label {} {key}=yes --field-manager=mesh-injector",
        &[OwnMeta],
        "a label written with a field manager of its own",
    );
    match o.manager {
        Manager::Argo => t.kubectl(
            "untrack",
            "annotate {} argocd.argoproj.io/tracking-id-",
            &[Input],
            "removes the tracking annotation",
        ),
        Manager::Flux => t.kubectl(
            "untrack",
            "label {} kustomize.toolkit.fluxcd.io/name-",
            &[Input],
            "removes the Flux ownership label",
        ),
    };
    t.kubectl(
        "annotate driftguard.io/mode=audit",
        "annotate {} driftguard.io/mode=audit",
        &[Input],
        "the mode",
    );
    t.kubectl(
        "label ...fluxcd.io/prune=disabled",
        "label {} kustomize.toolkit.fluxcd.io/prune=disabled",
        &[Input],
        "a Flux knob",
    );
    t.kubectl(
        "annotate ...argoproj.io/sync-options",
        "annotate {} argocd.argoproj.io/sync-options=Prune=false",
        &[Input],
        "an Argo CD knob",
    );
    if o.kind == "Namespace" {
        t.kubectl(
            "label driftguard.io/ignore=true",
            "label {} driftguard.io/ignore=true",
            &[Input],
            "would exempt every object in the namespace",
        );
    }

    // Scale.
    if matches!(o.kind, "Deployment" | "StatefulSet" | "Widget") {
        t.kubectl("scale", "scale {} --replicas=5", &[Spec], "/spec/replicas");
        t.kubectl(
            "scale --replicas=0",
            "scale {} --replicas=0",
            &[Spec],
            "/spec/replicas (a Scale without spec.replicas)",
        );
        t.patch(
            "patch --subresource=scale",
            "--subresource=scale --type=merge",
            &json!({"spec": {"replicas": 4}}),
            &[Spec],
            "/spec/replicas",
        );
        t.kubectl(
            "autoscale",
            "autoscale {} --min=1 --max=3 --cpu-percent=80",
            &[Spec],
            "creates an HPA, whose controller would write /spec/replicas: judged as that scale write (issue 20)",
        )
        .hpa = true;
    }

    // kubectl set.
    if matches!(o.kind, "Deployment" | "StatefulSet") {
        let container = o.manifest["spec"]["template"]["spec"]["containers"][0]["name"]
            .as_str()
            .unwrap();
        let line = format!("set image {{}} {container}=busybox:1.37");
        t.kubectl("set image", &line, &[Spec], "the image");
        t.kubectl("set env", "set env {} FOO=bar", &[Spec], "the environment");
        t.kubectl(
            "set resources",
            "set resources {} --limits=cpu=200m",
            &[Spec],
            "the resources",
        );
        t.kubectl(
            "set serviceaccount",
            "set serviceaccount {} robot",
            &[Spec],
            "the service account",
        );
    }
    if o.kind == "Service" {
        t.kubectl(
            "set selector",
            "set selector {} app=other",
            &[Spec],
            "the selector",
        );
    }

    // kubectl rollout.
    if matches!(o.kind, "Deployment" | "StatefulSet") {
        t.kubectl(
            "rollout restart",
            "rollout restart {}",
            &[RestartedAt],
            "only restartedAt on the pod template",
        );
        if o.kind == "Deployment" {
            t.kubectl(
                "rollout undo",
                "rollout undo {} --to-revision=1",
                &[Spec, Input],
                "revision 1's template, and its annotations for the Deployment's: the tracking id goes",
            );
            t.kubectl("rollout pause", "rollout pause {}", &[Spec], "/spec/paused");
            t.kubectl(
                "rollout resume",
                "rollout resume {}",
                &[Spec],
                "/spec/paused",
            )
            .setup = Some(("rollout pause", "rollout resume"));
        } else {
            t.kubectl(
                "rollout undo",
                "rollout undo {} --to-revision=1",
                &[Spec],
                "revision 1's template",
            );
        }
    }

    // The status subresource.
    if let Some(status) = &o.status {
        t.patch(
            "patch --subresource=status",
            "--subresource=status --type=merge",
            &status.patch,
            &[Nothing],
            "only status, which is never compared",
        );
        let (touch, why) = if status.keeps_annotations {
            (
                Meta,
                "an annotation, which this kind's status strategy keeps",
            )
        } else {
            (Nothing, "the status strategy drops the annotation")
        };
        t.patch(
            "patch --subresource=status (annotation)",
            "--subresource=status --type=merge",
            &json!({"metadata": {"annotations": {"{key}": "yes"}}}),
            &[touch],
            why,
        );
        let (touch, why) = if status.keeps_labels {
            (Meta, "a label, which this kind's status strategy keeps")
        } else {
            (Nothing, "the status strategy drops the label")
        };
        t.patch(
            "patch --subresource=status (label)",
            "--subresource=status --type=merge",
            &json!({"metadata": {"labels": {"{key}": "yes"}}}),
            &[touch],
            why,
        );
        let (touch, why) = if status.keeps_annotations {
            (Input, "the mode, which this kind's status strategy keeps")
        } else {
            (Nothing, "the status strategy drops the mode annotation")
        };
        t.patch(
            "patch --subresource=status (mode)",
            "--subresource=status --type=merge",
            &json!({"metadata": {"annotations": {"driftguard.io/mode": "audit"}}}),
            &[touch],
            why,
        );
    }

    t.kubectl(
        "delete",
        "delete {} --wait=false",
        &[Gone],
        "only the GitOps tool prunes",
    );
    t.cells
}

fn tracking(group_kind: &str, ns_name: &str) -> Value {
    json!({ TRACKING: format!("myapp:{group_kind}:{ns_name}") })
}

fn objects() -> Vec<Object> {
    let workload = |kind: &str, name: &str, container: &str, image: &str, replicas: u32| {
        let mut m = json!({
            "apiVersion": "apps/v1", "kind": kind,
            "metadata": {"name": name, "namespace": NS, "labels": {"app": name},
                         "annotations": tracking(&format!("apps/{kind}"), &format!("{NS}/{name}"))},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": container, "image": image}]}}}
        });
        if kind == "StatefulSet" {
            m["spec"]["serviceName"] = json!(name);
        }
        m
    };
    let workload_status = || StatusWrites {
        patch: json!({"status": {"observedGeneration": 7}}),
        keeps_labels: false,
        keeps_annotations: true,
    };
    let condition = json!({"status": {"conditions": [{"type": "ByHand", "status": "True",
        "reason": "ByHand", "message": "by hand", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    let image = "/spec/template/spec/containers/0/image";
    vec![
        Object {
            column: "Deploy",
            kind: "Deployment",
            target: "deployment/web",
            manager: Manager::Argo,
            manifest: workload("Deployment", "web", "app", "nginx:1.27", 2),
            field: (image, json!("nginx:1.28")),
            field_touch: Touch::Spec,
            merge: json!({"spec": {"minReadySeconds": 5}}),
            strategic: Some(
                json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.29"}]}}}}),
            ),
            // A Deployment's status strategy keeps annotations, resets labels.
            status: Some(workload_status()),
        },
        Object {
            column: "STS",
            kind: "StatefulSet",
            target: "statefulset/db",
            manager: Manager::Argo,
            manifest: workload("StatefulSet", "db", "db", "postgres:16", 1),
            field: (image, json!("postgres:17")),
            field_touch: Touch::Spec,
            merge: json!({"spec": {"minReadySeconds": 5}}),
            strategic: Some(
                json!({"spec": {"template": {"spec": {"containers": [{"name": "db", "image": "postgres:18"}]}}}}),
            ),
            status: Some(StatusWrites {
                keeps_labels: true,
                ..workload_status()
            }),
        },
        Object {
            column: "Svc",
            kind: "Service",
            target: "service/web",
            manager: Manager::Argo,
            manifest: json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "web", "namespace": NS, "labels": {"app": "web"},
                             "annotations": tracking("/Service", &format!("{NS}/web"))},
                "spec": {"selector": {"app": "web"}, "sessionAffinity": "None",
                         "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
            }),
            field: ("/spec/sessionAffinity", json!("ClientIP")),
            field_touch: Touch::Spec,
            merge: json!({"spec": {"publishNotReadyAddresses": true}}),
            strategic: Some(
                json!({"spec": {"ports": [{"name": "metrics", "port": 9090, "targetPort": 9090}]}}),
            ),
            status: Some(StatusWrites {
                patch: condition.clone(),
                keeps_labels: true,
                keeps_annotations: true,
            }),
        },
        Object {
            column: "CM",
            kind: "ConfigMap",
            target: "configmap/settings",
            manager: Manager::Argo,
            manifest: json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings", "namespace": NS, "labels": {"app": "web"},
                             "annotations": tracking("/ConfigMap", &format!("{NS}/settings"))},
                "data": {"LOG_LEVEL": "info"}
            }),
            field: ("/data/LOG_LEVEL", json!("debug")),
            field_touch: Touch::Spec,
            merge: json!({"data": {"FEATURE": "on"}}),
            strategic: Some(json!({"data": {"LOG_LEVEL": "trace"}})),
            status: None,
        },
        Object {
            column: "NetPol",
            kind: "NetworkPolicy",
            target: "networkpolicy/web",
            manager: Manager::Argo,
            manifest: json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": "web", "namespace": NS, "labels": {"app": "web"},
                             "annotations": tracking("networking.k8s.io/NetworkPolicy", &format!("{NS}/web"))},
                "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"]}
            }),
            field: ("/spec/podSelector/matchLabels/app", json!("db")),
            field_touch: Touch::Spec,
            merge: json!({"spec": {"policyTypes": ["Ingress", "Egress"]}}),
            strategic: Some(json!({"spec": {"ingress": [{"from": [{"podSelector": {}}]}]}})),
            status: None,
        },
        Object {
            column: "Widget",
            kind: "Widget",
            target: "widget/w",
            manager: Manager::Argo,
            manifest: json!({
                "apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"name": "w", "namespace": NS, "labels": {"app": "web"},
                             "annotations": tracking("example.com/Widget", &format!("{NS}/w"))},
                "spec": {"replicas": 1, "color": "blue"}
            }),
            field: ("/spec/color", json!("red")),
            field_touch: Touch::Spec,
            merge: json!({"spec": {"color": "green"}}),
            // Custom resources take no strategic merge patch.
            strategic: None,
            // A custom resource's status strategy keeps no metadata change.
            status: Some(StatusWrites {
                patch: json!({"status": {"replicas": 3}}),
                keeps_labels: false,
                keeps_annotations: false,
            }),
        },
        Object {
            column: "NS",
            kind: "Namespace",
            target: "namespace/conformance-tracked",
            manager: Manager::Argo,
            manifest: json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": TRACKED_NS, "labels": {"team": "web"},
                             "annotations": tracking("/Namespace", TRACKED_NS)}
            }),
            field: (
                "/metadata/annotations/argocd.argoproj.io~1tracking-id",
                json!(format!("other:/Namespace:{TRACKED_NS}")),
            ),
            field_touch: Touch::Input,
            merge: json!({"metadata": {"annotations": {TRACKING: format!("other:/Namespace:{TRACKED_NS}")}}}),
            strategic: Some(
                json!({"metadata": {"annotations": {TRACKING: format!("other:/Namespace:{TRACKED_NS}")}}}),
            ),
            status: Some(StatusWrites {
                patch: condition,
                keeps_labels: true,
                keeps_annotations: true,
            }),
        },
        Object {
            column: "EP",
            kind: "Endpoints",
            target: "endpoints/external-db",
            manager: Manager::Flux,
            manifest: json!({
                "apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": "external-db", "namespace": NS,
                             "labels": {"app": "db", "kustomize.toolkit.fluxcd.io/name": "apps",
                                        "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}},
                "subsets": [{"addresses": [{"ip": "10.1.2.3"}], "ports": [{"port": 5432}]}]
            }),
            field: ("/subsets/0/addresses/0/ip", json!("10.6.6.6")),
            field_touch: Touch::Spec,
            merge: json!({"subsets": [{"addresses": [{"ip": "10.7.7.7"}], "ports": [{"port": 5432}]}]}),
            strategic: Some(
                json!({"subsets": [{"addresses": [{"ip": "10.8.8.8"}], "ports": [{"port": 5432}]}]}),
            ),
            status: None,
        },
    ]
}

/// Sets `pointer` in `v`, creating objects on the way.
fn set(v: &mut Value, pointer: &str, value: Value) {
    let mut at = v;
    let mut parts: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|p| p.replace("~1", "/").replace("~0", "~"))
        .collect();
    let last = parts.pop().unwrap();
    for p in parts {
        at = match at {
            Value::Array(items) => &mut items[p.parse::<usize>().unwrap()],
            other => other
                .as_object_mut()
                .unwrap()
                .entry(p)
                .or_insert_with(|| json!({})),
        };
    }
    match at {
        Value::Array(items) => items[last.parse::<usize>().unwrap()] = value,
        other => {
            other.as_object_mut().unwrap().insert(last, value);
        }
    }
}

/// The object as a person would compare it: without status and what the
/// apiserver writes, the last-applied record parsed.
fn state(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(map) = v.as_object_mut() {
        map.remove("status");
    }
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "resourceVersion",
            "managedFields",
            "generation",
            "uid",
            "creationTimestamp",
            "selfLink",
        ] {
            meta.remove(k);
        }
        if let Some(la) = meta
            .get_mut("annotations")
            .and_then(|a| a.get_mut(LAST_APPLIED))
            && let Some(parsed) = la.as_str().and_then(|s| serde_json::from_str(s).ok())
        {
            *la = parsed;
        }
    }
    v
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// RFC 6901 pointers of every leaf that differs; `Null` stands for absent, and
/// an absent map equals an empty one. Lists of equal length are compared item
/// by item, others whole; the last-applied record is one leaf.
fn diff(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    let empty = serde_json::Map::new();
    let as_map = |v: &Value| match v {
        Value::Object(m) => Some(m.clone()),
        Value::Null => Some(empty.clone()),
        _ => None,
    };
    if path == LAST_APPLIED_PTR {
        if a != b {
            out.push(path.to_owned());
        }
        return;
    }
    match (a, b) {
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff(p, q, &format!("{path}/{i}"), out);
            }
        }
        (Value::Object(_), _) | (_, Value::Object(_))
            if as_map(a).is_some() && as_map(b).is_some() =>
        {
            let (x, y) = (as_map(a).unwrap(), as_map(b).unwrap());
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let (p, q) = (
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                );
                diff(p, q, &format!("{path}/{}", escape(k)), out);
            }
        }
        _ if a != b => out.push(path.to_owned()),
        _ => {}
    }
}

fn is_input(path: &str) -> bool {
    if path.starts_with("/metadata/ownerReferences") {
        return true;
    }
    ["/metadata/labels/", "/metadata/annotations/"]
        .iter()
        .any(|map| {
            path.strip_prefix(map).is_some_and(|key| {
                key.starts_with("driftguard.io~1") || INPUT_KEYS.iter().any(|k| escape(k) == key)
            })
        })
}

/// Whether a manual write may change `path` of `o` under `policy`: the
/// invariant, written out independently of the table.
fn may_change(policy: Policy, o: &Object, path: &str) -> bool {
    if path == LAST_APPLIED_PTR {
        return o.manager == Manager::Flux;
    }
    if is_input(path) {
        return false;
    }
    match policy {
        Policy::Default => {
            path == RESTARTED_AT_PTR && matches!(o.kind, "Deployment" | "StatefulSet" | "DaemonSet")
        }
        Policy::IgnoreMeta => {
            path.starts_with("/metadata/labels/") || path.starts_with("/metadata/annotations/")
        }
    }
}

/// kubectl as the GitOps tool, the arguments split on whitespace.
fn as_tool(plane: &ControlPlane, o: &Object, line: &str) -> Kubectl {
    let who = match o.manager {
        Manager::Argo => ARGO,
        Manager::Flux => FLUX,
    };
    let mut args = vec!["-n", NS];
    args.extend(line.split_whitespace());
    plane.kubectl_as(who, &args)
}

fn get(plane: &ControlPlane, user: &str, o: &Object) -> Result<Value, String> {
    let out = plane.kubectl(user, &["-n", NS, "get", o.target, "-o", "json"]);
    if !out.ok {
        return Err(format!("get {}: {out}", o.target));
    }
    serde_json::from_str(&out.stdout).map_err(|e| format!("get {}: {e}", o.target))
}

fn resource_version(v: &Value) -> &str {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
}

fn run(plane: &ControlPlane, o: &Object, run: &Run) -> Kubectl {
    let with_ns = |args: &[&str]| {
        let mut all = vec!["-n", NS];
        all.extend(args);
        all.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    match run {
        Run::Args(args) => {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let all = with_ns(&args);
            plane.kubectl("alice", &all.iter().map(String::as_str).collect::<Vec<_>>())
        }
        Run::Edit(pointer, value) => {
            let mut live = match get(plane, "alice", o) {
                Ok(v) => v,
                Err(e) => {
                    return Kubectl {
                        ok: false,
                        stdout: String::new(),
                        stderr: e,
                    };
                }
            };
            set(&mut live, pointer, value.clone());
            plane.kubectl_stdin(
                "alice",
                &["-n", NS, "replace", "-f", "-"],
                Some(&live.to_string()),
            )
        }
        Run::Apply(manifest, flags) => {
            let mut args = vec!["-n", NS, "apply"];
            args.extend(flags);
            args.extend(["-f", "-"]);
            plane.kubectl_stdin("alice", &args, Some(&manifest.to_string()))
        }
    }
}

fn observed(out: &Kubectl) -> Verdict {
    if out.ok {
        Verdict::Allowed
    } else if out.stderr.contains("driftguard") {
        Verdict::Denied
    } else if out.stderr.contains("Apply failed with") && out.stderr.contains("conflict") {
        Verdict::Conflict
    } else {
        Verdict::Failed
    }
}

struct Outcome {
    command: String,
    expected: Verdict,
    observed: Verdict,
    /// What breaks the invariant or the table, if anything.
    problems: Vec<String>,
}

/// Every cell of `o`'s column, in order; each starts from the state the
/// previous one left.
fn column(plane: &ControlPlane, policy: Policy, o: &Object) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    let mut before = get(plane, "admin", o);
    for cell in cells(o) {
        let expect = match policy {
            Policy::Default => cell.expect_default,
            Policy::IgnoreMeta => cell.expect_ignore_meta,
        };
        let mut problems = Vec::new();
        if let Some((setup, _)) = cell.setup {
            let out = as_tool(plane, o, &format!("{setup} {}", o.target));
            assert!(out.ok, "{} {setup} as its GitOps tool: {out}", o.target);
            before = get(plane, "admin", o);
        }
        let out = run(plane, o, &cell.run);
        let verdict = observed(&out);
        let after = get(plane, "admin", o);
        if verdict != expect {
            problems.push(format!(
                "expected {expect:?} ({:?}: {}), observed {verdict:?}: {out}",
                cell.touches, cell.why
            ));
        }
        match (&before, &after) {
            (Err(e), _) | (_, Err(e)) => problems.push(e.clone()),
            (Ok(b), Ok(a)) => match verdict {
                Verdict::Allowed => {
                    let mut changed = Vec::new();
                    diff(&state(b), &state(a), "", &mut changed);
                    let drift: Vec<_> = changed
                        .iter()
                        .filter(|p| !may_change(policy, o, p))
                        .collect();
                    if !drift.is_empty() {
                        problems.push(format!(
                            "allowed, and changed what the policy does not ignore: {drift:?}"
                        ));
                    }
                    // The table's account of the effect, checked both ways: a
                    // cell that touches nothing leaves the object as it was,
                    // any other one really changed it.
                    let nothing = cell.touches.iter().all(|t| *t == Touch::Nothing);
                    if nothing != changed.is_empty() {
                        problems.push(format!(
                            "the table says it touches {:?}, and it changed {changed:?}",
                            cell.touches
                        ));
                    }
                }
                _ if resource_version(b) != resource_version(a) || state(b) != state(a) => {
                    let mut changed = Vec::new();
                    diff(&state(b), &state(a), "", &mut changed);
                    problems.push(format!(
                        "refused, and the object changed (resourceVersion {} -> {}): {changed:?}",
                        resource_version(b),
                        resource_version(a)
                    ));
                }
                _ => {}
            },
        }
        if cell.hpa && verdict == Verdict::Allowed {
            let name = o.target.split('/').nth(1).unwrap();
            let out = plane.kubectl(
                "admin",
                &[
                    "-n",
                    NS,
                    "get",
                    &format!("hpa/{name}"),
                    "-o",
                    "jsonpath={.spec.scaleTargetRef.kind}/{.spec.scaleTargetRef.name}",
                ],
            );
            if out.stdout != format!("{}/{name}", o.kind) {
                problems.push(format!("no HPA for {}: {out}", o.target));
            }
        }
        if cell.hpa && verdict == Verdict::Denied {
            let name = o.target.split('/').nth(1).unwrap();
            let out = plane.kubectl("admin", &["-n", NS, "get", &format!("hpa/{name}")]);
            if out.ok {
                problems.push(format!(
                    "refused, and an HPA for {} exists: {out}",
                    o.target
                ));
            }
        }
        before = after;
        if let Some((_, undo)) = cell.setup {
            let out = as_tool(plane, o, &format!("{undo} {}", o.target));
            if !out.ok && !out.stderr.contains("is not paused") {
                problems.push(format!("{undo} as its GitOps tool: {out}"));
            }
            before = get(plane, "admin", o);
        }
        outcomes.push(Outcome {
            command: cell.command,
            expected: expect,
            observed: verdict,
            problems,
        });
    }
    outcomes
}

/// Revision 1 of the Deployment and of the StatefulSet, for `kubectl rollout
/// undo --to-revision=1` (no kube-controller-manager writes them here): an
/// older image in a ReplicaSet and a ControllerRevision each controls.
fn history(plane: &ControlPlane) {
    let uid = |what: &str| {
        let out = plane.kubectl(
            "admin",
            &["-n", NS, "get", what, "-o", "jsonpath={.metadata.uid}"],
        );
        assert!(out.ok, "{what}: {out}");
        out.stdout
    };
    let owner = |kind: &str, name: &str, uid: String| json!([{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid, "controller": true}]);
    let rs = json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-1", "namespace": NS,
                     "labels": {"app": "web", "pod-template-hash": "1"},
                     "annotations": {"deployment.kubernetes.io/revision": "1"},
                     "ownerReferences": owner("Deployment", "web", uid("deployment/web"))},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web", "pod-template-hash": "1"}},
                 "template": {"metadata": {"labels": {"app": "web", "pod-template-hash": "1"}},
                              "spec": {"containers": [{"name": "app", "image": "nginx:1.26"}]}}}
    });
    let revision = json!({
        "apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": "db-1", "namespace": NS, "labels": {"app": "db"},
                     "ownerReferences": owner("StatefulSet", "db", uid("statefulset/db"))},
        "revision": 1,
        "data": {"spec": {"template": {"metadata": {"labels": {"app": "db"}},
            "spec": {"containers": [{"name": "db", "image": "postgres:15"}]}, "$patch": "replace"}}}
    });
    plane.apply_admin(&rs.to_string());
    plane.apply_admin(&revision.to_string());
}

fn conformance(policy: Policy) {
    let started = Instant::now();
    let mut plane = ControlPlane::start(match policy {
        Policy::Default => "conformance-default",
        Policy::IgnoreMeta => "conformance-ignore-meta",
    });
    plane.prepare(&[NS, "argocd", "flux-system"]);
    plane.apply_admin(WIDGET_CRD);
    let out = plane.kubectl(
        "admin",
        &[
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.com",
            "--timeout=30s",
        ],
    );
    assert!(out.ok, "{out}");
    plane.apply_admin(CONFORMANCE_RBAC);
    let policy_file = match policy {
        Policy::Default => format!("{ROOT}/src/policy/default-policy.yaml"),
        Policy::IgnoreMeta => {
            let file = plane.dir.join("ignore-meta-policy.yaml");
            std::fs::write(&file, IGNORE_META_POLICY).unwrap();
            file.display().to_string()
        }
    };
    let dg = Driftguard::start(
        &plane,
        &[
            &format!("--policy={policy_file}"),
            &plane.driftguard_kubeconfig_flag(),
        ],
    );
    dg.register(&plane, &policy_file);

    let objects = objects();
    for o in &objects {
        let manifest = o.manifest.to_string();
        let out = match o.manager {
            Manager::Argo => plane.kubectl_as_stdin(
                ARGO,
                &["apply", "--field-manager=argocd-controller", "-f", "-"],
                Some(&manifest),
            ),
            Manager::Flux => plane.kubectl_as_stdin(
                FLUX,
                &[
                    "apply",
                    "--server-side",
                    "--field-manager=kustomize-controller",
                    "-f",
                    "-",
                ],
                Some(&manifest),
            ),
        };
        assert!(out.ok, "{} as its GitOps tool: {out}", o.target);
    }
    history(&plane);
    wait_for("driftguard to judge", Duration::from_secs(30), || {
        let out = plane.kubectl(
            "alice",
            &[
                "-n",
                NS,
                "annotate",
                "deployment/web",
                "driftguard.io/mode=audit",
                "--dry-run=server",
            ],
        );
        if !out.ok && out.stderr.contains("driftguard") {
            Ok(())
        } else {
            Err(out.to_string())
        }
    });
    let ready = started.elapsed();

    // The columns run side by side; each column's cells in order.
    let columns: Vec<Vec<Outcome>> = std::thread::scope(|s| {
        let handles: Vec<_> = objects
            .iter()
            .map(|o| s.spawn(|| column(&plane, policy, o)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });

    let cells: usize = columns.iter().map(Vec::len).sum();
    println!("{}", matrix(policy, &objects, &columns));
    println!(
        "{policy}: {cells} cells; control plane and driftguard ready in {:.1?}, matrix in {:.1?}",
        ready,
        started.elapsed() - ready
    );
    let mut failures = Vec::new();
    for (o, outcomes) in objects.iter().zip(&columns) {
        for c in outcomes {
            for p in &c.problems {
                failures.push(format!("[{policy}] {} × {}: {p}", o.column, c.command));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {cells} cells break the invariant or the table:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// Commands down, objects across: A allowed, D denied by driftguard, C an
/// apply conflict, F kubectl failed otherwise; `!` where that is not what the
/// invariant gives or the object did not end as it must; `·` not a command
/// for that kind.
fn matrix(policy: Policy, objects: &[Object], columns: &[Vec<Outcome>]) -> String {
    let mut rows: Vec<&str> = Vec::new();
    for outcomes in columns {
        for c in outcomes {
            if !rows.contains(&c.command.as_str()) {
                rows.push(&c.command);
            }
        }
    }
    let width = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let mut text = format!("\nkubectl conformance, {policy}\n{:width$}", "");
    for o in objects {
        text.push_str(&format!(" {:>7}", o.column));
    }
    for row in rows {
        text.push_str(&format!("\n{row:width$}"));
        for outcomes in columns {
            let mark = match outcomes.iter().find(|c| c.command == row) {
                None => "·".to_owned(),
                Some(c) => {
                    let bad = c.observed != c.expected || !c.problems.is_empty();
                    format!("{}{}", c.observed.letter(), if bad { "!" } else { "" })
                }
            };
            text.push_str(&format!(" {mark:>7}"));
        }
    }
    text
}

#[test]
fn kubectl_conformance_under_the_default_policy() {
    conformance(Policy::Default);
}

#[test]
fn kubectl_conformance_with_labels_and_annotations_ignored() {
    conformance(Policy::IgnoreMeta);
}

/// The independent check itself, without a control plane: what `diff` reports
/// and what `may_change` lets through.
#[test]
fn the_invariant_model() {
    let objects = objects();
    let deploy = &objects[0];
    let endpoints = &objects[7];
    let before = state(&deploy.manifest);
    let mut after = before.clone();
    set(&mut after, "/metadata/labels/team", json!("web"));
    set(&mut after, RESTARTED_AT_PTR, json!("2026-01-01T00:00:00Z"));
    set(
        &mut after,
        "/metadata/annotations/driftguard.io~1mode",
        json!("audit"),
    );
    set(
        &mut after,
        "/spec/template/spec/containers/0/image",
        json!("x"),
    );
    set(&mut after, LAST_APPLIED_PTR, json!({"kind": "Deployment"}));
    let mut changed = Vec::new();
    diff(&before, &after, "", &mut changed);
    assert_eq!(
        changed,
        [
            "/metadata/annotations/driftguard.io~1mode",
            LAST_APPLIED_PTR,
            "/metadata/labels/team",
            "/spec/template/metadata/annotations/kubectl.kubernetes.io~1restartedAt",
            "/spec/template/spec/containers/0/image",
        ]
    );
    let allowed = |policy, o| -> Vec<&str> {
        changed
            .iter()
            .map(String::as_str)
            .filter(|p| may_change(policy, o, p))
            .collect()
    };
    assert_eq!(allowed(Policy::Default, deploy), [RESTARTED_AT_PTR]);
    assert_eq!(
        allowed(Policy::IgnoreMeta, deploy),
        ["/metadata/labels/team"]
    );
    assert_eq!(
        allowed(Policy::IgnoreMeta, endpoints),
        [LAST_APPLIED_PTR, "/metadata/labels/team"]
    );
    // An empty map is no map.
    let mut empty = before.clone();
    set(&mut empty, "/spec/template/metadata/annotations", json!({}));
    let mut changed = Vec::new();
    diff(&before, &empty, "", &mut changed);
    assert!(changed.is_empty(), "{changed:?}");
    assert_eq!(
        expected(Policy::IgnoreMeta, Manager::Flux, &[Touch::Meta]),
        Verdict::Denied
    );
    // A client-side apply adds the last-applied record, which Flux removes.
    assert_eq!(
        expected(
            Policy::IgnoreMeta,
            Manager::Flux,
            &[Touch::OwnMeta, Touch::LastApplied]
        ),
        Verdict::Denied
    );
}
