//! What Argo CD and Flux themselves know, read from the cluster: Applications
//! and their ignoreDifferences, the `argocd-cm` resource customizations, the
//! account Argo CD syncs each Application as (AppProjects, with impersonation
//! on in `argocd-cm`), and Flux Kustomizations and HelmReleases (the service
//! account each impersonates, its ignore rules, its source). The result is
//! the plain [`Sources`] the decision reads; this module depends on the core,
//! never the reverse.

use regex::RegexBuilder;
use serde::Deserialize;
use serde_json::Value;

pub use crate::drift::Sources;
use crate::policy::flux::FluxRule;
pub use crate::policy::flux::{FluxKind, FluxSource};
use crate::policy::ignore::{IgnoreRule, RuleError, RuleSet};
pub use crate::policy::impersonation::{AppProject, SyncAccount, sync_accounts};
use crate::policy::schema::IgnoreDifference;
use crate::policy::{Application, argocd};

mod selector;
pub use selector::SelectorError;
pub(crate) use selector::parse_selector;

/// A watched object that cannot be read: it is left out and reported, and the
/// objects it manages keep the policy's rules.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The object does not have the shape of its kind (its CRD's schema
    /// should make this impossible).
    #[error("{kind}: {source}")]
    Shape {
        /// The object's kind.
        kind: &'static str,
        /// Where its shape is wrong.
        source: serde_json::Error,
    },
    /// A Flux object without a name.
    #[error("no metadata.name")]
    NoName,
    /// A target's `name` or `namespace` that is not a regular expression.
    #[error("{origin}.target.{field}: {source}")]
    Regex {
        /// The object and its rule, as `Kind namespace/name ignore[i]`.
        origin: String,
        /// `name` or `namespace`.
        field: &'static str,
        /// Why it does not compile.
        source: regex::Error,
    },
    /// A target's `labelSelector` or `annotationSelector` that is not a
    /// Kubernetes selector: Flux would refuse it too.
    #[error("{origin}.target.{field}: {source}")]
    Selector {
        /// The object and its rule, as `Kind namespace/name ignore[i]`.
        origin: String,
        /// `labelSelector` or `annotationSelector`.
        field: &'static str,
        /// Why it does not parse.
        source: SelectorError,
    },
    /// An ignore rule that does not compile.
    #[error(transparent)]
    Rule(#[from] RuleError),
    /// An `argocd-cm` entry that is not YAML of the expected shape.
    #[error("argocd-cm {key}: {}", first_line(.source))]
    Override {
        /// The `argocd-cm` key.
        key: String,
        /// Why it does not read.
        source: Box<serde_saphyr::Error>,
    },
    /// An AppProject that does not have the shape of one.
    #[error("AppProject {namespace}/{name}: {source}")]
    Project {
        /// The AppProject's namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Where its shape is wrong.
        source: serde_json::Error,
    },
    /// An Application that does not compile.
    #[error("Application {namespace}/{name}: {source}")]
    Application {
        /// The Application's namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Why it does not compile.
        source: Box<argocd::ApplicationError>,
    },
}

/// The fields of a Kustomization (`kustomize.toolkit.fluxcd.io/v1`) or a
/// HelmRelease (`helm.toolkit.fluxcd.io/v2`) that driftguard reads.
#[derive(Deserialize, Default)]
#[serde(default)]
struct FluxObject {
    metadata: Meta,
    spec: FluxSpec,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct FluxSpec {
    service_account_name: Option<String>,
    /// HelmRelease: where the release's objects go (its own namespace when unset).
    target_namespace: Option<String>,
    /// Kustomization: where its manifests come from.
    source_ref: Option<SourceRef>,
    path: Option<String>,
    /// HelmRelease: the chart, inline or referenced.
    chart: Option<Chart>,
    chart_ref: Option<NamedRef>,
    /// Kustomization: `spec.ignore`.
    ignore: Option<Vec<Ignore>>,
    /// HelmRelease: `spec.driftDetection.ignore`.
    drift_detection: Option<DriftDetection>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SourceRef {
    kind: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Chart {
    spec: Option<ChartSpec>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ChartSpec {
    chart: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct NamedRef {
    name: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct DriftDetection {
    ignore: Option<Vec<Ignore>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Ignore {
    paths: Option<Vec<String>>,
    target: Option<IgnoreTarget>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct IgnoreTarget {
    group: Option<String>,
    version: Option<String>,
    kind: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
    label_selector: Option<String>,
    annotation_selector: Option<String>,
}

/// The parser's first line: the rest is a snippet of the entry.
fn first_line(e: &serde_saphyr::Error) -> String {
    e.to_string().lines().next().unwrap_or_default().to_owned()
}

/// Flux treats an empty string as an absent field.
fn given(field: &Option<String>) -> Option<&str> {
    field.as_deref().filter(|s| !s.is_empty())
}

/// The compiled size a Flux target's `name` or `namespace` regex may take
/// (the regex crate's default is 10 MiB): what the source's cost charges for
/// it. A larger one is reported like one that does not parse.
pub(crate) const TARGET_REGEX_SIZE: usize = 64 * 1024;

/// Reads a watched Kustomization or HelmRelease.
pub fn flux_from_value(kind: FluxKind, value: &Value) -> Result<FluxSource, SourceError> {
    let object = FluxObject::deserialize(value).map_err(|source| SourceError::Shape {
        kind: kind.as_str(),
        source,
    })?;
    let namespace = given(&object.metadata.namespace)
        .unwrap_or_default()
        .to_owned();
    let name = given(&object.metadata.name)
        .ok_or(SourceError::NoName)?
        .to_owned();
    let spec = object.spec;
    let service_account = given(&spec.service_account_name)
        .map(|sa| format!("system:serviceaccount:{namespace}:{sa}"));
    let source = match kind {
        FluxKind::Kustomization => spec.source_ref.as_ref().and_then(|r| {
            let k = given(&r.kind)?;
            let ns = given(&r.namespace).unwrap_or(&namespace);
            let src = format!("{k} {ns}/{}", given(&r.name).unwrap_or_default());
            Some(match given(&spec.path) {
                Some(path) => format!("{src}, path {path}"),
                None => src,
            })
        }),
        FluxKind::HelmRelease => spec
            .chart
            .as_ref()
            .and_then(|c| given(&c.spec.as_ref()?.chart))
            .or_else(|| given(&spec.chart_ref.as_ref()?.name))
            .map(|chart| format!("chart {chart}")),
    };
    let ignores = match kind {
        FluxKind::Kustomization => spec.ignore,
        FluxKind::HelmRelease => spec.drift_detection.and_then(|d| d.ignore),
    };
    let label = kind.as_str();
    let mut rules = Vec::new();
    for (i, ignore) in ignores.into_iter().flatten().enumerate() {
        let origin = format!("{label} {namespace}/{name} ignore[{i}]");
        let t = ignore.target.unwrap_or_default();
        let regex = |field: &'static str, text: &Option<String>| {
            given(text)
                .map(|r| {
                    RegexBuilder::new(&format!("^(?:{r})$"))
                        .size_limit(TARGET_REGEX_SIZE)
                        .build()
                })
                .transpose()
                .map_err(|source| SourceError::Regex {
                    origin: origin.clone(),
                    field,
                    source,
                })
        };
        let selector = |field: &'static str, text: &Option<String>| {
            given(text)
                .map(parse_selector)
                .transpose()
                .map(Option::unwrap_or_default)
                .map_err(|source| SourceError::Selector {
                    origin: origin.clone(),
                    field,
                    source,
                })
        };
        rules.push(FluxRule {
            version: given(&t.version).map(str::to_owned),
            name: regex("name", &t.name)?,
            namespace: regex("namespace", &t.namespace)?,
            labels: selector("labelSelector", &t.label_selector)?,
            annotations: selector("annotationSelector", &t.annotation_selector)?,
            rule: IgnoreRule::from_flux(
                given(&t.group).unwrap_or_default(),
                given(&t.kind).unwrap_or_default(),
                &ignore.paths.unwrap_or_default(),
                origin.clone(),
            )?,
        });
    }
    let release_namespace = match kind {
        FluxKind::HelmRelease => Some(
            given(&spec.target_namespace)
                .unwrap_or(&namespace)
                .to_owned(),
        ),
        FluxKind::Kustomization => None,
    };
    Ok(FluxSource {
        kind,
        namespace,
        name,
        service_account,
        source,
        rules,
        release_namespace,
    })
}

/// `resource.customizations.ignoreDifferences.<group>_<Kind>` (and `.all`) of
/// the `argocd-cm` ConfigMap's data.
pub fn argocd_overrides(data: &serde_json::Map<String, Value>) -> (RuleSet, Vec<SourceError>) {
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
        let parsed: Override = match crate::policy::yaml::from_str(text) {
            Ok(o) => o,
            Err(source) => {
                errors.push(SourceError::Override {
                    key: key.clone(),
                    source: Box::new(source),
                });
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
            Err(e) => errors.push(e.into()),
        }
    }
    (RuleSet::new(rules), errors)
}

/// `metadata.namespace`, `metadata.name` of a watched object, for messages.
fn named(value: &Value) -> (String, String) {
    let text = |p: &str| {
        value
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    (text("/metadata/namespace"), text("/metadata/name"))
}

/// AppProjects read from the cluster; one that cannot be read is reported and
/// left out (its Applications get no sync account).
pub(crate) fn app_projects(values: &[Value]) -> (Vec<AppProject>, Vec<SourceError>) {
    let mut projects = Vec::new();
    let mut errors = Vec::new();
    for value in values {
        match AppProject::from_value(value) {
            Ok(p) => projects.push(p),
            Err(source) => {
                let (namespace, name) = named(value);
                errors.push(SourceError::Project {
                    namespace,
                    name,
                    source,
                });
            }
        }
    }
    (projects, errors)
}

/// Applications read from the cluster; one that does not compile is reported
/// and left out (its objects keep the policy's rules).
pub fn applications(values: &[Value]) -> (Vec<Application>, Vec<SourceError>) {
    applications_for(values, &argocd::ThisCluster::default())
}

/// [`applications`], for an Argo CD that knows this cluster by `this`.
pub(crate) fn applications_for(
    values: &[Value],
    this: &argocd::ThisCluster,
) -> (Vec<Application>, Vec<SourceError>) {
    let mut apps = Vec::new();
    let mut errors = Vec::new();
    for value in values {
        let (namespace, name) = named(value);
        match argocd::from_value_for(value, this) {
            Ok(app) => apps.push(app),
            Err(source) => errors.push(SourceError::Application {
                namespace,
                name,
                source: Box::new(source),
            }),
        }
    }
    (apps, errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::ignore::Target;
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
            errors[0].to_string().starts_with(
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
            errors[0].to_string().starts_with(
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

    fn flux_with_target(target: Value) -> Result<FluxSource, SourceError> {
        let k = json!({"metadata": {"name": "apps", "namespace": "flux-system"},
            "spec": {"ignore": [{"paths": ["/spec/replicas"], "target": target}]}});
        flux_from_value(FluxKind::Kustomization, &k)
    }

    /// Each case: selector, labels of the object, whether Flux's
    /// `labels.Parse(..).Matches(..)` selects it.
    #[test]
    fn flux_label_selectors_match_as_apimachinery_does() {
        let cases: &[(&str, Value, bool)] = &[
            ("tier=web", json!({"tier": "web"}), true),
            ("tier==web", json!({"tier": "web"}), true),
            ("tier=web", json!({}), false),
            ("tier!=web", json!({"tier": "api"}), true),
            ("tier!=web", json!({"tier": "web"}), false),
            // `!=` and `notin` select an object without the key.
            ("tier!=web", json!({}), true),
            ("tier in (web,api)", json!({"tier": "api"}), true),
            ("tier in (web, api)", json!({"tier": "db"}), false),
            ("tier in (web,api)", json!({}), false),
            ("tier notin (web,api)", json!({"tier": "db"}), true),
            ("tier notin (web,api)", json!({"tier": "web"}), false),
            ("tier notin (web,api)", json!({}), true),
            ("tier", json!({"tier": ""}), true),
            ("tier", json!({}), false),
            ("!tier", json!({}), true),
            ("!tier", json!({"tier": "web"}), false),
            (
                "tier in (web),!canary,app.kubernetes.io/name=x",
                json!({"tier": "web", "app.kubernetes.io/name": "x"}),
                true,
            ),
            (
                "tier in (web),!canary",
                json!({"tier": "web", "canary": "y"}),
                false,
            ),
        ];
        let t = Target {
            group: "apps",
            kind: "Deployment",
            name: "web",
            namespace: "flux-system",
        };
        for (selector, labels, selected) in cases {
            let s = flux_with_target(json!({"labelSelector": selector})).unwrap();
            let obj = json!({"metadata": {"labels": labels}});
            assert_eq!(
                s.rules[0].matches(&t, "v1", &obj),
                *selected,
                "{selector} on {labels}"
            );
            let s = flux_with_target(json!({"annotationSelector": selector})).unwrap();
            let obj = json!({"metadata": {"annotations": labels}});
            assert_eq!(s.rules[0].matches(&t, "v1", &obj), *selected, "{selector}");
        }
    }

    #[test]
    fn a_selector_flux_would_refuse_is_reported_when_read() {
        for (selector, why) in [
            (
                "tier in web",
                "expected `(` after `in` or `notin` at column 9",
            ),
            (
                "tier in (web",
                "expected `,` or `)` in a value list at column 13",
            ),
            ("tier=web,", "expected a key or `!` at column 10"),
            ("tier web", "expected `,` or the end at column 6"),
            ("=web", "expected a key or `!` at column 1"),
            ("!", "expected a key after `!` at column 2"),
            ("replicas > 1", "`>` is not supported"),
            ("tier=a b", "expected `,` or the end at column 8"),
            ("ti*er=web", "`ti*er` is not a valid label key"),
            ("tier=-web", "`-web` is not a valid label value"),
        ] {
            let err = flux_with_target(json!({"kind": "Deployment", "labelSelector": selector}))
                .unwrap_err()
                .to_string();
            assert_eq!(
                err,
                format!(
                    "Kustomization flux-system/apps ignore[0].target.labelSelector: `{selector}`: {why}"
                )
            );
        }
    }

    /// Every key a selector names is a decision input, whatever its operator.
    #[test]
    fn every_key_a_selector_reads_is_an_input() {
        let s = flux_with_target(json!({
            "labelSelector": "a in (x),b notin (y),c,!d,e=f,g!=h",
            "annotationSelector": "team"}))
        .unwrap();
        let old = json!({"metadata": {}});
        let new = json!({"metadata": {
            "labels": {"a": "1", "b": "1", "c": "1", "d": "1", "e": "1", "g": "1", "z": "1"},
            "annotations": {"team": "x"}}});
        assert_eq!(
            s.selector_changes(&old, &new),
            [
                "/metadata/labels/a",
                "/metadata/labels/b",
                "/metadata/labels/c",
                "/metadata/labels/d",
                "/metadata/labels/e",
                "/metadata/labels/g",
                "/metadata/annotations/team"
            ]
        );
        assert!(s.selector_changes(&new, &new).is_empty());
    }

    #[test]
    fn reads_a_flux_helmrelease() {
        let h = json!({"metadata": {"name": "web", "namespace": "apps"},
            "spec": {"chart": {"spec": {"chart": "podinfo"}},
                     "driftDetection": {"ignore": [{"paths": ["/spec/replicas"]}]}}});
        let s = flux_from_value(FluxKind::HelmRelease, &h).unwrap();
        assert_eq!(s.source.as_deref(), Some("chart podinfo"));
        assert_eq!(s.service_account, None);
        assert_eq!(s.rules.len(), 1);
        let nameless = json!({"metadata": {"namespace": "apps"}});
        assert_eq!(
            flux_from_value(FluxKind::HelmRelease, &nameless)
                .unwrap_err()
                .to_string(),
            "no metadata.name"
        );
    }
}
