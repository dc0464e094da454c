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
    let rules =
        json!([{"apiGroups": [""], "resources": ["users", "groups"], "verbs": ["impersonate"]}]);
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
