//! Argo CD's side of the cache: argocd-cm, argocd-cmd-params-cm and the
//! AppProjects, which decide whether each Application counts and the
//! account it syncs as.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::DynamicObject;
use serde_json::Value;

use super::content::{cm_data, hash_value, to_value};
use super::{SourceCache, report};
use crate::cluster::source_cost;
use crate::drift::ownership::ARGOCD_CM_INSTALLATION_ID;
use crate::policy::Application;
use crate::policy::argocd::instance_label;
use crate::policy::impersonation::{self, AppProject, SyncAccount};
use crate::policy::{app_namespaces, app_project};
use crate::sources;

pub(super) struct AppEntry {
    pub(super) hash: u64,
    pub(super) namespace: String,
    /// `spec.project`, `default` when empty.
    pub(super) project: String,
    /// Whether Argo CD reconciles it ([`app_namespaces::reconciles`]): one it
    /// does not lends no rule, account or listed object. Depends on the
    /// projects and argocd-cmd-params-cm too.
    pub(super) counts: bool,
    pub(super) app: Option<Arc<Application>>,
    /// The account Argo CD syncs it as; depends on the projects and argocd-cm too.
    pub(super) account: Option<Arc<SyncAccount>>,
}

/// The Application an entry lends, while it counts.
pub(super) fn counted(entry: &AppEntry) -> Option<&Arc<Application>> {
    entry.app.as_ref().filter(|_| entry.counts)
}

/// An Application's `spec.project`, `default` when empty.
pub(super) fn project_of(application: &Value) -> &str {
    application
        .pointer("/spec/project")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .unwrap_or("default")
}

impl SourceCache {
    /// The argocd-cm ConfigMap (`None`: absent). Returns whether the sources changed.
    pub fn apply_cm(&mut self, cm: Option<&ConfigMap>) -> bool {
        let data = cm_data(cm);
        let mut h = std::hash::DefaultHasher::new();
        hash_value(&Value::Object(data.clone()), &mut h);
        let hash = h.finish();
        if self.cm_hash == Some(hash) {
            return false;
        }
        self.cm_hash = Some(hash);
        let (overrides, errors) = sources::argocd_overrides(&data);
        report(errors);
        self.overrides = Arc::new(overrides);
        self.installation_id = data
            .get(ARGOCD_CM_INSTALLATION_ID)
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .map(str::to_owned);
        self.instance_label = instance_label(&data);
        let enabled = impersonation::enabled(&data);
        if enabled != self.impersonation {
            self.impersonation = enabled;
            self.recompute_apps();
        }
        true
    }

    /// The argocd-cmd-params-cm ConfigMap (`None`: absent), whose
    /// `application.namespaces` says which namespaces' Applications Argo CD
    /// reconciles besides its own. Argo CD's controller reads it at start; a
    /// change counts here at once. Returns whether the sources changed.
    pub fn apply_params_cm(&mut self, cm: Option<&ConfigMap>) -> bool {
        let value = cm
            .and_then(|cm| cm.data.as_ref())
            .and_then(|d| d.get(app_namespaces::NAMESPACES_KEY));
        let mut h = std::hash::DefaultHasher::new();
        value.hash(&mut h);
        let hash = h.finish();
        if self.params_hash.replace(hash) == Some(hash) {
            return false;
        }
        self.app_namespaces = app_namespaces::enabled_namespaces(value.map(String::as_str));
        self.recompute_apps();
        true
    }

    pub(super) fn compile_app(&self, object: &DynamicObject, hash: u64, refused: bool) -> AppEntry {
        let app = to_value(object).and_then(|mut v| {
            if refused {
                source_cost::without_rules(false, &mut v);
            }
            let (mut apps, errors) =
                sources::applications_for(std::slice::from_ref(&v), &self.this_cluster);
            report(errors);
            apps.pop().map(Arc::new)
        });
        // Read from the object, so that one that does not compile still
        // counts, or not, for what it lists.
        let project = project_of(&object.data);
        let mut entry = AppEntry {
            hash,
            namespace: object.metadata.namespace.clone().unwrap_or_default(),
            project: project.to_owned(),
            counts: false,
            app,
            account: None,
        };
        self.count_in(&mut entry);
        entry
    }

    /// Holds `entry` as `uid`'s, and the views of what counts; the one it
    /// replaces.
    pub(super) fn hold_app(&mut self, uid: &str, entry: AppEntry) -> Option<AppEntry> {
        let before = self.applications.insert(uid.to_owned(), entry);
        if let Some(app) = before.as_ref().and_then(counted) {
            self.app_views.remove(uid, app);
        }
        if let Some(app) = self.applications.get(uid).and_then(counted) {
            self.app_views.add(&uid.into(), app);
        }
        before
    }

    /// Forgets `uid`'s Application; whether one was held.
    pub(super) fn drop_app(&mut self, uid: &str) -> bool {
        let Some(before) = self.applications.remove(uid) else {
            return false;
        };
        if let Some(app) = counted(&before) {
            self.app_views.remove(uid, app);
        }
        true
    }

    /// Whether Argo CD reconciles the Application, and its sync account if so.
    pub(super) fn count_in(&self, entry: &mut AppEntry) {
        let project = self.project(&entry.project);
        entry.counts = app_project::reconciles(
            &entry.namespace,
            &self.argocd_namespace,
            &self.app_namespaces,
            project,
        );
        entry.account = entry
            .app
            .as_deref()
            .filter(|_| entry.counts)
            .and_then(|a| self.account(a));
    }

    pub(super) fn account(&self, app: &Application) -> Option<Arc<SyncAccount>> {
        impersonation::sync_accounts(
            std::slice::from_ref(app),
            &self.project_list,
            self.impersonation,
            &self.argocd_namespace,
        )
        .pop()
        .map(Arc::new)
    }

    /// After the AppProjects named `names` changed.
    pub(super) fn projects_changed(&mut self, names: &[String]) {
        self.project_list = self
            .projects
            .values()
            .filter_map(|e| e.value.as_deref().cloned())
            .collect();
        self.recompute_apps();
        // What each Application lists counts only where its project deploys.
        self.reindex_projects(names);
    }

    /// Whether each Application counts, and its sync account: after a
    /// project, argocd-cm or argocd-cmd-params-cm change.
    pub(super) fn recompute_apps(&mut self) {
        let mut applications = std::mem::take(&mut self.applications);
        let mut moved = Vec::new();
        for (uid, entry) in applications.iter_mut() {
            let was = entry.counts;
            self.count_in(entry);
            if entry.counts != was {
                moved.push(uid.clone());
                match (counted(entry), &entry.app) {
                    (Some(app), _) => self.app_views.add(&uid.as_str().into(), app),
                    (None, Some(app)) => self.app_views.remove(uid, app),
                    (None, None) => {}
                }
            }
        }
        self.applications = applications;
        // Only those that moved in or out are indexed again.
        for uid in moved {
            self.reindex_listing(&uid);
        }
    }

    /// The AppProject `name` in Argo CD's namespace, as Argo CD looks it up.
    pub(super) fn project(&self, name: &str) -> Option<&AppProject> {
        self.project_list
            .iter()
            .find(|p| p.metadata.name == name && p.metadata.namespace == self.argocd_namespace)
    }
}
