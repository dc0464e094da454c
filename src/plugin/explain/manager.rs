//! Who manages the object: its Argo CD Application or Flux object, read as
//! the webhook's watches read it, with the account the tool writes as.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::Value;

use super::report::ManagedBy;
use crate::drift::ownership::{self, Manager};
use crate::drift::{ArgoCdSources, Sources};
use crate::plugin::PluginError;
use crate::plugin::api::{Api, answer};
use crate::policy::argocd::{Application, DiffMode};
use crate::policy::flux::FluxKind;
use crate::policy::impersonation::{self, AppProject};

/// What the managing tool knows of the object, read as the webhook's
/// watches read it: the report's `managedBy`, and the same [`Sources`] the
/// webhook decides with. What cannot be read is a note.
pub(super) async fn read_manager(
    Tools {
        argocd,
        flux,
        argocd_namespace,
        flux_default_account,
    }: Tools<'_>,
    manager: Option<&Manager>,
    notes: &mut Vec<String>,
) -> Result<(Option<ManagedBy>, Sources), PluginError> {
    let mut sources = Sources::default();
    let entry = match manager {
        Some(Manager::ArgoCd {
            application,
            application_namespace,
        }) => {
            let app_ns = application_namespace.as_deref().unwrap_or(argocd_namespace);
            let at = (app_ns, application.as_str());
            let mut installation = ArgoCdSources {
                namespace: argocd_namespace.to_owned(),
                ..ArgoCdSources::default()
            };
            let entry =
                read_application(argocd, argocd_namespace, at, &mut installation, notes).await?;
            sources.argocd.push(installation);
            Some(entry)
        }
        Some(m @ (Manager::FluxKustomization { .. } | Manager::FluxHelmRelease { .. })) => {
            read_flux((flux, flux_default_account), m, &mut sources, notes).await?
        }
        None => None,
    };
    Ok((entry, sources))
}

/// Where a tool's objects are read: this cluster, or a hub
/// (`--argocd-kubeconfig`, `--flux-kubeconfig`).
#[derive(Clone, Copy)]
pub(super) struct Tool<'a> {
    pub(super) api: &'a Api,
    pub(super) hub: bool,
}

/// Where Argo CD's and Flux's objects are read.
#[derive(Clone, Copy)]
pub(super) struct Tools<'a> {
    pub(super) argocd: Tool<'a>,
    pub(super) flux: Tool<'a>,
    /// Argo CD's namespace there (argocd-cm, the AppProjects, and the
    /// Applications when a tracking id names none).
    pub(super) argocd_namespace: &'a str,
    /// Flux's `--default-service-account`, for a source that names none.
    pub(super) flux_default_account: Option<&'a str>,
}

/// The Application, argocd-cm's rules and the account Argo CD syncs as.
async fn read_application(
    Tool { api, hub }: Tool<'_>,
    argocd_namespace: &str,
    (app_ns, application): (&str, &str),
    sources: &mut ArgoCdSources,
    notes: &mut Vec<String>,
) -> Result<ManagedBy, PluginError> {
    let ar = crate::breakglass::application::application_resource();
    let mut entry = ManagedBy {
        tool: "Argo CD",
        kind: "Application",
        namespace: app_ns.to_owned(),
        name: application.to_owned(),
        ..ManagedBy::default()
    };
    let mut found = None;
    match api.get_object(&ar, Some(app_ns), application).await? {
        Ok(app) => match crate::policy::argocd::from_value(&app) {
            Ok(app) => {
                entry.repo_url = Some(app.repo_url.clone());
                entry.path = Some(app.path.clone());
                entry.application_set = app.application_set.clone();
                entry.diff = Some(match app.diff {
                    DiffMode::Legacy => "three-way",
                    DiffMode::ServerSide => "server-side",
                });
                found = Some(app);
            }
            Err(e) => notes.push(format!("Application {app_ns}/{application}: {e}")),
        },
        Err(r) => {
            // No Applications here: in a fleet, Argo CD and its Applications are in a hub.
            let served = hub
                || !matches!(
                    api.resolve("applications.argoproj.io").await,
                    Err(PluginError::Usage(_))
                );
            let hint = if !served {
                " (if Argo CD runs in a hub that deploys here, give --argocd-kubeconfig or --argocd-context to read it there)"
            } else {
                ""
            };
            notes.push(format!(
                "cannot read Application {app_ns}/{application}: {}{hint}",
                r.message
            ));
        }
    }
    let mut impersonation = false;
    let got = api
        .namespaced::<ConfigMap>(argocd_namespace)
        .get("argocd-cm")
        .await;
    match answer(got, "get configmap argocd-cm")? {
        Ok(cm) => {
            if let Some(data) = cm.data {
                let data = data
                    .into_iter()
                    .map(|(k, v)| (k, Value::String(v)))
                    .collect();
                let (set, errors) = crate::sources::argocd_overrides(&data);
                notes.extend(errors.iter().map(|e| format!("argocd-cm: {e}")));
                sources.overrides = Arc::new(set);
                sources.installation_id = data
                    .get(ownership::ARGOCD_CM_INSTALLATION_ID)
                    .and_then(Value::as_str)
                    .filter(|id| !id.is_empty())
                    .map(str::to_owned);
                impersonation = impersonation::enabled(&data);
            }
        }
        Err(r) if r.code == 404 => {}
        Err(r) => notes.push(format!("cannot read argocd-cm: {}", r.message)),
    }
    if let Some(app) = found {
        if impersonation {
            entry.service_account = Some(sync_account(api, &app, argocd_namespace, notes).await?);
        }
        sources.applications.push(Arc::new(app));
    }
    Ok(entry)
}

/// The Kustomization or HelmRelease: its source, account and ignore rules.
async fn read_flux(
    (Tool { api, hub }, default_account): (Tool<'_>, Option<&str>),
    manager: &Manager,
    sources: &mut Sources,
    notes: &mut Vec<String>,
) -> Result<Option<ManagedBy>, PluginError> {
    let (kind, namespace, name) = match manager {
        Manager::FluxKustomization { namespace, name } => {
            (FluxKind::Kustomization, namespace, name)
        }
        Manager::FluxHelmRelease { namespace, name } => (FluxKind::HelmRelease, namespace, name),
        Manager::ArgoCd { .. } => return Ok(None),
    };
    let mut entry = ManagedBy {
        tool: "Flux",
        kind: kind.as_str(),
        namespace: namespace.clone(),
        name: name.clone(),
        ..ManagedBy::default()
    };
    match api
        .get_object(
            &crate::plugin::trusted_reach::flux_resource(kind),
            Some(namespace),
            name,
        )
        .await?
    {
        Ok(value) => match crate::sources::flux_from_value(kind, &value) {
            Ok(src) => {
                let src = src.with_default_account(default_account);
                entry.source = Some(src.source.clone());
                entry.service_account = Some(src.service_account.clone());
                sources.flux.push(Arc::new(src));
            }
            Err(e) => notes.push(format!("{} {namespace}/{name}: {e}", kind.as_str())),
        },
        Err(r) => {
            // None here: in a fleet, Flux and its Kustomizations are in a hub.
            let resource = crate::plugin::trusted_reach::flux_resource(kind);
            let served = hub
                || !matches!(
                    api.resolve(&format!("{}.{}", resource.plural, resource.group))
                        .await,
                    Err(PluginError::Usage(_))
                );
            notes.push(flux_unread(kind, namespace, name, &r.message, served));
        }
    }
    Ok(Some(entry))
}

/// The note for a Kustomization or HelmRelease that could not be read;
/// when this cluster does not serve the kind (`served` false), where to
/// read it instead.
fn flux_unread(kind: FluxKind, namespace: &str, name: &str, why: &str, served: bool) -> String {
    let hint = if served {
        ""
    } else {
        " (if Flux runs in a hub that applies here, give --flux-kubeconfig or --flux-context to read it there)"
    };
    format!(
        "cannot read {} {namespace}/{name}: {why}{hint}",
        kind.as_str()
    )
}

/// The account Argo CD syncs `app` as (sync impersonation on), read from its
/// AppProject; a project that cannot be read is a note.
async fn sync_account(
    api: &Api,
    app: &Application,
    argocd_namespace: &str,
    notes: &mut Vec<String>,
) -> Result<Option<String>, PluginError> {
    let project = match api
        .get_object(
            &crate::plugin::trusted_reach::app_project_resource(),
            Some(argocd_namespace),
            &app.project,
        )
        .await?
    {
        Ok(value) => AppProject::from_value(&value),
        Err(r) => {
            notes.push(format!(
                "cannot read AppProject {argocd_namespace}/{}: {}",
                app.project, r.message
            ));
            return Ok(None);
        }
    };
    match project {
        Ok(project) => Ok(impersonation::sync_account(&project, app, argocd_namespace)),
        Err(e) => {
            notes.push(format!(
                "AppProject {argocd_namespace}/{}: {e}",
                app.project
            ));
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Under Flux's lockdown (`--flux-default-service-account`), a
    /// Kustomization naming no account is applied as the default one in its
    /// own namespace: explain shows that account, as the server trusts it.
    #[tokio::test]
    async fn a_kustomization_without_an_account_is_applied_as_the_default_one() {
        let service = tower::service_fn(|_: http::Request<kube::client::Body>| async {
            let kustomization = json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1",
                "kind": "Kustomization", "metadata": {"name": "apps", "namespace": "tenants"},
                "spec": {"sourceRef": {"kind": "GitRepository", "name": "fleet"}}});
            let reply = http::Response::builder()
                .status(200)
                .body(kube::client::Body::from(
                    kustomization.to_string().into_bytes(),
                ))
                .unwrap();
            Ok::<_, std::convert::Infallible>(reply)
        });
        let api = Api::with_client(kube::Client::new(service, "p"), "p");
        let flux = Tool {
            api: &api,
            hub: false,
        };
        let manager = Manager::FluxKustomization {
            namespace: "tenants".into(),
            name: "apps".into(),
        };
        let mut accounts = Vec::new();
        for default in [None, Some("flux-applier")] {
            let mut sources = Sources::default();
            let entry = read_flux((flux, default), &manager, &mut sources, &mut Vec::new())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                sources.flux[0].service_account,
                entry.service_account.flatten()
            );
            accounts.push(sources.flux[0].service_account.clone());
        }
        assert_eq!(
            accounts,
            [
                None,
                Some("system:serviceaccount:tenants:flux-applier".into())
            ]
        );
    }

    /// With this cluster's own Argo CD chosen beside a hub's
    /// (`--local-argocd-namespace gitops`), the Application of a tracking id
    /// naming no namespace, and argocd-cm, are read in that namespace.
    #[tokio::test]
    async fn argo_cd_is_read_in_the_chosen_installations_namespace() {
        use std::sync::Mutex;
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = log.clone();
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let seen = seen.clone();
            async move {
                let path = request.uri().path().to_owned();
                seen.lock()
                    .unwrap()
                    .push(format!("{} {path}", request.method()));
                let status = json!({"kind": "Status", "code": 404, "message": "not found"});
                let reply = http::Response::builder()
                    .status(404)
                    .body(kube::client::Body::from(status.to_string().into_bytes()))
                    .unwrap();
                Ok::<_, std::convert::Infallible>(reply)
            }
        });
        let api = Api::with_client(kube::Client::new(service, "p"), "p");
        let here = Tool {
            api: &api,
            hub: false,
        };
        let tools = Tools {
            argocd: here,
            flux: here,
            argocd_namespace: "gitops",
            flux_default_account: None,
        };
        let manager = Manager::ArgoCd {
            application: "myapp".into(),
            application_namespace: None,
        };
        let mut notes = Vec::new();
        let (managed, sources) = read_manager(tools, Some(&manager), &mut notes)
            .await
            .unwrap();
        assert_eq!(managed.map(|m| m.namespace).as_deref(), Some("gitops"));
        let namespaces: Vec<&str> = sources
            .argocd
            .iter()
            .map(ArgoCdSources::namespace)
            .collect();
        assert_eq!(namespaces, ["gitops"]);
        let log = log.lock().unwrap();
        for read in [
            "GET /apis/argoproj.io/v1alpha1/namespaces/gitops/applications/myapp",
            "GET /api/v1/namespaces/gitops/configmaps/argocd-cm",
        ] {
            assert!(log.iter().any(|r| r == read), "{read} not in {log:?}");
        }
    }

    /// A Kustomization this cluster does not serve is in a hub: the note
    /// says how to read it there, and only then.
    #[test]
    fn an_unread_kustomization_points_to_the_hub_only_where_none_is_served() {
        let here = flux_unread(
            FluxKind::Kustomization,
            "flux-system",
            "apps",
            "NotFound",
            false,
        );
        assert_eq!(
            here,
            "cannot read Kustomization flux-system/apps: NotFound (if Flux runs in a hub that applies here, give --flux-kubeconfig or --flux-context to read it there)"
        );
        let served = flux_unread(FluxKind::HelmRelease, "web", "web", "forbidden", true);
        assert_eq!(served, "cannot read HelmRelease web/web: forbidden");
    }
}
