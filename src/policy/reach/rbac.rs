//! What RBAC grants, read as the authorizer reads it
//! (`pkg/apis/rbac/v1/evaluation_helpers.go`): a binding's subjects and
//! role, and the rules of that role that let one act as another identity.

use k8s_openapi::api::rbac::v1::{PolicyRule, RoleRef, Subject};

use super::{How, Rbac, SA_GROUPS, SA_PREFIX};

/// A binding's subject as the authorizer sees it.
pub(super) struct Member {
    pub(super) label: String,
    /// The username it authenticates as (empty for a group).
    pub(super) username: String,
    /// The groups it is known to be in.
    pub(super) groups: Vec<String>,
    pub(super) is_account: bool,
}

impl Member {
    pub(super) fn of(s: &Subject, binding_namespace: Option<&str>) -> Self {
        match s.kind.as_str() {
            "ServiceAccount" => {
                // RBAC defaults an account's namespace to the RoleBinding's.
                let ns = s
                    .namespace
                    .as_deref()
                    .filter(|n| !n.is_empty())
                    .or(binding_namespace)
                    .unwrap_or_default();
                let mut groups: Vec<String> = SA_GROUPS.iter().map(|g| (*g).to_owned()).collect();
                groups.push(format!("system:serviceaccounts:{ns}"));
                Member {
                    label: format!("ServiceAccount {ns}/{}", s.name),
                    username: format!("{SA_PREFIX}{ns}:{}", s.name),
                    groups,
                    is_account: true,
                }
            }
            "Group" => Member {
                label: format!("Group {}", s.name),
                username: String::new(),
                groups: vec![s.name.clone()],
                is_account: false,
            },
            kind => Member {
                label: format!("{kind} {}", s.name),
                username: s.name.clone(),
                groups: Vec::new(),
                is_account: false,
            },
        }
    }
}

/// The role a binding refers to, named, and its rules; `None` when missing.
pub(super) fn resolve<'a>(
    rbac: &'a Rbac,
    namespace: Option<&str>,
    role_ref: &RoleRef,
) -> Option<(String, &'a [PolicyRule])> {
    let rules = |r: &'a Option<Vec<PolicyRule>>| r.as_deref().unwrap_or_default();
    match (role_ref.kind.as_str(), namespace) {
        ("ClusterRole", _) => rbac
            .cluster_roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(role_ref.name.as_str()))
            .map(|r| (format!("ClusterRole {}", role_ref.name), rules(&r.rules))),
        ("Role", Some(ns)) => rbac
            .roles
            .iter()
            .find(|r| {
                r.metadata.name.as_deref() == Some(role_ref.name.as_str())
                    && r.metadata.namespace.as_deref() == Some(ns)
            })
            .map(|r| (format!("Role {ns}/{}", role_ref.name), rules(&r.rules))),
        _ => None,
    }
}

fn verb(rule: &PolicyRule, verb: &str) -> bool {
    rule.verbs.iter().any(|v| v == "*" || v == verb)
}

fn api_group(rule: &PolicyRule, group: &str) -> bool {
    rule.api_groups
        .iter()
        .flatten()
        .any(|g| g == "*" || g == group)
}

/// `ResourceMatches`: `*`, the exact name, or `*/<subresource>`.
fn resource(rule: &PolicyRule, combined: &str) -> bool {
    let sub = combined.split_once('/').map(|(_, s)| s);
    rule.resources
        .iter()
        .flatten()
        .any(|r| r == "*" || r == combined || sub.is_some_and(|s| r.strip_prefix("*/") == Some(s)))
}

/// Every verb on every resource of every group: cluster-admin's rule.
pub(super) fn is_everything(rule: &PolicyRule) -> bool {
    let star = |list: Option<&Vec<String>>| list.is_some_and(|l| l.iter().any(|x| x == "*"));
    rule.verbs.iter().any(|v| v == "*")
        && star(rule.api_groups.as_ref())
        && star(rule.resources.as_ref())
        && rule.resource_names.as_ref().is_none_or(Vec::is_empty)
}

/// What one rule grants that acts as another identity, with its
/// `resourceNames` (`None`: every name).
pub(super) fn grants(rule: &PolicyRule) -> Vec<(How, Option<Vec<String>>)> {
    let names = rule.resource_names.clone().filter(|n| !n.is_empty());
    let mut out = Vec::new();
    // Constrained impersonation, in its own group.
    if api_group(rule, "authentication.k8s.io") {
        for (v, res, how) in [
            (
                "impersonate:serviceaccount",
                "serviceaccounts",
                How::ConstrainedServiceAccounts,
            ),
            ("impersonate:user-info", "users", How::ConstrainedUsers),
            ("impersonate:user-info", "groups", How::ConstrainedGroups),
        ] {
            if verb(rule, v) && resource(rule, res) {
                out.push((how, names.clone()));
            }
        }
    }
    if !api_group(rule, "") {
        return out;
    }
    if verb(rule, "impersonate") {
        for (res, how) in [
            ("serviceaccounts", How::ImpersonateServiceAccounts),
            ("users", How::ImpersonateUsers),
            ("groups", How::ImpersonateGroups),
        ] {
            if resource(rule, res) {
                out.push((how, names.clone()));
            }
        }
    }
    if verb(rule, "create") {
        if resource(rule, "serviceaccounts/token") {
            out.push((How::CreateToken, names.clone()));
        }
        // A create request carries no name: resourceNames never allow it.
        if names.is_none() && resource(rule, "pods") {
            out.push((How::CreatePods, None));
        }
    }
    out
}
