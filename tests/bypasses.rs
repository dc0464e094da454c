//! The bypass classes of issue 19, one test each: every test here fails
//! without its fix. Each write is shaped as the kube-apiserver sends it.

use driftguard_testkit::common;

use common::*;
use driftguard::drift::{Finding, Manager, Verdict};
use driftguard::{Endpoint, Policy, judge};
use serde_json::{Value, json};

fn policy_with(yaml: &str) -> Policy {
    Policy::from_yaml(yaml, "test-policy.yaml").unwrap()
}

/// A policy that ignores every label and annotation: the inputs must still hold.
fn metadata_ignored() -> Policy {
    policy_with(
        "ignoreDifferences:\n  - {group: '*', kind: '*', jsonPointers: [/metadata/labels, /metadata/annotations]}\n",
    )
}

/// `kubectl scale --replicas=0`: autoscaling/v1 writes `spec.replicas` with
/// omitempty, so the Scale the apiserver sends has no `spec.replicas`.
#[test]
fn scale_to_zero_is_drift() {
    let mut review = Review::scale("deployments", "web", 3, 0);
    review.new = review.new.map(|n| without(&n, "/spec/replicas"));
    let dep = deployment();
    let out = run_with(&Policy::embedded(), &review, Endpoint::Validate, Some(&dep));
    assert!(!out.allowed(), "{:?}", out.decision);
    assert_eq!(out.decision.drifted_paths, vec!["/spec/replicas"]);
    // Without the parent: still a change of replicas, so unknownScaleParent decides.
    let out = run(&policy_with("unknownScaleParent: deny\n"), &review);
    assert!(!out.allowed(), "{:?}", out.decision);
    // From 0 (absent on both sides) to 0 is no change.
    let mut zero = Review::scale("deployments", "web", 0, 0);
    zero.old = zero.old.map(|n| without(&n, "/spec/replicas"));
    zero.new = zero.new.map(|n| without(&n, "/spec/replicas"));
    let stopped = with(&dep, "/spec/replicas", json!(0));
    let out = run_with(
        &Policy::embedded(),
        &zero,
        Endpoint::Validate,
        Some(&stopped),
    );
    assert!(out.allowed(), "{}", out.message());
}

fn status_write(old: Value, new: Value) -> Review {
    let mut review = Review::update(old, new);
    review.sub_resource = Some("status");
    review
}

/// `kubectl patch --subresource=status` keeps a Deployment's annotations
/// (its status strategy resets only spec and labels).
#[test]
fn status_writes_that_change_metadata_are_judged() {
    let old = deployment();
    for (pointer, value) in [
        ("/metadata/annotations/driftguard.io~1mode", json!("audit")),
        ("/metadata/annotations/team", json!("x")),
    ] {
        let out = run(
            &Policy::embedded(),
            &status_write(old.clone(), with(&old, pointer, value)),
        );
        assert!(!out.allowed(), "{pointer}: {:?}", out.decision);
    }
    let untracked = without(
        &old,
        "/metadata/annotations/argocd.argoproj.io~1tracking-id",
    );
    let out = run(&Policy::embedded(), &status_write(old.clone(), untracked));
    assert!(!out.allowed(), "{:?}", out.decision);
    // Status itself is never drift.
    let ready = with(&old, "/status/readyReplicas", json!(1));
    let out = run(&Policy::embedded(), &status_write(old, ready));
    assert!(out.allowed(), "{}", out.message());
    assert_eq!(out.decision.finding, Finding::NoDrift);
}

fn flux_endpoints() -> Value {
    json!({"apiVersion": "v1", "kind": "Endpoints",
           "metadata": {"name": "db", "namespace": "production", "resourceVersion": "1",
                        "labels": {"kustomize.toolkit.fluxcd.io/name": "infra",
                                   "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}},
           "subsets": [{"addresses": [{"ip": "10.1.2.3"}], "ports": [{"port": 5432}]}]})
}

/// A selectorless Service's Endpoints live in Git; the apiserver now sends them.
#[test]
fn endpoints_are_judged_and_runtime_kinds_are_not() {
    let old = flux_endpoints();
    let new = with(&old, "/subsets/0/addresses/0/ip", json!("6.6.6.6"));
    let out = run(&Policy::embedded(), &Review::update(old.clone(), new));
    assert!(!out.allowed(), "{:?}", out.decision);
    assert!(!driftguard::drift::excluded::is_excluded("", "endpoints"));
    assert!(!driftguard::drift::excluded::is_excluded(
        "discovery.k8s.io",
        "endpointslices"
    ));
    // A Lease is never sent, and never judged: the two lists are one.
    let mut lease = old.clone();
    lease["apiVersion"] = json!("coordination.k8s.io/v1");
    lease["kind"] = json!("Lease");
    let out = run(
        &Policy::embedded(),
        &Review::update(lease.clone(), with(&lease, "/spec", json!({"x": 1}))),
    );
    assert!(
        matches!(out.decision.finding, Finding::OutOfScope(_)),
        "{:?}",
        out.decision
    );
}

fn namespace_review(operation: &str, old: Option<Value>, new: Option<Value>, user: &str) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "c0ffee00-0000-4000-8000-000000000009",
        "kind": {"group": "", "version": "v1", "kind": "Namespace"},
        "resource": {"group": "", "version": "v1", "resource": "namespaces"},
        "name": "production", "operation": operation,
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
        "object": new, "oldObject": old}})
}

fn namespace(labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": "production", "labels": labels}, "spec": {"finalizers": ["kubernetes"]}})
}

fn judged(policy: &Policy, review: &Value) -> driftguard::drift::Decision {
    judge(
        policy,
        &serde_json::to_vec(review).unwrap(),
        Endpoint::Validate,
        None,
        now(),
    )
    .unwrap()
    .decision
}

/// Labelling a namespace `driftguard.io/ignore=true` exempts it through the
/// webhook's namespaceSelector: managed or not, only trusted identities may.
#[test]
fn exempting_a_namespace_is_refused_in_every_mode() {
    let plain = namespace(json!({"kubernetes.io/metadata.name": "production"}));
    let ignored = with(
        &plain,
        "/metadata/labels/driftguard.io~1ignore",
        json!("true"),
    );
    for policy in [Policy::embedded(), policy_with("mode: audit\n")] {
        let d = judged(
            &policy,
            &namespace_review(
                "UPDATE",
                Some(plain.clone()),
                Some(ignored.clone()),
                "alice",
            ),
        );
        assert_eq!(d.finding, Finding::NamespaceExemption);
        assert_eq!(d.verdict, Verdict::Deny);
        let d = judged(
            &policy,
            &namespace_review("CREATE", None, Some(ignored.clone()), "alice"),
        );
        assert_eq!(d.verdict, Verdict::Deny);
    }
    let d = judged(
        &Policy::embedded(),
        &namespace_review(
            "UPDATE",
            Some(plain.clone()),
            Some(ignored.clone()),
            "system:serviceaccount:flux-system:kustomize-controller",
        ),
    );
    assert_eq!(d.verdict, Verdict::Allow);
    // Removing it, or keeping it, is not an exemption.
    let d = judged(
        &Policy::embedded(),
        &namespace_review("UPDATE", Some(ignored.clone()), Some(plain), "alice"),
    );
    assert_eq!(d.verdict, Verdict::Allow);
}

fn network_policy() -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
           "metadata": {"name": "db", "namespace": "production",
                        "annotations": {"argocd.argoproj.io/tracking-id": "myapp:networking.k8s.io/NetworkPolicy:production/db"}},
           "spec": {"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"],
                    "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}]}})
}

/// `namespaceSelector: {}` selects every namespace: not the same as absent.
#[test]
fn an_empty_selector_is_drift() {
    let old = network_policy();
    let new = with(&old, "/spec/ingress/0/from/0/namespaceSelector", json!({}));
    let out = run(&Policy::embedded(), &Review::update(old, new));
    assert!(!out.allowed(), "{:?}", out.decision);
    assert_eq!(
        out.decision.drifted_paths,
        vec!["/spec/ingress/0/from/0/namespaceSelector"]
    );
}

/// Warn mode: planting a decision input is refused, not only warned about.
#[test]
fn decision_inputs_are_refused_in_warn_and_audit_mode() {
    let old = deployment();
    let planted = with(
        &old,
        "/metadata/annotations/driftguard.io~1mode",
        json!("audit"),
    );
    for mode in ["warn", "audit"] {
        let policy = policy_with(&format!("mode: {mode}\nnamespaces: []\n"));
        let out = run(&policy, &Review::update(old.clone(), planted.clone()));
        assert!(!out.allowed(), "{mode}: {:?}", out.decision);
        assert!(
            out.message().contains("refused in every mode"),
            "{}",
            out.message()
        );
        // An ordinary change stays a warning.
        let image = with(&old, "/spec/template/spec/containers/0/image", json!("x"));
        let out = run(&policy, &Review::update(old.clone(), image));
        assert!(out.allowed(), "{mode}: {}", out.message());
    }
}

/// The tools' own per-object knobs are inputs: no rule hides a change to them.
#[test]
fn gitops_tool_knobs_are_decision_inputs() {
    let argo = deployment();
    let mut flux = deployment();
    flux["metadata"]["annotations"] = json!({});
    flux["metadata"]["labels"] = json!({"kustomize.toolkit.fluxcd.io/name": "apps",
                                        "kustomize.toolkit.fluxcd.io/namespace": "flux-system"});
    let cases = [
        (
            &argo,
            "/metadata/annotations/argocd.argoproj.io~1sync-options",
            "Prune=false",
        ),
        (
            &argo,
            "/metadata/annotations/argocd.argoproj.io~1compare-options",
            "IgnoreExtraneous",
        ),
        (
            &argo,
            "/metadata/annotations/argocd.argoproj.io~1ignore-differences",
            "jsonPointers: [/spec]",
        ),
        (
            &flux,
            "/metadata/annotations/kustomize.toolkit.fluxcd.io~1prune",
            "disabled",
        ),
        (
            &flux,
            "/metadata/labels/kustomize.toolkit.fluxcd.io~1prune",
            "disabled",
        ),
        (
            &flux,
            "/metadata/annotations/kustomize.toolkit.fluxcd.io~1ssa",
            "Ignore",
        ),
        (
            &flux,
            "/metadata/labels/kustomize.toolkit.fluxcd.io~1ssa",
            "IfNotPresent",
        ),
        (
            &flux,
            "/metadata/annotations/kustomize.toolkit.fluxcd.io~1force",
            "enabled",
        ),
    ];
    let policy = metadata_ignored();
    for (obj, pointer, value) in cases {
        let out = run(
            &policy,
            &Review::update(obj.clone(), with(obj, pointer, json!(value))),
        );
        assert!(!out.allowed(), "{pointer}: {:?}", out.decision);
        assert_eq!(out.decision.inputs_changed, vec![pointer], "{pointer}");
    }
}

fn application(namespace: &str, pointer: &str) -> driftguard::policy::Application {
    let yaml = format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {{name: myapp, namespace: {namespace}}}\n\
         spec:\n  project: default\n  source: {{repoURL: https://git.example.com/{namespace}.git, path: app}}\n\
         \x20 destination: {{server: https://kubernetes.default.svc, namespace: production}}\n\
         \x20 ignoreDifferences:\n  - {{group: apps, kind: Deployment, jsonPointers: [{pointer}]}}\n"
    );
    driftguard::policy::argocd::parse(&yaml, "app.yaml")
        .unwrap()
        .applications
        .pop()
        .unwrap()
}

/// A bare tracking name (`myapp:...`) names the Application in Argo CD's own
/// namespace; one of the same name in a tenant's namespace has no say.
#[test]
fn a_bare_tracking_name_resolves_only_in_the_control_plane() {
    let old = deployment();
    let new = with(
        &old,
        "/spec/template/spec/containers/0/image",
        json!("evil:1"),
    );
    let tenant = Policy::embedded().with_applications(vec![application(
        "team-a",
        "/spec/template/spec/containers",
    )]);
    let out = run(&tenant, &Review::update(old.clone(), new.clone()));
    assert!(!out.allowed(), "{:?}", out.decision);
    let control_plane = Policy::embedded().with_applications(vec![application(
        "argocd",
        "/spec/template/spec/containers",
    )]);
    let out = run(&control_plane, &Review::update(old.clone(), new.clone()));
    assert!(out.allowed(), "{}", out.message());
    // `team-a_myapp` names exactly that one.
    let namespaced = with(
        &old,
        "/metadata/annotations/argocd.argoproj.io~1tracking-id",
        json!("team-a_myapp:apps/Deployment:production/web"),
    );
    let edited = with(
        &namespaced,
        "/spec/template/spec/containers/0/image",
        json!("evil:1"),
    );
    let out = run(&tenant, &Review::update(namespaced.clone(), edited.clone()));
    assert!(out.allowed(), "{}", out.message());
    let out = run(&control_plane, &Review::update(namespaced, edited));
    assert!(!out.allowed(), "{:?}", out.decision);
}

/// argocd-server writes what UI and API users do: not a controller.
#[test]
fn argocd_server_is_not_a_controller() {
    let old = deployment();
    let new = with(
        &old,
        "/spec/template/spec/containers/0/image",
        json!("web:2"),
    );
    let out = run(
        &Policy::embedded(),
        &Review::update(old, new).by(
            "system:serviceaccount:argocd:argocd-server",
            &["system:serviceaccounts"],
        ),
    );
    assert!(!out.allowed(), "{:?}", out.decision);
    assert!(
        out.warnings()
            .iter()
            .any(|w| w.contains("argocd-server writes on behalf")),
        "{:?}",
        out.warnings()
    );
}

/// What the tool itself reads is protected like what driftguard reads:
/// Argo CD's last-applied record, and its own field manager's ownership.
#[test]
fn what_the_tools_read_cannot_be_planted() {
    const LAST_APPLIED: &str =
        "/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration";
    let policy = metadata_ignored();
    let old = with(
        &deployment(),
        LAST_APPLIED,
        json!(r#"{"apiVersion":"apps/v1","kind":"Deployment","spec":{"template":{}}}"#),
    );
    // Adding spec.replicas there makes Argo CD's next sync delete replicas.
    let planted = with(
        &old,
        LAST_APPLIED,
        json!(
            r#"{"apiVersion":"apps/v1","kind":"Deployment","spec":{"replicas":5,"template":{}}}"#
        ),
    );
    let out = run(&policy, &Review::update(old.clone(), planted));
    assert!(!out.allowed(), "{:?}", out.decision);
    assert_eq!(out.decision.inputs_changed, vec![LAST_APPLIED]);
    // The same record written again with other spacing is no change.
    let respaced = with(
        &old,
        LAST_APPLIED,
        json!(r#"{"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": {}}}"#),
    );
    let out = run(&policy, &Review::update(old, respaced));
    assert!(out.allowed(), "{}", out.message());

    // Giving kustomize-controller spec.replicas (a server-side apply with
    // its field manager): its next apply removes replicas Git lacks.
    let mut flux = deployment();
    flux["metadata"]["annotations"] = json!({});
    flux["metadata"]["labels"] = json!({"kustomize.toolkit.fluxcd.io/name": "apps",
                                        "kustomize.toolkit.fluxcd.io/namespace": "flux-system"});
    flux["metadata"]["managedFields"] = json!([{"manager": "kustomize-controller", "operation": "Apply",
        "apiVersion": "apps/v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {}}}}]);
    let mut grown = flux.clone();
    grown["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"] = json!({"f:replicas": {}});
    let out = run(&policy, &Review::update(flux.clone(), grown));
    assert!(!out.allowed(), "{:?}", out.decision);
    assert_eq!(out.decision.inputs_changed, vec!["/metadata/managedFields"]);

    // A client-side `kubectl apply` of a Flux object adds the record, which
    // kustomize-controller removes at its next apply (the generative oracle
    // found it allowed, then reverted).
    let applied = with(
        &flux,
        LAST_APPLIED,
        json!(r#"{"apiVersion":"apps/v1","kind":"Deployment","spec":{"template":{}}}"#),
    );
    let out = run(&policy, &Review::update(flux, applied));
    assert!(!out.allowed(), "{:?}", out.decision);
    assert_eq!(out.decision.inputs_changed, vec![LAST_APPLIED]);
}

/// Application argocd/myapp with these metadata annotations and sync
/// options, ignoring every annotation.
fn argo_app(annotations: &str, sync_options: &str) -> driftguard::policy::Application {
    let yaml = format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\n\
         metadata: {{name: myapp, namespace: argocd, annotations: {{{annotations}}}}}\n\
         spec:\n  project: default\n\
         \x20 destination: {{server: https://kubernetes.default.svc, namespace: production}}\n\
         \x20 syncPolicy: {{syncOptions: [{sync_options}]}}\n\
         \x20 ignoreDifferences:\n  - {{group: '*', kind: '*', jsonPointers: [/metadata/annotations]}}\n"
    );
    driftguard::policy::argocd::parse(&yaml, "app.yaml")
        .unwrap()
        .applications
        .pop()
        .unwrap()
}

/// Under `precision: ownedFields` the record says what Argo CD owns only
/// where it syncs by client-side apply: under server-side apply its `Apply`
/// entry does, so a person's client-side `kubectl apply` that adds a record
/// and an unowned label is no drift there (Server-Side Diff compares neither).
#[test]
fn under_server_side_apply_the_record_owns_nothing() {
    const LAST_APPLIED: &str =
        "/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration";
    let mut old = deployment();
    old["metadata"]["managedFields"] = json!([{"manager": "argocd-controller", "operation": "Apply",
        "apiVersion": "apps/v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]);
    let applied = with(
        &with(&old, "/metadata/labels/team", json!("x")),
        LAST_APPLIED,
        json!(
            r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"labels":{"team":"x"}},"spec":{"replicas":3}}"#
        ),
    );
    let owned_fields = |annotations: &str, sync_options: &str| {
        policy_with("precision: ownedFields\n")
            .with_applications(vec![argo_app(annotations, sync_options)])
    };
    let out = run(
        &owned_fields("", "ServerSideApply=true"),
        &Review::update(old.clone(), applied.clone()),
    );
    assert!(out.allowed(), "{}", out.message());
    assert_eq!(
        out.decision.finding,
        Finding::UnownedChange,
        "{:?}",
        out.decision
    );
    // Under the legacy diff the new record would make Argo CD own the label.
    let out = run(
        &owned_fields(
            "argocd.argoproj.io/compare-options: ServerSideDiff=false",
            "ServerSideApply=true",
        ),
        &Review::update(old, applied),
    );
    assert!(!out.allowed(), "{:?}", out.decision);
    assert!(
        out.decision
            .inputs_changed
            .contains(&LAST_APPLIED.to_owned()),
        "{:?}",
        out.decision
    );
}

/// Server-Side Diff drops the last-applied record from both sides before
/// comparing (gitops-engine `serverSideDiff`), so rewriting it is no drift
/// there; the mode is read from the Application as Argo CD v3.6 reads it
/// (`shouldUseServerSideDiff`). tests/e2e_argocd_modes.rs shows it with the
/// real controller.
#[test]
fn the_last_applied_record_counts_only_under_the_legacy_diff() {
    const LAST_APPLIED: &str =
        "/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration";
    let old = with(
        &deployment(),
        LAST_APPLIED,
        json!(r#"{"apiVersion":"apps/v1","kind":"Deployment","spec":{"template":{}}}"#),
    );
    let rewritten = with(
        &old,
        LAST_APPLIED,
        json!(
            r#"{"apiVersion":"apps/v1","kind":"Deployment","spec":{"replicas":5,"template":{}}}"#
        ),
    );
    let app = |annotations: &str, sync_options: &str| {
        Policy::embedded().with_applications(vec![argo_app(annotations, sync_options)])
    };
    let cases = [
        ("", "", false),
        ("", "RespectIgnoreDifferences=true", false),
        ("", "ServerSideApply=true", true),
        (
            "argocd.argoproj.io/compare-options: 'IgnoreExtraneous, ServerSideDiff=true'",
            "",
            true,
        ),
        (
            "argocd.argoproj.io/compare-options: ServerSideDiff=false",
            "ServerSideApply=true",
            false,
        ),
        // Sync options match exactly, as Argo CD's HasOption does.
        ("", "' ServerSideApply=true'", false),
    ];
    for (annotations, options, allowed) in cases {
        let out = run(
            &app(annotations, options),
            &Review::update(old.clone(), rewritten.clone()),
        );
        assert_eq!(
            out.allowed(),
            allowed,
            "{annotations:?} {options:?}: {:?}",
            out.decision
        );
        if !allowed {
            assert_eq!(out.decision.inputs_changed, vec![LAST_APPLIED]);
            assert!(
                out.message()
                    .contains("the last-applied record that Argo CD's three-way diff reads"),
                "{}",
                out.message()
            );
        }
    }
}

/// The `driftguard.io/drift` record is written by driftguard's mutating
/// webhook for the write itself; anything else in it is forged.
#[test]
fn the_drift_record_cannot_be_forged() {
    const RECORD: &str = "/metadata/annotations/driftguard.io~1drift";
    const IMAGE: &str = "/spec/template/spec/containers/0/image";
    let warn = policy_with("mode: warn\n");
    let old = deployment();
    let edited = with(&old, IMAGE, json!("web:2"));
    let record = |user: &str, time: &str| {
        json!(json!({"user": user, "time": time, "paths": [IMAGE]}).to_string())
    };
    let fresh = now().to_string();
    // What the mutating webhook writes for this write: a warning, as without it.
    let ours = with(&edited, RECORD, record("alice", &fresh));
    let out = run(&warn, &Review::update(old.clone(), ours.clone()));
    assert!(out.allowed(), "{}", out.message());
    assert_eq!(out.decision.verdict, Verdict::Warn);
    for forged in [
        with(&edited, RECORD, record("bob", &fresh)),
        with(&edited, RECORD, record("alice", "2020-01-01T00:00:00Z")),
        with(&edited, RECORD, json!("x".repeat(200_000))),
    ] {
        let out = run(&warn, &Review::update(old.clone(), forged));
        assert!(!out.allowed(), "{:?}", out.decision);
        assert!(out.decision.inputs_changed.contains(&RECORD.to_owned()));
    }
    // Removed or rewritten by hand with nothing else changed.
    let out = run(&warn, &Review::update(ours.clone(), without(&ours, RECORD)));
    assert!(!out.allowed(), "{:?}", out.decision);
}

/// Application argocd/myapp, as the tools' records name it.
fn myapp() -> Manager {
    Manager::ArgoCd {
        application: "myapp".into(),
        application_namespace: Some("argocd".into()),
    }
}

fn judged_with(
    policy: &Policy,
    review: &Review,
    sources: &driftguard::sources::Sources,
) -> driftguard::drift::Decision {
    decided_with(policy, review, sources)
}

fn outcome_with(
    policy: &Policy,
    review: &Review,
    sources: &driftguard::sources::Sources,
) -> Outcome {
    let body = serde_json::to_vec(&review.body()).unwrap();
    let req = driftguard::request::parse(&body).unwrap();
    let judged = driftguard::judge_request(
        policy,
        &req,
        Endpoint::Validate,
        None,
        Some(sources),
        now(),
        &driftguard::deadline::Deadline::none(),
    )
    .unwrap();
    Outcome {
        response: serde_json::from_slice(&judged.to_json()).unwrap(),
        decision: judged.decision,
    }
}

/// Pre-creating an object Git is about to add: Argo CD (or Flux) would adopt
/// it with whatever the person put in it. The tools' records list it.
#[test]
fn an_object_the_tools_list_cannot_be_created_by_hand() {
    let planned = [("apps/Deployment:production/web".into(), myapp().into())];
    let sources = driftguard::sources::Sources {
        planned: std::sync::Arc::new(planned.into_iter().collect()),
        ..Default::default()
    };
    // Untracked, or claiming to be another object's child: refused in every mode.
    let mut bare = without(
        &deployment(),
        "/metadata/annotations/argocd.argoproj.io~1tracking-id",
    );
    bare["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "miner", "image": "evil:1", "securityContext": {"privileged": true}}));
    let child = with(
        &bare,
        "/metadata/ownerReferences",
        json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": "u", "controller": true}]),
    );
    for policy in [Policy::embedded(), policy_with("mode: audit\n")] {
        for obj in [&bare, &child] {
            let d = judged_with(&policy, &Review::create(obj.clone()), &sources);
            assert_eq!(
                d.finding,
                Finding::CreatePlanned("Argo CD application argocd/myapp".into())
            );
            assert_eq!(d.verdict, Verdict::Deny);
        }
    }
    // The tool itself creates it; other names are not listed; and the policy may opt out.
    let argo = Review::create(bare.clone()).by(
        "system:serviceaccount:argocd:argocd-application-controller",
        &[],
    );
    assert_eq!(
        judged_with(&Policy::embedded(), &argo, &sources).verdict,
        Verdict::Allow
    );
    let other = with(&bare, "/metadata/name", json!("web-2"));
    let d = judged_with(&Policy::embedded(), &Review::create(other), &sources);
    assert!(matches!(d.finding, Finding::OutOfScope(_)), "{d:?}");
    let ignore = policy_with("plannedCreates: ignore\n");
    let d = judged_with(&ignore, &Review::create(bare), &sources);
    assert!(matches!(d.finding, Finding::OutOfScope(_)), "{d:?}");
}

/// A CREATE's ownerReference is only its claim: a tracking id naming the
/// object itself keeps it in scope.
#[test]
fn a_claimed_owner_does_not_take_a_tracked_create_out_of_scope() {
    let owned = with(
        &deployment(),
        "/metadata/ownerReferences",
        json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": "u", "controller": true}]),
    );
    let out = run(&Policy::embedded(), &Review::create(owned.clone()));
    assert_eq!(out.decision.finding, Finding::CreateWithTracking);
    assert!(!out.allowed());
    // A label copied from a parent (operators do) still makes a child.
    let mut labelled = without(
        &owned,
        "/metadata/annotations/argocd.argoproj.io~1tracking-id",
    );
    labelled["metadata"]["labels"]["app.kubernetes.io/instance"] = json!("myapp");
    let out = run(&Policy::embedded(), &Review::create(labelled));
    assert!(out.allowed(), "{:?}", out.decision);
}

/// An object a person pre-created with a controller ownerReference, before
/// Flux's first apply, is no child once the Kustomization's inventory lists
/// it: Flux adopted it, keeping the reference, and every write stays judged.
#[test]
fn an_owner_claimed_before_the_tools_first_apply_makes_no_child_of_what_it_lists() {
    let mut adopted = without(
        &deployment(),
        "/metadata/annotations/argocd.argoproj.io~1tracking-id",
    );
    adopted["metadata"]["labels"] = json!({"kustomize.toolkit.fluxcd.io/name": "apps",
        "kustomize.toolkit.fluxcd.io/namespace": "flux-system"});
    adopted["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "anchor", "uid": "u", "controller": true}]);
    let edited = with(
        &adopted,
        "/spec/template/spec/containers/0/image",
        json!("evil:1"),
    );
    let review = Review::update(adopted.clone(), edited);
    let apps = Manager::FluxKustomization {
        namespace: "flux-system".into(),
        name: "apps".into(),
    };
    let listed = listing(&[("apps/Deployment:production/web", apps)]);
    let d = judged_with(&Policy::embedded(), &review, &listed);
    assert_eq!(d.verdict, Verdict::Deny, "{d:?}");
    // Not listed (a real child): its owner is judged.
    let d = judged_with(&Policy::embedded(), &review, &Default::default());
    assert!(matches!(d.finding, Finding::OutOfScope(_)), "{d:?}");
}

/// Before Flux's first apply, a person's CREATE with Flux's labels and an
/// owner of their own, or Flux's opt-out, is judged: the owner would make the
/// adopted object a child, and the opt-out would make Flux skip Git's version.
#[test]
fn a_create_with_flux_labels_cannot_claim_an_owner_or_opt_out() {
    let mut flux = without(
        &deployment(),
        "/metadata/annotations/argocd.argoproj.io~1tracking-id",
    );
    flux["metadata"]["labels"] = json!({"kustomize.toolkit.fluxcd.io/name": "apps",
        "kustomize.toolkit.fluxcd.io/namespace": "flux-system"});
    let owned = with(
        &flux,
        "/metadata/ownerReferences",
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "anchor", "uid": "u", "controller": true}]),
    );
    let opted_out = with(
        &flux,
        "/metadata/annotations",
        json!({"kustomize.toolkit.fluxcd.io/reconcile": "disabled"}),
    );
    for (created, mode) in [
        (owned, "enforce"),
        (opted_out.clone(), "enforce"),
        (opted_out, "audit"),
    ] {
        let out = run(
            &policy_with(&format!("mode: {mode}\n")),
            &Review::create(created.clone()),
        );
        assert!(!out.allowed(), "{mode}: {created} {:?}", out.decision);
    }
}

/// The label a watched argocd-cm makes Argo CD track by is a claim, and so a
/// decision input: taking it off, or changing it, under a rule that ignores
/// labels, in warn mode, or beside an armed break-glass, is refused.
#[test]
fn argocd_cms_instance_label_is_an_input_like_the_policys() {
    let sources = driftguard::sources::Sources::of_argocd(driftguard::drift::ArgoCdSources {
        instance_label: Some("team.io/app".into()),
        ..Default::default()
    });
    let mut stored = without(
        &deployment(),
        "/metadata/annotations/argocd.argoproj.io~1tracking-id",
    );
    stored["metadata"]["labels"] = json!({"team.io/app": "shop"});
    let image = "/spec/template/spec/containers/0/image";
    let edited = with(&stored, image, json!("web:2"));
    let ignoring_labels =
        "ignoreDifferences:\n  - {group: '*', kind: '*', jsonPointers: [/metadata/labels]}\n";
    let d = judged_with(
        &policy_with(ignoring_labels),
        &Review::update(stored.clone(), edited),
        &sources,
    );
    assert_eq!(
        d.verdict,
        Verdict::Deny,
        "managed by argocd-cm's label: {d:?}"
    );
    let unlabelled = without(&stored, "/metadata/labels/team.io~1app");
    let relabelled = with(&stored, "/metadata/labels/team.io~1app", json!("other"));
    for policy in [ignoring_labels.to_owned(), "mode: warn\n".to_owned()] {
        for new in [&unlabelled, &relabelled] {
            let d = judged_with(
                &policy_with(&policy),
                &Review::update(stored.clone(), new.clone()),
                &sources,
            );
            assert_eq!(d.verdict, Verdict::Deny, "{policy}: {new} {d:?}");
            assert!(
                d.inputs_changed
                    .contains(&"/metadata/labels/team.io~1app".to_owned()),
                "{d:?}"
            );
        }
    }
}

/// A scale write whose parent cannot be read (a custom resource driftguard
/// may not get): a parent the tools list is tracked, so the default is not allow.
#[test]
fn an_unreadable_but_listed_scale_parent_is_not_allowed() {
    let mut review = Review::scale("rollouts", "web", 3, 5);
    review.resource_override = Some(("argoproj.io".into(), "rollouts".into()));
    let planned = [("argoproj.io/Rollout:production/web".into(), myapp().into())];
    let sources = driftguard::sources::Sources {
        planned: std::sync::Arc::new(planned.into_iter().collect()),
        ..Default::default()
    };
    let d = judged_with(&Policy::embedded(), &review, &sources);
    assert_eq!(d.verdict, Verdict::Deny, "{d:?}");
    // Not listed: unknownScaleParent (warn) still decides.
    let d = judged_with(&Policy::embedded(), &review, &Default::default());
    assert_eq!(d.verdict, Verdict::Warn, "{d:?}");
    // Listed by an Application that ignores the replicas: its rules apply
    // as they would to the parent read; a second lister that does not
    // ignore them makes it drift again (the strictest reading).
    let application = |name: &str, ignores: bool| {
        let rules = if ignores {
            json!([{"group": "argoproj.io", "kind": "Rollout", "jsonPointers": ["/spec/replicas"]}])
        } else {
            json!([])
        };
        std::sync::Arc::new(
            driftguard::policy::argocd::from_value(&json!({
                "metadata": {"name": name, "namespace": "argocd"},
                "spec": {"ignoreDifferences": rules},
            }))
            .unwrap(),
        )
    };
    let other = Manager::ArgoCd {
        application: "other".into(),
        application_namespace: Some("argocd".into()),
    };
    let key: std::sync::Arc<str> = "argoproj.io/Rollout:production/web".into();
    let listed_by = |more: Vec<Manager>| driftguard::sources::Sources {
        planned: std::sync::Arc::new(vec![(key.clone(), myapp().into())].into()),
        more_listers: std::sync::Arc::new(vec![(key.clone(), more)].into()),
        ..driftguard::sources::Sources::of_argocd(driftguard::drift::ArgoCdSources {
            applications: vec![application("myapp", true), application("other", false)].into(),
            ..Default::default()
        })
    };
    let d = judged_with(&Policy::embedded(), &review, &listed_by(vec![]));
    assert_eq!(d.verdict, Verdict::Allow, "{d:?}");
    let d = judged_with(&Policy::embedded(), &review, &listed_by(vec![other]));
    assert_eq!(d.verdict, Verdict::Deny, "{d:?}");
    // A tenant's Application (outside Argo CD's namespace) lists what it
    // likes: its rules lend nothing, whatever it ignores.
    let tenants = Manager::ArgoCd {
        application: "myapp".into(),
        application_namespace: Some("team-a".into()),
    };
    let tenant_app = json!({
        "metadata": {"name": "myapp", "namespace": "team-a"},
        "spec": {"ignoreDifferences": [{"group": "argoproj.io", "kind": "Rollout", "jsonPointers": ["/spec/replicas"]}]},
    });
    let listed_by_tenant = driftguard::sources::Sources {
        planned: std::sync::Arc::new(vec![(key.clone(), tenants.into())].into()),
        ..driftguard::sources::Sources::of_argocd(driftguard::drift::ArgoCdSources {
            applications: vec![std::sync::Arc::new(
                driftguard::policy::argocd::from_value(&tenant_app).unwrap(),
            )]
            .into(),
            ..Default::default()
        })
    };
    let d = judged_with(&Policy::embedded(), &review, &listed_by_tenant);
    assert_eq!(d.verdict, Verdict::Deny, "{d:?}");
}

/// The tool's own identity for the object creates it: the service account a
/// Kustomization impersonates (Argo CD's sync account works alike).
#[test]
fn the_tools_own_account_creates_what_it_lists() {
    use driftguard::sources::{FluxKind, flux_from_value};
    let kustomization = json!({"metadata": {"name": "apps", "namespace": "tenant-a"},
        "spec": {"serviceAccountName": "reconciler"}});
    let apps = Manager::FluxKustomization {
        namespace: "tenant-a".into(),
        name: "apps".into(),
    };
    let sources = driftguard::sources::Sources {
        flux: vec![std::sync::Arc::new(
            flux_from_value(FluxKind::Kustomization, &kustomization).unwrap(),
        )],
        planned: std::sync::Arc::new(
            vec![("apps/Deployment:production/web".into(), apps.into())].into(),
        ),
        ..Default::default()
    };
    let bare = without(
        &deployment(),
        "/metadata/annotations/argocd.argoproj.io~1tracking-id",
    );
    let tenant = Review::create(bare.clone()).by("system:serviceaccount:tenant-a:reconciler", &[]);
    let d = judged_with(&Policy::embedded(), &tenant, &sources);
    assert_eq!(
        (d.finding, d.verdict),
        (Finding::Controller, Verdict::Allow)
    );
    let d = judged_with(&Policy::embedded(), &Review::create(bare.clone()), &sources);
    assert_eq!(d.verdict, Verdict::Deny);
    // Listed by its Kustomization, claimed by another's labels: the lister's
    // account is not that one's, and the strictest decision stands.
    let mut theirs = bare;
    theirs["metadata"]["labels"] = json!({"kustomize.toolkit.fluxcd.io/name": "shop",
        "kustomize.toolkit.fluxcd.io/namespace": "team-b"});
    let tenant = Review::create(theirs).by("system:serviceaccount:tenant-a:reconciler", &[]);
    let d = judged_with(&Policy::embedded(), &tenant, &sources);
    assert_eq!(d.verdict, Verdict::Deny, "{d:?}");
}

/// With an installation ID, an object tracked by another Argo CD
/// installation gets none of this installation's Application rules.
#[test]
fn an_installation_id_is_respected() {
    let with_rule = |yaml: &str| {
        policy_with(yaml).with_applications(vec![application(
            "argocd",
            "/spec/template/spec/containers",
        )])
    };
    let old = deployment();
    let new = with(
        &old,
        "/spec/template/spec/containers/0/image",
        json!("evil:1"),
    );
    // No installation ID: the Application's rule applies.
    let out = run(&with_rule("{}"), &Review::update(old.clone(), new.clone()));
    assert!(out.allowed(), "{}", out.message());
    let ours = "gitops: {argocd: {installationID: prod-argocd}}\n";
    let out = run(&with_rule(ours), &Review::update(old.clone(), new.clone()));
    assert!(!out.allowed(), "{:?}", out.decision);
    assert!(
        out.warnings()
            .iter()
            .any(|w| w.contains("another Argo CD installation")),
        "{:?}",
        out.warnings()
    );
    const ID: &str = "/metadata/annotations/argocd.argoproj.io~1installation-id";
    let (old, new) = (
        with(&old, ID, json!("prod-argocd")),
        with(&new, ID, json!("prod-argocd")),
    );
    let out = run(&with_rule(ours), &Review::update(old, new));
    assert!(out.allowed(), "{}", out.message());
}

// Issue 20, item 3: scalers as deputies. `kubectl scale` is denied; an HPA
// (or a KEDA ScaledObject) with min = max makes the trusted HPA controller
// write the same `/spec/replicas`.

fn hpa(api_version: &str, target: &str, min: i64, max: i64) -> Value {
    json!({"apiVersion": api_version, "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": "web-hpa", "namespace": "production", "resourceVersion": "7"},
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                    "minReplicas": min, "maxReplicas": max}})
}

fn scaled_object(target: &str, min: i64, max: i64) -> Value {
    json!({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
           "metadata": {"name": "web-so", "namespace": "production", "resourceVersion": "7"},
           "spec": {"scaleTargetRef": {"name": target}, "minReplicaCount": min, "maxReplicaCount": max,
                    "triggers": [{"type": "cpu", "metadata": {"value": "50"}}]}})
}

/// The target's own replicas ignored, as Argo CD's docs recommend with an HPA.
fn replicas_ignored() -> Policy {
    policy_with(
        "ignoreDifferences:\n  - {group: apps, kind: Deployment, jsonPointers: [/spec/replicas]}\n",
    )
}

fn scaler_run(policy: &Policy, review: &Review, target: &Value) -> Outcome {
    run_with(policy, review, Endpoint::Validate, Some(target))
}

#[test]
fn an_hpa_pinning_a_managed_deployment_is_the_scale_write_it_causes() {
    let target = deployment();
    for scaler in [
        hpa("autoscaling/v2", "web", 5, 5),
        hpa("autoscaling/v1", "web", 5, 5),
        scaled_object("web", 5, 5),
    ] {
        let out = scaler_run(
            &Policy::embedded(),
            &Review::create(scaler.clone()),
            &target,
        );
        assert!(!out.allowed(), "{:?}", out.decision);
        assert_eq!(
            out.decision.finding,
            Finding::ScalerTarget("Deployment production/web".into())
        );
        assert_eq!(out.decision.drifted_paths, vec!["/spec/replicas"]);
        let message = out.message();
        assert!(
            message.contains("would scale Deployment production/web")
                && message.contains("/spec/replicas")
                && message.contains("in Git"),
            "{message}"
        );
        // Warn mode allows it with a warning, and records nothing on the scaler.
        let out = run_with(
            &policy_with("mode: warn\n"),
            &Review::create(scaler.clone()),
            Endpoint::Mutate,
            Some(&target),
        );
        assert_eq!(out.decision.verdict, Verdict::Warn, "{:?}", out.decision);
        assert!(
            out.response["response"]["patch"].is_null(),
            "{}",
            out.response
        );
        // The target's rules ignore /spec/replicas: allowed, as `kubectl scale` is.
        let out = scaler_run(
            &replicas_ignored(),
            &Review::create(scaler.clone()),
            &target,
        );
        assert!(out.allowed(), "{}", out.message());
        assert_eq!(out.decision.finding, Finding::NoDrift);
        // So does the managing Application's ignoreDifferences.
        let app =
            Policy::embedded().with_applications(vec![application("argocd", "/spec/replicas")]);
        let out = scaler_run(&app, &Review::create(scaler.clone()), &target);
        assert!(out.allowed(), "{}", out.message());
        // A Deployment nobody manages: not driftguard's concern.
        let unmanaged = without(
            &target,
            "/metadata/annotations/argocd.argoproj.io~1tracking-id",
        );
        let out = scaler_run(&Policy::embedded(), &Review::create(scaler), &unmanaged);
        assert!(out.allowed(), "{}", out.message());
        assert!(matches!(out.decision.finding, Finding::OutOfScope(_)));
    }
}

/// Retargeting, or changing the bounds, is judged; labels are not scaling.
#[test]
fn an_hpa_retargeted_at_a_managed_deployment_is_denied() {
    let target = deployment();
    let old = hpa("autoscaling/v2", "other", 1, 3);
    let retargeted = with(&old, "/spec/scaleTargetRef/name", json!("web"));
    let out = scaler_run(
        &Policy::embedded(),
        &Review::update(old, retargeted.clone()),
        &target,
    );
    assert!(!out.allowed(), "{:?}", out.decision);
    let pinned = with(&retargeted, "/spec/minReplicas", json!(3));
    let out = scaler_run(
        &Policy::embedded(),
        &Review::update(retargeted.clone(), pinned),
        &target,
    );
    assert!(!out.allowed(), "{:?}", out.decision);
    // KEDA pauses at a count through an annotation.
    let so = scaled_object("web", 1, 3);
    let paused = with(
        &so,
        "/metadata/annotations",
        json!({"autoscaling.keda.sh/paused-replicas": "0"}),
    );
    let out = scaler_run(&Policy::embedded(), &Review::update(so, paused), &target);
    assert!(!out.allowed(), "{:?}", out.decision);
    let labelled = with(&retargeted, "/metadata/labels", json!({"team": "a"}));
    let out = scaler_run(
        &Policy::embedded(),
        &Review::update(retargeted, labelled),
        &target,
    );
    assert!(out.allowed(), "{}", out.message());
}

/// A scaler in Git is the GitOps tool's: its own judgement applies, and the
/// tool's writes are allowed. A claimed owner does not make a scaler a child.
#[test]
fn a_gitops_managed_scaler_is_judged_as_itself() {
    let target = deployment();
    let tracked = with(
        &hpa("autoscaling/v2", "web", 5, 5),
        "/metadata/annotations",
        json!({"argocd.argoproj.io/tracking-id": "myapp:autoscaling/HorizontalPodAutoscaler:production/web-hpa"}),
    );
    let argo = Review::create(tracked.clone()).by(
        "system:serviceaccount:argocd:argocd-application-controller",
        &[],
    );
    let out = scaler_run(&Policy::embedded(), &argo, &target);
    assert_eq!(out.decision.finding, Finding::Controller);
    let bumped = with(&tracked, "/spec/maxReplicas", json!(9));
    let argo = Review::update(tracked.clone(), bumped.clone()).by(
        "system:serviceaccount:argocd:argocd-application-controller",
        &[],
    );
    assert!(scaler_run(&Policy::embedded(), &argo, &target).allowed());
    // By hand: drift on the HPA itself.
    let out = scaler_run(
        &Policy::embedded(),
        &Review::update(tracked, bumped),
        &target,
    );
    assert_eq!(out.decision.finding, Finding::Drift, "{:?}", out.decision);
    assert!(!out.allowed());
    let owned = with(
        &hpa("autoscaling/v2", "web", 5, 5),
        "/metadata/ownerReferences",
        json!([{"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "name": "x", "uid": "u", "controller": true}]),
    );
    let out = scaler_run(&Policy::embedded(), &Review::create(owned), &target);
    assert!(!out.allowed(), "{:?}", out.decision);
}

/// Whoever may `kubectl scale` the target may point a scaler at it: the
/// controllers, and an authorized break-glass on the target.
#[test]
fn a_scaler_is_allowed_where_its_scale_write_would_be() {
    let scaler = Review::create(hpa("autoscaling/v2", "web", 5, 5));
    let policy = policy_with("breakGlass:\n  allowedGroups: [sre-oncall]\n  maxDuration: 2h\n");
    let glass = with(
        &deployment(),
        "/metadata/annotations/driftguard.io~1break-glass",
        json!("INC-1 traffic spike"),
    );
    let glass = with(
        &glass,
        "/metadata/annotations/driftguard.io~1break-glass-expires",
        json!("2026-11-29T11:00:00Z"),
    );
    let sam = scaler.clone().by("sam", &["sre-oncall"]);
    let out = scaler_run(&policy, &sam, &glass);
    assert_eq!(
        out.decision.finding,
        Finding::BreakGlass,
        "{:?}",
        out.decision
    );
    assert!(out.allowed());
    let out = scaler_run(&policy, &scaler, &glass);
    assert!(!out.allowed(), "{:?}", out.decision);
    let kcm = scaler.by("system:kube-controller-manager", &[]);
    assert!(scaler_run(&Policy::embedded(), &kcm, &deployment()).allowed());
}

/// An unreadable target follows `unknownScaleParent`, as an unreadable
/// scale parent does; an object read that is not the target is unreadable.
#[test]
fn an_unreadable_scaler_target_follows_unknown_scale_parent() {
    let scaler = Review::create(hpa("autoscaling/v2", "web", 5, 5));
    let deny = policy_with("unknownScaleParent: deny\n");
    let out = run(&deny, &scaler);
    assert_eq!(
        out.decision.finding,
        Finding::UnknownParent,
        "{:?}",
        out.decision
    );
    assert!(!out.allowed());
    assert_eq!(
        run(&Policy::embedded(), &scaler).decision.verdict,
        Verdict::Warn
    );
    let other = with(&deployment(), "/metadata/name", json!("api"));
    let out = scaler_run(&deny, &scaler, &other);
    assert_eq!(
        out.decision.finding,
        Finding::UnknownParent,
        "{:?}",
        out.decision
    );
    // Its kind's rules still apply without it.
    let ignored = policy_with(
        "unknownScaleParent: deny\nignoreDifferences:\n  - {group: apps, kind: Deployment, jsonPointers: [/spec/replicas]}\n",
    );
    assert!(run(&ignored, &scaler).allowed());
    // A target the tools' records list is tracked, read or not.
    let rollout = with(
        &hpa("autoscaling/v2", "web", 5, 5),
        "/spec/scaleTargetRef",
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "name": "web"}),
    );
    let planned = [("argoproj.io/Rollout:production/web".into(), myapp().into())];
    let sources = driftguard::sources::Sources {
        planned: std::sync::Arc::new(planned.into_iter().collect()),
        ..Default::default()
    };
    let d = judged_with(
        &Policy::embedded(),
        &Review::create(rollout.clone()),
        &sources,
    );
    assert_eq!(d.verdict, Verdict::Deny, "{d:?}");
    let d = judged_with(
        &Policy::embedded(),
        &Review::create(rollout),
        &Default::default(),
    );
    assert_eq!(d.verdict, Verdict::Warn, "{d:?}");
}

/// The garbage collector deletes an object with its owners: naming an
/// untracked owner on a managed object by hand (so that deleting the owner
/// would cascade to it) is itself drift.
#[test]
fn an_owner_added_to_a_managed_object_is_drift() {
    let old = deployment();
    for controller in [false, true] {
        let new = with(
            &old,
            "/metadata/ownerReferences",
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "anchor", "uid": "u-9", "controller": controller}]),
        );
        let out = run(&Policy::embedded(), &Review::update(old.clone(), new));
        assert!(!out.allowed(), "{:?}", out.decision);
        assert!(
            out.decision
                .drifted_paths
                .iter()
                .any(|p| p.starts_with("/metadata/ownerReferences")),
            "{:?}",
            out.decision
        );
    }
}

fn kustomization(name: &str) -> Manager {
    Manager::FluxKustomization {
        namespace: "flux-system".into(),
        name: name.into(),
    }
}

/// The tools' records, as the source cache builds them.
fn listing(objects: &[(&str, Manager)]) -> driftguard::sources::Sources {
    driftguard::sources::Sources {
        planned: std::sync::Arc::new(
            objects
                .iter()
                .map(|(k, m)| ((*k).into(), m.clone().into()))
                .collect(),
        ),
        ..Default::default()
    }
}

fn untracked_namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name},
           "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
}

/// A Namespace DELETE: the namespace controller then deletes what is in it
/// as a trusted identity, so the Namespace delete is where it is judged.
#[test]
fn deleting_a_namespace_that_holds_flux_objects_is_refused() {
    let sources = listing(&[
        ("apps/Deployment:team/web", kustomization("apps")),
        ("/ConfigMap:team/web-config", kustomization("apps")),
        ("/ConfigMap:other/x", kustomization("apps")),
    ]);
    let team = untracked_namespace("team");
    let out = outcome_with(&Policy::embedded(), &Review::delete(team.clone()), &sources);
    assert!(!out.allowed(), "{:?}", out.decision);
    assert_eq!(
        out.decision.finding,
        Finding::DeleteCascade(
            "2 managed objects (/ConfigMap:team/web-config, apps/Deployment:team/web, \
             managed by Flux Kustomization flux-system/apps)"
                .into()
        )
    );
    assert_eq!(out.decision.manager, Some(kustomization("apps")));
    let message = out.message();
    for part in [
        "deleting Namespace production/team deletes 2 managed objects",
        "Flux Kustomization flux-system/apps",
        "Remove them from Git",
        "break-glass is disabled",
    ] {
        assert!(message.contains(part), "{part}: {message}");
    }
    // An empty namespace, or one holding only unmanaged objects, is not guarded.
    let d = judged_with(
        &Policy::embedded(),
        &Review::delete(untracked_namespace("empty")),
        &sources,
    );
    assert!(matches!(d.finding, Finding::OutOfScope(_)), "{d:?}");
    // The Flux controller may; so may trusted identities.
    for user in [
        "system:serviceaccount:flux-system:kustomize-controller",
        "system:serviceaccount:kube-system:namespace-controller",
    ] {
        let d = judged_with(
            &Policy::embedded(),
            &Review::delete(team.clone()).by(user, &[]),
            &sources,
        );
        assert_eq!(d.verdict, Verdict::Allow, "{user}: {d:?}");
    }
    // The namespace controller's own deletes of what is in it stay trusted.
    let mut web = deployment();
    web["metadata"] = json!({"name": "web", "namespace": "team",
        "labels": {"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}});
    let d = judged_with(
        &Policy::embedded(),
        &Review::delete(web).by(
            "system:serviceaccount:kube-system:namespace-controller",
            &[],
        ),
        &sources,
    );
    assert_eq!((d.finding, d.verdict), (Finding::Trusted, Verdict::Allow));
    // Modes as for a manual delete of those objects: the policy's mode for
    // their namespace, never an annotation on the untracked Namespace.
    let d = judged_with(
        &policy_with("mode: warn\n"),
        &Review::delete(team.clone()),
        &sources,
    );
    assert_eq!(d.verdict, Verdict::Warn, "{d:?}");
    let planted = with(
        &team,
        "/metadata/annotations",
        json!({"driftguard.io/mode": "audit"}),
    );
    let d = judged_with(&Policy::embedded(), &Review::delete(planted), &sources);
    assert_eq!(d.verdict, Verdict::Deny, "{d:?}");
    // Break-glass on the Namespace, by an authorized identity.
    let glass = with(
        &team,
        "/metadata/annotations",
        json!({"driftguard.io/break-glass": "INC-7 wrong cluster",
               "driftguard.io/break-glass-expires": "2026-11-29T11:30:00Z"}),
    );
    let oncall = policy_with("breakGlass:\n  allowedGroups: [sre-oncall]\n  maxDuration: 2h\n");
    let d = judged_with(
        &oncall,
        &Review::delete(glass.clone()).by("sam", &["sre-oncall"]),
        &sources,
    );
    assert_eq!(
        (d.finding, d.verdict),
        (Finding::BreakGlass, Verdict::Allow)
    );
    let d = judged_with(&oncall, &Review::delete(glass), &sources);
    assert_eq!(d.verdict, Verdict::Deny, "{d:?}");
    // With the Flux detector off, Flux's records say nothing (nor is the
    // delete sent).
    let flux_off = policy_with("gitops: {flux: {enabled: false}}\n");
    let d = judged_with(&flux_off, &Review::delete(team), &sources);
    assert!(matches!(d.finding, Finding::OutOfScope(_)), "{d:?}");
}

/// An Application whose destination is another namespace still lists, in
/// its `status.resources`, what it deployed here.
#[test]
fn deleting_a_namespace_that_holds_an_applications_objects_elsewhere_is_refused() {
    let sources = listing(&[
        ("apps/Deployment:production/web", myapp()),
        ("/Service:payments/api", myapp()),
    ]);
    let policy = seed_policy().with_applications(seed_application());
    let d = judged_with(
        &policy,
        &Review::delete(untracked_namespace("payments")),
        &sources,
    );
    assert_eq!(d.verdict, Verdict::Deny, "{d:?}");
    assert_eq!(
        d.finding,
        Finding::DeleteCascade(
            "1 managed object (/Service:payments/api, managed by Argo CD application argocd/myapp)"
                .into()
        )
    );
    // The destination guard still applies, and first.
    let d = judged_with(
        &policy,
        &Review::delete(untracked_namespace("production")),
        &sources,
    );
    assert_eq!(d.finding, Finding::DeleteDestination);
    let argo = Review::delete(untracked_namespace("payments")).by(
        "system:serviceaccount:argocd:argocd-application-controller",
        &[],
    );
    assert_eq!(
        judged_with(&policy, &argo, &sources).verdict,
        Verdict::Allow
    );
}

fn crd(group: &str, kind: &str, plural: &str) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": format!("{plural}.{group}")},
           "spec": {"group": group, "scope": "Namespaced",
                    "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase()},
                    "versions": [{"name": "v1", "served": true, "storage": true}]}})
}

/// A CRD DELETE: the apiserver deletes its custom resources with no
/// admission call at all.
#[test]
fn deleting_a_crd_with_managed_custom_resources_is_refused() {
    let sources = listing(&[
        ("example.com/Widget:team/w1", kustomization("apps")),
        ("example.com/Widget:other/w2", myapp()),
    ]);
    let widgets = crd("example.com", "Widget", "widgets");
    let out = outcome_with(
        &Policy::embedded(),
        &Review::delete(widgets.clone()),
        &sources,
    );
    assert!(!out.allowed(), "{:?}", out.decision);
    assert!(
        out.message().contains(
            "deleting CustomResourceDefinition production/widgets.example.com deletes 2 managed objects \
             (example.com/Widget:other/w2, example.com/Widget:team/w1, managed by Argo CD application \
             argocd/myapp and 1 other)"
        ),
        "{}",
        out.message()
    );
    // Without managed custom resources, or for another kind: allowed.
    let gadgets = crd("example.com", "Gadget", "gadgets");
    let d = judged_with(&Policy::embedded(), &Review::delete(gadgets), &sources);
    assert!(matches!(d.finding, Finding::OutOfScope(_)), "{d:?}");
    let elsewhere = crd("other.example.com", "Widget", "widgets");
    let d = judged_with(&Policy::embedded(), &Review::delete(elsewhere), &sources);
    assert!(matches!(d.finding, Finding::OutOfScope(_)), "{d:?}");
    // A CRD that is itself managed is judged as before: a manual delete.
    let managed = with(
        &widgets,
        "/metadata/labels",
        json!({"kustomize.toolkit.fluxcd.io/name": "crds", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}),
    );
    let d = judged_with(
        &Policy::embedded(),
        &Review::delete(managed),
        &Default::default(),
    );
    assert_eq!(d.finding, Finding::DeleteByHand);
}

/// A Flux tenant's account (the one its Kustomization impersonates) may
/// delete a namespace holding only its own objects, never one that also
/// holds another tenant's.
#[test]
fn a_tenants_account_cannot_delete_another_tenants_objects_with_a_namespace() {
    use driftguard::sources::{FluxKind, flux_from_value};
    let tenant = |name: &str| {
        let k = json!({"metadata": {"name": name, "namespace": name},
            "spec": {"serviceAccountName": "reconciler"}});
        std::sync::Arc::new(flux_from_value(FluxKind::Kustomization, &k).unwrap())
    };
    let of = |name: &str| Manager::FluxKustomization {
        namespace: name.into(),
        name: name.into(),
    };
    let sources = |objects: &[(&str, Manager)]| driftguard::sources::Sources {
        flux: vec![tenant("tenant-a"), tenant("tenant-b")],
        ..listing(objects)
    };
    let review = Review::delete(untracked_namespace("shared"))
        .by("system:serviceaccount:tenant-a:reconciler", &[]);
    let own = sources(&[("/ConfigMap:shared/a", of("tenant-a"))]);
    let d = judged_with(&Policy::embedded(), &review, &own);
    assert_eq!(
        (d.finding, d.verdict),
        (Finding::Controller, Verdict::Allow)
    );
    let both = sources(&[
        ("/ConfigMap:shared/a", of("tenant-a")),
        ("/ConfigMap:shared/b", of("tenant-b")),
    ]);
    let d = judged_with(&Policy::embedded(), &review, &both);
    assert_eq!(d.verdict, Verdict::Deny, "{d:?}");
    assert_eq!(d.manager, Some(of("tenant-b")));
}

/// A HelmRelease's objects are listed nowhere: they live in its release
/// namespace, so deleting that namespace is refused while it is watched.
#[test]
fn deleting_a_helm_releases_target_namespace_is_refused() {
    use driftguard::sources::{FluxKind, flux_from_value};
    let release = |spec: Value| {
        let hr = json!({"metadata": {"name": "redis", "namespace": "flux-system"}, "spec": spec});
        std::sync::Arc::new(flux_from_value(FluxKind::HelmRelease, &hr).unwrap())
    };
    let sources = driftguard::sources::Sources {
        flux: vec![release(json!({"targetNamespace": "cache"}))],
        ..Default::default()
    };
    let out = outcome_with(
        &Policy::embedded(),
        &Review::delete(untracked_namespace("cache")),
        &sources,
    );
    assert!(!out.allowed(), "{:?}", out.decision);
    assert!(
        out.message().contains(
            "deletes 1 managed object (the release of Flux HelmRelease flux-system/redis"
        ),
        "{}",
        out.message()
    );
    let helm = "system:serviceaccount:flux-system:helm-controller";
    let d = judged_with(
        &Policy::embedded(),
        &Review::delete(untracked_namespace("cache")).by(helm, &[]),
        &sources,
    );
    assert_eq!(d.verdict, Verdict::Allow);
    // Without a targetNamespace, the release goes where the HelmRelease is.
    let own = driftguard::sources::Sources {
        flux: vec![release(json!({}))],
        ..Default::default()
    };
    for (namespace, refused) in [("flux-system", true), ("cache", false)] {
        let d = judged_with(
            &Policy::embedded(),
            &Review::delete(untracked_namespace(namespace)),
            &own,
        );
        assert_eq!(d.verdict == Verdict::Deny, refused, "{namespace}: {d:?}");
    }
}

/// A hub's Flux and this cluster's own (`--local-flux`) can both have a
/// Kustomization `flux-system/apps`, and the labels on what each applies are
/// the same: neither's ignore rules nor account are lent to such an object.
#[test]
fn a_kustomization_named_alike_in_the_hub_and_here_lends_neither_its_rules() {
    use driftguard::sources::{FluxKind, flux_from_value};
    let kustomization = |account: &str, ignored: &str| {
        let k = json!({"metadata": {"name": "apps", "namespace": "flux-system"},
            "spec": {"serviceAccountName": account,
                     "ignore": [{"paths": [ignored], "target": {"kind": "Deployment"}}]}});
        std::sync::Arc::new(flux_from_value(FluxKind::Kustomization, &k).unwrap())
    };
    let mut applied = without(
        &deployment(),
        "/metadata/annotations/argocd.argoproj.io~1tracking-id",
    );
    applied["metadata"]["labels"] = json!({"kustomize.toolkit.fluxcd.io/name": "apps",
                                           "kustomize.toolkit.fluxcd.io/namespace": "flux-system"});
    let scaled = with(&applied, "/spec/replicas", json!(5));
    let hub = kustomization("hub-applier", "/spec/replicas");
    let here = kustomization("local-applier", "/spec/template");
    let sources = |flux| driftguard::sources::Sources {
        flux,
        ..Default::default()
    };
    let person = Review::update(applied.clone(), scaled.clone());
    let account = |name: &str| {
        Review::update(applied.clone(), scaled.clone())
            .by(&format!("system:serviceaccount:flux-system:{name}"), &[])
    };
    // One of them: its rule and its account hold.
    let one = sources(vec![hub.clone()]);
    assert_eq!(
        judged_with(&Policy::embedded(), &person, &one).verdict,
        Verdict::Allow
    );
    // Both: neither.
    let both = sources(vec![hub, here]);
    let d = judged_with(&Policy::embedded(), &person, &both);
    assert_eq!(d.verdict, Verdict::Deny, "{d:?}");
    for name in ["hub-applier", "local-applier"] {
        let d = judged_with(&Policy::embedded(), &account(name), &both);
        assert_ne!(d.finding, Finding::Controller, "{name}: {d:?}");
    }
}
