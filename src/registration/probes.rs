//! The writes a registration is checked with. They vary what the policy and
//! the tools' settings decide about (who writes, which tracking keys an
//! object carries, the namespace's mode, the kind of write), over every value
//! either side names: the policy's patterns and keys, the tools' instance
//! labels, and every string literal in either registration's conditions. So a
//! name the live registration skips, or a key it no longer sends, is probed
//! whatever shape of CEL holds it.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::apiserver::{Attributes, Labels, Namespaces};
use crate::policy::{Mode, Policy};
use crate::sources::Sources;
use crate::text::{is_dns_label, is_dns_subdomain, is_qualified_name};

/// One probe write, and what it varies, for the report.
#[derive(Clone, Debug)]
pub(crate) struct Probe {
    pub(crate) what: String,
    pub(crate) attributes: Attributes,
    /// A `scale` write's parent, as the server would read it.
    pub(crate) parent: Option<Value>,
}

/// The namespace probes are written in; never one a registration opts out.
pub(crate) const NAMESPACE: &str = "driftguard-probe";
const NAME: &str = "driftguard-probe";
/// Stands for the namespace a probe is written in, in its tracking id, so
/// that the id names the object wherever it is.
const IN_NAMESPACE: &str = "@namespace@";
/// A person: no policy trusts it (a policy that did would be refused).
const PERSON: &str = "driftguard-probe:person";
/// Literals and keys probed at most: a registration's conditions are at most
/// 64 expressions, so more means something else is wrong.
const MAX_VALUES: usize = 256;

/// The probes for `policy` and `sources`, with `literals` from both
/// registrations' conditions; and the Namespaces they are written in.
pub(crate) fn probes(
    policy: &Policy,
    sources: Option<&Sources>,
    literals: &BTreeSet<String>,
) -> (Vec<Probe>, Namespaces) {
    let keys = tracking_keys(policy, sources, literals);
    let mut namespaces = vec![NAMESPACE.to_owned()];
    let mut probes = Vec::new();
    for meta in &keys {
        for operation in ["UPDATE", "CREATE", "DELETE"] {
            probes.push(write(operation, NAMESPACE, PERSON, &[], meta));
        }
    }
    // Who writes, on an object the policy's own detector claims; and each
    // key beside that claim (a condition may skip on one).
    if let Some(claimed) = keys.first() {
        for meta in keys.iter().skip(1) {
            probes.push(write("UPDATE", NAMESPACE, PERSON, &[], &claimed.and(meta)));
        }
        for identity in identities(policy, literals) {
            probes.push(write("UPDATE", NAMESPACE, &identity, &[], claimed));
            probes.push(write("UPDATE", NAMESPACE, PERSON, &[identity], claimed));
        }
        for namespace in mode_namespaces(policy) {
            probes.push(write("UPDATE", &namespace, PERSON, &[], claimed));
            namespaces.push(namespace);
        }
        probes.push(scale(claimed));
        for (group, resource) in kinds(literals) {
            probes.push(kind_write(&group, &resource, claimed));
        }
    }
    probes.extend(deletes_of_containers());
    let namespaces = namespaces
        .into_iter()
        .map(|n| {
            let labels: Labels = [("kubernetes.io/metadata.name".to_owned(), n.clone())].into();
            (n, labels)
        })
        .collect();
    (probes, namespaces)
}

/// Metadata that claims an object, one way per entry: the policy's
/// detectors first, then the tools' instance labels, then every literal
/// that could be a key.
fn tracking_keys(
    policy: &Policy,
    sources: Option<&Sources>,
    literals: &BTreeSet<String>,
) -> Vec<Metadata> {
    let tracking_id = format!("{NAME}:apps/Deployment:{IN_NAMESPACE}/{NAME}");
    let mut keys = Vec::new();
    if let Some(argo) = &policy.argocd {
        keys.push(Metadata::annotation(
            &argo.tracking_annotation,
            &tracking_id,
        ));
        keys.extend(argo.instance_label.iter().map(|l| Metadata::label(l, NAME)));
    }
    if policy.flux {
        keys.push(Metadata::flux("kustomize"));
        keys.push(Metadata::flux("helm"));
    }
    let instance_labels = sources
        .into_iter()
        .flat_map(|s| &s.argocd)
        .filter_map(|a| a.instance_label.as_deref());
    keys.extend(instance_labels.map(|l| Metadata::label(l, NAME)));
    for key in literals.iter().filter(|l| looks_like_a_key(l)) {
        keys.push(Metadata::annotation(key, &tracking_id));
        keys.push(Metadata::label(key, NAME));
    }
    let mut seen = BTreeSet::new();
    keys.retain(|m| seen.insert(m.what.clone()));
    keys.truncate(MAX_VALUES);
    keys
}

/// A qualified key with a prefix (`example.com/name`): the shape of every
/// tracking key.
fn looks_like_a_key(s: &str) -> bool {
    s.split_once('/')
        .is_some_and(|(prefix, _)| prefix.contains('.'))
        && is_qualified_name(s)
}

/// Every user or group name either side could skip: each literal and each
/// policy pattern, as written and extended (a prefix's `startsWith`), with a
/// glob's wildcards filled.
fn identities(policy: &Policy, literals: &BTreeSet<String>) -> Vec<String> {
    let mut names = BTreeSet::new();
    let patterns = [&policy.controllers, &policy.trusted]
        .into_iter()
        .flat_map(|identities| {
            let (users, groups) = identities.patterns();
            users.into_iter().chain(groups)
        })
        .map(|p| p.replace(['*', '?'], "x"));
    for name in literals
        .iter()
        // Every request has a user name (`system:anonymous` at least).
        .filter(|l| !l.is_empty() && !looks_like_a_key(l))
        .cloned()
        .chain(patterns)
    {
        names.insert(format!("{name}x"));
        names.insert(name);
    }
    names.into_iter().take(MAX_VALUES).collect()
}

/// A namespace each `namespaces` entry of the policy names, wildcards filled.
fn mode_namespaces(policy: &Policy) -> Vec<String> {
    [Mode::Audit, Mode::Warn, Mode::Enforce]
        .into_iter()
        .flat_map(|mode| policy.namespace_patterns(mode))
        .filter(|p| !p.contains(['[', '{', '\\']))
        .map(|p| p.replace(['*', '?'], "x"))
        .filter(|n| n != NAMESPACE)
        .take(MAX_VALUES)
        .collect()
}

/// How a probe object is claimed.
#[derive(Clone, Debug)]
struct Metadata {
    what: String,
    annotations: Value,
    labels: Value,
}

impl Metadata {
    fn annotation(key: &str, value: &str) -> Self {
        Self {
            what: format!("annotated `{key}`"),
            annotations: json!({ key: value }),
            labels: json!({}),
        }
    }

    fn label(key: &str, value: &str) -> Self {
        Self {
            what: format!("labelled `{key}`"),
            annotations: json!({}),
            labels: json!({ key: value }),
        }
    }

    /// Both claims at once.
    fn and(&self, other: &Metadata) -> Self {
        let merge = |a: &Value, b: &Value| {
            let mut m = a.as_object().cloned().unwrap_or_default();
            m.extend(b.as_object().cloned().unwrap_or_default());
            Value::Object(m)
        };
        Self {
            what: format!("{} and {}", self.what, other.what),
            annotations: merge(&self.annotations, &other.annotations),
            labels: merge(&self.labels, &other.labels),
        }
    }

    fn flux(tool: &str) -> Self {
        let (name, namespace) = (
            format!("{tool}.toolkit.fluxcd.io/name"),
            format!("{tool}.toolkit.fluxcd.io/namespace"),
        );
        Self {
            what: format!("labelled `{name}`"),
            annotations: json!({}),
            labels: json!({ name: NAME, namespace: "flux-system" }),
        }
    }
}

/// A probe object's metadata: `meta`'s claim, its tracking id naming the
/// object (`group/Kind`, namespace) wherever it is written.
fn metadata(namespace: &str, meta: &Metadata, group_kind: &str) -> Value {
    let mut metadata = json!({
        "name": NAME,
        "namespace": namespace,
        "uid": "00000000-0000-4000-8000-0000000000d9",
    });
    // As the apiserver stores them: an empty map is no map.
    for (key, map) in [("annotations", &meta.annotations), ("labels", &meta.labels)] {
        if map.as_object().is_some_and(|m| !m.is_empty()) {
            let text = map
                .to_string()
                .replace(IN_NAMESPACE, namespace)
                .replace("apps/Deployment", group_kind);
            metadata[key] = serde_json::from_str(&text).unwrap_or_default();
        }
    }
    metadata
}

fn deployment(namespace: &str, meta: &Metadata, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(namespace, meta, "apps/Deployment"),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": NAME}},
            "template": {
                "metadata": {"labels": {"app": NAME}},
                "spec": {"containers": [{"name": "app", "image": image}]},
            },
        },
    })
}

/// A person's UPDATE of a claimed object of `group`/`resource`: each kind
/// either side names (the excluded kinds' condition lists them), so a kind
/// the live webhooks exclude and the policy judges is found.
fn kind_write(group: &str, resource: &str, meta: &Metadata) -> Probe {
    let kind = {
        let singular = resource.strip_suffix('s').unwrap_or(resource);
        let mut chars = singular.chars();
        chars
            .next()
            .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
            .unwrap_or_default()
    };
    let api_version = if group.is_empty() {
        "v1".to_owned()
    } else {
        format!("{group}/v1")
    };
    let group_kind = format!("{group}/{kind}");
    let object = |value: &str| {
        json!({
            "apiVersion": api_version,
            "kind": kind,
            "metadata": metadata(NAMESPACE, meta, &group_kind),
            "spec": {"probe": value},
            "data": {"probe": value},
        })
    };
    let mut attributes = attributes("UPDATE", NAMESPACE, PERSON, &[]);
    attributes.resource = (group.into(), "v1".into(), resource.into());
    attributes.kind = (group.into(), "v1".into(), kind.clone());
    attributes.old_object = Some(object("1"));
    attributes.object = Some(object("2"));
    Probe {
        what: format!("UPDATE by a person of a {group_kind} {}", meta.what),
        attributes,
        parent: None,
    }
}

/// `group/resource` (the excluded kinds' form), or a bare API group, named
/// by a literal.
fn kinds(literals: &BTreeSet<String>) -> Vec<(String, String)> {
    literals
        .iter()
        .filter_map(|l| match l.split_once('/') {
            Some((group, resource))
                if (group.is_empty() || is_dns_subdomain(group)) && is_dns_label(resource) =>
            {
                Some((group.to_owned(), resource.to_owned()))
            }
            None if l.contains('.') && is_dns_subdomain(l) => {
                Some((l.clone(), "driftguardprobes".into()))
            }
            _ => None,
        })
        .take(MAX_VALUES)
        .collect()
}

fn attributes(operation: &str, namespace: &str, user: &str, groups: &[String]) -> Attributes {
    let mut all_groups = groups.to_vec();
    all_groups.push("system:authenticated".into());
    Attributes {
        operation: operation.into(),
        resource: ("apps".into(), "v1".into(), "deployments".into()),
        sub_resource: String::new(),
        kind: ("apps".into(), "v1".into(), "Deployment".into()),
        name: NAME.into(),
        namespace: namespace.into(),
        username: user.into(),
        groups: all_groups,
        object: None,
        old_object: None,
        dry_run: false,
    }
}

/// A person's (or `user`'s) write of a Deployment claimed by `meta`.
fn write(
    operation: &str,
    namespace: &str,
    user: &str,
    groups: &[String],
    meta: &Metadata,
) -> Probe {
    let mut attributes = attributes(operation, namespace, user, groups);
    let old = deployment(namespace, meta, "example.com/app:1");
    let new = deployment(namespace, meta, "example.com/app:2");
    (attributes.old_object, attributes.object) = match operation {
        "CREATE" => (None, Some(new)),
        "DELETE" => (Some(old), None),
        _ => (Some(old), Some(new)),
    };
    let by = match groups {
        [] => format!("`{user}`"),
        [group] => format!("a member of `{group}`"),
        _ => "a person".into(),
    };
    Probe {
        what: format!(
            "{operation} by {by} of a Deployment in `{namespace}` {}",
            meta.what
        ),
        attributes,
        parent: None,
    }
}

/// A person's `kubectl scale` of a claimed Deployment.
fn scale(meta: &Metadata) -> Probe {
    let mut attributes = attributes("UPDATE", NAMESPACE, PERSON, &[]);
    attributes.sub_resource = "scale".into();
    attributes.kind = ("autoscaling".into(), "v1".into(), "Scale".into());
    let scale = |replicas: i64| {
        json!({
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "spec": {"replicas": replicas},
        })
    };
    attributes.old_object = Some(scale(1));
    attributes.object = Some(scale(5));
    Probe {
        what: format!("a `kubectl scale` of a Deployment {}", meta.what),
        attributes,
        parent: Some(deployment(NAMESPACE, meta, "example.com/app:1")),
    }
}

/// DELETEs of a Namespace and of a CRD, which take what they hold with them.
fn deletes_of_containers() -> Vec<Probe> {
    let namespace = {
        let mut a = attributes("DELETE", NAMESPACE, PERSON, &[]);
        a.resource = (String::new(), "v1".into(), "namespaces".into());
        a.kind = (String::new(), "v1".into(), "Namespace".into());
        a.name = NAMESPACE.into();
        a.old_object = Some(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": NAMESPACE, "labels": {"kubernetes.io/metadata.name": NAMESPACE}},
        }));
        a
    };
    let crd = {
        let mut a = attributes("DELETE", "", PERSON, &[]);
        a.resource = (
            "apiextensions.k8s.io".into(),
            "v1".into(),
            "customresourcedefinitions".into(),
        );
        a.kind = (
            "apiextensions.k8s.io".into(),
            "v1".into(),
            "CustomResourceDefinition".into(),
        );
        a.name = "rollouts.argoproj.io".into();
        a.old_object = Some(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "rollouts.argoproj.io"},
        }));
        a
    };
    [
        ("a person's DELETE of a Namespace", namespace),
        ("a person's DELETE of a CustomResourceDefinition", crd),
    ]
    .into_iter()
    .map(|(what, attributes)| Probe {
        what: what.into(),
        attributes,
        parent: None,
    })
    .collect()
}

/// Every string literal in a CEL expression (`'…'` or `"…"`, with `\`
/// escapes), unescaped.
pub(crate) fn literals(expression: &str, into: &mut BTreeSet<String>) {
    let mut chars = expression.chars();
    while let Some(c) = chars.next() {
        if c != '\'' && c != '"' {
            continue;
        }
        let mut literal = String::new();
        while let Some(d) = chars.next() {
            match d {
                '\\' => literal.extend(chars.next()),
                d if d == c => break,
                d => literal.push(d),
            }
        }
        if into.len() < MAX_VALUES {
            into.insert(literal);
        }
    }
}
