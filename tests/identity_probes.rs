//! Identity patterns are judged by whom they match (issue 48): a pattern in
//! `controllers`, `trusted` or `breakGlass` loads exactly when it matches no
//! identity its section must never cover. The oracle here is independent of
//! driftguard's: every such identity of a small universe, matched by globset
//! (the decisions' matcher). Patterns spell only `a`, `b` and the structural
//! words, and every wildcard they use accepts `q`; so a namespace, node or
//! user name holding a `q` is one no pattern names, and the universe's names
//! of up to three characters are enough for patterns of up to three tokens a
//! part.

use driftguard::Policy;
use globset::{Glob, GlobMatcher};
use proptest::prelude::*;

/// How generated patterns begin: the shapes of the identities at stake, cut anywhere.
const PREFIXES: &[&str] = &[
    "",
    "a:",
    "b",
    "system:",
    "system:service",
    "system:serviceaccount",
    "system:serviceaccount:",
    "system:serviceaccounts",
    "system:serviceaccounts:",
    "system:node:",
    "system:nodes",
    "system:authenticated",
    "system:unauthenticated",
    "system:anonymous",
];

/// Tokens of a part: literals, and wildcards that all accept `q`.
const TOKENS: &[&str] = &["a", "b", "*", "?", "[abq]", "[!a]", "{a,b}", "{a,*}"];

fn part() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(TOKENS), 0..=3).prop_map(|t| t.concat())
}

fn pattern() -> impl Strategy<Value = String> {
    (
        prop::sample::select(PREFIXES),
        part(),
        prop::option::of(part()),
    )
        .prop_map(|(prefix, first, second)| match second {
            Some(second) => format!("{prefix}{first}:{second}"),
            None => format!("{prefix}{first}"),
        })
}

/// Every string of `a`, `b` and `q` of one to three characters.
fn names() -> Vec<String> {
    let mut out: Vec<String> = vec![String::new()];
    let mut all = Vec::new();
    for _ in 0..3 {
        out = out
            .iter()
            .flat_map(|s| ["a", "b", "q"].map(|c| format!("{s}{c}")))
            .collect();
        all.extend(out.iter().cloned());
    }
    all
}

/// An identity: its username and groups.
struct Identity {
    user: String,
    groups: Vec<String>,
}

/// Identities no section may cover, and (last) the nodes, which only
/// `trusted` may.
fn forbidden(with_nodes: bool) -> Vec<Identity> {
    let all = names();
    let unnamed: Vec<&String> = all.iter().filter(|n| n.contains('q')).collect();
    let mut out = Vec::new();
    for ns in &unnamed {
        for name in &all {
            out.push(Identity {
                user: format!("system:serviceaccount:{ns}:{name}"),
                groups: vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{ns}"),
                    "system:authenticated".into(),
                ],
            });
        }
    }
    for user in ["q", "qq", "qqq"] {
        out.push(Identity {
            user: user.into(),
            groups: vec!["system:authenticated".into()],
        });
    }
    out.push(Identity {
        user: "system:anonymous".into(),
        groups: vec!["system:unauthenticated".into()],
    });
    if with_nodes {
        for node in &unnamed {
            out.push(Identity {
                user: format!("system:node:{node}"),
                groups: vec!["system:nodes".into(), "system:authenticated".into()],
            });
        }
    }
    out
}

fn covers(glob: &GlobMatcher, groups: bool, id: &Identity) -> bool {
    if groups {
        id.groups.iter().any(|g| glob.is_match(g))
    } else {
        glob.is_match(&id.user)
    }
}

const FIELDS: &[(&str, &str, bool)] = &[
    ("controllers", "users", true),
    ("controllers", "groups", true),
    ("trusted", "users", false),
    ("trusted", "groups", false),
    ("breakGlass", "allowedUsers", true),
    ("breakGlass", "allowedGroups", true),
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_pattern_loads_iff_it_covers_no_forbidden_identity(
        p in pattern(),
        field in prop::sample::select(FIELDS),
    ) {
        let (section, key, with_nodes) = field;
        let glob = Glob::new(&p).unwrap().compile_matcher();
        let groups = key.ends_with("roups");
        let witness = forbidden(with_nodes).into_iter().find(|id| covers(&glob, groups, id));
        let yaml = format!("{section}: {{{key}: [{}]}}\n", serde_json::to_string(&p).unwrap());
        let loaded = Policy::from_yaml(&yaml, "p.yaml");
        match (&witness, &loaded) {
            (None, Ok(_)) => {}
            (Some(_), Err(e)) => {
                let e = e.to_string();
                prop_assert!(e.starts_with("p.yaml: ") && e.contains(&format!("`{p}` matches ")), "{e}");
            }
            (Some(id), Ok(_)) => prop_assert!(false, "{section}.{key} `{p}` loads, yet covers {} {:?}", id.user, id.groups),
            (None, Err(e)) => prop_assert!(false, "{section}.{key} `{p}` covers nothing forbidden, yet: {e}"),
        }
    }
}
