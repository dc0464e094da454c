//! Builders for real-shaped objects and AdmissionReviews, shared by the tests.

use driftguard::{Decision, Endpoint, Policy, judge};
use jiff::Timestamp;
use serde_json::{Value, json};

pub const NOW: &str = "2026-11-29T10:00:00Z";
pub const ARGO: &str = "system:serviceaccount:argocd:argocd-application-controller";
pub const HPA: &str = "system:serviceaccount:kube-system:horizontal-pod-autoscaler";

pub fn now() -> Timestamp {
    NOW.parse().unwrap()
}

pub fn repo_file(path: &str) -> String {
    std::fs::read_to_string(format!("{}/{path}", crate::process::ROOT)).unwrap()
}

pub fn seed_policy() -> Policy {
    Policy::from_yaml(
        &repo_file("tests/data/seed/ignore-differences.yaml"),
        "ignore-differences.yaml",
    )
    .unwrap()
}

pub fn seed_application() -> Vec<driftguard::policy::Application> {
    driftguard::policy::argocd::parse(
        &repo_file("tests/data/seed/argocd-application.yaml"),
        "app.yaml",
    )
    .unwrap()
    .applications
}

fn managed(api_version: &str, kind: &str, name: &str, body: Value) -> Value {
    let (group, _) = api_version.split_once('/').unwrap_or(("", api_version));
    let mut obj = json!({
        "apiVersion": api_version, "kind": kind,
        "metadata": {
            "name": name, "namespace": "production", "uid": format!("uid-{name}"),
            "resourceVersion": "100", "generation": 3, "creationTimestamp": "2026-10-01T00:00:00Z",
            "labels": {"app.kubernetes.io/name": name},
            "annotations": {"argocd.argoproj.io/tracking-id": format!("myapp:{group}/{kind}:production/{name}")},
            "managedFields": [{"manager": "argocd-controller", "operation": "Apply", "apiVersion": api_version,
                               "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {}}}}]
        }
    });
    for (k, v) in body.as_object().unwrap() {
        obj[k] = v.clone();
    }
    obj
}

fn pod_spec(containers: Value) -> Value {
    json!({"containers": containers, "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
           "terminationGracePeriodSeconds": 30, "schedulerName": "default-scheduler", "securityContext": {}})
}

pub fn deployment() -> Value {
    managed(
        "apps/v1",
        "Deployment",
        "web",
        json!({
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": pod_spec(json!([{"name": "web", "image": "web:1.0", "ports": [{"containerPort": 8080, "protocol": "TCP"}]}]))}},
            "status": {"replicas": 3, "readyReplicas": 3}
        }),
    )
}

pub fn statefulset() -> Value {
    managed(
        "apps/v1",
        "StatefulSet",
        "db",
        json!({
            "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                     "template": {"metadata": {"labels": {"app": "db"}},
                                  "spec": pod_spec(json!([{"name": "db", "image": "postgres:16"}]))}}
        }),
    )
}

pub fn service() -> Value {
    managed(
        "v1",
        "Service",
        "web",
        json!({
            "spec": {"type": "ClusterIP", "clusterIP": "10.0.0.12", "selector": {"app": "web"},
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}
        }),
    )
}

pub fn configmap() -> Value {
    managed(
        "v1",
        "ConfigMap",
        "web-config",
        json!({"data": {"LOG_LEVEL": "info", "REGION": "eu"}}),
    )
}

pub fn cronjob() -> Value {
    managed(
        "batch/v1",
        "CronJob",
        "report",
        json!({
            "spec": {"schedule": "0 2 * * *", "suspend": false, "concurrencyPolicy": "Forbid",
                     "jobTemplate": {"spec": {"template": {"spec": pod_spec(json!([{"name": "report", "image": "report:2"}]))}}}}
        }),
    )
}

pub fn resourcequota() -> Value {
    managed(
        "v1",
        "ResourceQuota",
        "team",
        json!({
            "spec": {"hard": {"cpu": "20", "memory": "64Gi"}},
            "status": {"hard": {"cpu": "20", "memory": "64Gi"}, "used": {"cpu": "3", "memory": "10Gi"}}
        }),
    )
}

pub fn ingress() -> Value {
    managed(
        "networking.k8s.io/v1",
        "Ingress",
        "web",
        json!({
            "spec": {"ingressClassName": "nginx", "rules": [{"host": "shop.example.com", "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}
        }),
    )
}

pub fn pod_with_sidecar() -> Value {
    managed(
        "v1",
        "Pod",
        "batch-runner",
        json!({
            "spec": pod_spec(json!([
                {"name": "runner", "image": "runner:1"},
                {"name": "istio-proxy", "image": "istio/proxyv2:1.22.0", "args": ["proxy", "sidecar"]}
            ]))
        }),
    )
}

pub fn plural(kind: &str) -> String {
    let lower = kind.to_lowercase();
    if lower.ends_with('s') {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    }
}

/// A review builder with sensible defaults: UPDATE by alice (group developers).
#[derive(Clone)]
pub struct Review {
    pub operation: &'static str,
    pub old: Option<Value>,
    pub new: Option<Value>,
    pub user: String,
    pub groups: Vec<String>,
    pub sub_resource: Option<&'static str>,
    pub dry_run: bool,
    pub kind_override: Option<(String, String, String)>,
    pub resource_override: Option<(String, String)>,
}

impl Review {
    pub fn update(old: Value, new: Value) -> Self {
        Self::new("UPDATE", Some(old), Some(new))
    }
    pub fn create(new: Value) -> Self {
        Self::new("CREATE", None, Some(new))
    }
    pub fn delete(old: Value) -> Self {
        Self::new("DELETE", Some(old), None)
    }
    fn new(operation: &'static str, old: Option<Value>, new: Option<Value>) -> Self {
        Self {
            operation,
            old,
            new,
            user: "alice".into(),
            groups: vec!["developers".into(), "system:authenticated".into()],
            sub_resource: None,
            dry_run: false,
            kind_override: None,
            resource_override: None,
        }
    }
    pub fn by(mut self, user: &str, groups: &[&str]) -> Self {
        self.user = user.into();
        self.groups = groups.iter().map(|g| g.to_string()).collect();
        self
    }
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }
    /// A `…/scale` write of `from` → `to` replicas on `parent_kind` (group apps).
    pub fn scale(resource: &str, name: &str, from: i64, to: i64) -> Self {
        let scale = |r: i64| {
            json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": name, "namespace": "production", "resourceVersion": "100"},
            "spec": {"replicas": r}, "status": {"replicas": from}})
        };
        let mut review = Self::update(scale(from), scale(to));
        review.sub_resource = Some("scale");
        review.kind_override = Some(("autoscaling".into(), "v1".into(), "Scale".into()));
        review.resource_override = Some(("apps".into(), resource.into()));
        review
    }

    pub fn body(&self) -> Value {
        let obj = self.new.as_ref().or(self.old.as_ref()).unwrap();
        let api_version = obj["apiVersion"].as_str().unwrap();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let kind = obj["kind"].as_str().unwrap();
        let (kg, kv, kk) =
            self.kind_override
                .clone()
                .unwrap_or((group.into(), version.into(), kind.into()));
        let (rg, rr) = self
            .resource_override
            .clone()
            .unwrap_or((group.into(), plural(kind)));
        let mut request = json!({
            "uid": "c0ffee00-0000-4000-8000-000000000001",
            "kind": {"group": kg, "version": kv, "kind": kk},
            "resource": {"group": rg, "version": "v1", "resource": rr},
            "name": obj["metadata"]["name"], "namespace": "production",
            "operation": self.operation,
            "userInfo": {"username": self.user, "groups": self.groups},
            "object": self.new, "oldObject": self.old, "dryRun": self.dry_run,
        });
        if let Some(sub) = self.sub_resource {
            request["subResource"] = json!(sub);
        }
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    }
}

pub struct Outcome {
    pub decision: Decision,
    pub response: Value,
}

impl Outcome {
    pub fn allowed(&self) -> bool {
        self.response["response"]["allowed"].as_bool().unwrap()
    }
    pub fn message(&self) -> String {
        self.response["response"]["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
    pub fn warnings(&self) -> Vec<String> {
        self.response["response"]["warnings"]
            .as_array()
            .map(|w| w.iter().map(|s| s.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default()
    }
    pub fn audit(&self, key: &str) -> Option<String> {
        self.response["response"]["auditAnnotations"][key]
            .as_str()
            .map(str::to_owned)
    }
}

pub fn run_with(
    policy: &Policy,
    review: &Review,
    endpoint: Endpoint,
    parent: Option<&Value>,
) -> Outcome {
    let body = serde_json::to_vec(&review.body()).unwrap();
    let judged = judge(policy, &body, endpoint, parent, now()).unwrap();
    Outcome {
        response: serde_json::from_slice(&judged.to_json()).unwrap(),
        decision: judged.decision,
    }
}

pub fn run(policy: &Policy, review: &Review) -> Outcome {
    run_with(policy, review, Endpoint::Validate, None)
}

/// The decision on `review` under `policy`, with what the watches read
/// from the cluster (`sources`).
pub fn decided_with(
    policy: &Policy,
    review: &Review,
    sources: &driftguard::sources::Sources,
) -> driftguard::drift::Decision {
    let body = serde_json::to_vec(&review.body()).unwrap();
    let req = driftguard::request::parse(&body).unwrap();
    driftguard::judge_request(
        policy,
        &req,
        Endpoint::Validate,
        None,
        Some(sources),
        now(),
        &driftguard::deadline::Deadline::none(),
    )
    .unwrap()
    .decision
}

/// `obj` with `value` written at RFC 6901 `pointer` (parents created as objects).
pub fn with(obj: &Value, pointer: &str, value: Value) -> Value {
    let mut out = obj.clone();
    let tokens: Vec<String> = pointer[1..]
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    let mut node = &mut out;
    for t in &tokens[..tokens.len() - 1] {
        node = match node {
            Value::Array(items) => &mut items[t.parse::<usize>().unwrap()],
            _ => node
                .as_object_mut()
                .unwrap()
                .entry(t.clone())
                .or_insert_with(|| json!({})),
        };
    }
    let last = tokens.last().unwrap();
    match node {
        Value::Array(items) => items[last.parse::<usize>().unwrap()] = value,
        _ => {
            node[last.as_str()] = value;
        }
    }
    out
}

pub fn without(obj: &Value, pointer: &str) -> Value {
    let mut out = obj.clone();
    let (parent, last) = pointer.rsplit_once('/').unwrap();
    let last = last.replace("~1", "/").replace("~0", "~");
    match out.pointer_mut(parent).unwrap() {
        Value::Object(m) => {
            m.remove(&last);
        }
        Value::Array(a) => {
            a.remove(last.parse::<usize>().unwrap());
        }
        _ => panic!("not a container"),
    }
    out
}
