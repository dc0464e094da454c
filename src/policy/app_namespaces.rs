//! Which Applications Argo CD reconciles, decided as Argo CD v3.6.1 decides
//! it, so that one it would not reconcile lends nothing (architecture
//! principle 6). Cited from the module `github.com/argoproj/argo-cd/v3@v3.6.1`:
//!
//! - the application-controller takes an Application only from its own
//!   namespace or one `--application-namespaces` matches
//!   (`controller/appcontroller.go:2852-2854` `isAppNamespaceAllowed`, the
//!   first check of `canProcessAppWithDestination`, :2873; the same rule as
//!   `util/security/application_namespaces.go:9-11` `IsNamespaceEnabled`);
//! - that flag defaults to `$ARGOCD_APPLICATION_NAMESPACES`
//!   (`cmd/argocd-application-controller/commands/argocd_application_controller.go:286`),
//!   split at `,` with each item trimmed (`util/env/env.go:169-178`), which the
//!   install manifests fill from `application.namespaces` of
//!   `argocd-cmd-params-cm`
//!   (`manifests/base/application-controller/argocd-application-controller-statefulset.yaml:333-338`);
//! - it works one only when its AppProject admits its namespace
//!   (`getAppProj`, appcontroller.go:402; `IsAppNamespacePermitted`,
//!   `pkg/apis/application/v1alpha1/app_project_types.go:625-631`).
//!
//! Both lists are read by `glob.MatchStringInList(list, ns, glob.REGEXP)`
//! (`util/glob/list.go:20-33`): an entry `/re/` longer than two bytes is a
//! regexp2 expression searched in the namespace, and every entry is also a
//! gobwas/glob v1.0.0 glob without separators (`util/glob/glob.go:99-106`).
//! A pattern that does not compile matches nothing, as there. Regular
//! expressions are read with Rust's `regex`, so one only regexp2 accepts
//! (lookaround, backreferences) matches nothing here.
//!
//! The lists are here; the checks that read an AppProject (`permits`,
//! `reconciles`) are in [`super::app_project`].

use regex::Regex;
use serde::Deserialize;

/// The ConfigMap, in Argo CD's namespace, whose `application.namespaces`
/// the controller reads.
pub(crate) const CMD_PARAMS_CM: &str = "argocd-cmd-params-cm";
pub(crate) const NAMESPACES_KEY: &str = "application.namespaces";

/// A namespace list (`application.namespaces`, an AppProject's
/// `spec.sourceNamespaces`), compiled once.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(from = "Vec<String>")]
pub(crate) struct NamespaceList(Vec<Matcher>);

#[derive(Clone, Debug)]
enum Matcher {
    Exact(String),
    Regex(Regex),
}

impl From<Vec<String>> for NamespaceList {
    fn from(entries: Vec<String>) -> Self {
        let mut matchers = Vec::new();
        for entry in entries {
            let regex = entry
                .strip_prefix('/')
                .and_then(|e| e.strip_suffix('/'))
                .filter(|_| entry.len() > 2);
            matchers.extend(regex.and_then(|r| Regex::new(r).ok()).map(Matcher::Regex));
            if entry.contains(['*', '?', '[', '{', '\\']) {
                matchers.extend(glob_regex(&entry).map(Matcher::Regex));
            } else {
                matchers.push(Matcher::Exact(entry));
            }
        }
        Self(matchers)
    }
}

impl NamespaceList {
    pub(crate) fn matches(&self, namespace: &str) -> bool {
        self.0.iter().any(|m| match m {
            Matcher::Exact(e) => e == namespace,
            Matcher::Regex(r) => r.is_match(namespace),
        })
    }
}

/// `application.namespaces` as the controller gets it through its
/// environment: none when empty, else split at `,`, each item trimmed.
pub(crate) fn enabled_namespaces(value: Option<&str>) -> NamespaceList {
    let entries = value.filter(|v| !v.is_empty()).map_or_else(Vec::new, |v| {
        v.split(',').map(|s| s.trim().to_owned()).collect()
    });
    NamespaceList::from(entries)
}

/// A gobwas/glob v1.0.0 pattern without separators as an anchored regex;
/// `None` where gobwas refuses it. Its lexer (`syntax/lexer.go:258-380`) and
/// parser (`parse.go:15-350`): `*` and `**` any run, `?` one character,
/// `{a,b}` alternatives (nested), `[a-z]` one range or `[abc]` one set, each
/// negated only by a leading `!` (not `^`), and nothing else between the
/// brackets (`[a-z0-9]` is refused); `\` escapes in text; `,` and `}` are
/// text outside braces, `]` outside brackets.
fn glob_regex(pattern: &str) -> Option<Regex> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::from(r"\A(?s:");
    let (mut depth, mut i) = (0usize, 0);
    while let Some(&c) = chars.get(i) {
        i += 1;
        match c {
            '{' => {
                depth += 1;
                out.push_str("(?:");
            }
            ',' if depth > 0 => out.push('|'),
            '}' if depth > 0 => {
                depth -= 1;
                out.push(')');
            }
            '?' => out.push('.'),
            '*' => {
                i += usize::from(chars.get(i) == Some(&'*'));
                out.push_str(".*");
            }
            '[' => out.push_str(&class(&chars, &mut i)?),
            _ => {
                let breakers: &[char] = if depth > 0 {
                    &['?', '*', '[', '{', '}', ',']
                } else {
                    &['?', '*', '[', '{']
                };
                let text = text(&chars, i - 1, breakers, &mut i)?;
                out.push_str(&regex::escape(&text));
            }
        }
    }
    out.push_str(r")\z");
    (depth == 0).then(|| Regex::new(&out).ok())?
}

/// Text from `start` up to an unescaped breaker (`fetchText`); `None` for a
/// trailing backslash.
fn text(chars: &[char], start: usize, breakers: &[char], i: &mut usize) -> Option<String> {
    let mut text = String::new();
    *i = start;
    while let Some(&c) = chars.get(*i) {
        if breakers.contains(&c) {
            break;
        }
        *i += 1;
        if c == '\\' {
            text.push(*chars.get(*i)?);
            *i += 1;
        } else {
            text.push(c);
        }
    }
    Some(text)
}

/// The class after a `[` (`fetchRange`, `parseRange`), as a regex class.
fn class(chars: &[char], i: &mut usize) -> Option<String> {
    let hex = |c: char| format!("\\x{{{:X}}}", c as u32);
    let mut not = false;
    let body = loop {
        let c = *chars.get(*i)?;
        *i += 1;
        if c == '!' && !not {
            not = true;
            continue;
        }
        if chars.get(*i) == Some(&'-') {
            let hi = *chars.get(*i + 1)?;
            *i += 2;
            break (c <= hi).then(|| format!("{}-{}", hex(c), hex(hi)))?;
        }
        let set = text(chars, *i - 1, &[']'], i)?;
        break (!set.is_empty()).then(|| set.chars().map(hex).collect::<String>())?;
    };
    (chars.get(*i) == Some(&']')).then_some(())?;
    *i += 1;
    Some(format!("[{}{body}]", if not { "^" } else { "" }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> NamespaceList {
        NamespaceList::from(entries.iter().map(|e| e.to_string()).collect::<Vec<_>>())
    }

    /// gobwas/glob v1.0.0's own readings, from its lexer and parser.
    #[test]
    fn globs_read_as_gobwas_reads_them() {
        let cases: &[(&str, &[&str], &[&str])] = &[
            ("team-*", &["team-", "team-a-b"], &["team", "xteam-a"]),
            ("team-**", &["team-a"], &["tea"]),
            ("team-?", &["team-a"], &["team-", "team-ab"]),
            ("{a,b}-*", &["a-1", "b-"], &["c-1", "{a,b}-1"]),
            ("{a,{b,c}x}", &["a", "bx", "cx"], &["b"]),
            ("{,a}b", &["b", "ab"], &[]),
            ("team-[a-c]", &["team-b"], &["team-d"]),
            ("team-[!a-c]", &["team-d"], &["team-b"]),
            ("team-[abc]", &["team-c"], &["team-d"]),
            ("team-[!abc]", &["team-d"], &["team-a"]),
            // `^` is no negation: a set of `^` and `a`.
            ("team-[^a]", &["team-a"], &["team-b"]),
            ("team-[ab-c]", &["team--"], &["team-bc"]),
            (r"team-\*", &["team-*"], &["team-a"]),
            ("a,b", &["a,b"], &["a", "b"]),
            ("a}", &["a}"], &[]),
            ("a]", &["a]"], &[]),
        ];
        for (pattern, yes, no) in cases {
            let l = list(&[pattern]);
            for ns in *yes {
                assert!(l.matches(ns), "{pattern} {ns}");
            }
            for ns in *no {
                assert!(!l.matches(ns), "{pattern} {ns}");
            }
        }
        // Refused by gobwas, so matching nothing.
        for refused in [
            "team-[a-z0-9]*",
            "team-[z-a]",
            "team-[]",
            "team-[!]",
            "team-[a",
            "{a,b",
            "team-\\",
            "team-[a-",
        ] {
            assert!(glob_regex(refused).is_none(), "{refused}");
            assert!(!list(&[refused]).matches("team-a"), "{refused}");
        }
    }

    /// `util/glob/list.go`: `/re/` searched (unanchored) when longer than
    /// two bytes; `//` is a glob then, matching itself only.
    #[test]
    fn slashes_make_a_regex_searched_in_the_namespace() {
        let l = list(&["/^ops-[0-9]+$/", "/stage/"]);
        assert!(l.matches("ops-12") && l.matches("my-stage-1"));
        assert!(!l.matches("ops-x"));
        assert!(!list(&["//"]).matches("anything"));
        assert!(!list(&["/(?<=a)b/"]).matches("ab"), "regexp2 only");
    }

    #[test]
    fn application_namespaces_are_split_and_trimmed() {
        let enabled = enabled_namespaces(Some(" team-a , ops-* ,"));
        assert!(enabled.matches("team-a") && enabled.matches("ops-1"));
        assert!(!enabled.matches("team-b"));
        assert!(!enabled_namespaces(Some("")).matches(""));
        assert!(!enabled_namespaces(None).matches("team-a"));
    }
}
