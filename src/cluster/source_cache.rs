//! The compiled GitOps sources, one entry per watched object, keyed by uid.
//! An event recompiles only its own object, and only when what driftguard
//! reads of it changed (a hash of that content): Argo CD rewrites an
//! Application's status many times a second, and its CRD has no status
//! subresource, so `metadata.generation` moves with status writes too and
//! cannot be the key. Entries are `Arc`s shared between snapshots: publishing
//! copies pointers, never rules. No client here, so the cost is measurable
//! (`examples/watch_cost.rs`). An Application Argo CD would not reconcile
//! (its namespace or AppProject does not admit it, `policy::app_namespaces`) and a
//! Flux source applying to another cluster are kept but lend nothing, so a
//! change of argocd-cmd-params-cm or of a project moves Applications in or
//! out without a relist. An Application deploying to another cluster is
//! held as its uid alone ([`foreign`]). Each object is charged its estimated cost before
//! it is compiled or indexed ([`source_cost`]); one over a cap is refused in
//! the stricter direction: it lends no ignore rule, and what it lists is
//! widened to whole namespaces, never dropped.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;
use std::sync::Arc;

use kube::api::DynamicObject;
use serde_json::Value;

mod argocd;
mod content;
mod foreign;
mod listed;

use super::source_cost::{self, Cap, Ledger, Limits};
use crate::drift::{ArgoCdSources, Listed, Manager};
use crate::policy::app_namespaces::NamespaceList;
use crate::policy::argocd::ThisCluster;
use crate::policy::ignore::RuleSet;
use crate::policy::impersonation::AppProject;
use crate::policy::planned;
use crate::sources::{self, FluxKind, FluxSource, SourceError, Sources};
use argocd::{AppEntry, counted, project_of};
pub(crate) use content::content_hash;
pub use content::strip;
pub(crate) use content::strip_foreign;
use content::to_value;
pub use foreign::FOREIGN_COST;
pub(crate) use listed::add_lister;

/// The watched kinds held as dynamic objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// An Argo CD Application.
    Application,
    /// An Argo CD AppProject.
    AppProject,
    /// A Flux Kustomization.
    Kustomization,
    /// A Flux HelmRelease.
    HelmRelease,
}

impl Kind {
    /// The kind's name, as in metrics and logs.
    pub(crate) fn as_str(self) -> &'static str {
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

/// Every watched source's compiled entry, and the cost charged for each.
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
    /// The counted Applications by name and destination, kept as they change.
    app_views: crate::drift::applications::Views,
    /// Applications of another cluster, uids alone.
    foreign: foreign::Foreign,
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
    /// Who lists each key, by uid in order: what `planned_index` and
    /// `more_listers` publish for it.
    by_key: HashMap<Arc<str>, Vec<Arc<str>>>,
    /// Every listed object and its first lister, updated by the keys of the
    /// listing that changed ([`listed`]); persistent, so that a snapshot
    /// shares it.
    planned_index: Arc<crate::drift::Index>,
    /// Listers of a key beyond `planned_index`'s.
    more_listers: Arc<Listed<Vec<Manager>>>,
    /// The projects `planned_index`'s project listings name.
    scopes: Arc<Vec<crate::drift::Scope>>,
    /// Keys published since the count was reset: what an update cost.
    #[cfg(test)]
    keys_published: usize,
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
    /// Shared with `by_key` and the index: one copy of each key.
    keys: Vec<Arc<str>>,
    by: Arc<Manager>,
    /// Its uid, shared with the index's lists.
    uid: Arc<str>,
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
    /// A cache of an Argo CD installed in `argocd_namespace` (and of Flux).
    pub fn new(argocd_namespace: &str) -> Self {
        Self::for_cluster(argocd_namespace, ThisCluster::default())
    }

    /// A cache of an Argo CD that knows this cluster by `this_cluster` (a
    /// hub's, in a fleet).
    pub(crate) fn for_cluster(argocd_namespace: &str, this_cluster: ThisCluster) -> Self {
        Self {
            argocd_watched: true,
            argocd_namespace: argocd_namespace.to_owned(),
            this_cluster,
            ..Self::default()
        }
    }

    /// A cache of Flux alone: its snapshot holds no Argo CD installation.
    pub(crate) fn without_argocd(mut self) -> Self {
        self.argocd_watched = false;
        self
    }

    /// Reads Flux from a hub that reaches this cluster through the kubeconfig
    /// Secrets named `secrets`.
    pub(crate) fn with_hub_flux(mut self, secrets: Vec<String>) -> Self {
        self.flux_secrets = Some(secrets);
        self
    }

    /// The caps on what each source, namespace and all may cost.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.budget = Ledger::new(limits);
        self
    }

    /// Objects of `kind` refused by `cap`.
    pub(crate) fn refused(&self, kind: Kind, cap: Cap) -> usize {
        self.refused.values().filter(|r| **r == (kind, cap)).count()
    }

    /// The bytes charged for every object held.
    pub fn charged(&self) -> usize {
        self.budget.total()
    }

    /// Flux runs with `--default-service-account=name` (multi-tenancy
    /// lockdown): what a Kustomization or HelmRelease without its own
    /// account impersonates.
    pub(crate) fn with_flux_default_service_account(mut self, name: Option<String>) -> Self {
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

    /// Objects of `kind` cached (those that do not compile included).
    pub(crate) fn count(&self, kind: Kind) -> usize {
        match kind {
            Kind::Application => self.applications.len() + self.foreign.uids.len(),
            Kind::AppProject => self.projects.len(),
            Kind::Kustomization => self.kustomizations.len(),
            Kind::HelmRelease => self.helmreleases.len(),
        }
    }

    /// An added or changed object. Returns whether the sources changed.
    pub fn apply(&mut self, kind: Kind, object: &DynamicObject) -> bool {
        let Some(uid) = uid(object) else {
            return false;
        };
        if let Some(changed) = self.apply_foreign(kind, uid, object) {
            return changed;
        }
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
        let listed = source_cost::listed(keys, lister) + source_cost::indexed(keys, lister);
        let cost = source_cost::entry(flux, &object.data, true) + listed;
        let capped = self.capped(namespace);
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
        // Filtered by the project when indexed (`reindex`), so a
        // project that changes later moves it too.
        let wide = planned::widen(keys, at_most, project);
        let strict = source_cost::entry(flux, &object.data, false)
            + source_cost::listed(&wide, lister)
            + source_cost::indexed(&wide, lister);
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

    /// Whether the namespace cap binds `namespace`'s sources: only Argo CD's
    /// administrators write in its namespace.
    fn capped(&self, namespace: &str) -> bool {
        !(self.argocd_watched && namespace == self.argocd_namespace)
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
                let now = (entry.counts, entry.project.clone());
                let before = self.hold_app(uid, entry);
                // What it lists is indexed only while it counts, where its
                // project deploys.
                if before.is_some_and(|e| (e.counts, e.project) != now) {
                    self.reindex_listing(uid);
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
                self.projects_changed(&[object.metadata.name.clone().unwrap_or_default()]);
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
    pub(crate) fn delete(&mut self, kind: Kind, object: &DynamicObject) -> bool {
        let Some(uid) = uid(object) else {
            return false;
        };
        let planned = self.forget_planned(uid);
        self.budget.release(uid);
        self.refused.remove(uid);
        let removed = match kind {
            Kind::Application => {
                self.foreign.uids.remove(uid);
                self.drop_app(uid)
            }
            Kind::AppProject => {
                let removed = self.projects.remove(uid).is_some();
                if removed {
                    self.projects_changed(&[object.metadata.name.clone().unwrap_or_default()]);
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
    pub(crate) fn relist_start(&mut self, kind: Kind) {
        self.relisting.insert(kind, HashSet::new());
    }

    /// One object of a relist in progress, applied now. Returns whether the
    /// sources changed.
    pub(crate) fn relist_apply(&mut self, kind: Kind, object: &DynamicObject) -> bool {
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
    pub(crate) fn relist_done(&mut self, kind: Kind) -> bool {
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
            Kind::Application => {
                let foreign = self.foreign.uids.iter();
                let gone: Vec<String> = foreign
                    .filter(|k| !listed.contains(&***k))
                    .map(|k| k.to_string())
                    .collect();
                for uid in &gone {
                    self.foreign.uids.remove(uid.as_str());
                    self.budget.release(uid);
                }
                unlisted(&self.applications, &listed)
            }
            Kind::AppProject => unlisted(&self.projects, &listed),
            Kind::Kustomization => unlisted(&self.kustomizations, &listed),
            Kind::HelmRelease => unlisted(&self.helmreleases, &listed),
        };
        let mut changed = false;
        let mut projects = Vec::new();
        for uid in gone {
            changed |= self.forget_planned(&uid);
            self.budget.release(&uid);
            self.refused.remove(&uid);
            changed |= match kind {
                Kind::Application => self.drop_app(&uid),
                Kind::AppProject => self.projects.remove(&uid).is_some_and(|e| {
                    projects.extend(e.value.map(|p| p.metadata.name.clone()));
                    true
                }),
                Kind::Kustomization | Kind::HelmRelease => {
                    self.flux_map(kind).remove(&uid).is_some()
                }
            };
        }
        if changed && kind == Kind::AppProject {
            self.projects_changed(&projects);
        }
        changed
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
            applications: crate::drift::Applications::with_views(
                self.applications
                    .values()
                    .filter_map(|e| counted(e).cloned())
                    .collect(),
                &self.app_views,
            ),
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
}

/// How many namespaces a refused Application's listing names before it
/// stands for its whole project ([`planned::within_project`]).
const REFUSED_NAMESPACES: usize = 16;

#[cfg(test)]
mod tests;
