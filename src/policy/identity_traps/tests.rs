use super::*;
use crate::policy::Policy;

/// `patterns` under `field` (`trusted.users`, `breakGlass.allowedGroups`).
fn load(field: &str, patterns: &[&str]) -> Result<Policy, String> {
    let (section, key) = field.split_once('.').unwrap();
    let yaml = format!("{section}: {{{key}: {patterns:?}}}\n");
    Policy::from_yaml(&yaml, "p.yaml").map_err(|e| e.to_string())
}

/// The identity a refusal names: the text between the first two backticks
/// after "matches user " or "matches group ".
fn named(err: &str) -> &str {
    let at = err.find("matches ").unwrap() + "matches ".len();
    let rest = &err[at..];
    let start = rest.find('`').unwrap() + 1;
    let end = start + rest[start..].find('`').unwrap();
    &rest[start..end]
}

#[test]
fn a_glob_over_service_account_namespaces_is_refused() {
    for p in [
        "system:serviceaccount:*:argocd-application-controller",
        "system:serviceaccount:argo*:argocd-application-controller",
        "system:serviceaccount:*-system:x",
        "system:serviceaccount:argocd?:x",
        "system:serviceaccount:[a-z]rgocd:x",
        "system:serviceaccount:*",
        "system:serviceaccount:{argocd,*}:x",
    ] {
        for section in ["controllers", "trusted", "breakGlass"] {
            let field = if section == "breakGlass" {
                "breakGlass.allowedUsers".to_owned()
            } else {
                format!("{section}.users")
            };
            let err = load(&field, &[p]).unwrap_err();
            assert!(
                err.starts_with(&format!(
                    "p.yaml: {field}: `{p}` matches user `system:serviceaccount:"
                )) && err.contains("a namespace it does not name"),
                "{p}: {err}"
            );
        }
    }
    for p in ["system:serviceaccounts:*", "system:serviceaccounts:team-*"] {
        let err = load("trusted.groups", &[p]).unwrap_err();
        assert!(
            err.contains("system:serviceaccounts:{argocd,flux-system}"),
            "{p}: {err}"
        );
    }
    let err = load(
        "trusted.users",
        &["system:serviceaccount:*:argocd-application-controller"],
    )
    .unwrap_err();
    assert!(
        err.contains("system:serviceaccount:{argocd,argocd-apps}:argocd-application-controller"),
        "{err}"
    );
}

/// The findings of issue 48: each exempted every service account or user.
#[test]
fn patterns_covering_every_account_or_user_are_refused() {
    for (field, p, probe) in [
        ("trusted.users", "system:*", "a namespace it does not name"),
        (
            "trusted.users",
            "system:serviceaccount*",
            "a namespace it does not name",
        ),
        ("trusted.users", "*", "any authenticated user"),
        (
            "trusted.groups",
            "system:serviceaccounts",
            "a namespace it does not name",
        ),
        (
            "controllers.groups",
            "system:authenticated",
            "any authenticated user",
        ),
        ("trusted.groups", "system:*", "any authenticated user"),
        ("breakGlass.allowedUsers", "?*", "any authenticated user"),
        ("breakGlass.allowedUsers", "[!x]*", "any authenticated user"),
        (
            "breakGlass.allowedGroups",
            "system:authenticated",
            "any authenticated user",
        ),
        ("trusted.users", "system:anonymous", "unauthenticated"),
        (
            "controllers.groups",
            "system:unauthenticated",
            "unauthenticated",
        ),
        ("controllers.users", "system:node:*", "any node"),
        ("breakGlass.allowedGroups", "system:nodes", "any node"),
    ] {
        let err = load(field, &[p]).unwrap_err();
        assert!(
            err.starts_with(&format!("p.yaml: {field}: `{p}` matches ")) && err.contains(probe),
            "{field} {p}: {err}"
        );
        // The identity named is one the pattern matches, as globset reads it.
        let glob = globset::Glob::new(p).unwrap().compile_matcher();
        assert!(glob.is_match(named(&err)), "{p}: {err}");
    }
}

#[test]
fn each_section_keeps_what_it_is_for() {
    for (field, p) in [
        ("trusted.users", "system:node:*"),
        ("trusted.groups", "system:nodes"),
        ("trusted.users", "system:serviceaccount:kube-system:*"),
        ("trusted.groups", "system:serviceaccounts:kube-system"),
        (
            "controllers.users",
            "system:serviceaccount:{argocd,flux-system}:*",
        ),
        (
            "controllers.users",
            "system:serviceaccount:argocd:argocd-application-controller",
        ),
        ("controllers.users", "system:node:worker-1"),
        ("controllers.groups", "gitops"),
        ("breakGlass.allowedUsers", "alice*"),
        ("breakGlass.allowedUsers", "oidc:*"),
        ("breakGlass.allowedGroups", "sre-oncall"),
        ("trusted.groups", "oidc:team-1-*"),
        ("trusted.users", "system:kube-scheduler"),
    ] {
        assert!(
            load(field, &[p]).is_ok(),
            "{field} {p}: {:?}",
            load(field, &[p]).err()
        );
    }
    assert!(Policy::from_yaml("{}", "p.yaml").is_ok(), "the defaults");
}

#[test]
fn fixes_name_the_narrower_pattern() {
    let cases = [
        (
            "controllers.users",
            "system:node:*",
            "trusted.users (`system:node:*`)",
        ),
        ("breakGlass.allowedUsers", "*", "`sre-oncall`"),
        ("trusted.users", "system:anonymous", "Remove it."),
        (
            "trusted.users",
            "system:serviceaccount:*",
            "{argocd,argocd-apps}:NAME",
        ),
    ];
    for (field, p, fix) in cases {
        let err = load(field, &[p]).unwrap_err();
        assert!(err.contains(fix), "{field} {p}: {err}");
    }
}

#[test]
fn a_glob_it_cannot_read_is_refused() {
    let err = load("trusted.groups", &["team-[[:digit:]]"]).unwrap_err();
    assert!(
        err.starts_with("p.yaml: trusted.groups: `team-[[:digit:]]` uses glob syntax"),
        "{err}"
    );
}

#[test]
fn colon_spans_warn() {
    for p in [
        "system:serviceaccount:kube-system:*",
        "system:node:*",
        "alice",
        "oidc:alice",
    ] {
        assert_eq!(warning(p), None, "{p}");
    }
    assert!(warning("oidc:*:admin").is_some());
    assert!(warning("team-*:admins").is_some());
}
