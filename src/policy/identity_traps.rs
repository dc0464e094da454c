//! Identity patterns that trust more than they seem to. In a glob, `*`
//! matches any run of characters, `:` included, so a `*` where a service
//! account's namespace goes trusts that name in every namespace: anyone who
//! may create a service account anywhere (any namespace admin) becomes it.
//! Such a pattern is refused when the policy loads, with the form that names
//! the namespaces instead. A glob elsewhere before a `:` is only a warning
//! (`policy lint`): it spans `:`-separated parts, which may be what was meant.

/// What is wrong with a pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Trap {
    /// Refused at load: the text says what it matches and what to write.
    Refused(String),
    /// Reported by `policy lint`.
    Warning(String),
}

/// [`user`] or [`group`].
pub(crate) type Check = fn(&str) -> Option<Trap>;

const SERVICE_ACCOUNT: &str = "system:serviceaccount:";
const SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts:";
const GLOB: &[char] = &['*', '?', '['];

/// A user pattern's trap, if it has one.
pub(crate) fn user(pattern: &str) -> Option<Trap> {
    if let Some(rest) = pattern.strip_prefix(SERVICE_ACCOUNT) {
        let (namespace, name) = rest.split_once(':').unwrap_or((rest, "*"));
        if !names_namespaces(namespace) {
            return Some(Trap::Refused(format!(
                "`{pattern}` trusts service account `{name}` in every namespace `{namespace}` matches (a glob's `*` also matches `:`): anyone who may create a service account there becomes it. Name the namespaces: `{SERVICE_ACCOUNT}{{argocd,argocd-apps}}:{name}`"
            )));
        }
        return None;
    }
    spans_a_colon(pattern)
}

/// A group pattern's trap, if it has one.
pub(crate) fn group(pattern: &str) -> Option<Trap> {
    if let Some(namespace) = pattern.strip_prefix(SERVICE_ACCOUNTS_GROUP)
        && !names_namespaces(namespace)
    {
        return Some(Trap::Refused(format!(
            "`{pattern}` trusts every service account of every namespace `{namespace}` matches: anyone who may create a service account there is in it. Name the namespaces: `{SERVICE_ACCOUNTS_GROUP}{{argocd,flux-system}}`"
        )));
    }
    spans_a_colon(pattern)
}

/// A literal namespace, or an alternation of literal ones (`{a,b}`).
fn names_namespaces(segment: &str) -> bool {
    let literal = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
        Some(inner) => inner.split(',').all(literal),
        None => literal(segment),
    }
}

/// A glob before a later `:`: it matches any number of `:`-separated parts.
fn spans_a_colon(pattern: &str) -> Option<Trap> {
    let glob = pattern.find(GLOB)?;
    pattern[glob..].contains(':').then(|| {
        Trap::Warning(format!(
            "`{pattern}`: the glob before `:` also matches `:`, so it spans any number of `:`-separated parts (`{}` matches it)",
            pattern.replacen('*', "a:b", 1)
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_glob_over_service_account_namespaces_is_refused() {
        for p in [
            "system:serviceaccount:*:argocd-application-controller",
            "system:serviceaccount:argo*:argocd-application-controller",
            "system:serviceaccount:*",
            "system:serviceaccount:{argocd,*}:x",
        ] {
            assert!(matches!(user(p), Some(Trap::Refused(_))), "{p}");
        }
        for p in ["system:serviceaccounts:*", "system:serviceaccounts:team-*"] {
            assert!(matches!(group(p), Some(Trap::Refused(_))), "{p}");
        }
        let Some(Trap::Refused(why)) =
            user("system:serviceaccount:*:argocd-application-controller")
        else {
            unreachable!()
        };
        assert!(
            why.contains(
                "system:serviceaccount:{argocd,argocd-apps}:argocd-application-controller"
            )
        );
    }

    #[test]
    fn named_namespaces_pass_and_other_colon_spans_warn() {
        for p in [
            "system:serviceaccount:kube-system:*",
            "system:serviceaccount:{argocd,flux-system}:*",
            "system:serviceaccount:argocd:argocd-application-controller",
            "system:node:*",
            "alice",
            "oidc:alice",
        ] {
            assert_eq!(user(p), None, "{p}");
        }
        assert_eq!(group("system:serviceaccounts:argocd"), None);
        assert_eq!(group("system:masters"), None);
        assert!(matches!(user("oidc:*:admin"), Some(Trap::Warning(_))));
        assert!(matches!(group("team-*:admins"), Some(Trap::Warning(_))));
    }
}
