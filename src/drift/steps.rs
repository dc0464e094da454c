//! The decision's steps, each written once: who manages the object (or why
//! it is out of scope), the mode, the identity, the ignore rules, break-glass
//! and the verdict. [`super::pipeline`] runs them in order for every
//! [`super::Change`]; `kubectl driftguard explain` calls the same ones to say
//! what scope, mode and rules a write of an object would meet.

use serde_json::Value;

pub(super) use super::applicable_rules::find_application;
pub(crate) use super::applicable_rules::{RuleFrom, Rules, rules};
use super::breakglass_state::{self, BreakGlass};
use super::compare;
use super::inputs::{Input, Inputs, Location};
use super::ownership::{self, Manager};
use super::{
    Context, Decision, Finding, Installation, Operation, OutOfScope, Request, Sources, Verdict,
};
use crate::deadline::Stopped;
use crate::policy::pattern::PatternSet;
use crate::policy::{Application, Mode, Policy, UnknownParent};

// === scope and owner ===

/// Who manages the object a write is judged on.
#[derive(Clone, Debug)]
pub enum Owner<'p> {
    /// Its own tracking metadata names the manager.
    Tracked(Manager),
    /// A Namespace that is not itself tracked but that this Argo CD
    /// Application deploys into, deleted: pruning it is Argo CD's call.
    Destination(&'p Application),
}

/// Which Argo CD installation tracks `stored`, by Argo CD's own rule
/// ([`ownership::installation_tracks`]): one whose `installationID`
/// (argocd-cm's; else the policy's `gitops.argocd.installationID`) is the
/// object's `installation-id`, or one without an id, which tracks every
/// object. Two Argo CDs in one cluster must set different ids; an object
/// that two watched installations would both claim, or none, gets only the
/// policy's own rules. The id read is the stored
/// object's, which a person cannot change without it being a drift itself.
/// The context for the rest of the decision, with a note in `notes` when no
/// installation applies to an Argo CD-tracked object.
pub fn installation<'a>(
    policy: &Policy,
    ctx: &Context<'a>,
    stored: &Inputs,
    notes: &mut Vec<String>,
) -> Context<'a> {
    let theirs = stored.text(Input::ArgoInstallationId);
    let policy_id = policy
        .argocd
        .as_ref()
        .and_then(|a| a.installation_id.as_deref());
    let watched = ctx.sources.map_or(&[][..], |s| &s.argocd[..]);
    let mut claiming = watched.iter().filter(|w| {
        let id = w.installation_id.as_deref().or(policy_id);
        ownership::installation_tracks(id, theirs)
    });
    let (first, second) = (claiming.next(), claiming.next());
    // The policy's own installation (its `--argocd-application` files): the
    // only one without watches, and one beside them when it has files.
    let files_id = match watched {
        [one] => policy_id.or(one.installation_id.as_deref()),
        _ => policy_id,
    };
    let files = (watched.is_empty() || !policy.applications.is_empty())
        && ownership::installation_tracks(files_id, theirs);
    let installation = match (first, second) {
        (Some(_), Some(_)) => None,
        (Some(one), None) => Some(Installation::Known {
            watched: Some(one),
            files,
        }),
        (None, _) => files.then_some(Installation::Known {
            watched: None,
            files,
        }),
    };
    if let Some(installation) = installation {
        return Context {
            installation,
            ..*ctx
        };
    }
    let claims = ownership::claims(stored, &ctx.instance_labels());
    if !claims
        .iter()
        .any(|c| matches!(c.manager, Manager::ArgoCd { .. }))
    {
        return *ctx;
    }
    let id = theirs.unwrap_or("no installation id");
    let unread = ctx.sources.is_some_and(|s| !s.unread.is_empty());
    notes.push(match second {
        // An argocd-cm not read yet has no id: its installation claims all.
        Some(_) if unread => format!(
            "tracked by Argo CD installation {id}, which an installation not read yet may be too: neither's Applications apply"
        ),
        Some(_) => format!(
            "tracked by Argo CD installation {id}, an id two watched installations share (give each argocd-cm its own installationID): neither's Applications apply"
        ),
        None => format!(
            "tracked by another Argo CD installation ({id}): this installation's Applications do not apply"
        ),
    });
    Context {
        installation: Installation::Other,
        ..*ctx
    }
}

/// Who manages `stored` (the stored object, the new one for a CREATE, a
/// scale write's parent): every manager a detector claims it for
/// ([`ownership::claims`]) that has not opted it out, each of which judges
/// the write; or why the write is out of scope: a child, an object every
/// claiming tool leaves alone, or one no tool manages.
pub fn owners<'p>(
    policy: &'p Policy,
    ctx: &Context<'p>,
    req: &Request,
    stored: &Inputs,
) -> Result<Vec<Owner<'p>>, OutOfScope> {
    let claims = ownership::claims(stored, &ctx.instance_labels());
    // On a CREATE, an ownerReference or a Flux opt-out is only the creator's
    // own word: an object whose tracking id names itself, or that carries
    // Flux's labels, stays in scope (children copy labels from their parent,
    // an instance label say, never a tracking id naming the child; Flux sets
    // its labels on the object, not on its templates).
    let create = req.operation == Operation::Create;
    let claims_itself = create
        && claims.iter().any(|c| {
            matches!(
                c.by,
                ownership::Detector::TrackingAnnotation
                    | ownership::Detector::FluxKustomizeLabels
                    | ownership::Detector::FluxHelmLabels
            )
        });
    // What the tools' records list is theirs, whatever owner it claims: a
    // person could pre-create it with one before the tool's first apply.
    let listed = || {
        let key = crate::policy::planned::key(
            req.resource_group_or_kind_group(),
            stored.kind,
            stored.namespace,
            stored.name,
        );
        ctx.sources
            .is_some_and(|s| s.listers(&key).into_iter().any(|by| detects(policy, by)))
    };
    if let Some(owner) = ownership::controller_owner(stored)
        && !claims_itself
        && !listed()
    {
        return Err(OutOfScope::ChildOf(owner));
    }
    let mut opted_out = None;
    let mut owners = Vec::with_capacity(claims.len());
    for claim in claims {
        match ownership::opted_out(stored, &claim.manager).filter(|_| !create) {
            Some(why) => opted_out = opted_out.or(Some(why)),
            None => owners.push(Owner::Tracked(claim.manager)),
        }
    }
    if !owners.is_empty() {
        return Ok(owners);
    }
    if let Some(why) = opted_out {
        return Err(OutOfScope::OptedOut(why));
    }
    destination_application(policy, ctx, req)
        .map(|app| vec![Owner::Destination(app)])
        .ok_or(OutOfScope::NotManaged)
}

impl Owner<'_> {
    pub fn manager(&self) -> Manager {
        match self {
            Owner::Tracked(manager) => manager.clone(),
            Owner::Destination(app) => Manager::ArgoCd {
                application: app.name.clone(),
                application_namespace: None,
            },
        }
    }
}

/// Records `owner` in `d`: the manager, and where its desired state lives.
pub(super) fn set_owner(policy: &Policy, ctx: &Context, d: &mut Decision, owner: &Owner) {
    match owner {
        Owner::Tracked(manager) => set_manager(policy, ctx, d, manager.clone()),
        Owner::Destination(app) => {
            d.source = app.describe_source();
            d.manager = Some(owner.manager());
        }
    }
}

pub(super) fn set_manager(policy: &Policy, ctx: &Context, d: &mut Decision, manager: Manager) {
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

/// Who lists the object a CREATE makes in the tools' records, when
/// `plannedCreates: guard`. A generated name is not yet known to anyone.
pub(super) fn planned_by<'s>(
    policy: &Policy,
    ctx: &Context<'s>,
    req: &Request,
    new: &Value,
) -> Vec<&'s Manager> {
    if policy.planned_creates != crate::policy::PlannedCreates::Guard {
        return Vec::new();
    }
    let Some(sources) = ctx.sources else {
        return Vec::new();
    };
    let Some(name) = new.pointer("/metadata/name").and_then(Value::as_str) else {
        return Vec::new();
    };
    let key = crate::policy::planned::key(req.group, req.kind, req.namespace, name);
    let mut listers = sources.listers(&key);
    listers.retain(|by| detects(policy, by));
    listers
}

/// Whether the policy enables `manager`'s detector: the registration sends
/// what only its records make managed (untracked CREATEs, Namespace and CRD
/// DELETEs) only then, so its records count only then.
pub(super) fn detects(policy: &Policy, manager: &Manager) -> bool {
    match manager {
        Manager::ArgoCd { .. } => policy.argocd.is_some(),
        Manager::FluxKustomization { .. } | Manager::FluxHelmRelease { .. } => policy.flux,
    }
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
    // Every installation's: a namespace any of them deploys into is guarded.
    let watched = ctx.sources.into_iter().flat_map(|s| &s.argocd);
    policy
        .applications
        .iter()
        .find(|a| a.destination_namespace.as_deref() == Some(req.name))
        .or_else(|| {
            watched
                .into_iter()
                .find_map(|w| w.applications.deploying_into(req.name))
        })
}

// === mode ===

/// The mode in force for an object, and where it comes from.
#[derive(Clone, Debug)]
pub struct ModeChoice<'a> {
    pub mode: Mode,
    pub from: ModeFrom<'a>,
    /// A `driftguard.io/mode` value that names no mode, ignored.
    pub ignored: Option<&'a str>,
}

#[derive(Clone, Debug)]
pub enum ModeFrom<'a> {
    /// The policy's default mode.
    Policy,
    /// The policy's first `namespaces` entry matching the namespace.
    Namespace(&'a PatternSet),
    /// The stored object's `driftguard.io/mode` annotation, this value.
    Annotation(&'a str),
}

/// The policy's mode for `namespace`, overridden by the `driftguard.io/mode`
/// annotation of the stored object (`stored`; never the incoming one's).
pub fn mode<'a>(
    policy: &'a Policy,
    namespace: &str,
    stored: Option<&Inputs<'a>>,
) -> ModeChoice<'a> {
    let (mode, from) = match policy.namespace_entry(namespace) {
        Some((names, mode)) => (mode, ModeFrom::Namespace(names)),
        None => (policy.mode, ModeFrom::Policy),
    };
    let mut choice = ModeChoice {
        mode,
        from,
        ignored: None,
    };
    if let Some(value) = stored.and_then(|s| s.text(Input::Mode)) {
        match Mode::parse(value) {
            Some(mode) => {
                choice.mode = mode;
                choice.from = ModeFrom::Annotation(value);
            }
            None => choice.ignored = Some(value),
        }
    }
    choice
}

// === identity ===

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
    installation: Installation<'_>,
    manager: Option<&Manager>,
    username: &str,
    groups: &[String],
) -> Option<Finding> {
    let impersonated = manager.zip(sources).and_then(|(m, s)| match m {
        Manager::ArgoCd { .. } => s
            .argocd_sync_account(m, installation)
            .map(|a| &a.service_account),
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
pub(super) fn identity_allows(
    policy: &Policy,
    ctx: &Context,
    req: &Request,
    d: &mut Decision,
) -> bool {
    match exemption(
        policy,
        ctx.sources,
        ctx.installation,
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

// === break-glass ===

/// An UPDATE that only ends a break-glass ([`breakglass_state::candidate`]) and leaves
/// the object in scope, with the same Flux ignore targets: allowed, recorded
/// in `d` as [`Finding::BreakGlassEnded`].
pub(super) fn ends_break_glass(
    policy: &Policy,
    ctx: &Context,
    req: &Request,
    (old, new): (&Value, &Value),
    (stored, incoming): (&Inputs, &Inputs),
    d: &mut Decision,
) -> Result<bool, Stopped> {
    let may_end = policy
        .break_glass
        .allowed
        .contains(req.username, req.groups);
    let Some(trimmed) = breakglass_state::candidate(old, new, stored, may_end, policy, ctx.now)
    else {
        return Ok(false);
    };
    let Some(manager) = d.manager.as_ref() else {
        return Ok(false);
    };
    // Removing the marker must not leave a Flux opt-out that takes the object out of scope.
    if ownership::opted_out(incoming, manager).is_some() {
        return Ok(false);
    }
    let source = ctx.sources.and_then(|s| s.flux_source(manager));
    if source.is_some_and(|s| !s.selector_changes(old, new).is_empty()) {
        return Ok(false);
    }
    let trimmed_read = Inputs::read(&trimmed, policy);
    let mut probe = d.clone();
    let (paths, _) = compare::diff(
        policy,
        ctx,
        req,
        (&trimmed, new),
        (&trimmed_read, incoming),
        &mut probe,
    )?;
    if !paths.is_empty() {
        return Ok(false);
    }
    *d = probe;
    d.finding = Finding::BreakGlassEnded;
    Ok(true)
}

/// Records break-glass in `d`. A valid one grants a write only if it leaves
/// every decision input as it was, but for the bookkeeping that ending the
/// break-glass removes ([`breakglass_state::annotations`]): a break-glass changes the
/// object, never what later writes are judged by, so nothing it allowed
/// outlives it.
pub(super) fn apply_break_glass(
    policy: &Policy,
    d: &mut Decision,
    bg: BreakGlass,
    (stored, carrier): (Option<&Inputs>, &Inputs),
) {
    match bg {
        BreakGlass::Unauthorized => {
            d.finding = Finding::BreakGlassUnauthorized;
            d.drifted_paths.extend(
                [breakglass_state::REASON, breakglass_state::EXPIRES]
                    .map(|k| format!("/metadata/annotations/{}", crate::policy::path::escape(k))),
            );
        }
        BreakGlass::Invalid { why, changed } if changed || d.finding.is_drift() => {
            d.finding = Finding::BreakGlassInvalid(why);
        }
        // Arming it (setting the annotations) is itself a recorded use.
        BreakGlass::Valid { used, changed } if changed || d.finding.is_drift() => {
            let none = Inputs::read(&Value::Null, policy);
            let uncovered = uncovered_inputs(policy, d, stored.unwrap_or(&none), carrier);
            if uncovered.is_empty() {
                d.finding = Finding::BreakGlass;
                d.break_glass = Some(used);
            } else {
                d.notes.push(format!(
                    "break-glass does not cover decision inputs ({}): they would outlive it; change them in Git",
                    uncovered.join(", ")
                ));
                d.finding = Finding::Drift;
            }
        }
        _ => {}
    }
}

/// Why a break-glass write leaves `new` armed in a way its sweeper could
/// not end: the decision, the record and the sweeper share one predicate
/// for armed ([`crate::breakglass::pause::not_armable`]), so an arming with
/// another tool's pause marker, or a marker but not both annotations, is
/// refused rather than left paused past `maxDuration`. `None` when `new`
/// carries no break-glass key, or is armed as the sweeper ends it.
pub(super) fn unendable(new: &Value, group: &str, policy: &Policy) -> Option<String> {
    let keys = [
        ("annotations", breakglass_state::REASON),
        ("annotations", breakglass_state::EXPIRES),
        ("annotations", breakglass_state::PAUSED),
        ("labels", breakglass_state::LABEL),
    ];
    keys.iter()
        .any(|(section, key)| new["metadata"][*section].get(*key).is_some())
        .then(|| crate::breakglass::pause::not_armable(new, group, policy))
        .flatten()
        .map(|why| {
            format!(
                "its sweeper could not end it ({why}); arm it with `kubectl driftguard break-glass`, which writes the pause marker driftguard gives this object's GitOps tool"
            )
        })
}

/// The inputs a break-glass write changes (a CREATE: carries) that its
/// ending does not put back. The bookkeeping the ending removes (the pause
/// marker, the label, the Flux opt-out the marker names) is covered only when
/// the write arms it whole where there was none: a marker driftguard writes,
/// with its opt-out `disabled`, and the label the sweeper finds it by. Any
/// other change to it (a marker dropped or swapped, the label taken off) would
/// leave an opt-out the ending misses, or an armed object the sweeper never sees.
fn uncovered_inputs(policy: &Policy, d: &Decision, stored: &Inputs, new: &Inputs) -> Vec<String> {
    let armed_whole = stored.get(Input::BreakGlassPaused).is_none()
        && stored
            .text(Input::BreakGlassLabel)
            .is_none_or(|l| l == "true")
        && new.text(Input::BreakGlassLabel) == Some("true")
        && new.text(Input::BreakGlassPaused).is_none_or(|marker| {
            marker == breakglass_state::SKIP_RECONCILE
                || breakglass_state::paused_annotation(marker).is_some_and(|key| {
                    let opt_out = [
                        Input::FluxReconcileAnnotation,
                        Input::HelmDriftDetectionAnnotation,
                    ]
                    .into_iter()
                    .find(|i| i.location(policy) == Some(Location::Annotation(key)));
                    opt_out.is_some_and(|i| new.text(i) == Some("disabled"))
                })
        });
    let marker = new.text(Input::BreakGlassPaused);
    let ended: Vec<String> = [Input::BreakGlassPaused, Input::BreakGlassLabel]
        .into_iter()
        .filter_map(|i| i.location(policy).map(|at| at.pointer()))
        .chain(
            marker
                .and_then(breakglass_state::paused_annotation)
                .map(|k| format!("/metadata/annotations/{}", crate::policy::path::escape(k))),
        )
        .filter(|_| armed_whole)
        .collect();
    let mut uncovered = d.inputs_changed.clone();
    uncovered.retain(|p| !ended.contains(p));
    uncovered
}

/// The inputs a CREATE carries beyond the claims (and break-glass's own
/// annotations): like a change to them, refused in every mode, or a person
/// could delete an object and create it again with `driftguard.io/mode:
/// audit` or an ignore annotation.
pub(super) fn carried_inputs(policy: &Policy, created: &Inputs) -> Vec<String> {
    Input::ALL
        .into_iter()
        .filter(|i| !i.is_break_glass() && !i.is_claim() && created.get(*i).is_some())
        .filter_map(|i| i.location(policy).map(|at| at.pointer()))
        .collect()
}

// === verdict ===

pub(super) fn verdict_for(finding: &Finding, mode: Mode, unknown_parent: UnknownParent) -> Verdict {
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

/// A change to a decision input is refused whatever the mode: allowed with a
/// warning, it would change how every later write is judged (plant
/// `driftguard.io/mode: audit` in warn mode, and it stays after enforce).
pub(super) fn refuse_input_changes(d: &mut Decision) {
    if d.finding.is_drift()
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
pub(super) fn note_argocd_server(req: &Request, d: &mut Decision) {
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
