//! Who else may act as an identity driftguard trusts: RBAC objects read as
//! plain data (the caller lists them), every path named as the trusted
//! identity, the binding, its role and its subjects. `edit` grants such paths
//! inside its namespace (docs/gitops.md, "Sync service accounts out of reach").
//! Matching follows Kubernetes v1.34 to v1.37 as read there: the RBAC
//! authorizer (`pkg/apis/rbac/v1/evaluation_helpers.go`: `*`, `*/token`,
//! `resourceNames`, which never limit `create`), legacy impersonation
//! (`endpoints/filters/impersonation.go`: `serviceaccounts` in the account's
//! namespace, cluster-scoped `users` for any other name, which a glob such as
//! `system:serviceaccount:kube-system:*` also matches: `...:kube-system:a:b`) and constrained
//! impersonation (`impersonation/mode.go`, on by default since v1.36;
//! `impersonate-on:` may come from any binding, so it is not required here).

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use serde::Serialize;

use super::Identities;
use super::pattern::{Part, Pattern};
use crate::text::{is_dns_label, is_dns_subdomain};
use rbac::{Member, grants, is_everything, resolve};

mod rbac;

/// `system:serviceaccount:` (k8s.io/apiserver `ServiceAccountUsernamePrefix`).
pub(crate) const SA_PREFIX: &str = "system:serviceaccount:";
/// The groups every service account of a namespace is in, besides
/// `system:serviceaccounts:<namespace>`.
const SA_GROUPS: [&str; 2] = ["system:serviceaccounts", "system:authenticated"];
/// Namespace names are DNS labels.
pub(crate) const NAMESPACE_CHARS: &str = "abcdefghijklmnopqrstuvwxyz0123456789-";
/// Service account names are DNS subdomains.
pub(crate) const NAME_CHARS: &str = "abcdefghijklmnopqrstuvwxyz0123456789-.";

/// A service account a GitOps source makes driftguard trust for its own
/// objects (a Flux Kustomization's `spec.serviceAccountName`, Argo CD's sync
/// impersonation).
#[derive(Clone, Debug)]
pub(crate) struct SyncTrust {
    /// `system:serviceaccount:<ns>:<name>`.
    pub(crate) username: String,
    /// `Flux Kustomization team-a/apps`.
    pub(crate) origin: String,
}

/// The cluster's RBAC objects, as listed. Aggregated ClusterRoles (`edit`,
/// `admin`) are read with the rules their controller filled in.
#[derive(Clone, Debug, Default)]
pub(crate) struct Rbac {
    pub(crate) cluster_roles: Vec<ClusterRole>,
    pub(crate) roles: Vec<Role>,
    pub(crate) cluster_role_bindings: Vec<ClusterRoleBinding>,
    pub(crate) role_bindings: Vec<RoleBinding>,
}

/// How a subject may act as an identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) enum How {
    /// `kubectl --as=system:serviceaccount:NS:NAME`.
    #[serde(rename = "impersonate serviceaccounts")]
    ImpersonateServiceAccounts,
    /// A token of the account, from the TokenRequest API.
    #[serde(rename = "create serviceaccounts/token")]
    CreateToken,
    /// A pod that runs as the account (and, with `exec`, its token).
    #[serde(rename = "create pods")]
    CreatePods,
    /// `kubectl --as=NAME` for a name that is not a service account's.
    #[serde(rename = "impersonate users")]
    ImpersonateUsers,
    /// `kubectl --as=... --as-group=NAME`.
    #[serde(rename = "impersonate groups")]
    ImpersonateGroups,
    /// Constrained impersonation of a service account.
    #[serde(rename = "impersonate:serviceaccount serviceaccounts")]
    ConstrainedServiceAccounts,
    /// Constrained impersonation of a user that is not an account's.
    #[serde(rename = "impersonate:user-info users")]
    ConstrainedUsers,
    /// Constrained impersonation of a group.
    #[serde(rename = "impersonate:user-info groups")]
    ConstrainedGroups,
}

impl How {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            How::ImpersonateServiceAccounts => "impersonate serviceaccounts",
            How::CreateToken => "create serviceaccounts/token",
            How::CreatePods => "create pods",
            How::ImpersonateUsers => "impersonate users",
            How::ImpersonateGroups => "impersonate groups",
            How::ConstrainedServiceAccounts => "impersonate:serviceaccount serviceaccounts",
            How::ConstrainedUsers => "impersonate:user-info users",
            How::ConstrainedGroups => "impersonate:user-info groups",
        }
    }

    fn is_service_account(self) -> bool {
        matches!(
            self,
            How::ImpersonateServiceAccounts
                | How::CreateToken
                | How::CreatePods
                | How::ConstrainedServiceAccounts
        )
    }
}

/// One way in: the permission and the names it is limited to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Way {
    pub(crate) how: How,
    /// The `resourceNames` through which the identity is reached; empty:
    /// every name.
    pub(crate) names: Vec<String>,
}

/// A trusted identity that the subjects of one binding may act as.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Finding {
    /// The pattern, username or group as the policy (or source) trusts it.
    pub(crate) identity: String,
    /// `trusted.users`, `controllers.groups`, `Flux Kustomization team-a/apps`.
    pub(crate) trusted_by: String,
    /// The binding's namespace; `None`: every namespace (a ClusterRoleBinding).
    pub(crate) namespace: Option<String>,
    /// `RoleBinding kube-system/alice-sa` or `ClusterRoleBinding name`.
    pub(crate) binding: String,
    /// `ClusterRole edit` or `Role kube-system/name`.
    pub(crate) role: String,
    /// `User alice`, `Group developers`, `ServiceAccount ci/runner`: those
    /// not exempt themselves.
    pub(crate) subjects: Vec<String>,
    pub(crate) ways: Vec<Way>,
}

/// What [`reach`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Reach {
    pub(crate) findings: Vec<Finding>,
    /// ClusterRoleBindings to a role with every verb on every resource, and
    /// their subjects that are not exempt: they may delete driftguard's
    /// webhook configurations (no webhook is called for those), so acting
    /// as a trusted identity gives them nothing more. Named, not findings.
    pub(crate) cluster_admins: Vec<String>,
    /// Bindings whose role does not exist (they grant nothing).
    pub(crate) missing_roles: Vec<String>,
}

/// One trusted pattern and where it comes from.
struct Trust {
    pattern: Pattern,
    group: bool,
    origin: String,
}

/// Every trusted identity that a subject of some binding, other than exempt
/// identities and the account itself, may act as; see the module's text.
pub(crate) fn reach(
    controllers: &Identities,
    trusted: &Identities,
    sync: &[SyncTrust],
    rbac: &Rbac,
) -> Reach {
    let trusts = trusts(controllers, trusted, sync);
    let exempt = |username: &str, groups: &[String]| {
        controllers.contains(username, groups) || trusted.contains(username, groups)
    };
    let mut out = Reach::default();
    for (namespace, binding, role_ref, subjects) in bindings(rbac) {
        let Some((role, rules)) = resolve(rbac, namespace.as_deref(), role_ref) else {
            out.missing_roles.push(format!(
                "{binding}: {} {} not found",
                role_ref.kind, role_ref.name
            ));
            continue;
        };
        let subjects: Vec<Member> = subjects
            .iter()
            .map(|s| Member::of(s, namespace.as_deref()))
            .filter(|m| !exempt(&m.username, &m.groups))
            .collect();
        if subjects.is_empty() {
            continue;
        }
        if namespace.is_none() && rules.iter().any(is_everything) {
            let names: Vec<&str> = subjects.iter().map(|m| m.label.as_str()).collect();
            out.cluster_admins
                .push(format!("{binding} ({role}): {}", names.join(", ")));
            continue;
        }
        for (i, hows) in reached(&trusts, rules, namespace.as_deref()) {
            let trust = &trusts[i];
            // Not the account itself: a Flux tenant's reconciler bound to
            // `admin` in its namespace may act as itself.
            let subjects: Vec<String> = subjects
                .iter()
                .filter(|m| trust.group || !m.is_account || !trust.pattern.is_match(&m.username))
                .map(|m| m.label.clone())
                .collect();
            if subjects.is_empty() {
                continue;
            }
            out.findings.push(Finding {
                identity: trust.pattern.source().to_owned(),
                trusted_by: trust.origin.clone(),
                namespace: namespace.clone(),
                binding: binding.clone(),
                role: role.clone(),
                subjects,
                ways: hows
                    .into_iter()
                    .map(|(how, names)| Way {
                        how,
                        names: names.unwrap_or_default(),
                    })
                    .collect(),
            });
        }
    }
    out.findings.sort_by(|a, b| {
        (&a.namespace, &a.identity, &a.binding).cmp(&(&b.namespace, &b.identity, &b.binding))
    });
    out.cluster_admins.sort();
    out.missing_roles.sort();
    out
}

/// Every trusted pattern: the policy's `controllers` and `trusted` users and
/// groups, and the sync accounts.
fn trusts(controllers: &Identities, trusted: &Identities, sync: &[SyncTrust]) -> Vec<Trust> {
    let mut trusts = Vec::new();
    for (identities, what) in [(controllers, "controllers"), (trusted, "trusted")] {
        for (set, part, group) in [
            (&identities.users, "users", false),
            (&identities.groups, "groups", true),
        ] {
            trusts.extend(set.iter().map(|p| Trust {
                pattern: p.clone(),
                group,
                origin: format!("{what}.{part}"),
            }));
        }
    }
    for s in sync {
        if let Ok(pattern) = Pattern::new(&s.username) {
            trusts.push(Trust {
                pattern,
                group: false,
                origin: s.origin.clone(),
            });
        }
    }
    trusts
}

/// Every binding: its namespace (`None`: a ClusterRoleBinding), its name as
/// reported, its role and its subjects.
fn bindings(rbac: &Rbac) -> impl Iterator<Item = (Option<String>, String, &RoleRef, &[Subject])> {
    let namespaced = rbac.role_bindings.iter().map(|b| {
        let ns = b.metadata.namespace.clone().unwrap_or_default();
        let name = b.metadata.name.as_deref().unwrap_or_default();
        (
            Some(ns.clone()),
            format!("RoleBinding {ns}/{name}"),
            &b.role_ref,
            b.subjects.as_deref().unwrap_or_default(),
        )
    });
    let cluster = rbac.cluster_role_bindings.iter().map(|b| {
        (
            None,
            format!(
                "ClusterRoleBinding {}",
                b.metadata.name.as_deref().unwrap_or_default()
            ),
            &b.role_ref,
            b.subjects.as_deref().unwrap_or_default(),
        )
    });
    namespaced.chain(cluster)
}

/// The trusted identities a binding's `rules` in `namespace` (`None`:
/// cluster-wide) reach: trust index → how → names (`None`: every name).
fn reached(
    trusts: &[Trust],
    rules: &[PolicyRule],
    namespace: Option<&str>,
) -> BTreeMap<usize, BTreeMap<How, Option<Vec<String>>>> {
    let mut reached: BTreeMap<usize, BTreeMap<How, Option<Vec<String>>>> = BTreeMap::new();
    for rule in rules {
        for (how, names) in grants(rule) {
            if !how.is_service_account() && namespace.is_some() {
                // Users and groups are cluster-scoped: RoleBindings never apply.
                continue;
            }
            for (i, trust) in trusts.iter().enumerate() {
                let Some(hit) = target(trust, how, namespace, names.as_deref()) else {
                    continue;
                };
                let entry = reached
                    .entry(i)
                    .or_default()
                    .entry(how)
                    .or_insert(Some(Vec::new()));
                match (entry.as_mut(), hit) {
                    (Some(_), None) => *entry = None,
                    (Some(list), Some(more)) => {
                        list.extend(more);
                        list.sort();
                        list.dedup();
                    }
                    (None, _) => {}
                }
            }
        }
    }
    reached
}

/// Whether `how` in `namespace` (`None`: all) limited to `names` reaches
/// `trust`: `None` no, `Some(None)` through every name, `Some(Some(names))`
/// through those names.
#[allow(clippy::option_option)]
fn target(
    trust: &Trust,
    how: How,
    namespace: Option<&str>,
    names: Option<&[String]>,
) -> Option<Option<Vec<String>>> {
    let ns = namespace.map_or(Part::Run(NAMESPACE_CHARS), Part::Text);
    let through = |hit: &dyn Fn(&str) -> bool| -> Option<Option<Vec<String>>> {
        match names {
            None => Some(None),
            Some(list) => {
                let hits: Vec<String> = list.iter().filter(|n| hit(n)).cloned().collect();
                (!hits.is_empty()).then_some(Some(hits))
            }
        }
    };
    let p = &trust.pattern;
    match (how.is_service_account(), how, trust.group) {
        // Every account of the namespace is in these groups.
        (true, _, true) => {
            let in_group = SA_GROUPS.iter().any(|g| p.is_match(g))
                || p.may_match(&[Part::Text("system:serviceaccounts:"), ns]);
            in_group.then(|| through(&|_| true)).flatten()
        }
        (true, _, false) => {
            let account = [Part::Text(SA_PREFIX), ns, Part::Text(":")];
            match names {
                None => {
                    let any = [&account[..], &[Part::Run(NAME_CHARS)]].concat();
                    p.may_match(&any).then_some(None)
                }
                Some(_) => through(&|n| {
                    let one = [&account[..], &[Part::Text(n)]].concat();
                    p.may_match(&one)
                }),
            }
        }
        (false, How::ImpersonateUsers | How::ConstrainedUsers, false) => match names {
            // Any name that is not a valid service account's: a glob matches
            // one (`*` takes `:a:b`), a literal only if it is not one.
            None => {
                let literal = !p.source().contains(['*', '?', '[', '{', '\\']);
                (!(literal && is_account_username(p.source()))).then_some(None)
            }
            Some(_) => through(&|n| !is_account_username(n) && p.is_match(n)),
        },
        (false, How::ImpersonateGroups | How::ConstrainedGroups, true) => {
            through(&|n| p.is_match(n))
        }
        _ => None,
    }
}

/// `serviceaccount.SplitUsername` accepts it: `system:serviceaccount:NS:NAME`
/// with a valid namespace (DNS label) and name (DNS subdomain).
pub(crate) fn is_account_username(username: &str) -> bool {
    let Some(rest) = username.strip_prefix(SA_PREFIX) else {
        return false;
    };
    let mut parts = rest.split(':');
    let (Some(ns), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    is_dns_label(ns) && is_dns_subdomain(name)
}

#[cfg(test)]
mod tests;
