//! The kube-apiserver's side of an admission webhook: given a webhook of a
//! `ValidatingWebhookConfiguration` (or `MutatingWebhookConfiguration`) and
//! one write, does the apiserver call the webhook, skip it, or fail the write?
//!
//! Followed, from kubernetes/kubernetes `staging/src/k8s.io/apiserver/pkg/admission/plugin/`:
//!
//! - `webhook/generic/webhook.go`: `Dispatch` never calls any webhook for
//!   `IsExemptAdmissionConfigurationResource` (webhook configurations and
//!   admission policies themselves), nor, from v1.37
//!   (`ExcludeAdmissionWebhookVirtualResources`), for the token, subject access
//!   and self-subject reviews, which no write here is about and which are
//!   not modelled (the model calls more, never fewer); `ShouldCallHook` checks, in this order,
//!   the namespaceSelector, the objectSelector, the rules (with
//!   `matchPolicy: Equivalent` it then tries the request's equivalent
//!   resources; with `apiGroups`/`apiVersions` `*` the request's own resource
//!   already decides, so equivalents are not modelled), and only then the
//!   matchConditions. A selector error matters only when the rules match.
//! - `webhook/predicates/rules/rules.go`: scope, operation, group, version, and
//!   `resource/subresource` with `splitResource`: `*` matches every resource
//!   and only the empty subresource, `*/scale` the `scale` subresource of every
//!   resource, `*/*` everything. A namespace object is cluster-scoped; the
//!   request's namespace of a Namespace is its own name.
//! - `webhook/predicates/namespace/matcher.go`: a cluster-scoped request that is
//!   not about `namespaces` always matches; for a CREATE or UPDATE of a
//!   Namespace itself (no subresource) the selector reads the labels of the
//!   incoming object (`attr.GetObject()`), otherwise those of the stored
//!   Namespace named by the request's namespace (the lister: for a DELETE of a
//!   Namespace, its stored labels). A namespace that does not exist fails the
//!   write (404).
//! - `webhook/predicates/object/matcher.go`: an empty objectSelector matches;
//!   otherwise the new or the old object's labels must match.
//! - `webhook/matchconditions/matcher.go`: every condition is evaluated; any
//!   `false` skips the webhook (even next to errors); otherwise any error fails
//!   the write under `failurePolicy: Fail` (skips it under `Ignore`).
//! - `cel/filter.go` (`ForInput`, `CreateAdmissionRequest`) and
//!   `cel/activation.go` (`UnstructuredReflectToVal`): `object` and `oldObject`
//!   are the versioned objects as unstructured maps, `null` when absent
//!   (`object` on DELETE, `oldObject` on CREATE); `request` is an
//!   `admission/v1` `AdmissionRequest` as unstructured JSON, so a field tagged
//!   `omitempty` is absent when empty (`subResource`, `name`, `namespace`,
//!   `userInfo.username`, `userInfo.groups`, ...) and `has()` tells; its
//!   `object`, `oldObject` and `uid` are left unset.
//!
//! The CEL interpreter is the `cel` crate (cel-rust), with the standard
//! library and macros (`has`, `exists`); it has no type checker, so an
//! expression that the apiserver would refuse to compile is only caught when
//! it fails to evaluate.
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use cel::{Context, Env, Program};
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, RuleWithOperations, ValidatingWebhook,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Map, Value, json};

/// Labels by key.
pub type Labels = BTreeMap<String, String>;

/// The Namespaces the apiserver's lister holds (name → labels), as stored
/// before the write.
pub type Namespaces = BTreeMap<String, Labels>;

/// One write, as the apiserver's `admission.Attributes` carry it.
#[derive(Clone, Debug)]
pub struct Attributes {
    /// CREATE, UPDATE, DELETE or CONNECT.
    pub operation: String,
    /// `request.resource`: group, version, resource.
    pub resource: (String, String, String),
    /// `request.subResource`, empty for the object itself.
    pub sub_resource: String,
    /// `request.kind`: group, version, kind (`autoscaling/v1 Scale` for scale).
    pub kind: (String, String, String),
    /// The object's name.
    pub name: String,
    /// Empty for cluster-scoped objects and a Namespace's CREATE; the
    /// Namespace's own name for its other requests.
    pub namespace: String,
    /// `userInfo.username`.
    pub username: String,
    /// `userInfo.groups`.
    pub groups: Vec<String>,
    /// The incoming object (none on DELETE).
    pub object: Option<Value>,
    /// The stored object (none on CREATE).
    pub old_object: Option<Value>,
    /// `--dry-run=server`.
    pub dry_run: bool,
}

fn gvk(g: &(String, String, String)) -> Value {
    json!({"group": g.0, "version": g.1, "kind": g.2})
}

fn gvr(r: &(String, String, String)) -> Value {
    json!({"group": r.0, "version": r.1, "resource": r.2})
}

impl Attributes {
    /// The AdmissionReview the apiserver posts to the webhook
    /// (`webhook/request/admissionreview.go`).
    pub fn admission_review(&self) -> Value {
        let options = match self.operation.as_str() {
            "CREATE" => json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}),
            "UPDATE" => json!({"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}),
            "DELETE" => json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}),
            _ => Value::Null,
        };
        let mut request = json!({
            "uid": "00000000-0000-4000-8000-00000000f117",
            "kind": gvk(&self.kind),
            "resource": gvr(&self.resource),
            "requestKind": gvk(&self.kind),
            "requestResource": gvr(&self.resource),
            "operation": self.operation,
            "userInfo": {"username": self.username, "groups": self.groups},
            "object": self.object,
            "oldObject": self.old_object,
            "dryRun": self.dry_run,
            "options": options,
        });
        for (key, value) in [
            ("subResource", &self.sub_resource),
            ("requestSubResource", &self.sub_resource),
            ("name", &self.name),
            ("namespace", &self.namespace),
        ] {
            if !value.is_empty() {
                request[key] = json!(value);
            }
        }
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    }

    /// The CEL variable `request`: `CreateAdmissionRequest` as unstructured
    /// JSON, `omitempty` fields absent when empty.
    pub fn cel_request(&self) -> Value {
        let mut r = Map::new();
        r.insert("uid".into(), json!(""));
        r.insert("kind".into(), gvk(&self.kind));
        r.insert("resource".into(), gvr(&self.resource));
        r.insert("requestKind".into(), gvk(&self.kind));
        r.insert("requestResource".into(), gvr(&self.resource));
        r.insert("operation".into(), json!(self.operation));
        r.insert("dryRun".into(), json!(self.dry_run));
        for (key, value) in [
            ("subResource", &self.sub_resource),
            ("requestSubResource", &self.sub_resource),
            ("name", &self.name),
            ("namespace", &self.namespace),
        ] {
            if !value.is_empty() {
                r.insert(key.into(), json!(value));
            }
        }
        let mut user = Map::new();
        if !self.username.is_empty() {
            user.insert("username".into(), json!(self.username));
        }
        if !self.groups.is_empty() {
            user.insert("groups".into(), json!(self.groups));
        }
        r.insert("userInfo".into(), Value::Object(user));
        Value::Object(r)
    }
}

/// Why the apiserver did not call a webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Webhook configurations and admission policies never reach a webhook.
    AdmissionConfiguration,
    /// The namespaceSelector did not match these labels, read from the
    /// incoming Namespace (`from_object`) or the stored one.
    NamespaceSelector {
        /// The Namespace's labels.
        labels: Labels,
        /// Read from the incoming Namespace.
        from_object: bool,
    },
    /// The objectSelector matched neither object.
    ObjectSelector,
    /// No rule matches the write.
    Rules,
    /// This matchCondition was false.
    MatchCondition(String),
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::AdmissionConfiguration => {
                write!(f, "admission configuration resources are exempt")
            }
            Skip::NamespaceSelector {
                labels,
                from_object,
            } => write!(
                f,
                "namespaceSelector on the {} Namespace's labels {labels:?}",
                if *from_object { "incoming" } else { "stored" }
            ),
            Skip::ObjectSelector => write!(f, "objectSelector"),
            Skip::Rules => write!(f, "rules"),
            Skip::MatchCondition(name) => write!(f, "matchCondition {name}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
/// What the apiserver does with one webhook.
pub enum Call {
    /// It calls the webhook.
    Called,
    /// It skips it, and why.
    Skipped(Skip),
    /// The write fails without a call (a selector or matchCondition error
    /// under `failurePolicy: Fail`).
    Rejected(String),
}

/// What the apiserver does with one webhook for one write.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Called, skipped or rejected.
    pub call: Call,
    /// Every matchCondition that failed to evaluate, even where a false one
    /// made the apiserver skip the webhook anyway.
    pub condition_errors: Vec<String>,
}

/// One webhook as the apiserver holds it, its matchConditions compiled.
pub struct Hook {
    /// The webhook's name.
    pub name: String,
    rules: Vec<RuleWithOperations>,
    namespace_selector: Option<LabelSelector>,
    object_selector: Option<LabelSelector>,
    conditions: Vec<(String, Result<Program, String>)>,
    fail_closed: bool,
    env: Arc<Env>,
}

impl Hook {
    /// A webhook of a ValidatingWebhookConfiguration.
    pub fn validating(w: &ValidatingWebhook) -> Self {
        Self::new(
            &w.name,
            w.rules.clone().unwrap_or_default(),
            w.namespace_selector.clone(),
            w.object_selector.clone(),
            w.match_conditions.as_deref().unwrap_or_default(),
            w.failure_policy.as_deref(),
        )
    }

    /// A webhook of a MutatingWebhookConfiguration.
    pub fn mutating(w: &MutatingWebhook) -> Self {
        Self::new(
            &w.name,
            w.rules.clone().unwrap_or_default(),
            w.namespace_selector.clone(),
            w.object_selector.clone(),
            w.match_conditions.as_deref().unwrap_or_default(),
            w.failure_policy.as_deref(),
        )
    }

    fn new(
        name: &str,
        rules: Vec<RuleWithOperations>,
        namespace_selector: Option<LabelSelector>,
        object_selector: Option<LabelSelector>,
        conditions: &[MatchCondition],
        failure_policy: Option<&str>,
    ) -> Self {
        let env = Arc::new(Env::stdlib());
        let conditions = conditions
            .iter()
            .map(|c| {
                let program = env
                    .compile(&c.expression)
                    .map_err(|e| format!("does not compile: {e}"));
                (c.name.clone(), program)
            })
            .collect();
        Hook {
            name: name.to_owned(),
            rules,
            namespace_selector,
            object_selector,
            conditions,
            // The API defaults failurePolicy to Fail.
            fail_closed: failure_policy != Some("Ignore"),
            env,
        }
    }

    /// `Dispatch` and `ShouldCallHook` for this webhook. `namespaces` is the
    /// lister: the stored Namespaces.
    pub fn decide(&self, attr: &Attributes, namespaces: &Namespaces) -> Outcome {
        let outcome = |call| Outcome {
            call,
            condition_errors: Vec::new(),
        };
        if exempt_admission_configuration(attr) {
            return outcome(Call::Skipped(Skip::AdmissionConfiguration));
        }
        let (ns_match, ns_err) = match self.match_namespace(attr, namespaces) {
            Ok(None) => (true, None),
            Ok(Some(skip)) => return outcome(Call::Skipped(skip)),
            Err(e) => (false, Some(e)),
        };
        let (obj_match, obj_err) = match self.match_object(attr) {
            Ok(true) => (true, None),
            Ok(false) => return outcome(Call::Skipped(Skip::ObjectSelector)),
            Err(e) => (false, Some(e)),
        };
        debug_assert!(ns_match || ns_err.is_some());
        debug_assert!(obj_match || obj_err.is_some());
        if !self.rules.iter().any(|r| rule_matches(r, attr)) {
            return outcome(Call::Skipped(Skip::Rules));
        }
        if let Some(e) = ns_err.or(obj_err) {
            return outcome(Call::Rejected(e));
        }
        self.match_conditions(attr)
    }

    fn match_namespace(
        &self,
        attr: &Attributes,
        namespaces: &Namespaces,
    ) -> Result<Option<Skip>, String> {
        let resource = attr.resource.2.as_str();
        if attr.namespace.is_empty() && resource != "namespaces" {
            return Ok(None);
        }
        let Some(selector) = &self.namespace_selector else {
            return Ok(None);
        };
        if selector_is_empty(selector) {
            return Ok(None);
        }
        let self_write = resource == "namespaces"
            && attr.sub_resource.is_empty()
            && matches!(attr.operation.as_str(), "CREATE" | "UPDATE");
        let labels = if self_write {
            labels_of(attr.object.as_ref())
        } else {
            namespaces
                .get(&attr.namespace)
                .cloned()
                .ok_or_else(|| format!("namespaces \"{}\" not found", attr.namespace))?
        };
        Ok(
            (!selector_matches(selector, &labels)?).then_some(Skip::NamespaceSelector {
                labels,
                from_object: self_write,
            }),
        )
    }

    fn match_object(&self, attr: &Attributes) -> Result<bool, String> {
        let Some(selector) = &self.object_selector else {
            return Ok(true);
        };
        if selector_is_empty(selector) {
            return Ok(true);
        }
        let matches = |o: Option<&Value>| -> Result<bool, String> {
            match o {
                None => Ok(false),
                Some(o) => selector_matches(selector, &labels_of(Some(o))),
            }
        };
        Ok(matches(attr.object.as_ref())? || matches(attr.old_object.as_ref())?)
    }

    fn match_conditions(&self, attr: &Attributes) -> Outcome {
        let mut context = Context::with_env(self.env.clone());
        let null = Value::Null;
        for (name, value) in [
            ("request", &attr.cel_request()),
            ("object", attr.object.as_ref().unwrap_or(&null)),
            ("oldObject", attr.old_object.as_ref().unwrap_or(&null)),
        ] {
            let bound = cel::to_value(value)
                .map_err(|e| e.to_string())
                .and_then(|v| context.add_variable(name, v).map_err(|e| e.to_string()));
            if let Err(e) = bound {
                return Outcome {
                    call: Call::Rejected(format!("cannot bind `{name}`: {e}")),
                    condition_errors: vec![e],
                };
            }
        }
        let mut first_false = None;
        let mut errors = Vec::new();
        for (name, program) in &self.conditions {
            let result = match program {
                Err(e) => Err(e.clone()),
                Ok(p) => match p.execute(&context) {
                    Ok(cel::Value::Bool(b)) => Ok(b),
                    Ok(other) => Err(format!("evaluated to {other:?}, not a bool")),
                    Err(e) => Err(e.to_string()),
                },
            };
            match result {
                Ok(true) => {}
                Ok(false) => {
                    first_false.get_or_insert_with(|| name.clone());
                }
                Err(e) => errors.push(format!("{name}: {e}")),
            }
        }
        let call = match first_false {
            Some(name) => Call::Skipped(Skip::MatchCondition(name)),
            None if errors.is_empty() => Call::Called,
            None if self.fail_closed => Call::Rejected(errors.join("; ")),
            None => Call::Skipped(Skip::MatchCondition("(error, failurePolicy Ignore)".into())),
        };
        Outcome {
            call,
            condition_errors: errors,
        }
    }
}

/// `rules.IsExemptAdmissionConfigurationResource`.
fn exempt_admission_configuration(attr: &Attributes) -> bool {
    attr.kind.0 == "admissionregistration.k8s.io"
        && matches!(
            attr.kind.2.as_str(),
            "ValidatingWebhookConfiguration"
                | "MutatingWebhookConfiguration"
                | "ValidatingAdmissionPolicy"
                | "ValidatingAdmissionPolicyBinding"
                | "MutatingAdmissionPolicy"
                | "MutatingAdmissionPolicyBinding"
        )
}

/// `rules.Matcher.Matches`.
pub fn rule_matches(rule: &RuleWithOperations, attr: &Attributes) -> bool {
    let exact_or_wildcard = |items: &Option<Vec<String>>, requested: &str| {
        items.iter().flatten().any(|i| i == "*" || i == requested)
    };
    let is_namespace_resource =
        attr.resource.0.is_empty() && attr.resource.1 == "v1" && attr.resource.2 == "namespaces";
    let scope = match rule.scope.as_deref() {
        None | Some("*") => true,
        Some("Namespaced") => !is_namespace_resource && !attr.namespace.is_empty(),
        Some("Cluster") => is_namespace_resource || attr.namespace.is_empty(),
        Some(_) => false,
    };
    let operation = rule
        .operations
        .iter()
        .flatten()
        .any(|op| op == "*" || *op == attr.operation);
    let resource = rule.resources.iter().flatten().any(|r| {
        let (res, sub) = r.split_once('/').unwrap_or((r, ""));
        (res == "*" || res == attr.resource.2) && (sub == "*" || sub == attr.sub_resource)
    });
    scope
        && operation
        && exact_or_wildcard(&rule.api_groups, &attr.resource.0)
        && exact_or_wildcard(&rule.api_versions, &attr.resource.1)
        && resource
}

fn selector_is_empty(s: &LabelSelector) -> bool {
    s.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && s.match_expressions.as_ref().is_none_or(|e| e.is_empty())
}

/// `metav1.LabelSelectorAsSelector(...).Matches(labels)`.
pub fn selector_matches(s: &LabelSelector, labels: &Labels) -> Result<bool, String> {
    let by_labels = s
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let mut by_expressions = true;
    for e in s.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or_default();
        let value = labels.get(&e.key);
        by_expressions &= match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => !value.is_some_and(|v| values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            other => return Err(format!("{other:?} is not a valid label selector operator")),
        };
    }
    Ok(by_labels && by_expressions)
}

/// `metadata.labels` of an object, empty when absent.
pub fn labels_of(o: Option<&Value>) -> Labels {
    o.and_then(|o| o.pointer("/metadata/labels"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}
