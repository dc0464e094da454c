//! The generative oracle's edits: Git's manifests for every kind the tools
//! apply, and edits generated from the live object's own tree (a declared
//! leaf changed, a defaulted leaf changed, a declared map key or list entry
//! removed, an undeclared field added, or several at once), each turned into
//! the kubectl command a person would run (`patch` of the three types,
//! `replace`, `apply` client- and server-side, `label`, `annotate`) under
//! kubectl's field manager or a script's own. Everything is drawn from a
//! seeded [`Rng`], so a run replays from its printed seed.
use serde_json::{Map, Value, json};

/// xorshift64*: reproducible from the printed seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n.max(1)
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        (!items.is_empty()).then(|| &items[self.below(items.len())])
    }
}

/// `ORACLE_SEED`, or one from the clock (printed, to replay a run).
pub fn seed() -> u64 {
    std::env::var("ORACLE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
        })
}

/// A kind the tools apply: its `kind`, `apiVersion` and kubectl's
/// fully qualified resource name.
pub struct Kind {
    pub kind: &'static str,
    pub api_version: &'static str,
    pub resource: &'static str,
}

const fn k(kind: &'static str, api_version: &'static str, resource: &'static str) -> Kind {
    Kind {
        kind,
        api_version,
        resource,
    }
}

pub const KINDS: &[Kind] = &[
    k("Deployment", "apps/v1", "deployments.apps"),
    k("StatefulSet", "apps/v1", "statefulsets.apps"),
    k("DaemonSet", "apps/v1", "daemonsets.apps"),
    k("Service", "v1", "services"),
    k("ConfigMap", "v1", "configmaps"),
    k("Secret", "v1", "secrets"),
    k("ServiceAccount", "v1", "serviceaccounts"),
    k(
        "Role",
        "rbac.authorization.k8s.io/v1",
        "roles.rbac.authorization.k8s.io",
    ),
    k(
        "RoleBinding",
        "rbac.authorization.k8s.io/v1",
        "rolebindings.rbac.authorization.k8s.io",
    ),
    k(
        "NetworkPolicy",
        "networking.k8s.io/v1",
        "networkpolicies.networking.k8s.io",
    ),
    k(
        "HorizontalPodAutoscaler",
        "autoscaling/v2",
        "horizontalpodautoscalers.autoscaling",
    ),
    k(
        "PodDisruptionBudget",
        "policy/v1",
        "poddisruptionbudgets.policy",
    ),
    k("CronJob", "batch/v1", "cronjobs.batch"),
    k(
        "Ingress",
        "networking.k8s.io/v1",
        "ingresses.networking.k8s.io",
    ),
    k(
        "Widget",
        "oracle.example.com/v1",
        "widgets.oracle.example.com",
    ),
];

/// The custom resource's definition, installed by the test: a schema with
/// typed fields, a free map, a list, and room for fields it does not name.
pub const WIDGET_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.oracle.example.com}
spec:
  group: oracle.example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              x-kubernetes-preserve-unknown-fields: true
              properties:
                size: {type: integer, minimum: 0}
                color: {type: string}
                tags: {type: object, additionalProperties: {type: string}}
                ports: {type: array, items: {type: integer}}
"#;

/// The kubectl resource name of `kind`.
pub fn resource(kind: &str) -> &'static str {
    KINDS
        .iter()
        .find(|k| k.kind == kind)
        .map(|k| k.resource)
        .unwrap_or_else(|| panic!("no kind {kind}"))
}

/// `kubectl get` of every oracle kind at once.
pub fn all_resources() -> String {
    KINDS
        .iter()
        .map(|k| k.resource)
        .collect::<Vec<_>>()
        .join(",")
}

fn pod_template(name: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": name}},
        "spec": {"containers": [{
            "name": "app",
            "image": "nginx:1.27",
            "args": ["--port=8080"],
            "env": [{"name": "MODE", "value": "live"}, {"name": "LEVEL", "value": "info"}],
            "ports": [{"name": "http", "containerPort": 8080}]
        }]}
    })
}

/// Object `i` (kind `i % KINDS.len()`) as Git declares it.
pub fn manifest(namespace: &str, i: usize) -> Value {
    let kind = &KINDS[i % KINDS.len()];
    let name = format!("o{i}");
    let selector = json!({"matchLabels": {"app": name}});
    let spec = match kind.kind {
        "Deployment" => {
            json!({"spec": {"replicas": 2, "selector": selector, "template": pod_template(&name)}})
        }
        "StatefulSet" => {
            json!({"spec": {"replicas": 1, "serviceName": name, "selector": selector, "template": pod_template(&name)}})
        }
        "DaemonSet" => json!({"spec": {"selector": selector, "template": pod_template(&name)}}),
        "Service" => json!({"spec": {"selector": {"app": name}, "ports": [
            {"name": "http", "port": 80, "targetPort": 8080},
            {"name": "metrics", "port": 9090, "targetPort": 9090}]}}),
        "ConfigMap" => json!({"data": {"LOG_LEVEL": "info", "MODE": "live"}}),
        // "s3cret" and "shop"
        "Secret" => json!({"type": "Opaque", "data": {"token": "czNjcmV0", "user": "c2hvcA=="}}),
        "ServiceAccount" => {
            json!({"automountServiceAccountToken": false, "imagePullSecrets": [{"name": "regcred"}]})
        }
        "Role" => json!({"rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]}]}),
        "RoleBinding" => json!({
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}]}),
        "NetworkPolicy" => json!({"spec": {
            "podSelector": selector,
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "frontend"}}}],
                         "ports": [{"protocol": "TCP", "port": 8080}]}]}}),
        "HorizontalPodAutoscaler" => json!({"spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 1, "maxReplicas": 3,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]}}),
        "PodDisruptionBudget" => json!({"spec": {"minAvailable": 1, "selector": selector}}),
        "CronJob" => {
            json!({"spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "job", "image": "busybox:1.36", "args": ["run"]}]}}}}}})
        }
        "Ingress" => {
            json!({"spec": {"rules": [{"host": format!("{name}.example.com"), "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}})
        }
        _ => {
            json!({"spec": {"size": 3, "color": "blue", "tags": {"tier": "web"}, "ports": [8080, 9090]}})
        }
    };
    let mut object = json!({
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"team": "shop"},
            "annotations": {"example.com/owner": "shop"}
        }
    });
    for (key, value) in spec.as_object().unwrap() {
        object[key] = value.clone();
    }
    object
}

/// `count` objects as one multi-document file for Git (JSON is YAML).
pub fn manifests(namespace: &str, count: usize) -> String {
    (0..count)
        .map(|i| manifest(namespace, i).to_string())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// The object without what the apiserver keeps for itself: status and the
/// metadata no person writes.
pub fn clean(object: &Value) -> Value {
    let mut out = object.clone();
    if let Some(map) = out.as_object_mut() {
        map.remove("status");
    }
    if let Some(meta) = out["metadata"].as_object_mut() {
        for key in [
            "managedFields",
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "generation",
            "selfLink",
        ] {
            meta.remove(key);
        }
    }
    out
}

pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Labels and annotations that are the tools' own bookkeeping (tracking,
/// inventory, last-applied): not edits a person makes to the workload.
fn bookkeeping(key: &str) -> bool {
    key.contains("argocd.argoproj.io") || key.contains("toolkit.fluxcd.io") || key == LAST_APPLIED
}

/// RFC 6901 escaping of one segment.
pub fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

fn unescape(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

/// Whether a person may touch this path at all: spec-like fields, labels
/// and annotations, but not identity, bookkeeping or status.
fn editable(path: &str) -> bool {
    if path == "/apiVersion" || path == "/kind" || path.starts_with("/status") {
        return false;
    }
    if let Some(rest) = path.strip_prefix("/metadata/") {
        let mut parts = rest.splitn(2, '/');
        let head = parts.next().unwrap_or_default();
        let key = parts.next().map(unescape);
        return matches!(head, "labels" | "annotations") && key.is_some_and(|k| !bookkeeping(&k));
    }
    true
}

/// The fields that key the entries of the lists these kinds hold. A
/// changed or removed key is a new entry to server-side apply: the tool's
/// next apply adds Git's entry back beside it, which the apiserver refuses
/// (a duplicate name), and Argo CD's Server-Side Diff then fails for the
/// whole Application. Not an edit a person can make and have answered.
fn list_key(path: &str) -> bool {
    let mut segments = path.rsplit('/');
    let (last, parent) = (segments.next().unwrap_or_default(), segments.next());
    matches!(
        last,
        "name" | "containerPort" | "port" | "protocol" | "mountPath" | "ip"
    ) && parent.is_some_and(|p| p.parse::<usize>().is_ok())
}

/// Every scalar leaf of `value` under `prefix`, as (pointer, value).
pub fn leaves(value: &Value, prefix: &str, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                leaves(v, &format!("{prefix}/{}", escape(key)), out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                leaves(v, &format!("{prefix}/{i}"), out);
            }
        }
        other => out.push((prefix.to_owned(), other.clone())),
    }
}

/// Every map key and list entry of `value` under `prefix` (what a removal
/// can take away).
fn members(value: &Value, prefix: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                let path = format!("{prefix}/{}", escape(key));
                out.push(path.clone());
                members(v, &path, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let path = format!("{prefix}/{i}");
                out.push(path.clone());
                members(v, &path, out);
            }
        }
        _ => {}
    }
}

/// The maps anyone may add keys to, and lists one may append an entry to.
fn open_containers(value: &Value, prefix: &str, maps: &mut Vec<String>, lists: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            let last = prefix.rsplit('/').next().unwrap_or_default();
            if matches!(
                last,
                "labels" | "annotations" | "data" | "matchLabels" | "nodeSelector" | "tags"
            ) || (last == "selector" && map.values().all(Value::is_string))
            {
                maps.push(prefix.to_owned());
            }
            for (key, v) in map {
                open_containers(v, &format!("{prefix}/{}", escape(key)), maps, lists);
            }
        }
        Value::Array(items) => {
            if !items.is_empty() {
                lists.push(prefix.to_owned());
            }
            for (i, v) in items.iter().enumerate() {
                open_containers(v, &format!("{prefix}/{i}"), maps, lists);
            }
        }
        _ => {}
    }
}

/// What one edit does to the tree.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Replace the value at an existing path.
    Set(String, Value),
    /// Remove a map key or list entry.
    Remove(String),
    /// Add a map key (its map exists) or append a list entry (`…/-`).
    Add(String, Value),
}

impl Op {
    pub fn path(&self) -> &str {
        match self {
            Op::Set(p, _) | Op::Remove(p) | Op::Add(p, _) => p,
        }
    }

    fn json_patch(&self) -> Value {
        match self {
            Op::Set(p, v) => json!({"op": "replace", "path": p, "value": v}),
            Op::Remove(p) => json!({"op": "remove", "path": p}),
            Op::Add(p, v) => json!({"op": "add", "path": p, "value": v}),
        }
    }
}

/// Applies `op` to `target`; false when it no longer applies (an earlier op
/// of the same edit took its place away).
pub fn apply_op(target: &mut Value, op: &Op) -> bool {
    let path = op.path();
    let Some((parent_path, last)) = path.rsplit_once('/') else {
        return false;
    };
    let last = unescape(last);
    let Some(parent) = target.pointer_mut(parent_path) else {
        return false;
    };
    match (op, parent) {
        (Op::Set(_, v), Value::Object(map)) if map.contains_key(&last) => {
            map.insert(last, v.clone());
        }
        (Op::Add(_, v), Value::Object(map)) if !map.contains_key(&last) => {
            map.insert(last, v.clone());
        }
        (Op::Remove(_), Value::Object(map)) if map.contains_key(&last) => {
            map.remove(&last);
        }
        (Op::Add(_, v), Value::Array(items)) if last == "-" => items.push(v.clone()),
        (Op::Set(_, v), Value::Array(items)) => match last.parse::<usize>() {
            Ok(i) if i < items.len() => items[i] = v.clone(),
            _ => return false,
        },
        (Op::Remove(_), Value::Array(items)) => match last.parse::<usize>() {
            Ok(i) if i < items.len() => {
                items.remove(i);
            }
            _ => return false,
        },
        _ => return false,
    }
    true
}

/// The way a person writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Method {
    PatchJson,
    PatchMerge,
    PatchStrategic,
    Replace,
    Apply,
    ApplyServerSide,
    Label,
    Annotate,
}

pub const METHODS: [Method; 8] = [
    Method::PatchJson,
    Method::PatchMerge,
    Method::PatchStrategic,
    Method::Replace,
    Method::Apply,
    Method::ApplyServerSide,
    Method::Label,
    Method::Annotate,
];

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::PatchJson => "patch --type=json",
            Method::PatchMerge => "patch --type=merge",
            Method::PatchStrategic => "patch --type=strategic",
            Method::Replace => "replace",
            Method::Apply => "apply",
            Method::ApplyServerSide => "apply --server-side",
            Method::Label => "label",
            Method::Annotate => "annotate",
        }
    }

    /// kubectl's own field manager for this command.
    pub fn default_manager(self) -> &'static str {
        match self {
            Method::PatchJson | Method::PatchMerge | Method::PatchStrategic => "kubectl-patch",
            Method::Replace => "kubectl-replace",
            Method::Apply => "kubectl-client-side-apply",
            Method::ApplyServerSide => "kubectl",
            Method::Label => "kubectl-label",
            Method::Annotate => "kubectl-annotate",
        }
    }
}

/// A script's own field manager.
pub const SCRIPT_MANAGER: &str = "ops-script";

/// What an edit changes, for the tables (the verdicts are judged from the
/// objects, never from this).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Shape {
    DeclaredLeaf,
    DefaultedLeaf,
    Removed,
    Added,
    Several,
}

impl Shape {
    pub fn name(self) -> &'static str {
        match self {
            Shape::DeclaredLeaf => "declared leaf changed",
            Shape::DefaultedLeaf => "defaulted leaf changed",
            Shape::Removed => "declared key or entry removed",
            Shape::Added => "undeclared field added",
            Shape::Several => "several at once",
        }
    }
}

/// One planned edit of one object.
#[derive(Clone, Debug)]
pub struct Edit {
    pub kind: String,
    pub name: String,
    pub namespace: String,
    pub shape: Shape,
    pub method: Method,
    /// `--field-manager`, or `None` for kubectl's own.
    pub manager: Option<&'static str>,
    pub ops: Vec<Op>,
    /// The object as the person means it to be (clean, from the live one).
    pub target: Value,
}

impl Edit {
    pub fn manager_name(&self) -> &'static str {
        self.manager.unwrap_or(self.method.default_manager())
    }

    /// kubectl's arguments and standard input for this edit.
    pub fn command(&self, before: &Value) -> (Vec<String>, Option<String>) {
        let mut args: Vec<String> = vec!["-n".into(), self.namespace.clone()];
        let target = format!("{}/{}", resource(&self.kind), self.name);
        let mut stdin = None;
        let patch = |kind: &str, body: Value| {
            vec![
                "patch".to_owned(),
                target.clone(),
                format!("--type={kind}"),
                "-p".to_owned(),
                body.to_string(),
            ]
        };
        let without_last_applied = || {
            let mut config = self.target.clone();
            if let Some(a) = config["metadata"]["annotations"].as_object_mut() {
                a.remove(LAST_APPLIED);
            }
            config.to_string()
        };
        match self.method {
            Method::PatchJson => args.extend(patch(
                "json",
                Value::Array(self.ops.iter().map(Op::json_patch).collect()),
            )),
            Method::PatchMerge => {
                args.extend(patch("merge", merge_patch(&clean(before), &self.target)))
            }
            Method::PatchStrategic => args.extend(patch(
                "strategic",
                merge_patch(&clean(before), &self.target),
            )),
            Method::Replace => {
                args.extend(["replace".into(), "-f".into(), "-".into()]);
                stdin = Some(self.target.to_string());
            }
            Method::Apply => {
                args.extend(["apply".into(), "-f".into(), "-".into()]);
                stdin = Some(without_last_applied());
            }
            Method::ApplyServerSide => {
                args.extend([
                    "apply".into(),
                    "--server-side".into(),
                    "--force-conflicts".into(),
                    "-f".into(),
                    "-".into(),
                ]);
                stdin = Some(without_last_applied());
            }
            Method::Label | Method::Annotate => {
                args.push(
                    if self.method == Method::Label {
                        "label"
                    } else {
                        "annotate"
                    }
                    .into(),
                );
                args.extend([target.clone(), "--overwrite".into()]);
                for op in &self.ops {
                    let key = unescape(op.path().rsplit('/').next().unwrap_or_default());
                    args.push(match op {
                        Op::Set(_, v) | Op::Add(_, v) => {
                            format!("{key}={}", v.as_str().unwrap_or_default())
                        }
                        Op::Remove(_) => format!("{key}-"),
                    });
                }
            }
        }
        if let Some(m) = self.manager {
            args.push(format!("--field-manager={m}"));
        }
        (args, stdin)
    }
}

/// RFC 7386: the merge patch that turns `from` into `to` (lists whole).
pub fn merge_patch(from: &Value, to: &Value) -> Value {
    match (from, to) {
        (Value::Object(a), Value::Object(b)) => {
            let mut out = Map::new();
            for (key, old) in a {
                match b.get(key) {
                    None => {
                        out.insert(key.clone(), Value::Null);
                    }
                    Some(new) if new != old => {
                        out.insert(key.clone(), merge_patch(old, new));
                    }
                    _ => {}
                }
            }
            for (key, new) in b {
                if !a.contains_key(key) {
                    out.insert(key.clone(), new.clone());
                }
            }
            Value::Object(out)
        }
        (_, to) => to.clone(),
    }
}

/// The pointers where `a` and `b` differ, as deep as both have the same shape.
pub fn changed_paths(a: &Value, b: &Value, prefix: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for key in keys {
                let path = format!("{prefix}/{}", escape(key));
                match (x.get(key), y.get(key)) {
                    (Some(v), Some(w)) => changed_paths(v, w, &path, out),
                    _ => out.push(path),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let path = format!("{prefix}/{i}");
                match (x.get(i), y.get(i)) {
                    (Some(v), Some(w)) => changed_paths(v, w, &path, out),
                    _ => out.push(path),
                }
            }
        }
        (v, w) if v != w => out.push(prefix.to_owned()),
        _ => {}
    }
}

/// What a write changed between two versions of the object: the changed
/// paths of the clean objects (kubectl's last-applied record included: it is
/// part of the write, and Flux removes it).
pub fn edited_paths(before: &Value, after: &Value) -> Vec<String> {
    let mut out = Vec::new();
    changed_paths(&clean(before), &clean(after), "", &mut out);
    out
}

/// [`edited_paths`] with each list of keyed entries in `after` put in
/// `before`'s order first: an entry inserted before Git's moves Git's entry,
/// which the tools find by its key (`name`, or `containerPort` or `port`
/// with `protocol`), not its position. For the by-design rule only.
pub fn edited_paths_by_key(before: &Value, after: &Value) -> Vec<String> {
    let mut aligned = clean(after);
    align(&clean(before), &mut aligned);
    let mut out = Vec::new();
    changed_paths(&clean(before), &aligned, "", &mut out);
    out
}

fn entry_key(entry: &Value) -> Option<String> {
    ["name", "containerPort", "port"]
        .iter()
        .find_map(|k| entry.get(*k))
        .map(|v| format!("{v}/{}", entry["protocol"]))
}

fn align(before: &Value, after: &mut Value) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (k, v) in a.iter_mut() {
                if let Some(bv) = b.get(k) {
                    align(bv, v);
                }
            }
        }
        (Value::Array(b), Value::Array(a)) => {
            let keys: Option<Vec<String>> = b.iter().chain(a.iter()).map(entry_key).collect();
            if keys.is_some() {
                let position = |e: &Value| {
                    let key = entry_key(e);
                    b.iter()
                        .position(|x| entry_key(x) == key)
                        .unwrap_or(usize::MAX)
                };
                a.sort_by_key(position);
            }
            for (bv, av) in b.iter().zip(a.iter_mut()) {
                align(bv, av);
            }
        }
        _ => {}
    }
}

/// Whether Git's manifest declares the path (a removed entry or key that
/// Git has, a leaf Git sets). The rule that classifies "stricter by design".
pub fn declared(manifest: &Value, path: &str) -> bool {
    manifest.pointer(path).is_some()
}

pub fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A different value for the leaf at `path`, of the kind the field takes
/// (an enum's other member, a port, an image tag); the apiserver may still
/// reject it, which the oracle counts apart.
pub fn mutate(kind: &str, path: &str, value: &Value, n: usize) -> Value {
    let key = unescape(path.rsplit('/').next().unwrap_or_default());
    let tag = format!("e{n}");
    if kind == "Secret" && path.starts_with("/data/") {
        return json!(base64(tag.as_bytes()));
    }
    match value {
        Value::Bool(b) => json!(!b),
        Value::Number(num) => {
            let v = num.as_i64().unwrap_or(0);
            if key.to_lowercase().contains("port") || key == "number" {
                json!(10000 + (n % 5000) as i64)
            } else if v >= 1_000_000 {
                json!(v + 1)
            } else {
                json!(v + 1 + (n % 3) as i64)
            }
        }
        Value::String(s) => {
            let choices: &[&str] = match (key.as_str(), s.as_str()) {
                ("imagePullPolicy", _) => &["Always", "IfNotPresent", "Never"],
                ("protocol", _) => &["TCP", "UDP"],
                ("restartPolicy", _) => &["Never", "OnFailure", "Always"],
                ("dnsPolicy", _) => &["ClusterFirst", "Default"],
                ("terminationMessagePolicy", _) => &["File", "FallbackToLogsOnError"],
                ("sessionAffinity", _) => &["None", "ClientIP"],
                ("concurrencyPolicy", _) => &["Allow", "Forbid", "Replace"],
                ("pathType", _) => &["Prefix", "Exact", "ImplementationSpecific"],
                ("internalTrafficPolicy", _) => &["Cluster", "Local"],
                ("podManagementPolicy", _) => &["OrderedReady", "Parallel"],
                (_, "RollingUpdate") if kind == "Deployment" => &["Recreate"],
                (_, "RollingUpdate") => &["OnDelete"],
                (_, "ClusterIP") => &["NodePort"],
                ("schedule", _) => return json!(format!("{} 4 * * *", n % 60)),
                ("image", _) => {
                    let repo = s.split(':').next().unwrap_or("nginx");
                    return json!(format!("{repo}:{tag}"));
                }
                (_, p) if p.ends_with('%') => return json!(format!("{}%", 10 + n % 80)),
                _ => &[],
            };
            let others: Vec<&&str> = choices.iter().filter(|c| **c != s).collect();
            match others.get(n % others.len().max(1)) {
                Some(other) => json!(other),
                None => json!(format!("{s}-{tag}")),
            }
        }
        _ => json!(tag),
    }
}

/// What an undeclared addition puts into a map at `map_path`.
fn new_entry(kind: &str, map_path: &str, n: usize) -> (String, Value) {
    let last = map_path.rsplit('/').next().unwrap_or_default();
    match last {
        "labels" | "matchLabels" | "selector" | "nodeSelector" => (
            format!("example.com/by-hand-{}", n % 7),
            json!(format!("e{n}")),
        ),
        "annotations" => (
            format!("example.com/note-{}", n % 7),
            json!(format!("e{n}")),
        ),
        "data" if kind == "Secret" => (format!("EXTRA_{}", n % 7), json!(base64(b"extra"))),
        _ => (format!("EXTRA_{}", n % 7), json!(format!("e{n}"))),
    }
}

/// A new entry for the list at `list_path`, shaped like its last entry.
fn new_item(list: &[Value], n: usize) -> Value {
    let last = list.last().cloned().unwrap_or(Value::Null);
    match last {
        Value::Object(mut map) => {
            for (key, value) in map.iter_mut() {
                if key == "name" {
                    *value = json!(format!("extra-{n}"));
                } else if key.to_lowercase().contains("port") && value.is_number() {
                    *value = json!(20000 + n % 5000);
                }
            }
            Value::Object(map)
        }
        Value::Number(_) => json!(20000 + n % 5000),
        _ => json!(format!("extra-{n}")),
    }
}

/// Generates one edit of `live` (the object after the tool applied
/// `manifest`) with `method`: ops drawn from the live tree, the target the
/// ops make.
pub fn generate(rng: &mut Rng, manifest: &Value, live: &Value, method: Method) -> Edit {
    let kind = live["kind"].as_str().unwrap_or_default();
    let base = clean(live);
    let metadata_only = matches!(method, Method::Label | Method::Annotate);
    let section = if method == Method::Label {
        "/metadata/labels"
    } else {
        "/metadata/annotations"
    };
    let in_section = |p: &str| !metadata_only || p.starts_with(&format!("{section}/"));

    let mut all_leaves = Vec::new();
    leaves(&base, "", &mut all_leaves);
    all_leaves.retain(|(p, _)| editable(p) && in_section(p) && !list_key(p));
    let (declared_leaves, defaulted_leaves): (Vec<_>, Vec<_>) = all_leaves
        .into_iter()
        .partition(|(p, _)| declared(manifest, p));
    let mut removable = Vec::new();
    members(manifest, "", &mut removable);
    removable.retain(|p| {
        editable(p)
            && in_section(p)
            && !list_key(p)
            && p.matches('/').count() >= 2
            && base.pointer(p).is_some()
    });
    let (mut maps, mut lists) = (Vec::new(), Vec::new());
    open_containers(&base, "", &mut maps, &mut lists);
    maps.retain(|p| !metadata_only || p == section);
    if metadata_only {
        lists.clear();
    }
    if base.pointer(section).is_none() {
        maps.push(section.to_owned());
    }
    let template_annotations = "/spec/template/metadata/annotations";
    if !metadata_only
        && base.pointer("/spec/template/metadata").is_some()
        && base.pointer(template_annotations).is_none()
    {
        maps.push(template_annotations.to_owned());
    }

    let one = |rng: &mut Rng, shape: Shape| -> Option<Op> {
        let n = rng.below(100_000);
        match shape {
            Shape::DeclaredLeaf | Shape::DefaultedLeaf => {
                let pool = if shape == Shape::DeclaredLeaf {
                    &declared_leaves
                } else {
                    &defaulted_leaves
                };
                let (path, value) = rng.pick(pool)?;
                Some(Op::Set(path.clone(), mutate(kind, path, value, n)))
            }
            Shape::Removed => rng.pick(&removable).map(|p| Op::Remove(p.clone())),
            _ => {
                if !lists.is_empty() && rng.below(3) == 0 {
                    let list = rng.pick(&lists)?;
                    let items = base.pointer(list)?.as_array()?;
                    return Some(Op::Add(format!("{list}/-"), new_item(items, n)));
                }
                let map = rng.pick(&maps)?;
                let (key, value) = new_entry(kind, map, n);
                Some(match base.pointer(map) {
                    Some(m) if m.get(&key).is_none() => {
                        Op::Add(format!("{map}/{}", escape(&key)), value)
                    }
                    Some(_) => Op::Set(format!("{map}/{}", escape(&key)), value),
                    None => Op::Add(map.clone(), json!({key: value})),
                })
            }
        }
    };
    let singles = [
        Shape::DeclaredLeaf,
        Shape::DefaultedLeaf,
        Shape::Removed,
        Shape::Added,
    ];
    let shape = *rng
        .pick(&[
            Shape::DeclaredLeaf,
            Shape::DefaultedLeaf,
            Shape::Removed,
            Shape::Added,
            Shape::Several,
        ])
        .unwrap();
    let mut ops = Vec::new();
    let wanted = if shape == Shape::Several {
        2 + rng.below(2)
    } else {
        1
    };
    for _ in 0..12 {
        if ops.len() >= wanted {
            break;
        }
        let s = if shape == Shape::Several {
            *rng.pick(&singles).unwrap()
        } else {
            shape
        };
        // A shape the object offers nothing for (no defaulted label, say)
        // falls back to the next one, so every object gets an edit.
        let op = one(rng, s)
            .map(|op| (s, op))
            .or_else(|| singles.iter().find_map(|s| one(rng, *s).map(|op| (*s, op))));
        if let Some((s, op)) = op
            && !ops.iter().any(|(_, o): &(Shape, Op)| {
                o.path().starts_with(op.path()) || op.path().starts_with(o.path())
            })
        {
            ops.push((s, op));
        }
    }
    let mut target = base.clone();
    ops.retain(|(_, op)| apply_op(&mut target, op));
    let shape = match ops.as_slice() {
        [(one, _)] => *one,
        _ => Shape::Several,
    };
    let ops = ops.into_iter().map(|(_, op)| op).collect();
    Edit {
        kind: kind.to_owned(),
        name: live["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        namespace: live["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        shape,
        method,
        manager: None,
        ops,
        target,
    }
}
