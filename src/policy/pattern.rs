//! `*` globs, as Argo CD uses for group/kind and we use for identities and namespaces.

use globset::{Glob, GlobMatcher};

/// A pattern globset refuses.
#[derive(Debug, thiserror::Error)]
#[error("bad glob `{pattern}`: {source}")]
pub struct PatternError {
    pub pattern: String,
    pub source: globset::Error,
}

#[derive(Clone, Debug)]
pub struct Pattern {
    source: String,
    /// `None` for a pattern without glob syntax, compared as a string: a
    /// compiled matcher holds a regex of about 8 KiB, and most group and kind
    /// patterns of the thousands of ignore rules Applications carry are literal.
    matcher: Option<GlobMatcher>,
}

/// What globset reads as syntax; a pattern without any matches only itself.
const GLOB_SYNTAX: &[char] = &['*', '?', '[', ']', '{', '}', '\\'];

impl Pattern {
    pub fn new(source: &str) -> Result<Self, PatternError> {
        let matcher = if source.contains(GLOB_SYNTAX) {
            let glob = Glob::new(source).map_err(|e| PatternError {
                pattern: source.to_owned(),
                source: e,
            })?;
            Some(glob.compile_matcher())
        } else {
            None
        };
        Ok(Self {
            source: source.to_owned(),
            matcher,
        })
    }

    pub fn is_match(&self, s: &str) -> bool {
        match &self.matcher {
            Some(m) => m.is_match(s),
            None => self.source == s,
        }
    }

    pub fn source(&self) -> &str {
        &self.source
    }
}

/// A list of patterns; matches when any does.
#[derive(Clone, Debug, Default)]
pub struct PatternSet(Vec<Pattern>);

impl PatternSet {
    pub fn new(sources: &[String]) -> Result<Self, PatternError> {
        sources
            .iter()
            .map(|s| Pattern::new(s))
            .collect::<Result<_, _>>()
            .map(Self)
    }

    pub fn is_match(&self, s: &str) -> bool {
        self.0.iter().any(|p| p.is_match(s))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn sources(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(Pattern::source)
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
}
