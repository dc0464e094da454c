//! What an UPDATE (or a scale write, as its parent's update) changes under
//! the ignore rules that apply: the drifted paths, the decision inputs among
//! them, what Flux re-applies or removes whatever a rule says, `precision:
//! ownedFields`, and driftguard's own drift record.

use std::collections::HashSet;

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

use super::annotated::Annotated;
use super::applicable_rules::{self as rules, find_application};
use super::inputs::{self, Inputs};
use super::ownership::Manager;
use super::{Context, Decision, Finding, Request, normalize, owned, reapplied, record};
use crate::deadline::Stopped;
use crate::policy::argocd::DiffMode;
use crate::policy::ignore::owned_leaves;
use crate::policy::overlap::PointerSet;
use crate::policy::{IgnoreRule, Policy, Target};

/// Drifted paths between `old` and `new` under the rules that apply to this
/// object, and which of them are decision inputs; rule failures are recorded
/// in `d`. `read` are the objects' inputs, already read by the caller.
pub(super) fn diff(
    policy: &Policy,
    ctx: &Context,
    req: &Request,
    (old, new): (&Value, &Value),
    read: (&Inputs, &Inputs),
    d: &mut Decision,
) -> Result<(Vec<String>, Vec<String>), Stopped> {
    let (target, version) = target(req, old);
    let applying = rules::rules(policy, ctx, &target, d.manager.as_ref(), version, old);
    note_annotation(&applying.annotated, d);
    let rules: Vec<&IgnoreRule> = applying.iter().map(|(_, r)| r).collect();
    let mut failures = Vec::new();
    let mut paths = normalize::drifted_paths_under(old, new, &rules, &mut failures, ctx.deadline)?;
    // Named even when a broader path covers it: it says what the change broke.
    let inputs_changed = input_changes(policy, ctx, d.manager.as_ref(), &rules, (old, new), read)?;
    let mut listed: HashSet<String> = paths.iter().cloned().collect();
    for p in &inputs_changed {
        if listed.insert(p.clone()) {
            paths.push(p.clone());
        }
    }
    flux_reverts(ctx, (&target, version), (old, new), &mut paths, d)?;
    // A rule usually fails on both objects alike; report each failure once.
    for f in failures {
        if !d.rule_failures.contains(&f) {
            d.rule_failures.push(f);
        }
    }
    Ok((paths, inputs_changed))
}

/// What the ignore rules match for a write of `stored` (a scale write: its
/// parent), and the API version (without the group) that Flux's rule
/// targets select on.
pub(super) fn target<'a>(req: &'a Request, stored: &'a Value) -> (Target<'a>, &'a str) {
    let target = Target {
        group: req.resource_group_or_kind_group(),
        kind: kind_of(req, stored),
        name: req.name,
        namespace: req.namespace,
    };
    let version = stored
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    (target, version.rsplit('/').next().unwrap_or_default())
}

/// Why Argo CD's per-resource annotation ignores nothing, or less than it says, as a note.
fn note_annotation(annotated: &Annotated, d: &mut Decision) {
    if let Some(note) = annotated.note()
        && !d.notes.contains(&note)
    {
        d.notes.push(note);
    }
}

/// An ignore rule does not stop kustomize-controller from re-applying a
/// field it owns; only the Kustomization's own rules do. Adds those paths,
/// and what Flux removes (drift under every precision: it owns nothing of it
/// before, yet reverts it), to `paths`, and records both in `d`.
fn flux_reverts(
    ctx: &Context,
    (target, version): (&Target, &str),
    (old, new): (&Value, &Value),
    paths: &mut Vec<String>,
    d: &mut Decision,
) -> Result<(), Stopped> {
    let Some(flux @ Manager::FluxKustomization { .. }) = d.manager.as_ref() else {
        return Ok(());
    };
    let own = ctx
        .sources
        .and_then(|s| s.flux_source(flux))
        .map(|source| rules::flux_rules(source, target, version, old))
        .unwrap_or_default();
    d.reapplied = reapplied::hidden_reverts(old, new, paths, &own, ctx.deadline)?;
    paths.extend(d.reapplied.iter().cloned());
    d.kubectl_written = reapplied::cleaned_up(old, new, &[], &own, ctx.deadline)?;
    let shown: PointerSet = paths.iter().map(String::as_str).collect();
    d.cleaned_up = d
        .kubectl_written
        .iter()
        .filter(|p| !shown.overlaps(p))
        .cloned()
        .collect();
    paths.extend(d.cleaned_up.iter().cloned());
    Ok(())
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
) -> Result<Vec<String>, Stopped> {
    let deadline = ctx.deadline;
    let mut out = inputs::changes(old_read, new_read, policy);
    // A watched argocd-cm's instance label is a claim, so an input like the policy's.
    for key in ctx.instance_labels() {
        let pointer = format!("/metadata/labels/{}", crate::policy::path::escape(key));
        if old_read.raw_label(key) != new_read.raw_label(key) && !out.contains(&pointer) {
            out.push(pointer);
        }
    }
    if let Some(source) = manager.and_then(|m| ctx.sources.and_then(|s| s.flux_source(m))) {
        out.extend(source.selector_changes(old, new));
    }
    let managers: Vec<&str> = rules
        .iter()
        .flat_map(|r| r.managers.iter().map(String::as_str))
        .collect();
    let grown = !managers.is_empty()
        && !owned_leaves(new, &managers, deadline)?
            .is_subset(&owned_leaves(old, &managers, deadline)?);
    // Fields given to the GitOps tool's own manager by hand: its next
    // server-side apply removes what it owns and Git lacks (replicas, say).
    let tool_grown = manager.is_some() && owned::tool_ownership_grown(old, new, deadline)?;
    let flux = matches!(manager, Some(Manager::FluxKustomization { .. }));
    if grown || tool_grown || (flux && reapplied::ownership_rewritten(old, new, deadline)?) {
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
        // Fields handed to a manager of the writer's choosing, or to none,
        // changed or not, would look unowned to every later write; `kubectl`
        // writes move what they change to a `kubectl*` manager, not counted.
        if owned::ownership_handed_off(old, new, deadline)?
            && !out.iter().any(|p| p == MANAGED_FIELDS)
        {
            out.push(MANAGED_FIELDS.to_owned());
        }
        for p in owned::ownership_taken(old, new, record_counts, deadline)? {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    Ok(out)
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

/// With `precision: ownedFields`, drift is only what touches fields the GitOps
/// tool owns in the stored object; tracking metadata always counts.
pub(super) fn apply_precision(
    policy: &Policy,
    ctx: &Context,
    (old, new): (&Value, &Value),
    always: &[String],
    d: &mut Decision,
) -> Result<(), Stopped> {
    if policy.precision != crate::policy::Precision::OwnedFields || d.finding != Finding::Drift {
        return Ok(());
    }
    let record_counts = last_applied_counts(policy, ctx, d.manager.as_ref());
    let owned = owned::owned_pointers(old, record_counts, ctx.deadline)?;
    let paths = std::mem::take(&mut d.drifted_paths);
    let (drift, other) = owned::partition(paths, &owned, always, (old, new), ctx.deadline)?;
    if drift.is_empty() {
        d.finding = Finding::UnownedChange;
        d.drifted_paths = other;
    } else {
        d.drifted_paths = drift;
    }
    Ok(())
}

/// The `driftguard.io/drift` record is driftguard's own: the mutating webhook
/// writes [`record::record`] for this very write. Any other change
/// to it (another user, other paths, a stale time, removed, or filled to the
/// annotation limit) is a forged record, refused in every mode.
pub(super) fn check_drift_record(
    req: &Request,
    (old, new): (&Value, &Value),
    now: Timestamp,
    d: &mut Decision,
) {
    fn stored(o: &Value) -> Option<&Value> {
        o.get("metadata")?
            .get("annotations")?
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

impl Request<'_> {
    /// The group the ignore rules match: the object's own group, which for a
    /// scale write is the parent resource's group.
    pub(super) fn resource_group_or_kind_group(&self) -> &str {
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
