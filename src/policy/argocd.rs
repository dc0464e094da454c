//! Argo CD `Application` manifests as policy input: each application's
//! `spec.ignoreDifferences` applies only to the objects that application tracks.

use serde::Deserialize;

use super::ignore::{RuleError, RuleSet};
use super::schema::IgnoreDifference;

/// An imported Application: where its objects come from, and its ignore rules.
#[derive(Debug)]
pub struct Application {
    pub name: String,
    pub namespace: Option<String>,
    pub repo_url: Option<String>,
    pub path: Option<String>,
    pub rules: RuleSet,
}

/// One YAML document, read leniently except for `ignoreDifferences`, which
/// must be Argo CD's schema exactly.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Document {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: Metadata,
    #[serde(default)]
    spec: Option<Spec>,
}

#[derive(Default, Deserialize)]
struct Metadata {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    #[serde(default)]
    source: Option<Source>,
    #[serde(default)]
    sources: Vec<Source>,
    #[serde(default)]
    ignore_differences: Vec<IgnoreDifference>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Source {
    #[serde(default, rename = "repoURL")]
    repo_url: Option<String>,
    #[serde(default)]
    path: Option<String>,
}

/// What a manifest file held: the Applications, and a note for every other document.
#[derive(Debug, Default)]
pub struct Imported {
    pub applications: Vec<Application>,
    pub skipped: Vec<String>,
}

pub fn parse(text: &str, file: &str) -> Result<Imported, String> {
    let docs: Vec<Document> =
        serde_saphyr::from_multiple(text).map_err(|e| super::yaml_error(file, &e))?;
    let mut out = Imported::default();
    // jq expressions of earlier Applications, to place a refused one in the file.
    let mut earlier: Vec<String> = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        let is_app = doc.kind == "Application" && doc.api_version.starts_with("argoproj.io/");
        if !is_app {
            let what = if doc.kind.is_empty() {
                "an untyped document".to_owned()
            } else {
                format!("{} {}", doc.kind, doc.metadata.name)
            };
            out.skipped.push(format!(
                "{file}: document {}: {what} is not an Argo CD Application; skipped",
                i + 1
            ));
            continue;
        }
        let exprs: Vec<String> = doc
            .spec
            .iter()
            .flat_map(|s| &s.ignore_differences)
            .flat_map(|d| d.jq_path_expressions.iter().cloned())
            .collect();
        let before: Vec<&str> = earlier.iter().map(String::as_str).collect();
        let app = from_document(doc, &before, |e, before| match e.jq {
            Some(_) => super::locate::describe(file, text, before, e),
            None => format!("{file}: document {}: {e}", i + 1),
        })
        .map_err(|e| match e {
            DocError::Invalid(e) => format!("{file}: document {}: {e}", i + 1),
            DocError::Rule(e) => e,
        })?;
        earlier.extend(exprs);
        out.applications.push(app);
    }
    Ok(out)
}

/// An Application read from the cluster (a watched object).
pub fn from_value(value: &serde_json::Value) -> Result<Application, String> {
    let doc: Document = serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
    from_document(doc, &[], |e, _| e.to_string()).map_err(|e| match e {
        DocError::Invalid(e) | DocError::Rule(e) => e,
    })
}

enum DocError {
    Invalid(String),
    /// A rule that does not compile, already described.
    Rule(String),
}

/// `describe` renders a rule error, given the jq expressions written before it.
fn from_document(
    doc: Document,
    earlier: &[&str],
    describe: impl Fn(&RuleError, &[&str]) -> String,
) -> Result<Application, DocError> {
    if doc.metadata.name.is_empty() {
        return Err(DocError::Invalid("Application has no metadata.name".into()));
    }
    let spec = doc.spec.unwrap_or(Spec {
        source: None,
        sources: vec![],
        ignore_differences: vec![],
    });
    let source = spec.source.or_else(|| spec.sources.into_iter().next());
    let name = doc.metadata.name;
    let rules = super::compile_rules(
        &spec.ignore_differences,
        &format!("Application {name} ignoreDifferences"),
        earlier,
    )
    .map_err(|(e, before)| DocError::Rule(describe(&e, &before)))?;
    Ok(Application {
        namespace: doc.metadata.namespace,
        repo_url: source.as_ref().and_then(|s| s.repo_url.clone()),
        path: source.and_then(|s| s.path),
        name,
        rules,
    })
}

impl Application {
    /// Argo CD names an application in another namespace `<namespace>_<name>` in
    /// its tracking id; a bare name means the control-plane namespace, which we
    /// accept for any namespace.
    pub fn tracks(&self, app: &str, app_namespace: Option<&str>) -> bool {
        self.name == app && app_namespace.is_none_or(|ns| self.namespace.as_deref() == Some(ns))
    }

    pub fn describe_source(&self) -> Option<String> {
        match (&self.repo_url, &self.path) {
            (Some(repo), Some(path)) => Some(format!("{repo}, path {path}")),
            (Some(repo), None) => Some(repo.clone()),
            _ => None,
        }
    }
}
