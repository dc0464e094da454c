//! The two-step invariant, shared by the property test (tests/sequences.rs)
//! and the fuzz target (fuzz/fuzz_targets/two_step.rs).
//!
//! For a manual writer (neither controller nor trusted, not allowed to break
//! glass): if W2 applied to the stored object S is denied, then after any
//! allowed W1, the same W2 applied to W1(S) is still denied.
//!
//! The oracle is the invariant itself over verdicts of the public `judge`: it
//! calls none of the engine's helpers. A scenario is decoded from bytes, so the
//! property test and the fuzzer explore the same space.
// The fuzz target includes this file by `#[path]` (fuzz/ is its own workspace)
// and uses only part of it.
#![allow(dead_code)]

use driftguard::{Endpoint, Policy, judge};
use serde_json::{Value, json};

pub const NOW: &str = "2026-11-29T10:00:00Z";
const USER: &str = "alice";
const GROUPS: [&str; 2] = ["developers", "system:authenticated"];

/// Ignore rules a policy may combine; the metadata ones are the dangerous ones.
pub const RULES: [&str; 12] = [
    "{group: '*', kind: '*', jsonPointers: [/metadata]}",
    "{group: '*', kind: '*', jsonPointers: [/metadata/annotations]}",
    "{group: '*', kind: '*', jsonPointers: [/metadata/labels]}",
    "{group: '*', kind: '*', jsonPointers: [/metadata/ownerReferences]}",
    "{group: '*', kind: '*', jqPathExpressions: ['.metadata.annotations | select(. != null)']}",
    "{group: '*', kind: '*', jqPathExpressions: ['.metadata.labels']}",
    "{group: '*', kind: '*', managedFieldsManagers: [hpa]}",
    "{group: '*', kind: '*', managedFieldsManagers: [argocd-controller]}",
    "{group: apps, kind: Deployment, jsonPointers: [/spec/replicas]}",
    "{group: '', kind: ConfigMap, jsonPointers: [/data/REGION]}",
    "{group: '*', kind: '*', jsonPointers: [/spec/paused]}",
    "{group: '*', kind: '*', jqPathExpressions: ['.metadata']}",
];

/// Label and annotation keys a first write may add, change or remove.
const LABELS: [&str; 9] = [
    "app.kubernetes.io/instance",
    "driftguard.io/break-glass",
    "kustomize.toolkit.fluxcd.io/name",
    "kustomize.toolkit.fluxcd.io/namespace",
    "helm.toolkit.fluxcd.io/name",
    "helm.toolkit.fluxcd.io/namespace",
    "kustomize.toolkit.fluxcd.io/reconcile",
    "helm.toolkit.fluxcd.io/driftDetection",
    "team",
];
const ANNOTATIONS: [&str; 11] = [
    "argocd.argoproj.io/tracking-id",
    "driftguard.io/break-glass-paused",
    "driftguard.io/mode",
    "driftguard.io/break-glass",
    "driftguard.io/break-glass-expires",
    "meta.helm.sh/release-name",
    "kustomize.toolkit.fluxcd.io/reconcile",
    "helm.toolkit.fluxcd.io/driftDetection",
    "kubectl.kubernetes.io/last-applied-configuration",
    "driftguard.io/drift",
    "team",
];
const VALUES: [&str; 12] = [
    "audit",
    "warn",
    "disabled",
    "other",
    "",
    "myapp",
    "other:apps/Deployment:production/other",
    "2026-11-29T11:00:00Z",
    "{}",
    "flux-system",
    "true",
    "kustomize.toolkit.fluxcd.io/reconcile",
];

/// Spec fields a denied second write changes, per kind.
pub fn judged_fields(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Deployment => &[
            "/spec/replicas",
            "/spec/paused",
            "/spec/template/spec/containers/0/image",
        ],
        Kind::ConfigMap => &["/data/LOG_LEVEL", "/data/REGION"],
        Kind::Service => &["/spec/ports/0/port", "/spec/type"],
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Deployment,
    ConfigMap,
    Service,
}

#[derive(Clone, Copy, Debug)]
pub enum Manager {
    ArgoAnnotation,
    ArgoLabel,
    FluxKustomization,
    FluxHelm,
}

#[derive(Clone, Debug)]
pub enum Edit {
    Label(&'static str, Option<&'static str>),
    Annotation(&'static str, Option<&'static str>),
    ControllerOwner(bool),
    ClearOwners,
    /// A finalizer added (what blocks the tool's prune).
    Finalizer,
    /// A manager named in managedFields takes a field (client-chosen fieldManager).
    Claim(&'static str, &'static str),
    /// A manager's managedFields entry is removed.
    Disown(&'static str),
    /// A judged field edited; allowed only if ignored.
    Field(&'static str, i64),
    /// What the expiry sweeper writes: the break-glass annotations, the pause
    /// marker, the label and the opt-out the marker names, removed.
    EndBreakGlass,
}

#[derive(Clone, Debug)]
pub enum Second {
    Field(&'static str, i64),
    Delete,
    /// `kubectl scale` of a Deployment to this many replicas (0 is sent
    /// without `spec.replicas`, as autoscaling/v1 does).
    Scale(i64),
}

#[derive(Clone, Debug)]
pub struct Scenario {
    pub rules: Vec<&'static str>,
    pub owned_fields: bool,
    pub kind: Kind,
    pub manager: Manager,
    pub first: Vec<Edit>,
    pub second: Second,
    /// The second write moves field ownership to the writer, as the apiserver
    /// does for an Update; otherwise it keeps managedFields as stored (a
    /// client posing as the owning manager).
    pub honest_second: bool,
    /// The stored object carries an expired break-glass armed by the plugin:
    /// the pause marker, the label and, for Flux, the opt-out it set.
    pub paused: bool,
    /// The first write goes through the `status` subresource: the apiserver
    /// keeps its metadata and resets the rest to the stored object.
    pub first_via_status: bool,
}

/// Reads choices from bytes; running out of bytes reads zeros.
struct Bytes<'a>(std::slice::Iter<'a, u8>);

impl Bytes<'_> {
    fn next(&mut self) -> usize {
        self.0.next().copied().unwrap_or(0) as usize
    }
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.next() % items.len()]
    }
    fn flag(&mut self) -> bool {
        self.next() % 2 == 1
    }
}

impl Scenario {
    pub fn from_bytes(data: &[u8]) -> Self {
        let mut b = Bytes(data.iter());
        let rules = (0..b.next() % 4).map(|_| b.pick(&RULES)).collect();
        let owned_fields = b.next() % 4 == 0;
        let kind = b.pick(&[Kind::Deployment, Kind::ConfigMap, Kind::Service]);
        let manager = b.pick(&[
            Manager::ArgoAnnotation,
            Manager::ArgoLabel,
            Manager::FluxKustomization,
            Manager::FluxHelm,
        ]);
        let fields = judged_fields(kind);
        let first = (0..1 + b.next() % 3)
            .map(|_| {
                let value = |b: &mut Bytes| (!b.next().is_multiple_of(4)).then(|| b.pick(&VALUES));
                match b.next() % 9 {
                    0 | 1 => Edit::Annotation(b.pick(&ANNOTATIONS), value(&mut b)),
                    2 => Edit::Label(b.pick(&LABELS), value(&mut b)),
                    3 => Edit::ControllerOwner(b.flag()),
                    4 => Edit::ClearOwners,
                    5 => Edit::Claim(
                        b.pick(&["hpa", "argocd-controller", "kustomize-controller"]),
                        b.pick(fields),
                    ),
                    6 => {
                        Edit::Disown(b.pick(&["hpa", "argocd-controller", "kustomize-controller"]))
                    }
                    7 => Edit::Field(b.pick(fields), 1 + (b.next() % 3) as i64),
                    _ => Edit::EndBreakGlass,
                }
            })
            .collect();
        let second = match b.next() % 5 {
            0 => Second::Delete,
            1 if kind == Kind::Deployment => Second::Scale(b.pick(&[0, 7])),
            _ => Second::Field(b.pick(fields), 7),
        };
        Scenario {
            rules,
            owned_fields,
            kind,
            manager,
            first,
            second,
            honest_second: b.flag(),
            paused: b.flag(),
            first_via_status: b.flag() && kind != Kind::ConfigMap,
        }
    }

    fn policy(&self) -> Policy {
        let mut text = String::from(
            "breakGlass: {allowedGroups: [sre], maxDuration: 4h}\nignoreDifferences:\n",
        );
        for r in &self.rules {
            text.push_str(&format!("  - {r}\n"));
        }
        if self.rules.is_empty() {
            text = text.replace("ignoreDifferences:\n", "");
        }
        if self.owned_fields {
            text.push_str("precision: ownedFields\n");
        }
        Policy::from_yaml(&text, "two-step.yaml").expect("the scenario policy loads")
    }

    /// The stored object: managed, with SSA managedFields for the GitOps tool
    /// and an `hpa` manager, and a last-applied annotation.
    pub fn stored(&self) -> Value {
        let (api_version, kind, name, body) = match self.kind {
            Kind::Deployment => (
                "apps/v1",
                "Deployment",
                "web",
                json!({"spec": {"replicas": 3, "paused": false, "selector": {"matchLabels": {"app": "web"}},
                       "template": {"metadata": {"labels": {"app": "web"}},
                                    "spec": {"containers": [{"name": "web", "image": "web:1"}]}}}}),
            ),
            Kind::ConfigMap => (
                "v1",
                "ConfigMap",
                "web-config",
                json!({"data": {"LOG_LEVEL": "info", "REGION": "eu"}}),
            ),
            Kind::Service => (
                "v1",
                "Service",
                "web",
                json!({"spec": {"type": "ClusterIP", "selector": {"app": "web"},
                       "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}),
            ),
        };
        let group = api_version.split_once('/').map_or("", |(g, _)| g);
        let (labels, annotations) = match self.manager {
            Manager::ArgoAnnotation => (
                json!({"app": "web"}),
                json!({"argocd.argoproj.io/tracking-id": format!("myapp:{group}/{kind}:production/{name}")}),
            ),
            Manager::ArgoLabel => (
                json!({"app": "web", "app.kubernetes.io/instance": "myapp"}),
                json!({}),
            ),
            Manager::FluxKustomization => (
                json!({"app": "web", "kustomize.toolkit.fluxcd.io/name": "apps",
                       "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}),
                json!({}),
            ),
            Manager::FluxHelm => (
                json!({"app": "web", "helm.toolkit.fluxcd.io/name": "web",
                       "helm.toolkit.fluxcd.io/namespace": "flux-system"}),
                json!({}),
            ),
        };
        let tool = match self.manager {
            Manager::ArgoAnnotation | Manager::ArgoLabel => "argocd-controller",
            _ => "kustomize-controller",
        };
        let first_field = judged_fields(self.kind)[0];
        let mut obj = json!({
            "apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": "production", "uid": "u-1", "resourceVersion": "10",
                         "labels": labels, "annotations": annotations,
                         "managedFields": [
                             entry(tool, "Apply", &judged_fields(self.kind)[1..]),
                             entry("hpa", "Update", &[first_field]),
                         ]},
        });
        for (k, v) in body.as_object().expect("an object") {
            obj[k] = v.clone();
        }
        let applied = json!({"metadata": {"labels": obj["metadata"]["labels"]}}).to_string();
        obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
            json!(applied);
        if self.paused {
            let opt_out = match self.manager {
                Manager::FluxKustomization => Some("kustomize.toolkit.fluxcd.io/reconcile"),
                Manager::FluxHelm => Some("helm.toolkit.fluxcd.io/driftDetection"),
                Manager::ArgoAnnotation | Manager::ArgoLabel => None,
            };
            let a = &mut obj["metadata"]["annotations"];
            a["driftguard.io/break-glass"] = json!("INC-1");
            a["driftguard.io/break-glass-expires"] = json!("2026-11-29T09:00:00Z");
            a["driftguard.io/break-glass-paused"] =
                json!(opt_out.unwrap_or("argocd.argoproj.io/skip-reconcile"));
            if let Some(key) = opt_out {
                a[key] = json!("disabled");
            }
            obj["metadata"]["labels"]["driftguard.io/break-glass"] = json!("true");
        }
        obj
    }

    /// Whether the invariant holds; the error says how it broke.
    pub fn check(&self) -> Result<(), String> {
        let policy = self.policy();
        let stored = self.stored();
        let Some(denied_on_stored) = self.second_verdict(&policy, &stored) else {
            return Ok(());
        };
        if denied_on_stored {
            let after = self.after_first(&stored);
            if self.decide_first(&policy, &stored, &after)? {
                let denied_after = self.second_verdict(&policy, &after).unwrap_or(false);
                if !denied_after {
                    return Err(format!(
                        "bypass: W1 {:?} was allowed, and then W2 {:?} was allowed, which is denied on the stored object",
                        self.first, self.second
                    ));
                }
            }
        }
        Ok(())
    }

    /// Whether W1 on the stored object is allowed.
    pub fn first_allowed(&self) -> Result<bool, String> {
        let stored = self.stored();
        let after = self.after_first(&stored);
        self.decide_first(&self.policy(), &stored, &after)
    }

    /// The object W1 leaves: through `status`, only metadata survives the
    /// apiserver's status strategy (more than any real one keeps: stricter).
    fn after_first(&self, stored: &Value) -> Value {
        let mut after = stored.clone();
        for e in &self.first {
            apply(&mut after, e);
        }
        if self.first_via_status {
            for (k, v) in stored.as_object().expect("an object") {
                if k != "metadata" {
                    after[k] = v.clone();
                }
            }
        }
        after
    }

    fn decide_first(&self, policy: &Policy, stored: &Value, after: &Value) -> Result<bool, String> {
        let sub = if self.first_via_status { "status" } else { "" };
        decide_write(policy, "UPDATE", Some(stored), Some(after), sub, None)
    }

    /// `Some(true)` when W2 on `stored` is denied.
    fn second_verdict(&self, policy: &Policy, stored: &Value) -> Option<bool> {
        let allowed = match &self.second {
            Second::Delete => decide(policy, "DELETE", Some(stored), None),
            Second::Scale(replicas) => {
                let scale = |r: i64| {
                    let mut s = json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
                        "metadata": {"name": stored["metadata"]["name"], "namespace": "production"},
                        "spec": {}, "status": {"replicas": 3}});
                    if r != 0 {
                        s["spec"]["replicas"] = json!(r);
                    }
                    s
                };
                let current = stored.pointer("/spec/replicas").and_then(Value::as_i64);
                let (old, new) = (scale(current.unwrap_or(0)), scale(*replicas));
                decide_write(
                    policy,
                    "UPDATE",
                    Some(&old),
                    Some(&new),
                    "scale",
                    Some(stored),
                )
            }
            Second::Field(field, value) => {
                let mut new = stored.clone();
                set(&mut new, field, json!(value));
                if self.honest_second {
                    move_ownership(&mut new, field);
                }
                decide(policy, "UPDATE", Some(stored), Some(&new))
            }
        };
        allowed.ok().map(|a| !a)
    }
}

fn entry(manager: &str, operation: &str, fields: &[&str]) -> Value {
    let mut set = json!({});
    for f in fields {
        insert_field(&mut set, f);
    }
    json!({"manager": manager, "operation": operation, "apiVersion": "v1",
           "time": "2026-11-29T09:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": set})
}

/// Adds `pointer` to a FieldsV1 set; list items are keyed by name or index.
fn insert_field(set: &mut Value, pointer: &str) {
    let mut node = set;
    for token in pointer[1..].split('/') {
        let key = match token.parse::<usize>() {
            Ok(i) => format!("i:{i}"),
            Err(_) => format!("f:{token}"),
        };
        node = node
            .as_object_mut()
            .expect("a fields map")
            .entry(key)
            .or_insert_with(|| json!({}));
    }
}

/// Removes `pointer` from a FieldsV1 set and prunes the maps it leaves empty,
/// as the apiserver does (an empty `{}` would mean "owns the whole node").
fn remove_field(set: &mut Value, pointer: &str) {
    let keys: Vec<String> = pointer[1..]
        .split('/')
        .map(|t| match t.parse::<usize>() {
            Ok(i) => format!("i:{i}"),
            Err(_) => format!("f:{t}"),
        })
        .collect();
    remove_keys(set, &keys);
}

fn remove_keys(node: &mut Value, keys: &[String]) -> bool {
    let Some(map) = node.as_object_mut() else {
        return false;
    };
    let Some((first, rest)) = keys.split_first() else {
        return false;
    };
    if rest.is_empty() {
        map.remove(first.as_str()).is_some()
    } else {
        let Some(child) = map.get_mut(first.as_str()) else {
            return false;
        };
        let removed = remove_keys(child, rest);
        if removed && child.as_object().is_some_and(|m| m.is_empty()) {
            map.remove(first.as_str());
        }
        removed
    }
}

/// As the apiserver does for an Update: the writer's manager takes the field.
fn move_ownership(obj: &mut Value, field: &str) {
    let entries = obj["metadata"]["managedFields"]
        .as_array_mut()
        .expect("managedFields");
    for e in entries.iter_mut() {
        remove_field(&mut e["fieldsV1"], field);
    }
    entries.retain(|e| e["fieldsV1"].as_object().is_some_and(|m| !m.is_empty()));
    entries.push(entry("kubectl-edit", "Update", &[field]));
}

pub fn set(obj: &mut Value, pointer: &str, value: Value) {
    let tokens: Vec<&str> = pointer[1..].split('/').collect();
    let mut node = obj;
    for t in &tokens[..tokens.len() - 1] {
        node = match t.parse::<usize>() {
            Ok(i) => &mut node[i],
            Err(_) => &mut node[*t],
        };
    }
    node[*tokens.last().expect("a token")] = value;
}

pub fn apply(obj: &mut Value, edit: &Edit) {
    let meta = &mut obj["metadata"];
    match edit {
        Edit::Label(k, v) | Edit::Annotation(k, v) => {
            let section = if matches!(edit, Edit::Label(..)) {
                "labels"
            } else {
                "annotations"
            };
            let map = meta[section].as_object_mut().expect("a map");
            match v {
                Some(v) => {
                    map.insert(k.to_string(), json!(v));
                }
                None => {
                    map.remove(*k);
                }
            }
        }
        Edit::ControllerOwner(controller) => {
            meta["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "x", "uid": "u-2", "controller": controller}]);
        }
        Edit::Finalizer => meta["finalizers"] = json!(["example.com/keep"]),
        Edit::ClearOwners => {
            meta.as_object_mut()
                .expect("metadata")
                .remove("ownerReferences");
        }
        Edit::Claim(manager, field) => {
            let entries = meta["managedFields"].as_array_mut().expect("managedFields");
            match entries.iter_mut().find(|e| e["manager"] == json!(manager)) {
                Some(e) => insert_field(&mut e["fieldsV1"], field),
                None => entries.push(entry(manager, "Apply", &[field])),
            }
        }
        Edit::Disown(manager) => {
            meta["managedFields"]
                .as_array_mut()
                .expect("managedFields")
                .retain(|e| e["manager"] != json!(manager));
        }
        Edit::Field(field, value) => set(obj, field, json!(value)),
        Edit::EndBreakGlass => {
            let annotations = meta["annotations"].as_object_mut().expect("a map");
            let marker = annotations
                .get("driftguard.io/break-glass-paused")
                .and_then(Value::as_str)
                .map(str::to_owned);
            for k in [
                "driftguard.io/break-glass",
                "driftguard.io/break-glass-expires",
                "driftguard.io/break-glass-paused",
            ] {
                annotations.remove(k);
            }
            if let Some(m) = marker.filter(|m| m.contains("toolkit.fluxcd.io")) {
                annotations.remove(&m);
            }
            meta["labels"]
                .as_object_mut()
                .expect("a map")
                .remove("driftguard.io/break-glass");
        }
    }
}

/// The verdict of the public decision for a manual write by alice.
fn decide(
    policy: &Policy,
    operation: &str,
    old: Option<&Value>,
    new: Option<&Value>,
) -> Result<bool, String> {
    decide_write(policy, operation, old, new, "", None)
}

/// [`decide`] through a subresource; a scale write names the parent's
/// resource (Deployments) and passes the parent.
fn decide_write(
    policy: &Policy,
    operation: &str,
    old: Option<&Value>,
    new: Option<&Value>,
    sub_resource: &str,
    parent: Option<&Value>,
) -> Result<bool, String> {
    let body = review(operation, old, new, sub_resource);
    let now = NOW.parse().expect("a time");
    let judged =
        judge(policy, &body, Endpoint::Validate, parent, now).map_err(|e| e.to_string())?;
    Ok(judged.response.response.as_ref().is_some_and(|r| r.allowed))
}

fn review(operation: &str, old: Option<&Value>, new: Option<&Value>, sub: &str) -> Vec<u8> {
    review_by(USER, &GROUPS, operation, old, new, sub)
}

/// A review of a write by `user` in `groups`.
pub fn review_by(
    user: &str,
    groups: &[&str],
    operation: &str,
    old: Option<&Value>,
    new: Option<&Value>,
    sub: &str,
) -> Vec<u8> {
    let obj = new.or(old).expect("an object");
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = obj["kind"].as_str().unwrap_or_default();
    let (resource_group, resource) = if sub == "scale" {
        ("apps", "deployments".to_owned())
    } else {
        (group, format!("{}s", kind.to_lowercase()))
    };
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "00000000-0000-4000-8000-000000000002",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": resource_group, "version": "v1", "resource": resource},
        "subResource": (!sub.is_empty()).then_some(sub),
        "name": obj["metadata"]["name"], "namespace": "production", "operation": operation,
        "userInfo": {"username": user, "groups": groups},
        "object": new, "oldObject": old, "dryRun": false}});
    serde_json::to_vec(&review).expect("a review serializes")
}
