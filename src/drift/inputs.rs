//! Decision inputs: every label, annotation and field of an object that the
//! decision reads to settle scope, ownership, the manager, opt-outs, the mode
//! and break-glass, read in this one place.
//!
//! Why one place: whatever the decision reads from the stored object, a user
//! must not be able to change by hand in an allowed write, or a later denied
//! write becomes allowed (annotate `driftguard.io/mode=audit` under an ignored
//! `/metadata/annotations`, then edit the spec). The readers in
//! `super::ownership`, `breakglass_state` and the mode take an `Inputs`,
//! never the object, so a new input can only be added as an [`Input`] variant,
//! and `changes` compares every variant: it cannot be forgotten.

use serde_json::Value;

use super::key_spaces;
use crate::policy::Policy;
use crate::policy::path::escape;

/// The annotation, on the stored object, that overrides the mode for that object.
pub const MODE_ANNOTATION: &str = "driftguard.io/mode";

pub(crate) const ARGO_SYNC_OPTIONS: &str = "argocd.argoproj.io/sync-options";
pub(crate) const ARGO_COMPARE_OPTIONS: &str = "argocd.argoproj.io/compare-options";
pub(crate) const ARGO_IGNORE_DIFFERENCES: &str = "argocd.argoproj.io/ignore-differences";
pub(crate) const FLUX_SSA: &str = "kustomize.toolkit.fluxcd.io/ssa";
pub(crate) const FLUX_PRUNE: &str = "kustomize.toolkit.fluxcd.io/prune";
pub(crate) const FLUX_FORCE: &str = "kustomize.toolkit.fluxcd.io/force";

pub(crate) const FLUX_KUSTOMIZE_NAME: &str = "kustomize.toolkit.fluxcd.io/name";
pub(crate) const FLUX_KUSTOMIZE_NAMESPACE: &str = "kustomize.toolkit.fluxcd.io/namespace";
pub(crate) const FLUX_HELM_NAME: &str = "helm.toolkit.fluxcd.io/name";
pub(crate) const FLUX_HELM_NAMESPACE: &str = "helm.toolkit.fluxcd.io/namespace";
/// Set by `helm install/upgrade`, never by `helm template` (which Argo CD uses):
/// an instance label next to it names a Helm release, not an Argo CD application.
pub const HELM_RELEASE_ANNOTATION: &str = "meta.helm.sh/release-name";
/// Flux's per-object opt-outs (label or annotation, value `disabled`).
pub const FLUX_RECONCILE: &str = "kustomize.toolkit.fluxcd.io/reconcile";
pub(crate) const HELM_DRIFT_DETECTION: &str = "helm.toolkit.fluxcd.io/driftDetection";

/// Break-glass: why, as an annotation (`breakglass_state` judges it).
pub const BREAK_GLASS_REASON: &str = "driftguard.io/break-glass";
/// Break-glass: until when (RFC 3339), as an annotation.
pub const BREAK_GLASS_EXPIRES: &str = "driftguard.io/break-glass-expires";
/// Set by `kubectl driftguard break-glass` next to the two annotations: the
/// key of the GitOps tool's own control that it paused for this object
/// (`kustomize.toolkit.fluxcd.io/reconcile`, `helm.toolkit.fluxcd.io/driftDetection`
/// or, on the Application, `argocd.argoproj.io/skip-reconcile`), so that
/// ending the break-glass removes exactly what driftguard added.
pub const BREAK_GLASS_PAUSED: &str = "driftguard.io/break-glass-paused";
/// A label (value `true`) on every object armed by the plugin: the expiry
/// sweeper finds them with a server-side label selector.
pub const BREAK_GLASS_LABEL: &str = "driftguard.io/break-glass";

/// One thing the decision reads from an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Input {
    /// Argo CD's tracking annotation (`argocd.argoproj.io/tracking-id` by default).
    ArgoTrackingAnnotation,
    /// Argo CD's instance label (`app.kubernetes.io/instance` by default).
    ArgoInstanceLabel,
    /// `meta.helm.sh/release-name`: an instance label next to it names a Helm
    /// release, not an Argo CD Application.
    HelmReleaseAnnotation,
    /// kustomize-controller's owner labels: the Kustomization's name...
    FluxKustomizeName,
    /// ...and namespace.
    FluxKustomizeNamespace,
    /// helm-controller's owner labels: the HelmRelease's name...
    FluxHelmName,
    /// ...and namespace.
    FluxHelmNamespace,
    /// Flux's per-object opt-outs, as a label or an annotation.
    FluxReconcileLabel,
    /// `kustomize.toolkit.fluxcd.io/reconcile` as an annotation.
    FluxReconcileAnnotation,
    /// `helm.toolkit.fluxcd.io/driftDetection` as a label...
    HelmDriftDetectionLabel,
    /// ...or an annotation.
    HelmDriftDetectionAnnotation,
    /// `driftguard.io/mode`.
    Mode,
    /// The break-glass reason annotation.
    BreakGlassReason,
    /// The break-glass expiry annotation.
    BreakGlassExpires,
    /// `driftguard.io/break-glass-paused`: which GitOps control the plugin
    /// paused; while present, a Flux opt-out is driftguard's own pause and
    /// does not take the object out of scope.
    BreakGlassPaused,
    /// The `driftguard.io/break-glass` label that the expiry sweeper selects on.
    BreakGlassLabel,
    /// The ownerReference with `controller: true`: its object is a child.
    ControllerOwner,
    /// Every ownerReference: the garbage collector deletes an object whose
    /// owners are gone, so adding one hands the object to a deputy.
    OwnerReferences,
    /// `metadata.finalizers`: what blocks the tool's prune and delete.
    Finalizers,
    /// Per-object knobs the GitOps tools read from the live object, which
    /// driftguard does not read but protects: a manual change to one changes
    /// what the tool applies, prunes or compares (README, "The tools' knobs").
    /// Argo CD's `sync-options` (`Prune=false`, `Delete=false`, `Replace`...),
    /// read from the live object when pruning and deleting.
    ArgoSyncOptions,
    /// Argo CD's `compare-options` (`IgnoreExtraneous`, `ServerSideDiff`).
    ArgoCompareOptions,
    /// Argo CD's per-resource `ignore-differences` (v3.6).
    ArgoIgnoreDifferences,
    /// Argo CD's `hook`, `hook-delete-policy` and `sync-wave`: a live object
    /// marked as a hook is left out of the comparison, and waves order pruning.
    ArgoHook,
    /// Argo CD's `hook-delete-policy`.
    ArgoHookDeletePolicy,
    /// Argo CD's `sync-wave`.
    ArgoSyncWave,
    /// Argo CD's `installation-id`: which Argo CD instance tracks the object.
    ArgoInstallationId,
    /// Argo CD's `client-side-apply-migration-manager` (v3.6): which field
    /// manager's fields server-side apply takes over.
    ArgoCsaMigrationManager,
    /// kustomize-controller's `ssa` (`Ignore` on the live object stops
    /// applying it), `prune` (`disabled` on the live object stops pruning it)
    /// and `force`, each a label or an annotation (fluxcd/pkg `AnyInMetadata`).
    FluxSsaLabel,
    /// `kustomize.toolkit.fluxcd.io/ssa` as an annotation.
    FluxSsaAnnotation,
    /// `kustomize.toolkit.fluxcd.io/prune` as a label...
    FluxPruneLabel,
    /// ...or an annotation.
    FluxPruneAnnotation,
    /// `kustomize.toolkit.fluxcd.io/force` as a label...
    FluxForceLabel,
    /// ...or an annotation.
    FluxForceAnnotation,
}

/// Where an input lives in an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location<'p> {
    /// The label with this key.
    Label(&'p str),
    /// The annotation with this key.
    Annotation(&'p str),
    /// The ownerReference with `controller: true`.
    ControllerOwnerReference,
    /// `metadata.ownerReferences`.
    OwnerReferences,
    /// `metadata.finalizers`.
    Finalizers,
}

impl Location<'_> {
    /// The RFC 6901 pointer reported when the input changes.
    pub fn pointer(&self) -> String {
        match self {
            Location::Label(k) => format!("/metadata/labels/{}", escape(k)),
            Location::Annotation(k) => format!("/metadata/annotations/{}", escape(k)),
            Location::ControllerOwnerReference | Location::OwnerReferences => {
                "/metadata/ownerReferences".to_owned()
            }
            Location::Finalizers => "/metadata/finalizers".to_owned(),
        }
    }
}

impl Input {
    /// Every input. `Input::index` is an exhaustive match, so a new variant
    /// does not compile until it is placed here too (a test checks the order).
    pub const ALL: [Input; 33] = [
        Input::ArgoTrackingAnnotation,
        Input::ArgoInstanceLabel,
        Input::HelmReleaseAnnotation,
        Input::FluxKustomizeName,
        Input::FluxKustomizeNamespace,
        Input::FluxHelmName,
        Input::FluxHelmNamespace,
        Input::FluxReconcileLabel,
        Input::FluxReconcileAnnotation,
        Input::HelmDriftDetectionLabel,
        Input::HelmDriftDetectionAnnotation,
        Input::Mode,
        Input::BreakGlassReason,
        Input::BreakGlassExpires,
        Input::BreakGlassPaused,
        Input::BreakGlassLabel,
        Input::ControllerOwner,
        Input::OwnerReferences,
        Input::Finalizers,
        Input::ArgoSyncOptions,
        Input::ArgoCompareOptions,
        Input::ArgoIgnoreDifferences,
        Input::ArgoHook,
        Input::ArgoHookDeletePolicy,
        Input::ArgoSyncWave,
        Input::ArgoInstallationId,
        Input::ArgoCsaMigrationManager,
        Input::FluxSsaLabel,
        Input::FluxSsaAnnotation,
        Input::FluxPruneLabel,
        Input::FluxPruneAnnotation,
        Input::FluxForceLabel,
        Input::FluxForceAnnotation,
    ];

    pub(crate) const fn index(self) -> usize {
        match self {
            Input::ArgoTrackingAnnotation => 0,
            Input::ArgoInstanceLabel => 1,
            Input::HelmReleaseAnnotation => 2,
            Input::FluxKustomizeName => 3,
            Input::FluxKustomizeNamespace => 4,
            Input::FluxHelmName => 5,
            Input::FluxHelmNamespace => 6,
            Input::FluxReconcileLabel => 7,
            Input::FluxReconcileAnnotation => 8,
            Input::HelmDriftDetectionLabel => 9,
            Input::HelmDriftDetectionAnnotation => 10,
            Input::Mode => 11,
            Input::BreakGlassReason => 12,
            Input::BreakGlassExpires => 13,
            Input::BreakGlassPaused => 14,
            Input::BreakGlassLabel => 15,
            Input::ControllerOwner => 16,
            Input::OwnerReferences => 17,
            Input::Finalizers => 18,
            Input::ArgoSyncOptions => 19,
            Input::ArgoCompareOptions => 20,
            Input::ArgoIgnoreDifferences => 21,
            Input::ArgoHook => 22,
            Input::ArgoHookDeletePolicy => 23,
            Input::ArgoSyncWave => 24,
            Input::ArgoInstallationId => 25,
            Input::ArgoCsaMigrationManager => 26,
            Input::FluxSsaLabel => 27,
            Input::FluxSsaAnnotation => 28,
            Input::FluxPruneLabel => 29,
            Input::FluxPruneAnnotation => 30,
            Input::FluxForceLabel => 31,
            Input::FluxForceAnnotation => 32,
        }
    }

    /// Where this input lives under `policy`; `None` when its detector is off
    /// (then the decision does not read it).
    pub fn location(self, policy: &Policy) -> Option<Location<'_>> {
        let argo = policy.argocd.as_ref();
        Some(match self {
            Input::ArgoTrackingAnnotation => {
                Location::Annotation(argo?.tracking_annotation.as_str())
            }
            Input::ArgoInstanceLabel => Location::Label(argo?.instance_label.as_deref()?),
            // Read whenever Argo CD is: argocd-cm may name an instance label.
            Input::HelmReleaseAnnotation => {
                argo?;
                Location::Annotation(HELM_RELEASE_ANNOTATION)
            }
            Input::Mode => Location::Annotation(MODE_ANNOTATION),
            Input::BreakGlassReason => Location::Annotation(BREAK_GLASS_REASON),
            Input::BreakGlassExpires => Location::Annotation(BREAK_GLASS_EXPIRES),
            Input::BreakGlassPaused => Location::Annotation(BREAK_GLASS_PAUSED),
            Input::BreakGlassLabel => Location::Label(BREAK_GLASS_LABEL),
            Input::ControllerOwner => Location::ControllerOwnerReference,
            Input::OwnerReferences => Location::OwnerReferences,
            Input::Finalizers => Location::Finalizers,
            Input::ArgoSyncOptions
            | Input::ArgoCompareOptions
            | Input::ArgoIgnoreDifferences
            | Input::ArgoHook
            | Input::ArgoHookDeletePolicy
            | Input::ArgoSyncWave
            | Input::ArgoInstallationId
            | Input::ArgoCsaMigrationManager => {
                argo?;
                Location::Annotation(self.argo_annotation()?)
            }
            Input::FluxKustomizeName
            | Input::FluxKustomizeNamespace
            | Input::FluxHelmName
            | Input::FluxHelmNamespace
            | Input::FluxReconcileLabel
            | Input::FluxReconcileAnnotation
            | Input::HelmDriftDetectionLabel
            | Input::HelmDriftDetectionAnnotation
            | Input::FluxSsaLabel
            | Input::FluxSsaAnnotation
            | Input::FluxPruneLabel
            | Input::FluxPruneAnnotation
            | Input::FluxForceLabel
            | Input::FluxForceAnnotation => {
                policy.flux.then_some(())?;
                self.flux_location()?
            }
        })
    }

    /// The annotation of an Argo CD knob ([`Input::location`]).
    fn argo_annotation(self) -> Option<&'static str> {
        Some(match self {
            Input::ArgoSyncOptions => ARGO_SYNC_OPTIONS,
            Input::ArgoCompareOptions => ARGO_COMPARE_OPTIONS,
            Input::ArgoIgnoreDifferences => ARGO_IGNORE_DIFFERENCES,
            Input::ArgoHook => "argocd.argoproj.io/hook",
            Input::ArgoHookDeletePolicy => "argocd.argoproj.io/hook-delete-policy",
            Input::ArgoSyncWave => "argocd.argoproj.io/sync-wave",
            Input::ArgoInstallationId => "argocd.argoproj.io/installation-id",
            Input::ArgoCsaMigrationManager => {
                "argocd.argoproj.io/client-side-apply-migration-manager"
            }
            _ => return None,
        })
    }

    /// Where a Flux input lives ([`Input::location`]).
    fn flux_location(self) -> Option<Location<'static>> {
        Some(match self {
            Input::FluxKustomizeName => Location::Label(FLUX_KUSTOMIZE_NAME),
            Input::FluxKustomizeNamespace => Location::Label(FLUX_KUSTOMIZE_NAMESPACE),
            Input::FluxHelmName => Location::Label(FLUX_HELM_NAME),
            Input::FluxHelmNamespace => Location::Label(FLUX_HELM_NAMESPACE),
            Input::FluxReconcileLabel => Location::Label(FLUX_RECONCILE),
            Input::FluxReconcileAnnotation => Location::Annotation(FLUX_RECONCILE),
            Input::HelmDriftDetectionLabel => Location::Label(HELM_DRIFT_DETECTION),
            Input::HelmDriftDetectionAnnotation => Location::Annotation(HELM_DRIFT_DETECTION),
            Input::FluxSsaLabel => Location::Label(FLUX_SSA),
            Input::FluxSsaAnnotation => Location::Annotation(FLUX_SSA),
            Input::FluxPruneLabel => Location::Label(FLUX_PRUNE),
            Input::FluxPruneAnnotation => Location::Annotation(FLUX_PRUNE),
            Input::FluxForceLabel => Location::Label(FLUX_FORCE),
            Input::FluxForceAnnotation => Location::Annotation(FLUX_FORCE),
            _ => return None,
        })
    }

    /// What says who manages the object (and which Argo CD installation):
    /// what a CREATE under break-glass may carry.
    pub fn is_claim(self) -> bool {
        matches!(
            self,
            Input::ArgoTrackingAnnotation
                | Input::ArgoInstanceLabel
                | Input::ArgoInstallationId
                | Input::FluxKustomizeName
                | Input::FluxKustomizeNamespace
                | Input::FluxHelmName
                | Input::FluxHelmNamespace
        )
    }

    /// Break-glass inputs are changed by authorized users on purpose; they
    /// are judged by `breakglass_state::evaluate`, which makes any other change drift.
    pub fn is_break_glass(self) -> bool {
        matches!(self, Input::BreakGlassReason | Input::BreakGlassExpires)
    }
}

/// The decision inputs of one object, read once.
#[derive(Clone, Debug)]
pub(crate) struct Inputs<'a> {
    values: [Option<&'a Value>; Input::ALL.len()],
    /// The object's identity: an Argo CD tracking id must name this object.
    /// Kind, name and namespace never change in an update.
    pub kind: &'a str,
    pub name: &'a str,
    pub namespace: &'a str,
    /// The object's labels, for a claim by a label key the policy does not
    /// name (argocd-cm's `application.instanceLabelKey`).
    labels: Option<&'a Value>,
    /// The object's annotations, for the keys under a tool's key space.
    annotations: Option<&'a Value>,
    /// It has a `deletionTimestamp`: taking a finalizer off only lets a
    /// deletion already under way finish.
    deleting: bool,
}

impl<'a> Inputs<'a> {
    pub fn read(obj: &'a Value, policy: &Policy) -> Self {
        // Every input sits in one of three places: look each up once.
        let meta = obj.get("metadata");
        let (labels, annotations, owners) = (
            meta.and_then(|m| m.get("labels")),
            meta.and_then(|m| m.get("annotations")),
            meta.and_then(|m| m.get("ownerReferences")),
        );
        let mut values = [None; Input::ALL.len()];
        for input in Input::ALL {
            values[input.index()] = match input.location(policy) {
                None => None,
                Some(Location::Label(key)) => labels.and_then(|l| l.get(key)),
                Some(Location::Annotation(key)) => annotations.and_then(|a| a.get(key)),
                Some(Location::ControllerOwnerReference) => controller_owner(owners),
                Some(Location::OwnerReferences) => owners,
                Some(Location::Finalizers) => meta.and_then(|m| m.get("finalizers")),
            };
        }
        let text = |v: Option<&'a Value>| v.and_then(Value::as_str).unwrap_or_default();
        Self {
            values,
            kind: text(obj.get("kind")),
            name: text(meta.and_then(|m| m.get("name"))),
            namespace: text(meta.and_then(|m| m.get("namespace"))),
            labels,
            annotations,
            deleting: meta.is_some_and(|m| !m["deletionTimestamp"].is_null()),
        }
    }

    /// The value of label `key`, whatever the policy reads.
    pub fn label(&self, key: &str) -> Option<&'a str> {
        self.raw_label(key)?.as_str().filter(|s| !s.is_empty())
    }

    /// Label `key` as stored, empty or not a string included.
    pub fn raw_label(&self, key: &str) -> Option<&'a Value> {
        self.labels?.get(key)
    }

    /// The raw value of `input`.
    pub fn get(&self, input: Input) -> Option<&'a Value> {
        self.values[input.index()]
    }

    /// The value of a label or annotation input, as Kubernetes stores it (a string).
    pub fn text(&self, input: Input) -> Option<&'a str> {
        self.get(input).and_then(Value::as_str)
    }

    /// [`Inputs::text`] without empty values, which the detectors treat as absent.
    pub fn non_empty(&self, input: Input) -> Option<&'a str> {
        self.text(input).filter(|s| !s.is_empty())
    }
}

fn controller_owner(owners: Option<&Value>) -> Option<&Value> {
    owners?
        .as_array()?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
}

/// Pointers of the inputs that differ between the stored and the incoming
/// object: adding, changing or removing one. Break-glass inputs are left to
/// `breakglass_state::evaluate`.
pub(crate) fn changes(old: &Inputs, new: &Inputs, policy: &Policy) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for input in Input::ALL {
        if input.is_break_glass() || old.get(input) == new.get(input) {
            continue;
        }
        if input == Input::Finalizers && old.deleting && only_removed(old, new, input) {
            continue;
        }
        if let Some(pointer) = input.location(policy).map(|at| at.pointer())
            && !out.contains(&pointer)
        {
            out.push(pointer);
        }
    }
    out.extend(key_space_changes(old, new, policy));
    out
}

/// Pointers of the labels and annotations under a tool's key space
/// ([`key_spaces`]) that no named input covers and that differ.
fn key_space_changes<'a>(old: &Inputs<'a>, new: &Inputs<'a>, policy: &Policy) -> Vec<String> {
    let named: Vec<Location> = (Input::ALL.into_iter())
        .filter_map(|i| i.location(policy))
        .collect();
    let mut out = Vec::new();
    for (old_map, new_map, label) in [
        (old.labels, new.labels, true),
        (old.annotations, new.annotations, false),
    ] {
        let keys = |m: Option<&'a Value>| {
            m.and_then(Value::as_object)
                .into_iter()
                .flat_map(|o| o.keys())
        };
        let all: std::collections::BTreeSet<&String> = keys(old_map).chain(keys(new_map)).collect();
        for key in all {
            let here = match label {
                true => Location::Label(key),
                false => Location::Annotation(key),
            };
            let value = |m: Option<&'a Value>| m.and_then(|m| m.get(key.as_str()));
            if key_spaces::is_input(key)
                && !named.contains(&here)
                && value(old_map) != value(new_map)
            {
                out.push(here.pointer());
            }
        }
    }
    out
}

/// Whether `new`'s list under `input` only drops entries of `old`'s.
fn only_removed(old: &Inputs, new: &Inputs, input: Input) -> bool {
    let list = |i: &Inputs| i.get(input).and_then(Value::as_array).cloned();
    match (list(old), new.get(input)) {
        (_, None) => true,
        (Some(old), Some(Value::Array(new))) => new.iter().all(|v| old.contains(v)),
        _ => false,
    }
}

/// Every input location under `policy`, for the README's list and the tests.
pub fn locations(policy: &Policy) -> Vec<(Input, Location<'_>)> {
    Input::ALL
        .into_iter()
        .filter_map(|i| i.location(policy).map(|at| (i, at)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_input_is_listed_once_in_index_order() {
        for (i, input) in Input::ALL.iter().enumerate() {
            assert_eq!(input.index(), i, "{input:?}");
        }
    }

    #[test]
    fn the_embedded_policy_reads_every_input() {
        let policy = Policy::embedded();
        let listed = locations(&policy);
        assert_eq!(listed.len(), Input::ALL.len(), "{listed:?}");
    }

    #[test]
    fn adding_changing_or_removing_an_input_is_a_change() {
        let policy = Policy::embedded();
        let base = json!({"metadata": {"annotations": {"driftguard.io/mode": "enforce"},
                           "ownerReferences": [{"kind": "X", "name": "a", "controller": false}]}});
        let variants = [
            json!({"metadata": {"annotations": {"driftguard.io/mode": "audit"},
                   "ownerReferences": [{"kind": "X", "name": "a", "controller": false}]}}),
            json!({"metadata": {"ownerReferences": [{"kind": "X", "name": "a", "controller": false}]}}),
            json!({"metadata": {"annotations": {"driftguard.io/mode": "enforce"},
                   "ownerReferences": [{"kind": "X", "name": "a", "controller": true}]}}),
        ];
        let old = Inputs::read(&base, &policy);
        let want = [
            "/metadata/annotations/driftguard.io~1mode",
            "/metadata/annotations/driftguard.io~1mode",
            "/metadata/ownerReferences",
        ];
        for (new, want) in variants.iter().zip(want) {
            let got = changes(&old, &Inputs::read(new, &policy), &policy);
            assert_eq!(got, vec![want.to_owned()], "{new}");
        }
        let same = base.clone();
        assert!(changes(&old, &Inputs::read(&same, &policy), &policy).is_empty());
    }
}
