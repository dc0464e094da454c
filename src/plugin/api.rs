//! The apiserver as the plugin's user sees it: their kubeconfig, raw requests
//! (so that `Warning:` headers and the apiserver's own refusal messages are
//! kept), discovery of KIND arguments and `SelfSubjectReview`.

use http::{Method, Request};
use http_body_util::BodyExt;
use kube::client::{APIGroupDiscoveryList, Body};
use serde_json::{Value, json};

use super::PluginError;
use crate::cluster::ending::warnings;

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

/// A client with the user's own credentials, and the namespace to use.
pub struct Api {
    client: kube::Client,
    pub namespace: String,
}

/// An apiserver reply that was not 2xx.
#[derive(Debug)]
pub struct Refusal {
    pub code: u16,
    pub message: String,
    pub warnings: Vec<String>,
}

impl Refusal {
    /// A denial by an admission webhook (not RBAC, not validation).
    pub fn by_webhook(&self) -> bool {
        self.message.contains("admission webhook")
    }
}

/// A 2xx reply: its body and the `Warning:` headers.
pub struct Reply {
    pub body: Value,
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
    pub fn api_resource(&self) -> kube::core::ApiResource {
        kube::core::ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version: self.api_version(),
            kind: self.kind.clone(),
            plural: self.plural.clone(),
        }
    }

    /// The URL path of this type in every namespace (cluster-scoped: all).
    pub fn list_path(&self) -> String {
        let base = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        format!("{base}/{}", self.plural)
    }

    /// The URL path of one object.
    pub fn path(&self, namespace: &str, name: &str) -> String {
        let base = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        if self.namespaced {
            format!("{base}/namespaces/{namespace}/{}/{name}", self.plural)
        } else {
            format!("{base}/{}/{name}", self.plural)
        }
    }
}

/// Who the apiserver says the caller is.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Identity {
    pub username: String,
    pub groups: Vec<String>,
}

impl Api {
    pub async fn connect(args: &ConnectArgs) -> Result<Self, PluginError> {
        let options = kube::config::KubeConfigOptions {
            context: args.context.clone(),
            ..Default::default()
        };
        let config = match &args.kubeconfig {
            Some(path) => {
                let file = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                    PluginError::Access(format!("kubeconfig {}: {e}", path.display()))
                })?;
                kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(|e| {
                        PluginError::Access(format!("kubeconfig {}: {e}", path.display()))
                    })?
            }
            None if args.context.is_some() => kube::Config::from_kubeconfig(&options)
                .await
                .map_err(|e| PluginError::Access(format!("kubeconfig: {e}")))?,
            None => kube::Config::infer()
                .await
                .map_err(|e| PluginError::Access(format!("no usable kubeconfig: {e}")))?,
        };
        let namespace = args
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        if namespace.is_empty()
            || !namespace
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            return Err(PluginError::Usage(format!(
                "namespace {namespace:?} is not a valid namespace name"
            )));
        }
        let client = kube::Client::try_from(config)
            .map_err(|e| PluginError::Access(format!("cannot build a client: {e}")))?;
        Ok(Api { client, namespace })
    }

    /// The client underneath, for kube's typed requests.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// One request; `Err(Refusal)` for a non-2xx reply, `PluginError` when
    /// the apiserver could not be reached.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Result<Reply, Refusal>, PluginError> {
        self.request(method, path, "application/json", content_type, body)
            .await
    }

    async fn request(
        &self,
        method: Method,
        path: &str,
        accept: &str,
        content_type: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Result<Reply, Refusal>, PluginError> {
        let mut builder = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(http::header::ACCEPT, accept);
        if let Some(ct) = content_type {
            builder = builder.header(http::header::CONTENT_TYPE, ct);
        }
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let request = builder
            .body(Body::from(bytes))
            .map_err(|e| PluginError::Usage(format!("{method} {path}: {e}")))?;
        let (status, warnings, bytes) = self.send(request, &method, path).await?;
        if status.is_success() {
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            return Ok(Ok(Reply { body, warnings }));
        }
        Ok(Err(refusal(&method, path, status, &bytes, warnings)))
    }

    /// A GET of a text body (e.g. a Service's `/metrics` through the
    /// apiserver's service proxy); a non-2xx reply is a refusal.
    pub async fn get_text(&self, path: &str) -> Result<Result<String, Refusal>, PluginError> {
        let request = Request::builder()
            .method(Method::GET)
            .uri(path)
            .body(Body::from(Vec::new()))
            .map_err(|e| PluginError::Usage(format!("GET {path}: {e}")))?;
        let (status, _, bytes) = self.send(request, &Method::GET, path).await?;
        if status.is_success() {
            return Ok(Ok(String::from_utf8_lossy(&bytes).into_owned()));
        }
        Ok(Err(refusal(&Method::GET, path, status, &bytes, Vec::new())))
    }

    /// Sends `request` and reads the whole reply: its status, the apiserver's
    /// `Warning:` headers (kube-rs exposes them only on a raw reply), and the body.
    async fn send(
        &self,
        request: Request<Body>,
        method: &Method,
        path: &str,
    ) -> Result<(http::StatusCode, Vec<String>, hyper::body::Bytes), PluginError> {
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

    /// A GET whose refusal the caller handles (an optional read).
    pub async fn try_get(&self, path: &str) -> Result<Result<Value, Refusal>, PluginError> {
        Ok(self
            .call(Method::GET, path, None, None)
            .await?
            .map(|r| r.body))
    }

    /// Every object of `resource` in every namespace, metadata only
    /// (`PartialObjectMetadataList`), all pages; a refusal of any page is
    /// the answer.
    pub async fn list_metadata(
        &self,
        resource: &Resource,
    ) -> Result<Result<Vec<Value>, Refusal>, PluginError> {
        const ACCEPT: &str =
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        let mut items = Vec::new();
        let mut token = String::new();
        loop {
            let mut path = format!("{}?limit=500", resource.list_path());
            if !token.is_empty() {
                path.push_str("&continue=");
                path.push_str(&url_escape(&token));
            }
            let reply = match self.request(Method::GET, &path, ACCEPT, None, None).await? {
                Ok(reply) => reply.body,
                Err(refusal) => return Ok(Err(refusal)),
            };
            if let Some(page) = reply["items"].as_array() {
                items.extend(page.iter().cloned());
            }
            match reply["metadata"]["continue"].as_str() {
                Some(next) if !next.is_empty() => token = next.to_owned(),
                _ => return Ok(Ok(items)),
            }
        }
    }

    /// Every resource type that supports `list`, in its preferred version,
    /// without subresources and without the types driftguard never judges
    /// (`crate::cluster::rules::EXCLUDED_GROUPS` and `EXCLUDED_RESOURCES`).
    pub async fn listable(&self) -> Result<Vec<Resource>, PluginError> {
        use crate::cluster::rules::{EXCLUDED_GROUPS, EXCLUDED_RESOURCES};
        let mut out = Vec::new();
        for list in &self.discovery().await? {
            for g in &list.items {
                let group_name = g
                    .metadata
                    .as_ref()
                    .and_then(|m| m.name.clone())
                    .unwrap_or_default();
                if EXCLUDED_GROUPS.contains(&group_name.as_str()) {
                    continue;
                }
                let Some(v) = g.versions.first() else {
                    continue;
                };
                for r in &v.resources {
                    let plural = r.resource.clone().unwrap_or_default();
                    let excluded = format!("{group_name}/{plural}");
                    if plural.is_empty()
                        || plural.contains('/')
                        || !r.verbs.iter().any(|v| v == "list")
                        || EXCLUDED_RESOURCES.contains(&excluded.as_str())
                    {
                        continue;
                    }
                    out.push(Resource {
                        group: group_name.clone(),
                        version: v.version.clone().unwrap_or_default(),
                        kind: r
                            .response_kind
                            .as_ref()
                            .and_then(|k| k.kind.clone())
                            .unwrap_or_default(),
                        plural,
                        namespaced: r.scope.as_deref() == Some("Namespaced"),
                    });
                }
            }
        }
        Ok(out)
    }

    /// Aggregated discovery of `/api` and `/apis`.
    async fn discovery(&self) -> Result<Vec<APIGroupDiscoveryList>, PluginError> {
        let mut lists: Vec<APIGroupDiscoveryList> = Vec::new();
        lists.push(
            self.client
                .list_core_api_versions_aggregated()
                .await
                .map_err(|e| PluginError::Access(format!("discovery of /api failed: {e}")))?,
        );
        lists.push(
            self.client
                .list_api_groups_aggregated()
                .await
                .map_err(|e| PluginError::Access(format!("discovery of /apis failed: {e}")))?,
        );
        Ok(lists)
    }

    /// `KIND` as typed (kind, plural, singular, short name, `plural.group`),
    /// resolved through aggregated discovery; the preferred version wins.
    pub async fn resolve(&self, kind: &str) -> Result<Resource, PluginError> {
        let wanted = kind.to_ascii_lowercase();
        let (name, group) = match wanted.split_once('.') {
            Some((n, g)) => (n.to_owned(), Some(g.to_owned())),
            None => (wanted.clone(), None),
        };
        for list in &self.discovery().await? {
            for g in &list.items {
                let group_name = g
                    .metadata
                    .as_ref()
                    .and_then(|m| m.name.clone())
                    .unwrap_or_default();
                if group.as_deref().is_some_and(|want| want != group_name) {
                    continue;
                }
                // Versions are listed in preference order.
                let Some(v) = g.versions.first() else {
                    continue;
                };
                for r in &v.resources {
                    let plural = r.resource.clone().unwrap_or_default();
                    let kind_name = r
                        .response_kind
                        .as_ref()
                        .and_then(|k| k.kind.clone())
                        .unwrap_or_default();
                    let matches = plural == name
                        || r.singular_resource.as_deref() == Some(name.as_str())
                        || kind_name.to_ascii_lowercase() == name
                        || r.short_names.contains(&name);
                    if matches && !plural.contains('/') {
                        return Ok(Resource {
                            group: group_name,
                            version: v.version.clone().unwrap_or_default(),
                            kind: kind_name,
                            plural,
                            namespaced: r.scope.as_deref() == Some("Namespaced"),
                        });
                    }
                }
            }
        }
        Err(PluginError::Usage(format!(
            "the server doesn't have a resource type \"{kind}\""
        )))
    }

    /// The caller's identity, from a `SelfSubjectReview` (authentication.k8s.io/v1).
    pub async fn whoami(&self) -> Result<Identity, PluginError> {
        let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
        let path = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
        let reply = match self
            .call(Method::POST, path, Some("application/json"), Some(&review))
            .await?
        {
            Ok(reply) => reply.body,
            Err(refusal) => {
                return Err(PluginError::Access(format!(
                    "cannot create selfsubjectreviews.authentication.k8s.io (who am I?): {}",
                    refusal.message
                )));
            }
        };
        let info = &reply["status"]["userInfo"];
        Ok(Identity {
            username: info["username"].as_str().unwrap_or_default().to_owned(),
            groups: info["groups"]
                .as_array()
                .map(|g| {
                    g.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
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
        }
    }
}

/// A query parameter value, percent-encoded (continue tokens are base64).
fn url_escape(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
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
    let message = serde_json::from_slice::<Value>(bytes)
        .ok()
        .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| {
            format!(
                "{method} {path}: HTTP {status}: {}",
                String::from_utf8_lossy(bytes).trim()
            )
        });
    Refusal {
        code: status.as_u16(),
        message,
        warnings,
    }
}

#[cfg(test)]
mod tests {
    use super::url_escape;
    use crate::cluster::ending::warning_text;

    #[test]
    fn continue_tokens_are_percent_encoded() {
        assert_eq!(url_escape("eyJ2Ijo+/=="), "eyJ2Ijo%2B%2F%3D%3D");
        assert_eq!(url_escape("a-b_c.d~"), "a-b_c.d~");
    }

    #[test]
    fn warning_headers_lose_code_agent_and_quotes() {
        assert_eq!(
            warning_text(r#"299 - "driftguard: dry run: the real write would be denied (drift)""#),
            "driftguard: dry run: the real write would be denied (drift)"
        );
        assert_eq!(warning_text("garbage"), "garbage");
    }
}
