//! An Argo CD AppProject, the parts driftguard reads, and whether Argo CD
//! reconciles an Application of it. Its own module so that
//! [`super::impersonation`], [`super::argocd`] and [`super::app_namespaces`]
//! (the namespace lists' rules) need not import one another.

use serde::Deserialize;
use serde_json::Value;

use super::app_namespaces::NamespaceList;

/// The parts of an AppProject (`argoproj.io/v1alpha1`) driftguard reads.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct AppProject {
    /// Its name and namespace.
    pub(crate) metadata: ProjectMeta,
    /// What impersonation and destinations read of its spec.
    pub(crate) spec: ProjectSpec,
}

/// An AppProject's `metadata`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ProjectMeta {
    /// `metadata.name`.
    pub(crate) name: String,
    /// `metadata.namespace`.
    pub(crate) namespace: String,
}

/// An AppProject's `spec`, the parts driftguard reads.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct ProjectSpec {
    /// Namespaces outside Argo CD's own whose Applications may use the project.
    pub(crate) source_namespaces: NamespaceList,
    /// The accounts its Applications are synced as, by destination.
    pub(crate) destination_service_accounts: Vec<DestinationServiceAccount>,
    /// Where its Applications may deploy: what they list elsewhere Argo CD
    /// would never sync ([`super::argocd::ThisCluster::lets_deploy`]).
    pub(crate) destinations: Vec<ProjectDestination>,
    /// The cluster-scoped kinds its Applications may deploy.
    pub(crate) cluster_resource_whitelist: Vec<GroupKind>,
}

/// A `spec.destinations` entry; each field a glob.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ProjectDestination {
    /// The cluster's server URL.
    pub(crate) server: String,
    /// The cluster's name.
    pub(crate) name: String,
    /// The namespace.
    pub(crate) namespace: String,
}

/// A `spec.clusterResourceWhitelist` entry; each field a glob.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct GroupKind {
    /// The API group.
    pub(crate) group: String,
    /// The kind.
    pub(crate) kind: String,
}

/// A `spec.destinationServiceAccounts` entry.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct DestinationServiceAccount {
    /// The destination's server URL, a glob.
    pub(crate) server: String,
    /// The destination's namespace, a glob.
    pub(crate) namespace: String,
    /// The account, `name` or `namespace:name`.
    pub(crate) default_service_account: String,
}

impl AppProject {
    /// An AppProject read from its JSON.
    pub fn from_value(value: &Value) -> Result<Self, serde_json::Error> {
        Self::deserialize(value)
    }
}

/// `IsAppNamespacePermitted`: whether `project` admits an Application in
/// `namespace`; Argo CD's own namespace always.
pub(crate) fn permits(project: &AppProject, namespace: &str, argocd_namespace: &str) -> bool {
    namespace.is_empty()
        || namespace == argocd_namespace
        || project.spec.source_namespaces.matches(namespace)
}

/// Whether Argo CD reconciles an Application in `namespace` whose AppProject
/// (in Argo CD's namespace) is `project`, `None` when there is none. In Argo
/// CD's own namespace it does whatever the project: only its admins write
/// there, and a project the watch has not delivered yet must not switch the
/// installation's own Applications off.
pub(crate) fn reconciles(
    namespace: &str,
    argocd_namespace: &str,
    enabled: &NamespaceList,
    project: Option<&AppProject>,
) -> bool {
    namespace.is_empty()
        || namespace == argocd_namespace
        || (enabled.matches(namespace)
            && project.is_some_and(|p| permits(p, namespace, argocd_namespace)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::app_namespaces::enabled_namespaces;

    #[test]
    fn an_application_counts_in_argocd_or_where_both_lists_admit_it() {
        let project: AppProject = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "team", "namespace": "argocd"},
            "spec": {"sourceNamespaces": ["team-*"]}
        }))
        .unwrap();
        let enabled = enabled_namespaces(Some("team-a,other"));
        let counts = |ns: &str, p: Option<&AppProject>| reconciles(ns, "argocd", &enabled, p);
        assert!(counts("argocd", None) && counts("argocd", Some(&project)));
        assert!(counts("team-a", Some(&project)));
        assert!(!counts("team-a", None), "no project");
        assert!(!counts("team-b", Some(&project)), "not enabled");
        assert!(!counts("other", Some(&project)), "not in sourceNamespaces");
    }
}
