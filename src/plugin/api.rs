//! The apiserver as the plugin's user sees it: their kubeconfig, kube's typed
//! client (k8s-openapi types, `DynamicObject` for KIND arguments and CRDs),
//! aggregated discovery of KIND arguments, `SelfSubjectReview`, and raw
//! requests only for the writes whose `Warning:` headers and refusal are
//! shown as the apiserver sent them ([`Api::send`]).

use std::fmt::Display;

use http::{Method, Request};
use http_body_util::BodyExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::client::{APIGroupDiscoveryList, APIResourceDiscovery, Body};
use kube::core::response::StatusDetails;
use kube::core::{ApiResource, DynamicObject, Status};
use serde_json::Value;

use super::PluginError;
use crate::breakglass::ending::warnings;

/// Connection flags shared by every command, as kubectl spells them.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ConnectArgs {
    /// Kubeconfig to use; default: $KUBECONFIG, ~/.kube/config, or in-cluster.
    #[arg(long, global = true)]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// Namespace of the object; default: the context's namespace.
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
}

/// Where Argo CD's Applications are when they are not in this cluster: a
/// hub whose Argo CD deploys here. The user's own credentials there.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ArgoCdArgs {
    /// Kubeconfig for the cluster holding the Argo CD Applications (a hub
    /// that deploys here); default: this cluster.
    #[arg(long, env = "DRIFTGUARD_ARGOCD_KUBECONFIG")]
    pub argocd_kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context of the cluster holding the Argo CD Applications.
    #[arg(long, env = "DRIFTGUARD_ARGOCD_CONTEXT")]
    pub argocd_context: Option<String>,
    /// With a hub: this cluster runs its own Argo CD too, in this namespace.
    /// The object's Application is looked for in the one whose argocd-cm
    /// `installationID` the object carries.
    #[arg(long, env = "DRIFTGUARD_LOCAL_ARGOCD_NAMESPACE")]
    pub local_argocd_namespace: Option<String>,
}

impl ArgoCdArgs {
    /// A client for the hub, when one was given.
    pub async fn connect(&self, api: &Api) -> Result<Option<Api>, PluginError> {
        let (kubeconfig, context) = (&self.argocd_kubeconfig, &self.argocd_context);
        connect_hub(api, kubeconfig, context, "Argo CD's cluster", &self.shown()).await
    }

    /// The flags as given, for messages (`--argocd-kubeconfig PATH --argocd-context NAME`).
    pub fn shown(&self) -> String {
        shown("argocd", &self.argocd_kubeconfig, &self.argocd_context)
    }

    /// kubectl's flags that reach the same cluster.
    pub fn kubectl_flags(&self) -> String {
        let mut flags = Vec::new();
        if let Some(path) = &self.argocd_kubeconfig {
            flags.push(format!("--kubeconfig {}", path.display()));
        }
        if let Some(context) = &self.argocd_context {
            flags.push(format!("--context {context}"));
        }
        flags.join(" ")
    }
}

/// Where Flux's Kustomizations and HelmReleases are when they are not in
/// this cluster: a hub whose Flux applies here through `spec.kubeConfig`.
/// The user's own credentials there.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct FluxArgs {
    /// Kubeconfig for the cluster holding the Flux Kustomizations and
    /// HelmReleases (a hub that applies here); default: this cluster.
    #[arg(long, env = "DRIFTGUARD_FLUX_KUBECONFIG")]
    pub flux_kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context of the cluster holding the Flux Kustomizations
    /// and HelmReleases.
    #[arg(long, env = "DRIFTGUARD_FLUX_CONTEXT")]
    pub flux_context: Option<String>,
    /// The service account Flux applies a Kustomization or HelmRelease
    /// without `spec.serviceAccountName` as (kustomize- and helm-controller's
    /// `--default-service-account`; driftguard serve's
    /// `--flux-default-service-account`, chart `watch.fluxDefaultServiceAccount`).
    #[arg(long, env = "DRIFTGUARD_FLUX_DEFAULT_SERVICE_ACCOUNT")]
    pub flux_default_service_account: Option<String>,
}

impl FluxArgs {
    /// A client for the hub, when one was given.
    pub async fn connect(&self, api: &Api) -> Result<Option<Api>, PluginError> {
        let (kubeconfig, context) = (&self.flux_kubeconfig, &self.flux_context);
        connect_hub(api, kubeconfig, context, "Flux's cluster", &self.shown()).await
    }

    /// The flags as given, for messages (`--flux-kubeconfig PATH --flux-context NAME`).
    pub fn shown(&self) -> String {
        shown("flux", &self.flux_kubeconfig, &self.flux_context)
    }
}

/// A client for a hub given by `kubeconfig` and `context`, with `api`'s
/// namespace; `None` when neither was given. `what` and `flags` name it in
/// an error.
async fn connect_hub(
    api: &Api,
    kubeconfig: &Option<std::path::PathBuf>,
    context: &Option<String>,
    what: &str,
    flags: &str,
) -> Result<Option<Api>, PluginError> {
    if kubeconfig.is_none() && context.is_none() {
        return Ok(None);
    }
    let args = ConnectArgs {
        kubeconfig: kubeconfig.clone(),
        context: context.clone(),
        namespace: Some(api.namespace.clone()),
    };
    Api::connect(&args)
        .await
        .map(Some)
        .map_err(|e| PluginError::Access(format!("{what} ({flags}): {e}")))
}

/// `--TOOL-kubeconfig PATH --TOOL-context NAME`, as given.
fn shown(tool: &str, kubeconfig: &Option<std::path::PathBuf>, context: &Option<String>) -> String {
    let mut flags = Vec::new();
    if let Some(path) = kubeconfig {
        flags.push(format!("--{tool}-kubeconfig {}", path.display()));
    }
    if let Some(context) = context {
        flags.push(format!("--{tool}-context {context}"));
    }
    flags.join(" ")
}

/// A client with the user's own credentials, and the namespace to use.
pub struct Api {
    client: kube::Client,
    pub namespace: String,
    /// Aggregated discovery, walked once per command and shared by
    /// [`Api::resolve`] and [`Api::listable`].
    discovery: tokio::sync::OnceCell<Vec<APIGroupDiscoveryList>>,
}

/// An apiserver reply that was not 2xx.
#[derive(Debug)]
pub struct Refusal {
    pub code: u16,
    pub message: String,
    pub warnings: Vec<String>,
    /// The Status's `details`: a webhook's denial carries the drifted paths
    /// there ([`crate::response::drifted`]).
    pub details: Option<StatusDetails>,
}

impl Refusal {
    /// A denial by an admission webhook (not RBAC, not validation).
    pub fn by_webhook(&self) -> bool {
        self.message.contains("admission webhook")
    }
}

impl From<Status> for Refusal {
    fn from(status: Status) -> Self {
        Refusal {
            code: status.code,
            message: status.message,
            warnings: Vec::new(),
            details: status.details,
        }
    }
}

/// A 2xx reply to a raw write: its `Warning:` headers.
pub struct Reply {
    pub warnings: Vec<String>,
}

/// Where an object kind lives, from discovery.
#[derive(Clone, Debug)]
pub struct Resource {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
}

impl Resource {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The same type for kube's typed client.
    pub fn api_resource(&self) -> ApiResource {
        ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version: self.api_version(),
            kind: self.kind.clone(),
            plural: self.plural.clone(),
        }
    }

    /// `plural.group` (`plural` in the core group), as kubectl names a type.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// Who the apiserver says the caller is.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Identity {
    pub username: String,
    pub groups: Vec<String>,
}

/// A typed request's result as the commands handle it: the apiserver's
/// refusal (`Err(Refusal)`) is an answer, anything else an access error.
pub fn answer<T>(
    result: Result<T, kube::Error>,
    what: impl Display,
) -> Result<Result<T, Refusal>, PluginError> {
    match result {
        Ok(t) => Ok(Ok(t)),
        Err(kube::Error::Api(status)) => Ok(Err(Refusal::from(*status))),
        Err(e) => Err(PluginError::Access(format!("{what}: {e}"))),
    }
}

impl Api {
    pub async fn connect(args: &ConnectArgs) -> Result<Self, PluginError> {
        let config = crate::cluster::config(args.kubeconfig.as_deref(), args.context.clone())
            .await
            .map_err(|e| match e {
                crate::cluster::ClientError::Infer(e) => {
                    PluginError::Access(format!("no usable kubeconfig: {e}"))
                }
                e => PluginError::Access(format!("kubeconfig {e}")),
            })?;
        let namespace = args
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        if !crate::text::is_dns_label(&namespace) {
            return Err(PluginError::Usage(format!(
                "namespace {:?} is not a valid namespace name",
                crate::text::quote(&namespace)
            )));
        }
        let client = kube::Client::try_from(config)
            .map_err(|e| PluginError::Access(format!("cannot build a client: {e}")))?;
        Ok(Api {
            client,
            namespace,
            discovery: Default::default(),
        })
    }

    /// The client underneath, for kube's typed requests.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// A namespaced built-in kind in `namespace`.
    pub fn namespaced<K>(&self, namespace: &str) -> kube::Api<K>
    where
        K: kube::Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
        kube::Api::namespaced(self.client.clone(), namespace)
    }

    /// A built-in kind in every namespace, or a cluster-scoped one.
    pub fn all<K>(&self) -> kube::Api<K>
    where
        K: kube::Resource<DynamicType = ()>,
    {
        kube::Api::all(self.client.clone())
    }

    /// Any kind, in `namespace` (`None`: every namespace, or cluster-scoped).
    pub fn dynamic(&self, ar: &ApiResource, namespace: Option<&str>) -> kube::Api<DynamicObject> {
        match namespace {
            Some(ns) => kube::Api::namespaced_with(self.client.clone(), ns, ar),
            None => kube::Api::all_with(self.client.clone(), ar),
        }
    }

    /// One object of a kind with no Rust type (a CRD, or a KIND argument), as
    /// JSON for the decision code that reads it.
    pub async fn get_object(
        &self,
        ar: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Result<Value, Refusal>, PluginError> {
        let got = self.dynamic(ar, namespace).get(name).await;
        Ok(answer(got, format_args!("get {} {name}", ar.plural))?.map(to_value))
    }

    /// The object `name` of `resource` in the command's namespace (when the
    /// type is namespaced).
    pub async fn get_target(
        &self,
        resource: &Resource,
        name: &str,
    ) -> Result<Result<Value, Refusal>, PluginError> {
        let ns = resource.namespaced.then_some(self.namespace.as_str());
        self.get_object(&resource.api_resource(), ns, name).await
    }

    /// Every object of a kind with no Rust type, as JSON; a refusal is the answer.
    pub async fn list_objects(
        &self,
        ar: &ApiResource,
        namespace: Option<&str>,
    ) -> Result<Result<Vec<Value>, Refusal>, PluginError> {
        let listed = self
            .dynamic(ar, namespace)
            .list(&ListParams::default())
            .await;
        Ok(answer(listed, format_args!("list {}", ar.plural))?
            .map(|list| list.items.into_iter().map(to_value).collect()))
    }

    /// A write whose reply must be read as the apiserver sent it: its
    /// `Warning:` headers (kube's typed calls drop them) and, when refused,
    /// the apiserver's own Status (a webhook's message and `details`). Only
    /// dry runs and break-glass writes need that: every other call is typed.
    pub async fn send(
        &self,
        request: Request<Vec<u8>>,
    ) -> Result<Result<Reply, Refusal>, PluginError> {
        let (method, path) = (request.method().clone(), request.uri().to_string());
        let (status, warnings, bytes) = self.exchange(request.map(Body::from)).await?;
        if status.is_success() {
            return Ok(Ok(Reply { warnings }));
        }
        Ok(Err(refusal(&method, &path, status, &bytes, warnings)))
    }

    /// A GET of a text body through the apiserver's service proxy (a
    /// Service's `/metrics`): kube has no typed call for the proxy
    /// subresource, and the body is not a Kubernetes object.
    pub async fn get_text(&self, path: &str) -> Result<Result<String, Refusal>, PluginError> {
        let request = Request::builder()
            .method(Method::GET)
            .uri(path)
            .body(Body::from(Vec::new()))
            .map_err(|e| PluginError::Usage(format!("GET {path}: {e}")))?;
        let (status, _, bytes) = self.exchange(request).await?;
        if status.is_success() {
            return Ok(Ok(String::from_utf8_lossy(&bytes).into_owned()));
        }
        Ok(Err(refusal(&Method::GET, path, status, &bytes, Vec::new())))
    }

    /// Sends `request` and reads the whole reply: its status, the apiserver's
    /// `Warning:` headers (kube-rs exposes them only on a raw reply), and the body.
    async fn exchange(
        &self,
        request: Request<Body>,
    ) -> Result<(http::StatusCode, Vec<String>, hyper::body::Bytes), PluginError> {
        let (method, path) = (request.method().clone(), request.uri().to_string());
        let response = self
            .client
            .send(request)
            .await
            .map_err(|e| PluginError::Access(format!("{method} {path}: {e}")))?;
        let status = response.status();
        let warnings = warnings(response.headers());
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| PluginError::Access(format!("{method} {path}: reading the reply: {e}")))?
            .to_bytes();
        Ok((status, warnings, bytes))
    }

    /// Every object of `resource` in every namespace, metadata only, all
    /// pages of 500; a refusal of any page is the answer.
    pub async fn list_metadata(
        &self,
        resource: &Resource,
    ) -> Result<Result<Vec<ObjectMeta>, Refusal>, PluginError> {
        let api = self.dynamic(&resource.api_resource(), None);
        let mut items = Vec::new();
        let mut params = ListParams::default().limit(500);
        loop {
            let page = api.list_metadata(&params).await;
            let page = match answer(page, format_args!("list {}", resource.qualified()))? {
                Ok(page) => page,
                Err(refusal) => return Ok(Err(refusal)),
            };
            items.extend(page.items.into_iter().map(|o| o.metadata));
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => return Ok(Ok(items)),
            }
        }
    }

    /// Every resource type that supports `list`, in its preferred version,
    /// without subresources and without the types driftguard never judges
    /// (`crate::cluster::rules::EXCLUDED_GROUPS` and `EXCLUDED_RESOURCES`).
    pub async fn listable(&self) -> Result<Vec<Resource>, PluginError> {
        use crate::cluster::rules::{EXCLUDED_GROUPS, EXCLUDED_RESOURCES};
        let listable = |(resource, r): &(Resource, &APIResourceDiscovery)| {
            let excluded = format!("{}/{}", resource.group, resource.plural);
            !EXCLUDED_GROUPS.contains(&resource.group.as_str())
                && !resource.plural.is_empty()
                && !resource.plural.contains('/')
                && r.verbs.iter().any(|v| v == "list")
                && !EXCLUDED_RESOURCES.contains(&excluded.as_str())
        };
        let types = self.preferred().await?.filter(listable);
        Ok(types.map(|(resource, _)| resource).collect())
    }

    /// Every resource type of aggregated discovery in its group's preferred
    /// version (the first listed), in discovery's order, with its entry.
    async fn preferred(
        &self,
    ) -> Result<impl Iterator<Item = (Resource, &APIResourceDiscovery)>, PluginError> {
        let groups = self.discovery().await?.iter().flat_map(|l| &l.items);
        Ok(groups.flat_map(|g| {
            let group = g.metadata.as_ref().and_then(|m| m.name.clone());
            let version = g.versions.first();
            version.into_iter().flat_map(move |v| {
                let group = group.clone().unwrap_or_default();
                v.resources.iter().map(move |r| {
                    let resource = Resource {
                        group: group.clone(),
                        version: v.version.clone().unwrap_or_default(),
                        kind: r
                            .response_kind
                            .as_ref()
                            .and_then(|k| k.kind.clone())
                            .unwrap_or_default(),
                        plural: r.resource.clone().unwrap_or_default(),
                        namespaced: r.scope.as_deref() == Some("Namespaced"),
                    };
                    (resource, r)
                })
            })
        }))
    }

    /// Aggregated discovery of `/api` and `/apis`, fetched on first use.
    /// kube's typed aggregated discovery (`Client::list_*_aggregated`, what
    /// `kube::Discovery::run_aggregated` reads) rather than `kube::Discovery`
    /// itself: its `ApiResource` drops the short and singular names that
    /// KIND arguments use (`deploy`, `cm`).
    async fn discovery(&self) -> Result<&Vec<APIGroupDiscoveryList>, PluginError> {
        self.discovery
            .get_or_try_init(|| async {
                let core = self
                    .client
                    .list_core_api_versions_aggregated()
                    .await
                    .map_err(|e| PluginError::Access(format!("discovery of /api failed: {e}")))?;
                let groups = self
                    .client
                    .list_api_groups_aggregated()
                    .await
                    .map_err(|e| PluginError::Access(format!("discovery of /apis failed: {e}")))?;
                Ok(vec![core, groups])
            })
            .await
    }

    /// `KIND` as typed (kind, plural, singular, short name, `plural.group`),
    /// resolved through aggregated discovery; the preferred version wins.
    pub async fn resolve(&self, kind: &str) -> Result<Resource, PluginError> {
        let wanted = kind.to_ascii_lowercase();
        let (name, group) = match wanted.split_once('.') {
            Some((n, g)) => (n.to_owned(), Some(g.to_owned())),
            None => (wanted.clone(), None),
        };
        for (resource, r) in self.preferred().await? {
            if group.as_deref().is_some_and(|want| want != resource.group) {
                continue;
            }
            let matches = resource.plural == name
                || r.singular_resource.as_deref() == Some(name.as_str())
                || resource.kind.to_ascii_lowercase() == name
                || r.short_names.contains(&name);
            if matches && !resource.plural.contains('/') {
                return Ok(resource);
            }
        }
        Err(PluginError::Usage(format!(
            "the server doesn't have a resource type \"{kind}\""
        )))
    }

    /// The caller's identity, from a `SelfSubjectReview` (authentication.k8s.io/v1).
    pub async fn whoami(&self) -> Result<Identity, PluginError> {
        let created = self
            .all::<SelfSubjectReview>()
            .create(&PostParams::default(), &SelfSubjectReview::default())
            .await;
        let review = match answer(created, "create selfsubjectreviews.authentication.k8s.io")? {
            Ok(review) => review,
            Err(refusal) => {
                return Err(PluginError::Access(format!(
                    "cannot create selfsubjectreviews.authentication.k8s.io (who am I?): {}",
                    refusal.message
                )));
            }
        };
        let info = review.status.and_then(|s| s.user_info).unwrap_or_default();
        Ok(Identity {
            username: info.username.unwrap_or_default(),
            groups: info.groups.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
impl Api {
    /// An `Api` over any client, e.g. one built on a fake apiserver.
    pub fn with_client(client: kube::Client, namespace: &str) -> Self {
        Api {
            client,
            namespace: namespace.to_owned(),
            discovery: Default::default(),
        }
    }
}

/// A JSON object as the decision code reads it.
fn to_value(object: DynamicObject) -> Value {
    serde_json::to_value(object).unwrap_or(Value::Null)
}

/// A non-2xx reply: the apiserver's own `message` when the body is a Status,
/// else the status line and the body.
fn refusal(
    method: &Method,
    path: &str,
    status: http::StatusCode,
    bytes: &[u8],
    warnings: Vec<String>,
) -> Refusal {
    let parsed = serde_json::from_slice::<Status>(bytes)
        .ok()
        .filter(|s| !s.message.is_empty());
    let details = parsed.as_ref().and_then(|s| s.details.clone());
    let message = parsed.map(|s| s.message).unwrap_or_else(|| {
        format!(
            "{method} {path}: HTTP {status}: {}",
            String::from_utf8_lossy(bytes).trim()
        )
    });
    Refusal {
        code: status.as_u16(),
        message,
        warnings,
        details,
    }
}

#[cfg(test)]
mod tests {
    use crate::breakglass::ending::warning_text;

    #[test]
    fn warning_headers_lose_code_agent_and_quotes() {
        assert_eq!(
            warning_text(r#"299 - "driftguard: dry run: the real write would be denied (drift)""#),
            "driftguard: dry run: the real write would be denied (drift)"
        );
        assert_eq!(warning_text("garbage"), "garbage");
    }
}
