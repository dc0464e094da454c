//! The objects Applications and Kustomizations list in their status, and
//! the index of who lists each, filtered by what each project deploys.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use kube::api::DynamicObject;
use serde_json::Value;

use super::{Kind, Planned, SourceCache};
use crate::drift::Manager;
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

    /// Records what `uid` lists. Returns whether it changed.
    pub(super) fn set_planned(&mut self, uid: &str, keys: Vec<String>, by: Manager) -> bool {
        let mut h = std::hash::DefaultHasher::new();
        keys.hash(&mut h);
        let hash = h.finish();
        if self.planned.get(uid).is_some_and(|p| p.hash == hash) {
            return false;
        }
        self.planned
            .insert(uid.to_owned(), Planned { hash, keys, by });
        self.rebuild_planned();
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

    pub(super) fn rebuild_planned(&mut self) {
        let mut index = HashMap::new();
        let mut more: HashMap<String, Vec<Manager>> = HashMap::new();
        let mut memo: HashMap<(&str, &str), bool> = HashMap::new();
        let counts = |uid: &str| self.applications.get(uid).is_none_or(|e| e.counts);
        for (uid, p) in self.planned.iter().filter(|(uid, _)| counts(uid)) {
            let project = self
                .applications
                .get(uid)
                .and_then(|e| self.project(&e.project));
            for key in &p.keys {
                // A project's answer depends on the namespace (or, cluster-
                // scoped, the kind) only: asked once per rebuild.
                let deploys = project.is_none_or(|project| {
                    let (gk, rest) = key.split_once(':').unwrap_or((key, ""));
                    let scope = match rest.split_once('/') {
                        Some(("", _)) => gk,
                        Some((namespace, _)) => namespace,
                        None => key,
                    };
                    *memo
                        .entry((project.metadata.name.as_str(), scope))
                        .or_insert_with(|| self.this_cluster.lets_deploy(project, key))
                });
                if deploys {
                    add_lister(&mut index, &mut more, key, &p.by);
                }
            }
        }
        self.more_listers = Arc::new(more);
        let scopes = index
            .keys()
            .filter_map(|key| {
                let project = self.project(planned::project_of(key)?);
                Some(crate::drift::Scope {
                    key: key.clone(),
                    project: project.map(|p| Arc::new(p.clone())),
                    here: self.this_cluster.clone(),
                })
            })
            .collect();
        self.scopes = Arc::new(scopes);
        self.planned_index = Arc::new(index);
    }

    pub(super) fn forget_planned(&mut self, uid: &str) -> bool {
        let removed = self.planned.remove(uid).is_some();
        if removed {
            self.rebuild_planned();
        }
        removed
    }
}

/// Records `by` as a lister of `key`: in `index` if it is the first, in
/// `more` if it is another.
pub(crate) fn add_lister(
    index: &mut HashMap<String, Manager>,
    more: &mut HashMap<String, Vec<Manager>>,
    key: &str,
    by: &Manager,
) {
    match index.get(key) {
        None => {
            index.insert(key.to_owned(), by.clone());
        }
        Some(first) if first == by => {}
        Some(_) => {
            let others = more.entry(key.to_owned()).or_default();
            if !others.contains(by) {
                others.push(by.clone());
            }
        }
    }
}
