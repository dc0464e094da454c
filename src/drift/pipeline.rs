//! The decision's order, written once for every [`Change`]: the change the
//! request makes, the owner (or why it is out of scope), the mode, the
//! identity, break-glass, what changed, the verdict. A scale write is judged
//! as the update of its parent's `/spec/replicas` that it makes.
//! [`outline`] runs the same steps up to the rules for `explain`.

use serde_json::Value;

use super::inputs::{Inputs, MODE_ANNOTATION};
use super::ownership;
use super::steps::{self, ModeChoice, Owner, Rules};
use super::{
    Change, Context, DecideError, Decision, Finding, Manager, OutOfScope, Request, Verdict,
    breakglass_state, compare,
};
use crate::deadline::Stopped;
use crate::policy::Policy;
use crate::policy::Target;
use crate::policy::path::is_under;

/// The request judged on its own object (or a scale write's parent).
pub(super) fn judge(
    policy: &Policy,
    req: &Request,
    ctx: &Context,
) -> Result<Decision, DecideError> {
    let mut d = Decision::start(policy, req);
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
    let change = match Change::of(req)? {
        Ok(change) => change,
        Err(why) => return Ok(d.out_of_scope(why)),
    };
    if matches!(change, Change::Update { .. }) && !req.sub_resource.is_empty() {
        d.notes.push(format!(
            "{} subresource: judged like an update",
            req.sub_resource
        ));
    }
    Ok(judge_change(policy, req, ctx, change, d)?)
}

/// The steps for `change`, from the decision so far (`d`): also how a
/// scaler's write is judged as the scale write it causes ([`super::deputy`]).
pub(super) fn judge_change(
    policy: &Policy,
    req: &Request,
    ctx: &Context,
    change: Change,
    d: Decision,
) -> Result<Decision, Stopped> {
    let object = match change {
        Change::Create { new } => {
            let listers = steps::planned_by(policy, ctx, req, new);
            if !listers.is_empty() {
                // Each lister's own identity for it (a sync service account)
                // is exempt from its listing, no other's; the object's own
                // claims judge it too.
                let mut judged = Vec::new();
                for by in listers {
                    let mut planned = d.clone();
                    steps::set_manager(policy, ctx, &mut planned, by.clone());
                    let finding = Finding::CreatePlanned(by.to_string());
                    let planned = refused_unless_exempt(policy, ctx, req, planned, finding, "");
                    if planned.verdict == Verdict::Deny {
                        return Ok(planned);
                    }
                    judged.push(planned);
                }
                return Ok(strictest(run(policy, req, ctx, change, new, d)?, judged));
            }
            new
        }
        Change::Update { old, .. } | Change::Delete { old } => old,
        Change::Scale { old, new } => match ctx.parent {
            Some(parent) => parent,
            None => {
                let changed = scale_replicas(old) != scale_replicas(new);
                return Ok(scale_blind(policy, ctx, req, d, changed));
            }
        },
    };
    run(policy, req, ctx, change, object, d)
}

/// The steps in order, on `object`: the stored object (the new one for a
/// CREATE, a scale write's parent), which ownership is judged on. An object
/// several tools claim is judged by each, and the strictest decision stands.
fn run(
    policy: &Policy,
    req: &Request,
    ctx: &Context,
    change: Change,
    object: &Value,
    mut d: Decision,
) -> Result<Decision, Stopped> {
    let stored = Inputs::read(object, policy);
    let ctx = &steps::installation(policy, ctx, &stored, &mut d.notes);
    let owners = match steps::owners(policy, ctx, req, &stored) {
        Ok(owners) => owners,
        Err(why) => return Ok(d.out_of_scope(why)),
    };
    if !matches!(change, Change::Create { .. }) {
        set_mode(steps::mode(policy, req.namespace, Some(&stored)), &mut d);
    }
    let judge = |owner: &Owner, d| judge_as(policy, req, ctx, (change, object), &stored, owner, d);
    let Some((last, others)) = owners.split_last() else {
        return Ok(d.out_of_scope(OutOfScope::NotManaged));
    };
    let others: Vec<Decision> = others
        .iter()
        .map(|o| judge(o, d.clone()))
        .collect::<Result<_, _>>()?;
    Ok(strictest(judge(last, d)?, others))
}

/// Of the decisions of every tool that claims the object (`others`, then
/// `last`, in claim order), the one that allows least, the first among
/// equals, noting the claims.
fn strictest(last: Decision, others: Vec<Decision>) -> Decision {
    let rank = |d: &Decision| match d.verdict {
        Verdict::Allow => 0,
        Verdict::Audit => 1,
        Verdict::Warn => 2,
        Verdict::Deny => 3,
    };
    if others.is_empty() {
        return last;
    }
    let claimed: Vec<String> = others
        .iter()
        .chain([&last])
        .filter_map(|d| d.manager.as_ref().map(ToString::to_string))
        .collect();
    let mut best = last;
    for d in others.into_iter().rev() {
        if rank(&d) >= rank(&best) {
            best = d;
        }
    }
    best.notes.push(format!(
        "claimed by {}: judged by each, the strictest decision stands",
        claimed.join(" and ")
    ));
    best
}

/// The steps after ownership, for one of the object's owners.
fn judge_as(
    policy: &Policy,
    req: &Request,
    ctx: &Context,
    (change, object): (Change, &Value),
    stored: &Inputs,
    owner: &Owner,
    mut d: Decision,
) -> Result<Decision, Stopped> {
    steps::set_owner(policy, ctx, &mut d, owner);
    if steps::identity_allows(policy, ctx, req, &mut d) {
        return Ok(d);
    }
    // Read only now: most writes are a controller's, allowed above.
    let incoming = match change {
        Change::Update { new, .. } => Some(Inputs::read(new, policy)),
        _ => None,
    };
    if let (Change::Update { old, new }, Some(incoming)) = (change, &incoming)
        && steps::ends_break_glass(policy, ctx, req, (old, new), (stored, incoming), &mut d)?
    {
        return Ok(d);
    }
    // Break-glass is carried by the new object (the stored one for a DELETE
    // and a scale write), and changed against the stored one.
    let carrier = incoming.as_ref().unwrap_or(stored);
    what_changed(
        policy,
        ctx,
        req,
        (change, object),
        (stored, carrier),
        owner,
        &mut d,
    )?;
    let previous = matches!(change, Change::Update { .. } | Change::Scale { .. }).then_some(stored);
    let (user, groups) = (req.username, req.groups);
    let bg = breakglass_state::evaluate(carrier, previous, user, groups, policy, ctx.now);
    steps::apply_break_glass(policy, &mut d, bg, (previous, carrier));
    if d.finding == Finding::BreakGlass
        && let Change::Create { new } | Change::Update { new, .. } = change
        && let Some(why) = steps::unendable(new, req.group, policy)
    {
        d.finding = Finding::BreakGlassInvalid(why);
    }
    if d.finding == Finding::BreakGlass {
        breakglass_state::warn_unpaused(carrier, d.manager.as_ref(), &mut d.notes);
    }
    if let Change::Update { old, new } = change {
        compare::check_drift_record(req, (old, new), ctx.now, &mut d);
    }
    d.verdict = steps::verdict_for(&d.finding, d.mode, policy.unknown_scale_parent);
    steps::refuse_input_changes(&mut d);
    if !matches!(change, Change::Scale { .. }) {
        steps::note_argocd_server(req, &mut d);
    }
    Ok(d)
}

fn set_mode(choice: ModeChoice, d: &mut Decision) {
    d.mode = choice.mode;
    if let Some(value) = choice.ignored {
        d.notes.push(format!(
            "ignored {MODE_ANNOTATION}={value}: not enforce, warn or audit"
        ));
    }
}

/// The finding and the drifted paths: the whole object for a CREATE or a
/// DELETE, what an update changes otherwise. `read`: the stored object's
/// inputs and the new one's.
fn what_changed(
    policy: &Policy,
    ctx: &Context,
    req: &Request,
    (change, object): (Change, &Value),
    read: (&Inputs, &Inputs),
    owner: &Owner,
    d: &mut Decision,
) -> Result<(), Stopped> {
    let whole = |d: &mut Decision, finding| {
        d.finding = finding;
        d.drifted_paths = vec![String::new()];
    };
    match change {
        Change::Create { .. } => {
            whole(d, Finding::CreateWithTracking);
            d.inputs_changed = steps::carried_inputs(policy, read.0);
        }
        Change::Delete { .. } if matches!(owner, Owner::Destination(_)) => {
            whole(d, Finding::DeleteDestination);
        }
        Change::Delete { .. } => whole(d, Finding::DeleteByHand),
        Change::Update { old, new } => updated(policy, ctx, req, (old, new), read, true, d)?,
        Change::Scale { old, new } => {
            let parent = |scale| with_replicas(object, scale_replicas(scale));
            let (old, new) = (parent(old), parent(new));
            updated(policy, ctx, req, (&old, &new), read, false, d)?;
        }
    }
    Ok(())
}

/// An update's drifted paths under the rules, then `precision`. With
/// `written_here`, what a `kubectl*` field manager owns in `new` is this
/// write's (not so for a scale write's parent, which keeps the stored
/// managedFields), and it always counts.
fn updated(
    policy: &Policy,
    ctx: &Context,
    req: &Request,
    (old, new): (&Value, &Value),
    read: (&Inputs, &Inputs),
    written_here: bool,
    d: &mut Decision,
) -> Result<(), Stopped> {
    let (paths, mut always) = compare::diff(policy, ctx, req, (old, new), read, d)?;
    d.inputs_changed.clone_from(&always);
    d.finding = if paths.is_empty() {
        Finding::NoDrift
    } else {
        Finding::Drift
    };
    d.drifted_paths = paths;
    if written_here {
        always.extend(d.kubectl_written.iter().cloned());
    }
    compare::apply_precision(policy, ctx, (old, new), &always, d)
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
    if !steps::identity_allows(policy, ctx, req, &mut d) {
        d.finding = finding;
        d.drifted_paths = vec![pointer.to_owned()];
        d.inputs_changed = d.drifted_paths.clone();
        d.verdict = super::Verdict::Deny;
    }
    d
}

/// Pointer of the namespace exemption label.
const IGNORE_LABEL_POINTER: &str = "/metadata/labels/driftguard.io~1ignore";

/// A CREATE or UPDATE (through a subresource too) that labels a Namespace
/// `driftguard.io/ignore=true` where it was not: the registered
/// `namespaceSelector` would skip every write in it from then on.
fn exempts_namespace(req: &Request) -> bool {
    let exempt = |o: Option<&Value>| {
        o.and_then(|o| o.pointer(IGNORE_LABEL_POINTER))
            .and_then(Value::as_str)
            == Some("true")
    };
    req.resource_group.is_empty()
        && req.resource == "namespaces"
        && matches!(
            req.operation,
            super::Operation::Create | super::Operation::Update
        )
        && exempt(req.object)
        && !exempt(req.old_object)
}

// === scale writes ===

/// `kubectl scale` writes an `autoscaling/v1` Scale; its `spec.replicas` is
/// the parent's `/spec/replicas`: the parent with that count.
fn with_replicas(parent: &Value, replicas: Value) -> Value {
    let mut p = parent.clone();
    if let Some(spec) = p.as_object_mut().map(|o| {
        o.entry("spec")
            .or_insert_with(|| Value::Object(Default::default()))
    }) && let Some(spec) = spec.as_object_mut()
    {
        spec.insert("replicas".into(), replicas);
    }
    p
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

/// Without the parent, ownership cannot be checked. Controllers and trusted
/// identities pass; so does a write whose `/spec/replicas` every rule set
/// that could apply ignores: the policy's when no tool's record lists the
/// parent, else each lister's, when every lister is an Application in Argo
/// CD's own namespace (the strictest reading). Otherwise
/// `unknownScaleParent` (warn by default) decides, and a listed parent is
/// drift whatever it says.
fn scale_blind(
    policy: &Policy,
    ctx: &Context,
    req: &Request,
    mut d: Decision,
    replicas_changed: bool,
) -> Decision {
    if steps::identity_allows(policy, ctx, req, &mut d) || !replicas_changed {
        return d;
    }
    // A scaler's target names its kind ([`super::deputy`]); a Scale names only the resource.
    let kind = builtin_kind(req.resource_group, req.resource)
        .or((req.kind != "Scale").then_some(req.kind))
        .unwrap_or(req.resource);
    let ignores_replicas = |kind: &str, manager: Option<&Manager>| {
        let target = Target {
            group: req.resource_group,
            kind,
            name: req.name,
            namespace: req.namespace,
        };
        steps::rules(policy, ctx, &target, manager, "", &Value::Null)
            .iter()
            .any(|(_, r)| {
                r.pointers
                    .iter()
                    .any(|p| is_under("/spec/replicas", &p.to_pointer()))
            })
    };
    // Only a record a tenant cannot write lends its rules: an Application in
    // Argo CD's own namespace. A tenant's Application or Kustomization status
    // lists what it likes, and the parent's real owner may list nothing.
    let control_plane = ctx
        .argocd()
        .map_or(super::DEFAULT_ARGOCD_NAMESPACE, |a| a.namespace());
    let trusted = |m: &Manager| {
        matches!(m, Manager::ArgoCd { application_namespace, .. }
            if application_namespace.as_deref().is_none_or(|ns| ns == control_plane))
    };
    let listers = listed_parent(ctx, req);
    let ignored = match listers.as_slice() {
        [] => ignores_replicas(kind, None),
        listers => listers.iter().all(|(listed_kind, m)| {
            trusted(m) && ignores_replicas(listed_kind.unwrap_or(kind), Some(m))
        }),
    };
    if ignored {
        return d;
    }
    d.finding = Finding::UnknownParent;
    d.drifted_paths = vec!["/spec/replicas".into()];
    d.notes.push(format!(
        "parent {}/{} {} was not available: GitOps ownership not checked",
        req.resource_group, req.resource, req.name
    ));
    d.verdict = steps::verdict_for(&d.finding, d.mode, policy.unknown_scale_parent);
    // A parent the tools' records list is tracked, read or not: not allowed.
    if let Some((_, by)) = listers.first() {
        d.notes.push(format!("the parent is listed by {by}"));
        d.verdict = steps::verdict_for(&Finding::Drift, d.mode, policy.unknown_scale_parent);
    }
    d
}

/// Who lists the parent of a scale write in the tools' records, with the
/// kind the listing names (a Scale names the parent's resource, not its
/// kind: any kind of the parent's group, namespace and name matches; a
/// namespace-wide listing names none). A rare path: the parent was unreadable.
fn listed_parent<'s>(ctx: &Context<'s>, req: &Request) -> Vec<(Option<&'s str>, &'s Manager)> {
    let suffix = format!(":{}/{}", req.namespace, req.name);
    let prefix = format!("{}/", req.resource_group);
    let Some(sources) = ctx.sources else {
        return Vec::new();
    };
    sources
        .listings_in(req.namespace)
        .filter_map(|(key, by)| {
            let kind = key
                .strip_prefix(&prefix)
                .and_then(|rest| rest.strip_suffix(&suffix))
                .filter(|kind| !kind.contains([':', '/']));
            (kind.is_some() || sources.covers(key, req.namespace)).then_some((kind, by))
        })
        .collect()
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

// === explain ===

/// What a write would meet, worked out by the decision's own steps: for
/// `kubectl driftguard explain`, which shows it without writing.
#[derive(Debug)]
pub struct Outline<'a> {
    /// Who manages the object, or why the write is not judged.
    pub scope: Result<Owner<'a>, OutOfScope>,
    /// The mode a judged write meets (the stored object's annotation included).
    pub mode: ModeChoice<'a>,
    /// The rules that apply: none but the policy's when the write is not judged.
    pub rules: Rules<'a>,
    /// What the steps noted (another Argo CD installation tracks it).
    pub notes: Vec<String>,
    /// Every detector's claim on the object; each claiming tool judges a
    /// write, and the strictest decision stands.
    pub claims: Vec<ownership::Claim>,
}

/// [`Outline`] of `req`, an UPDATE of a stored object (`explain`: one that
/// leaves it as it is).
pub fn outline<'a>(
    policy: &'a Policy,
    ctx: &Context<'a>,
    req: &Request<'a>,
) -> Result<Outline<'a>, DecideError> {
    let object = req
        .old_object
        .ok_or(DecideError::MissingOldObject(req.operation.as_str()))?;
    let stored = Inputs::read(object, policy);
    let mut notes = Vec::new();
    let ctx = &steps::installation(policy, ctx, &stored, &mut notes);
    let claims = ownership::claims(&stored, &ctx.instance_labels());
    let scope = match Change::of(req)? {
        Ok(_) => steps::owners(policy, ctx, req, &stored).map(|mut owners| owners.swap_remove(0)),
        Err(why) => Err(why),
    };
    let manager = scope.as_ref().ok().map(Owner::manager);
    let (target, version) = compare::target(req, object);
    Ok(Outline {
        rules: steps::rules(policy, ctx, &target, manager.as_ref(), version, object),
        mode: steps::mode(policy, req.namespace, Some(&stored)),
        scope,
        notes,
        claims,
    })
}
