//! The Applications a pass over pauses left behind reads: listed a page at a
//! time ([`list_applications`]), and which of them Argo CD reconciles
//! ([`Reconciled`]): only those hold a pause of ours (the plugin pauses no other), so
//! a tenant's Application in a namespace Argo CD does not take costs the
//! pass nothing (issue 50, item 4). The checks are the sources' own
//! ([`app_project::reconciles`]: `application.namespaces` of
//! argocd-cmd-params-cm, then the AppProject's `sourceNamespaces`), read
//! with the verbs the watches already have (list by name).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, ListParams, PartialObjectMeta};
use serde_json::Value;

use super::Orphan;
use crate::breakglass::application;
use crate::policy::app_namespaces::{self, NamespaceList};
use crate::policy::app_project::{self, AppProject};

/// What one listing of the Applications found ([`super::Sweeper::list_orphans`]).
#[derive(Default)]
pub(super) struct Listed {
    /// The entries no armed object holds, in namespaces Argo CD takes.
    pub(super) found: BTreeSet<Orphan>,
    /// The clusters whose Applications could not be listed.
    pub(super) unlisted: BTreeSet<bool>,
    /// Each listed cluster's Argo CD settings, as read.
    pub(super) argocd: BTreeMap<bool, Reconciled>,
    /// The clusters whose `application.namespaces` could not be read.
    pub(super) unread: Vec<(bool, kube::Error)>,
}

/// Applications' metadata per list page: what a pass holds at once, as a
/// source watch's pages (a hub's tenants may fill each Application's
/// annotations and managedFields).
pub(super) const APPLICATION_PAGE: u32 = 50;

/// Hands every Application's metadata in the cluster of `client` (those
/// `selector` matches, if given) to `each`, a page at a time; `false`
/// (logged) when they cannot all be listed. No Application type: none.
pub(super) async fn list_applications(
    client: &kube::Client,
    selector: Option<&str>,
    mut each: impl FnMut(PartialObjectMeta<DynamicObject>),
) -> bool {
    let api = Api::<DynamicObject>::all_with(client.clone(), &application::application_resource());
    let mut params = ListParams::default().limit(APPLICATION_PAGE);
    params.label_selector = selector.map(str::to_owned);
    loop {
        match api.list_metadata(&params).await {
            Ok(page) => {
                let next = page.metadata.continue_.filter(|c| !c.is_empty());
                page.items.into_iter().for_each(&mut each);
                match next {
                    Some(token) => params = params.continue_token(&token),
                    None => return true,
                }
            }
            Err(kube::Error::Api(s)) if s.code == 404 => return true,
            Err(e) => {
                tracing::warn!(error = %e, "break-glass sweeper: cannot list Applications to find pauses left behind");
                return false;
            }
        }
    }
}

/// One cluster's Argo CD settings, as read in this pass.
pub(super) struct Reconciled {
    /// Argo CD's namespace there: its Applications are always reconciled.
    namespace: String,
    /// `application.namespaces`; `None`: not read (none needed it), or
    /// unreadable, which admits Argo CD's own namespace alone.
    enabled: Option<NamespaceList>,
    /// The AppProjects read, by name; `None`: there is none.
    projects: BTreeMap<String, Option<AppProject>>,
}

impl Reconciled {
    /// Before anything is read: Argo CD's own namespace, `namespace`, only.
    pub(super) fn new(namespace: &str) -> Self {
        Reconciled {
            namespace: namespace.to_owned(),
            enabled: None,
            projects: BTreeMap::new(),
        }
    }

    /// Reads `application.namespaces` through `client`; on failure (said
    /// in the error) only Argo CD's own namespace is admitted.
    pub(super) async fn read_namespaces(
        &mut self,
        client: &kube::Client,
    ) -> Result<(), kube::Error> {
        let api = Api::<ConfigMap>::namespaced(client.clone(), &self.namespace);
        let name = format!("metadata.name={}", app_namespaces::CMD_PARAMS_CM);
        let list = api.list(&ListParams::default().fields(&name)).await?;
        let value = (list.items.first())
            .and_then(|cm| cm.data.as_ref())
            .and_then(|d| d.get(app_namespaces::NAMESPACES_KEY));
        self.enabled = Some(app_namespaces::enabled_namespaces(
            value.map(String::as_str),
        ));
        Ok(())
    }

    /// Whether Argo CD takes Applications from `namespace` at all.
    pub(super) fn admits(&self, namespace: &str) -> bool {
        namespace == self.namespace || self.enabled.as_ref().is_some_and(|e| e.matches(namespace))
    }

    /// Whether Argo CD reconciles `app` (as read), its AppProject read
    /// through `client` when its namespace is not Argo CD's own.
    pub(super) async fn reconciles(
        &mut self,
        client: &kube::Client,
        app: &Value,
    ) -> Result<bool, kube::Error> {
        let namespace = app["metadata"]["namespace"].as_str().unwrap_or_default();
        if namespace == self.namespace {
            return Ok(true);
        }
        let Some(enabled) = &self.enabled else {
            return Ok(false);
        };
        let project = (app["spec"]["project"].as_str())
            .filter(|p| !p.is_empty())
            .unwrap_or("default");
        if !self.projects.contains_key(project) {
            let read = self.read_project(client, project).await?;
            self.projects.insert(project.to_owned(), read);
        }
        let project = self.projects.get(project).and_then(Option::as_ref);
        Ok(app_project::reconciles(
            namespace,
            &self.namespace,
            enabled,
            project,
        ))
    }

    async fn read_project(
        &self,
        client: &kube::Client,
        name: &str,
    ) -> Result<Option<AppProject>, kube::Error> {
        let api = Api::<DynamicObject>::namespaced_with(
            client.clone(),
            &self.namespace,
            &project_resource(),
        );
        // The name is the tenant's text: one that is not a Kubernetes name
        // could widen the field selector (`x,metadata.name!=y`), so none
        // such is asked, and only the item of that very name is read.
        if !crate::text::is_dns_subdomain(name) {
            return Ok(None);
        }
        let params = ListParams::default().fields(&format!("metadata.name={name}"));
        let list = api.list(&params).await?;
        let item = (list.items.iter()).find(|p| p.metadata.name.as_deref() == Some(name));
        let value = item.map(serde_json::to_value).transpose();
        let value = value.map_err(kube::Error::SerdeError)?;
        // One that does not read as an AppProject admits nothing.
        Ok(value.map(|v| AppProject::from_value(&v).unwrap_or_default()))
    }
}

/// Argo CD's AppProject type.
fn project_resource() -> kube::core::ApiResource {
    kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "argoproj.io",
        "v1alpha1",
        "AppProject",
    ))
}
