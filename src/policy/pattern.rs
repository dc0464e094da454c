//! `*` globs, as Argo CD uses for group/kind and we use for identities and namespaces.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};

use globset::{Glob, GlobMatcher};

/// A pattern globset refuses.
#[derive(Debug, thiserror::Error)]
#[error("bad glob `{pattern}`: {source}")]
pub(crate) struct PatternError {
    pub(crate) pattern: String,
    pub(crate) source: globset::Error,
}

#[derive(Clone, Debug)]
pub(crate) struct Pattern {
    source: String,
    /// `None` for a pattern without glob syntax, compared as a string: a
    /// compiled matcher holds a regex of about 8 KiB, and most group and kind
    /// patterns of the thousands of ignore rules Applications carry are literal.
    /// Boxed: a literal pattern then costs a pointer, not a matcher's 96 bytes.
    matcher: Option<Box<GlobMatcher>>,
}

/// What globset reads as syntax; a pattern without any matches only itself.
const GLOB_SYNTAX: &[char] = &['*', '?', '[', ']', '{', '}', '\\'];

impl Pattern {
    pub(crate) fn new(source: &str) -> Result<Self, PatternError> {
        let matcher = if source.contains(GLOB_SYNTAX) {
            let glob = Glob::new(source).map_err(|e| PatternError {
                pattern: source.to_owned(),
                source: e,
            })?;
            Some(Box::new(glob.compile_matcher()))
        } else {
            None
        };
        Ok(Self {
            source: source.to_owned(),
            matcher,
        })
    }

    pub(crate) fn is_match(&self, s: &str) -> bool {
        match &self.matcher {
            Some(m) => m.is_match(s),
            None => self.source == s,
        }
    }

    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// Whether some string made of `parts` matches: literal text, and runs of
    /// characters from a set, such as a service account name whose namespace
    /// is known (`system:serviceaccount:kube-system:` and then any name). A
    /// pattern [`Pattern::witness`] cannot read is assumed to match (the
    /// caller reports, so a doubt is a finding).
    pub(crate) fn may_match(&self, parts: &[Part]) -> bool {
        !matches!(self.witness(parts, ""), Witness::None)
    }

    /// A string made of `parts` that the pattern matches, as the text each
    /// part stands for: the shortest, except that a `*` matching a run stands
    /// for `fill` where the run's set holds its characters. Globset's syntax
    /// (`*`, `?`, `[...]`, `{a,b}`, `\`) read again as a small automaton.
    pub(crate) fn witness(&self, parts: &[Part], fill: &str) -> Witness {
        match glob_tokens(&self.source) {
            Some(alternatives) => alternatives
                .iter()
                .find_map(|tokens| search(tokens, parts, fill))
                .map_or(Witness::None, Witness::Found),
            None => Witness::Unreadable,
        }
    }
}

/// What [`Pattern::witness`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Witness {
    /// The text each part stands for.
    Found(Vec<String>),
    /// No string of the parts matches.
    None,
    /// Syntax this reader does not know (`[[:digit:]]`, nested `{}`).
    Unreadable,
}

/// A piece of a string known only in part (see [`Pattern::witness`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Part<'a> {
    /// Exactly this text.
    Text(&'a str),
    /// One or more characters, each one of these.
    Run(&'a str),
    /// A [`Part::Run`] with a character the pattern does not spell (a `*`,
    /// `?` or class matches it): a name the pattern does not name.
    Unnamed(&'a str),
    /// A [`Part::Run`] none of whose characters the pattern spells: a name
    /// the pattern says nothing about.
    Unspelled(&'a str),
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Char(char),
    /// `?`
    Any,
    /// `*` (and `**`): any run, `/` and `:` included, as globset without
    /// `literal_separator`.
    Star,
    /// `[...]`, `[!...]`, `[^...]`: inclusive ranges.
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

impl Token {
    fn takes(&self, c: char) -> bool {
        match self {
            Token::Char(x) => *x == c,
            Token::Any | Token::Star => true,
            Token::Class { negated, ranges } => {
                ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&c)) != *negated
            }
        }
    }
}

/// The pattern's token sequences, one per combination of `{a,b}`
/// alternatives; `None` for syntax this reader does not know.
fn glob_tokens(source: &str) -> Option<Vec<Vec<Token>>> {
    let mut out: Vec<Vec<Token>> = vec![Vec::new()];
    let mut chars = source.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' => {
                let mut options: Vec<Vec<Token>> = vec![Vec::new()];
                loop {
                    match chars.next()? {
                        '}' => break,
                        ',' => options.push(Vec::new()),
                        '{' => return None,
                        c => {
                            let token = one_token(c, &mut chars)?;
                            options.last_mut()?.push(token);
                        }
                    }
                }
                out = out
                    .iter()
                    .flat_map(|head| {
                        options.iter().map(move |o| {
                            let mut t = head.clone();
                            t.extend(o.iter().cloned());
                            t
                        })
                    })
                    .collect();
                if out.len() > 64 {
                    return None;
                }
            }
            c => {
                let token = one_token(c, &mut chars)?;
                out.iter_mut().for_each(|t| t.push(token.clone()));
            }
        }
    }
    Some(out)
}

/// One token outside `{...}` syntax: `c` and what it needs after it.
fn one_token(c: char, chars: &mut std::iter::Peekable<std::str::Chars>) -> Option<Token> {
    Some(match c {
        '?' => Token::Any,
        '*' => {
            while chars.peek() == Some(&'*') {
                chars.next();
            }
            Token::Star
        }
        '\\' => Token::Char(chars.next()?),
        '[' => {
            // As globset reads a class: `]` first and `-` first or last are
            // literal, `a-z` a range, `[:name:]` not read here.
            let negated = matches!(chars.peek(), Some('!' | '^'));
            if negated {
                chars.next();
            }
            let mut ranges: Vec<(char, char)> = Vec::new();
            let (mut first, mut in_range) = (true, false);
            loop {
                match chars.next()? {
                    ']' if !first => break,
                    '[' if chars.peek() == Some(&':') => return None,
                    '-' if !first && !in_range => in_range = true,
                    c if in_range => {
                        ranges.last_mut()?.1 = c;
                        in_range = false;
                    }
                    c => ranges.push((c, c)),
                }
                first = false;
            }
            if in_range {
                ranges.push(('-', '-'));
            }
            Token::Class { negated, ranges }
        }
        '}' => return None,
        c => Token::Char(c),
    })
}

/// Where a search for a witness is: the part reached and how far into it
/// (a text's bytes; for a run, whether it has a character yet), the token
/// reached, and whether a wildcard matched a character of this part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct At {
    part: usize,
    offset: usize,
    token: usize,
    wild: bool,
}

/// The shortest string of `parts` that `tokens` match, part by part: a
/// breadth-first search of the automaton (state: the token reached) run
/// along the parts. A wildcard's next state does not depend on which of its
/// characters it takes, so one per token is enough.
fn search(tokens: &[Token], parts: &[Part], fill: &str) -> Option<Vec<String>> {
    let start = At {
        part: 0,
        offset: 0,
        token: 0,
        wild: false,
    };
    let mut came: HashMap<At, (At, Option<String>)> = HashMap::new();
    let mut queue = VecDeque::from([start]);
    came.insert(start, (start, None));
    while let Some(at) = queue.pop_front() {
        if at.part == parts.len() && at.token == tokens.len() {
            return Some(spelled(&came, at, parts.len()));
        }
        for (next, text) in steps(tokens, parts, at, fill) {
            if let Entry::Vacant(e) = came.entry(next) {
                e.insert((at, text));
                queue.push_back(next);
            }
        }
    }
    None
}

/// The moves from `at`: a `*` matching nothing, a part finished, or one
/// character (a `*` in a run: `fill`) taken by the token reached.
fn steps(tokens: &[Token], parts: &[Part], at: At, fill: &str) -> Vec<(At, Option<String>)> {
    let mut out = Vec::new();
    let token = tokens.get(at.token);
    if token == Some(&Token::Star) {
        out.push((
            At {
                token: at.token + 1,
                ..at
            },
            None,
        ));
    }
    let Some(part) = parts.get(at.part) else {
        return out;
    };
    let next_part = At {
        part: at.part + 1,
        offset: 0,
        wild: false,
        ..at
    };
    let after = |t: &Token| {
        if *t == Token::Star {
            at.token
        } else {
            at.token + 1
        }
    };
    let (set, unnamed, unspelled) = match *part {
        Part::Text(text) => {
            let Some(c) = text[at.offset..].chars().next() else {
                out.push((next_part, None));
                return out;
            };
            if let Some(t) = token.filter(|t| t.takes(c)) {
                let moved = At {
                    offset: at.offset + c.len_utf8(),
                    token: after(t),
                    ..at
                };
                out.push((moved, Some(c.to_string())));
            }
            return out;
        }
        Part::Run(set) => (set, false, false),
        Part::Unnamed(set) => (set, true, false),
        Part::Unspelled(set) => (set, false, true),
    };
    if at.offset == 1 && (at.wild || !unnamed) {
        out.push((next_part, None));
    }
    let Some(t) = token else {
        return out;
    };
    let wildcard = !matches!(t, Token::Char(_));
    let text = match t {
        Token::Star if !fill.is_empty() && fill.chars().all(|c| set.contains(c)) => {
            Some(fill.to_owned())
        }
        _ if unspelled && !wildcard => None,
        t => set.chars().find(|c| t.takes(*c)).map(String::from),
    };
    if let Some(text) = text {
        let moved = At {
            offset: 1,
            token: after(t),
            wild: at.wild || wildcard,
            ..at
        };
        out.push((moved, Some(text)));
    }
    out
}

/// The text each of `parts` parts took on the way to `end`.
fn spelled(came: &HashMap<At, (At, Option<String>)>, end: At, parts: usize) -> Vec<String> {
    let mut texts = vec![String::new(); parts];
    let mut at = end;
    while let Some((before, text)) = came.get(&at).filter(|(before, _)| *before != at) {
        if let Some(text) = text {
            texts[before.part].insert_str(0, text);
        }
        at = *before;
    }
    texts
}

/// A list of patterns; matches when any does.
#[derive(Clone, Debug, Default)]
pub struct PatternSet(Vec<Pattern>);

impl PatternSet {
    pub(crate) fn new(sources: &[String]) -> Result<Self, PatternError> {
        sources
            .iter()
            .map(|s| Pattern::new(s))
            .collect::<Result<_, _>>()
            .map(Self)
    }

    pub(crate) fn is_match(&self, s: &str) -> bool {
        self.0.iter().any(|p| p.is_match(s))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn sources(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(Pattern::source)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Pattern> {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn star_spans_colons_and_dots() {
        let p = Pattern::new("system:serviceaccount:kube-system:*").unwrap();
        assert!(p.is_match("system:serviceaccount:kube-system:horizontal-pod-autoscaler"));
        assert!(!p.is_match("system:serviceaccount:default:x"));
        let g = Pattern::new("*.k8s.io").unwrap();
        assert!(g.is_match("networking.k8s.io"));
    }

    /// The literal fast path agrees with globset.
    #[test]
    fn a_literal_matches_as_its_glob_would() {
        for (pattern, s) in [
            ("apps", "apps"),
            ("apps", "Apps"),
            ("apps", "apps/v1"),
            ("Deployment", "Deployment"),
            ("a.b", "axb"),
            ("", ""),
            ("", "x"),
            ("x/y", "x/y"),
        ] {
            let glob = Glob::new(pattern).unwrap().compile_matcher();
            let p = Pattern::new(pattern).unwrap();
            assert!(p.matcher.is_none());
            assert_eq!(p.is_match(s), glob.is_match(s), "{pattern} on {s}");
        }
    }

    #[test]
    fn empty_pattern_matches_only_empty() {
        let p = Pattern::new("").unwrap();
        assert!(p.is_match(""));
        assert!(!p.is_match("apps"));
    }

    /// On whole strings, the automaton answers as globset does.
    #[test]
    fn the_automaton_agrees_with_globset_on_whole_strings() {
        let patterns = [
            "system:serviceaccount:kube-system:*",
            "system:serviceaccount:*:*",
            "system:serviceaccount:team-?:deployer",
            "system:node:*",
            "*",
            "",
            "a*b*c",
            "sa-[0-9]",
            "sa-[!0-9]",
            "sa-[^a-c]x",
            "[]a]",
            "[-a]",
            "[a-]",
            "[a-c-e]",
            "x]y",
            "{argocd,flux-system}:*",
            "pre{a,b*}{c,d}",
            "a,b",
            "a\\*b",
            "**",
            "*.k8s.io",
        ];
        let strings = [
            "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
            "system:serviceaccount:kube-system:a:b",
            "system:serviceaccount:team-a:deployer",
            "system:serviceaccount:team-ab:deployer",
            "system:node:worker-1",
            "",
            "abc",
            "aXbYc",
            "sa-1",
            "sa-x",
            "sa-dx",
            "sa-bx",
            "]",
            "a",
            "-",
            "d",
            "b",
            "x]y",
            "argocd:x",
            "flux-system:",
            "prebzzd",
            "preac",
            "a,b",
            "a*b",
            "aXb",
            "networking.k8s.io",
        ];
        for pattern in patterns {
            let glob = Glob::new(pattern).unwrap().compile_matcher();
            let p = Pattern::new(pattern).unwrap();
            assert!(glob_tokens(pattern).is_some(), "{pattern} is read");
            for s in strings {
                assert_eq!(
                    p.may_match(&[Part::Text(s)]),
                    glob.is_match(s),
                    "{pattern} on {s:?}"
                );
            }
        }
    }

    #[test]
    fn runs_stand_for_any_name() {
        const NAME: &str = "abcdefghijklmnopqrstuvwxyz0123456789-.";
        let sa = |ns: Part<'static>, name: Part<'static>| {
            [
                Part::Text("system:serviceaccount:"),
                ns,
                Part::Text(":"),
                name,
            ]
        };
        let any = Part::Run(NAME);
        let kube_system = Pattern::new("system:serviceaccount:kube-system:*").unwrap();
        assert!(kube_system.may_match(&sa(Part::Text("kube-system"), any)));
        assert!(!kube_system.may_match(&sa(Part::Text("default"), any)));
        // Some namespace: kube-system is one.
        assert!(kube_system.may_match(&sa(any, any)));
        assert!(kube_system.may_match(&sa(any, Part::Text("x"))));
        let literal =
            Pattern::new("system:serviceaccount:argocd:argocd-application-controller").unwrap();
        assert!(literal.may_match(&sa(Part::Text("argocd"), any)));
        assert!(!literal.may_match(&sa(Part::Text("flux-system"), any)));
        assert!(!literal.may_match(&sa(Part::Text("argocd"), Part::Text("other"))));
        // A name must be one character at least, from the set.
        let empty_name = Pattern::new("system:serviceaccount:argocd:").unwrap();
        assert!(!empty_name.may_match(&sa(Part::Text("argocd"), any)));
        let upper = Pattern::new("system:serviceaccount:argocd:[A-Z]*").unwrap();
        assert!(!upper.may_match(&sa(Part::Text("argocd"), any)));
        let digits = Pattern::new("system:serviceaccount:argocd:sync-[0-9]").unwrap();
        assert!(digits.may_match(&sa(Part::Text("argocd"), any)));
        let alternatives = Pattern::new("system:serviceaccount:{argocd,flux-system}:*").unwrap();
        assert!(alternatives.may_match(&sa(Part::Text("flux-system"), any)));
        assert!(!alternatives.may_match(&sa(Part::Text("default"), any)));
        // Not a service account shape at all.
        let node = Pattern::new("system:node:*").unwrap();
        assert!(!node.may_match(&sa(any, any)));
        // Syntax this reader does not know is assumed to match.
        let posix = Pattern::new("system:serviceaccount:x:[[:digit:]]").unwrap();
        assert!(posix.may_match(&sa(Part::Text("default"), any)));
    }
}
