//! Who else may act as an identity driftguard trusts. The policy's
//! `controllers` and `trusted`, and the sync service accounts Flux and Argo CD
//! impersonate, are exempt; a subject that RBAC lets act as one of them is
//! exempt too, in effect. Kubernetes' built-in `edit` ClusterRole (and so
//! `admin`) grants exactly that inside a namespace: k8s.io/kubernetes v1.34 to v1.37,
//! plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go, `editRules()`
//! (aggregated into `edit` through `system:aggregate-to-edit`):
//!
//! ```go
//! rbacv1helpers.NewRule("impersonate").Groups(legacyGroup).Resources("serviceaccounts").RuleOrDie(),
//! rbacv1helpers.NewRule(Write...).Groups(legacyGroup).Resources("pods", ...).RuleOrDie(),
//! rbacv1helpers.NewRule("create").Groups(legacyGroup).Resources("serviceaccounts/token").RuleOrDie(),
//! ```
//!
//! So anyone with `edit` in `kube-system` may run `kubectl
//! --as=system:serviceaccount:kube-system:x` and be trusted by the default
//! `system:serviceaccount:kube-system:*`. This reads RBAC objects as plain
//! data and names every such path: the trusted identity, the binding, its
//! role and its subjects. Pure: the caller lists the objects.
//!
//! Matching follows the RBAC authorizer (`pkg/apis/rbac/v1/evaluation_helpers.go`):
//! `*` verbs, groups and resources, `*/token` for the subresource, and
//! `resourceNames` (empty: every name; never limits `create`). The
//! impersonation filter (`k8s.io/apiserver/pkg/endpoints/filters/impersonation.go`)
//! checks `impersonate` on `serviceaccounts` in the account's namespace for a
//! valid `system:serviceaccount:NS:NAME`, and on cluster-scoped `users` for any
//! other name (so only ClusterRoleBindings count there), which a glob such as
//! `system:serviceaccount:kube-system:*` also matches (`...:kube-system:a:b`).
//!
//! Constrained impersonation (beta and on by default since v1.36,
//! `ConstrainedImpersonation`; `impersonation/mode.go`) is a second way to
//! `--as`: the verb `impersonate:serviceaccount` on `serviceaccounts`, or
//! `impersonate:user-info` on `users` and `groups`, in the
//! `authentication.k8s.io` group, tried before the legacy `impersonate`. The
//! apiserver also checks `impersonate-on:<mode>:<verb>` on the write itself;
//! that grant may come from any other binding, so it is not required here.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject,
};
use serde::Serialize;

use super::Identities;
use super::pattern::{Part, Pattern};

/// `system:serviceaccount:` (k8s.io/apiserver `ServiceAccountUsernamePrefix`).
pub const SA_PREFIX: &str = "system:serviceaccount:";
/// The groups every service account of a namespace is in, besides
/// `system:serviceaccounts:<namespace>`.
const SA_GROUPS: [&str; 2] = ["system:serviceaccounts", "system:authenticated"];
/// Namespace names are DNS labels.
const NAMESPACE_CHARS: &str = "abcdefghijklmnopqrstuvwxyz0123456789-";
/// Service account names are DNS subdomains.
const NAME_CHARS: &str = "abcdefghijklmnopqrstuvwxyz0123456789-.";

/// A service account a GitOps source makes driftguard trust for its own
/// objects (a Flux Kustomization's `spec.serviceAccountName`, Argo CD's sync
/// impersonation).
#[derive(Clone, Debug)]
pub struct SyncTrust {
    /// `system:serviceaccount:<ns>:<name>`.
    pub username: String,
    /// `Flux Kustomization team-a/apps`.
    pub origin: String,
}

/// The cluster's RBAC objects, as listed. Aggregated ClusterRoles (`edit`,
/// `admin`) are read with the rules their controller filled in.
#[derive(Clone, Debug, Default)]
pub struct Rbac {
    pub cluster_roles: Vec<ClusterRole>,
    pub roles: Vec<Role>,
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    pub role_bindings: Vec<RoleBinding>,
}

/// How a subject may act as an identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum How {
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
    pub fn as_str(self) -> &'static str {
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
pub struct Way {
    pub how: How,
    /// The `resourceNames` through which the identity is reached; empty:
    /// every name.
    pub names: Vec<String>,
}

/// A trusted identity that the subjects of one binding may act as.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// The pattern, username or group as the policy (or source) trusts it.
    pub identity: String,
    /// `trusted.users`, `controllers.groups`, `Flux Kustomization team-a/apps`.
    pub trusted_by: String,
    /// The binding's namespace; `None`: every namespace (a ClusterRoleBinding).
    pub namespace: Option<String>,
    /// `RoleBinding kube-system/alice-sa` or `ClusterRoleBinding name`.
    pub binding: String,
    /// `ClusterRole edit` or `Role kube-system/name`.
    pub role: String,
    /// `User alice`, `Group developers`, `ServiceAccount ci/runner`: those
    /// not exempt themselves.
    pub subjects: Vec<String>,
    pub ways: Vec<Way>,
}

/// What [`reach`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reach {
    pub findings: Vec<Finding>,
    /// ClusterRoleBindings to a role with every verb on every resource, and
    /// their subjects that are not exempt: they may delete driftguard's
    /// webhook configurations (no webhook is called for those), so acting
    /// as a trusted identity gives them nothing more. Named, not findings.
    pub cluster_admins: Vec<String>,
    /// Bindings whose role does not exist (they grant nothing).
    pub missing_roles: Vec<String>,
}

/// One trusted pattern and where it comes from.
struct Trust {
    pattern: Pattern,
    group: bool,
    origin: String,
}

/// Every trusted identity that a subject of some binding, other than exempt
/// identities and the account itself, may act as; see the module's text.
pub fn reach(
    controllers: &Identities,
    trusted: &Identities,
    sync: &[SyncTrust],
    rbac: &Rbac,
) -> Reach {
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
    let exempt = |username: &str, groups: &[String]| {
        controllers.contains(username, groups) || trusted.contains(username, groups)
    };
    let mut out = Reach::default();
    let bindings = rbac
        .role_bindings
        .iter()
        .map(|b| {
            let ns = b.metadata.namespace.clone().unwrap_or_default();
            let name = b.metadata.name.as_deref().unwrap_or_default();
            (
                Some(ns.clone()),
                format!("RoleBinding {ns}/{name}"),
                &b.role_ref,
                b.subjects.as_deref().unwrap_or_default(),
            )
        })
        .chain(rbac.cluster_role_bindings.iter().map(|b| {
            (
                None,
                format!(
                    "ClusterRoleBinding {}",
                    b.metadata.name.as_deref().unwrap_or_default()
                ),
                &b.role_ref,
                b.subjects.as_deref().unwrap_or_default(),
            )
        }));
    for (namespace, binding, role_ref, subjects) in bindings {
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
        // (trust index) → how → names (None: every name).
        let mut reached: BTreeMap<usize, BTreeMap<How, Option<Vec<String>>>> = BTreeMap::new();
        for rule in rules {
            for (how, names) in grants(rule) {
                if !how.is_service_account() && namespace.is_some() {
                    // Users and groups are cluster-scoped: RoleBindings never apply.
                    continue;
                }
                for (i, trust) in trusts.iter().enumerate() {
                    let Some(hit) = target(trust, how, namespace.as_deref(), names.as_deref())
                    else {
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
        for (i, hows) in reached {
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

/// A binding's subject as the authorizer sees it.
struct Member {
    label: String,
    /// The username it authenticates as (empty for a group).
    username: String,
    /// The groups it is known to be in.
    groups: Vec<String>,
    is_account: bool,
}

impl Member {
    fn of(s: &Subject, binding_namespace: Option<&str>) -> Self {
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
fn resolve<'a>(
    rbac: &'a Rbac,
    namespace: Option<&str>,
    role_ref: &k8s_openapi::api::rbac::v1::RoleRef,
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
fn is_everything(rule: &PolicyRule) -> bool {
    let star = |list: Option<&Vec<String>>| list.is_some_and(|l| l.iter().any(|x| x == "*"));
    rule.verbs.iter().any(|v| v == "*")
        && star(rule.api_groups.as_ref())
        && star(rule.resources.as_ref())
        && rule.resource_names.as_ref().is_none_or(Vec::is_empty)
}

/// What one rule grants that acts as another identity, with its
/// `resourceNames` (`None`: every name).
fn grants(rule: &PolicyRule) -> Vec<(How, Option<Vec<String>>)> {
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
pub fn is_account_username(username: &str) -> bool {
    let Some(rest) = username.strip_prefix(SA_PREFIX) else {
        return false;
    };
    let mut parts = rest.split(':');
    let (Some(ns), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let label = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    };
    label(ns) && name.len() <= 253 && name.split('.').all(label)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use serde_json::{Value, json};

    fn cluster_role(name: &str, rules: Value) -> ClusterRole {
        serde_json::from_value(json!({"metadata": {"name": name}, "rules": rules})).unwrap()
    }

    fn role(ns: &str, name: &str, rules: Value) -> Role {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}, "rules": rules}))
            .unwrap()
    }

    fn role_binding(ns: &str, name: &str, kind: &str, role: &str, subjects: Value) -> RoleBinding {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
            "subjects": subjects
        }))
        .unwrap()
    }

    fn cluster_binding(name: &str, role: &str, subjects: Value) -> ClusterRoleBinding {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": subjects
        }))
        .unwrap()
    }

    fn user(name: &str) -> Value {
        json!({"kind": "User", "name": name, "apiGroup": "rbac.authorization.k8s.io"})
    }

    fn group(name: &str) -> Value {
        json!({"kind": "Group", "name": name, "apiGroup": "rbac.authorization.k8s.io"})
    }

    /// `edit` as kube-controller-manager aggregates it from
    /// `system:aggregate-to-edit` (v1.34 to v1.37 `editRules()`, abridged: the rules
    /// that act as a service account, and some that do not).
    fn edit() -> ClusterRole {
        cluster_role(
            "edit",
            json!([
                {"apiGroups": [""], "resources": ["pods/attach", "pods/proxy", "pods/exec", "pods/portforward", "secrets", "services/proxy"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]},
                {"apiGroups": [""], "resources": ["pods", "pods/attach", "pods/proxy", "pods/exec", "pods/portforward"], "verbs": ["create", "delete", "deletecollection", "patch", "update"]},
                {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
                {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets"], "verbs": ["create", "delete", "deletecollection", "patch", "update"]}
            ]),
        )
    }

    fn cluster_admin() -> ClusterRole {
        cluster_role(
            "cluster-admin",
            json!([
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]}
            ]),
        )
    }

    fn run(policy: &Policy, sync: &[SyncTrust], rbac: &Rbac) -> Reach {
        reach(&policy.controllers, &policy.trusted, sync, rbac)
    }

    fn hows(f: &Finding) -> Vec<&'static str> {
        f.ways.iter().map(|w| w.how.as_str()).collect()
    }

    #[test]
    fn edit_in_kube_system_reaches_the_default_trusted_glob() {
        let policy = Policy::embedded();
        let rbac = Rbac {
            cluster_roles: vec![edit()],
            role_bindings: vec![role_binding(
                "kube-system",
                "devs-edit",
                "ClusterRole",
                "edit",
                json!([group("developers"), user("alice")]),
            )],
            ..Rbac::default()
        };
        let r = run(&policy, &[], &rbac);
        assert_eq!(r.findings.len(), 1, "{r:#?}");
        let f = &r.findings[0];
        assert_eq!(f.identity, "system:serviceaccount:kube-system:*");
        assert_eq!(f.trusted_by, "trusted.users");
        assert_eq!(f.namespace.as_deref(), Some("kube-system"));
        assert_eq!(f.binding, "RoleBinding kube-system/devs-edit");
        assert_eq!(f.role, "ClusterRole edit");
        assert_eq!(f.subjects, ["Group developers", "User alice"]);
        assert_eq!(
            hows(f),
            [
                "impersonate serviceaccounts",
                "create serviceaccounts/token",
                "create pods"
            ]
        );
        assert!(f.ways.iter().all(|w| w.names.is_empty()));
        assert!(r.cluster_admins.is_empty() && r.missing_roles.is_empty());

        // The same binding elsewhere reaches nothing the policy trusts.
        let mut elsewhere = rbac.clone();
        elsewhere.role_bindings[0].metadata.namespace = Some("team-a".into());
        assert!(run(&policy, &[], &elsewhere).findings.is_empty());
    }

    #[test]
    fn a_literal_controller_account_is_reached_only_in_its_namespace() {
        let policy = Policy::embedded();
        let binding =
            |ns: &str| role_binding(ns, "edit", "ClusterRole", "edit", json!([user("mallory")]));
        let rbac = Rbac {
            cluster_roles: vec![edit()],
            role_bindings: vec![
                binding("argocd"),
                binding("flux-system"),
                binding("default"),
            ],
            ..Rbac::default()
        };
        let r = run(&policy, &[], &rbac);
        let got: Vec<(&str, &str)> = r
            .findings
            .iter()
            .map(|f| (f.namespace.as_deref().unwrap(), f.identity.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "argocd",
                    "system:serviceaccount:argocd:argocd-application-controller"
                ),
                (
                    "flux-system",
                    "system:serviceaccount:flux-system:helm-controller"
                ),
                (
                    "flux-system",
                    "system:serviceaccount:flux-system:kustomize-controller"
                ),
            ]
        );
        assert!(
            r.findings
                .iter()
                .all(|f| f.trusted_by == "controllers.users")
        );
    }

    #[test]
    fn resource_names_limit_which_accounts_are_reached() {
        let policy = Policy::embedded();
        let impersonate = |names: Value| {
            role(
                "argocd",
                "one",
                json!([{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"], "resourceNames": names}]),
            )
        };
        let rbac = |names: Value| Rbac {
            roles: vec![impersonate(names)],
            role_bindings: vec![role_binding(
                "argocd",
                "one",
                "Role",
                "one",
                json!([user("mallory")]),
            )],
            ..Rbac::default()
        };
        let r = run(
            &policy,
            &[],
            &rbac(json!(["argocd-server", "argocd-application-controller"])),
        );
        assert_eq!(r.findings.len(), 1, "{r:#?}");
        assert_eq!(
            r.findings[0].ways,
            [Way {
                how: How::ImpersonateServiceAccounts,
                names: vec!["argocd-application-controller".into()]
            }]
        );
        assert!(
            run(&policy, &[], &rbac(json!(["argocd-server"])))
                .findings
                .is_empty()
        );
        // An empty list is every name.
        let r = run(&policy, &[], &rbac(json!([])));
        assert_eq!(r.findings.len(), 1);
        assert!(r.findings[0].ways[0].names.is_empty());
    }

    #[test]
    fn resource_names_never_allow_creating_pods() {
        let policy = Policy::embedded();
        let rbac = Rbac {
            roles: vec![role(
                "kube-system",
                "pods",
                json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"], "resourceNames": ["x"]}]),
            )],
            role_bindings: vec![role_binding(
                "kube-system",
                "pods",
                "Role",
                "pods",
                json!([user("mallory")]),
            )],
            ..Rbac::default()
        };
        assert!(run(&policy, &[], &rbac).findings.is_empty());
    }

    #[test]
    fn wildcards_in_verbs_groups_and_resources_count() {
        let policy = Policy::embedded();
        let cases = [
            // Every group and verb: the legacy and the constrained impersonation.
            (
                json!({"apiGroups": ["*"], "resources": ["serviceaccounts"], "verbs": ["*"]}),
                vec![
                    "impersonate serviceaccounts",
                    "impersonate:serviceaccount serviceaccounts",
                ],
            ),
            (
                json!({"apiGroups": [""], "resources": ["*"], "verbs": ["impersonate"]}),
                vec!["impersonate serviceaccounts"],
            ),
            (
                json!({"apiGroups": [""], "resources": ["*/token"], "verbs": ["create"]}),
                vec!["create serviceaccounts/token"],
            ),
            (
                json!({"apiGroups": [""], "resources": ["*"], "verbs": ["create"]}),
                vec!["create serviceaccounts/token", "create pods"],
            ),
            (
                json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}),
                vec![
                    "impersonate serviceaccounts",
                    "create serviceaccounts/token",
                    "create pods",
                    "impersonate:serviceaccount serviceaccounts",
                ],
            ),
            // Not these: another group, a read verb, serviceaccounts/* is not a pattern.
            (
                json!({"apiGroups": ["apps"], "resources": ["*"], "verbs": ["*"]}),
                vec![],
            ),
            (
                json!({"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get", "create"]}),
                vec![],
            ),
            (
                json!({"apiGroups": [""], "resources": ["serviceaccounts/*"], "verbs": ["create"]}),
                vec![],
            ),
            (json!({"nonResourceURLs": ["*"], "verbs": ["*"]}), vec![]),
        ];
        for (rule, want) in cases {
            let rbac = Rbac {
                roles: vec![role("kube-system", "r", json!([rule.clone()]))],
                role_bindings: vec![role_binding(
                    "kube-system",
                    "r",
                    "Role",
                    "r",
                    json!([user("mallory")]),
                )],
                ..Rbac::default()
            };
            let r = run(&policy, &[], &rbac);
            let got: Vec<&str> = r.findings.iter().flat_map(hows).collect();
            assert_eq!(got, want, "{rule}");
        }
    }

    /// Since v1.36 the apiserver also takes `impersonate:<mode>` in
    /// authentication.k8s.io (`impersonation/mode.go`): each verb only in that
    /// group, users and groups only cluster-wide, as for `impersonate`.
    #[test]
    fn constrained_impersonation_counts_in_its_own_group_only() {
        let policy = Policy::from_yaml(
            "trusted:\n  users: ['system:serviceaccount:kube-system:*', deployer]\n  groups: [gitops-bots]\n",
            "p.yaml",
        )
        .unwrap();
        let auth = "authentication.k8s.io";
        let cases = [
            (
                json!({"apiGroups": [auth], "resources": ["serviceaccounts"], "verbs": ["impersonate:serviceaccount"]}),
                vec![(
                    "system:serviceaccount:kube-system:*",
                    "impersonate:serviceaccount serviceaccounts",
                )],
            ),
            (
                json!({"apiGroups": [auth], "resources": ["users", "groups"], "verbs": ["impersonate:user-info"]}),
                vec![
                    ("deployer", "impersonate:user-info users"),
                    ("gitops-bots", "impersonate:user-info groups"),
                    // `--as=system:serviceaccount:kube-system:a:b` is no
                    // account's name: the user-info mode takes it.
                    (
                        "system:serviceaccount:kube-system:*",
                        "impersonate:user-info users",
                    ),
                ],
            ),
            // The constrained verbs in the core group, the legacy verb in
            // authentication.k8s.io, and another mode's verb grant nothing here.
            (
                json!({"apiGroups": [""], "resources": ["serviceaccounts", "users", "groups"], "verbs": ["impersonate:serviceaccount", "impersonate:user-info"]}),
                vec![],
            ),
            (
                json!({"apiGroups": [auth], "resources": ["serviceaccounts", "users", "groups"], "verbs": ["impersonate"]}),
                vec![],
            ),
            (
                json!({"apiGroups": [auth], "resources": ["serviceaccounts"], "verbs": ["impersonate:user-info", "impersonate:arbitrary-node"]}),
                vec![],
            ),
        ];
        for (rule, want) in cases {
            for cluster_wide in [true, false] {
                let mut rbac = Rbac::default();
                if cluster_wide {
                    rbac.cluster_roles = vec![cluster_role("r", json!([rule.clone()]))];
                    rbac.cluster_role_bindings =
                        vec![cluster_binding("r", "r", json!([user("mallory")]))];
                } else {
                    rbac.roles = vec![role("kube-system", "r", json!([rule.clone()]))];
                    rbac.role_bindings = vec![role_binding(
                        "kube-system",
                        "r",
                        "Role",
                        "r",
                        json!([user("mallory")]),
                    )];
                }
                let r = run(&policy, &[], &rbac);
                // The default controllers are reached alike; not repeated here.
                let got: Vec<(&str, &str)> = r
                    .findings
                    .iter()
                    .filter(|f| f.trusted_by.starts_with("trusted."))
                    .flat_map(|f| hows(f).into_iter().map(|h| (f.identity.as_str(), h)))
                    .collect();
                // Users and groups are cluster-scoped: a RoleBinding reaches
                // only the namespace's accounts.
                let want: Vec<(&str, &str)> = want
                    .iter()
                    .filter(|(_, how)| cluster_wide || how.contains("serviceaccount "))
                    .cloned()
                    .collect();
                assert_eq!(got, want, "{rule} cluster-wide={cluster_wide}");
            }
        }
    }

    #[test]
    fn a_cluster_role_binding_reaches_every_namespace() {
        let policy = Policy::embedded();
        let rbac = Rbac {
            cluster_roles: vec![cluster_role(
                "sa-impersonator",
                json!([{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]}]),
            )],
            cluster_role_bindings: vec![cluster_binding(
                "ci",
                "sa-impersonator",
                json!([{"kind": "ServiceAccount", "name": "runner", "namespace": "ci"}]),
            )],
            ..Rbac::default()
        };
        let r = run(&policy, &[], &rbac);
        let ids: Vec<&str> = r.findings.iter().map(|f| f.identity.as_str()).collect();
        assert_eq!(
            ids,
            [
                "system:serviceaccount:argocd:argocd-application-controller",
                "system:serviceaccount:flux-system:helm-controller",
                "system:serviceaccount:flux-system:kustomize-controller",
                "system:serviceaccount:kube-system:*",
            ]
        );
        let f = &r.findings[3];
        assert_eq!(f.namespace, None);
        assert_eq!(f.binding, "ClusterRoleBinding ci");
        assert_eq!(f.subjects, ["ServiceAccount ci/runner"]);
        // Only `node` users and the like are users; no user impersonation here.
        assert!(
            r.findings
                .iter()
                .all(|f| hows(f) == ["impersonate serviceaccounts"])
        );

        // Cluster-wide, with names: the name in any namespace.
        let mut named = rbac.clone();
        named.cluster_roles[0].rules.as_mut().unwrap()[0].resource_names =
            Some(vec!["kube-proxy".into()]);
        let r = run(&policy, &[], &named);
        assert_eq!(r.findings.len(), 1, "{r:#?}");
        assert_eq!(
            r.findings[0].identity,
            "system:serviceaccount:kube-system:*"
        );
        assert_eq!(r.findings[0].ways[0].names, ["kube-proxy"]);
    }

    #[test]
    fn users_and_groups_are_impersonated_only_cluster_wide() {
        let policy = Policy::from_yaml(
            "trusted:\n  users: ['system:node:*', 'system:kube-scheduler', 'system:serviceaccount:kube-system:*', 'system:serviceaccount:argocd:sync']\n  groups: [gitops-bots]\n",
            "p.yaml",
        )
        .unwrap();
        let rules = json!([{"apiGroups": [""], "resources": ["users", "groups"], "verbs": ["impersonate"]}]);
        let rbac = Rbac {
            cluster_roles: vec![cluster_role("impersonator", rules)],
            cluster_role_bindings: vec![cluster_binding(
                "support",
                "impersonator",
                json!([group("support")]),
            )],
            role_bindings: vec![role_binding(
                "kube-system",
                "support",
                "ClusterRole",
                "impersonator",
                json!([user("mallory")]),
            )],
            ..Rbac::default()
        };
        let r = run(&policy, &[], &rbac);
        let got: Vec<(&str, Vec<&str>)> = r
            .findings
            .iter()
            .map(|f| (f.identity.as_str(), hows(f)))
            .collect();
        // The glob is matched by `--as=system:serviceaccount:kube-system:a:b`,
        // which is not a valid account name and so is checked as a user; the
        // literal account is checked as a service account, not reached.
        assert_eq!(
            got,
            [
                ("gitops-bots", vec!["impersonate groups"]),
                ("system:kube-scheduler", vec!["impersonate users"]),
                ("system:node:*", vec!["impersonate users"]),
                (
                    "system:serviceaccount:kube-system:*",
                    vec!["impersonate users"]
                ),
            ]
        );
        assert!(r.findings.iter().all(|f| f.subjects == ["Group support"]));

        // Named users: only those names.
        let mut named = rbac.clone();
        named.cluster_roles[0].rules.as_mut().unwrap()[0].resource_names = Some(vec![
            "system:node:worker-1".into(),
            "system:serviceaccount:kube-system:x".into(),
        ]);
        let r = run(&policy, &[], &named);
        let got: Vec<(&str, &[String])> = r
            .findings
            .iter()
            .map(|f| (f.identity.as_str(), &f.ways[0].names[..]))
            .collect();
        assert_eq!(
            got,
            [("system:node:*", &["system:node:worker-1".to_owned()][..])]
        );
    }

    #[test]
    fn exempt_subjects_and_the_account_itself_are_not_findings() {
        let policy = Policy::embedded();
        let sync = [SyncTrust {
            username: "system:serviceaccount:team-a:reconciler".into(),
            origin: "Flux Kustomization team-a/apps".into(),
        }];
        let rbac = Rbac {
            cluster_roles: vec![edit()],
            role_bindings: vec![
                // The tenant's reconciler, admin of its own namespace, and a person.
                role_binding(
                    "team-a",
                    "reconciler",
                    "ClusterRole",
                    "edit",
                    json!([{"kind": "ServiceAccount", "name": "reconciler"}, user("bob")]),
                ),
                // kube-system's own accounts and a controller.
                role_binding(
                    "kube-system",
                    "system",
                    "ClusterRole",
                    "edit",
                    json!([
                        {"kind": "ServiceAccount", "name": "daemon-set-controller", "namespace": "kube-system"},
                        user("system:kube-controller-manager"),
                        {"kind": "ServiceAccount", "name": "argocd-application-controller", "namespace": "argocd"}
                    ]),
                ),
            ],
            ..Rbac::default()
        };
        let r = run(&policy, &sync, &rbac);
        assert_eq!(r.findings.len(), 1, "{r:#?}");
        let f = &r.findings[0];
        assert_eq!(f.identity, "system:serviceaccount:team-a:reconciler");
        assert_eq!(f.trusted_by, "Flux Kustomization team-a/apps");
        assert_eq!(f.subjects, ["User bob"]);
        // Without bob, the reconciler acting as itself is no finding.
        let mut alone = rbac.clone();
        alone.role_bindings[0].subjects.as_mut().unwrap().pop();
        assert!(run(&policy, &sync, &alone).findings.is_empty());
    }

    #[test]
    fn trusted_service_account_groups_cover_every_account_of_the_namespace() {
        let policy = Policy::from_yaml(
            "trusted:\n  groups: ['system:serviceaccounts:tenant-sync']\n",
            "p.yaml",
        )
        .unwrap();
        let rbac = Rbac {
            cluster_roles: vec![edit()],
            role_bindings: vec![
                role_binding(
                    "tenant-sync",
                    "e",
                    "ClusterRole",
                    "edit",
                    json!([user("bob")]),
                ),
                role_binding("default", "e", "ClusterRole", "edit", json!([user("bob")])),
            ],
            ..Rbac::default()
        };
        let r = run(&policy, &[], &rbac);
        assert_eq!(r.findings.len(), 1, "{r:#?}");
        assert_eq!(r.findings[0].identity, "system:serviceaccounts:tenant-sync");
        assert_eq!(r.findings[0].trusted_by, "trusted.groups");
        assert_eq!(r.findings[0].namespace.as_deref(), Some("tenant-sync"));
        // A member of a trusted group is exempt as a subject.
        let mut member = rbac.clone();
        member.role_bindings[0].subjects = Some(vec![
            serde_json::from_value(
                json!({"kind": "ServiceAccount", "name": "x", "namespace": "tenant-sync"}),
            )
            .unwrap(),
        ]);
        member.role_bindings.pop();
        assert!(run(&policy, &[], &member).findings.is_empty());
    }

    #[test]
    fn cluster_admins_are_named_apart_and_namespace_admins_are_findings() {
        let policy = Policy::embedded();
        let rbac = Rbac {
            cluster_roles: vec![cluster_admin()],
            cluster_role_bindings: vec![
                cluster_binding(
                    "cluster-admin",
                    "cluster-admin",
                    json!([group("system:masters")]),
                ),
                // The GitOps controllers: exempt, not even named.
                cluster_binding(
                    "gitops",
                    "cluster-admin",
                    json!([{"kind": "ServiceAccount", "name": "kustomize-controller", "namespace": "flux-system"}]),
                ),
            ],
            role_bindings: vec![role_binding(
                "kube-system",
                "ops",
                "ClusterRole",
                "cluster-admin",
                json!([user("ops")]),
            )],
            ..Rbac::default()
        };
        let r = run(&policy, &[], &rbac);
        assert_eq!(
            r.cluster_admins,
            ["ClusterRoleBinding cluster-admin (ClusterRole cluster-admin): Group system:masters"]
        );
        assert_eq!(r.findings.len(), 1, "{r:#?}");
        assert_eq!(r.findings[0].binding, "RoleBinding kube-system/ops");
    }

    #[test]
    fn an_aggregated_role_is_read_with_its_rules_and_a_missing_role_grants_nothing() {
        let policy = Policy::embedded();
        // Without kube-controller-manager, `edit` has an aggregationRule and no rules.
        let empty_edit: ClusterRole = serde_json::from_value(json!({
            "metadata": {"name": "edit"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}}]}
        }))
        .unwrap();
        let rbac = |edit: ClusterRole| Rbac {
            cluster_roles: vec![edit],
            role_bindings: vec![
                role_binding(
                    "kube-system",
                    "e",
                    "ClusterRole",
                    "edit",
                    json!([user("bob")]),
                ),
                role_binding("kube-system", "gone", "Role", "nope", json!([user("bob")])),
            ],
            ..Rbac::default()
        };
        let r = run(&policy, &[], &rbac(empty_edit.clone()));
        assert!(r.findings.is_empty());
        assert_eq!(
            r.missing_roles,
            ["RoleBinding kube-system/gone: Role nope not found"]
        );
        let mut filled = empty_edit;
        filled.rules = edit().rules;
        assert_eq!(run(&policy, &[], &rbac(filled)).findings.len(), 1);
    }

    #[test]
    fn account_usernames_are_those_split_username_accepts() {
        for ok in [
            "system:serviceaccount:kube-system:x",
            "system:serviceaccount:a:b.c-d",
        ] {
            assert!(is_account_username(ok), "{ok}");
        }
        for bad in [
            "system:serviceaccount:kube-system:a:b",
            "system:serviceaccount:kube-system:",
            "system:serviceaccount::x",
            "system:serviceaccount:Kube:x",
            "system:serviceaccount:a.b:x",
            "system:node:x",
            "system:serviceaccount:a:-x",
        ] {
            assert!(!is_account_username(bad), "{bad}");
        }
    }
}
