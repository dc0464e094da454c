//! The tools' key spaces. Every label and annotation under a domain that a
//! GitOps tool (or driftguard) reads from live objects is a decision input,
//! whether or not [`super::inputs::Input`] names it: a person's write may not
//! add, change or remove one in any mode, precision or ignore rule. The named
//! inputs are the ones the decision itself reads; this catches the rest,
//! including keys a tool release adds.
//!
//! Why by key space and not a list: a list misses keys (`helm.sh/hook` made
//! an Argo CD object a hook, never compared or pruned). `tests/tool_keys.rs`
//! reads the tools' Go sources at the versions `scripts/build-tools.sh`
//! builds and fails on a key that is neither under a key space nor reviewed
//! below, so a tool upgrade is judged before it lands.

/// Domains whose keys (the domain itself or any subdomain) are inputs.
pub const KEY_SPACES: [&str; 4] = [
    "argocd.argoproj.io",
    "fluxcd.io",
    "helm.sh",
    "driftguard.io",
];

/// Why a key a tool reads is not an input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reviewed {
    /// A request or a display hint: the tool acts on it sooner, or shows it,
    /// but applies, compares and prunes exactly as before.
    Inert(&'static str),
    /// Break-glass bookkeeping on an Application, judged by the ordinary
    /// comparison (docs/break-glass.md: a parent Application's ignore rule
    /// lets the plugin pause a child).
    BreakGlass(&'static str),
    /// Judged by a rule of its own, which lets only driftguard's own
    /// bookkeeping change it.
    Judged(&'static str),
    /// Not a label or annotation key, though it reads like one.
    NotAKey(&'static str),
}

/// The reviewed keys, each with the tool source that shows what it does.
pub const REVIEWED: [(&str, Reviewed); 17] = [
    (
        "argocd.argoproj.io/refresh",
        Reviewed::Inert(
            "argo-cd v3.6.1 pkg/apis/application/v1alpha1/application_annotations.go AnnotationKeyRefresh: asks the controller to refresh now; it removes it",
        ),
    ),
    (
        "argocd.argoproj.io/refresh-timestamp",
        Reviewed::Inert(
            "argo-cd v3.6.1 application_annotations.go AnnotationKeyRefreshTimestamp: when the refresh was asked",
        ),
    ),
    (
        "argocd.argoproj.io/hydrate",
        Reviewed::Inert(
            "argo-cd v3.6.1 application_annotations.go AnnotationKeyHydrate: asks the hydrator to run now",
        ),
    ),
    (
        "argocd.argoproj.io/hydrate-timestamp",
        Reviewed::Inert(
            "argo-cd v3.6.1 application_annotations.go AnnotationKeyHydrateTimestamp: when hydration was asked",
        ),
    ),
    (
        "argocd.argoproj.io/application-set-refresh",
        Reviewed::Inert(
            "argo-cd v3.6.1 common/common.go AnnotationApplicationSetRefresh: asks the ApplicationSet controller to regenerate now",
        ),
    ),
    (
        "argocd.argoproj.io/managed-by-url",
        Reviewed::Inert(
            "argo-cd v3.6.1 application_annotations.go AnnotationKeyManagedByURL: a link the UI shows",
        ),
    ),
    (
        "reconcile.fluxcd.io/requestedAt",
        Reviewed::Inert(
            "fluxcd/pkg/apis/meta v1.30.2 annotations.go ReconcileRequestAnnotation: `flux reconcile` asks for a reconcile now",
        ),
    ),
    (
        "reconcile.fluxcd.io/forceAt",
        Reviewed::Inert(
            "fluxcd/pkg/apis/meta v1.30.2 annotations.go ForceRequestAnnotation: asks helm-controller to release again from Git now",
        ),
    ),
    (
        "rollout.argoproj.io/revision",
        Reviewed::Inert(
            "argo-cd v3.6.1 util/resource/revision.go: the revision the UI shows for a Rollout",
        ),
    ),
    (
        "applications.argoproj.io/app-name",
        Reviewed::Inert(
            "argo-cd v3.6.1 common/common.go LabelKeyLegacyApplicationName: read by no controller in v3.6.1",
        ),
    ),
    (
        "argocd.argoproj.io/skip-reconcile",
        Reviewed::BreakGlass(
            "the plugin's pause of an Application (breakglass::application); on a child Application, its parent's ignore rule decides",
        ),
    ),
    (
        "driftguard.io/break-glass-paused-for",
        Reviewed::BreakGlass(
            "the objects an Application's pause is held for (breakglass::application::PAUSED_FOR)",
        ),
    ),
    (
        "driftguard.io/break-glass",
        Reviewed::Judged(
            "the break-glass reason: breakglass_state::evaluate allows it to whom the policy lets break glass",
        ),
    ),
    (
        "driftguard.io/break-glass-expires",
        Reviewed::Judged(
            "the break-glass expiry: breakglass_state::evaluate bounds it by maxDuration",
        ),
    ),
    (
        "driftguard.io/drift",
        Reviewed::Judged(
            "warn mode's drift record: compare::check_drift_record refuses any but the mutating webhook's own",
        ),
    ),
    (
        "argoproj.io/v1alpha1",
        Reviewed::NotAKey("argo-cd v3.6.1: the apiVersion of its own types"),
    ),
    (
        "helm.sh/release.v1",
        Reviewed::NotAKey(
            "helm v3.22.0 pkg/storage/driver/secrets.go: the type of the Secrets Helm stores releases in",
        ),
    ),
];

/// Whether `key` (a label or annotation key) lies under a key space.
pub fn in_key_space(key: &str) -> bool {
    let Some((domain, _)) = key.split_once('/') else {
        return false;
    };
    KEY_SPACES.iter().any(|space| {
        domain == *space
            || domain
                .strip_suffix(space)
                .is_some_and(|sub| sub.ends_with('.'))
    })
}

/// What review says of `key`, if it is listed.
pub fn reviewed(key: &str) -> Option<Reviewed> {
    REVIEWED.iter().find(|(k, _)| *k == key).map(|(_, r)| *r)
}

/// Whether a change to `key` is a change of a decision input: under a key
/// space and not reviewed out.
pub fn is_input(key: &str) -> bool {
    in_key_space(key) && reviewed(key).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_space_covers_its_domain_and_subdomains_only() {
        for key in [
            "argocd.argoproj.io/hook",
            "helm.sh/hook",
            "meta.helm.sh/release-name",
            "kustomize.toolkit.fluxcd.io/ssa",
            "fluxcd.io/sync-checksum",
            "driftguard.io/mode",
            "resources-finalizer.argocd.argoproj.io/foreground",
        ] {
            assert!(in_key_space(key), "{key}");
        }
        for key in [
            "app.kubernetes.io/instance",
            "notfluxcd.io/x",
            "helm.sh.example.com/x",
            "argoproj.io/x",
            "helm.sh",
            "example.com/helm.sh/x",
        ] {
            assert!(!in_key_space(key), "{key}");
        }
    }

    #[test]
    fn every_reviewed_key_is_listed_once_with_its_source() {
        for (i, (key, why)) in REVIEWED.iter().enumerate() {
            assert!(REVIEWED[i + 1..].iter().all(|(k, _)| k != key), "{key}");
            let (Reviewed::Inert(s)
            | Reviewed::BreakGlass(s)
            | Reviewed::Judged(s)
            | Reviewed::NotAKey(s)) = why;
            assert!(s.len() > 20, "{key}: say what shows it");
        }
        assert!(!is_input("argocd.argoproj.io/refresh"));
        assert!(is_input("argocd.argoproj.io/sync-options"));
    }
}
