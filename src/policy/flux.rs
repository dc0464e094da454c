//! What a Flux Kustomization or HelmRelease tells the decision: the service
//! account it impersonates, its source, and its ignore rules with their
//! targets. Read from the cluster by [`crate::sources`]; plain data here.

use std::collections::BTreeMap;

use kube::core::{Expression, SelectorExt};
use regex::Regex;
use serde_json::Value;

use super::ignore::{IgnoreRule, Target};
use super::path::escape;

/// The Flux kinds driftguard reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FluxKind {
    /// `kustomize.toolkit.fluxcd.io/v1` Kustomization.
    Kustomization,
    /// `helm.toolkit.fluxcd.io/v2` HelmRelease.
    HelmRelease,
}

impl FluxKind {
    /// The kind's name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FluxKind::Kustomization => "Kustomization",
            FluxKind::HelmRelease => "HelmRelease",
        }
    }
}

/// A Kustomization or HelmRelease, as the decision reads it.
#[derive(Debug)]
pub struct FluxSource {
    /// Which kind it is.
    pub(crate) kind: FluxKind,
    /// Its namespace.
    pub(crate) namespace: String,
    /// Its name.
    pub(crate) name: String,
    /// `system:serviceaccount:<ns>:<sa>` the controller impersonates for it.
    pub(crate) service_account: Option<String>,
    /// `GitRepository flux-system/repo, path ./apps`, for messages.
    pub(crate) source: Option<String>,
    /// Its ignore rules.
    pub(crate) rules: Vec<FluxRule>,
    /// A HelmRelease's release namespace (`spec.targetNamespace`, else its
    /// own), where its objects live: Flux lists them nowhere, so a Namespace
    /// delete is judged by this ([`crate::drift::cascade`]).
    pub(crate) release_namespace: Option<String>,
}

/// A Flux ignore rule: JSON pointers and a target with regex name/namespace
/// and label/annotation selectors (all expressions must match, as in Flux).
#[derive(Debug)]
pub(crate) struct FluxRule {
    /// The pointers, with the target's group and kind.
    pub(crate) rule: IgnoreRule,
    /// The target's `version`; `None`: any.
    pub(crate) version: Option<String>,
    /// The target's `name` regex, anchored.
    pub(crate) name: Option<Regex>,
    /// The target's `namespace` regex, anchored.
    pub(crate) namespace: Option<Regex>,
    /// The target's `labelSelector`.
    pub(crate) labels: Vec<Expression>,
    /// The target's `annotationSelector`.
    pub(crate) annotations: Vec<Expression>,
}

impl FluxSource {
    /// With the controller's `--default-service-account` (`default`), the
    /// account a source without `spec.serviceAccountName` is applied as:
    /// Flux impersonates it in the source's own namespace
    /// (`WithServiceAccount(r.DefaultServiceAccount, obj.Spec.ServiceAccountName, obj.GetNamespace())`
    /// in kustomize-controller and helm-controller).
    pub(crate) fn with_default_account(mut self, default: Option<&str>) -> Self {
        if self.service_account.is_none()
            && let Some(name) = default.filter(|n| !n.is_empty())
        {
            self.service_account = Some(format!("system:serviceaccount:{}:{name}", self.namespace));
        }
        self
    }

    /// Pointers of the labels and annotations its ignore targets select on
    /// that differ between `old` and `new`: they decide whether a rule applies,
    /// so they are decision inputs (see [`crate::drift::inputs`]). Every key an
    /// expression names counts, whatever its operator: `!a` and `a notin (x)`
    /// change their answer when `a` is added, just as `a=b` does.
    pub(crate) fn selector_changes(&self, old: &Value, new: &Value) -> Vec<String> {
        let mut out = Vec::new();
        for rule in &self.rules {
            for (section, exprs) in [("labels", &rule.labels), ("annotations", &rule.annotations)] {
                for key in exprs.iter().map(key_of) {
                    let at = |o: &Value| o.get("metadata")?.get(section)?.get(key).cloned();
                    let pointer = format!("/metadata/{section}/{}", escape(key));
                    if at(old) != at(new) && !out.contains(&pointer) {
                        out.push(pointer);
                    }
                }
            }
        }
        out
    }
}

impl FluxRule {
    pub(crate) fn matches(&self, target: &Target, version: &str, obj: &Value) -> bool {
        let selects = |section: &str, exprs: &[Expression]| {
            exprs.is_empty() || {
                let map = string_map(obj.get("metadata").and_then(|m| m.get(section)));
                exprs.iter().all(|e| e.matches(&map))
            }
        };
        self.rule.matches(target)
            && self.version.as_deref().is_none_or(|v| v == version)
            && self.name.as_ref().is_none_or(|re| re.is_match(target.name))
            && self
                .namespace
                .as_ref()
                .is_none_or(|re| re.is_match(target.namespace))
            && selects("labels", &self.labels)
            && selects("annotations", &self.annotations)
    }
}

/// The key an expression reads.
pub(crate) fn key_of(expr: &Expression) -> &str {
    match expr {
        Expression::In(key, _)
        | Expression::NotIn(key, _)
        | Expression::Equal(key, _)
        | Expression::NotEqual(key, _)
        | Expression::Exists(key)
        | Expression::DoesNotExist(key) => key,
    }
}

/// `metadata.labels` or `metadata.annotations` as the map kube's selectors
/// match on; a non-string value (never stored by the apiserver) is left out.
fn string_map(section: Option<&Value>) -> BTreeMap<String, String> {
    section
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect()
}
