//! A set of RFC 6901 pointers that answers "does any of them overlap this
//! one" (equal, above or below it, as [`is_under`] says) in O(depth · log n)
//! instead of a scan: drifted paths are checked against owned and shown
//! paths, and a write can carry hundreds of thousands of each.

use std::collections::BTreeSet;
use std::ops::Bound;

#[cfg(doc)]
use super::path::is_under;

#[derive(Debug, Default, Clone)]
pub(crate) struct PointerSet(BTreeSet<String>);

impl PointerSet {
    pub(crate) fn insert(&mut self, pointer: String) {
        self.0.insert(pointer);
    }

    pub(crate) fn contains(&self, pointer: &str) -> bool {
        self.0.contains(pointer)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether some pointer of the set is `pointer`, above it or below it:
    /// `any(|q| is_under(pointer, q) || is_under(q, pointer))`.
    pub(crate) fn overlaps(&self, pointer: &str) -> bool {
        self.has_at_or_above(pointer) || self.has_below(pointer)
    }

    /// `pointer` itself or one of its ancestors ("" is everyone's).
    pub(crate) fn has_at_or_above(&self, pointer: &str) -> bool {
        self.0.contains(pointer)
            || pointer
                .match_indices('/')
                .any(|(at, _)| self.0.contains(&pointer[..at]))
    }

    /// A pointer strictly below `pointer`: those starting with `pointer/`
    /// sort together, right after it.
    pub(crate) fn has_below(&self, pointer: &str) -> bool {
        let prefix = format!("{pointer}/");
        self.0
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .next()
            .is_some_and(|q| q.starts_with(&prefix))
    }
}

impl PointerSet {
    /// The pointers of the set that overlap `pointer`: itself, its
    /// ancestors, and those below it.
    pub(crate) fn overlapping<'a>(
        &'a self,
        pointer: &'a str,
    ) -> impl Iterator<Item = &'a str> + 'a {
        let prefix = format!("{pointer}/");
        let at_or_above = pointer
            .match_indices('/')
            .map(|(at, _)| &pointer[..at])
            .chain(std::iter::once(pointer))
            .filter(|p| self.0.contains(*p));
        let below = self
            .0
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .take_while(|q| q.starts_with(prefix.as_str()))
            .map(String::as_str)
            .collect::<Vec<_>>();
        at_or_above.chain(below)
    }
}

impl<S: Into<String>> FromIterator<S> for PointerSet {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        Self(iter.into_iter().map(Into::into).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::path::is_under;

    /// Agrees with the scan it replaces, on pointers chosen to trip prefix
    /// tricks: `/a/b` vs `/a/bc`, `/a~1b`, the root, empty tokens.
    #[test]
    fn agrees_with_the_scan() {
        let all = [
            "", "/", "/a", "/a/", "/a/b", "/a/bc", "/a/b/c", "/a~1b", "/a~1b/c", "/ab", "/a//b",
            "/b", "/b/0", "/b/00", "/b/1/x",
        ];
        for mask in 0u32..(1 << 10) {
            let chosen: Vec<&str> = (0..10)
                .filter(|i| mask & (1 << i) != 0)
                .map(|i| all[i + 3])
                .chain(if mask % 7 == 0 { Some("") } else { None })
                .collect();
            let set: PointerSet = chosen.iter().copied().collect();
            for p in all {
                let scan = chosen.iter().any(|q| is_under(p, q) || is_under(q, p));
                assert_eq!(set.overlaps(p), scan, "{p} in {chosen:?}");
            }
        }
    }
}
