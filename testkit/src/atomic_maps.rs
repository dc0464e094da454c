//! The atomic maps of every built-in kind, read from a real kube-apiserver's
//! OpenAPI v3 documents: what `src/drift/atomic_maps.json` must hold
//! (`tests/e2e_schema.rs` compares them, and writes the file on request).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// Groups whose kinds driftguard never judges as GitOps-managed objects, and
/// whose schemas recurse without end (a CRD's JSONSchemaProps).
const SKIPPED_GROUPS: [&str; 1] = ["apiextensions.k8s.io"];

/// For each built-in `apiVersion/kind`, the pointer patterns (`*` for a list
/// item or a map value) of its atomic maps: `x-kubernetes-map-type: atomic`
/// on the field or on the type it refers to. `documents` are the OpenAPI v3
/// documents, one per group-version, as the apiserver serves them.
pub fn atomic_maps(documents: &[Value]) -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for doc in documents {
        let Some(schemas) = doc
            .pointer("/components/schemas")
            .and_then(Value::as_object)
        else {
            continue;
        };
        for schema in schemas.values() {
            for gvk in schema["x-kubernetes-group-version-kind"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let (group, version, kind) = (
                    gvk["group"].as_str().unwrap_or_default(),
                    gvk["version"].as_str().unwrap_or_default(),
                    gvk["kind"].as_str().unwrap_or_default(),
                );
                // Lists, options and events of the meta group are no objects one writes.
                if SKIPPED_GROUPS.contains(&group)
                    || kind.ends_with("List")
                    || schema.pointer("/properties/metadata").is_none()
                {
                    continue;
                }
                let api_version = if group.is_empty() {
                    version.to_owned()
                } else {
                    format!("{group}/{version}")
                };
                let mut found = BTreeSet::new();
                walk(
                    schemas,
                    schema,
                    &mut String::new(),
                    &mut Vec::new(),
                    &mut found,
                );
                out.insert(format!("{api_version}/{kind}"), found);
            }
        }
    }
    out
}

/// The schema a property refers to (`$ref`, or `allOf` of one `$ref`).
fn resolve<'a>(
    schemas: &'a serde_json::Map<String, Value>,
    schema: &'a Value,
) -> (&'a Value, Option<&'a str>) {
    let reference = schema["$ref"]
        .as_str()
        .or_else(|| schema.pointer("/allOf/0/$ref").and_then(Value::as_str));
    match reference.and_then(|r| r.strip_prefix("#/components/schemas/")) {
        Some(name) => (schemas.get(name).unwrap_or(&Value::Null), Some(name)),
        None => (schema, None),
    }
}

fn walk(
    schemas: &serde_json::Map<String, Value>,
    property: &Value,
    path: &mut String,
    stack: &mut Vec<String>,
    found: &mut BTreeSet<String>,
) {
    let (schema, name) = resolve(schemas, property);
    if let Some(name) = name {
        // A type that contains itself (none among built-in kinds but
        // JSONSchemaProps, skipped) would recurse without end.
        if stack.iter().any(|s| s == name) || stack.len() > 32 {
            return;
        }
        stack.push(name.to_owned());
    }
    let atomic = [property, schema]
        .iter()
        .any(|s| s["x-kubernetes-map-type"] == "atomic");
    if atomic {
        found.insert(if path.is_empty() {
            "/".into()
        } else {
            path.clone()
        });
    } else {
        let len = path.len();
        for (key, sub) in schema["properties"].as_object().into_iter().flatten() {
            path.push('/');
            path.push_str(&key.replace('~', "~0").replace('/', "~1"));
            walk(schemas, sub, path, stack, found);
            path.truncate(len);
        }
        for nested in ["items", "additionalProperties"] {
            if schema[nested].is_object() {
                path.push_str("/*");
                walk(schemas, &schema[nested], path, stack, found);
                path.truncate(len);
            }
        }
    }
    if name.is_some() {
        stack.pop();
    }
}
