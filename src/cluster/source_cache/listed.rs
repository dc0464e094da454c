//! The objects Applications and Kustomizations list in their status, and
//! the index of who lists each, filtered by what each project deploys.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use kube::api::DynamicObject;
use serde_json::Value;

use super::{Kind, Planned, SourceCache};
use crate::drift::{Listed, Manager};
use crate::policy::planned;

impl SourceCache {
    /// The objects an Application or a Kustomization lists in its status
    /// ([`crate::policy::planned`]), and who lists them; `None` when it
    /// lists nothing here.
    pub(super) fn listing(
        &self,
        kind: Kind,
        object: &DynamicObject,
    ) -> Option<(Vec<String>, Manager)> {
        let status = object.data.get("status").unwrap_or(&Value::Null);
        let namespace = object.metadata.namespace.clone().unwrap_or_default();
        let name = object.metadata.name.clone().unwrap_or_default();
        match kind {
            // What an Application deploying to another cluster lists is there,
            // not here: the same names here are no one's.
            Kind::Application if self.this_cluster.deploys_elsewhere(&object.data) => None,
            Kind::Application => Some((
                planned::application_keys(status),
                Manager::ArgoCd {
                    application: name,
                    application_namespace: Some(namespace),
                },
            )),
            Kind::Kustomization if self.flux_elsewhere(&object.data) => None,
            Kind::Kustomization => {
                let mut keys = planned::kustomization_keys(status);
                // A tenant's Kustomization (one applied as an account of its
                // namespace) speaks only for that namespace: namespace `edit`
                // may write its status (Flux's `flux-edit` role), and a forged
                // inventory would block or lend an account to another team.
                if self.impersonates(&object.data) {
                    let prefix = format!(":{namespace}/");
                    keys.retain(|k| k.contains(&prefix));
                }
                Some((keys, Manager::FluxKustomization { namespace, name }))
            }
            Kind::AppProject | Kind::HelmRelease => None,
        }
    }

    /// Records what `uid` lists and indexes the difference. Returns whether
    /// it changed.
    pub(super) fn set_planned(&mut self, uid: &str, keys: Vec<String>, by: Manager) -> bool {
        let mut h = std::hash::DefaultHasher::new();
        keys.hash(&mut h);
        let hash = h.finish();
        if self.planned.get(uid).is_some_and(|p| p.hash == hash) {
            return false;
        }
        let uid: Arc<str> = uid.into();
        // A key already indexed is shared, not copied.
        let keys = keys
            .into_iter()
            .map(|k| match self.by_key.get_key_value(k.as_str()) {
                Some((shared, _)) => shared.clone(),
                None => k.into(),
            })
            .collect();
        let entry = Planned {
            hash,
            keys,
            by: Arc::new(by),
            uid: uid.clone(),
        };
        let before = self.planned.insert(uid.to_string(), entry);
        self.reindex(&uid, before.map(|p| p.keys).unwrap_or_default());
        true
    }

    /// Whether Flux applies `kustomization` as an account of its namespace
    /// (`spec.serviceAccountName`, or `--default-service-account`) rather
    /// than as kustomize-controller.
    pub(super) fn impersonates(&self, kustomization: &Value) -> bool {
        let named = kustomization
            .pointer("/spec/serviceAccountName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        named || self.flux_default_account.is_some()
    }

    /// Moves `uid` in the index from the keys it listed (`before`) to those
    /// it lists now where it counts and its project deploys: only those
    /// keys are visited, so a change costs its own listing, never the
    /// index's size.
    pub(super) fn reindex(&mut self, uid: &str, before: Vec<Arc<str>>) {
        let mut touched: HashSet<Arc<str>> = HashSet::new();
        for key in before {
            if let Some(uids) = self.by_key.get_mut(&key) {
                uids.retain(|u| &**u != uid);
            }
            touched.insert(key);
        }
        let deploys = self.deploys(uid);
        if let Some(p) = self.planned.get(uid) {
            for (key, _) in p.keys.iter().zip(&deploys).filter(|(_, d)| **d) {
                let Some(uids) = self.by_key.get_mut(key) else {
                    // Most keys have one lister: no room for more.
                    self.by_key.insert(key.clone(), vec![p.uid.clone()]);
                    continue;
                };
                // Listers in uid order, as a scan of `planned` meets them.
                if let Err(at) = uids.binary_search_by(|u| (**u).cmp(uid)) {
                    uids.insert(at, p.uid.clone());
                }
            }
            touched.extend(p.keys.iter().cloned());
        }
        for key in touched {
            self.publish_key(key);
        }
    }

    /// For each key `uid` lists, whether it is indexed: while it counts,
    /// where its project deploys.
    fn deploys(&self, uid: &str) -> Vec<bool> {
        let counts = self.applications.get(uid).is_none_or(|e| e.counts);
        let Some(p) = self.planned.get(uid).filter(|_| counts) else {
            return Vec::new();
        };
        let project = self
            .applications
            .get(uid)
            .and_then(|e| self.project(&e.project));
        // A project's answer depends on the namespace (or, cluster-scoped,
        // the kind) only: asked once per listing.
        let mut memo: HashMap<&str, bool> = HashMap::new();
        let mut deploys = Vec::with_capacity(p.keys.len());
        for key in &p.keys {
            deploys.push(project.is_none_or(|project| {
                let (gk, rest) = key.split_once(':').unwrap_or((key, ""));
                let scope = match rest.split_once('/') {
                    Some(("", _)) => gk,
                    Some((namespace, _)) => namespace,
                    None => key,
                };
                *memo
                    .entry(scope)
                    .or_insert_with(|| self.this_cluster.lets_deploy(project, key))
            }));
        }
        deploys
    }

    /// Publishes who lists `key` now: the first in uid order in
    /// `planned_index`, each other once in `more_listers`, as
    /// [`add_lister`] would over a scan; writes only what changed.
    fn publish_key(&mut self, key: Arc<str>) {
        #[cfg(test)]
        {
            self.keys_published += 1;
        }
        let uids = self.by_key.get(&key).map_or(&[][..], Vec::as_slice);
        let mut listers = uids
            .iter()
            .filter_map(|u| self.planned.get(&**u))
            .map(|p| &p.by);
        let first = listers.next().cloned();
        let mut more: Vec<Manager> = Vec::new();
        for by in listers {
            if Some(by) != first.as_ref() && !more.contains(by) {
                more.push((**by).clone());
            }
        }
        if uids.is_empty() {
            self.by_key.remove(&key);
        }
        if self.more_listers.get(&key) != Some(&more).filter(|m| !m.is_empty()) {
            let map = Arc::make_mut(&mut self.more_listers);
            if more.is_empty() {
                map.remove(&key);
            } else {
                map.insert(key.clone(), more);
            }
        }
        if self.planned_index.get(&key) == first.as_ref() {
            return;
        }
        let index = Arc::make_mut(&mut self.planned_index);
        let was = match first {
            Some(by) => index.insert(key.clone(), by).is_some(),
            None => index.remove(&key).is_some(),
        };
        let now = self.planned_index.contains_key(&key);
        match planned::project_of(&key) {
            Some(project) if !was && now => {
                let scope = self.scope(&key, project);
                Arc::make_mut(&mut self.scopes).push(scope);
            }
            Some(_) if was && !now => Arc::make_mut(&mut self.scopes).retain(|s| *s.key != *key),
            _ => {}
        }
    }

    /// What the project listing `key` covers.
    fn scope(&self, key: &str, project: &str) -> crate::drift::Scope {
        crate::drift::Scope {
            key: key.to_owned(),
            project: self.project(project).map(|p| Arc::new(p.clone())),
            here: self.this_cluster.clone(),
        }
    }

    /// After the AppProjects named `names` changed: what their
    /// Applications list counts only where they deploy now, and their
    /// project listings resolve to them.
    pub(super) fn reindex_projects(&mut self, names: &[String]) {
        let of_project = |e: &super::AppEntry| names.contains(&e.project);
        let uids: Vec<String> = self
            .applications
            .iter()
            .filter(|(uid, e)| of_project(e) && self.planned.contains_key(*uid))
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in uids {
            self.reindex_listing(&uid);
        }
        let scopes: Vec<crate::drift::Scope> = self
            .scopes
            .iter()
            .map(|s| match planned::project_of(&s.key) {
                Some(p) if names.iter().any(|n| n == p) => self.scope(&s.key, p),
                _ => s.clone(),
            })
            .collect();
        self.scopes = Arc::new(scopes);
    }

    /// Indexes `uid`'s listing again, after whether or where it counts moved.
    pub(super) fn reindex_listing(&mut self, uid: &str) {
        if let Some(keys) = self.planned.get(uid).map(|p| p.keys.clone()) {
            self.reindex(uid, keys);
        }
    }

    pub(super) fn forget_planned(&mut self, uid: &str) -> bool {
        let Some(before) = self.planned.remove(uid) else {
            return false;
        };
        self.reindex(uid, before.keys);
        true
    }
}

/// Records `by` as a lister of `key`: in `index` if it is the first, in
/// `more` if it is another.
pub(crate) fn add_lister(
    index: &mut crate::drift::Index,
    more: &mut Listed<Vec<Manager>>,
    key: &Arc<str>,
    by: &Arc<Manager>,
) {
    match index.get(key) {
        None => {
            index.insert(key.clone(), by.clone());
        }
        Some(first) if first == by => {}
        Some(_) => {
            let others = more.entry(key.clone()).or_default();
            if !others.contains(by) {
                others.push((**by).clone());
            }
        }
    }
}
