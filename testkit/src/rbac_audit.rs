//! One user's API requests, as the kube-apiserver's audit log recorded them
//! (`AUDIT_POLICY` in control_plane.rs), held against the RBAC rules of rendered
//! ClusterRoles and Roles: which grants the requests used, which they never
//! did, and which requests were refused.
//!
//! Matching follows kubernetes/kubernetes `pkg/apis/rbac/v1/evaluation_helpers.go`
//! (`VerbMatches`, `APIGroupMatches`, `ResourceMatches`, `ResourceNameMatches`):
//! `*` matches every verb, group and resource, a resource `*/SUB` every
//! resource's subresource SUB, and resourceNames, when given, must name the
//! request's object. For a list or watch with a `metadata.name` field
//! selector the apiserver records that name as the request's (`requestinfo.go`),
//! which is how a `resourceNames` rule authorizes it.
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;

/// One API request, from its audit events (one per stage, joined by auditID).
#[derive(Clone, Debug)]
pub struct Request {
    pub verb: String,
    /// The group, empty for the core group.
    pub group: String,
    /// `resource` or `resource/subresource`; for a non-resource request its path.
    pub resource: String,
    pub namespace: String,
    pub name: String,
    /// The response code; 0 when no stage recorded one.
    pub code: u16,
    pub non_resource: bool,
}

impl Request {
    /// `verb group/resource`, the core group as `core`.
    pub fn key(&self) -> String {
        if self.non_resource {
            return format!("{} {}", self.verb, self.resource);
        }
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        format!("{} {group}/{}", self.verb, self.resource)
    }
}

/// The requests `user` made, in the order the log first saw them.
pub fn requests_of(events: &[Value], user: &str) -> Vec<Request> {
    let mut order = Vec::new();
    let mut by_id: BTreeMap<String, Request> = BTreeMap::new();
    for e in events {
        if e["user"]["username"] != user {
            continue;
        }
        let id = e["auditID"].as_str().unwrap_or_default().to_owned();
        let code = e["responseStatus"]["code"].as_u64().unwrap_or(0) as u16;
        if let Some(seen) = by_id.get_mut(&id) {
            // A watch is logged when it starts and again when it ends.
            if code != 0 {
                seen.code = code;
            }
            continue;
        }
        let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let o = &e["objectRef"];
        let request = if o.is_object() {
            let sub = s(&o["subresource"]);
            Request {
                verb: s(&e["verb"]),
                group: s(&o["apiGroup"]),
                resource: if sub.is_empty() {
                    s(&o["resource"])
                } else {
                    format!("{}/{sub}", s(&o["resource"]))
                },
                namespace: s(&o["namespace"]),
                name: s(&o["name"]),
                code,
                non_resource: false,
            }
        } else {
            let uri = s(&e["requestURI"]);
            Request {
                verb: s(&e["verb"]),
                group: String::new(),
                resource: uri.split('?').next().unwrap_or_default().to_owned(),
                namespace: String::new(),
                name: String::new(),
                code,
                non_resource: true,
            }
        };
        order.push(id.clone());
        by_id.insert(id, request);
    }
    order
        .into_iter()
        .filter_map(|id| by_id.remove(&id))
        .collect()
}

/// One verb on one group and resource, from one rule of a rendered role.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    /// `ClusterRole/NAME` or `Role/NAMESPACE/NAME`.
    pub role: String,
    /// The Role's namespace; `None` for a ClusterRole (bound cluster-wide).
    pub namespace: Option<String>,
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub names: Vec<String>,
}

impl Grant {
    /// Whether RBAC lets this grant authorize `r`.
    pub fn allows(&self, r: &Request) -> bool {
        if r.non_resource {
            return false;
        }
        let verb = self.verb == "*" || self.verb == r.verb;
        let group = self.group == "*" || self.group == r.group;
        let resource = self.resource == "*"
            || self.resource == r.resource
            || r.resource
                .split_once('/')
                .is_some_and(|(_, sub)| self.resource == format!("*/{sub}"));
        let name = self.names.is_empty() || self.names.contains(&r.name);
        let namespace = self.namespace.as_ref().is_none_or(|ns| *ns == r.namespace);
        verb && group && resource && name && namespace
    }

    /// `verb group/resource`, as in [`Request::key`].
    pub fn key(&self) -> String {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        format!("{} {group}/{}", self.verb, self.resource)
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in {}", self.key(), self.role)?;
        if !self.names.is_empty() {
            write!(f, " (resourceNames {:?})", self.names)?;
        }
        Ok(())
    }
}

/// Every (verb, group, resource) of every rule of the ClusterRoles and Roles in `docs`.
pub fn grants(docs: &[Value]) -> Vec<Grant> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    let mut out = BTreeSet::new();
    for doc in docs {
        let kind = doc["kind"].as_str().unwrap_or_default();
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        let (role, namespace) = match kind {
            "ClusterRole" => (format!("ClusterRole/{name}"), None),
            "Role" => {
                let ns = doc["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                (format!("Role/{ns}/{name}"), Some(ns))
            }
            _ => continue,
        };
        for rule in doc["rules"].as_array().into_iter().flatten() {
            let names = strings(&rule["resourceNames"]);
            for verb in strings(&rule["verbs"]) {
                for group in strings(&rule["apiGroups"]) {
                    for resource in strings(&rule["resources"]) {
                        out.insert(Grant {
                            role: role.clone(),
                            namespace: namespace.clone(),
                            verb: verb.clone(),
                            group: group.clone(),
                            resource,
                            names: names.clone(),
                        });
                    }
                }
            }
        }
    }
    out.into_iter().collect()
}

/// The grants no request in `requests` used.
pub fn unused<'a>(grants: &'a [Grant], requests: &[Request]) -> Vec<&'a Grant> {
    grants
        .iter()
        .filter(|g| !requests.iter().any(|r| g.allows(r)))
        .collect()
}

/// The requests answered 403.
pub fn refused(requests: &[Request]) -> Vec<&Request> {
    requests.iter().filter(|r| r.code == 403).collect()
}

/// `count  verb group/resource [namespace/name, ...]` per distinct request
/// key, for the test's output.
pub fn table(requests: &[Request]) -> String {
    let mut rows: BTreeMap<String, (usize, BTreeSet<String>)> = BTreeMap::new();
    for r in requests {
        let row = rows.entry(r.key()).or_default();
        row.0 += 1;
        if !r.name.is_empty() || !r.namespace.is_empty() {
            row.1.insert(format!("{}/{}", r.namespace, r.name));
        }
    }
    rows.into_iter()
        .map(|(key, (count, objects))| {
            let mut shown: Vec<&str> = objects.iter().map(String::as_str).take(4).collect();
            if objects.len() > 4 {
                shown.push("…");
            }
            format!("{count:>5}  {key}  {}\n", shown.join(" "))
        })
        .collect()
}
