//! Paths into a JSON document: RFC 6901 pointers and jq path arrays share one type,
//! and a set of them is removed from an object in an order that keeps array
//! indices valid.

use std::cmp::Ordering;

use serde_json::Value;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Segment {
    Key(String),
    /// An array index from jq; negative counts from the end.
    Index(i64),
}

/// A JSON pointer an ignore rule cannot use.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum PointerError {
    /// `""` is the whole document.
    #[error("the empty pointer would ignore the whole object")]
    Empty,
    /// RFC 6901 pointers start with `/`.
    #[error("`{0}` is not a JSON pointer: it must start with `/` (did you mean `/{0}`?)")]
    NoLeadingSlash(String),
    /// RFC 6901 escapes are `~0` and `~1` only.
    #[error("`{0}` has a `~` not followed by 0 or 1")]
    BadEscape(String),
}

/// A path into a JSON document: object keys and array indices, from the root.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Path(pub(crate) Vec<Segment>);

impl Path {
    /// Parses an RFC 6901 pointer. The empty pointer (the whole document) is
    /// refused: as an ignore rule it would silently ignore everything.
    pub(crate) fn parse_pointer(pointer: &str) -> Result<Self, PointerError> {
        if pointer.is_empty() {
            return Err(PointerError::Empty);
        }
        let Some(rest) = pointer.strip_prefix('/') else {
            return Err(PointerError::NoLeadingSlash(pointer.to_owned()));
        };
        let mut segments = Vec::new();
        for token in rest.split('/') {
            if has_bad_escape(token) {
                return Err(PointerError::BadEscape(pointer.to_owned()));
            }
            segments.push(Segment::Key(token.replace("~1", "/").replace("~0", "~")));
        }
        Ok(Self(segments))
    }

    pub(crate) fn to_pointer(&self) -> String {
        let mut out = String::new();
        for seg in &self.0 {
            out.push('/');
            match seg {
                Segment::Key(k) => out.push_str(&escape(k)),
                Segment::Index(i) => out.push_str(&i.to_string()),
            }
        }
        out
    }
}

fn has_bad_escape(token: &str) -> bool {
    let bytes = token.as_bytes();
    bytes
        .iter()
        .enumerate()
        .any(|(i, b)| *b == b'~' && !matches!(bytes.get(i + 1), Some(b'0' | b'1')))
}

pub(crate) fn escape(token: &str) -> String {
    let mut out = String::with_capacity(token.len());
    escape_into(&mut out, token);
    out
}

/// [`escape`], appended to `out` (no String per token on the diff's path).
pub(crate) fn escape_into(out: &mut String, token: &str) {
    // Nearly every key has neither: copied whole.
    if !token.contains(['~', '/']) {
        out.push_str(token);
        return;
    }
    for c in token.chars() {
        match c {
            '~' => out.push_str("~0"),
            '/' => out.push_str("~1"),
            c => out.push(c),
        }
    }
}

/// Removes every path in `paths` from `doc`, then drops every object member or
/// array that the removals left empty, up the tree, so that an emptied map
/// equals an absent one. Missing paths are skipped, as in Argo CD. Paths are
/// treated as a set: deeper and higher-indexed paths go first, so removing
/// `/a/0` never shifts the element `/a/1` meant.
pub(crate) fn remove_all_pruning(doc: &mut Value, mut paths: Vec<Path>) -> Vec<Path> {
    // Most ignore pointers name fields an object does not have: drop those
    // before sorting.
    paths.retain(|p| exists(doc, &p.0));
    sort_for_removal(&mut paths);
    for path in &paths {
        remove_pruning(doc, &path.0);
    }
    paths
}

/// Deeper and higher-indexed paths first, without repeats: the order in
/// which removing them never shifts an element a later path means.
pub(crate) fn sort_for_removal(paths: &mut Vec<Path>) {
    paths.sort_by(|a, b| compare(b, a));
    paths.dedup();
}

fn exists(doc: &Value, path: &[Segment]) -> bool {
    get(doc, path).is_some()
}

pub(crate) fn get<'a>(doc: &'a Value, path: &[Segment]) -> Option<&'a Value> {
    let mut node = doc;
    for seg in path {
        node = match node {
            Value::Object(map) => map.get(key_str(seg).as_ref()),
            Value::Array(items) => resolve_index(seg, items.len()).and_then(|i| items.get(i)),
            _ => None,
        }?;
    }
    Some(node)
}

/// After [`remove_all_pruning`] on both objects: where removing `paths` (the
/// ones it removed) pruned a container from one object, the same container left empty in the
/// other (written as `{}` or `[]` there, around the ignored field) is pruned
/// too. Either way it held only ignored fields.
pub(crate) fn prune_like(a: &mut Value, b: &mut Value, paths: &[Path]) {
    for path in paths {
        for len in (1..path.0.len()).rev() {
            let prefix = &path.0[..len];
            let (in_a, in_b) = (get(a, prefix), get(b, prefix));
            let empty = |v: &Value| {
                v.as_object().is_some_and(|m| m.is_empty())
                    || v.as_array().is_some_and(|l| l.is_empty())
            };
            if in_a.is_none() && in_b.is_some_and(empty) {
                remove_pruning(b, prefix);
            } else if in_b.is_none() && in_a.is_some_and(empty) {
                remove_pruning(a, prefix);
            }
        }
    }
}

/// Returns true when `node` became empty through this removal. The empty
/// path (Flux's whole-document pointer) empties the document.
fn remove_pruning(node: &mut Value, path: &[Segment]) -> bool {
    let Some((first, rest)) = path.split_first() else {
        *node = Value::Object(Default::default());
        return true;
    };
    let emptied = match node {
        Value::Object(map) => {
            let key = key_str(first);
            if rest.is_empty() {
                map.remove(key.as_ref()).is_some()
            } else if let Some(child) = map.get_mut(key.as_ref())
                && remove_pruning(child, rest)
            {
                map.remove(key.as_ref());
                true
            } else {
                false
            }
        }
        Value::Array(items) => match resolve_index(first, items.len()) {
            Some(i) if rest.is_empty() => {
                items.remove(i);
                true
            }
            // An element left empty keeps its position.
            Some(i) => {
                remove_pruning(&mut items[i], rest);
                false
            }
            None => false,
        },
        _ => false,
    };
    emptied && is_empty_container(node)
}

fn is_empty_container(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn compare(a: &Path, b: &Path) -> Ordering {
    for (x, y) in a.0.iter().zip(&b.0) {
        let ord = match (index_of(x), index_of(y)) {
            (Some(i), Some(j)) => i.cmp(&j),
            _ => key_str(x).cmp(&key_str(y)),
        };
        if ord != Ordering::Equal {
            return ord;
        }
    }
    a.0.len().cmp(&b.0.len())
}

fn index_of(seg: &Segment) -> Option<i64> {
    match seg {
        Segment::Index(i) => Some(*i),
        Segment::Key(k)
            if k.bytes()
                .next()
                .is_some_and(|b| b.is_ascii_digit() || b == b'-') =>
        {
            k.parse().ok()
        }
        Segment::Key(_) => None,
    }
}

pub(crate) fn key_str(seg: &Segment) -> std::borrow::Cow<'_, str> {
    match seg {
        Segment::Key(k) => k.as_str().into(),
        Segment::Index(i) => i.to_string().into(),
    }
}

fn resolve_index(seg: &Segment, len: usize) -> Option<usize> {
    let i = index_of(seg)?;
    let i = if i < 0 { len as i64 + i } else { i };
    (0..len as i64).contains(&i).then_some(i as usize)
}

/// True when `path` equals `prefix` or lies beneath it.
pub(crate) fn is_under(path: &str, prefix: &str) -> bool {
    path == prefix || (path.starts_with(prefix) && path.as_bytes().get(prefix.len()) == Some(&b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(s: &str) -> Path {
        Path::parse_pointer(s).unwrap()
    }

    #[test]
    fn pointer_round_trips_escapes() {
        let path = p("/metadata/annotations/kubectl.kubernetes.io~1restartedAt");
        assert_eq!(
            path.0.last(),
            Some(&Segment::Key("kubectl.kubernetes.io/restartedAt".into()))
        );
        assert_eq!(
            path.to_pointer(),
            "/metadata/annotations/kubectl.kubernetes.io~1restartedAt"
        );
    }

    #[test]
    fn rejects_non_pointers() {
        assert!(Path::parse_pointer("spec/replicas").is_err());
        assert!(Path::parse_pointer("").is_err());
        assert!(Path::parse_pointer("/a~2b").is_err());
    }

    #[test]
    fn removes_array_elements_as_a_set() {
        let mut doc = json!({"a": [0, 1, 2, 3]});
        remove_all_pruning(&mut doc, vec![p("/a/1"), p("/a/2")]);
        assert_eq!(doc, json!({"a": [0, 3]}));
    }

    #[test]
    fn missing_paths_are_skipped() {
        let mut doc = json!({"a": {"b": 1}});
        remove_all_pruning(&mut doc, vec![p("/garbage"), p("/a/b/c"), p("/a/9")]);
        assert_eq!(doc, json!({"a": {"b": 1}}));
    }

    #[test]
    fn negative_jq_indices_count_from_the_end() {
        let mut doc = json!({"a": [0, 1, 2]});
        remove_all_pruning(
            &mut doc,
            vec![Path(vec![Segment::Key("a".into()), Segment::Index(-1)])],
        );
        assert_eq!(doc, json!({"a": [0, 1]}));
    }

    #[test]
    fn is_under_respects_token_boundaries() {
        assert!(is_under("/spec/replicas", "/spec"));
        assert!(is_under("/spec", "/spec"));
        assert!(!is_under("/specx", "/spec"));
    }
}
