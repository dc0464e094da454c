//! Argo CD `Application` manifests as policy input: each application's
//! `spec.ignoreDifferences` applies only to the objects that application tracks.

use serde::Deserialize;

use super::PolicyError;
use super::ignore::{RuleError, RuleSet};
use super::schema::IgnoreDifference;

/// The server URL Argo CD gives the cluster it runs in.
pub(crate) const IN_CLUSTER_SERVER: &str = "https://kubernetes.default.svc";
/// The name Argo CD gives the cluster it runs in.
pub(crate) const IN_CLUSTER_NAME: &str = "in-cluster";

/// The names Argo CD gives the cluster driftguard guards, as an
/// Application's `spec.destination` writes them: `server` URLs and cluster
/// `name`s. Argo CD running in this cluster calls it
/// `https://kubernetes.default.svc` and `in-cluster`; a hub Argo CD calls it
/// by its cluster Secret's server and name (`--cluster-name`), and then the
/// in-cluster names are the hub's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThisCluster {
    servers: Vec<String>,
    names: Vec<String>,
    /// Whether the cluster's own name in Argo CD is unknown (in-cluster,
    /// which its cluster Secret may rename): read strictly.
    name_unknown: bool,
}

impl Default for ThisCluster {
    fn default() -> Self {
        Self {
            servers: vec![IN_CLUSTER_SERVER.to_owned()],
            names: vec![IN_CLUSTER_NAME.to_owned()],
            name_unknown: true,
        }
    }
}

impl ThisCluster {
    /// The names a hub knows this cluster by: a value with `://` is a server
    /// URL (a trailing `/` dropped, as Argo CD drops it), any other a name.
    pub(crate) fn named(names: &[String]) -> Self {
        let (servers, names): (Vec<&String>, Vec<&String>) =
            names.iter().partition(|n| n.contains("://"));
        Self {
            servers: servers
                .into_iter()
                .map(|s| s.trim_end_matches('/').to_owned())
                .collect(),
            names: names.into_iter().cloned().collect(),
            name_unknown: false,
        }
    }

    /// Whether an Application of `project` may deploy the object `key`
    /// ([`super::planned::key`]) to this cluster, as Argo CD v3.6 checks
    /// every resource it syncs: a namespaced one against the destinations
    /// (`isDestinationMatched`, globs, `!` denies), a cluster-scoped one
    /// against `clusterResourceWhitelist`. A key that is not one object
    /// (a listing of every namespace, or of a project's) is kept.
    pub(crate) fn lets_deploy(&self, project: &super::app_project::AppProject, key: &str) -> bool {
        let Some((group, kind, namespace)) = key
            .split_once(':')
            .and_then(|(gk, rest)| Some((gk.split_once('/')?, rest.split_once('/')?.0)))
            .map(|((g, k), ns)| (g, k, ns))
        else {
            return false;
        };
        // Listings driftguard makes (the tools' statuses cannot: planned's
        // `one_object`): every namespace, or a project's.
        if key == super::planned::EVERYWHERE || namespace.starts_with('@') {
            return true;
        }
        if namespace.is_empty() {
            let whitelist = &project.spec.cluster_resource_whitelist;
            return kind == "*"
                || whitelist.iter().any(|gk| {
                    argo_glob(&gk.group, group, false) && argo_glob(&gk.kind, kind, false)
                });
        }
        // However Argo CD resolved the destination (a server, a name, both),
        // the key stays if any reading permits it.
        let names = || self.names.iter().map(|n| Some(n.as_str())).chain([None]);
        let servers = self.servers.iter().map(|s| Some(s.as_str())).chain([None]);
        let readings = servers.flat_map(|s| names().map(move |n| (s, n)));
        readings
            .filter(|(s, n)| s.is_some() || n.is_some())
            .any(|(server, name)| {
                let mut any = false;
                for item in &project.spec.destinations {
                    // Here, what the in-cluster Secret names this cluster is
                    // not known: any name an entry allows may be it.
                    let unknown =
                        self.name_unknown && !item.name.is_empty() && !item.name.starts_with('!');
                    let name_ok = unknown || name.is_some_and(|n| argo_glob(&item.name, n, true));
                    let server_ok = server.is_some_and(|s| argo_glob(&item.server, s, true));
                    let namespace_ok = argo_glob(&item.namespace, namespace, true);
                    if (server_ok || name_ok) && namespace_ok {
                        any = true;
                    } else if (!name_ok && item.name.starts_with('!'))
                        || (!server_ok && item.server.starts_with('!'))
                        || (!namespace_ok && item.namespace.starts_with('!'))
                    {
                        return false;
                    }
                }
                any
            })
    }

    fn is(&self, server: Option<&str>, name: Option<&str>) -> bool {
        match (server, name) {
            (Some(server), None) => {
                let server = server.trim_end_matches('/');
                self.servers.iter().any(|s| s == server)
            }
            (None, Some(name)) => self.names.iter().any(|n| n == name),
            _ => false,
        }
    }

    /// Whether an Application (as read from the cluster) deploys somewhere
    /// else: its destination names a cluster, and not this one. One without
    /// a destination is not read as elsewhere (Argo CD refuses to sync it).
    /// Allocates nothing (unlike `Value::pointer`): it runs on every event
    /// of every hub Application.
    pub(crate) fn deploys_elsewhere(&self, application: &serde_json::Value) -> bool {
        let destination = application.get("spec").and_then(|s| s.get("destination"));
        let Some(destination) = destination else {
            return false;
        };
        let text = |k: &str| {
            destination
                .get(k)
                .and_then(serde_json::Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let (server, name) = (text("server"), text("name"));
        (server.is_some() || name.is_some()) && !self.is(server, name)
    }
}

/// Argo CD's `globMatch`: `*` matches everything, `!` (where allowed)
/// negates, a pattern that does not compile matches nothing.
fn argo_glob(pattern: &str, value: &str, negation: bool) -> bool {
    if let Some(denied) = pattern.strip_prefix('!').filter(|_| negation) {
        return !argo_glob(denied, value, false);
    }
    pattern == "*" || super::pattern::Pattern::new(pattern).is_ok_and(|p| p.is_match(value))
}

/// argocd-cm's resource-tracking keys (argo-cd v3.6.1
/// `util/settings/settings.go:487,489`).
pub(crate) const INSTANCE_LABEL_KEY: &str = "application.instanceLabelKey";
pub(crate) const TRACKING_METHOD_KEY: &str = "application.resourceTrackingMethod";

/// From argocd-cm's data, the instance label Argo CD v3.6.1 tracks objects
/// with: `Some` only when the tracking method uses labels. The method is
/// read verbatim, empty being `annotation` (`GetTrackingMethod`,
/// settings.go:944-955); only the exact `label` and `annotation+label`
/// (`pkg/apis/application/v1alpha1/types.go:117-119`) set the label, any
/// other value tracks by annotation (`util/argo/resource_tracking.go:77-90`).
/// The key is read verbatim, empty being `app.kubernetes.io/instance`
/// (`GetAppInstanceLabelKey`, settings.go:932-942; `common/common.go:190`).
/// Under `annotation+label` Argo CD writes the label too (:182-186) but
/// reads ownership from the annotation (:84-85); the label is still its
/// claim, kept for the strictest reading.
pub(crate) fn instance_label(data: &serde_json::Map<String, serde_json::Value>) -> Option<String> {
    let get = |k: &str| {
        data.get(k)
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
    };
    matches!(get(TRACKING_METHOD_KEY), Some("label" | "annotation+label")).then(|| {
        get(INSTANCE_LABEL_KEY)
            .unwrap_or("app.kubernetes.io/instance")
            .to_owned()
    })
}

/// An imported Application: where its objects come from, and its ignore rules.
#[derive(Debug)]
pub struct Application {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`; `None` in a file that names none (Argo CD's own
    /// namespace, then).
    pub namespace: Option<String>,
    /// `spec.source.repoURL` (or the first of `spec.sources`).
    pub(crate) repo_url: Option<String>,
    /// Its `path`, likewise.
    pub(crate) path: Option<String>,
    /// `spec.destination.namespace`, when the destination is this cluster
    /// (`https://kubernetes.default.svc` or `in-cluster`).
    pub destination_namespace: Option<String>,
    /// `spec.project`; Argo CD reads an empty one as `default`.
    pub(crate) project: String,
    /// `spec.destination.namespace` as written (possibly empty), when Argo CD
    /// resolves the destination to this cluster; `None` for another cluster or
    /// a destination it refuses. What sync impersonation is derived from.
    pub(crate) sync_destination: Option<String>,
    /// The server URL Argo CD resolves that destination to
    /// (`destCluster.Server`, which AppProject `destinationServiceAccounts`
    /// server globs are matched against): the `server` as written, without a
    /// trailing `/`; for a `name`, this cluster's server URLs (its cluster
    /// Secret holds one; driftguard knows those `--cluster-name` gives, or
    /// `https://kubernetes.default.svc` without a hub). Empty when the
    /// destination is not this cluster.
    pub(crate) sync_servers: Vec<String>,
    /// The ApplicationSet that generated it (its controller owner, in the
    /// same namespace), which rewrites it to the set's template.
    pub(crate) application_set: Option<String>,
    /// Its `ignoreDifferences`, compiled.
    pub(crate) rules: RuleSet,
    /// How Argo CD compares this Application's objects with Git.
    pub(crate) diff: DiffMode,
}

/// Argo CD's diff strategy for an Application (`controller/state.go`,
/// `shouldUseServerSideDiff`, v3.6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum DiffMode {
    /// The legacy three-way diff against the last-applied record. Also
    /// driftguard's reading when the controller-wide flag
    /// (`controller.diff.server.side` in `argocd-cmd-params-cm`, a key
    /// driftguard does not read) may have turned Server-Side Diff on: the
    /// stricter reading.
    #[default]
    Legacy,
    /// Server-Side Diff: a dry-run server-side apply of Git compared with the
    /// live object, both without the last-applied record. On with the compare
    /// option `ServerSideDiff=true` or the sync option `ServerSideApply=true`,
    /// unless the compare option says `ServerSideDiff=false`.
    ServerSide,
}

impl DiffMode {
    /// Argo CD's rule: `compare-options` is a comma-separated list whose
    /// items are trimmed (`GetAnnotationCSVs`); a sync option matches exactly.
    fn of(compare_options: Option<&str>, sync_options: &[String]) -> DiffMode {
        let compare =
            |o: &str| compare_options.is_some_and(|c| c.split(',').any(|i| i.trim() == o));
        if compare("ServerSideDiff=false") {
            DiffMode::Legacy
        } else if compare("ServerSideDiff=true")
            || sync_options.iter().any(|o| o == "ServerSideApply=true")
        {
            DiffMode::ServerSide
        } else {
            DiffMode::Legacy
        }
    }
}

/// One YAML document, read leniently except for `ignoreDifferences`, which
/// must be Argo CD's schema exactly.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Document {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: Metadata,
    #[serde(default)]
    spec: Option<Spec>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Metadata {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    owner_references: Vec<OwnerReference>,
    /// Only `argocd.argoproj.io/compare-options` is read; other values
    /// need not be strings for the Application to load.
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OwnerReference {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    controller: Option<bool>,
}

impl Metadata {
    /// The name of the ApplicationSet that controls this Application: the
    /// applicationset-controller sets itself as controller owner of every
    /// Application it generates (`SetControllerReference`).
    fn application_set(&self) -> Option<String> {
        self.owner_references
            .iter()
            .find(|r| {
                r.controller == Some(true)
                    && r.kind == "ApplicationSet"
                    && r.api_version.starts_with("argoproj.io/")
                    && !r.name.is_empty()
            })
            .map(|r| r.name.clone())
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    #[serde(default)]
    project: Option<String>,
    #[serde(default)]
    source: Option<Source>,
    #[serde(default)]
    sources: Vec<Source>,
    #[serde(default)]
    ignore_differences: Vec<IgnoreDifference>,
    #[serde(default)]
    destination: Option<Destination>,
    #[serde(default)]
    sync_policy: Option<SyncPolicy>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SyncPolicy {
    #[serde(default)]
    sync_options: Vec<String>,
}

#[derive(Deserialize)]
struct Destination {
    #[serde(default)]
    server: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
}

impl Destination {
    /// The destination namespace as written, when Argo CD resolves the
    /// destination to this cluster (`GetDestinationServer`: server or name,
    /// never both; a trailing `/` of the server is dropped). Another name may
    /// also point here through a cluster Secret, which driftguard does not read.
    fn in_cluster(&self, this: &ThisCluster) -> Option<String> {
        let server = self.server.as_deref().filter(|s| !s.is_empty());
        let name = self.name.as_deref().filter(|s| !s.is_empty());
        this.is(server, name)
            .then(|| self.namespace.clone().unwrap_or_default())
    }

    /// The server URLs Argo CD may resolve the destination to, when it is
    /// this cluster ([`Application::sync_servers`]).
    fn servers_here(&self, this: &ThisCluster) -> Vec<String> {
        if self.in_cluster(this).is_none() {
            return Vec::new();
        }
        match self.server.as_deref().filter(|s| !s.is_empty()) {
            Some(server) => vec![server.trim_end_matches('/').to_owned()],
            None => this.servers.clone(),
        }
    }

    /// The namespace, when the Application deploys to the cluster driftguard
    /// guards (Argo CD's names for it); another cluster's namespace is not ours.
    fn local_namespace(self, this: &ThisCluster) -> Option<String> {
        let local = self
            .server
            .as_deref()
            .is_some_and(|s| this.is(Some(s), None))
            || self.name.as_deref().is_some_and(|n| this.is(None, Some(n)));
        self.namespace.filter(|ns| local && !ns.is_empty())
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Source {
    #[serde(default, rename = "repoURL")]
    repo_url: Option<String>,
    #[serde(default)]
    path: Option<String>,
}

/// What a manifest file held: the Applications, and a note for every other document.
#[derive(Debug, Default)]
pub struct Imported {
    /// The Applications, in file order.
    pub applications: Vec<Application>,
    /// Why each other document was skipped.
    pub(crate) skipped: Vec<String>,
}

/// Reads a manifest file; the error names the file, and the line when known.
pub fn parse(text: &str, file: &str) -> Result<Imported, PolicyError> {
    let docs: Vec<Document> =
        serde_saphyr::from_multiple(text).map_err(|e| PolicyError(super::yaml_error(file, &e)))?;
    let mut out = Imported::default();
    // jq expressions of earlier Applications, to place a refused one in the file.
    let mut earlier: Vec<String> = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        let is_app = doc.kind == "Application" && doc.api_version.starts_with("argoproj.io/");
        if !is_app {
            let what = if doc.kind.is_empty() {
                "an untyped document".to_owned()
            } else {
                format!("{} {}", doc.kind, doc.metadata.name)
            };
            out.skipped.push(format!(
                "{file}: document {}: {what} is not an Argo CD Application; skipped",
                i + 1
            ));
            continue;
        }
        let exprs: Vec<String> = doc
            .spec
            .iter()
            .flat_map(|s| &s.ignore_differences)
            .flat_map(|d| d.jq_path_expressions.iter().cloned())
            .collect();
        let before: Vec<&str> = earlier.iter().map(String::as_str).collect();
        let app = from_document(doc, &before, &ThisCluster::default(), |e, before| {
            match e.jq {
                Some(_) => super::locate::describe(file, text, before, e),
                None => format!("{file}: document {}: {e}", i + 1),
            }
        })
        .map_err(|e| {
            PolicyError(match e {
                DocError::NoName => format!("{file}: document {}: {NO_NAME}", i + 1),
                DocError::Rule(e) => e,
            })
        })?;
        earlier.extend(exprs);
        out.applications.push(app);
    }
    Ok(out)
}

const NO_NAME: &str = "Application has no metadata.name";

/// An Application read from the cluster that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ApplicationError {
    /// Not the shape of an Application.
    #[error(transparent)]
    Shape(#[from] serde_json::Error),
    /// An Application without a name.
    #[error("{NO_NAME}")]
    NoName,
    /// An `ignoreDifferences` entry that does not compile.
    #[error(transparent)]
    Rule(RuleError),
}

/// An Application read from the cluster (a watched object).
pub fn from_value(value: &serde_json::Value) -> Result<Application, ApplicationError> {
    from_value_for(value, &ThisCluster::default())
}

/// [`from_value`], for an Argo CD that knows this cluster by `this`.
pub(crate) fn from_value_for(
    value: &serde_json::Value,
    this: &ThisCluster,
) -> Result<Application, ApplicationError> {
    let doc = Document::deserialize(value)?;
    from_document(doc, &[], this, |e, _| e.clone()).map_err(|e| match e {
        DocError::NoName => ApplicationError::NoName,
        DocError::Rule(e) => ApplicationError::Rule(e),
    })
}

enum DocError<E> {
    NoName,
    /// A rule that does not compile, as `describe` rendered it.
    Rule(E),
}

/// `describe` renders a rule error, given the jq expressions written before it.
fn from_document<E>(
    doc: Document,
    earlier: &[&str],
    this: &ThisCluster,
    describe: impl Fn(&RuleError, &[&str]) -> E,
) -> Result<Application, DocError<E>> {
    if doc.metadata.name.is_empty() {
        return Err(DocError::NoName);
    }
    let spec = doc.spec.unwrap_or(Spec {
        project: None,
        source: None,
        sources: vec![],
        ignore_differences: vec![],
        destination: None,
        sync_policy: None,
    });
    let source = spec.source.or_else(|| spec.sources.into_iter().next());
    let application_set = doc.metadata.application_set();
    let diff = DiffMode::of(
        doc.metadata
            .annotations
            .get(COMPARE_OPTIONS)
            .and_then(serde_json::Value::as_str),
        spec.sync_policy
            .as_ref()
            .map_or(&[], |p| &p.sync_options[..]),
    );
    let name = doc.metadata.name;
    let rules = super::compile_rules(
        &spec.ignore_differences,
        &format!("Application {name} ignoreDifferences"),
        earlier,
    )
    .map_err(|refused| DocError::Rule(describe(&refused.0, &refused.1)))?;
    let project = spec
        .project
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "default".to_owned());
    Ok(Application {
        namespace: doc.metadata.namespace,
        repo_url: source.as_ref().and_then(|s| s.repo_url.clone()),
        path: source.and_then(|s| s.path),
        sync_destination: spec.destination.as_ref().and_then(|d| d.in_cluster(this)),
        sync_servers: spec
            .destination
            .as_ref()
            .map(|d| d.servers_here(this))
            .unwrap_or_default(),
        destination_namespace: spec.destination.and_then(|d| d.local_namespace(this)),
        project,
        name,
        application_set,
        rules,
        diff,
    })
}

const COMPARE_OPTIONS: &str = "argocd.argoproj.io/compare-options";

impl Application {
    /// Argo CD names an application in another namespace `<namespace>_<name>` in
    /// its tracking id; a bare name means the control-plane namespace
    /// (`control_plane`), and only that: an Application of the same name in a
    /// tenant's namespace must not supply the ignore rules. An Application
    /// read from a file without a namespace is taken as the control plane's.
    pub fn tracks(&self, app: &str, app_namespace: Option<&str>, control_plane: &str) -> bool {
        let namespace = self.namespace.as_deref().unwrap_or(control_plane);
        self.name == app && namespace == app_namespace.unwrap_or(control_plane)
    }

    /// Where its objects come from, for denials: the generating
    /// ApplicationSet (whose template is where the Application itself is
    /// changed) and the repository.
    pub fn describe_source(&self) -> Option<String> {
        let repo = match (&self.repo_url, &self.path) {
            (Some(repo), Some(path)) => Some(format!("{repo}, path {path}")),
            (Some(repo), None) => Some(repo.clone()),
            _ => None,
        };
        let set = self
            .application_set
            .as_ref()
            .map(|set| match &self.namespace {
                Some(ns) => format!("generated by ApplicationSet {ns}/{set}"),
                None => format!("generated by ApplicationSet {set}"),
            });
        match (set, repo) {
            (Some(set), Some(repo)) => Some(format!("{set}; {repo}")),
            (set, repo) => set.or(repo),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Argo CD v3.6's `isDestinationMatched` and `IsResourcePermitted`, case
    /// by case: globs, `!` denies, a server or a name, cluster-scoped kinds.
    #[test]
    fn a_project_lets_deploy_where_argo_cd_would_sync() {
        let this = ThisCluster::default();
        let project = |destinations: serde_json::Value, whitelist: serde_json::Value| {
            super::super::app_project::AppProject::from_value(&json!({
                "spec": {"destinations": destinations, "clusterResourceWhitelist": whitelist}
            }))
            .unwrap()
        };
        let team = project(json!([{"server": "*", "namespace": "team-*"}]), json!([]));
        assert!(this.lets_deploy(&team, "apps/Deployment:team-a/web"));
        assert!(!this.lets_deploy(&team, "apps/Deployment:kube-system/web"));
        assert!(!this.lets_deploy(&team, "/Namespace:/team-z"));
        assert!(this.lets_deploy(&team, super::super::planned::EVERYWHERE));
        let by_name = project(json!([{"name": "in-cluster", "namespace": "*"}]), json!([]));
        assert!(this.lets_deploy(&by_name, "/ConfigMap:shop/c"));
        let other = project(
            json!([{"server": "https://other:6443", "namespace": "*"}]),
            json!([]),
        );
        assert!(!this.lets_deploy(&other, "/ConfigMap:shop/c"));
        let denying = project(
            json!([{"server": "*", "namespace": "*"}, {"server": "*", "namespace": "!kube-*"}]),
            json!([{"group": "", "kind": "Namespace"}]),
        );
        assert!(this.lets_deploy(&denying, "/ConfigMap:shop/c"));
        assert!(!this.lets_deploy(&denying, "/ConfigMap:kube-system/c"));
        assert!(this.lets_deploy(&denying, "/Namespace:/shop"));
        assert!(!this.lets_deploy(&denying, "rbac.authorization.k8s.io/ClusterRole:/admin"));
        // Named: the in-cluster Secret may rename this cluster, so any name
        // an entry allows counts here; a hub's name for a spoke is known.
        let renamed = project(json!([{"name": "prod-eu1", "namespace": "*"}]), json!([]));
        assert!(this.lets_deploy(&renamed, "/ConfigMap:shop/c"));
        let spoke = ThisCluster::named(&["spoke-1".to_owned()]);
        assert!(!spoke.lets_deploy(&renamed, "/ConfigMap:shop/c"));
        assert!(!this.lets_deploy(&team, "not a key"));
        let none = project(json!([]), json!([{"group": "*", "kind": "*"}]));
        assert!(!this.lets_deploy(&none, "/ConfigMap:shop/c"));
        assert!(this.lets_deploy(&none, "rbac.authorization.k8s.io/ClusterRole:/admin"));
    }

    fn app(owners: serde_json::Value) -> Application {
        from_value(
            &json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "shop-prod", "namespace": "argocd", "ownerReferences": owners},
            "spec": {"source": {"repoURL": "https://git.example.com/shop", "path": "prod"}}}),
        )
        .unwrap()
    }

    #[test]
    fn a_generated_application_names_its_application_set() {
        let set = |kind: &str, api: &str, controller: bool| json!([{"apiVersion": api, "kind": kind, "name": "shop", "uid": "u", "controller": controller}]);
        let generated = app(set("ApplicationSet", "argoproj.io/v1alpha1", true));
        assert_eq!(generated.application_set.as_deref(), Some("shop"));
        assert_eq!(
            generated.describe_source().as_deref(),
            Some(
                "generated by ApplicationSet argocd/shop; https://git.example.com/shop, path prod"
            )
        );
        // Only the controller owner of Argo CD's kind generated it.
        for owners in [
            set("ApplicationSet", "argoproj.io/v1alpha1", false),
            set("ApplicationSet", "example.com/v1", true),
            set("Application", "argoproj.io/v1alpha1", true),
            json!([]),
        ] {
            let a = app(owners.clone());
            assert_eq!(a.application_set, None, "{owners}");
            assert_eq!(
                a.describe_source().as_deref(),
                Some("https://git.example.com/shop, path prod")
            );
        }
    }
}
