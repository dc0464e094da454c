//! The decision: plain data in, a verdict out. No I/O, no clock: the caller
//! passes `now`, and the scale parent when it has one.

pub(crate) mod annotated;
pub mod applicable_rules;
pub mod applications;
pub(crate) mod atomic_maps;
pub(crate) mod breakglass_state;
pub(crate) mod cascade;
pub(crate) mod change;
mod compare;
pub mod deputy;
pub mod excluded;
pub mod inputs;
pub mod key_spaces;
pub(crate) mod listed;
pub mod normalize;
pub(crate) mod owned;
pub(crate) mod ownership;
pub(crate) mod pipeline;
pub(crate) mod reapplied;
pub(crate) mod record;
pub(crate) mod steps;
mod view;

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

pub use applications::Applications;
pub use breakglass_state::BreakGlassUse;
pub(crate) use change::{Change, OutOfScope};
pub(crate) use inputs::{Inputs, MODE_ANNOTATION};
pub use listed::{Index, Listed};
pub use ownership::Manager;
pub(crate) use steps::exemption;

use crate::deadline::{Deadline, Stopped};
use crate::policy::flux::{FluxKind, FluxSource};
use crate::policy::impersonation::SyncAccount;
use crate::policy::{Application, Mode, Policy, RuleFailure, RuleSet, planned};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// The parts of an admission request the decision reads.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request<'a> {
    pub operation: Operation,
    /// The object's group and kind (`request.kind`).
    pub group: &'a str,
    pub kind: &'a str,
    /// The resource and subresource (`request.resource`, `request.subResource`).
    pub resource_group: &'a str,
    pub resource: &'a str,
    pub sub_resource: &'a str,
    pub name: &'a str,
    pub namespace: &'a str,
    pub username: &'a str,
    pub groups: &'a [String],
    pub object: Option<&'a Value>,
    pub old_object: Option<&'a Value>,
    pub dry_run: bool,
}

/// What the webhook answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not drift, or allowed by identity or break-glass.
    Allow,
    /// Drift allowed with a warning (warn mode).
    Warn,
    /// Drift allowed and only recorded (audit mode).
    Audit,
    /// Drift denied (enforce mode).
    Deny,
}

impl Verdict {
    /// `allow`, `warn`, `audit` or `deny`, as logs, metrics and reports name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Warn => "warn",
            Verdict::Audit => "audit",
            Verdict::Deny => "deny",
        }
    }
}

/// Why the write is, or is not, drift.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    /// Not an object driftguard judges; the reason.
    OutOfScope(String),
    /// Written by a policy `controllers` identity, or the account the
    /// managing tool syncs as.
    Controller,
    /// Written by a policy `trusted` identity.
    Trusted,
    /// Only ignored fields changed.
    NoDrift,
    /// Drift allowed by a break-glass in force.
    BreakGlass,
    /// A manual change to a managed object.
    Drift,
    /// A manual DELETE of a managed object.
    DeleteByHand,
    /// A DELETE of a Namespace that is not itself tracked but is the
    /// destination of an Argo CD Application: pruning it is Argo CD's call.
    DeleteDestination,
    /// A DELETE of a Namespace or a CRD that is not itself managed, but would
    /// take managed objects with it (`cascade`), described here.
    DeleteCascade(String),
    /// A manual CREATE of an object carrying a GitOps tool's tracking.
    CreateWithTracking,
    /// Break-glass annotations written by an identity not allowed to.
    BreakGlassUnauthorized,
    /// Break-glass annotations that grant nothing; why.
    BreakGlassInvalid(String),
    /// An UPDATE that only ends a break-glass (`breakglass_state::candidate`): expired or
    /// invalid (anyone), or still in force (identities allowed to break glass).
    BreakGlassEnded,
    /// A `…/scale` write whose parent could not be read.
    UnknownParent,
    /// `precision: ownedFields`: only fields the GitOps tool does not own
    /// changed; allowed, and recorded by the drift annotation.
    UnownedChange,
    /// A Namespace labelled `driftguard.io/ignore=true` by hand: the webhook's
    /// `namespaceSelector` would then skip every write in it.
    NamespaceExemption,
    /// A manual CREATE of an object the GitOps tool's records list (an
    /// Application's resources, a Kustomization's inventory), named here.
    CreatePlanned(String),
    /// A scaler (HPA, ScaledObject) created or changed by hand to scale the
    /// managed object named here: the scale write it causes is drift
    /// ([`deputy`]).
    ScalerTarget(String),
}

impl Finding {
    /// The finding's stable name in logs, metrics and the response.
    pub fn code(&self) -> &'static str {
        match self {
            Finding::OutOfScope(_) => "out-of-scope",
            Finding::Controller => "controller",
            Finding::Trusted => "trusted",
            Finding::NoDrift => "no-drift",
            Finding::BreakGlass => "break-glass",
            Finding::Drift => "drift",
            Finding::DeleteByHand => "manual-delete",
            Finding::DeleteDestination => "manual-delete-destination",
            Finding::DeleteCascade(_) => "manual-delete-cascade",
            Finding::CreateWithTracking => "manual-create",
            Finding::BreakGlassUnauthorized => "break-glass-unauthorized",
            Finding::BreakGlassInvalid(_) => "break-glass-invalid",
            Finding::BreakGlassEnded => "break-glass-ended",
            Finding::UnknownParent => "scale-parent-unknown",
            Finding::UnownedChange => "unowned-change",
            Finding::NamespaceExemption => "namespace-exemption",
            Finding::CreatePlanned(_) => "manual-create-planned",
            Finding::ScalerTarget(_) => "scaler-on-managed",
        }
    }

    pub(crate) fn is_drift(&self) -> bool {
        matches!(
            self,
            Finding::Drift
                | Finding::DeleteByHand
                | Finding::DeleteDestination
                | Finding::DeleteCascade(_)
                | Finding::CreateWithTracking
                | Finding::BreakGlassUnauthorized
                | Finding::BreakGlassInvalid(_)
                | Finding::UnknownParent
                | Finding::NamespaceExemption
                | Finding::CreatePlanned(_)
                | Finding::ScalerTarget(_)
        )
    }
}

/// The outcome of judging one request, with what explains it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The answer.
    pub verdict: Verdict,
    /// Why.
    pub finding: Finding,
    /// The mode in force for the object.
    pub mode: Mode,
    /// The GitOps tool managing the object, when one does.
    pub manager: Option<Manager>,
    /// Where the manager's desired state lives (repository, path), when known.
    pub source: Option<String>,
    /// RFC 6901 pointers; `""` is the whole object (CREATE, DELETE).
    pub drifted_paths: Vec<String>,
    /// The break-glass in force, when one is.
    pub break_glass: Option<BreakGlassUse>,
    /// Ignore rules that could not be applied (and so hid nothing).
    pub rule_failures: Vec<RuleFailure>,
    /// Remarks for the user, returned as admission warnings.
    pub notes: Vec<String>,
    /// Drifted paths that an ignore rule would have hidden, but that Flux's
    /// kustomize-controller owns and re-applies from Git (see `reapplied`).
    pub reapplied: Vec<String>,
    /// Changes an ignore rule hid that a `kubectl*` field manager wrote on a
    /// Flux Kustomization's object: Flux removes or resets them
    /// (`reapplied::cleaned_up`).
    pub cleaned_up: Vec<String>,
    /// Every change a `kubectl*` field manager wrote on a Flux Kustomization's
    /// object, hidden by a rule or not: `precision: ownedFields` keeps them.
    pub kubectl_written: Vec<String>,
    /// The request was a dry run.
    pub dry_run: bool,
    /// The longest break-glass the policy allows, for the denial's hint;
    /// `None` when break-glass is disabled (no identity may use it).
    pub break_glass_max: Option<SignedDuration>,
    /// Drifted paths that change what driftguard or the GitOps tool reads to
    /// decide later writes: refused in every mode, warn and audit included.
    pub inputs_changed: Vec<String>,
    /// The watched sources not read when deciding ([`Sources::unread`]).
    pub sources_unread: Vec<&'static str>,
}

/// A request the engine cannot judge (a malformed review, not a policy matter).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecideError {
    /// UPDATE and DELETE must carry the stored object.
    #[error("{0} request has no oldObject")]
    MissingOldObject(&'static str),
    /// CREATE and UPDATE must carry the new object.
    #[error("{0} request has no object")]
    MissingObject(&'static str),
    /// Not judged: stopped at a checkpoint. No answer for the request; the
    /// decider turns it into a timed-out decision or a run on its pool.
    #[error(transparent)]
    Stopped(#[from] Stopped),
}

impl DecideError {
    /// A stop apart from the request's own errors, for the decider.
    pub fn split<T>(judged: Result<T, Self>) -> Result<Result<T, Self>, Stopped> {
        match judged {
            Err(Self::Stopped(stopped)) => Err(stopped),
            other => Ok(other),
        }
    }
}

/// What Argo CD and Flux themselves know, as plain data: read from the cluster
/// by [`crate::sources`] (`--watch-argocd`, `--watch-flux`), or built by tests.
#[derive(Debug, Default)]
pub struct Sources {
    /// The Argo CD installations watched: this cluster's, a hub's, or both
    /// (`--local-argocd-namespace`), each with its own rules.
    pub argocd: Vec<ArgoCdSources>,
    /// The Flux Kustomizations and HelmReleases watched.
    pub flux: Vec<Arc<FluxSource>>,
    /// The objects the tools' records list (`policy::planned`), as
    /// `group/Kind:namespace/name`, with who lists them: a manual CREATE of
    /// one is refused whatever it carries.
    pub planned: Arc<Index>,
    /// The listers of a key in `planned` beyond the one named there: an
    /// object several tools list is judged by each (`Self::listers`).
    pub more_listers: Arc<Listed<Vec<Manager>>>,
    /// The projects the `policy::planned::within_project` listings
    /// in `planned` name, to resolve them with.
    pub scopes: Arc<Vec<Scope>>,
    /// Watched sources never listed yet (a hub out of reach since start), by
    /// name. What their tool would loosen is left out (ignore rules, the
    /// accounts it impersonates; `src/cluster/watch.rs`); what it would make
    /// stricter (what it lists, its instance label) cannot be known, and a
    /// Namespace or CRD delete is refused for it (`cascade`). Every
    /// decision says so.
    pub unread: Vec<&'static str>,
}

/// What a `policy::planned::within_project` listing (`key`)
/// covers: what `project` lets its Applications deploy to `here`; every
/// object while the project is not known (not read yet, or gone).
#[derive(Clone, Debug)]
pub struct Scope {
    /// The listing's key in [`Sources::planned`].
    pub key: String,
    /// The AppProject, when read.
    pub project: Option<Arc<crate::policy::impersonation::AppProject>>,
    /// Which names mean this cluster to the installation.
    pub here: crate::policy::argocd::ThisCluster,
}

impl Scope {
    fn covers(&self, key: &str) -> bool {
        self.project
            .as_ref()
            .is_none_or(|p| self.here.lets_deploy(p, key))
    }
}

/// One Argo CD installation's own rules.
#[derive(Debug, Default)]
pub struct ArgoCdSources {
    /// Shared with the watch cache: a new snapshot copies pointers, not rules.
    pub applications: Applications,
    /// `resource.customizations.ignoreDifferences.*` of `argocd-cm`: for every
    /// object this installation tracks.
    pub overrides: Arc<RuleSet>,
    /// Argo CD sync impersonation (argocd-cm `application.sync.impersonation.enabled`):
    /// the service account each watched Application is synced as.
    pub sync_accounts: Vec<Arc<SyncAccount>>,
    /// Argo CD's control-plane namespace (`--argocd-namespace`), where a bare
    /// tracking name resolves; empty reads as `DEFAULT_ARGOCD_NAMESPACE`.
    pub namespace: String,
    /// argocd-cm's `installationID`: this installation tracks only the
    /// objects that carry it (`ownership::installation_tracks`).
    pub installation_id: Option<String>,
    /// The label argocd-cm makes Argo CD track objects by
    /// (`application.instanceLabelKey` under label tracking), when it does.
    pub instance_label: Option<String>,
}

/// Where Argo CD runs unless `--argocd-namespace` says otherwise.
pub(crate) const DEFAULT_ARGOCD_NAMESPACE: &str = "argocd";

impl ArgoCdSources {
    /// Argo CD's control-plane namespace.
    pub fn namespace(&self) -> &str {
        if self.namespace.is_empty() {
            DEFAULT_ARGOCD_NAMESPACE
        } else {
            &self.namespace
        }
    }

    /// The account this installation syncs Application `application` as,
    /// when it impersonates one.
    fn sync_account(&self, application: &str, namespace: Option<&str>) -> Option<&SyncAccount> {
        self.sync_accounts
            .iter()
            .find(|a| a.is_for(application, namespace))
            .map(|a| &**a)
    }
}

impl Sources {
    /// Sources of one Argo CD installation, as tests and tools build them.
    pub fn of_argocd(argocd: ArgoCdSources) -> Self {
        Self {
            argocd: vec![argocd],
            ..Self::default()
        }
    }

    /// Who lists the object `key` names (`group/Kind:namespace/name`), each
    /// once: by its own entry, or by a listing that covers it (a whole
    /// namespace's, every namespace's, a project's) of a source refused for
    /// its cost (`policy::planned::widen`).
    pub(crate) fn listers(&self, key: &str) -> Vec<&Manager> {
        if self.planned.is_empty() {
            return Vec::new();
        }
        let namespace = key.split_once(':').and_then(|(_, r)| r.split_once('/'));
        let wide = planned::everything_in(namespace.map_or("", |(ns, _)| ns));
        let scopes = self.scopes.iter().filter(|s| s.covers(key));
        let keys = [key, wide.as_str(), planned::EVERYWHERE]
            .into_iter()
            .chain(scopes.map(|s| s.key.as_str()));
        let mut listers: Vec<&Manager> = Vec::new();
        for k in keys {
            let more = self.more_listers.get(k).into_iter().flatten();
            for by in self.planned.get(k).map(|m| &**m).into_iter().chain(more) {
                if !listers.contains(&by) {
                    listers.push(by);
                }
            }
        }
        listers
    }

    /// The first of [`Self::listers`].
    #[cfg(test)]
    pub(crate) fn lister(&self, key: &str) -> Option<&Manager> {
        self.listers(key).into_iter().next()
    }

    /// The listings that name `namespace` or may cover it (every
    /// namespace's, a project's), each with each of its listers: from the
    /// index by namespace, never a scan of every listing.
    pub(crate) fn listings_in(&self, namespace: &str) -> impl Iterator<Item = (&str, &Manager)> {
        // Two installations' refused Applications may share a project name.
        let mut projects: Vec<&Arc<str>> = (self.scopes.iter())
            .filter_map(|s| self.planned.get_key_value(s.key.as_str()).map(|(k, _)| k))
            .collect();
        projects.sort_unstable();
        projects.dedup();
        let keys = self.planned.in_namespace(namespace);
        let keys = keys.chain(self.planned.in_namespace(planned::ANY_NAMESPACE));
        keys.chain(projects).flat_map(|k| self.listers_at(k))
    }

    /// The listings a CRD serving `group_kinds` takes: of those kinds, and
    /// every wide listing.
    pub(crate) fn listings_of<'s>(
        &'s self,
        group_kinds: &'s [String],
    ) -> impl Iterator<Item = (&'s str, &'s Manager)> {
        let kinds = group_kinds.iter().map(String::as_str);
        kinds
            .chain([planned::ANY_KIND])
            .flat_map(|gk| self.planned.of_kind(gk))
            .flat_map(|k| self.listers_at(k))
    }

    /// `key` with each of its listers.
    fn listers_at<'s>(&'s self, key: &'s Arc<str>) -> impl Iterator<Item = (&'s str, &'s Manager)> {
        let first = self.planned.get(key).map(|m| &**m);
        let more = self.more_listers.get(key).into_iter().flatten();
        first.into_iter().chain(more).map(move |m| (&**key, m))
    }

    /// Whether the whole-namespace listing `wide` covers `namespace`
    /// (`policy::planned::covers`, and project listings).
    pub(crate) fn covers(&self, wide: &str, namespace: &str) -> bool {
        planned::covers(wide, namespace)
            || self
                .scopes
                .iter()
                .any(|s| s.key == wide && s.covers(&planned::everything_in(namespace)))
    }

    /// Every watched Application, of every installation.
    pub fn applications(&self) -> impl Iterator<Item = &Application> {
        self.argocd
            .iter()
            .flat_map(|a| a.applications.iter().map(|app| &**app))
    }

    /// The Kustomization or HelmRelease that manages the object, when known:
    /// a hub's Flux and this cluster's own can both have one of that
    /// namespace and name, and Flux's labels on the object do not say which
    /// applied it, so two are not guessed between.
    pub(crate) fn flux_source(&self, manager: &Manager) -> Option<&FluxSource> {
        let (kind, namespace, name) = match manager {
            Manager::FluxKustomization { namespace, name } => {
                (FluxKind::Kustomization, namespace, name)
            }
            Manager::FluxHelmRelease { namespace, name } => {
                (FluxKind::HelmRelease, namespace, name)
            }
            Manager::ArgoCd { .. } => return None,
        };
        let mut found = self
            .flux
            .iter()
            .filter(|s| s.kind == kind && &s.namespace == namespace && &s.name == name);
        let first = found.next()?;
        found.next().is_none().then_some(&**first)
    }

    /// The account Argo CD syncs the managing Application as, when it
    /// impersonates one: in the installation that tracks the object; before
    /// that is worked out, only when one installation alone has an account
    /// for that name (never a guess between two).
    pub(crate) fn argocd_sync_account(
        &self,
        manager: &Manager,
        installation: Installation<'_>,
    ) -> Option<&SyncAccount> {
        let Manager::ArgoCd {
            application,
            application_namespace,
        } = manager
        else {
            return None;
        };
        let namespace = application_namespace.as_deref();
        let mut found = self
            .argocd
            .iter()
            .filter(|a| match installation {
                Installation::Known { watched, .. } => watched.is_some_and(|w| std::ptr::eq(w, *a)),
                Installation::Other => false,
                Installation::Unresolved => true,
            })
            .filter_map(|a| a.sync_account(application, namespace));
        found.next().filter(|_| found.next().is_none())
    }
}

/// Which Argo CD installation's rules apply to the object: worked out by the
/// decision's first step ([`steps::installation`]) from the stored object's
/// `installation-id`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) enum Installation<'a> {
    /// Not worked out yet (what callers pass): every source counts.
    #[default]
    Unresolved,
    /// Tracked by an installation driftguard knows: the watched one, if any,
    /// and whether the policy's `--argocd-application` files count.
    Known {
        watched: Option<&'a ArgoCdSources>,
        files: bool,
    },
    /// Tracked by no installation driftguard knows, or by two it cannot tell
    /// apart: only the policy's own rules apply.
    Other,
}

/// Inputs that are not part of the request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Context<'a> {
    pub now: Timestamp,
    /// The parent of a `…/scale` write, when the caller could read it.
    pub parent: Option<&'a Value>,
    /// What Argo CD and Flux know, read from the cluster (`--watch-argocd`, `--watch-flux`).
    pub sources: Option<&'a Sources>,
    /// Which Argo CD installation tracks the object. Set by the decision
    /// itself; callers pass `Installation::Unresolved`.
    pub installation: Installation<'a>,
    /// When the decision must stop ([`crate::deadline`]): every long loop
    /// checks it and returns [`DecideError::Stopped`] past it.
    pub deadline: &'a Deadline,
}

impl<'a> Context<'a> {
    /// The watched Argo CD installation whose rules apply: the one that
    /// tracks the object; before that is worked out, the only one watched.
    pub fn argocd(&self) -> Option<&'a ArgoCdSources> {
        match self.installation {
            Installation::Known { watched, .. } => watched,
            Installation::Other => None,
            Installation::Unresolved => match &self.sources?.argocd[..] {
                [one] => Some(one),
                _ => None,
            },
        }
    }

    /// The instance labels watched argocd-cms make Argo CD track objects by:
    /// each is a claim ([`ownership::claims`]).
    pub fn instance_labels(&self) -> Vec<&'a str> {
        self.sources
            .into_iter()
            .flat_map(|s| &s.argocd)
            .filter_map(|a| a.instance_label.as_deref())
            .collect()
    }

    /// Whether the policy's `--argocd-application` files apply.
    pub fn files_apply(&self) -> bool {
        match self.installation {
            Installation::Known { files, .. } => files,
            Installation::Other => false,
            Installation::Unresolved => true,
        }
    }

    /// Tracked by an Argo CD installation driftguard does not know.
    pub fn other_installation(&self) -> bool {
        matches!(self.installation, Installation::Other)
    }
}

pub(crate) fn decide(
    policy: &Policy,
    req: &Request,
    ctx: &Context,
) -> Result<Decision, DecideError> {
    let d = pipeline::judge(policy, req, ctx)?;
    // A Namespace or CRD delete out of scope itself may take managed
    // objects with it; a scaler out of scope may still drive one.
    let d = cascade::guard(policy, req, ctx, d);
    let mut d = deputy::judge(policy, req, ctx, d)?;
    if let Some(sources) = ctx.sources {
        d.sources_unread.clone_from(&sources.unread);
    }
    Ok(d)
}

impl Decision {
    /// Where every decision starts: allowed, no drift, the namespace's mode.
    fn start(policy: &Policy, req: &Request) -> Self {
        Decision {
            verdict: Verdict::Allow,
            finding: Finding::NoDrift,
            mode: policy.mode_for_namespace(req.namespace),
            manager: None,
            source: None,
            drifted_paths: Vec::new(),
            break_glass: None,
            rule_failures: Vec::new(),
            notes: Vec::new(),
            reapplied: Vec::new(),
            cleaned_up: Vec::new(),
            kubectl_written: Vec::new(),
            dry_run: req.dry_run,
            break_glass_max: (!policy.break_glass.allowed.is_empty())
                .then_some(policy.break_glass.max_duration),
            inputs_changed: Vec::new(),
            sources_unread: Vec::new(),
        }
    }

    fn out_of_scope(mut self, why: OutOfScope) -> Self {
        self.finding = Finding::OutOfScope(why.to_string());
        self
    }
}
