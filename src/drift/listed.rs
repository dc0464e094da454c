//! The index of what the tools' records list: each object's first lister,
//! and the same keys by namespace and by custom kind, so that a Namespace or
//! CRD DELETE finds what it takes with it without a scan of every listing.
//! Persistent maps: a snapshot shares the index, and an update copies only
//! the path to what it changes.

use std::ops::Deref;
use std::sync::Arc;

use super::Manager;
use crate::policy::planned;

/// A map by key: keys and listers are shared pointers, since a hundred
/// thousand listed objects each hold a key, and every listing of one
/// Application the same lister.
pub type Listed<V> = imbl::HashMap<Arc<str>, V>;

/// Keys, ordered.
type Keys = imbl::OrdSet<Arc<str>>;

/// Every listed object (`group/Kind:namespace/name`, or a wide listing of
/// `policy::planned`) and its first lister; read as a [`Listed`] map.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Index {
    first: Listed<Arc<Manager>>,
    /// The keys by the namespace they name: `*` for every namespace's
    /// listing, `@project` for a project's, `""` for cluster-scoped objects.
    by_namespace: Listed<Keys>,
    /// The keys of kinds a CRD can serve (a group with a dot, as the
    /// apiserver requires of a CRD), by `group/Kind`, and every wide listing
    /// under `*/*`: a CRD DELETE takes these.
    by_kind: Listed<Keys>,
}

impl Deref for Index {
    type Target = Listed<Arc<Manager>>;

    fn deref(&self) -> &Self::Target {
        &self.first
    }
}

impl Index {
    /// Sets `key`'s first lister; the one it replaces.
    pub fn insert(&mut self, key: Arc<str>, by: Arc<Manager>) -> Option<Arc<Manager>> {
        let before = self.first.insert(key.clone(), by);
        if before.is_none() {
            let (namespace, kind) = places(&key);
            add(&mut self.by_namespace, namespace, &key);
            if let Some(kind) = kind {
                add(&mut self.by_kind, kind, &key);
            }
        }
        before
    }

    /// Removes `key`; its first lister.
    pub fn remove(&mut self, key: &str) -> Option<Arc<Manager>> {
        let before = self.first.remove(key)?;
        let (namespace, kind) = places(key);
        take(&mut self.by_namespace, namespace, key);
        if let Some(kind) = kind {
            take(&mut self.by_kind, kind, key);
        }
        Some(before)
    }

    /// The keys that name `namespace` (not the wide listings that cover it).
    pub fn in_namespace(&self, namespace: &str) -> impl Iterator<Item = &Arc<str>> {
        self.by_namespace.get(namespace).into_iter().flatten()
    }

    /// The keys of `group_kind` (`group/Kind`) when a CRD can serve it, and
    /// every wide listing (`*/*`).
    pub fn of_kind(&self, group_kind: &str) -> impl Iterator<Item = &Arc<str>> {
        self.by_kind.get(group_kind).into_iter().flatten()
    }
}

/// The namespace `key` is kept under, and its `group/Kind` when a CRD can
/// serve it (or `*/*`, a wide listing).
pub(crate) fn places(key: &str) -> (&str, Option<&str>) {
    let (group_kind, rest) = key.split_once(':').unwrap_or((key, ""));
    let namespace = rest.split_once('/').map_or("", |(ns, _)| ns);
    let custom = planned::is_wide(key)
        || group_kind
            .split_once('/')
            .is_some_and(|(group, _)| group.contains('.'));
    (namespace, custom.then_some(group_kind))
}

fn add(map: &mut Listed<Keys>, at: &str, key: &Arc<str>) {
    match map.get_mut(at) {
        Some(keys) => {
            keys.insert(key.clone());
        }
        None => {
            map.insert(at.into(), Keys::unit(key.clone()));
        }
    }
}

fn take(map: &mut Listed<Keys>, at: &str, key: &str) {
    if let Some(keys) = map.get_mut(at) {
        keys.remove(key);
        if keys.is_empty() {
            map.remove(at);
        }
    }
}

impl FromIterator<(Arc<str>, Arc<Manager>)> for Index {
    fn from_iter<I: IntoIterator<Item = (Arc<str>, Arc<Manager>)>>(listings: I) -> Self {
        let mut index = Self::default();
        for (key, by) in listings {
            index.insert(key, by);
        }
        index
    }
}

impl From<Vec<(Arc<str>, Arc<Manager>)>> for Index {
    fn from(listings: Vec<(Arc<str>, Arc<Manager>)>) -> Self {
        listings.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn key() -> impl Strategy<Value = String> {
        let group = prop::sample::select(vec!["", "apps", "argoproj.io", "*"]);
        let kind = prop::sample::select(vec!["Deployment", "Rollout", "*"]);
        let namespace = prop::sample::select(vec!["", "shop", "prod", "*", "@team"]);
        let name = prop::sample::select(vec!["web", "db", "*"]);
        (group, kind, namespace, name).prop_map(|(g, k, ns, n)| planned::key(g, k, ns, n))
    }

    proptest! {
        /// After any inserts and removes, what a Namespace or CRD DELETE
        /// reads from the index is what a scan of every key finds.
        #[test]
        fn the_namespace_and_kind_keys_equal_a_scan(
            ops in prop::collection::vec((any::<bool>(), key()), 0..60),
        ) {
            let by = Arc::new(Manager::ArgoCd { application: "a".into(), application_namespace: None });
            let mut index = Index::default();
            for (insert, key) in ops {
                if insert {
                    index.insert(key.into(), by.clone());
                } else {
                    index.remove(&key);
                }
            }
            let scan = |keep: &dyn Fn(&str) -> bool| {
                let mut keys: Vec<&str> = index.keys().map(|k| &**k).filter(|k| keep(k)).collect();
                keys.sort_unstable();
                keys
            };
            let namespace_of = |k: &str| k.split_once(':').and_then(|(_, r)| r.split_once('/')).map_or("", |(ns, _)| ns).to_owned();
            for ns in ["", "shop", "prod", "*", "@team"] {
                let read: Vec<&str> = index.in_namespace(ns).map(|k| &**k).collect();
                prop_assert_eq!(read, scan(&|k| namespace_of(k) == ns));
            }
            for gk in ["argoproj.io/Rollout", "argoproj.io/Deployment", "apps/Deployment", "*/*"] {
                let read: Vec<&str> = index.of_kind(gk).map(|k| &**k).collect();
                let crd = gk.split_once('/').is_some_and(|(g, _)| g.contains('.')) || gk == "*/*";
                let expected = if crd {
                    scan(&|k| k.starts_with(&format!("{gk}:")) || (gk == "*/*" && planned::is_wide(k)))
                } else {
                    Vec::new()
                };
                prop_assert_eq!(read, expected);
            }
        }
    }
}
