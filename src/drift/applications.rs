//! An Argo CD installation's watched Applications: in order (by uid, as the
//! source cache holds them), which every "the first that matches" reads, and
//! by namespace and name (what a tracking id names) and by destination
//! namespace (what a Namespace DELETE takes), so that a decision finds its
//! Application with a lookup, not a scan of ten thousand. The source cache
//! keeps both views as Applications change; a snapshot shares them.

use std::ops::Deref;
use std::sync::Arc;

use super::Listed;
use crate::policy::Application;

/// Applications by an order key (the uid), sorted: the few of one name or
/// one destination namespace.
type Ordered = Arc<[(Arc<str>, Arc<Application>)]>;

/// One installation's Applications, in order and by the views above.
#[derive(Clone, Debug, Default)]
pub struct Applications {
    list: Vec<Arc<Application>>,
    views: Views,
}

impl Deref for Applications {
    type Target = [Arc<Application>];

    fn deref(&self) -> &Self::Target {
        &self.list
    }
}

/// The views of the source cache, kept by [`Views::add`] and
/// [`Views::remove`] as its Applications change.
#[derive(Clone, Debug, Default)]
pub struct Views {
    /// By [`name_key`].
    by_name: Listed<Ordered>,
    /// By the namespace they deploy into on this cluster.
    by_destination: Listed<Ordered>,
}

impl Views {
    /// Records `app`, ordered by `key` among those of its name and destination.
    pub fn add(&mut self, key: &Arc<str>, app: &Arc<Application>) {
        let entry = (key.clone(), app.clone());
        insert(&mut self.by_name, &name_key(app), entry.clone());
        if let Some(ns) = &app.destination_namespace {
            insert(&mut self.by_destination, ns, entry);
        }
    }

    /// Forgets what [`Self::add`] recorded for `app` under `key`.
    pub fn remove(&mut self, key: &str, app: &Application) {
        take(&mut self.by_name, &name_key(app), key);
        if let Some(ns) = &app.destination_namespace {
            take(&mut self.by_destination, ns, key);
        }
    }
}

impl Applications {
    /// `list` (in uid order) with the views the cache kept of it.
    pub(crate) fn with_views(list: Vec<Arc<Application>>, views: &Views) -> Self {
        let views = views.clone();
        Self { list, views }
    }

    /// Adds `app` after the others.
    pub fn push(&mut self, app: Arc<Application>) {
        let key: Arc<str> = format!("{:012}", self.list.len()).into();
        self.views.add(&key, &app);
        self.list.push(app);
    }

    /// The first Application named `name` in `namespace` (`None`: Argo CD's
    /// `control_plane`), as a scan in order finds it.
    pub fn named(
        &self,
        name: &str,
        namespace: Option<&str>,
        control_plane: &str,
    ) -> Option<&Application> {
        let namespace = namespace.unwrap_or(control_plane);
        let by_name = &self.views.by_name;
        let first = |key: String| by_name.get(key.as_str()).and_then(|apps| apps.first());
        let exact = first(format!("{namespace}/{name}"));
        // One that names no namespace lives in the control plane.
        let bare = (namespace == control_plane)
            .then(|| first(format!("{NO_NAMESPACE}/{name}")))
            .flatten();
        let found = match (exact, bare) {
            (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
            (a, b) => a.or(b),
        };
        found.map(|(_, app)| &**app)
    }

    /// The first Application that deploys into `namespace` on this cluster.
    pub fn deploying_into(&self, namespace: &str) -> Option<&Application> {
        let (_, app) = self.views.by_destination.get(namespace)?.first()?;
        Some(app)
    }
}

impl FromIterator<Arc<Application>> for Applications {
    fn from_iter<I: IntoIterator<Item = Arc<Application>>>(apps: I) -> Self {
        let mut all = Self::default();
        for app in apps {
            all.push(app);
        }
        all
    }
}

impl From<Vec<Arc<Application>>> for Applications {
    fn from(apps: Vec<Arc<Application>>) -> Self {
        apps.into_iter().collect()
    }
}

/// `namespace/name`; `@/name` for one that names no namespace (`@` is in no
/// namespace's name, so it is told apart from an empty one).
fn name_key(app: &Application) -> String {
    let namespace = app.namespace.as_deref().unwrap_or(NO_NAMESPACE);
    format!("{namespace}/{}", app.name)
}

const NO_NAMESPACE: &str = "@";

/// Adds `entry` to the ones under `at`, in key order (a copy of those few).
fn insert(map: &mut Listed<Ordered>, at: &str, entry: (Arc<str>, Arc<Application>)) {
    let mut all: Vec<_> = map.get(at).map(|a| a.to_vec()).unwrap_or_default();
    match all.binary_search_by(|(k, _)| k.cmp(&entry.0)) {
        Ok(i) => all[i] = entry,
        Err(i) => all.insert(i, entry),
    }
    map.insert(at.into(), all.into());
}

/// Removes the entry of key `key` under `at`.
fn take(map: &mut Listed<Ordered>, at: &str, key: &str) {
    let Some(apps) = map.get(at) else {
        return;
    };
    let rest: Vec<_> = apps.iter().filter(|(k, _)| &**k != key).cloned().collect();
    if rest.is_empty() {
        map.remove(at);
    } else {
        map.insert(at.into(), rest.into());
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn app(name: &str, namespace: Option<&str>, destination: &str) -> Arc<Application> {
        let mut metadata = json!({"name": name});
        if let Some(ns) = namespace {
            metadata["namespace"] = json!(ns);
        }
        let spec = json!({"destination": {"server": "https://kubernetes.default.svc", "namespace": destination}});
        Arc::new(
            crate::policy::argocd::from_value(&json!({"metadata": metadata, "spec": spec}))
                .unwrap(),
        )
    }

    proptest! {
        /// Whatever the names, namespaces (none, empty, any) and order, a
        /// lookup finds what a scan of the list in order finds.
        #[test]
        fn a_lookup_finds_what_a_scan_finds(
            apps in prop::collection::vec((0..2usize, 0..4usize, 0..2usize), 0..12),
        ) {
            let namespaces = [None, Some(""), Some("argocd"), Some("team")];
            let list: Applications = apps
                .iter()
                .map(|&(n, ns, d)| app(["a", "b"][n], namespaces[ns], ["shop", "web"][d]))
                .collect();
            let at = |a: Option<&Application>| a.map(|a| a as *const _);
            for name in ["a", "b", "c"] {
                for namespace in namespaces {
                    for control_plane in ["argocd", "team"] {
                        let scan = list.iter().map(|a| &**a).find(|a| a.tracks(name, namespace, control_plane));
                        prop_assert_eq!(at(list.named(name, namespace, control_plane)), at(scan));
                    }
                }
            }
            for ns in ["shop", "web", "other"] {
                let scan = list.iter().map(|a| &**a).find(|a| a.destination_namespace.as_deref() == Some(ns));
                prop_assert_eq!(at(list.deploying_into(ns)), at(scan));
            }
        }
    }
}
