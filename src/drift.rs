//! The decision: plain data in, a verdict out. No I/O, no clock: the caller
//! passes `now`, and the scale parent when it has one.

pub mod annotated;
pub mod atomic_maps;
pub mod breakglass;
pub mod cascade;
pub mod deputy;
pub mod excluded;
pub mod inputs;
pub mod normalize;
pub mod owned;
pub mod ownership;
pub mod reapplied;
pub mod record;
pub mod restore;

use std::collections::HashSet;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

pub use breakglass::{BreakGlass, BreakGlassUse};
pub use inputs::{Input, Inputs, MODE_ANNOTATION};
pub use ownership::Manager;

use crate::policy::argocd::DiffMode;
use crate::policy::flux::{FluxKind, FluxSource};
use crate::policy::ignore::owned_leaves;
use crate::policy::impersonation::SyncAccount;
use crate::policy::overlap::PointerSet;
use crate::policy::path::is_under;
use crate::policy::{
    Application, IgnoreRule, Mode, Policy, RuleFailure, RuleSet, Target, UnknownParent,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
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
pub struct Request<'a> {
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
    OutOfScope(String),
    Controller,
    Trusted,
    /// Only ignored fields changed.
    NoDrift,
    BreakGlass,
    Drift,
    DeleteByHand,
    /// A DELETE of a Namespace that is not itself tracked but is the
    /// destination of an Argo CD Application: pruning it is Argo CD's call.
    DeleteDestination,
    /// A DELETE of a Namespace or a CRD that is not itself managed, but would
    /// take managed objects with it ([`cascade`]), described here.
    DeleteCascade(String),
    CreateWithTracking,
    BreakGlassUnauthorized,
    BreakGlassInvalid(String),
    /// An UPDATE that only ends a break-glass ([`restore`]): expired or
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

    fn is_drift(&self) -> bool {
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

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub verdict: Verdict,
    pub finding: Finding,
    pub mode: Mode,
    pub manager: Option<Manager>,
    /// Where the manager's desired state lives (repository, path), when known.
    pub source: Option<String>,
    /// RFC 6901 pointers; `""` is the whole object (CREATE, DELETE).
    pub drifted_paths: Vec<String>,
    pub break_glass: Option<BreakGlassUse>,
    pub rule_failures: Vec<RuleFailure>,
    pub notes: Vec<String>,
    /// Drifted paths that an ignore rule would have hidden, but that Flux's
    /// kustomize-controller owns and re-applies from Git (see [`reapplied`]).
    pub reapplied: Vec<String>,
    /// Changes an ignore rule hid that a `kubectl*` field manager wrote on a
    /// Flux Kustomization's object: Flux removes or resets them
    /// ([`reapplied::cleaned_up`]).
    pub cleaned_up: Vec<String>,
    /// Every change a `kubectl*` field manager wrote on a Flux Kustomization's
    /// object, hidden by a rule or not: `precision: ownedFields` keeps them.
    pub kubectl_written: Vec<String>,
    pub dry_run: bool,
    /// The longest break-glass the policy allows, for the denial's hint;
    /// `None` when break-glass is disabled (no identity may use it).
    pub break_glass_max: Option<SignedDuration>,
    /// Drifted paths that change what driftguard or the GitOps tool reads to
    /// decide later writes: refused in every mode, warn and audit included.
    pub inputs_changed: Vec<String>,
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
}

/// What Argo CD and Flux themselves know, as plain data: read from the cluster
/// by [`crate::sources`] (`--watch-argocd`, `--watch-flux`), or built by tests.
#[derive(Debug, Default)]
pub struct Sources {
    /// Shared with the watch cache: a new snapshot copies pointers, not rules.
    pub applications: Vec<Arc<Application>>,
    /// `resource.customizations.ignoreDifferences.*` of `argocd-cm`: for every
    /// Argo CD-managed object.
    pub argocd_overrides: Arc<RuleSet>,
    pub flux: Vec<Arc<FluxSource>>,
    /// Argo CD sync impersonation (argocd-cm `application.sync.impersonation.enabled`):
    /// the service account each watched Application is synced as.
    pub argocd_sync_accounts: Vec<Arc<SyncAccount>>,
    /// Argo CD's control-plane namespace (`--argocd-namespace`), where a bare
    /// tracking name resolves; empty reads as [`DEFAULT_ARGOCD_NAMESPACE`].
    pub argocd_namespace: String,
    /// The objects the tools' records list ([`crate::policy::planned`]), as
    /// `group/Kind:namespace/name`, with who lists them: a manual CREATE of
    /// one is refused whatever it carries.
    pub planned: Arc<std::collections::HashMap<String, Manager>>,
}

/// Where Argo CD runs unless `--argocd-namespace` says otherwise.
pub const DEFAULT_ARGOCD_NAMESPACE: &str = "argocd";

impl Sources {
    /// Argo CD's control-plane namespace.
    pub fn argocd_namespace(&self) -> &str {
        if self.argocd_namespace.is_empty() {
            DEFAULT_ARGOCD_NAMESPACE
        } else {
            &self.argocd_namespace
        }
    }

    /// The Kustomization or HelmRelease that manages the object, when known.
    pub fn flux_source(&self, manager: &Manager) -> Option<&FluxSource> {
        let (kind, namespace, name) = match manager {
            Manager::FluxKustomization { namespace, name } => {
                (FluxKind::Kustomization, namespace, name)
            }
            Manager::FluxHelmRelease { namespace, name } => {
                (FluxKind::HelmRelease, namespace, name)
            }
            Manager::ArgoCd { .. } => return None,
        };
        self.flux
            .iter()
            .find(|s| s.kind == kind && &s.namespace == namespace && &s.name == name)
            .map(|s| &**s)
    }

    /// The account Argo CD syncs the managing Application as, when it impersonates one.
    pub fn argocd_sync_account(&self, manager: &Manager) -> Option<&SyncAccount> {
        let Manager::ArgoCd {
            application,
            application_namespace,
        } = manager
        else {
            return None;
        };
        self.argocd_sync_accounts
            .iter()
            .find(|a| a.is_for(application, application_namespace.as_deref()))
            .map(|a| &**a)
    }
}

/// Inputs that are not part of the request.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    pub now: Timestamp,
    /// The parent of a `…/scale` write, when the caller could read it.
    pub parent: Option<&'a Value>,
    /// What Argo CD and Flux know, read from the cluster (`--watch-argocd`, `--watch-flux`).
    pub sources: Option<&'a Sources>,
    /// The object is tracked by another Argo CD installation than the
    /// policy's (`gitops.argocd.installationID`): this instance's
    /// Applications, argocd-cm rules and sync accounts do not apply to it.
    /// Set by the decision itself; callers pass `false`.
    pub other_installation: bool,
}

pub fn decide(policy: &Policy, req: &Request, ctx: &Context) -> Result<Decision, DecideError> {
    let d = decide_object(policy, req, ctx)?;
    // A Namespace or CRD delete out of scope itself may take managed
    // objects with it; a scaler out of scope may still drive one.
    let d = cascade::guard(policy, req, ctx, d);
    deputy::judge(policy, req, ctx, d)
}

/// The write judged on its own object (or a scale write's parent).
fn decide_object(policy: &Policy, req: &Request, ctx: &Context) -> Result<Decision, DecideError> {
    let mut d = Decision {
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
    };
    let out_of_scope = |mut d: Decision, why: String| {
        d.finding = Finding::OutOfScope(why);
        Ok(d)
    };
    if exempts_namespace(req) {
        let finding = Finding::NamespaceExemption;
        return Ok(refused_unless_exempt(
            policy,
            ctx,
            req,
            d,
            finding,
            IGNORE_LABEL_POINTER,
        ));
    }
    if excluded::is_excluded(req.resource_group, req.resource) {
        return out_of_scope(d, format!("{} are never judged", req.resource));
    }
    match (req.operation, req.sub_resource) {
        (Operation::Connect, _) => return out_of_scope(d, "CONNECT is not a write".into()),
        (_, "scale") => return decide_scale(policy, req, ctx, d),
        (_, "") => {}
        // `status`, `finalize`, `ephemeralcontainers`, `resize`...: the
        // apiserver's strategies keep some of what they carry besides the
        // subresource's own fields (a Deployment's annotations, a Service's
        // labels), so what reaches the validating webhook is judged like any
        // UPDATE; `status` itself is never compared.
        (Operation::Update, sub) if carries_the_object(req) => {
            d.notes
                .push(format!("{sub} subresource: judged like an update"));
        }
        (_, other) => {
            return out_of_scope(
                d,
                format!("subresource {other} carries a {}, not the object", req.kind),
            );
        }
    }
    let op = req.operation.as_str();
    let (object, old) = match req.operation {
        Operation::Create => (
            Some(req.object.ok_or(DecideError::MissingObject(op))?),
            None,
        ),
        Operation::Update => (
            Some(req.object.ok_or(DecideError::MissingObject(op))?),
            Some(req.old_object.ok_or(DecideError::MissingOldObject(op))?),
        ),
        _ => (
            None,
            Some(req.old_object.ok_or(DecideError::MissingOldObject(op))?),
        ),
    };
    if let (Operation::Create, Some(new)) = (req.operation, object)
        && let Some(by) = planned_by(policy, ctx, req, new)
    {
        // The tool's own identity for it (a sync service account) is exempt.
        set_manager(policy, ctx, &mut d, by.clone());
        let finding = Finding::CreatePlanned(by.to_string());
        return Ok(refused_unless_exempt(policy, ctx, req, d, finding, ""));
    }
    // Ownership is judged on what is stored, or on the new object for CREATE.
    let stored = Inputs::read(old.or(object).expect("one of them is set"), policy);
    let scoped = for_installation(policy, ctx, &stored, &mut d);
    let ctx = &scoped;
    // A CREATE's ownerReference is only its own claim: an object whose Argo
    // CD tracking id names itself stays in scope whatever owner it claims
    // (children copy labels from their parent, never a tracking id that
    // names the child).
    let claims_itself = req.operation == Operation::Create
        && matches!(
            (
                stored.non_empty(Input::ArgoTrackingAnnotation),
                ownership::detect(&stored)
            ),
            (Some(_), Some(Manager::ArgoCd { .. }))
        );
    if let Some(owner) = ownership::controller_owner(&stored)
        && !claims_itself
    {
        return out_of_scope(d, format!("child of {owner}"));
    }
    let mut destination = false;
    match ownership::detect(&stored) {
        Some(manager) => {
            if let Some(why) = ownership::opted_out(&stored, &manager) {
                return out_of_scope(d, why);
            }
            set_manager(policy, ctx, &mut d, manager);
        }
        None => {
            let Some(app) = destination_application(policy, ctx, req) else {
                return out_of_scope(d, "not GitOps-managed".into());
            };
            d.source = app.describe_source();
            d.manager = Some(Manager::ArgoCd {
                application: app.name.clone(),
                application_namespace: None,
            });
            destination = true;
        }
    }
    if old.is_some() {
        d.mode = mode_from_annotation(&stored, d.mode, &mut d.notes);
    }
    if identity_allows(policy, ctx, req, &mut d) {
        return Ok(d);
    }
    let incoming = object.map(|o| Inputs::read(o, policy));
    if let (Operation::Update, Some(old), Some(new), Some(read)) =
        (req.operation, old, object, &incoming)
        && ends_break_glass(policy, ctx, req, (old, new), (&stored, read), &mut d)
    {
        return Ok(d);
    }
    let (bg_carrier, bg_previous) = match (req.operation, &incoming) {
        (Operation::Create, Some(new)) => (new, None),
        (Operation::Update, Some(new)) => (new, Some(&stored)),
        _ => (&stored, None),
    };
    let bg = breakglass::evaluate(
        bg_carrier,
        bg_previous,
        req.username,
        req.groups,
        policy,
        ctx.now,
    );
    let mut changed_inputs = Vec::new();
    let (finding, paths) = match req.operation {
        Operation::Create => (Finding::CreateWithTracking, vec![String::new()]),
        Operation::Delete if destination => (Finding::DeleteDestination, vec![String::new()]),
        Operation::Delete => (Finding::DeleteByHand, vec![String::new()]),
        _ => {
            let (old, new) = (
                old.expect("UPDATE has old"),
                object.expect("UPDATE has object"),
            );
            let read = (&stored, incoming.as_ref().expect("UPDATE has object"));
            let (paths, inputs_changed) = diff(policy, ctx, req, (old, new), read, &mut d);
            d.inputs_changed = inputs_changed.clone();
            changed_inputs = inputs_changed;
            let finding = if paths.is_empty() {
                Finding::NoDrift
            } else {
                Finding::Drift
            };
            (finding, paths)
        }
    };
    d.drifted_paths = paths;
    d.finding = finding;
    if let (Operation::Update, Some(old), Some(new_object)) = (req.operation, old, object) {
        changed_inputs.extend(d.kubectl_written.iter().cloned());
        apply_precision(policy, ctx, (old, new_object), &changed_inputs, &mut d);
    }
    apply_break_glass(&mut d, bg);
    if d.finding == Finding::BreakGlass {
        breakglass::warn_unpaused(bg_carrier, d.manager.as_ref(), &mut d.notes);
    }
    if let (Operation::Update, Some(old), Some(new)) = (req.operation, old, object) {
        check_drift_record(req, (old, new), ctx.now, &mut d);
    }
    d.verdict = verdict_for(&d.finding, d.mode, policy.unknown_scale_parent);
    refuse_input_changes(&mut d);
    note_argocd_server(req, &mut d);
    Ok(d)
}

/// The `driftguard.io/drift` record is driftguard's own: the mutating webhook
/// writes [`record::record`] for this very write. Any other change
/// to it (another user, other paths, a stale time, removed, or filled to the
/// annotation limit) is a forged record, refused in every mode.
fn check_drift_record(
    req: &Request,
    (old, new): (&Value, &Value),
    now: Timestamp,
    d: &mut Decision,
) {
    fn stored(o: &Value) -> Option<&Value> {
        o.pointer("/metadata/annotations")?
            .get(normalize::DRIFT_ANNOTATION)
    }
    let written = stored(new);
    if written == stored(old) {
        return;
    }
    let fresh = |t: &str| {
        t.parse::<Timestamp>()
            .is_ok_and(|t| now.duration_since(t).abs() < SignedDuration::from_mins(5))
    };
    let ours = written
        .and_then(Value::as_str)
        .is_some_and(|text| record::is_ours(text, req.username, &d.drifted_paths, fresh));
    if ours {
        return;
    }
    let pointer = format!(
        "/metadata/annotations/{}",
        crate::policy::path::escape(normalize::DRIFT_ANNOTATION)
    );
    d.drifted_paths.push(pointer.clone());
    d.inputs_changed.push(pointer);
    if !d.finding.is_drift() && d.finding != Finding::BreakGlass {
        d.finding = Finding::Drift;
    }
}

/// A write that changes what later writes are judged by, whatever else it
/// does: allowed for controllers and trusted identities, refused in every
/// mode for everyone else.
fn refused_unless_exempt(
    policy: &Policy,
    ctx: &Context,
    req: &Request,
    mut d: Decision,
    finding: Finding,
    pointer: &str,
) -> Decision {
    if !identity_allows(policy, ctx, req, &mut d) {
        d.finding = finding;
        d.drifted_paths = vec![pointer.to_owned()];
        d.inputs_changed = d.drifted_paths.clone();
        d.verdict = Verdict::Deny;
    }
    d
}

/// A change to a decision input is refused whatever the mode: allowed with a
/// warning, it would change how every later write is judged (plant
/// `driftguard.io/mode: audit` in warn mode, and it stays after enforce).
fn refuse_input_changes(d: &mut Decision) {
    if d.finding == Finding::Drift
        && !d.inputs_changed.is_empty()
        && matches!(d.verdict, Verdict::Warn | Verdict::Audit)
    {
        d.notes.push(format!(
            "refused in {} mode: it changes what later writes are judged by",
            d.mode.as_str()
        ));
        d.verdict = Verdict::Deny;
    }
}

/// argocd-server writes what a person did in Argo CD's UI or API (edit a
/// live manifest, run a resource action, delete a resource): say so, as the
/// denial names only its service account.
fn note_argocd_server(req: &Request, d: &mut Decision) {
    if d.finding.is_drift()
        && req.username.starts_with("system:serviceaccount:")
        && req.username.ends_with(":argocd-server")
    {
        d.notes.push(
            "argocd-server writes on behalf of Argo CD UI and API users; such an edit is a manual change: change Git, or sync"
                .into(),
        );
    }
}

/// Who lists the object a CREATE makes in the tools' records, when
/// `plannedCreates: guard`. A generated name is not yet known to anyone.
fn planned_by<'s>(
    policy: &Policy,
    ctx: &Context<'s>,
    req: &Request,
    new: &Value,
) -> Option<&'s Manager> {
    if policy.planned_creates != crate::policy::PlannedCreates::Guard {
        return None;
    }
    let planned = &ctx.sources?.planned;
    if planned.is_empty() {
        return None;
    }
    let name = new.pointer("/metadata/name").and_then(Value::as_str)?;
    let key = crate::policy::planned::key(req.group, req.kind, req.namespace, name);
    planned.get(&key).filter(|by| detects(policy, by))
}

/// Whether the policy enables `manager`'s detector: the registration sends
/// what only its records make managed (untracked CREATEs, Namespace and CRD
/// DELETEs) only then, so its records count only then.
fn detects(policy: &Policy, manager: &Manager) -> bool {
    match manager {
        Manager::ArgoCd { .. } => policy.argocd.is_some(),
        Manager::FluxKustomization { .. } | Manager::FluxHelmRelease { .. } => policy.flux,
    }
}

/// With `gitops.argocd.installationID` set, whether an Argo CD-tracked
/// object carries another installation's id (or none): Argo CD tracks an
/// object only with its own id, so this instance's Applications say nothing
/// about it. It stays judged, by the policy's own rules; the id is an input.
/// The context for the rest of the decision: `ctx`, marked
/// `other_installation` when that holds for `stored` (noted in `d`).
fn for_installation<'a>(
    policy: &Policy,
    ctx: &Context<'a>,
    stored: &Inputs,
    d: &mut Decision,
) -> Context<'a> {
    let Some(id) = policy
        .argocd
        .as_ref()
        .and_then(|a| a.installation_id.as_deref())
    else {
        return *ctx;
    };
    let theirs = stored.text(Input::ArgoInstallationId);
    let other =
        theirs != Some(id) && matches!(ownership::detect(stored), Some(Manager::ArgoCd { .. }));
    if other {
        d.notes.push(format!(
            "tracked by another Argo CD installation ({}): this installation's Applications do not apply",
            theirs.unwrap_or("no installation id")
        ));
    }
    Context {
        other_installation: other,
        ..*ctx
    }
}

/// Pointer of the namespace exemption label.
const IGNORE_LABEL_POINTER: &str = "/metadata/labels/driftguard.io~1ignore";

/// A CREATE or UPDATE (through a subresource too) that labels a Namespace
/// `driftguard.io/ignore=true` where it was not: the registered
/// `namespaceSelector` would skip every write in it from then on.
fn exempts_namespace(req: &Request) -> bool {
    let exempt = |o: Option<&Value>| {
        o.and_then(|o| o.pointer("/metadata/labels/driftguard.io~1ignore"))
            .and_then(Value::as_str)
            == Some("true")
    };
    req.resource_group.is_empty()
        && req.resource == "namespaces"
        && matches!(req.operation, Operation::Create | Operation::Update)
        && exempt(req.object)
        && !exempt(req.old_object)
}

/// An UPDATE that only ends a break-glass ([`restore::candidate`]) and leaves
/// the object in scope, with the same Flux ignore targets: allowed, recorded
/// in `d` as [`Finding::BreakGlassEnded`].
fn ends_break_glass(
    policy: &Policy,
    ctx: &Context,
    req: &Request,
    (old, new): (&Value, &Value),
    (stored, incoming): (&Inputs, &Inputs),
    d: &mut Decision,
) -> bool {
    let may_end = policy
        .break_glass
        .allowed
        .contains(req.username, req.groups);
    let Some(trimmed) = restore::candidate(old, new, stored, may_end, policy, ctx.now) else {
        return false;
    };
    let Some(manager) = d.manager.as_ref() else {
        return false;
    };
    // Removing the marker must not leave a Flux opt-out that takes the object out of scope.
    if ownership::opted_out(incoming, manager).is_some() {
        return false;
    }
    let source = ctx.sources.and_then(|s| s.flux_source(manager));
    if source.is_some_and(|s| !s.selector_changes(old, new).is_empty()) {
        return false;
    }
    let trimmed_read = Inputs::read(&trimmed, policy);
    let mut probe = d.clone();
    let (paths, _) = diff(
        policy,
        ctx,
        req,
        (&trimmed, new),
        (&trimmed_read, incoming),
        &mut probe,
    );
    if !paths.is_empty() {
        return false;
    }
    *d = probe;
    d.finding = Finding::BreakGlassEnded;
    true
}

/// Drifted paths between `old` and `new` under the rules that apply to this
/// object, and which of them are decision inputs; rule failures are recorded
/// in `d`. `read` are the objects' inputs, already read by the caller.
fn diff(
    policy: &Policy,
    ctx: &Context,
    req: &Request,
    (old, new): (&Value, &Value),
    read: (&Inputs, &Inputs),
    d: &mut Decision,
) -> (Vec<String>, Vec<String>) {
    let target = Target {
        group: req.resource_group_or_kind_group(),
        kind: kind_of(req, old),
        name: req.name,
        namespace: req.namespace,
    };
    let version = old
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let version = version.rsplit('/').next().unwrap_or_default();
    let mut rules = rules_for(policy, ctx, &target, d.manager.as_ref(), version, old);
    // Argo CD's per-resource rules, from the stored object (never the new one).
    let annotated = match d.manager {
        Some(Manager::ArgoCd { .. }) if !ctx.other_installation => annotated::rule(old),
        _ => annotated::Annotated::Absent,
    };
    let skipped = match &annotated {
        annotated::Annotated::Rule(rule, unresolved) => {
            rules.push(rule);
            (!unresolved.is_empty()).then(|| {
                format!(
                    "these pointers resolve nothing, for Argo CD as for driftguard: {unresolved:?}"
                )
            })
        }
        annotated::Annotated::Skipped(why) => Some(format!("Argo CD skips it too: {why}")),
        annotated::Annotated::Absent => None,
    };
    if let Some(why) = skipped {
        let note = format!("{} on this object: {why}", inputs::ARGO_IGNORE_DIFFERENCES);
        if !d.notes.contains(&note) {
            d.notes.push(note);
        }
    }
    let mut failures = Vec::new();
    let (old_n, new_n) = normalize::normalize_pair(old, new, &rules, &mut failures);
    let mut paths = normalize::drifted_paths(&old_n, &new_n);
    // Named even when a broader path covers it: it says what the change broke.
    let inputs_changed = input_changes(policy, ctx, d.manager.as_ref(), &rules, (old, new), read);
    let mut listed: HashSet<String> = paths.iter().cloned().collect();
    for p in &inputs_changed {
        if listed.insert(p.clone()) {
            paths.push(p.clone());
        }
    }
    // An ignore rule does not stop kustomize-controller from re-applying a
    // field it owns; only the Kustomization's own rules do.
    if let Some(flux @ Manager::FluxKustomization { .. }) = d.manager.as_ref() {
        let own = flux_rules(ctx, &target, flux, version, old);
        d.reapplied = reapplied::hidden_reverts(old, new, &paths, &own);
        paths.extend(d.reapplied.iter().cloned());
        // What Flux removes is drift under every precision: it owns nothing
        // of it before, yet reverts it.
        d.kubectl_written = reapplied::cleaned_up(old, new, &[], &own);
        let shown: PointerSet = paths.iter().map(String::as_str).collect();
        d.cleaned_up = d
            .kubectl_written
            .iter()
            .filter(|p| !shown.overlaps(p))
            .cloned()
            .collect();
        paths.extend(d.cleaned_up.iter().cloned());
    }
    // A rule usually fails on both objects alike; report each failure once.
    for f in failures {
        if !d.rule_failures.contains(&f) {
            d.rule_failures.push(f);
        }
    }
    (paths, inputs_changed)
}

/// Pointer reported when a manual write changes field ownership that an
/// ignore rule or Flux's re-apply depends on.
const MANAGED_FIELDS: &str = "/metadata/managedFields";

/// Changes to what the decision reads, which no ignore rule or ownedFields
/// partition may hide: the [`Inputs`]; the labels and annotations that the
/// managing Flux object's ignore targets select on; fields given to a
/// manager that `managedFieldsManagers` trusts (a client-chosen fieldManager
/// claiming them, which would make a later change to them ignored); and, on a
/// Kustomization's object, fields taken from kustomize-controller, or given to
/// another manager inside its fields, without changing them (which would let
/// a rule hide a later change).
fn input_changes(
    policy: &Policy,
    ctx: &Context,
    manager: Option<&Manager>,
    rules: &[&IgnoreRule],
    (old, new): (&Value, &Value),
    (old_read, new_read): (&Inputs, &Inputs),
) -> Vec<String> {
    let mut out = inputs::changes(old_read, new_read, policy);
    if let Some(source) = manager.and_then(|m| ctx.sources.and_then(|s| s.flux_source(m))) {
        out.extend(source.selector_changes(old, new));
    }
    let managers: Vec<&str> = rules
        .iter()
        .flat_map(|r| r.managers.iter().map(String::as_str))
        .collect();
    let grown = |managers: &[&str]| {
        !managers.is_empty() && !owned_leaves(new, managers).is_subset(&owned_leaves(old, managers))
    };
    // Fields given to the GitOps tool's own manager by hand: its next
    // server-side apply removes what it owns and Git lacks (replicas, say).
    let tool_grown = manager.is_some() && owned::tool_ownership_grown(old, new);
    let flux = matches!(manager, Some(Manager::FluxKustomization { .. }));
    if grown(&managers) || tool_grown || (flux && reapplied::ownership_rewritten(old, new)) {
        out.push(MANAGED_FIELDS.to_owned());
    }
    // Argo CD's legacy diff merges three ways against this record: what a
    // hand adds to it (`kubectl edit` and `kubectl apply` rewrite it), the
    // next sync deletes where Git lacks it, ignore rules or not. Server-Side
    // Diff drops the record from both sides before comparing. Flux removes
    // the record at its next apply (kustomize-controller's cleanup), so a
    // client-side `kubectl apply` that adds it is reverted in part.
    let record_counts = last_applied_counts(policy, ctx, manager);
    if matches!(
        manager,
        Some(Manager::ArgoCd { .. } | Manager::FluxKustomization { .. })
    ) && record_counts
        && let Some(pointer) = owned::last_applied_changed(old, new)
    {
        out.push(pointer);
    }
    if policy.precision == crate::policy::Precision::OwnedFields {
        for p in owned::ownership_taken(old, new, record_counts) {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// Whether the last-applied record says what the tool owns and compares:
/// not for an Argo CD Application under Server-Side Diff, which drops the
/// record from both sides and owns by its `Apply` entry (an unknown
/// Application reads as the legacy diff, the stricter reading).
fn last_applied_counts(policy: &Policy, ctx: &Context, manager: Option<&Manager>) -> bool {
    match manager {
        Some(Manager::ArgoCd {
            application,
            application_namespace,
        }) => find_application(policy, ctx, application, application_namespace.as_deref())
            .is_none_or(|a| a.diff == DiffMode::Legacy),
        _ => true,
    }
}

impl Request<'_> {
    /// The group the ignore rules match: the object's own group, which for a
    /// scale write is the parent resource's group.
    fn resource_group_or_kind_group(&self) -> &str {
        if self.sub_resource == "scale" {
            self.resource_group
        } else {
            self.group
        }
    }
}

fn kind_of<'a>(req: &'a Request, obj: &'a Value) -> &'a str {
    if req.sub_resource == "scale" {
        obj.get("kind").and_then(Value::as_str).unwrap_or(req.kind)
    } else {
        req.kind
    }
}

/// Policy rules, then what the managing tool itself ignores: the Application's
/// rules and Argo CD's resource customizations, or the Flux object's ignore rules.
fn rules_for<'p>(
    policy: &'p Policy,
    ctx: &Context<'p>,
    target: &Target,
    manager: Option<&Manager>,
    version: &str,
    obj: &Value,
) -> Vec<&'p IgnoreRule> {
    let mut rules = policy.rules.matching(target);
    match manager {
        Some(Manager::ArgoCd {
            application,
            application_namespace,
        }) => {
            if let Some(sources) = ctx.sources.filter(|_| !ctx.other_installation) {
                rules.extend(sources.argocd_overrides.matching(target));
            }
            if let Some(app) =
                find_application(policy, ctx, application, application_namespace.as_deref())
            {
                rules.extend(app.rules.matching(target));
            }
        }
        Some(flux) => rules.extend(flux_rules(ctx, target, flux, version, obj)),
        None => {}
    }
    rules
}

/// The managing Flux object's own ignore rules that apply to this object.
fn flux_rules<'p>(
    ctx: &Context<'p>,
    target: &Target,
    manager: &Manager,
    version: &str,
    obj: &Value,
) -> Vec<&'p IgnoreRule> {
    ctx.sources
        .and_then(|s| s.flux_source(manager))
        .map(|source| {
            source
                .rules
                .iter()
                .filter(|r| r.matches(target, version, obj))
                .map(|r| &r.rule)
                .collect()
        })
        .unwrap_or_default()
}

/// For a DELETE of a Namespace, an Application (from files or the cluster)
/// that deploys into it on this cluster: its objects live there, so deleting
/// the namespace by hand deletes them too.
fn destination_application<'p>(
    policy: &'p Policy,
    ctx: &Context<'p>,
    req: &Request,
) -> Option<&'p Application> {
    if req.operation != Operation::Delete
        || !req.resource_group.is_empty()
        || req.resource != "namespaces"
        || !req.sub_resource.is_empty()
    {
        return None;
    }
    let watched = ctx.sources.map_or(&[][..], |s| &s.applications[..]);
    policy
        .applications
        .iter()
        .chain(watched.iter().map(|a| &**a))
        .find(|a| a.destination_namespace.as_deref() == Some(req.name))
}

/// An Application from `--argocd-application` files, else from the cluster.
fn find_application<'p>(
    policy: &'p Policy,
    ctx: &Context<'p>,
    name: &str,
    namespace: Option<&str>,
) -> Option<&'p Application> {
    if ctx.other_installation {
        return None;
    }
    let watched = ctx.sources.map_or(&[][..], |s| &s.applications[..]);
    let control_plane = ctx
        .sources
        .map_or(DEFAULT_ARGOCD_NAMESPACE, Sources::argocd_namespace);
    policy
        .applications
        .iter()
        .chain(watched.iter().map(|a| &**a))
        .find(|a| a.tracks(name, namespace, control_plane))
}

fn set_manager(policy: &Policy, ctx: &Context, d: &mut Decision, manager: Manager) {
    d.source = match &manager {
        Manager::ArgoCd {
            application,
            application_namespace,
        } => find_application(policy, ctx, application, application_namespace.as_deref())
            .and_then(|a| a.describe_source()),
        flux => ctx
            .sources
            .and_then(|s| s.flux_source(flux))
            .and_then(|f| f.source.clone()),
    };
    d.manager = Some(manager);
}

/// The one identity check: is the writer allowed whatever it writes?
/// `Controller` for a controller identity, and for a Flux object (`manager`)
/// also exactly the service account its Kustomization or HelmRelease
/// impersonates (multi-tenancy), for an Argo CD object exactly the service
/// account Argo CD syncs its Application as (sync impersonation); `Trusted`
/// for a trusted identity; `None` otherwise. The decision calls it once the
/// manager is known; the server also calls it, without a manager, to skip
/// reading a scale parent.
pub fn exemption(
    policy: &Policy,
    sources: Option<&Sources>,
    manager: Option<&Manager>,
    username: &str,
    groups: &[String],
) -> Option<Finding> {
    let impersonated = manager.zip(sources).and_then(|(m, s)| match m {
        Manager::ArgoCd { .. } => s.argocd_sync_account(m).map(|a| &a.service_account),
        flux => s.flux_source(flux).and_then(|f| f.service_account.as_ref()),
    });
    if policy.controllers.contains(username, groups)
        || impersonated.is_some_and(|sa| sa == username)
    {
        Some(Finding::Controller)
    } else if policy.trusted.contains(username, groups) {
        Some(Finding::Trusted)
    } else {
        None
    }
}

/// [`exemption`] for this request, recorded in `d`.
fn identity_allows(policy: &Policy, ctx: &Context, req: &Request, d: &mut Decision) -> bool {
    match exemption(
        policy,
        ctx.sources.filter(|_| !ctx.other_installation),
        d.manager.as_ref(),
        req.username,
        req.groups,
    ) {
        Some(finding) => {
            d.finding = finding;
            true
        }
        None => false,
    }
}

/// The stored object's `driftguard.io/mode` annotation, never the incoming one's.
fn mode_from_annotation(stored: &Inputs, mode: Mode, notes: &mut Vec<String>) -> Mode {
    let Some(value) = stored.text(Input::Mode) else {
        return mode;
    };
    Mode::parse(value).unwrap_or_else(|| {
        notes.push(format!(
            "ignored {MODE_ANNOTATION}={value}: not enforce, warn or audit"
        ));
        mode
    })
}

/// With `precision: ownedFields`, drift is only what touches fields the GitOps
/// tool owns in the stored object; tracking metadata always counts.
fn apply_precision(
    policy: &Policy,
    ctx: &Context,
    (old, new): (&Value, &Value),
    always: &[String],
    d: &mut Decision,
) {
    if policy.precision != crate::policy::Precision::OwnedFields || d.finding != Finding::Drift {
        return;
    }
    let record_counts = last_applied_counts(policy, ctx, d.manager.as_ref());
    let owned = owned::owned_pointers(old, record_counts);
    let paths = std::mem::take(&mut d.drifted_paths);
    let (drift, other) = owned::partition(paths, &owned, always, (old, new));
    if drift.is_empty() {
        d.finding = Finding::UnownedChange;
        d.drifted_paths = other;
    } else {
        d.drifted_paths = drift;
    }
}

fn apply_break_glass(d: &mut Decision, bg: BreakGlass) {
    let annotation_paths = [breakglass::REASON, breakglass::EXPIRES]
        .map(|k| format!("/metadata/annotations/{}", crate::policy::path::escape(k)));
    match bg {
        BreakGlass::Unauthorized => {
            d.finding = Finding::BreakGlassUnauthorized;
            d.drifted_paths.extend(annotation_paths);
        }
        BreakGlass::Invalid { why, changed } if changed || d.finding.is_drift() => {
            d.finding = Finding::BreakGlassInvalid(why);
        }
        // Arming it (setting the annotations) is itself a recorded use.
        BreakGlass::Valid { used, changed } if changed || d.finding.is_drift() => {
            d.finding = Finding::BreakGlass;
            d.break_glass = Some(used);
        }
        _ => {}
    }
}

fn verdict_for(finding: &Finding, mode: Mode, unknown_parent: UnknownParent) -> Verdict {
    if !finding.is_drift() {
        return Verdict::Allow;
    }
    match mode {
        Mode::Audit => Verdict::Audit,
        Mode::Warn => Verdict::Warn,
        Mode::Enforce
            if *finding == Finding::UnknownParent && unknown_parent == UnknownParent::Warn =>
        {
            Verdict::Warn
        }
        Mode::Enforce => Verdict::Deny,
    }
}

/// `kubectl scale` writes an `autoscaling/v1` Scale; its `spec.replicas` is the
/// parent's `/spec/replicas`, judged with the parent's ownership and rules.
fn decide_scale(
    policy: &Policy,
    req: &Request,
    ctx: &Context,
    mut d: Decision,
) -> Result<Decision, DecideError> {
    let op = req.operation.as_str();
    let new = req.object.ok_or(DecideError::MissingObject(op))?;
    let old = req.old_object.ok_or(DecideError::MissingOldObject(op))?;
    let replicas = scale_replicas;
    let Some(parent) = ctx.parent else {
        return Ok(decide_scale_blind(
            policy,
            ctx,
            req,
            d,
            replicas(old) != replicas(new),
        ));
    };
    let stored = Inputs::read(parent, policy);
    let scoped = for_installation(policy, ctx, &stored, &mut d);
    let ctx = &scoped;
    if let Some(owner) = ownership::controller_owner(&stored) {
        d.finding = Finding::OutOfScope(format!("child of {owner}"));
        return Ok(d);
    }
    let Some(manager) = ownership::detect(&stored) else {
        d.finding = Finding::OutOfScope("not GitOps-managed".into());
        return Ok(d);
    };
    if let Some(why) = ownership::opted_out(&stored, &manager) {
        d.finding = Finding::OutOfScope(why);
        return Ok(d);
    }
    set_manager(policy, ctx, &mut d, manager);
    d.mode = mode_from_annotation(&stored, d.mode, &mut d.notes);
    if identity_allows(policy, ctx, req, &mut d) {
        return Ok(d);
    }
    let with_replicas = |r: Value| {
        let mut p = parent.clone();
        if let Some(spec) = p.as_object_mut().map(|o| {
            o.entry("spec")
                .or_insert_with(|| Value::Object(Default::default()))
        }) && let Some(spec) = spec.as_object_mut()
        {
            spec.insert("replicas".into(), r);
        }
        p
    };
    let (old_parent, new_parent) = (with_replicas(replicas(old)), with_replicas(replicas(new)));
    // Only spec.replicas differs between the two: the parent's inputs are both sides'.
    let read = (&stored, &stored);
    let (paths, inputs_changed) = diff(policy, ctx, req, (&old_parent, &new_parent), read, &mut d);
    d.finding = if paths.is_empty() {
        Finding::NoDrift
    } else {
        Finding::Drift
    };
    d.drifted_paths = paths;
    apply_precision(
        policy,
        ctx,
        (&old_parent, &new_parent),
        &inputs_changed,
        &mut d,
    );
    // Break-glass set earlier on the parent covers a later scale by an authorized user.
    let bg = breakglass::evaluate(
        &stored,
        Some(&stored),
        req.username,
        req.groups,
        policy,
        ctx.now,
    );
    apply_break_glass(&mut d, bg);
    if d.finding == Finding::BreakGlass {
        breakglass::warn_unpaused(&stored, d.manager.as_ref(), &mut d.notes);
    }
    d.verdict = verdict_for(&d.finding, d.mode, policy.unknown_scale_parent);
    Ok(d)
}

/// Without the parent, ownership cannot be checked. Controllers and trusted
/// identities pass, a rule ignoring `/spec/replicas` for the parent's kind
/// applies, and otherwise `unknownScaleParent` (warn by default) decides.
fn decide_scale_blind(
    policy: &Policy,
    ctx: &Context,
    req: &Request,
    mut d: Decision,
    replicas_changed: bool,
) -> Decision {
    if identity_allows(policy, ctx, req, &mut d) {
        return d;
    }
    if !replicas_changed {
        return d;
    }
    // A scaler's target names its kind ([`deputy`]); a Scale names only the resource.
    let kind = builtin_kind(req.resource_group, req.resource)
        .or((req.kind != "Scale").then_some(req.kind))
        .unwrap_or(req.resource);
    let target = Target {
        group: req.resource_group,
        kind,
        name: req.name,
        namespace: req.namespace,
    };
    let ignored = rules_for(policy, ctx, &target, None, "", &Value::Null)
        .iter()
        .any(|r| {
            r.pointers
                .iter()
                .any(|p| is_under("/spec/replicas", &p.to_pointer()))
        });
    if ignored {
        return d;
    }
    d.finding = Finding::UnknownParent;
    d.drifted_paths = vec!["/spec/replicas".into()];
    d.notes.push(format!(
        "parent {}/{} {} was not available: GitOps ownership not checked",
        req.resource_group, req.resource, req.name
    ));
    d.verdict = verdict_for(&d.finding, d.mode, policy.unknown_scale_parent);
    // A parent the tools' records list is tracked, read or not: not allowed.
    if let Some(by) = listed_parent(ctx, req) {
        d.notes.push(format!("the parent is listed by {by}"));
        d.verdict = verdict_for(&Finding::Drift, d.mode, policy.unknown_scale_parent);
    }
    d
}

/// Who lists the parent of a scale write in the tools' records. A Scale
/// names the parent's resource, not its kind: any kind of the parent's
/// group, namespace and name matches (a rare path: the parent was unreadable).
fn listed_parent<'s>(ctx: &Context<'s>, req: &Request) -> Option<&'s Manager> {
    let suffix = format!(":{}/{}", req.namespace, req.name);
    let prefix = format!("{}/", req.resource_group);
    ctx.sources?
        .planned
        .iter()
        .find(|(key, _)| key.starts_with(&prefix) && key.ends_with(&suffix))
        .map(|(_, by)| by)
}

/// A Scale's `spec.replicas`. autoscaling/v1 writes it with `omitempty`, so
/// the apiserver sends a Scale to 0 without it: absent is 0, never "unchanged".
fn scale_replicas(scale: &Value) -> Value {
    scale
        .pointer("/spec/replicas")
        .filter(|r| !r.is_null())
        .cloned()
        .unwrap_or_else(|| Value::from(0))
}

/// A subresource write whose old and new objects are the resource itself
/// (`status`, `finalize`, ...), not another kind (an Eviction, a
/// TokenRequest, a Binding), so they can be compared.
fn carries_the_object(req: &Request) -> bool {
    fn kind_of(o: Option<&Value>) -> Option<&str> {
        o?.get("kind")?.as_str()
    }
    let (new, old) = (kind_of(req.object), kind_of(req.old_object));
    new.is_some() && new == old && new == Some(req.kind)
}

fn builtin_kind(group: &str, resource: &str) -> Option<&'static str> {
    Some(match (group, resource) {
        ("apps", "deployments") => "Deployment",
        ("apps", "statefulsets") => "StatefulSet",
        ("apps", "replicasets") => "ReplicaSet",
        ("", "replicationcontrollers") => "ReplicationController",
        _ => return None,
    })
}
