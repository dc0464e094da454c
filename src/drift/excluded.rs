//! Resources driftguard never judges: runtime data that no repository holds.
//!
//! One list, read by the decision (out of scope) and by the webhook
//! registration (a `matchCondition` that skips them), so the filter in the
//! apiserver can never skip a write the decision would judge.

/// API groups never judged: runtime data that GitOps never manages (events,
/// metrics, leader-election leases) and the review APIs the apiserver's own
/// authentication and authorization go through (create-only, nothing stored).
pub const EXCLUDED_GROUPS: &[&str] = &[
    "events.k8s.io",
    "metrics.k8s.io",
    "coordination.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "reports.kyverno.io",
    "wgpolicyk8s.io",
];

/// `group/resource` never judged (core group: `/resource`): the rest of
/// Argo CD's default `resource.exclusions`, objects that controllers create
/// per request or per pod and no repository holds. `endpoints` and
/// `endpointslices` are not here: a selectorless Service's endpoints (an
/// external database) live in Git, and the controllers that write the
/// others are skipped by identity.
pub const EXCLUDED_RESOURCES: &[&str] = &[
    "/events",
    "certificates.k8s.io/certificatesigningrequests",
    "cert-manager.io/certificaterequests",
    "cilium.io/ciliumidentities",
    "cilium.io/ciliumendpoints",
    "cilium.io/ciliumendpointslices",
    "kyverno.io/admissionreports",
    "kyverno.io/clusteradmissionreports",
    "kyverno.io/backgroundscanreports",
    "kyverno.io/clusterbackgroundscanreports",
    "kyverno.io/updaterequests",
    "tekton.dev/taskruns",
    "tekton.dev/pipelineruns",
];

/// Whether writes to `group`/`resource` are never judged.
pub fn is_excluded(group: &str, resource: &str) -> bool {
    EXCLUDED_GROUPS.contains(&group)
        || EXCLUDED_RESOURCES
            .iter()
            .any(|r| r.split_once('/') == Some((group, resource)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_and_resources_are_excluded_and_endpoints_are_not() {
        assert!(is_excluded("coordination.k8s.io", "leases"));
        assert!(is_excluded("", "events"));
        assert!(is_excluded("tekton.dev", "taskruns"));
        assert!(!is_excluded("", "endpoints"));
        assert!(!is_excluded("discovery.k8s.io", "endpointslices"));
        assert!(!is_excluded("", "configmaps"));
        assert!(!is_excluded("events.k8s.io.evil", "events"));
    }
}
