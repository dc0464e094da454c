//! What the webhooks receive: the one list of rules, exclusions and CEL
//! `matchConditions`, used by `driftguard register` (and checked against the
//! Helm chart, which renders the same text from its values, by tests/chart.rs).
//!
//! The rules name every resource: Argo CD and Flux manage any kind. The
//! conditions then decide, inside the apiserver and before any call, which
//! writes driftguard must judge, so a write to an unmanaged object costs
//! nothing and does not depend on driftguard being up.

use k8s_openapi::api::admissionregistration::v1::MatchCondition;

use crate::drift::MODE_ANNOTATION;
use crate::drift::inputs::HELM_RELEASE_ANNOTATION;
use crate::drift::ownership::{FLUX_HELM_NAME, FLUX_KUSTOMIZE_NAME};
use crate::policy::{Mode, PlannedCreates, Policy, Precision};

pub(crate) struct Rule {
    pub(crate) api_groups: &'static [&'static str],
    pub(crate) api_versions: &'static [&'static str],
    pub(crate) resources: &'static [&'static str],
    pub(crate) scope: &'static str,
}

/// Every resource and every subresource, namespaced and cluster-wide
/// (Namespaces, ClusterRoles, CRDs and custom resources are GitOps-managed
/// too). Subresources too: `scale` is judged as the parent's replicas, and
/// the apiserver keeps metadata changes sent through `status` (a
/// Deployment's annotations) and others (`finalize`, `ephemeralcontainers`).
/// CONNECT (exec, attach, port-forward) is not an operation registered here.
pub(crate) const RULES: &[Rule] = &[Rule {
    api_groups: &["*"],
    api_versions: &["*"],
    resources: &["*/*"],
    scope: "*",
}];

/// Namespaces and their subresources, registered in a webhook of their own
/// without a `namespaceSelector`: for a write to a Namespace the apiserver
/// matches the selector against that Namespace's new labels, so the write
/// that labels it `driftguard.io/ignore=true` would exempt itself.
pub(crate) const NAMESPACE_RULES: &[Rule] = &[Rule {
    api_groups: &[""],
    api_versions: &["*"],
    resources: &["namespaces", "namespaces/*"],
    scope: "Cluster",
}];

/// The creates webhook's rules: every object itself, namespaced or not
/// (subresource CREATEs carry an Eviction or a TokenRequest, never one).
pub(crate) const CREATE_RULES: &[Rule] = &[Rule {
    api_groups: &["*"],
    api_versions: &["*"],
    resources: &["*"],
    scope: "*",
}];

/// The condition that keeps Namespaces out of the webhook with the
/// `namespaceSelector`: the Namespace webhook judges them, once.
pub(crate) const NOT_NAMESPACES: &str =
    "!(request.resource.group == '' && request.resource.resource == 'namespaces')";

/// The label that exempts a namespace through the `namespaceSelector`.
pub(crate) const IGNORE_NAMESPACE_LABEL: &str = "driftguard.io/ignore";

/// A write that labels a Namespace `driftguard.io/ignore=true` where it was
/// not: it exempts every object in it, so it is judged whatever else it carries.
const EXEMPTS_A_NAMESPACE: &str = "(request.resource.group == '' && request.resource.resource == 'namespaces' && object != null && has(object.metadata.labels) && 'driftguard.io/ignore' in object.metadata.labels && object.metadata.labels['driftguard.io/ignore'] == 'true' && !(oldObject != null && has(oldObject.metadata.labels) && 'driftguard.io/ignore' in oldObject.metadata.labels && oldObject.metadata.labels['driftguard.io/ignore'] == 'true'))";

pub(crate) const OPERATIONS: &[&str] = &["CREATE", "UPDATE", "DELETE"];

/// Never sent to driftguard: the decision calls them out of scope too.
pub(crate) use crate::drift::excluded::{EXCLUDED_GROUPS, EXCLUDED_RESOURCES};

/// A DELETE of a Namespace: it may be an Argo CD Application's destination,
/// or hold objects the tools manage (the namespace controller's deletes
/// that follow are trusted).
const DELETE_NAMESPACE: &str = "(request.operation == 'DELETE' && request.resource.group == '' && request.resource.resource == 'namespaces')";

/// A CREATE or UPDATE of a scaler itself ([`crate::drift::deputy::SCALERS`]):
/// it usually carries no tracking metadata, yet it makes the HPA controller
/// (a trusted identity) write a managed target's replicas.
const SCALER_WRITE: &str = "(request.operation != 'DELETE' && (!has(request.subResource) || request.subResource == '') && ((request.resource.group == 'autoscaling' && request.resource.resource == 'horizontalpodautoscalers') || (request.resource.group == 'keda.sh' && request.resource.resource == 'scaledobjects')))";

/// A DELETE of a CRD: the apiserver then deletes every custom resource of its
/// kind with no admission call, managed ones included.
const DELETE_CRD: &str = "(request.operation == 'DELETE' && request.resource.group == 'apiextensions.k8s.io' && request.resource.resource == 'customresourcedefinitions')";

/// A CREATE of an object itself (not an Eviction or a TokenRequest): it may
/// be one an Application or a Kustomization lists (`plannedCreates: guard`).
const CREATE_OF_AN_OBJECT: &str =
    "(request.operation == 'CREATE' && (!has(request.subResource) || request.subResource == ''))";

/// The apiserver refuses a webhook with more (checked by the tests).
#[cfg(test)]
const MAX_MATCH_CONDITIONS: usize = 64;

/// The `matchConditions` of both webhooks (all must hold for a call).
#[derive(Debug)]
pub(crate) struct Conditions {
    pub(crate) validating: Vec<MatchCondition>,
    /// The validating ones, plus one that calls the mutating webhook only
    /// where it may patch.
    pub(crate) mutating: Vec<MatchCondition>,
    /// Identity patterns that CEL cannot express: driftguard still allows
    /// them, after a call.
    pub(crate) left_out: Vec<String>,
    /// The creates webhook's (`plannedCreates: guard`): untracked CREATEs,
    /// which may be objects the tools' records list. It fails open: an
    /// outage of driftguard never stops everyone's `kubectl create`.
    pub(crate) creates: Option<Vec<MatchCondition>>,
}

pub(crate) fn conditions(policy: &Policy) -> Conditions {
    let mut validating = vec![MatchCondition {
        name: "exclude-unmanaged-kinds".into(),
        expression: exclusion_expression(),
    }];
    let (identities, left_out) = identity_condition(policy);
    validating.extend(identities);
    validating.push(MatchCondition {
        name: "only-gitops-managed-objects".into(),
        expression: managed_expression(policy),
    });
    let mut mutating = validating.clone();
    mutating.push(MatchCondition {
        name: "only-where-a-patch-may-follow".into(),
        expression: patch_expression(policy),
    });
    let creates = creates_expression(policy).map(|expression| {
        let mut creates = validating[..validating.len() - 1].to_vec();
        creates.push(MatchCondition {
            name: "only-untracked-creates".into(),
            expression,
        });
        creates
    });
    Conditions {
        validating,
        mutating,
        left_out,
        creates,
    }
}

fn exclusion_expression() -> String {
    let owned = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    format!(
        "!(request.resource.group in [{}] || (request.resource.group + '/' + request.resource.resource) in [{}])",
        cel_list(&owned(EXCLUDED_GROUPS)),
        cel_list(&owned(EXCLUDED_RESOURCES))
    )
}

/// CEL that is false for the policy's controller and trusted identities, so the
/// apiserver never calls driftguard for GitOps or system traffic. Exact names
/// and `prefix*` globs are expressed; other globs still work, judged by
/// driftguard itself. Returns the condition and the patterns left out.
pub(crate) fn identity_condition(policy: &Policy) -> (Option<MatchCondition>, Vec<String>) {
    let mut users = Vec::new();
    let mut groups = Vec::new();
    for identities in [&policy.controllers, &policy.trusted] {
        let (u, g) = identities.patterns();
        users.extend(u.into_iter().map(str::to_owned));
        groups.extend(g.into_iter().map(str::to_owned));
    }
    let mut terms = Vec::new();
    let mut left_out = Vec::new();
    let (exact, prefixes) = split_globs(&users, &mut left_out);
    if !exact.is_empty() {
        terms.push(format!(
            "request.userInfo.username in [{}]",
            cel_list(&exact)
        ));
    }
    terms.extend(
        prefixes
            .iter()
            .map(|p| format!("request.userInfo.username.startsWith({})", cel_string(p))),
    );
    let (exact, prefixes) = split_globs(&groups, &mut left_out);
    if !exact.is_empty() {
        terms.push(format!(
            "(has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in [{}]))",
            cel_list(&exact)
        ));
    }
    terms.extend(prefixes.iter().map(|p| {
        format!(
            "(has(request.userInfo.groups) && request.userInfo.groups.exists(g, g.startsWith({})))",
            cel_string(p)
        )
    }));
    let condition = (!terms.is_empty()).then(|| MatchCondition {
        name: "skip-gitops-and-trusted-identities".into(),
        expression: format!("!({})", terms.join(" || ")),
    });
    (condition, left_out)
}

/// True for the writes whose decision can be other than "out of scope":
/// `scale` writes (a Scale carries no labels; driftguard reads the parent),
/// scaler writes (judged as the scale write they cause on their target),
/// with a detector on, DELETEs of Namespaces (an Application's destination,
/// or holding managed objects) and of CRDs (their custom resources), and
/// objects whose stored (`oldObject`: also a write that removes the
/// metadata) or incoming (`object`: a CREATE that adds it) version carries
/// tracking metadata an enabled detector could claim it by
/// ([`carries_tracking`]). The decision judges ownership on the stored
/// object, so this is a superset of what it can find managed. Untracked
/// CREATEs, a Helm release's among them, go to the creates webhook
/// ([`creates_expression`]).
fn managed_expression(policy: &Policy) -> String {
    let mut terms = vec![
        "(has(request.subResource) && request.subResource == 'scale')".to_owned(),
        SCALER_WRITE.to_owned(),
        EXEMPTS_A_NAMESPACE.to_owned(),
    ];
    if policy.argocd.is_some() || policy.flux {
        // Guarded even untracked: what they delete with them is not judged.
        terms.push(DELETE_NAMESPACE.to_owned());
        terms.push(DELETE_CRD.to_owned());
    }
    terms.extend(
        ["oldObject", "object"]
            .into_iter()
            .filter_map(|object| carries_tracking(policy, object)),
    );
    terms.join(" || ")
}

/// CEL: `object` (`oldObject` or `object`) carries tracking metadata that an
/// enabled detector could claim it by; `None` with every detector off. The
/// policy's instance label counts only without Helm's release annotation
/// beside it, as in [`crate::drift::ownership::claims`]: Helm sets both on
/// every object of a release, and the decision never claims those for Argo CD.
fn carries_tracking(policy: &Policy, object: &str) -> Option<String> {
    let mut annotations = Vec::new();
    let mut labels = Vec::new();
    let mut instance = None;
    if let Some(argo) = &policy.argocd {
        annotations.push(argo.tracking_annotation.as_str());
        instance = argo.instance_label.as_deref();
    }
    if policy.flux {
        labels.extend([FLUX_KUSTOMIZE_NAME, FLUX_HELM_NAME]);
    }
    let mut carries = Vec::new();
    for (section, keys) in [("annotations", &annotations), ("labels", &labels)] {
        if keys.is_empty() {
            continue;
        }
        let any = keys
            .iter()
            .map(|k| format!("{} in {object}.metadata.{section}", cel_string(k)))
            .collect::<Vec<_>>()
            .join(" || ");
        carries.push(format!("(has({object}.metadata.{section}) && ({any}))"));
    }
    if let Some(key) = instance {
        carries.push(format!(
            "(has({object}.metadata.labels) && {} in {object}.metadata.labels && !{})",
            cel_string(key),
            helm_release(object)
        ));
    }
    (!carries.is_empty()).then(|| format!("({object} != null && ({}))", carries.join(" || ")))
}

/// CEL: `object` carries Helm's release annotation, not empty (the
/// decision reads an empty one as none).
fn helm_release(object: &str) -> String {
    let key = cel_string(HELM_RELEASE_ANNOTATION);
    format!(
        "(has({object}.metadata.annotations) && {key} in {object}.metadata.annotations \
         && {object}.metadata.annotations[{key}] != '')"
    )
}

/// The creates webhook's own condition (`plannedCreates: guard`): a CREATE
/// of an object itself that carries no tracking metadata (those go to the
/// main webhook), which may be one an Application or a Kustomization lists.
/// `None` when the policy does not guard planned creates.
pub(crate) fn creates_expression(policy: &Policy) -> Option<String> {
    if policy.planned_creates != PlannedCreates::Guard {
        return None;
    }
    let tracked = carries_tracking(policy, "object")?;
    Some(format!("{CREATE_OF_AN_OBJECT} && !{tracked}"))
}

/// The mutating webhook only patches (the `driftguard.io/drift` record) on a
/// CREATE or UPDATE of the object itself, and only in warn mode or, under
/// `precision: ownedFields`, for a change to fields GitOps does not own.
/// Where the mode in force can only be enforce or audit, the apiserver skips
/// it: warn comes from the policy's default, a `warn` entry of `namespaces`,
/// or the stored object's `driftguard.io/mode` annotation.
fn patch_expression(policy: &Policy) -> String {
    let writes =
        "request.operation != 'DELETE' && (!has(request.subResource) || request.subResource == '')";
    if policy.mode == Mode::Warn || policy.precision == Precision::OwnedFields {
        return writes.to_owned();
    }
    let mut may_warn = vec![format!(
        "(oldObject != null && has(oldObject.metadata.annotations) && {key} in oldObject.metadata.annotations && oldObject.metadata.annotations[{key}] == 'warn')",
        key = cel_string(MODE_ANNOTATION)
    )];
    let patterns = policy.namespace_patterns(Mode::Warn);
    if !patterns.is_empty() {
        let Some(regexes) = patterns
            .iter()
            .map(|p| glob_regex(p))
            .collect::<Option<Vec<_>>>()
        else {
            // A glob CEL cannot mirror: call wherever a patch may follow.
            return writes.to_owned();
        };
        may_warn.push(format!(
            "(has(request.namespace) && request.namespace.matches({}))",
            cel_string(&format!("^({})$", regexes.join("|")))
        ));
    }
    format!("{writes} && ({})", may_warn.join(" || "))
}

/// A namespace glob as an RE2 regex, escaped exactly as Go's
/// `regexp.QuoteMeta` (the chart's `regexQuoteMeta`) would, so both render
/// the same text; `None` for classes, alternations and escapes.
fn glob_regex(glob: &str) -> Option<String> {
    if glob.contains(['[', ']', '{', '}', '\\']) {
        return None;
    }
    let mut out = String::new();
    for c in glob.chars() {
        match c {
            '*' => out.push_str(".*"),
            '?' => out.push('.'),
            '.' | '+' | '(' | ')' | '|' | '^' | '$' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    Some(out)
}

fn split_globs(patterns: &[String], left_out: &mut Vec<String>) -> (Vec<String>, Vec<String>) {
    let is_meta = |c: char| matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\');
    let mut exact = Vec::new();
    let mut prefixes = Vec::new();
    for p in patterns {
        match p.strip_suffix('*') {
            _ if !p.contains(is_meta) => exact.push(p.clone()),
            Some(prefix) if !prefix.contains(is_meta) => prefixes.push(prefix.to_owned()),
            _ => left_out.push(p.clone()),
        }
    }
    (exact, prefixes)
}

fn cel_string(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

fn cel_list(items: &[String]) -> String {
    items
        .iter()
        .map(|s| cel_string(s))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(yaml: &str) -> Policy {
        Policy::from_yaml(yaml, "p.yaml").unwrap()
    }

    fn expression<'a>(conditions: &'a [MatchCondition], name: &str) -> &'a str {
        &conditions
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no condition {name}"))
            .expression
    }

    #[test]
    fn identity_condition_skips_controllers_and_trusted_identities() {
        let (condition, left_out) = identity_condition(&Policy::embedded());
        assert_eq!(
            condition.unwrap().expression,
            "!(request.userInfo.username in ['system:serviceaccount:argocd:argocd-application-controller', \
             'system:serviceaccount:flux-system:kustomize-controller', \
             'system:serviceaccount:flux-system:helm-controller', 'system:kube-controller-manager', \
             'system:kube-scheduler'] || request.userInfo.username.startsWith('system:serviceaccount:kube-system:') \
             || request.userInfo.username.startsWith('system:node:'))"
        );
        assert!(left_out.is_empty());
        let (condition, left_out) = identity_condition(&policy(
            "trusted: {users: ['ci-*-bot'], groups: [platform]}\n",
        ));
        assert_eq!(left_out, vec!["ci-*-bot"]);
        assert_eq!(
            condition.unwrap().expression,
            "!(request.userInfo.username in ['system:serviceaccount:argocd:argocd-application-controller', \
             'system:serviceaccount:flux-system:kustomize-controller', \
             'system:serviceaccount:flux-system:helm-controller'] \
             || (has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in ['platform'])))"
        );
    }

    #[test]
    fn exclusions_are_one_condition() {
        assert_eq!(
            exclusion_expression(),
            "!(request.resource.group in ['events.k8s.io', 'metrics.k8s.io', 'coordination.k8s.io', \
             'authentication.k8s.io', 'authorization.k8s.io', 'reports.kyverno.io', 'wgpolicyk8s.io'] \
             || (request.resource.group + '/' + request.resource.resource) in ['/events', \
             'certificates.k8s.io/certificatesigningrequests', \
             'cert-manager.io/certificaterequests', 'cilium.io/ciliumidentities', 'cilium.io/ciliumendpoints', \
             'cilium.io/ciliumendpointslices', 'kyverno.io/admissionreports', 'kyverno.io/clusteradmissionreports', \
             'kyverno.io/backgroundscanreports', 'kyverno.io/clusterbackgroundscanreports', \
             'kyverno.io/updaterequests', 'tekton.dev/taskruns', 'tekton.dev/pipelineruns'])"
        );
    }

    #[test]
    fn only_objects_with_tracking_metadata_of_enabled_detectors_are_sent() {
        let c = conditions(&Policy::embedded());
        assert_eq!(
            expression(&c.validating, "only-gitops-managed-objects"),
            format!(
                "(has(request.subResource) && request.subResource == 'scale') \
             || {SCALER_WRITE} || {EXEMPTS_A_NAMESPACE} \
             || {DELETE_NAMESPACE} || {DELETE_CRD} \
             || (oldObject != null && ((has(oldObject.metadata.annotations) && ('argocd.argoproj.io/tracking-id' in oldObject.metadata.annotations)) \
             || (has(oldObject.metadata.labels) && ('kustomize.toolkit.fluxcd.io/name' in oldObject.metadata.labels \
             || 'helm.toolkit.fluxcd.io/name' in oldObject.metadata.labels)) \
             || (has(oldObject.metadata.labels) && 'app.kubernetes.io/instance' in oldObject.metadata.labels \
             && !{old_helm}))) \
             || (object != null && ((has(object.metadata.annotations) && ('argocd.argoproj.io/tracking-id' in object.metadata.annotations)) \
             || (has(object.metadata.labels) && ('kustomize.toolkit.fluxcd.io/name' in object.metadata.labels \
             || 'helm.toolkit.fluxcd.io/name' in object.metadata.labels)) \
             || (has(object.metadata.labels) && 'app.kubernetes.io/instance' in object.metadata.labels \
             && !{new_helm})))",
                old_helm = helm_release("oldObject"),
                new_helm = helm_release("object"),
            )
        );
        assert_eq!(
            helm_release("object"),
            "(has(object.metadata.annotations) && 'meta.helm.sh/release-name' in object.metadata.annotations \
             && object.metadata.annotations['meta.helm.sh/release-name'] != '')"
        );
        let c = conditions(&policy(
            "gitops: {argocd: {trackingAnnotation: example.com/owner, instanceLabel: ''}, flux: {enabled: false}}\n",
        ));
        assert_eq!(
            expression(&c.validating, "only-gitops-managed-objects"),
            format!(
                "(has(request.subResource) && request.subResource == 'scale') \
             || {SCALER_WRITE} || {EXEMPTS_A_NAMESPACE} \
             || {DELETE_NAMESPACE} || {DELETE_CRD} \
             || (oldObject != null && ((has(oldObject.metadata.annotations) && ('example.com/owner' in oldObject.metadata.annotations)))) \
             || (object != null && ((has(object.metadata.annotations) && ('example.com/owner' in object.metadata.annotations))))"
            )
        );
        let c = conditions(&Policy::embedded());
        let creates = c.creates.as_deref().expect("a creates webhook");
        assert_eq!(
            creates.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            [
                "exclude-unmanaged-kinds",
                "skip-gitops-and-trusted-identities",
                "only-untracked-creates"
            ]
        );
        assert!(
            expression(creates, "only-untracked-creates").starts_with(&format!(
                "{CREATE_OF_AN_OBJECT} && !(object != null && ((has(object.metadata.annotations)"
            ))
        );
        assert!(
            conditions(&policy("plannedCreates: ignore\n"))
                .creates
                .is_none()
        );
        // Flux alone: Namespace and CRD deletes are sent too.
        let c = conditions(&policy("gitops: {argocd: {enabled: false}}\n"));
        assert!(
            expression(&c.validating, "only-gitops-managed-objects").contains(&format!(
                "{EXEMPTS_A_NAMESPACE} || {DELETE_NAMESPACE} || {DELETE_CRD} || (oldObject"
            ))
        );
        let c = conditions(&policy(
            "gitops: {argocd: {enabled: false}, flux: {enabled: false}}\n",
        ));
        assert_eq!(
            expression(&c.validating, "only-gitops-managed-objects"),
            format!(
                "(has(request.subResource) && request.subResource == 'scale') || {SCALER_WRITE} || {EXEMPTS_A_NAMESPACE}"
            )
        );
    }

    /// The condition names every scaler the decision judges as a deputy.
    #[test]
    fn every_scaler_is_sent() {
        for (group, resource) in crate::drift::deputy::SCALERS {
            assert!(
                SCALER_WRITE.contains(&format!(
                    "(request.resource.group == '{group}' && request.resource.resource == '{resource}')"
                )),
                "{group}/{resource}"
            );
        }
        assert_eq!(
            SCALER_WRITE.matches("request.resource.group ==").count(),
            crate::drift::deputy::SCALERS.len()
        );
    }

    #[test]
    fn the_mutating_webhook_is_called_only_where_warn_may_apply() {
        let c = conditions(&Policy::embedded());
        assert_eq!(
            expression(&c.mutating, "only-where-a-patch-may-follow"),
            "request.operation != 'DELETE' && (!has(request.subResource) || request.subResource == '') && \
             ((oldObject != null && has(oldObject.metadata.annotations) && 'driftguard.io/mode' in oldObject.metadata.annotations \
             && oldObject.metadata.annotations['driftguard.io/mode'] == 'warn') \
             || (has(request.namespace) && request.namespace.matches('^(dev-.*)$')))"
        );
        assert_eq!(c.mutating[..c.validating.len()], c.validating[..]);
        let c = conditions(&policy(
            "namespaces: [{names: ['team.a-*', 'x?'], mode: warn}, {names: [prod], mode: audit}]\n",
        ));
        assert!(
            expression(&c.mutating, "only-where-a-patch-may-follow").ends_with(
                "|| (has(request.namespace) && request.namespace.matches('^(team\\\\.a-.*|x.)$')))"
            )
        );
        for yaml in [
            "mode: warn\n",
            "precision: ownedFields\n",
            "namespaces: [{names: ['dev-[ab]'], mode: warn}]\n",
        ] {
            let c = conditions(&policy(yaml));
            assert_eq!(
                expression(&c.mutating, "only-where-a-patch-may-follow"),
                "request.operation != 'DELETE' && (!has(request.subResource) || request.subResource == '')",
                "{yaml}"
            );
        }
        let c = conditions(&policy("namespaces: []\n"));
        assert!(!expression(&c.mutating, "only-where-a-patch-may-follow").contains("matches"));
    }

    #[test]
    fn conditions_stay_within_the_apiserver_limit() {
        let many: Vec<String> = (0..500).map(|i| format!("user-{i}")).collect();
        let yaml = format!(
            "controllers: {{users: {many:?}, groups: {many:?}}}\ntrusted: {{users: {:?}}}\n",
            many.iter().map(|u| format!("{u}-*")).collect::<Vec<_>>()
        );
        let c = conditions(&policy(&yaml));
        assert_eq!(c.validating.len(), 3);
        assert_eq!(c.mutating.len(), 4);
        assert!(c.mutating.len() <= MAX_MATCH_CONDITIONS);
        let c = conditions(&policy("controllers: {users: []}\ntrusted: {users: []}\n"));
        assert_eq!(
            c.validating.len(),
            2,
            "no identity condition without identities"
        );
    }
}
