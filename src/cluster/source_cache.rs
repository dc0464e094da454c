//! The compiled GitOps sources, one entry per watched object, keyed by uid.
//! An event recompiles only its own object, and only when what driftguard
//! reads of it changed (a hash of that content): Argo CD rewrites an
//! Application's status many times a second, and its CRD has no status
//! subresource, so `metadata.generation` moves with status writes too and
//! cannot be the key. Entries are `Arc`s shared between snapshots: publishing
//! copies pointers, never rules. No client here, so the cost is measurable
//! (`examples/watch_cost.rs`). An Application Argo CD would not reconcile
//! (its namespace or AppProject does not admit it, [`app_namespaces`]) and a
//! Flux source applying to another cluster are kept but lend nothing, so a
//! change of argocd-cmd-params-cm or of a project moves Applications in or
//! out without a relist. Each object is charged its estimated cost before
//! it is compiled or indexed ([`source_cost`]); one over a cap is refused in
//! the stricter direction: it lends no ignore rule, and what it lists is
//! widened to whole namespaces, never dropped.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::DynamicObject;
use serde_json::Value;

use super::source_cost::{self, Cap, Ledger, Limits};
use crate::drift::ownership::ARGOCD_CM_INSTALLATION_ID;
use crate::drift::{ArgoCdSources, Manager};
use crate::policy::app_namespaces::{self, NamespaceList};
use crate::policy::argocd::{INSTANCE_LABEL_KEY, TRACKING_METHOD_KEY, ThisCluster, instance_label};
use crate::policy::ignore::RuleSet;
use crate::policy::impersonation::{self, AppProject, SyncAccount};
use crate::policy::{Application, planned};
use crate::sources::{self, FluxKind, FluxSource, SourceError, Sources};

/// The watched kinds held as dynamic objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Application,
    AppProject,
    Kustomization,
    HelmRelease,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Application => "Application",
            Kind::AppProject => "AppProject",
            Kind::Kustomization => "Kustomization",
            Kind::HelmRelease => "HelmRelease",
        }
    }
}

/// One object's compiled form; `None` when it does not compile (reported once,
/// when its content changed).
struct Entry<T> {
    hash: u64,
    value: Option<Arc<T>>,
}

struct AppEntry {
    hash: u64,
    namespace: String,
    /// `spec.project`, `default` when empty.
    project: String,
    /// Whether Argo CD reconciles it ([`app_namespaces::reconciles`]): one it
    /// does not lends no rule, account or listed object. Depends on the
    /// projects and argocd-cmd-params-cm too.
    counts: bool,
    app: Option<Arc<Application>>,
    /// The account Argo CD syncs it as; depends on the projects and argocd-cm too.
    account: Option<Arc<SyncAccount>>,
}

#[derive(Default)]
pub struct SourceCache {
    /// Whether this cache holds an Argo CD installation (its snapshot then
    /// has one); a cache of Flux alone does not.
    argocd_watched: bool,
    argocd_namespace: String,
    /// argocd-cm's `installationID`.
    installation_id: Option<String>,
    /// What Argo CD calls the cluster driftguard guards.
    this_cluster: ThisCluster,
    /// For a hub's Flux, the names of the kubeconfig Secrets its
    /// Kustomizations reach this cluster through (`spec.kubeConfig`); `None`
    /// when Flux runs here, where a Kustomization without one applies here.
    flux_secrets: Option<Vec<String>>,
    /// Flux's `--default-service-account`: the account a Kustomization or
    /// HelmRelease without `spec.serviceAccountName` is applied as, in its
    /// own namespace.
    flux_default_account: Option<String>,
    applications: BTreeMap<String, AppEntry>,
    projects: BTreeMap<String, Entry<AppProject>>,
    /// The projects as a list, what sync-account derivation reads; rebuilt
    /// on a project change (there are few, and they change rarely).
    project_list: Vec<AppProject>,
    kustomizations: BTreeMap<String, Entry<FluxSource>>,
    helmreleases: BTreeMap<String, Entry<FluxSource>>,
    cm_hash: Option<u64>,
    /// argocd-cm's instance label, when it tracks by label.
    instance_label: Option<String>,
    /// argocd-cmd-params-cm's `application.namespaces`, and its hash.
    app_namespaces: NamespaceList,
    params_hash: Option<u64>,
    overrides: Arc<RuleSet>,
    impersonation: bool,
    /// What each Application and Kustomization lists in its status, by uid:
    /// a hash of the keys, the keys, and who lists them.
    planned: BTreeMap<String, Planned>,
    /// Every listed object and who lists it, rebuilt when a list changes
    /// (rarely: status rewrites keep the same objects).
    planned_index: Arc<HashMap<String, Manager>>,
    /// Listers of a key beyond `planned_index`'s.
    more_listers: Arc<HashMap<String, Vec<Manager>>>,
    /// The projects `planned_index`'s project listings name.
    scopes: Arc<Vec<crate::drift::Scope>>,
    /// What each object is charged, by uid.
    budget: Ledger,
    /// The objects over a cap, by uid, and which.
    refused: BTreeMap<String, (Kind, Cap)>,
    /// The uids a relist in progress has listed, per kind: its objects are
    /// applied (and charged) as they arrive, never held until it completes.
    relisting: HashMap<Kind, HashSet<String>>,
}

struct Planned {
    hash: u64,
    keys: Vec<String>,
    by: Manager,
}

/// What driftguard reads of a watched object: its name, namespace, controller
/// owner (an Application's ApplicationSet, named in denials) and spec.
/// Status, annotations and managedFields never change a decision.
pub fn content_hash(object: &DynamicObject) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    object.metadata.name.hash(&mut h);
    object.metadata.namespace.hash(&mut h);
    for r in object.metadata.owner_references.iter().flatten() {
        if r.controller == Some(true) {
            (&r.api_version, &r.kind, &r.name).hash(&mut h);
        }
    }
    hash_value(object.data.get("spec").unwrap_or(&Value::Null), &mut h);
    h.finish()
}

/// The argocd-cm keys driftguard reads, and their values.
fn cm_data(cm: Option<&ConfigMap>) -> serde_json::Map<String, Value> {
    cm.and_then(|cm| cm.data.as_ref())
        .into_iter()
        .flatten()
        .filter(|(k, _)| {
            k.starts_with("resource.customizations.ignoreDifferences.")
                || k.as_str() == impersonation::ENABLED_KEY
                || k.as_str() == ARGOCD_CM_INSTALLATION_ID
                || k.as_str() == INSTANCE_LABEL_KEY
                || k.as_str() == TRACKING_METHOD_KEY
        })
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

/// Hashes JSON without serializing it.
fn hash_value(value: &Value, h: &mut impl Hasher) {
    match value {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => (1u8, b).hash(h),
        Value::Number(n) => (2u8, n.to_string()).hash(h),
        Value::String(s) => (3u8, s).hash(h),
        Value::Array(items) => {
            (4u8, items.len()).hash(h);
            items.iter().for_each(|v| hash_value(v, h));
        }
        Value::Object(map) => {
            (5u8, map.len()).hash(h);
            for (k, v) in map {
                k.hash(h);
                hash_value(v, h);
            }
        }
    }
}

fn uid(object: &DynamicObject) -> Option<&str> {
    object.metadata.uid.as_deref()
}

fn report(errors: impl IntoIterator<Item = SourceError>) {
    for e in errors {
        tracing::warn!(error = %e, "a GitOps source was left out");
    }
}

impl SourceCache {
    pub fn new(argocd_namespace: &str) -> Self {
        Self::for_cluster(argocd_namespace, ThisCluster::default())
    }

    /// A cache of an Argo CD that knows this cluster by `this_cluster` (a
    /// hub's, in a fleet).
    pub fn for_cluster(argocd_namespace: &str, this_cluster: ThisCluster) -> Self {
        Self {
            argocd_watched: true,
            argocd_namespace: argocd_namespace.to_owned(),
            this_cluster,
            ..Self::default()
        }
    }

    /// A cache of Flux alone: its snapshot holds no Argo CD installation.
    pub fn without_argocd(mut self) -> Self {
        self.argocd_watched = false;
        self
    }

    /// Reads Flux from a hub that reaches this cluster through the kubeconfig
    /// Secrets named `secrets`.
    pub fn with_hub_flux(mut self, secrets: Vec<String>) -> Self {
        self.flux_secrets = Some(secrets);
        self
    }

    /// The caps on what each source, namespace and all may cost.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.budget = Ledger::new(limits);
        self
    }

    /// Objects of `kind` refused by `cap`.
    pub fn refused(&self, kind: Kind, cap: Cap) -> usize {
        self.refused.values().filter(|r| **r == (kind, cap)).count()
    }

    /// The bytes charged for every object held.
    pub fn charged(&self) -> usize {
        self.budget.total()
    }

    /// Flux runs with `--default-service-account=name` (multi-tenancy
    /// lockdown): what a Kustomization or HelmRelease without its own
    /// account impersonates.
    pub fn with_flux_default_service_account(mut self, name: Option<String>) -> Self {
        self.flux_default_account = name.filter(|n| !n.is_empty());
        self
    }

    /// Whether a Kustomization or HelmRelease applies to another cluster than
    /// this one. With any `spec.kubeConfig` Flux never uses its own
    /// cluster's client (fluxcd/pkg/runtime v0.110.3
    /// `client/impersonator.go:69-77,154-168`: the Secret's kubeconfig, or a
    /// cloud provider's from `configMapRef`); without one, a hub's Flux
    /// applies to the hub.
    fn flux_elsewhere(&self, source: &Value) -> bool {
        let config = source.pointer("/spec/kubeConfig").filter(|c| !c.is_null());
        let secret = config
            .and_then(|c| c.pointer("/secretRef/name"))
            .and_then(Value::as_str);
        match (&self.flux_secrets, secret) {
            (None, _) => config.is_some(),
            (Some(here), Some(secret)) => !here.iter().any(|s| s == secret),
            (Some(_), None) => true,
        }
    }

    /// An added or changed object. Returns whether the sources changed.
    /// Objects of `kind` cached (those that do not compile included).
    pub fn count(&self, kind: Kind) -> usize {
        match kind {
            Kind::Application => self.applications.len(),
            Kind::AppProject => self.projects.len(),
            Kind::Kustomization => self.kustomizations.len(),
            Kind::HelmRelease => self.helmreleases.len(),
        }
    }

    pub fn apply(&mut self, kind: Kind, object: &DynamicObject) -> bool {
        let Some(uid) = uid(object) else {
            return false;
        };
        let listing = self.listing(kind, object);
        let refusal = self.charge(kind, uid, object, listing.as_ref());
        // Content first: whether an Application counts decides whether what
        // it lists is indexed.
        let content = self.apply_content(kind, uid, object, refusal.is_some());
        let planned = match (listing, refusal) {
            (Some((_, by)), Some(wide)) => self.set_planned(uid, wide, by),
            (Some((keys, by)), None) => self.set_planned(uid, keys, by),
            (None, _) => self.forget_planned(uid),
        };
        planned || content
    }

    /// Charges `object` its estimated cost ([`source_cost`]) before it is
    /// compiled or indexed. When it is refused, returns its listing widened
    /// (at most per-source cap / 1 KiB namespaces, each key's cost under
    /// 1 KiB) and charges its strict form: without rules, that listing.
    fn charge(
        &mut self,
        kind: Kind,
        uid: &str,
        object: &DynamicObject,
        listing: Option<&(Vec<String>, Manager)>,
    ) -> Option<Vec<String>> {
        if kind == Kind::AppProject {
            return None;
        }
        let flux = kind != Kind::Application;
        let namespace = object.metadata.namespace.as_deref().unwrap_or_default();
        let name = object.metadata.name.as_deref().unwrap_or_default();
        let keys = listing.map_or(&[][..], |l| &l.0[..]);
        let lister = namespace.len() + name.len();
        let listed = source_cost::listed(keys, lister);
        let cost = source_cost::entry(flux, &object.data, true) + listed;
        // Only Argo CD's administrators write in its namespace.
        let capped = !(self.argocd_watched && namespace == self.argocd_namespace);
        let Err(cap) = self.budget.charge(uid, namespace, cost, capped) else {
            if self.refused.remove(uid).is_some() {
                tracing::info!(
                    kind = kind.as_str(),
                    namespace,
                    name,
                    cost,
                    "a GitOps source refused for its cost fits again"
                );
            }
            return None;
        };
        // An Application of a known project widens past a few namespaces to
        // what its project deploys to: constant in size, never wider.
        let project = (kind == Kind::Application).then(|| project_of(&object.data));
        let at_most = match project {
            Some(_) => REFUSED_NAMESPACES,
            None => self.budget.limits.per_source / 1024,
        };
        // Filtered by the project when indexed (`rebuild_planned`), so a
        // project that changes later moves it too.
        let wide = planned::widen(keys, at_most, project);
        let strict =
            source_cost::entry(flux, &object.data, false) + source_cost::listed(&wide, lister);
        self.budget.force(uid, namespace, strict);
        if self.refused.insert(uid.to_owned(), (kind, cap)) != Some((kind, cap)) {
            tracing::warn!(
                kind = kind.as_str(),
                namespace,
                name,
                cost,
                cap = cap.as_str(),
                limit = self.budget.limit(cap),
                "a GitOps source over its cost cap was refused: its ignore rules do not apply, and what it lists counts for whole namespaces"
            );
        }
        Some(wide)
    }

    /// The objects an Application or a Kustomization lists in its status
    /// ([`crate::policy::planned`]), and who lists them; `None` when it
    /// lists nothing here.
    fn listing(&self, kind: Kind, object: &DynamicObject) -> Option<(Vec<String>, Manager)> {
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
    fn set_planned(&mut self, uid: &str, keys: Vec<String>, by: Manager) -> bool {
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
    fn impersonates(&self, kustomization: &Value) -> bool {
        let named = kustomization
            .pointer("/spec/serviceAccountName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        named || self.flux_default_account.is_some()
    }

    fn rebuild_planned(&mut self) {
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

    /// The AppProject `name` in Argo CD's namespace, as Argo CD looks it up.
    fn project(&self, name: &str) -> Option<&AppProject> {
        self.project_list
            .iter()
            .find(|p| p.metadata.name == name && p.metadata.namespace == self.argocd_namespace)
    }

    fn forget_planned(&mut self, uid: &str) -> bool {
        let removed = self.planned.remove(uid).is_some();
        if removed {
            self.rebuild_planned();
        }
        removed
    }

    fn apply_content(
        &mut self,
        kind: Kind,
        uid: &str,
        object: &DynamicObject,
        refused: bool,
    ) -> bool {
        // Refused or not, it compiles differently.
        let hash = content_hash(object) ^ u64::from(refused);
        match kind {
            Kind::Application => {
                if self.applications.get(uid).is_some_and(|e| e.hash == hash) {
                    return false;
                }
                let entry = self.compile_app(object, hash, refused);
                let counts = entry.counts;
                let before = self.applications.insert(uid.to_owned(), entry);
                // What it lists is indexed only while it counts.
                if before.is_some_and(|e| e.counts != counts) && self.planned.contains_key(uid) {
                    self.rebuild_planned();
                }
            }
            Kind::AppProject => {
                if self.projects.get(uid).is_some_and(|e| e.hash == hash) {
                    return false;
                }
                let value = to_value(object).and_then(|v| {
                    let (mut projects, errors) = sources::app_projects(&[v]);
                    report(errors);
                    projects.pop().map(Arc::new)
                });
                self.projects.insert(uid.to_owned(), Entry { hash, value });
                self.projects_changed();
            }
            Kind::Kustomization | Kind::HelmRelease => {
                let flux_kind = if kind == Kind::Kustomization {
                    FluxKind::Kustomization
                } else {
                    FluxKind::HelmRelease
                };
                let default_account = self.flux_default_account.clone();
                // Applying elsewhere, it lends nothing here.
                let elsewhere = self.flux_elsewhere(&object.data);
                let map = self.flux_map(kind);
                if map.get(uid).is_some_and(|e| e.hash == hash) {
                    return false;
                }
                let value = to_value(object).filter(|_| !elsewhere).and_then(|mut v| {
                    if refused {
                        source_cost::without_rules(true, &mut v);
                    }
                    sources::flux_from_value(flux_kind, &v)
                        .map_err(|e| report([e]))
                        .ok()
                        .map(|s| Arc::new(s.with_default_account(default_account.as_deref())))
                });
                map.insert(uid.to_owned(), Entry { hash, value });
            }
        }
        true
    }

    /// A deleted object. Returns whether the sources changed.
    pub fn delete(&mut self, kind: Kind, object: &DynamicObject) -> bool {
        let Some(uid) = uid(object) else {
            return false;
        };
        let planned = self.forget_planned(uid);
        self.budget.release(uid);
        self.refused.remove(uid);
        let removed = match kind {
            Kind::Application => self.applications.remove(uid).is_some(),
            Kind::AppProject => {
                let removed = self.projects.remove(uid).is_some();
                if removed {
                    self.projects_changed();
                }
                removed
            }
            Kind::Kustomization | Kind::HelmRelease => self.flux_map(kind).remove(uid).is_some(),
        };
        removed || planned
    }

    /// A completed (re)list: the objects now in the cluster, and only those.
    /// Unchanged objects keep their compiled entries.
    pub fn relist(&mut self, kind: Kind, objects: &[DynamicObject]) -> bool {
        self.relist_start(kind);
        let mut changed = false;
        for object in objects {
            changed |= self.relist_apply(kind, object);
        }
        self.relist_done(kind) || changed
    }

    /// A relist of `kind` begins.
    pub fn relist_start(&mut self, kind: Kind) {
        self.relisting.insert(kind, HashSet::new());
    }

    /// One object of a relist in progress, applied now. Returns whether the
    /// sources changed.
    pub fn relist_apply(&mut self, kind: Kind, object: &DynamicObject) -> bool {
        if let Some(uid) = uid(object) {
            self.relisting
                .entry(kind)
                .or_default()
                .insert(uid.to_owned());
        }
        self.apply(kind, object)
    }

    /// The relist of `kind` is complete: what it did not list is gone.
    /// Returns whether the sources changed.
    pub fn relist_done(&mut self, kind: Kind) -> bool {
        let Some(listed) = self.relisting.remove(&kind) else {
            return false;
        };
        fn unlisted<V>(map: &BTreeMap<String, V>, listed: &HashSet<String>) -> Vec<String> {
            map.keys()
                .filter(|k| !listed.contains(k.as_str()))
                .cloned()
                .collect()
        }
        let gone = match kind {
            Kind::Application => unlisted(&self.applications, &listed),
            Kind::AppProject => unlisted(&self.projects, &listed),
            Kind::Kustomization => unlisted(&self.kustomizations, &listed),
            Kind::HelmRelease => unlisted(&self.helmreleases, &listed),
        };
        let mut changed = false;
        for uid in gone {
            changed |= self.forget_planned(&uid);
            self.budget.release(&uid);
            self.refused.remove(&uid);
            changed |= match kind {
                Kind::Application => self.applications.remove(&uid).is_some(),
                Kind::AppProject => self.projects.remove(&uid).is_some(),
                Kind::Kustomization | Kind::HelmRelease => {
                    self.flux_map(kind).remove(&uid).is_some()
                }
            };
        }
        if changed && kind == Kind::AppProject {
            self.projects_changed();
        }
        changed
    }

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

    /// The sources to publish: pointers to the compiled entries.
    pub fn snapshot(&self) -> Sources {
        let flux = |map: &BTreeMap<String, Entry<FluxSource>>| {
            map.values()
                .filter_map(|e| e.value.clone())
                .collect::<Vec<_>>()
        };
        let mut all_flux = flux(&self.kustomizations);
        all_flux.extend(flux(&self.helmreleases));
        let argocd = self.argocd_watched.then(|| ArgoCdSources {
            applications: self
                .applications
                .values()
                .filter(|e| e.counts)
                .filter_map(|e| e.app.clone())
                .collect(),
            overrides: self.overrides.clone(),
            sync_accounts: self
                .applications
                .values()
                .filter_map(|e| e.account.clone())
                .collect(),
            namespace: self.argocd_namespace.clone(),
            installation_id: self.installation_id.clone(),
            instance_label: self.instance_label.clone(),
        });
        Sources {
            argocd: argocd.into_iter().collect(),
            flux: all_flux,
            planned: self.planned_index.clone(),
            more_listers: self.more_listers.clone(),
            scopes: self.scopes.clone(),
            unread: Vec::new(),
        }
    }

    fn flux_map(&mut self, kind: Kind) -> &mut BTreeMap<String, Entry<FluxSource>> {
        if kind == Kind::HelmRelease {
            &mut self.helmreleases
        } else {
            &mut self.kustomizations
        }
    }

    fn compile_app(&self, object: &DynamicObject, hash: u64, refused: bool) -> AppEntry {
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

    /// Whether Argo CD reconciles the Application, and its sync account if so.
    fn count_in(&self, entry: &mut AppEntry) {
        let project = self.project_list.iter().find(|p| {
            p.metadata.name == entry.project && p.metadata.namespace == self.argocd_namespace
        });
        entry.counts = app_namespaces::reconciles(
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

    fn account(&self, app: &Application) -> Option<Arc<SyncAccount>> {
        impersonation::sync_accounts(
            std::slice::from_ref(app),
            &self.project_list,
            self.impersonation,
            &self.argocd_namespace,
        )
        .pop()
        .map(Arc::new)
    }

    fn projects_changed(&mut self) {
        self.project_list = self
            .projects
            .values()
            .filter_map(|e| e.value.as_deref().cloned())
            .collect();
        self.recompute_apps();
        // What each Application lists counts only where its project deploys.
        self.rebuild_planned();
    }

    /// Whether each Application counts, and its sync account: after a
    /// project, argocd-cm or argocd-cmd-params-cm change.
    fn recompute_apps(&mut self) {
        let mut applications = std::mem::take(&mut self.applications);
        let mut moved = false;
        for entry in applications.values_mut() {
            let counted = entry.counts;
            self.count_in(entry);
            moved |= entry.counts != counted;
        }
        self.applications = applications;
        if moved {
            self.rebuild_planned();
        }
    }
}

/// Records `by` as a lister of `key`: in `index` if it is the first, in
/// `more` if it is another.
pub fn add_lister(
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

/// How many namespaces a refused Application's listing names before it
/// stands for its whole project ([`planned::within_project`]).
const REFUSED_NAMESPACES: usize = 16;

/// An Application's `spec.project`, `default` when empty.
fn project_of(application: &Value) -> &str {
    application
        .pointer("/spec/project")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .unwrap_or("default")
}

/// The object as JSON, for the readers in [`sources`].
fn to_value(object: &DynamicObject) -> Option<Value> {
    serde_json::to_value(object).ok()
}

/// Drops what driftguard never reads before an object is held or hashed.
pub fn strip(object: &mut DynamicObject) {
    object.metadata.managed_fields = None;
    if let Some(data) = object.data.as_object_mut() {
        let status = data.remove("status");
        data.remove("operation");
        // All but the objects the tools list ([`planned`]), by identity only.
        if let Some(kept) = status.as_ref().and_then(listed_objects) {
            data.insert("status".into(), kept);
        }
    }
}

/// An Application's `status.resources` (group, kind, namespace and name of
/// each) and a Kustomization's `status.inventory`, without the rest.
fn listed_objects(status: &Value) -> Option<Value> {
    let mut kept = serde_json::Map::new();
    if let Some(resources) = status.get("resources").and_then(Value::as_array) {
        let identity = |r: &Value| {
            ["group", "kind", "namespace", "name"]
                .into_iter()
                .filter_map(|k| r.get(k).map(|v| (k.to_owned(), v.clone())))
                .collect::<serde_json::Map<_, _>>()
        };
        let list = resources.iter().map(|r| Value::Object(identity(r)));
        kept.insert("resources".into(), list.collect());
    }
    if let Some(inventory) = status.get("inventory") {
        kept.insert("inventory".into(), inventory.clone());
    }
    (!kept.is_empty()).then_some(Value::Object(kept))
}

#[cfg(test)]
mod tests;
