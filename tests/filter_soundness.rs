//! Filter soundness: a write the kube-apiserver does not send to driftguard
//! must be one that `driftguard::judge` allows.
//!
//! `driftguard register` (`cluster::register::configurations`, with the
//! matchConditions of `cluster::rules::conditions`) lets the apiserver skip
//! writes without calling driftguard: by the `rules` (every resource and
//! `*/scale`, CREATE, UPDATE and DELETE), the `namespaceSelector` and the CEL
//! `matchConditions`. A skip is sound only if the call would have allowed the
//! write anyway; otherwise the filter is a bypass.
//!
//! testkit/src/apiserver.rs answers "would the apiserver call this
//! webhook?" for a configuration and a write, following the apiserver's own
//! source (named in its doc comment: `webhook/generic/webhook.go`
//! `ShouldCallHook`, `predicates/{rules,namespace,object}`,
//! `webhook/matchconditions/matcher.go`, and `cel/filter.go` /
//! `cel/activation.go` for how `request`, `object` and `oldObject` are bound),
//! with the `cel` crate evaluating the conditions. It reads everything from
//! the generated configurations, so a change to the rules, selectors or
//! conditions (a second webhook for Namespaces, `*/status` in the rules) is
//! tested as it is.
//!
//! The writes are generated as the apiserver would present them to a
//! validating webhook: a Namespace's own requests carry its name as the
//! request's namespace (except its CREATE), the apiserver sets the
//! `kubernetes.io/metadata.name` label on every Namespace, a `status` write
//! has already been through the resource's status strategy (`PrepareForUpdate`:
//! a Deployment keeps its stored spec and labels, a Namespace its stored spec,
//! a custom resource everything but `status`), a main-resource UPDATE keeps the
//! stored status, a `scale` write carries an `autoscaling/v1` Scale whose
//! `spec.replicas` is omitted at 0 (`omitempty`), and `exec` is a CONNECT.
//! The mutating webhook is asked about the same writes (it really sees them
//! before the strategies run, which changes nothing its filters read here).
//!
//! The property: every matchCondition evaluates without error (driftguard
//! guarantees it: an error fails the write under `failurePolicy: Fail`), and
//! a write that no validating webhook is called for is allowed by `judge`
//! (and, for the mutating webhook, gets no patch from it). One exception is by
//! design: a write in a namespace that was opted out *before* the write (named
//! in the selector: kube-system, driftguard's own, `--exclude-namespace`; or
//! labelled `driftguard.io/ignore: "true"` in the stored Namespace) is the
//! operator's choice, and `judge` never sees namespace labels. A write that
//! opts itself out (a Namespace created or updated with that label) is not.
//!
//! `judge` runs with the tools' records as the source cache builds them
//! ([`listed`]): objects in `production` and `dev-team` and Rollouts that
//! Argo CD and Flux list, so a Namespace or CRD delete that would take them
//! with it is judged (and must be sent); and with no argocd-cm watched, or one
//! tracking by annotation or by label ([`Tracking`]).
//!
//! On failure the test prints the review, the stored namespaces, the filter
//! that skipped it and driftguard's decision. `census` (ignored; run it with
//! `cargo test --test filter_soundness -- --ignored --nocapture census`)
//! lists every class of counterexample among many generated writes, with the
//! smallest example of each.

use driftguard_testkit::apiserver;
use driftguard_testkit::loosening;

use std::collections::BTreeMap;

use apiserver::{Attributes, Call, Hook, Labels, Namespaces, Skip};
use driftguard::cluster::register::{Options, WebhookAddress, configurations};
use driftguard::drift::{ArgoCdSources, Manager};
use driftguard::sources::Sources;
use driftguard::{Endpoint, Judged, Policy, judge_request};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};

const NOW: &str = "2026-11-29T10:00:00Z";

/// driftguard's own namespace (`--service driftguard.driftguard`) and one
/// `--exclude-namespace`.
const OWN_NAMESPACE: &str = "driftguard";
const EXCLUDED_NAMESPACE: &str = "monitoring";
const IGNORE_LABEL: &str = "driftguard.io/ignore";
const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The policies the filter is checked with, and the YAML they are read from
/// (empty: the embedded default).
const POLICIES: &[(&str, &str)] = &[
    ("embedded", ""),
    ("warn", "mode: warn\n"),
    ("flux-off", "gitops: {flux: {enabled: false}}\n"),
    ("owned-fields", "precision: ownedFields\n"),
    (
        "detectors-off",
        "gitops: {argocd: {enabled: false}, flux: {enabled: false}}\n",
    ),
    (
        "argocd-off-trusted-groups",
        "gitops: {argocd: {enabled: false}}\n\
         trusted: {users: ['system:serviceaccount:kube-system:*', 'system:kube-controller-manager', 'system:node:*'], \
         groups: [platform-admins, 'ci:*']}\n",
    ),
];

/// A resource the apiserver serves, and the subresources generated for it.
struct Resource {
    /// `group/resource`, as scenarios name it.
    key: &'static str,
    group: &'static str,
    version: &'static str,
    resource: &'static str,
    kind: &'static str,
    namespaced: bool,
    subresources: &'static [&'static str],
}

const RESOURCES: &[Resource] = &[
    Resource {
        key: "apps/deployments",
        group: "apps",
        version: "v1",
        resource: "deployments",
        kind: "Deployment",
        namespaced: true,
        subresources: &["status", "scale"],
    },
    Resource {
        key: "/configmaps",
        group: "",
        version: "v1",
        resource: "configmaps",
        kind: "ConfigMap",
        namespaced: true,
        subresources: &[],
    },
    Resource {
        key: "/namespaces",
        group: "",
        version: "v1",
        resource: "namespaces",
        kind: "Namespace",
        namespaced: false,
        subresources: &["status"],
    },
    Resource {
        key: "/endpoints",
        group: "",
        version: "v1",
        resource: "endpoints",
        kind: "Endpoints",
        namespaced: true,
        subresources: &[],
    },
    Resource {
        key: "discovery.k8s.io/endpointslices",
        group: "discovery.k8s.io",
        version: "v1",
        resource: "endpointslices",
        kind: "EndpointSlice",
        namespaced: true,
        subresources: &[],
    },
    Resource {
        key: "events.k8s.io/events",
        group: "events.k8s.io",
        version: "v1",
        resource: "events",
        kind: "Event",
        namespaced: true,
        subresources: &[],
    },
    Resource {
        key: "/events",
        group: "",
        version: "v1",
        resource: "events",
        kind: "Event",
        namespaced: true,
        subresources: &[],
    },
    Resource {
        key: "coordination.k8s.io/leases",
        group: "coordination.k8s.io",
        version: "v1",
        resource: "leases",
        kind: "Lease",
        namespaced: true,
        subresources: &[],
    },
    Resource {
        key: "argoproj.io/rollouts",
        group: "argoproj.io",
        version: "v1alpha1",
        resource: "rollouts",
        kind: "Rollout",
        namespaced: true,
        subresources: &["status", "scale"],
    },
    Resource {
        key: "autoscaling/horizontalpodautoscalers",
        group: "autoscaling",
        version: "v2",
        resource: "horizontalpodautoscalers",
        kind: "HorizontalPodAutoscaler",
        namespaced: true,
        subresources: &["status"],
    },
    Resource {
        key: "keda.sh/scaledobjects",
        group: "keda.sh",
        version: "v1alpha1",
        resource: "scaledobjects",
        kind: "ScaledObject",
        namespaced: true,
        subresources: &["status"],
    },
    Resource {
        key: "/pods",
        group: "",
        version: "v1",
        resource: "pods",
        kind: "Pod",
        namespaced: true,
        subresources: &["exec"],
    },
    Resource {
        key: "apiextensions.k8s.io/customresourcedefinitions",
        group: "apiextensions.k8s.io",
        version: "v1",
        resource: "customresourcedefinitions",
        kind: "CustomResourceDefinition",
        namespaced: false,
        subresources: &["status"],
    },
    Resource {
        key: "rbac.authorization.k8s.io/clusterroles",
        group: "rbac.authorization.k8s.io",
        version: "v1",
        resource: "clusterroles",
        kind: "ClusterRole",
        namespaced: false,
        subresources: &[],
    },
];

fn resource(group_resource: &str) -> &'static Resource {
    RESOURCES
        .iter()
        .find(|r| r.key == group_resource)
        .unwrap_or_else(|| panic!("no resource {group_resource}"))
}

/// Scalers ([`driftguard::drift::deputy::SCALERS`]): written by hand at a
/// managed target, they are judged as the scale write they cause.
const SCALERS: &[&str] = &[
    "autoscaling/horizontalpodautoscalers",
    "keda.sh/scaledobjects",
];

/// Writers: the GitOps controllers and trusted identities of the policies,
/// argocd-server, and people and service accounts that are neither.
const IDENTITIES: &[(&str, &[&str])] = &[
    (
        "system:serviceaccount:argocd:argocd-application-controller",
        &[
            "system:serviceaccounts",
            "system:serviceaccounts:argocd",
            "system:authenticated",
        ],
    ),
    (
        "system:serviceaccount:argocd:argocd-server",
        &[
            "system:serviceaccounts",
            "system:serviceaccounts:argocd",
            "system:authenticated",
        ],
    ),
    (
        "system:serviceaccount:flux-system:kustomize-controller",
        &[
            "system:serviceaccounts",
            "system:serviceaccounts:flux-system",
            "system:authenticated",
        ],
    ),
    (
        "system:serviceaccount:flux-system:helm-controller",
        &[
            "system:serviceaccounts",
            "system:serviceaccounts:flux-system",
            "system:authenticated",
        ],
    ),
    ("system:kube-controller-manager", &["system:authenticated"]),
    ("system:node:x", &["system:nodes", "system:authenticated"]),
    (
        "system:serviceaccount:kube-system:y",
        &[
            "system:serviceaccounts",
            "system:serviceaccounts:kube-system",
            "system:authenticated",
        ],
    ),
    (
        "system:serviceaccount:kube-systemx:z",
        &[
            "system:serviceaccounts",
            "system:serviceaccounts:kube-systemx",
            "system:authenticated",
        ],
    ),
    (
        "system:serviceaccount:production:deployer",
        &[
            "system:serviceaccounts",
            "system:serviceaccounts:production",
            "system:authenticated",
        ],
    ),
    ("alice", &["developers", "system:authenticated"]),
    ("bob", &["platform-admins", "system:authenticated"]),
    ("carol", &["ci:runners", "system:authenticated"]),
];

fn groups_of(user: &str) -> Vec<String> {
    IDENTITIES
        .iter()
        .find(|(u, _)| *u == user)
        .map(|(_, g)| g.iter().map(|g| g.to_string()).collect())
        .unwrap_or_default()
}

/// Namespaces writes happen in (and names of the Namespaces written): two
/// that are not opted out by name, then three that are.
const NAMESPACES: &[&str] = &[
    "production",
    "dev-team",
    "kube-system",
    OWN_NAMESPACE,
    EXCLUDED_NAMESPACE,
];

/// Stands for the object's own Argo CD tracking id.
const OWN_TRACKING_ID: &str = "<own tracking id>";

/// Labels and annotations an object may carry, with their values.
const LABELS: &[(&str, &[&str])] = &[
    ("app.kubernetes.io/instance", &["myapp", "web"]),
    ("kustomize.toolkit.fluxcd.io/name", &["apps"]),
    ("kustomize.toolkit.fluxcd.io/namespace", &["flux-system"]),
    ("helm.toolkit.fluxcd.io/name", &["web"]),
    ("helm.toolkit.fluxcd.io/namespace", &["flux-system"]),
    ("kustomize.toolkit.fluxcd.io/reconcile", &["disabled"]),
    (IGNORE_LABEL, &["true", "false"]),
    ("team", &["a", "b"]),
];
const ANNOTATIONS: &[(&str, &[&str])] = &[
    (
        "argocd.argoproj.io/tracking-id",
        &[
            OWN_TRACKING_ID,
            "other:apps/Deployment:production/other",
            "",
        ],
    ),
    // Empty: no release, as the decision reads it.
    ("meta.helm.sh/release-name", &["web", ""]),
    ("driftguard.io/mode", &["warn", "audit", "enforce"]),
    ("helm.toolkit.fluxcd.io/driftDetection", &["disabled"]),
    ("team", &["a", "b"]),
];

#[derive(Clone, Debug, Default)]
struct Meta {
    labels: Vec<(&'static str, &'static str)>,
    annotations: Vec<(&'static str, &'static str)>,
    /// An ownerReference, with `controller: true` or `false`.
    owner: Option<bool>,
}

/// What `helm install` sets on every object of release `web` (the chart's
/// `app.kubernetes.io/instance` label among them).
const HELM_RELEASE_LABELS: &[(&str, &str)] = &[
    ("app.kubernetes.io/instance", "web"),
    ("app.kubernetes.io/managed-by", "Helm"),
];

impl Meta {
    /// Installed by Helm as release `release` (empty: a release annotation
    /// emptied by hand), under what `self` has.
    fn helm_release(mut self, release: &'static str) -> Self {
        self.labels
            .splice(0..0, HELM_RELEASE_LABELS.iter().copied());
        self.annotations.splice(
            0..0,
            [
                ("meta.helm.sh/release-name", release),
                ("meta.helm.sh/release-namespace", "production"),
            ],
        );
        self
    }
}

/// How a watched argocd-cm makes Argo CD track objects
/// (`application.resourceTrackingMethod`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tracking {
    /// No argocd-cm is watched.
    Unwatched,
    /// By annotation (Argo CD's default): its instance label claims nothing.
    Annotation,
    /// By label: the policy's instance label, which docs/gitops.md asks
    /// operators to set to argocd-cm's key (the registration knows only the
    /// policy's); by annotation where the policy reads no instance label.
    Label,
}

const TRACKINGS: [Tracking; 3] = [Tracking::Unwatched, Tracking::Annotation, Tracking::Label];

/// A change from the stored object to the incoming one.
#[derive(Clone, Debug)]
enum Edit {
    Label(&'static str, Option<&'static str>),
    Annotation(&'static str, Option<&'static str>),
    Owner(Option<bool>),
    /// A field of the kind's body (spec, data, subsets, ...).
    Body,
    Status,
}

/// One generated write.
#[derive(Clone, Debug)]
struct Scenario {
    policy: &'static str,
    /// `group/resource`.
    resource: &'static str,
    sub: &'static str,
    operation: &'static str,
    user: &'static str,
    /// The namespace of a namespaced object, the name of a Namespace.
    namespace: &'static str,
    /// `driftguard.io/ignore` on the namespace of a namespaced object.
    namespace_ignore: Option<&'static str>,
    /// The stored object (the incoming one for CREATE is this plus `edits`).
    old: Meta,
    edits: Vec<Edit>,
    /// Scale: stored and requested replicas.
    replicas: (i64, i64),
    /// Scale: driftguard could read the parent.
    parent: bool,
    dry_run: bool,
    tracking: Tracking,
}

impl Scenario {
    fn new(
        policy: &'static str,
        resource: &'static str,
        operation: &'static str,
        user: &'static str,
    ) -> Self {
        Scenario {
            policy,
            resource,
            sub: "",
            operation,
            user,
            namespace: "production",
            namespace_ignore: None,
            old: Meta::default(),
            edits: Vec::new(),
            replicas: (3, 3),
            parent: true,
            dry_run: false,
            tracking: Tracking::Unwatched,
        }
    }
    fn helm_release(mut self) -> Self {
        self.old = self.old.helm_release("web");
        self
    }
    fn tracking(mut self, tracking: Tracking) -> Self {
        self.tracking = tracking;
        self
    }
    fn sub(mut self, sub: &'static str) -> Self {
        self.sub = sub;
        self
    }
    fn tracked(mut self) -> Self {
        self.old
            .annotations
            .push(("argocd.argoproj.io/tracking-id", OWN_TRACKING_ID));
        self
    }
    fn label(mut self, key: &'static str, value: &'static str) -> Self {
        self.old.labels.push((key, value));
        self
    }
    fn annotation(mut self, key: &'static str, value: &'static str) -> Self {
        self.old.annotations.push((key, value));
        self
    }
    fn edit(mut self, edit: Edit) -> Self {
        self.edits.push(edit);
        self
    }
    fn namespace(mut self, namespace: &'static str, ignore: Option<&'static str>) -> Self {
        self.namespace = namespace;
        self.namespace_ignore = ignore;
        self
    }
}

/// One policy and the webhooks `driftguard register` makes from it.
struct Setup {
    name: &'static str,
    policy: Policy,
    /// The policy's `gitops.argocd.instanceLabel`, where it reads one.
    instance_label: Option<String>,
    validating: Vec<Hook>,
    mutating: Vec<Hook>,
}

fn options() -> Options {
    Options {
        name: "driftguard".into(),
        endpoint: WebhookAddress::parse_service(&format!("driftguard.{OWN_NAMESPACE}:443"))
            .expect("a service"),
        ca_bundle: b"PEM".to_vec(),
        failure_policy: "Fail".into(),
        timeout_seconds: 5,
        exclude_namespaces: vec![EXCLUDED_NAMESPACE.into()],
    }
}

/// The fixed policies, then the space the sequence property generates
/// (testkit/src/loosening.rs).
fn policies() -> Vec<(&'static str, &'static str)> {
    let generated = loosening::policy_space().into_iter().map(|(name, yaml)| {
        let leak = |s: String| &*Box::leak(s.into_boxed_str());
        (leak(name), leak(yaml))
    });
    POLICIES.iter().copied().chain(generated).collect()
}

fn setups() -> Vec<Setup> {
    policies()
        .into_iter()
        .map(|(name, yaml)| {
            let policy = if yaml.is_empty() {
                Policy::embedded()
            } else {
                Policy::from_yaml(yaml, name).expect("the policy loads")
            };
            let (v, m) = configurations(&options(), &policy);
            Setup {
                name,
                instance_label: instance_label(yaml),
                validating: v.webhooks.iter().flatten().map(Hook::validating).collect(),
                mutating: m.webhooks.iter().flatten().map(Hook::mutating).collect(),
                policy,
            }
        })
        .collect()
}

/// The instance label `yaml` reads, with the schema's defaults: none where
/// Argo CD's detector is off or the key is empty.
fn instance_label(yaml: &str) -> Option<String> {
    let policy: Value = serde_saphyr::from_str(yaml).unwrap_or(Value::Null);
    let argo = policy.pointer("/gitops/argocd");
    let on = argo
        .and_then(|a| a.get("enabled"))
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let key = argo
        .and_then(|a| a.get("instanceLabel"))
        .map_or(Some("app.kubernetes.io/instance"), Value::as_str);
    key.filter(|k| on && !k.is_empty()).map(str::to_owned)
}

/// The kind's body, without metadata.
fn body(kind: &str, replicas: i64) -> Value {
    let workload = |extra: Value| {
        let mut spec = json!({"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "web", "image": "web:1"}]}}});
        for (k, v) in extra.as_object().expect("an object") {
            spec[k] = v.clone();
        }
        json!({"spec": spec, "status": {"replicas": replicas, "observedGeneration": 1}})
    };
    match kind {
        "Deployment" => workload(json!({})),
        "Rollout" => workload(json!({"strategy": {"canary": {"steps": [{"setWeight": 20}]}}})),
        "ConfigMap" => json!({"data": {"LOG_LEVEL": "info"}}),
        "Namespace" => {
            json!({"spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
        }
        "Endpoints" => {
            json!({"subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}]})
        }
        "EndpointSlice" => {
            json!({"addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"]}],
                                  "ports": [{"port": 80}]})
        }
        "Event" => {
            json!({"reason": "Scaled", "note": "scaled up", "message": "scaled up", "type": "Normal",
                          "regarding": {"kind": "Deployment", "name": "web"}})
        }
        "Lease" => json!({"spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}),
        "HorizontalPodAutoscaler" => {
            json!({"spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                            "minReplicas": 1, "maxReplicas": replicas.max(1)},
                   "status": {"currentReplicas": replicas, "desiredReplicas": replicas}})
        }
        "ScaledObject" => {
            json!({"spec": {"scaleTargetRef": {"name": "web"}, "minReplicaCount": 1, "maxReplicaCount": 10,
                            "triggers": [{"type": "cpu", "metadata": {"value": "50"}}]},
                   "status": {"originalReplicaCount": replicas}})
        }
        "Pod" => {
            json!({"spec": {"containers": [{"name": "web", "image": "web:1"}]}, "status": {"phase": "Running"}})
        }
        "ClusterRole" => {
            json!({"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]})
        }
        // The Rollouts' CRD: deleting it deletes every Rollout.
        "CustomResourceDefinition" => json!({
            "spec": {"group": "argoproj.io", "scope": "Namespaced",
                     "names": {"kind": "Rollout", "plural": "rollouts"},
                     "versions": [{"name": "v1alpha1", "served": true, "storage": true}]},
            "status": {"acceptedNames": {"kind": "Rollout", "plural": "rollouts"}}}),
        other => panic!("no body for {other}"),
    }
}

/// What `Edit::Body` changes, per kind (none for a Namespace: its only spec,
/// finalizers, is written through the `finalize` subresource).
fn body_edit(kind: &str) -> Option<(&'static str, Value)> {
    Some(match kind {
        "Deployment" | "Rollout" => ("/spec/template/spec/containers/0/image", json!("web:2")),
        "ConfigMap" => ("/data/LOG_LEVEL", json!("debug")),
        "Endpoints" => ("/subsets/0/addresses/0/ip", json!("10.0.0.2")),
        "EndpointSlice" => ("/endpoints/0/addresses/0", json!("10.0.0.2")),
        "Event" => ("/note", json!("edited by hand")),
        "Lease" => ("/spec/holderIdentity", json!("b")),
        "HorizontalPodAutoscaler" => ("/spec/minReplicas", json!(3)),
        "ScaledObject" => ("/spec/minReplicaCount", json!(3)),
        "Pod" => ("/spec/activeDeadlineSeconds", json!(5)),
        "ClusterRole" => ("/rules/0/verbs", json!(["get", "list", "watch"])),
        "CustomResourceDefinition" => ("/spec/versions/0/served", json!(false)),
        _ => return None,
    })
}

/// Sets `pointer`, creating missing objects on the way.
fn set(obj: &mut Value, pointer: &str, value: Value) {
    let tokens: Vec<&str> = pointer[1..].split('/').collect();
    let mut node = obj;
    for t in &tokens[..tokens.len() - 1] {
        node = match t.parse::<usize>() {
            Ok(i) => &mut node[i],
            Err(_) => {
                if !node.get(*t).is_some_and(|n| n.is_object() || n.is_array()) {
                    node[*t] = json!({});
                }
                &mut node[*t]
            }
        };
    }
    let last = tokens.last().expect("a token");
    match last.parse::<usize>() {
        Ok(i) => node[i] = value,
        Err(_) => node[*last] = value,
    }
}

fn set_map_entry(obj: &mut Value, section: &str, key: &str, value: Option<&str>) {
    let meta = &mut obj["metadata"];
    if !meta.get(section).is_some_and(Value::is_object) {
        meta[section] = json!({});
    }
    let map = meta[section].as_object_mut().expect("a map");
    match value {
        Some(v) => {
            map.insert(key.to_owned(), json!(v));
        }
        None => {
            map.remove(key);
        }
    }
    // The apiserver stores (and serves) no empty map.
    if map.is_empty() {
        meta.as_object_mut().expect("metadata").remove(section);
    }
}

fn owner_references(controller: Option<bool>) -> Option<Value> {
    controller.map(|c| {
        json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-6d4f8", "uid": "u-2", "controller": c}])
    })
}

struct ObjectId<'a> {
    res: &'a Resource,
    name: &'a str,
    /// Empty for cluster-scoped objects.
    namespace: &'a str,
}

impl ObjectId<'_> {
    fn tracking_id(&self) -> String {
        format!(
            "myapp:{}/{}:{}/{}",
            self.res.group, self.res.kind, self.namespace, self.name
        )
    }

    fn object(&self, meta: &Meta, replicas: i64) -> Value {
        let api_version = if self.res.group.is_empty() {
            self.res.version.to_owned()
        } else {
            format!("{}/{}", self.res.group, self.res.version)
        };
        let mut obj = json!({
            "apiVersion": api_version, "kind": self.res.kind,
            "metadata": {"name": self.name, "uid": "u-1", "resourceVersion": "10",
                         "creationTimestamp": "2026-11-01T00:00:00Z"},
        });
        if !self.namespace.is_empty() {
            obj["metadata"]["namespace"] = json!(self.namespace);
        }
        for (k, v) in body(self.res.kind, replicas).as_object().expect("a body") {
            obj[k] = v.clone();
        }
        if self.res.kind == "Namespace" {
            set_map_entry(&mut obj, "labels", NAME_LABEL, Some(self.name));
        }
        for (k, v) in &meta.labels {
            set_map_entry(&mut obj, "labels", k, Some(v));
        }
        for (k, v) in &meta.annotations {
            let v = if *v == OWN_TRACKING_ID {
                self.tracking_id()
            } else {
                v.to_string()
            };
            set_map_entry(&mut obj, "annotations", k, Some(&v));
        }
        if let Some(refs) = owner_references(meta.owner) {
            obj["metadata"]["ownerReferences"] = refs;
        }
        obj
    }

    fn apply(&self, obj: &mut Value, edit: &Edit) {
        match edit {
            Edit::Label(k, v) => set_map_entry(obj, "labels", k, *v),
            Edit::Annotation(k, v) => {
                let v = v.map(|v| {
                    if v == OWN_TRACKING_ID {
                        self.tracking_id()
                    } else {
                        v.to_owned()
                    }
                });
                set_map_entry(obj, "annotations", k, v.as_deref())
            }
            Edit::Owner(c) => match owner_references(*c) {
                Some(refs) => obj["metadata"]["ownerReferences"] = refs,
                None => {
                    obj["metadata"]
                        .as_object_mut()
                        .expect("metadata")
                        .remove("ownerReferences");
                }
            },
            Edit::Body => {
                if let Some((pointer, value)) = body_edit(self.res.kind) {
                    set(obj, pointer, value);
                }
            }
            // Only kinds with a status have one to change.
            Edit::Status if obj.get("status").is_some() => set(
                obj,
                "/status/conditions",
                json!([{"type": "Edited", "status": "True"}]),
            ),
            Edit::Status => {}
        }
    }
}

/// An `autoscaling/v1` Scale: `spec.replicas` is `omitempty`, so 0 is absent.
fn scale(name: &str, namespace: &str, replicas: i64, current: i64) -> Value {
    let spec = if replicas == 0 {
        json!({})
    } else {
        json!({"replicas": replicas})
    };
    json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
           "metadata": {"name": name, "namespace": namespace, "uid": "u-1", "resourceVersion": "10",
                        "creationTimestamp": "2026-11-01T00:00:00Z"},
           "spec": spec, "status": {"replicas": current, "selector": "app=web"}})
}

/// A scenario as the apiserver sees it.
struct Case {
    attributes: Attributes,
    /// The lister's Namespaces, as stored before the write.
    namespaces: Namespaces,
    /// The scale parent (or a scaler's target) driftguard reads, if it could.
    parent: Option<Value>,
    /// The write is in a namespace that was opted out before it.
    opted_out_before: bool,
}

fn namespace_labels(name: &str, ignore: Option<&str>) -> Labels {
    let mut labels = Labels::from([(NAME_LABEL.to_owned(), name.to_owned())]);
    if let Some(v) = ignore {
        labels.insert(IGNORE_LABEL.into(), v.into());
    }
    labels
}

fn build(s: &Scenario) -> Case {
    let res = resource(s.resource);
    let is_namespace = res.resource == "namespaces" && res.group.is_empty();
    let (name, object_namespace) = if is_namespace {
        (s.namespace, "")
    } else if res.namespaced {
        ("web", s.namespace)
    } else {
        ("web", "")
    };
    let id = ObjectId {
        res,
        name,
        namespace: object_namespace,
    };
    let stored = id.object(&s.old, s.replicas.0);
    let mut incoming = stored.clone();
    for e in &s.edits {
        id.apply(&mut incoming, e);
    }
    // Deployments, Rollouts, Namespaces and Pods have a status subresource.
    let has_status_subresource = stored.get("status").is_some();
    let (kind, object, old_object, parent) = match (s.sub, s.operation) {
        ("scale", _) => (
            (
                "autoscaling".to_owned(),
                "v1".to_owned(),
                "Scale".to_owned(),
            ),
            Some(scale(name, object_namespace, s.replicas.1, s.replicas.0)),
            Some(scale(name, object_namespace, s.replicas.0, s.replicas.0)),
            s.parent.then(|| stored.clone()),
        ),
        ("exec", _) => (
            ("".to_owned(), "v1".to_owned(), "PodExecOptions".to_owned()),
            Some(
                json!({"kind": "PodExecOptions", "apiVersion": "v1", "stdin": true, "tty": true,
                        "container": "web", "command": ["sh"]}),
            ),
            None,
            None,
        ),
        ("status", _) => {
            // The status strategy's PrepareForUpdate, which runs before
            // validating admission.
            let mut new = incoming.clone();
            match res.kind {
                "Deployment" => {
                    new["spec"] = stored["spec"].clone();
                    match stored["metadata"].get("labels") {
                        Some(l) => new["metadata"]["labels"] = l.clone(),
                        None => {
                            new["metadata"]
                                .as_object_mut()
                                .expect("metadata")
                                .remove("labels");
                        }
                    }
                }
                // Its status strategy keeps only the stored spec.
                "Namespace" | "HorizontalPodAutoscaler" => new["spec"] = stored["spec"].clone(),
                _ => {
                    // A custom resource: everything but status is the stored one.
                    let status = new.get("status").cloned();
                    new = stored.clone();
                    if let Some(status) = status {
                        new["status"] = status;
                    }
                }
            }
            (
                (
                    res.group.to_owned(),
                    res.version.to_owned(),
                    res.kind.to_owned(),
                ),
                Some(new),
                Some(stored.clone()),
                None,
            )
        }
        (_, op) => {
            // A scaler's target, a managed Deployment, as driftguard reads it.
            let target = (SCALERS.contains(&s.resource) && s.parent).then(|| {
                let deployment = ObjectId {
                    res: resource("apps/deployments"),
                    name: "web",
                    namespace: object_namespace,
                };
                let tracked = Meta {
                    annotations: vec![("argocd.argoproj.io/tracking-id", OWN_TRACKING_ID)],
                    ..Meta::default()
                };
                deployment.object(&tracked, s.replicas.0)
            });
            let mut new = incoming.clone();
            if op == "UPDATE" && has_status_subresource {
                // The main resource's PrepareForUpdate keeps the stored status.
                new["status"] = stored["status"].clone();
            }
            let (object, old) = match op {
                "CREATE" => (Some(incoming.clone()), None),
                "UPDATE" => (Some(new), Some(stored.clone())),
                _ => (None, Some(stored.clone())),
            };
            (
                (
                    res.group.to_owned(),
                    res.version.to_owned(),
                    res.kind.to_owned(),
                ),
                object,
                old,
                target,
            )
        }
    };
    let request_namespace = if is_namespace {
        if s.operation == "CREATE" { "" } else { name }
    } else {
        object_namespace
    };
    let mut namespaces = Namespaces::new();
    if is_namespace {
        if s.operation != "CREATE" {
            namespaces.insert(name.to_owned(), apiserver::labels_of(Some(&stored)));
        }
    } else if res.namespaced {
        namespaces.insert(
            object_namespace.to_owned(),
            namespace_labels(object_namespace, s.namespace_ignore),
        );
    }
    // The namespace the write belongs to, as stored before it.
    let home = if is_namespace { name } else { object_namespace };
    let opted_out_before = !home.is_empty()
        && (["kube-system", OWN_NAMESPACE, EXCLUDED_NAMESPACE].contains(&home)
            || namespaces
                .get(home)
                .is_some_and(|l| l.get(IGNORE_LABEL).map(String::as_str) == Some("true")));
    Case {
        attributes: Attributes {
            operation: s.operation.to_owned(),
            resource: (
                res.group.to_owned(),
                res.version.to_owned(),
                res.resource.to_owned(),
            ),
            sub_resource: s.sub.to_owned(),
            kind,
            name: name.to_owned(),
            namespace: request_namespace.to_owned(),
            username: s.user.to_owned(),
            groups: groups_of(s.user),
            object,
            old_object,
            dry_run: s.dry_run,
        },
        namespaces,
        parent,
        opted_out_before,
    }
}

/// Everything known about one scenario.
struct Evaluation {
    setup_name: &'static str,
    case: Case,
    validating: Vec<(String, apiserver::Outcome)>,
    mutating: Vec<(String, apiserver::Outcome)>,
    validated: Judged,
    mutated: Judged,
}

impl Evaluation {
    fn validating_call(&self) -> Call {
        combined(&self.validating)
    }
    fn mutating_call(&self) -> Call {
        combined(&self.mutating)
    }
    fn allowed(&self) -> bool {
        self.validated
            .response
            .response
            .as_ref()
            .is_some_and(|r| r.allowed)
    }
    fn patched(&self) -> bool {
        self.mutated
            .response
            .response
            .as_ref()
            .is_some_and(|r| r.patch.is_some())
    }
}

/// driftguard is called if any of its webhooks is; a write is rejected if
/// one fails it; otherwise skipped, by the first webhook's reason.
fn combined(outcomes: &[(String, apiserver::Outcome)]) -> Call {
    if outcomes.iter().any(|(_, o)| o.call == Call::Called) {
        return Call::Called;
    }
    if let Some((_, o)) = outcomes
        .iter()
        .find(|(_, o)| matches!(o.call, Call::Rejected(_)))
    {
        return o.call.clone();
    }
    outcomes
        .first()
        .map(|(_, o)| o.call.clone())
        .unwrap_or(Call::Skipped(Skip::Rules))
}

fn evaluate(setups: &[Setup], s: &Scenario) -> Evaluation {
    let setup = setups
        .iter()
        .find(|x| x.name == s.policy)
        .unwrap_or_else(|| panic!("no policy {}", s.policy));
    let case = build(s);
    let decide = |hooks: &[Hook]| {
        hooks
            .iter()
            .map(|h| (h.name.clone(), h.decide(&case.attributes, &case.namespaces)))
            .collect::<Vec<_>>()
    };
    let body = serde_json::to_vec(&case.attributes.admission_review()).expect("serializes");
    let now = NOW.parse().expect("a time");
    let sources = listed(s.tracking, setup.instance_label.as_deref());
    let run = |endpoint| {
        let req = driftguard::request::parse(&body)
            .unwrap_or_else(|e| panic!("judge refused the review: {e}\n{s:?}"));
        judge_request(
            &setup.policy,
            &req,
            endpoint,
            case.parent.as_ref(),
            Some(&sources),
            now,
            &driftguard::deadline::Deadline::none(),
        )
        .unwrap_or_else(|e| panic!("judge refused the review: {e}\n{s:?}"))
    };
    Evaluation {
        setup_name: setup.name,
        validating: decide(&setup.validating),
        mutating: decide(&setup.mutating),
        validated: run(Endpoint::Validate),
        mutated: run(Endpoint::Mutate),
        case,
    }
}

/// The tools' records (Application `status.resources`, Kustomization
/// `status.inventory`) the decision reads: objects of both tools in the two
/// namespaces that are not opted out by name, Rollouts among them; and a
/// watched argocd-cm, unless `Unwatched`, tracking by label with
/// `instance_label` (the policy's) under `Label`.
fn listed(tracking: Tracking, instance_label: Option<&str>) -> Sources {
    let argo = Manager::ArgoCd {
        application: "myapp".into(),
        application_namespace: Some("argocd".into()),
    };
    let flux = Manager::FluxKustomization {
        namespace: "flux-system".into(),
        name: "apps".into(),
    };
    Sources {
        planned: std::sync::Arc::new(
            [
                ("apps/Deployment:production/web", flux.clone()),
                ("/ConfigMap:dev-team/settings", flux),
                ("argoproj.io/Rollout:production/canary", argo),
            ]
            .into_iter()
            .map(|(k, m)| (k.into(), m.into()))
            .collect(),
        ),
        argocd: (tracking != Tracking::Unwatched)
            .then(|| ArgoCdSources {
                instance_label: instance_label
                    .filter(|_| tracking == Tracking::Label)
                    .map(str::to_owned),
                ..Default::default()
            })
            .into_iter()
            .collect(),
        ..Default::default()
    }
}

/// A counterexample: its class (for the census) and everything to read it.
#[derive(Debug)]
struct Failure {
    class: String,
    report: String,
}

fn skip_kind(call: &Call) -> String {
    match call {
        Call::Skipped(Skip::NamespaceSelector { from_object, .. }) => format!(
            "namespaceSelector on the {} Namespace",
            if *from_object { "incoming" } else { "stored" }
        ),
        Call::Skipped(skip) => skip.to_string(),
        other => format!("{other:?}"),
    }
}

fn describe(e: &Evaluation, s: &Scenario, what: &str, call: &Call) -> Failure {
    let a = &e.case.attributes;
    let d = &e.validated.decision;
    let target = format!(
        "{}/{}{}",
        a.resource.0,
        a.resource.2,
        if a.sub_resource.is_empty() {
            String::new()
        } else {
            format!("/{}", a.sub_resource)
        }
    );
    let class = format!(
        "{what}: {target} {} skipped by {}; driftguard says {} ({})",
        a.operation,
        skip_kind(call),
        d.verdict.as_str(),
        d.finding.code()
    );
    let message = e
        .validated
        .response
        .response
        .as_ref()
        .map(|r| r.result.message.clone())
        .unwrap_or_default();
    let report = format!(
        "{class}\npolicy: {}\nscenario: {s:?}\nskipped because: {call:?}\nstored namespaces: {:?}\n\
         driftguard: verdict {}, finding {:?}, drifted {:?}, message {message:?}\nparent: {}\nreview:\n{}",
        e.setup_name,
        e.case.namespaces,
        d.verdict.as_str(),
        d.finding,
        d.drifted_paths,
        e.case
            .parent
            .as_ref()
            .map_or("none".into(), |p| p.to_string()),
        serde_json::to_string_pretty(&a.admission_review()).expect("serializes"),
    );
    Failure { class, report }
}

/// The property, for one scenario.
fn check(setups: &[Setup], s: &Scenario) -> Result<(), Failure> {
    let e = evaluate(setups, s);
    for (hook, o) in e.validating.iter().chain(&e.mutating) {
        if !o.condition_errors.is_empty() {
            let call = Call::Rejected(o.condition_errors.join("; "));
            return Err(describe(
                &e,
                s,
                &format!("matchCondition error in {hook}"),
                &call,
            ));
        }
    }
    let validating = e.validating_call();
    match &validating {
        Call::Called => {}
        Call::Rejected(_) => return Err(describe(&e, s, "rejected without a call", &validating)),
        Call::Skipped(_) if e.allowed() || e.case.opted_out_before => {}
        Call::Skipped(_) => return Err(describe(&e, s, "validating bypass", &validating)),
    }
    let mutating = e.mutating_call();
    match &mutating {
        Call::Called => {}
        Call::Rejected(_) => return Err(describe(&e, s, "rejected without a call", &mutating)),
        Call::Skipped(_) if !e.patched() || e.case.opted_out_before => {}
        Call::Skipped(_) => return Err(describe(&e, s, "mutating patch lost", &mutating)),
    }
    Ok(())
}

/// An object's metadata; a third of them a Helm release's (with its release
/// annotation emptied in one of four), which the generated keys may override
/// or add tracking to.
fn meta() -> impl Strategy<Value = Meta> {
    (
        prop::collection::btree_map(0..LABELS.len(), 0..3usize, 0..4),
        prop::collection::btree_map(0..ANNOTATIONS.len(), 0..3usize, 0..3),
        prop::option::of(any::<bool>()),
        prop_oneof![8 => Just(None), 3 => Just(Some("web")), 1 => Just(Some(""))],
    )
        .prop_map(|(labels, annotations, owner, helm)| {
            let meta = Meta {
                labels: labels
                    .into_iter()
                    .map(|(k, v)| (LABELS[k].0, LABELS[k].1[v % LABELS[k].1.len()]))
                    .collect(),
                annotations: annotations
                    .into_iter()
                    .map(|(k, v)| {
                        (
                            ANNOTATIONS[k].0,
                            ANNOTATIONS[k].1[v % ANNOTATIONS[k].1.len()],
                        )
                    })
                    .collect(),
                owner,
            };
            match helm {
                Some(release) => meta.helm_release(release),
                None => meta,
            }
        })
}

fn edit() -> impl Strategy<Value = Edit> {
    let value = |values: &'static [&'static str], v: usize, remove: bool| {
        (!remove).then(|| values[v % values.len()])
    };
    prop_oneof![
        3 => (0..LABELS.len(), 0..3usize, prop::bool::weighted(0.3))
            .prop_map(move |(k, v, r)| Edit::Label(LABELS[k].0, value(LABELS[k].1, v, r))),
        3 => (0..ANNOTATIONS.len(), 0..3usize, prop::bool::weighted(0.3))
            .prop_map(move |(k, v, r)| Edit::Annotation(ANNOTATIONS[k].0, value(ANNOTATIONS[k].1, v, r))),
        1 => prop::option::of(any::<bool>()).prop_map(Edit::Owner),
        // The opt-out label, which matters on a Namespace.
        1 => prop::sample::select(vec![Some("true"), None]).prop_map(|v| Edit::Label(IGNORE_LABEL, v)),
        3 => Just(Edit::Body),
        1 => Just(Edit::Status),
    ]
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let policies: Vec<&'static str> = policies().iter().map(|(n, _)| *n).collect();
    // Half the writes by the policies' controllers and trusted identities
    // (the first seven), half by others.
    let (exempt, others) = IDENTITIES.split_at(7);
    let names = |ids: &[(&'static str, &[&str])]| ids.iter().map(|(u, _)| *u).collect::<Vec<_>>();
    let user = prop_oneof![
        prop::sample::select(names(exempt)),
        prop::sample::select(names(others))
    ];
    (
        (
            prop::sample::select(policies),
            0..RESOURCES.len(),
            0..4usize,
            0..3usize,
            user,
        ),
        (
            // Mostly namespaces that are not opted out by name.
            prop_oneof![
                3 => prop::sample::select(NAMESPACES[..2].to_vec()),
                1 => prop::sample::select(NAMESPACES[2..].to_vec()),
            ],
            prop::option::of(prop::sample::select(vec!["true", "false"])),
            meta(),
            prop::collection::vec(edit(), 0..4),
        ),
        (
            prop::sample::select(vec![0i64, 1, 3]),
            prop::sample::select(vec![0i64, 1, 3, 5]),
            any::<bool>(),
            prop::bool::weighted(0.1),
            prop::sample::select(TRACKINGS.to_vec()),
        ),
    )
        .prop_map(
            |(
                (policy, r, sub_pick, op_pick, user),
                (namespace, namespace_ignore, old, edits),
                (from, to, parent, dry_run, tracking),
            )| {
                let res = &RESOURCES[r];
                // The object itself half of the time, else a subresource it has.
                let subs: Vec<&'static str> = ["", ""]
                    .into_iter()
                    .chain(res.subresources.iter().copied())
                    .collect();
                let sub = subs[sub_pick % subs.len()];
                let operation = match sub {
                    "" => ["CREATE", "UPDATE", "DELETE"][op_pick],
                    "exec" => "CONNECT",
                    _ => "UPDATE",
                };
                Scenario {
                    policy,
                    resource: res.key,
                    sub,
                    operation,
                    user,
                    namespace,
                    namespace_ignore,
                    old,
                    edits,
                    replicas: (from, to),
                    parent,
                    dry_run,
                    tracking,
                }
            },
        )
}

/// The property over generated writes. The classes it found when written
/// (issue 19) are pinned below, each with the fix that closed it.
#[test]
fn a_write_the_apiserver_does_not_send_is_allowed() {
    let setups = setups();
    let mut runner = TestRunner::new(Config {
        cases: 2000,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&scenario(), |s| {
        check(&setups, &s).map_err(|f| TestCaseError::fail(f.report))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// The same property on a fixed seed, reported by class: every class of
/// counterexample among `CENSUS_CASES` (3,000) writes, with the smallest
/// example of each, so one run names all that broke, not the first.
#[test]
fn census() {
    let setups = setups();
    let mut runner = TestRunner::deterministic();
    let strategy = scenario();
    let mut classes: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let cases: usize = std::env::var("CENSUS_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3_000);
    for _ in 0..cases {
        let s = strategy
            .new_tree(&mut runner)
            .expect("a scenario")
            .current();
        if let Err(f) = check(&setups, &s) {
            let entry = classes.entry(f.class).or_insert((0, f.report.clone()));
            entry.0 += 1;
            if f.report.len() < entry.1.len() {
                entry.1 = f.report;
            }
        }
    }
    println!(
        "{} classes of counterexample in {cases} writes",
        classes.len()
    );
    for (class, (count, _)) in &classes {
        println!("{count:6}  {class}");
    }
    for (class, (_, example)) in &classes {
        println!("\n==== {class}\n{example}");
    }
    assert!(
        classes.is_empty(),
        "{} classes of counterexample: {:?}",
        classes.len(),
        classes.keys().collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------------------
// Shortcuts that are sound, each with the reason.

fn skipped_by(call: &Call, condition: &str) -> bool {
    matches!(call, Call::Skipped(Skip::MatchCondition(c)) if c == condition)
}

/// A DELETE of a ConfigMap without tracking metadata: `judge` reads ownership
/// from the stored object, which has none, so the decision is "not
/// GitOps-managed" whoever deletes it.
#[test]
fn an_unmanaged_configmap_delete_is_skipped_and_allowed() {
    let setups = setups();
    let s = Scenario::new("embedded", "/configmaps", "DELETE", "alice").label("team", "a");
    let e = evaluate(&setups, &s);
    assert!(
        skipped_by(&e.validating_call(), "only-gitops-managed-objects"),
        "{:?}",
        e.validating_call()
    );
    assert!(e.allowed());
    assert!(check(&setups, &s).is_ok());
}

/// Argo CD's application controller writing a tracked Deployment: `judge`
/// allows every write of an identity in `controllers`, whatever it changes.
#[test]
fn a_controller_write_is_skipped_and_allowed() {
    let setups = setups();
    for user in [
        "system:serviceaccount:argocd:argocd-application-controller",
        "system:serviceaccount:flux-system:kustomize-controller",
    ] {
        let s = Scenario::new("embedded", "apps/deployments", "UPDATE", user)
            .tracked()
            .edit(Edit::Body);
        let e = evaluate(&setups, &s);
        assert!(
            skipped_by(&e.validating_call(), "skip-gitops-and-trusted-identities"),
            "{user}: {:?}",
            e.validating_call()
        );
        assert!(e.allowed(), "{user}");
    }
}

/// argocd-server writes what people do in Argo CD's UI and API: it is not a
/// controller, so its write to a tracked object is sent and judged.
#[test]
fn an_argocd_server_write_is_sent_and_denied() {
    let setups = setups();
    let s = Scenario::new(
        "embedded",
        "apps/deployments",
        "UPDATE",
        "system:serviceaccount:argocd:argocd-server",
    )
    .tracked()
    .edit(Edit::Body);
    let e = evaluate(&setups, &s);
    assert!(
        !skipped_by(&e.validating_call(), "skip-gitops-and-trusted-identities"),
        "{:?}",
        e.validating_call()
    );
    assert!(!e.allowed());
    assert!(check(&setups, &s).is_ok());
}

/// `trusted` identities (`system:serviceaccount:kube-system:*`,
/// `system:node:*`, and groups where the policy names them): allowed by
/// `judge` before anything is compared. The CEL prefix is the glob's literal
/// part, so `kube-systemx` is neither skipped nor trusted.
#[test]
fn a_trusted_write_is_skipped_and_allowed() {
    let setups = setups();
    for (policy, user) in [
        ("embedded", "system:serviceaccount:kube-system:y"),
        ("embedded", "system:node:x"),
        ("argocd-off-trusted-groups", "bob"),
        ("argocd-off-trusted-groups", "carol"),
    ] {
        let s = Scenario::new(policy, "/configmaps", "UPDATE", user)
            .label("kustomize.toolkit.fluxcd.io/name", "apps")
            .edit(Edit::Body);
        let e = evaluate(&setups, &s);
        assert!(
            skipped_by(&e.validating_call(), "skip-gitops-and-trusted-identities"),
            "{user}: {:?}",
            e.validating_call()
        );
        assert!(e.allowed(), "{user}");
    }
    let s = Scenario::new(
        "embedded",
        "/configmaps",
        "UPDATE",
        "system:serviceaccount:kube-systemx:z",
    )
    .tracked()
    .edit(Edit::Body);
    let e = evaluate(&setups, &s);
    assert_eq!(e.validating_call(), Call::Called);
    assert!(!e.allowed());
}

/// `pods/exec` is a CONNECT: not in the rules' operations, and `judge` calls
/// CONNECT out of scope (it writes nothing).
#[test]
fn exec_is_not_registered_and_not_judged() {
    let setups = setups();
    let s = Scenario::new("embedded", "/pods", "CONNECT", "alice")
        .sub("exec")
        .tracked();
    let e = evaluate(&setups, &s);
    assert_eq!(e.validating_call(), Call::Skipped(Skip::Rules));
    assert!(e.allowed());
}

/// A managed object in a namespace the operator opted out (labelled
/// `driftguard.io/ignore: "true"` before the write, or named in the selector)
/// is not sent, and `judge`, which never sees namespace labels, would deny
/// the write: that is the documented opt-out, not a bypass.
#[test]
fn an_object_in_an_opted_out_namespace_is_the_operators_choice() {
    let setups = setups();
    for (namespace, ignore) in [
        ("production", Some("true")),
        ("kube-system", None),
        (OWN_NAMESPACE, None),
    ] {
        let s = Scenario::new("embedded", "apps/deployments", "UPDATE", "alice")
            .namespace(namespace, ignore)
            .tracked()
            .edit(Edit::Body);
        let e = evaluate(&setups, &s);
        assert!(
            matches!(
                e.validating_call(),
                Call::Skipped(Skip::NamespaceSelector {
                    from_object: false,
                    ..
                })
            ),
            "{namespace}: {:?}",
            e.validating_call()
        );
        assert!(!e.allowed(), "judge knows nothing of the opt-out");
        assert!(e.case.opted_out_before);
        assert!(check(&setups, &s).is_ok());
    }
    let s = Scenario::new("embedded", "apps/deployments", "UPDATE", "alice")
        .namespace("production", Some("false"))
        .tracked()
        .edit(Edit::Body);
    assert_eq!(evaluate(&setups, &s).validating_call(), Call::Called);
}

/// A Scale carries no labels, so every `scale` write by someone else than a
/// controller or trusted identity is sent, with or without tracking metadata
/// on the parent, and also `kubectl scale --replicas=0`, whose Scale omits
/// `spec.replicas`. What `judge` then answers is not the filter's concern.
#[test]
fn a_scale_write_is_always_sent() {
    let setups = setups();
    for (resource, replicas, tracked) in [
        ("apps/deployments", (3, 5), true),
        ("apps/deployments", (3, 0), true),
        ("argoproj.io/rollouts", (1, 3), false),
    ] {
        let mut s = Scenario::new("embedded", resource, "UPDATE", "alice").sub("scale");
        s.replicas = replicas;
        if tracked {
            s = s.tracked();
        }
        let e = evaluate(&setups, &s);
        assert_eq!(e.validating_call(), Call::Called, "{resource} {replicas:?}");
    }
}

/// A DELETE of a Namespace or a CRD is sent with any detector on: the
/// namespace may be an Application's destination or hold objects the tools
/// list, the CRD's custom resources may be listed, and what follows those
/// deletes is never judged. With every detector off only tracking metadata
/// could make them managed, and these have none: skipped, and allowed.
#[test]
fn namespace_and_crd_deletes_are_sent_wherever_a_detector_is_on() {
    let setups = setups();
    let crd = "apiextensions.k8s.io/customresourcedefinitions";
    for policy in ["embedded", "flux-off", "argocd-off-trusted-groups"] {
        let s =
            Scenario::new(policy, "/namespaces", "DELETE", "alice").namespace("production", None);
        let e = evaluate(&setups, &s);
        assert_eq!(e.validating_call(), Call::Called, "{policy}");
        // production holds a Flux Deployment and an Argo CD Rollout.
        assert!(!e.allowed(), "{policy}: {:?}", e.validated.decision);
        let e = evaluate(&setups, &Scenario::new(policy, crd, "DELETE", "alice"));
        assert_eq!(e.validating_call(), Call::Called, "{policy}");
        // Only Argo CD lists Rollouts.
        assert_eq!(
            e.allowed(),
            policy == "argocd-off-trusted-groups",
            "{policy}: {:?}",
            e.validated.decision
        );
    }
    for s in [
        Scenario::new("detectors-off", "/namespaces", "DELETE", "alice")
            .namespace("production", None),
        Scenario::new("detectors-off", crd, "DELETE", "alice"),
        // What the tools list is theirs to create only while their detector is on.
        Scenario::new("detectors-off", "apps/deployments", "CREATE", "alice"),
    ] {
        let e = evaluate(&setups, &s);
        assert!(
            matches!(e.validating_call(), Call::Skipped(_)),
            "{s:?}: {:?}",
            e.validating_call()
        );
        assert!(e.allowed(), "{s:?}: {:?}", e.validated.decision);
    }
    // The namespace controller's deletes of what is in it are skipped (trusted).
    let s = Scenario::new(
        "argocd-off-trusted-groups",
        "/configmaps",
        "DELETE",
        "system:serviceaccount:kube-system:y",
    )
    .namespace("dev-team", None)
    .label("kustomize.toolkit.fluxcd.io/name", "apps");
    let e = evaluate(&setups, &s);
    assert!(
        skipped_by(&e.validating_call(), "skip-gitops-and-trusted-identities"),
        "{:?}",
        e.validating_call()
    );
    assert!(e.allowed());
}

/// A CREATE that adds tracking metadata is sent (and denied): the condition
/// reads `object` as well as `oldObject`.
#[test]
fn a_create_with_tracking_metadata_is_sent_and_denied() {
    let setups = setups();
    let s = Scenario::new("embedded", "/configmaps", "CREATE", "alice").edit(Edit::Label(
        "kustomize.toolkit.fluxcd.io/name",
        Some("apps"),
    ));
    let e = evaluate(&setups, &s);
    assert_eq!(e.validating_call(), Call::Called);
    assert!(!e.allowed());
}

/// Helm sets `app.kubernetes.io/instance` and `meta.helm.sh/release-name` on
/// every object of a release, and the decision never claims such an object
/// for Argo CD (`ownership::claims`), however argocd-cm tracks: a person's
/// write to it is not sent, so `helm upgrade` and `helm rollback` work while
/// driftguard is down, driftguard's own ClusterRole (cluster-scoped, so no
/// namespaceSelector spares it) included. Its CREATE reaches only the
/// creates webhook, which fails open.
#[test]
fn a_helm_release_object_is_skipped_and_allowed() {
    let setups = setups();
    let clusterroles = "rbac.authorization.k8s.io/clusterroles";
    for tracking in TRACKINGS {
        for (resource, operation) in [
            (clusterroles, "UPDATE"),
            (clusterroles, "DELETE"),
            ("/configmaps", "UPDATE"),
            ("apps/deployments", "UPDATE"),
        ] {
            let s = Scenario::new("embedded", resource, operation, "alice")
                .helm_release()
                .tracking(tracking)
                .edit(Edit::Body);
            let e = evaluate(&setups, &s);
            assert!(
                skipped_by(&e.validating_call(), "only-gitops-managed-objects"),
                "{s:?}: {:?}",
                e.validating_call()
            );
            assert!(e.allowed(), "{s:?}: {:?}", e.validated.decision);
            check(&setups, &s).unwrap_or_else(|f| panic!("{}", f.report));
        }
        let create = Scenario::new("embedded", clusterroles, "CREATE", "alice")
            .helm_release()
            .tracking(tracking);
        let e = evaluate(&setups, &create);
        for (hook, outcome) in &e.validating {
            let creates = hook.starts_with("validate-creates.");
            assert_eq!(outcome.call == Call::Called, creates, "{hook}: {outcome:?}");
        }
        assert!(e.allowed(), "{create:?}: {:?}", e.validated.decision);
    }
}

/// A Helm release's object that another detector claims is sent and judged:
/// with Argo CD's tracking id, with Flux's helm-controller labels (it
/// installs with Helm, so its objects carry both), or with an empty release
/// annotation, which the decision reads as none.
#[test]
fn a_helm_release_object_with_another_claim_is_sent_and_denied() {
    let setups = setups();
    let update = || {
        Scenario::new("embedded", "/configmaps", "UPDATE", "alice")
            .helm_release()
            .edit(Edit::Body)
    };
    for tracking in TRACKINGS {
        for s in [
            update().tracked(),
            update()
                .label("helm.toolkit.fluxcd.io/name", "web")
                .label("helm.toolkit.fluxcd.io/namespace", "flux-system"),
            update().annotation("meta.helm.sh/release-name", ""),
        ] {
            let s = s.tracking(tracking);
            let e = evaluate(&setups, &s);
            assert_eq!(e.validating_call(), Call::Called, "{s:?}");
            assert!(!e.allowed(), "{s:?}: {:?}", e.validated.decision);
        }
    }
}

/// Under the embedded policy the mutating webhook is called only where warn
/// may apply: a write in a `dev-*` namespace, or to an object stored with
/// `driftguard.io/mode: warn`. Elsewhere `judge` never patches.
#[test]
fn the_mutating_webhook_is_skipped_only_where_no_patch_follows() {
    let setups = setups();
    let s = Scenario::new("embedded", "apps/deployments", "UPDATE", "alice")
        .tracked()
        .edit(Edit::Body);
    let e = evaluate(&setups, &s);
    assert!(skipped_by(
        &e.mutating_call(),
        "only-where-a-patch-may-follow"
    ));
    assert!(!e.patched());
    let e = evaluate(&setups, &s.clone().namespace("dev-team", None));
    assert_eq!(e.mutating_call(), Call::Called);
    assert!(e.patched());
}

// ---------------------------------------------------------------------------
// Known bypasses on this branch: each asserts the property, and fails until
// the filter and `judge` agree on it.

fn assert_sound(s: &Scenario) {
    let setups = setups();
    if let Err(f) = check(&setups, s) {
        panic!("{}", f.report);
    }
}

/// `endpoints` and `endpointslices` were left out by `exclude-unmanaged-kinds`,
/// while `judge` judges a tracked one like any object (Argo CD manages the
/// Endpoints of a selectorless Service from Git): now they are sent.
#[test]
fn endpoints_are_sent_and_judged() {
    assert_sound(
        &Scenario::new("embedded", "/endpoints", "UPDATE", "alice")
            .tracked()
            .edit(Edit::Body),
    );
    assert_sound(
        &Scenario::new(
            "embedded",
            "discovery.k8s.io/endpointslices",
            "UPDATE",
            "alice",
        )
        .tracked()
        .edit(Edit::Body),
    );
}

/// Labelling a tracked Namespace `driftguard.io/ignore=true` was skipped by
/// the namespaceSelector, which reads the incoming Namespace's labels: the
/// write that opts the namespace out was never judged. Namespaces now have a
/// webhook without a selector.
#[test]
fn a_namespace_cannot_exempt_itself() {
    assert_sound(
        &Scenario::new("embedded", "/namespaces", "UPDATE", "alice")
            .namespace("production", None)
            .tracked()
            .edit(Edit::Label(IGNORE_LABEL, Some("true"))),
    );
    assert_sound(
        &Scenario::new("embedded", "/namespaces", "CREATE", "alice")
            .namespace("production", None)
            .edit(Edit::Label(IGNORE_LABEL, Some("true")))
            .edit(Edit::Label("app.kubernetes.io/instance", Some("myapp"))),
    );
}

/// The other kinds `exclude-unmanaged-kinds` leaves out (events, leases, ...)
/// were judged by `judge` when they carried tracking metadata: now both read
/// one list, and `judge` calls them out of scope.
#[test]
fn excluded_kinds_are_skipped_and_out_of_scope() {
    for resource in [
        "coordination.k8s.io/leases",
        "events.k8s.io/events",
        "/events",
    ] {
        assert_sound(
            &Scenario::new("embedded", resource, "UPDATE", "alice")
                .tracked()
                .edit(Edit::Body),
        );
    }
}

/// A `status` write can change annotations (and a Namespace's labels):
/// `judge` judges it like an update, and the rules (`*/*`) send it.
#[test]
fn a_status_write_changing_metadata_is_sound() {
    for (resource, edit) in [
        (
            "apps/deployments",
            Edit::Annotation("driftguard.io/mode", Some("audit")),
        ),
        ("/namespaces", Edit::Label(IGNORE_LABEL, Some("true"))),
        (
            "argoproj.io/rollouts",
            Edit::Annotation("argocd.argoproj.io/tracking-id", None),
        ),
    ] {
        assert_sound(
            &Scenario::new("embedded", resource, "UPDATE", "alice")
                .sub("status")
                .tracked()
                .edit(edit)
                .edit(Edit::Status),
        );
    }
}

/// A scaler carries no tracking metadata, yet a hand-made one at a managed
/// target makes the HPA controller (skipped by identity) write its replicas:
/// its CREATE and its spec UPDATE are sent and judged as that scale write.
/// Its DELETE, its status (the status strategies keep the stored spec) and
/// the controllers' own writes stay skipped, and are allowed.
#[test]
fn a_scaler_write_is_sent_and_judged_as_its_scale_write() {
    let setups = setups();
    for resource in SCALERS {
        let create = Scenario::new("embedded", resource, "CREATE", "alice");
        let e = evaluate(&setups, &create);
        assert_eq!(e.validating_call(), Call::Called, "{resource}");
        assert!(!e.allowed(), "{resource}");
        assert_sound(&create);
        let update = Scenario::new("embedded", resource, "UPDATE", "alice").edit(Edit::Body);
        let e = evaluate(&setups, &update);
        assert_eq!(e.validating_call(), Call::Called, "{resource}");
        assert!(!e.allowed(), "{resource}");
        for s in [
            Scenario::new("embedded", resource, "DELETE", "alice"),
            Scenario::new("embedded", resource, "UPDATE", "alice")
                .sub("status")
                .edit(Edit::Body),
            Scenario::new(
                "embedded",
                resource,
                "CREATE",
                "system:serviceaccount:kube-system:y",
            ),
        ] {
            let e = evaluate(&setups, &s);
            assert_ne!(e.validating_call(), Call::Called, "{s:?}");
            assert_sound(&s);
        }
    }
}
