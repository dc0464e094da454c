//! What Argo CD and Flux themselves know, read from the cluster: Applications
//! and their ignoreDifferences, the `argocd-cm` resource customizations, and
//! Flux Kustomizations and HelmReleases (the service account each impersonates,
//! its ignore rules, its source). The decision reads this as plain data.

use regex::Regex;
use serde_json::Value;

use crate::drift::Manager;
use crate::policy::ignore::{IgnoreRule, RuleSet, Target};
use crate::policy::schema::IgnoreDifference;
use crate::policy::{Application, argocd};

#[derive(Debug, Default)]
pub struct Sources {
    pub applications: Vec<Application>,
    /// `resource.customizations.ignoreDifferences.*` of `argocd-cm`: for every
    /// Argo CD-managed object.
    pub argocd_overrides: RuleSet,
    pub flux: Vec<FluxSource>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FluxKind {
    Kustomization,
    HelmRelease,
}

#[derive(Debug)]
pub struct FluxSource {
    pub kind: FluxKind,
    pub namespace: String,
    pub name: String,
    /// `system:serviceaccount:<ns>:<sa>` the controller impersonates for it.
    pub service_account: Option<String>,
    /// `GitRepository flux-system/repo, path ./apps`, for messages.
    pub source: Option<String>,
    pub rules: Vec<FluxRule>,
}

/// A Flux ignore rule: JSON pointers and a target with regex name/namespace.
#[derive(Debug)]
pub struct FluxRule {
    pub rule: IgnoreRule,
    version: Option<String>,
    name: Option<Regex>,
    namespace: Option<Regex>,
    labels: Vec<(String, String)>,
    annotations: Vec<(String, String)>,
}

impl Sources {
    pub fn application(&self, app: &str, app_namespace: Option<&str>) -> Option<&Application> {
        self.applications
            .iter()
            .find(|a| a.tracks(app, app_namespace))
    }

    pub fn flux_source(&self, manager: &Manager) -> Option<&FluxSource> {
        let (kind, namespace, name) = match manager {
            Manager::FluxKustomization { namespace, name } => {
                (FluxKind::Kustomization, namespace, name)
            }
            Manager::FluxHelmRelease { namespace, name } => {
                (FluxKind::HelmRelease, namespace, name)
            }
            Manager::ArgoCd { .. } => return None,
        };
        self.flux
            .iter()
            .find(|s| s.kind == kind && &s.namespace == namespace && &s.name == name)
    }
}

impl FluxSource {
    /// Pointers of the labels and annotations its ignore targets select on
    /// that differ between `old` and `new`: they decide whether a rule applies,
    /// so they are decision inputs (see [`crate::drift::inputs`]).
    pub fn selector_changes(&self, old: &Value, new: &Value) -> Vec<String> {
        let mut out = Vec::new();
        for rule in &self.rules {
            for (section, pairs) in [("labels", &rule.labels), ("annotations", &rule.annotations)] {
                for (key, _) in pairs {
                    let at = |o: &Value| o.get("metadata")?.get(section)?.get(key).cloned();
                    let pointer =
                        format!("/metadata/{section}/{}", crate::policy::path::escape(key));
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
    pub fn matches(&self, target: &Target, version: &str, obj: &Value) -> bool {
        let meta_has = |section: &str, pairs: &[(String, String)]| {
            pairs.iter().all(|(k, v)| {
                obj.pointer(&format!("/metadata/{section}"))
                    .and_then(|m| m.get(k))
                    .and_then(Value::as_str)
                    == Some(v)
            })
        };
        self.rule.matches(target)
            && self.version.as_deref().is_none_or(|v| v == version)
            && self.name.as_ref().is_none_or(|re| re.is_match(target.name))
            && self
                .namespace
                .as_ref()
                .is_none_or(|re| re.is_match(target.namespace))
            && meta_has("labels", &self.labels)
            && meta_has("annotations", &self.annotations)
    }
}

/// Reads a watched Kustomization or HelmRelease.
pub fn flux_from_value(kind: FluxKind, value: &Value) -> Result<FluxSource, String> {
    let text = |p: &str| {
        value
            .pointer(p)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let namespace = text("/metadata/namespace").unwrap_or_default();
    let name = text("/metadata/name").ok_or("no metadata.name")?;
    let label = match kind {
        FluxKind::Kustomization => "Kustomization",
        FluxKind::HelmRelease => "HelmRelease",
    };
    let service_account = text("/spec/serviceAccountName")
        .map(|sa| format!("system:serviceaccount:{namespace}:{sa}"));
    let source = match kind {
        FluxKind::Kustomization => text("/spec/sourceRef/kind").map(|k| {
            let ns = text("/spec/sourceRef/namespace").unwrap_or_else(|| namespace.clone());
            let src = format!(
                "{k} {ns}/{}",
                text("/spec/sourceRef/name").unwrap_or_default()
            );
            match text("/spec/path") {
                Some(path) => format!("{src}, path {path}"),
                None => src,
            }
        }),
        FluxKind::HelmRelease => text("/spec/chart/spec/chart")
            .map(|chart| format!("chart {chart}"))
            .or_else(|| text("/spec/chartRef/name").map(|c| format!("chart {c}"))),
    };
    let rules_at = match kind {
        FluxKind::Kustomization => "/spec/ignore",
        FluxKind::HelmRelease => "/spec/driftDetection/ignore",
    };
    let mut rules = Vec::new();
    for (i, rule) in value
        .pointer(rules_at)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let origin = format!("{label} {namespace}/{name} ignore[{i}]");
        let paths: Vec<String> = rule
            .get("paths")
            .and_then(Value::as_array)
            .map(|ps| {
                ps.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let t = rule.get("target").cloned().unwrap_or(Value::Null);
        let field = |k: &str| {
            t.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let regex = |k: &str| -> Result<Option<Regex>, String> {
            field(k)
                .map(|r| {
                    Regex::new(&format!("^(?:{r})$"))
                        .map_err(|e| format!("{origin}.target.{k}: {e}"))
                })
                .transpose()
        };
        rules.push(FluxRule {
            rule: IgnoreRule::from_flux(
                &field("group").unwrap_or_default(),
                &field("kind").unwrap_or_default(),
                &paths,
                origin.clone(),
            )?,
            version: field("version"),
            name: regex("name")?,
            namespace: regex("namespace")?,
            labels: equality_selector(field("labelSelector").as_deref()),
            annotations: equality_selector(field("annotationSelector").as_deref()),
        });
    }
    Ok(FluxSource {
        kind,
        namespace,
        name,
        service_account,
        source,
        rules,
    })
}

/// `a=b,c=d` selectors; set-based selectors are not supported and match nothing.
fn equality_selector(text: Option<&str>) -> Vec<(String, String)> {
    let Some(text) = text else { return Vec::new() };
    text.split(',')
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) => (
                k.trim().trim_end_matches('=').to_owned(),
                v.trim().trim_start_matches('=').to_owned(),
            ),
            None => (
                pair.trim().to_owned(),
                "\u{0}unsupported selector".to_owned(),
            ),
        })
        .collect()
}

/// `resource.customizations.ignoreDifferences.<group>_<Kind>` (and `.all`) of
/// the `argocd-cm` ConfigMap's data.
pub fn argocd_overrides(data: &serde_json::Map<String, Value>) -> (RuleSet, Vec<String>) {
    const PREFIX: &str = "resource.customizations.ignoreDifferences.";
    #[derive(serde::Deserialize, Default)]
    #[serde(rename_all = "camelCase")]
    struct Override {
        #[serde(default)]
        json_pointers: Vec<String>,
        #[serde(default)]
        jq_path_expressions: Vec<String>,
        #[serde(default)]
        managed_fields_managers: Vec<String>,
    }
    let mut rules = Vec::new();
    let mut errors = Vec::new();
    for (key, value) in data {
        let Some(suffix) = key.strip_prefix(PREFIX) else {
            continue;
        };
        let (group, kind) = match suffix {
            "all" => ("*", "*"),
            s => s.split_once('_').unwrap_or(("", s)),
        };
        let text = value.as_str().unwrap_or_default();
        let parsed: Override = match serde_saphyr::from_str(text) {
            Ok(o) => o,
            Err(e) => {
                errors.push(format!(
                    "argocd-cm {key}: {}",
                    e.to_string().lines().next().unwrap_or_default()
                ));
                continue;
            }
        };
        let def = IgnoreDifference {
            group: group.to_owned(),
            kind: kind.to_owned(),
            json_pointers: parsed.json_pointers,
            jq_path_expressions: parsed.jq_path_expressions,
            managed_fields_managers: parsed.managed_fields_managers,
            ..Default::default()
        };
        match IgnoreRule::compile(&def, format!("argocd-cm {key}")) {
            Ok(rule) => rules.push(rule),
            Err(e) => errors.push(e.to_string()),
        }
    }
    (RuleSet::new(rules), errors)
}

/// Applications read from the cluster; one that does not compile is reported
/// and left out (its objects keep the policy's rules).
pub fn applications(values: &[Value]) -> (Vec<Application>, Vec<String>) {
    let mut apps = Vec::new();
    let mut errors = Vec::new();
    for value in values {
        match argocd::from_value(value) {
            Ok(app) => apps.push(app),
            Err(e) => errors.push(format!(
                "Application {}/{}: {e}",
                value
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                value
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            )),
        }
    }
    (apps, errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_a_flux_kustomization() {
        let k = json!({"metadata": {"name": "apps", "namespace": "tenant-a"},
            "spec": {"serviceAccountName": "reconciler", "path": "./apps",
                     "sourceRef": {"kind": "GitRepository", "name": "repo", "namespace": "flux-system"},
                     "ignore": [{"paths": ["/spec/replicas"], "target": {"kind": "Deployment", "name": "web-.*"}}]}});
        let s = flux_from_value(FluxKind::Kustomization, &k).unwrap();
        assert_eq!(
            s.service_account.as_deref(),
            Some("system:serviceaccount:tenant-a:reconciler")
        );
        assert_eq!(
            s.source.as_deref(),
            Some("GitRepository flux-system/repo, path ./apps")
        );
        let t = |name| Target {
            group: "apps",
            kind: "Deployment",
            name,
            namespace: "tenant-a",
        };
        assert!(s.rules[0].matches(&t("web-1"), "v1", &json!({})));
        assert!(!s.rules[0].matches(&t("db"), "v1", &json!({})));
    }

    #[test]
    fn a_refused_jq_rule_is_reported_and_the_rest_kept() {
        let data = json!({
            "resource.customizations.ignoreDifferences.apps_Deployment": "jsonPointers:\n- /spec/replicas\n",
            "resource.customizations.ignoreDifferences.Service": "jqPathExpressions:\n- 'last(range(1e12)) as $x | .spec'\n",
        });
        let (rules, errors) = argocd_overrides(data.as_object().unwrap());
        assert_eq!(rules.len(), 1);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with(
                "argocd-cm resource.customizations.ignoreDifferences.Service.jqPathExpressions[0]: \
                 at column 6 of the expression: `range` is not allowed: it can run without bound"
            ),
            "{errors:?}"
        );
        let app = |name: &str, jq: &str| {
            json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                   "metadata": {"name": name, "namespace": "argocd"},
                   "spec": {"ignoreDifferences": [{"kind": "Deployment", "jqPathExpressions": [jq]}]}})
        };
        let (apps, errors) =
            applications(&[app("good", ".spec.replicas"), app("bad", "repeat(.)")]);
        assert_eq!(apps.len(), 1);
        assert_eq!(apps[0].name, "good");
        assert!(
            errors[0].starts_with(
                "Application argocd/bad: Application bad ignoreDifferences[0].jqPathExpressions[0]: \
                 at column 1 of the expression: `repeat` is not allowed"
            ),
            "{errors:?}"
        );
    }

    #[test]
    fn reads_argocd_cm_overrides() {
        let data = json!({
            "resource.customizations.ignoreDifferences.apps_Deployment": "jsonPointers:\n- /spec/replicas\n",
            "resource.customizations.ignoreDifferences.all": "managedFieldsManagers:\n- kube-controller-manager\n",
            "resource.customizations.ignoreDifferences.Service": "jqPathExpressions: ['.a[']\n",
            "url": "https://argocd.example.com"
        });
        let (rules, errors) = argocd_overrides(data.as_object().unwrap());
        assert_eq!(rules.len(), 2);
        assert_eq!(errors.len(), 1, "{errors:?}");
    }
}
