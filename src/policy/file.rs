//! What a policy file may hold, read by one function ([`Policy::from_any_yaml`])
//! for `serve`, its reloads, `check`, `register`, `policy lint` and the
//! kubectl plugin alike, so that none of them takes a file another refuses.
//!
//! It holds a driftguard policy (one document, without `apiVersion` or
//! `kind`; unknown keys refused), or Argo CD Applications (the embedded
//! default policy plus their ignoreDifferences; other manifests beside them
//! skipped, said in the notes), or one of the manifests the seed article
//! hands over as policy (an audit policy, a Flux Kustomization or
//! HelmRelease: nothing to read, the embedded default policy applies, said in
//! the notes). Anything else is an error: a file read as "another manifest"
//! would put the embedded default in force in place of the policy meant.

use std::path::Path as FsPath;

use serde_json::{Map, Value};

use super::{Policy, PolicyError, argocd, schema};

/// A document's top level.
type Document = Map<String, Value>;

/// Manifests accepted in place of a policy, each with what driftguard makes
/// of it: (`apiVersion`'s group, `kind`, advice).
const FOREIGN: &[(&str, &str, &str)] = &[
    (
        "audit.k8s.io",
        "Policy",
        "a kube-apiserver audit policy: driftguard's decisions appear in its records as auditAnnotations at level Metadata or above",
    ),
    (
        "kustomize.toolkit.fluxcd.io",
        "Kustomization",
        "objects Flux applies are detected as Flux-managed by their toolkit labels",
    ),
    (
        "helm.toolkit.fluxcd.io",
        "HelmRelease",
        "objects Flux applies are detected as Flux-managed by their toolkit labels",
    ),
];

fn text_at<'a>(doc: &'a Document, key: &str) -> &'a str {
    doc.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// Whether a document says what it is: a policy never does.
fn is_typed(doc: &Document) -> bool {
    doc.contains_key("kind") || doc.contains_key("apiVersion")
}

fn is_application(doc: &Document) -> bool {
    text_at(doc, "kind") == "Application" && text_at(doc, "apiVersion").starts_with("argoproj.io/")
}

impl Policy {
    /// A policy file's text, whatever it holds (see the module): the policy,
    /// and notes for the operator when it is not a driftguard policy.
    pub fn from_any_yaml(text: &str, file: &str) -> Result<(Self, Vec<String>), PolicyError> {
        // YAML that is not even that gets the policy parser's located error.
        let Ok(docs) = serde_saphyr::from_multiple::<Value>(text) else {
            return Self::from_yaml(text, file).map(|p| (p, Vec::new()));
        };
        let docs: Vec<(usize, &Document)> = (docs.iter().enumerate())
            .filter_map(|(i, d)| d.as_object().map(|d| (i + 1, d)))
            .collect();
        if docs.iter().any(|(_, d)| is_application(d)) {
            return applications(text, file, &docs);
        }
        match docs.as_slice() {
            [(_, doc)] if is_typed(doc) => {
                foreign(file, doc).map(|note| (Self::embedded(), vec![note]))
            }
            [] | [_] => Self::from_yaml(text, file).map(|p| (p, Vec::new())),
            [_, ..] => Err(PolicyError(format!(
                "{file}: {} YAML documents, none an Argo CD Application: a driftguard policy is one document",
                docs.len()
            ))),
        }
    }
}

/// Argo CD Applications, with the embedded default policy. A document
/// without a kind is refused: it would be a policy, and dropped.
fn applications(
    text: &str,
    file: &str,
    docs: &[(usize, &Document)],
) -> Result<(Policy, Vec<String>), PolicyError> {
    if let Some((n, _)) = docs.iter().find(|(_, d)| !is_typed(d) && !d.is_empty()) {
        return Err(PolicyError(format!(
            "{file}: document {n} has no kind, as a driftguard policy has none, beside Argo CD Applications: it would be dropped. Give the Applications with --argocd-application and the policy alone with --policy"
        )));
    }
    let imported = argocd::parse(text, file)?;
    let mut notes = imported.skipped;
    let names: Vec<&str> = imported
        .applications
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    notes.push(format!(
        "{file}: Argo CD Application(s) {}: the embedded default policy applies, with their ignoreDifferences",
        names.join(", ")
    ));
    Ok((
        Policy::embedded().with_applications(imported.applications),
        notes,
    ))
}

/// The note for a manifest accepted in place of a policy, or why it is not.
fn foreign(file: &str, doc: &Document) -> Result<String, PolicyError> {
    let (api_version, kind) = (text_at(doc, "apiVersion"), text_at(doc, "kind"));
    let group = api_version.split('/').next().unwrap_or_default();
    let Some((_, _, advice)) = FOREIGN.iter().find(|(g, k, _)| *g == group && *k == kind) else {
        return Err(PolicyError(format!(
            "{file}: apiVersion `{api_version}`, kind `{kind}` is not a driftguard policy, which has no apiVersion or kind: remove them if this is the policy (its keys: {})",
            schema::policy_keys().join(", ")
        )));
    };
    let mixed: Vec<&str> = (schema::policy_keys().iter().copied())
        .filter(|k| doc.contains_key(*k))
        .collect();
    if !mixed.is_empty() {
        return Err(PolicyError(format!(
            "{file}: {api_version} {kind} also holds driftguard policy keys ({}), which would be dropped: a policy has no apiVersion or kind, remove them if this is the policy",
            mixed.join(", ")
        )));
    }
    Ok(format!(
        "{file}: {api_version} {kind} is not a driftguard policy ({advice}); the embedded default policy applies"
    ))
}

/// The policy from `--policy` (or the embedded default) plus the Applications
/// of `--argocd-application` files, with notes for the operator.
pub(crate) fn load_sources(
    policy: Option<&FsPath>,
    applications: &[std::path::PathBuf],
) -> Result<(Policy, Vec<String>), PolicyError> {
    let read = |path: &FsPath| {
        std::fs::read_to_string(path)
            .map_err(|e| PolicyError(format!("{}: cannot read: {e}", path.display())))
    };
    let (policy, mut notes) = match policy {
        Some(path) => Policy::from_any_yaml(&read_policy_file(path)?, &path.display().to_string())?,
        None => (Policy::embedded(), Vec::new()),
    };
    let mut apps = Vec::new();
    for path in applications {
        let imported = argocd::parse(&read(path)?, &path.display().to_string())?;
        notes.extend(imported.skipped);
        apps.extend(imported.applications);
    }
    Ok((policy.with_applications(apps), notes))
}

/// A policy file's text. A file with no YAML in it is refused rather than
/// read as the defaults: a reload that catches a file between its truncation
/// and its new content sees exactly that, and must keep the last good policy
/// instead of switching every namespace to the defaults for a moment. `{}`
/// asks for the defaults explicitly.
pub(super) fn read_policy_file(path: &FsPath) -> Result<String, PolicyError> {
    let name = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| PolicyError(format!("{name}: cannot read: {e}")))?;
    let has_yaml = text.lines().any(|line| {
        let line = line.trim();
        !line.is_empty() && !line.starts_with('#') && line != "---"
    });
    if has_yaml {
        Ok(text)
    } else {
        Err(PolicyError(format!(
            "{name}: the policy file is empty (write `{{}}` to use the defaults)"
        )))
    }
}

#[cfg(test)]
mod tests;
