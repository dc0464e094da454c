//! Table tests for every rule of the decision, on real-shaped objects.

use driftguard_testkit::common;

use common::*;
use driftguard::drift::{Finding, Verdict};
use driftguard::{Endpoint, Policy};
use serde_json::{Value, json};

const IMAGE: &str = "/spec/template/spec/containers/0/image";

/// A Service with an Istio canonical-name label, and the same with it renamed.
fn istio_rename() -> (Value, Value) {
    const LABEL: &str = "/metadata/labels/service.istio.io~1canonical-name";
    let old = with(&service(), LABEL, json!("web"));
    let new = with(&old, LABEL, json!("web-v2"));
    (old, new)
}

fn policy_with(extra: &str) -> Policy {
    Policy::from_yaml(extra, "test-policy.yaml").unwrap()
}

fn seed_with_app() -> Policy {
    seed_policy().with_applications(seed_application())
}

struct SeedCase {
    name: &'static str,
    object: fn() -> Value,
    ignored: (&'static str, Value),
    neighbour: (&'static str, Value),
}

#[test]
fn each_seed_rule_allows_its_field_and_denies_a_neighbour() {
    let cases = [
        SeedCase {
            name: "Deployment replicas (HPA)",
            object: deployment,
            ignored: ("/spec/replicas", json!(7)),
            neighbour: ("/spec/template/spec/containers/0/image", json!("web:2.0")),
        },
        SeedCase {
            name: "StatefulSet replicas",
            object: statefulset,
            ignored: ("/spec/replicas", json!(5)),
            neighbour: ("/spec/serviceName", json!("db-headless")),
        },
        SeedCase {
            name: "ResourceQuota status",
            object: resourcequota,
            ignored: ("/status/used/cpu", json!("9")),
            neighbour: ("/spec/hard/cpu", json!("40")),
        },
        SeedCase {
            name: "Ingress status",
            object: ingress,
            ignored: ("/status/loadBalancer/ingress/0/ip", json!("203.0.113.99")),
            neighbour: ("/spec/rules/0/host", json!("evil.example.com")),
        },
        SeedCase {
            name: "Service annotations (app rule)",
            object: service,
            ignored: (
                "/metadata/annotations/cert-manager.io~1issuer",
                json!("letsencrypt"),
            ),
            neighbour: ("/spec/ports/0/port", json!(8081)),
        },
        SeedCase {
            name: "CronJob schedule (app rule)",
            object: cronjob,
            ignored: ("/spec/schedule", json!("0 3 * * *")),
            neighbour: ("/spec/suspend", json!(true)),
        },
        SeedCase {
            name: "Pod istio-proxy sidecar (app rule, jq)",
            object: pod_with_sidecar,
            ignored: ("/spec/containers/1/image", json!("istio/proxyv2:1.23.1")),
            neighbour: ("/spec/containers/0/image", json!("runner:2")),
        },
    ];
    let policy = seed_with_app();
    for case in cases {
        let old = (case.object)();
        let allowed = run(
            &policy,
            &Review::update(
                old.clone(),
                with(&old, case.ignored.0, case.ignored.1.clone()),
            ),
        );
        assert!(
            allowed.allowed(),
            "{}: ignored field should pass: {}",
            case.name,
            allowed.message()
        );
        assert_eq!(allowed.decision.finding, Finding::NoDrift, "{}", case.name);

        let denied = run(
            &policy,
            &Review::update(
                old.clone(),
                with(&old, case.neighbour.0, case.neighbour.1.clone()),
            ),
        );
        assert!(
            !denied.allowed(),
            "{}: neighbour should be denied",
            case.name
        );
        assert_eq!(
            denied.decision.drifted_paths,
            vec![case.neighbour.0.to_owned()],
            "{}",
            case.name
        );
        assert!(
            denied.message().contains(case.neighbour.0),
            "{}: {}",
            case.name,
            denied.message()
        );
    }
}

#[test]
fn seed_non_path_jq_rules_ignore_nothing_and_say_so() {
    // The seed's `to_entries[]` expressions fail under del()/path(): nothing is
    // ignored (as in Argo CD), and the failure is visible to the user and in audit.
    let policy = seed_policy();
    let (old, new) = istio_rename();
    let out = run(&policy, &Review::update(old, new));
    assert!(!out.allowed());
    // The labels rule fails. The annotations rule would fail too, but the
    // annotations did not change, so it cannot matter and is not run.
    let failed: Vec<&str> = out
        .decision
        .rule_failures
        .iter()
        .map(|f| f.origin.as_str())
        .collect();
    assert_eq!(failed, vec!["ignoreDifferences[4]"]);
    assert!(
        out.warnings()
            .iter()
            .any(|w| w.contains("ignore rule failed")),
        "{:?}",
        out.warnings()
    );
    assert!(
        out.audit("rule-failures")
            .unwrap()
            .contains("ignoreDifferences[4]")
    );

    // The rewrite `policy lint` prints works.
    let fixed = policy_with(
        r#"ignoreDifferences:
  - group: ""
    kind: Service
    jqPathExpressions:
      - .metadata.labels | select(. != null) | .[keys[] | select(startswith("service.istio.io"))]
"#,
    );
    let (old, new) = istio_rename();
    assert!(run(&fixed, &Review::update(old.clone(), new)).allowed());
    let neighbour = with(&old, "/metadata/labels/team", json!("payments"));
    assert!(!run(&fixed, &Review::update(old, neighbour)).allowed());
}

/// An Application's rule (read from the cluster, so not refused at load)
/// that selects the whole object ignores nothing, and says so.
#[test]
fn a_jq_rule_that_selects_the_whole_object_ignores_nothing() {
    for expr in [".", "..", ".[]", ".spec.nothing // ."] {
        let app = format!(
            "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {{name: myapp, namespace: argocd}}\nspec:\n  destination: {{namespace: production}}\n  ignoreDifferences:\n    - group: apps\n      kind: Deployment\n      jqPathExpressions: ['{expr}']\n"
        );
        let (policy, _) = Policy::from_any_yaml(&app, "app.yaml").unwrap();
        let old = deployment();
        let new = with(&old, IMAGE, json!("web:9"));
        let out = run(&policy, &Review::update(old, new));
        assert!(!out.allowed(), "{expr}: {}", out.message());
        assert!(
            out.decision
                .rule_failures
                .iter()
                .any(|f| f.error.contains("would ignore every field")),
            "{expr}: {:?}",
            out.decision.rule_failures
        );
    }
}

#[test]
fn a_failing_jq_rule_does_not_disable_the_other_rules() {
    let policy = policy_with(
        r#"ignoreDifferences:
  - group: apps
    kind: Deployment
    jqPathExpressions: [".spec.template.spec.containers[] | .image | .fake"]
    jsonPointers: [/spec/template/spec/containers/0/image]
"#,
    );
    // The jq rule fails (a string has no fields) on the subtree that changed.
    let old = deployment();
    let new = with(&old, IMAGE, json!("web:9"));
    let out = run(&policy, &Review::update(old.clone(), new));
    assert!(out.allowed(), "{}", out.message());
    assert_eq!(out.decision.rule_failures.len(), 1);
}

#[test]
fn out_of_scope_writes_are_allowed_without_drift_checks() {
    let policy = Policy::embedded();
    let old = deployment();
    let changed = with(&old, IMAGE, json!("web:9"));

    // A subresource write that carries another kind (an Eviction of a Pod)
    // has nothing to compare.
    let mut eviction = Review::update(old.clone(), changed.clone());
    eviction.sub_resource = Some("eviction");
    eviction.kind_override = Some(("policy".into(), "v1".into(), "Eviction".into()));
    assert_eq!(
        run(&policy, &eviction).decision.finding,
        Finding::OutOfScope("subresource eviction carries a Eviction, not the object".into())
    );

    let unmanaged = without(
        &without(
            &old,
            "/metadata/annotations/argocd.argoproj.io~1tracking-id",
        ),
        "/metadata/labels/app.kubernetes.io~1name",
    );
    let out = run(
        &policy,
        &Review::update(
            unmanaged.clone(),
            with(&unmanaged, "/spec/replicas", json!(1)),
        ),
    );
    assert!(out.allowed());
    assert_eq!(
        out.decision.finding,
        Finding::OutOfScope("not GitOps-managed".into())
    );

    let child = with(
        &old,
        "/metadata/ownerReferences",
        json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "x", "controller": true}]),
    );
    let out = run(
        &policy,
        &Review::update(child.clone(), with(&child, "/spec/replicas", json!(1))),
    );
    assert!(out.allowed());
    assert!(
        matches!(out.decision.finding, Finding::OutOfScope(ref s) if s.contains("child of Deployment/web"))
    );

    let mut connect = Review::update(old.clone(), old.clone());
    connect.operation = "CONNECT";
    assert!(run(&policy, &connect).allowed());
}

#[test]
fn ownership_is_judged_on_the_stored_object() {
    let policy = Policy::embedded();
    let old = deployment();
    // Stripping the tracking annotation in the same write does not make it unmanaged.
    let new = without(
        &old,
        "/metadata/annotations/argocd.argoproj.io~1tracking-id",
    );
    let out = run(&policy, &Review::update(old, new));
    assert!(!out.allowed());
    assert!(
        out.decision
            .drifted_paths
            .contains(&"/metadata/annotations/argocd.argoproj.io~1tracking-id".to_owned())
    );
}

#[test]
fn controllers_and_trusted_identities_pass_and_field_manager_never_does() {
    let policy = Policy::embedded();
    let old = deployment();
    let new = with(&old, IMAGE, json!("web:2"));
    let argo = run(
        &policy,
        &Review::update(old.clone(), new.clone()).by(ARGO, &["system:serviceaccounts"]),
    );
    assert!(argo.allowed());
    assert_eq!(argo.decision.finding, Finding::Controller);
    let hpa = run(
        &policy,
        &Review::update(old.clone(), with(&old, "/spec/replicas", json!(8))).by(HPA, &[]),
    );
    assert_eq!(hpa.decision.finding, Finding::Trusted);

    // alice claims argocd-controller as field manager: managedFields are client-chosen.
    let mut spoofed = new.clone();
    spoofed["metadata"]["managedFields"] = json!([{"manager": "argocd-controller", "operation": "Update",
        "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {}}}}}}]);
    assert!(!run(&policy, &Review::update(old, spoofed)).allowed());
}

#[test]
fn managed_fields_managers_read_ownership_from_the_stored_object() {
    let policy = policy_with(
        "ignoreDifferences:\n  - group: apps\n    kind: Deployment\n    managedFieldsManagers: [kube-controller-manager]\n",
    );
    let mut old = deployment();
    old["metadata"]["managedFields"]
        .as_array_mut()
        .unwrap()
        .push(json!({"manager": "kube-controller-manager", "operation": "Update", "fieldsV1": {"f:spec": {"f:replicas": {}}}}));
    assert!(
        run(
            &policy,
            &Review::update(old.clone(), with(&old, "/spec/replicas", json!(6)))
        )
        .allowed()
    );

    // A user naming kube-controller-manager as field manager for the image gains nothing.
    let mut new = with(&old, IMAGE, json!("web:evil"));
    new["metadata"]["managedFields"].as_array_mut().unwrap().push(json!({"manager": "kube-controller-manager",
        "operation": "Update", "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {"f:image": {}}}}}}}}));
    assert!(!run(&policy, &Review::update(old, new)).allowed());
}

#[test]
fn rollout_restart_is_ignored_by_the_default_policy_even_without_prior_annotations() {
    let policy = Policy::embedded();
    for obj in [deployment(), statefulset()] {
        assert!(obj.pointer("/spec/template/metadata/annotations").is_none());
        let new = with(
            &obj,
            "/spec/template/metadata/annotations",
            json!({"kubectl.kubernetes.io/restartedAt": NOW}),
        );
        let out = run(&policy, &Review::update(obj.clone(), new));
        assert!(out.allowed(), "{}", out.message());
        assert_eq!(out.decision.finding, Finding::NoDrift);
    }
}

#[test]
fn tracking_metadata_can_never_be_ignored() {
    let policy = seed_with_app(); // ignores /metadata/annotations on Services
    let old = service();
    let new = with(
        &old,
        "/metadata/annotations/argocd.argoproj.io~1tracking-id",
        json!("other:/Service:production/web"),
    );
    let out = run(&policy, &Review::update(old.clone(), new));
    assert!(!out.allowed());
    assert_eq!(
        out.decision.drifted_paths,
        vec!["/metadata/annotations/argocd.argoproj.io~1tracking-id"]
    );
    let removed = without(&old, "/metadata/annotations");
    assert!(!run(&policy, &Review::update(old, removed)).allowed());
}

#[test]
fn delete_and_create_by_hand_are_drift() {
    let policy = Policy::embedded();
    let out = run(&policy, &Review::delete(deployment()));
    assert!(!out.allowed());
    assert_eq!(out.decision.finding, Finding::DeleteByHand);
    assert!(
        out.message().contains("only Argo CD may delete"),
        "{}",
        out.message()
    );
    assert!(run(&policy, &Review::delete(deployment()).by(ARGO, &[])).allowed());

    let out = run(&policy, &Review::create(configmap()));
    assert_eq!(out.decision.finding, Finding::CreateWithTracking);
    assert!(!out.allowed());
    let plain = without(&configmap(), "/metadata/annotations");
    assert!(run(&policy, &Review::create(plain)).allowed());
}

#[test]
fn scale_is_judged_as_the_parents_replicas() {
    let policy = seed_policy();
    let dep = deployment();
    let out = run_with(
        &policy,
        &Review::scale("deployments", "web", 3, 5),
        Endpoint::Validate,
        Some(&dep),
    );
    assert!(out.allowed(), "{}", out.message());
    assert_eq!(out.decision.finding, Finding::NoDrift);

    let sts = statefulset();
    let no_rule = Policy::embedded();
    let out = run_with(
        &no_rule,
        &Review::scale("statefulsets", "db", 3, 5),
        Endpoint::Validate,
        Some(&sts),
    );
    assert!(!out.allowed());
    assert_eq!(out.decision.drifted_paths, vec!["/spec/replicas"]);
    assert!(
        out.message().contains("statefulsets/scale production/db"),
        "{}",
        out.message()
    );

    let hpa = Review::scale("statefulsets", "db", 3, 5).by(HPA, &["system:serviceaccounts"]);
    assert!(run_with(&no_rule, &hpa, Endpoint::Validate, Some(&sts)).allowed());
}

#[test]
fn scale_without_parent_warns_by_default_and_can_deny() {
    let review = Review::scale("statefulsets", "db", 3, 5);
    let out = run(&Policy::embedded(), &review);
    assert!(out.allowed());
    assert_eq!(out.decision.verdict, Verdict::Warn);
    assert!(
        out.warnings().iter().any(|w| w.contains("not available")),
        "{:?}",
        out.warnings()
    );
    assert_eq!(out.audit("reason").as_deref(), Some("scale-parent-unknown"));

    let strict = policy_with("unknownScaleParent: deny\n");
    assert!(!run(&strict, &review).allowed());
    // An ignore rule for the parent's kind still applies without the parent.
    assert!(run(&seed_policy(), &Review::scale("deployments", "web", 3, 5)).allowed());
}

fn break_glass_policy() -> Policy {
    policy_with("breakGlass:\n  allowedGroups: [sre-oncall]\n  maxDuration: 2h\n")
}

fn glass(obj: &Value, reason: &str, expires: &str) -> Value {
    let o = with(
        obj,
        "/metadata/annotations/driftguard.io~1break-glass",
        json!(reason),
    );
    with(
        &o,
        "/metadata/annotations/driftguard.io~1break-glass-expires",
        json!(expires),
    )
}

#[test]
fn break_glass_works_for_the_authorized_and_nobody_else() {
    let policy = break_glass_policy();
    let old = deployment();
    let hotfix = with(&old, IMAGE, json!("web:hotfix"));
    let new = glass(&hotfix, "INC-4211 payment outage", "2026-11-29T11:00:00Z");

    let sam = run(
        &policy,
        &Review::update(old.clone(), new.clone()).by("sam", &["sre-oncall"]),
    );
    assert!(sam.allowed(), "{}", sam.message());
    assert_eq!(sam.decision.finding, Finding::BreakGlass);
    assert!(
        sam.warnings()[0].contains("BREAK-GLASS by sam"),
        "{:?}",
        sam.warnings()
    );
    assert_eq!(
        sam.audit("break-glass-reason").as_deref(),
        Some("INC-4211 payment outage")
    );

    let alice = run(&policy, &Review::update(old.clone(), new.clone()));
    assert!(!alice.allowed());
    assert_eq!(alice.decision.finding, Finding::BreakGlassUnauthorized);
    assert!(
        alice
            .message()
            .contains("alice is not authorized to break glass"),
        "{}",
        alice.message()
    );

    // Arming it alone (no other change) is allowed for sam, loudly, and recorded.
    let armed = run(
        &policy,
        &Review::update(old.clone(), glass(&old, "INC-4211", "2026-11-29T11:00:00Z"))
            .by("sam", &["sre-oncall"]),
    );
    assert!(armed.allowed());
    assert_eq!(armed.decision.finding, Finding::BreakGlass);
    assert!(
        armed.warnings().iter().any(|w| w.contains("armed")),
        "{:?}",
        armed.warnings()
    );

    // Adding only the annotations, without other drift, is still denied for alice.
    let only = glass(&old, "just because", "2026-11-29T11:00:00Z");
    assert!(!run(&policy, &Review::update(old.clone(), only)).allowed());

    for (reason, expires, why) in [
        ("", "2026-11-29T11:00:00Z", "must give a reason"),
        ("INC-1", "2026-11-29T09:00:00Z", "expired"),
        ("INC-1", "2026-11-30T10:00:00Z", "more than 2h ahead"),
        ("INC-1", "tomorrow", "not an RFC 3339 time"),
    ] {
        let out = run(
            &policy,
            &Review::update(old.clone(), glass(&hotfix, reason, expires))
                .by("sam", &["sre-oncall"]),
        );
        assert!(!out.allowed(), "{why}");
        assert!(out.message().contains(why), "{why}: {}", out.message());
    }
}

#[test]
fn break_glass_for_delete_is_read_from_the_stored_object() {
    let policy = break_glass_policy();
    let old = glass(
        &deployment(),
        "INC-7 stuck finalizer",
        "2026-11-29T11:30:00Z",
    );
    assert!(
        run(
            &policy,
            &Review::delete(old.clone()).by("sam", &["sre-oncall"])
        )
        .allowed()
    );
    assert!(!run(&policy, &Review::delete(old)).allowed());
}

#[test]
fn break_glass_is_disabled_by_default() {
    let old = deployment();
    let new = glass(
        &with(&old, "/spec/replicas", json!(1)),
        "INC-1",
        "2026-11-29T11:00:00Z",
    );
    let out = run(
        &Policy::embedded(),
        &Review::update(old, new).by("sam", &["sre-oncall"]),
    );
    assert!(!out.allowed());
    assert!(
        out.message().contains("break-glass is disabled"),
        "{}",
        out.message()
    );
}

const REASON_KEY: &str = "driftguard.io/break-glass";
const EXPIRES_KEY: &str = "driftguard.io/break-glass-expires";
const PAUSED_KEY: &str = "driftguard.io/break-glass-paused";
const RECONCILE: &str = "kustomize.toolkit.fluxcd.io/reconcile";

/// A Deployment of Flux Kustomization flux-system/apps.
fn flux_paused_base() -> Value {
    let mut d = deployment();
    d["metadata"]["annotations"] = json!({});
    d["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"] = json!("apps");
    d["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/namespace"] = json!("flux-system");
    d
}

/// `obj` armed by `kubectl driftguard break-glass` until `expires`: for Flux
/// with `reconcile: disabled` on the object, for Argo CD with the marker only.
fn paused(obj: &Value, expires: &str) -> Value {
    let flux = obj["metadata"]["labels"]
        .get("kustomize.toolkit.fluxcd.io/name")
        .is_some();
    let mut o = glass(obj, "INC-9 hotfix", expires);
    let a = &mut o["metadata"]["annotations"];
    if flux {
        a[PAUSED_KEY] = json!(RECONCILE);
        a[RECONCILE] = json!("disabled");
    } else {
        a[PAUSED_KEY] = json!("argocd.argoproj.io/skip-reconcile");
    }
    o["metadata"]["labels"]["driftguard.io/break-glass"] = json!("true");
    o
}

/// What the sweeper and `--end` write: every key arming added, removed.
fn ended(obj: &Value) -> Value {
    let mut o = obj.clone();
    let a = o["metadata"]["annotations"].as_object_mut().unwrap();
    for k in [REASON_KEY, EXPIRES_KEY, PAUSED_KEY, RECONCILE] {
        a.remove(k);
    }
    o["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("driftguard.io/break-glass");
    o
}

#[test]
fn anyone_may_end_a_break_glass_that_grants_nothing() {
    let policy = break_glass_policy();
    for base in [deployment(), flux_paused_base()] {
        for expires in ["2026-11-29T09:00:00Z", "tomorrow"] {
            let old = paused(&base, expires);
            let out = run(&policy, &Review::update(old.clone(), ended(&old)));
            assert!(out.allowed(), "{expires}: {}", out.message());
            assert_eq!(out.decision.finding, Finding::BreakGlassEnded);
            assert_eq!(out.audit("reason").as_deref(), Some("break-glass-ended"));
            assert!(
                out.warnings().iter().any(|w| w.contains("ended")),
                "{:?}",
                out.warnings()
            );
        }
        // A break-glass set by hand, without a pause, too.
        let old = glass(&base, "INC-9", "2026-11-29T09:00:00Z");
        assert!(run(&policy, &Review::update(old, base.clone())).allowed());
    }
}

#[test]
fn ending_a_break_glass_in_force_is_for_those_allowed_to_break_glass() {
    let policy = break_glass_policy();
    for base in [deployment(), flux_paused_base()] {
        let old = paused(&base, "2026-11-29T11:00:00Z");
        let alice = run(&policy, &Review::update(old.clone(), ended(&old)));
        assert!(!alice.allowed());
        assert_eq!(alice.decision.finding, Finding::BreakGlassUnauthorized);
        let sam = run(
            &policy,
            &Review::update(old.clone(), ended(&old)).by("sam", &["sre-oncall"]),
        );
        assert!(sam.allowed(), "{}", sam.message());
        assert_eq!(sam.decision.finding, Finding::BreakGlassEnded);
    }
}

#[test]
fn ending_removes_every_key_and_changes_nothing_else() {
    let policy = break_glass_policy();
    let old = paused(&flux_paused_base(), "2026-11-29T09:00:00Z");
    let done = ended(&old);
    let partial = [
        // The opt-out left without the marker would take the object out of scope.
        with(
            &done,
            "/metadata/annotations/kustomize.toolkit.fluxcd.io~1reconcile",
            json!("disabled"),
        ),
        with(
            &done,
            "/metadata/annotations/driftguard.io~1break-glass-paused",
            json!(RECONCILE),
        ),
        with(
            &done,
            "/metadata/labels/driftguard.io~1break-glass",
            json!("true"),
        ),
        with(
            &done,
            "/metadata/annotations/driftguard.io~1break-glass",
            json!("INC-9 hotfix"),
        ),
        with(&done, IMAGE, json!("web:evil")),
        with(
            &done,
            "/metadata/annotations/driftguard.io~1mode",
            json!("audit"),
        ),
    ];
    for new in partial {
        let out = run(&policy, &Review::update(old.clone(), new.clone()));
        assert!(!out.allowed(), "allowed: {}", new["metadata"]);
        assert_ne!(out.decision.finding, Finding::BreakGlassEnded);
    }
    // Someone else's opt-out, as a label, stays: ending may not take the object out of scope.
    let theirs = with(
        &old,
        "/metadata/labels/kustomize.toolkit.fluxcd.io~1reconcile",
        json!("disabled"),
    );
    let out = run(&policy, &Review::update(theirs.clone(), ended(&theirs)));
    assert!(!out.allowed(), "{:?}", out.decision);
}

#[test]
fn the_pause_marker_keeps_a_paused_flux_object_judged() {
    let policy = break_glass_policy();
    let old = paused(&flux_paused_base(), "2026-11-29T11:00:00Z");
    let edit = with(&old, IMAGE, json!("web:hotfix"));
    let alice = run(&policy, &Review::update(old.clone(), edit.clone()));
    assert!(!alice.allowed(), "{:?}", alice.decision.finding);
    assert_eq!(alice.decision.finding, Finding::Drift);
    let sam = run(
        &policy,
        &Review::update(old.clone(), edit).by("sam", &["sre-oncall"]),
    );
    assert!(sam.allowed());
    assert_eq!(sam.decision.finding, Finding::BreakGlass);
    // The same opt-out without the marker is someone else's: out of scope.
    let mut theirs = old.clone();
    theirs["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove(PAUSED_KEY);
    let out = run(
        &policy,
        &Review::update(theirs.clone(), with(&theirs, IMAGE, json!("web:x"))),
    );
    assert!(matches!(out.decision.finding, Finding::OutOfScope(_)));
}

#[test]
fn a_break_glass_without_a_pause_warns_that_the_tool_will_revert_it() {
    let policy = break_glass_policy();
    for (base, tool) in [(deployment(), "Argo CD"), (flux_paused_base(), "Flux")] {
        let hotfix = with(&base, IMAGE, json!("web:hotfix"));
        let by_hand = glass(&hotfix, "INC-9", "2026-11-29T11:00:00Z");
        let out = run(
            &policy,
            &Review::update(base.clone(), by_hand).by("sam", &["sre-oncall"]),
        );
        assert!(out.allowed());
        let w = out.warnings().join("\n");
        assert!(
            w.contains(&format!(
                "{tool} will revert this hotfix on its next reconcile:"
            )) && w.contains(&format!(
                "`kubectl driftguard break-glass`, which pauses {tool} for this object"
            )),
            "{w}"
        );
        assert!(
            out.warnings().iter().all(|l| l.chars().count() <= 120),
            "{w}"
        );
        let armed = paused(&hotfix, "2026-11-29T11:00:00Z");
        let out = run(
            &policy,
            &Review::update(base.clone(), armed).by("sam", &["sre-oncall"]),
        );
        assert!(out.allowed(), "{}", out.message());
        assert_eq!(out.decision.finding, Finding::BreakGlass);
        assert!(
            !out.warnings().iter().any(|l| l.contains("will revert")),
            "{:?}",
            out.warnings()
        );
    }
}

#[test]
fn arming_a_pause_by_hand_is_drift() {
    let policy = break_glass_policy();
    let old = flux_paused_base();
    let armed = paused(&old, "2026-11-29T11:00:00Z");
    let out = run(&policy, &Review::update(old.clone(), armed));
    assert!(!out.allowed());
    let mut marker_only = old.clone();
    marker_only["metadata"]["annotations"][PAUSED_KEY] = json!(RECONCILE);
    let out = run(&policy, &Review::update(old, marker_only));
    assert!(!out.allowed());
    assert!(
        out.decision
            .drifted_paths
            .contains(&"/metadata/annotations/driftguard.io~1break-glass-paused".to_owned()),
        "{:?}",
        out.decision.drifted_paths
    );
}

#[test]
fn mode_comes_from_policy_then_namespace_then_the_stored_object() {
    let old = deployment();
    let new = with(&old, IMAGE, json!("web:2"));
    let warn_ns = policy_with("namespaces:\n  - names: [\"prod*\"]\n    mode: warn\n");
    let out = run(&warn_ns, &Review::update(old.clone(), new.clone()));
    assert_eq!(out.decision.verdict, Verdict::Warn);
    assert!(out.allowed());
    assert!(
        out.warnings()
            .iter()
            .any(|w| w.contains("drifted /spec/template/spec/containers/0/image"))
    );

    let audited = with(
        &old,
        "/metadata/annotations/driftguard.io~1mode",
        json!("audit"),
    );
    let new_audited = with(&audited, IMAGE, json!("web:2"));
    let out = run(&Policy::embedded(), &Review::update(audited, new_audited));
    assert_eq!(out.decision.verdict, Verdict::Audit);
    assert!(out.allowed());
    assert!(out.warnings().is_empty());

    // The incoming object's annotation is not consulted, and setting it is drift.
    let sneaky = with(
        &new,
        "/metadata/annotations/driftguard.io~1mode",
        json!("audit"),
    );
    let out = run(&Policy::embedded(), &Review::update(old, sneaky));
    assert_eq!(out.decision.verdict, Verdict::Deny);
    assert!(
        out.decision
            .drifted_paths
            .contains(&"/metadata/annotations/driftguard.io~1mode".to_owned())
    );
}

#[test]
fn dry_run_gets_the_same_verdict_and_says_what_the_real_write_would_get() {
    let old = deployment();
    let new = with(&old, IMAGE, json!("web:2"));
    for (policy, allowed, would) in [
        (Policy::embedded(), false, "would be denied"),
        (
            policy_with("mode: warn\n"),
            true,
            "allowed with drift warnings",
        ),
        (
            policy_with("mode: audit\n"),
            true,
            "recorded as drift (audit mode)",
        ),
    ] {
        let out = run(&policy, &Review::update(old.clone(), new.clone()).dry_run());
        assert_eq!(out.allowed(), allowed);
        assert!(
            out.warnings()
                .iter()
                .any(|w| w.contains("/spec/template/spec/containers/0/image")),
            "dry-run warnings name the drifted path: {:?}",
            out.warnings()
        );
        assert!(
            out.warnings().iter().any(|w| w.contains(would)),
            "{would}: {:?}",
            out.warnings()
        );
    }
}

/// `obj` with the mutating answer's JSON patch applied, and the patch.
fn patched(out: &Outcome, obj: &Value) -> (Value, json_patch::Patch) {
    let patch_bytes = match out.response["response"]["patch"].as_array() {
        Some(bytes) => bytes.iter().map(|b| b.as_u64().unwrap() as u8).collect(),
        None => {
            use base64_decode::decode;
            decode(out.response["response"]["patch"].as_str().unwrap())
        }
    };
    let patch: json_patch::Patch = serde_json::from_slice(&patch_bytes).unwrap();
    let mut once = obj.clone();
    json_patch::patch(&mut once, &patch).unwrap();
    (once, patch)
}

#[test]
fn the_drift_record_is_bounded_and_still_recognized_as_ours() {
    let policy = policy_with("mode: warn\n");
    let old = deployment();
    let mut new = old.clone();
    let labels = new["spec"]["template"]["metadata"]["labels"]
        .as_object_mut()
        .unwrap();
    for i in 0..5000 {
        labels.insert(format!("k{i}"), json!("v"));
    }
    let out = run_with(
        &policy,
        &Review::update(old.clone(), new.clone()),
        Endpoint::Mutate,
        None,
    );
    let (once, _) = patched(&out, &new);
    let text = once["metadata"]["annotations"]["driftguard.io/drift"]
        .as_str()
        .unwrap();
    assert!(text.len() < 3000, "{} bytes", text.len());
    let record: Value = serde_json::from_str(text).unwrap();
    let kept = record["paths"].as_array().unwrap().len();
    assert!(kept > 0 && kept <= 20, "{record}");
    assert_eq!(record["omitted"], json!(5000 - kept), "{record}");
    // The validating webhook sees the mutated object: its record is ours.
    let out = run(&policy, &Review::update(old, once));
    assert!(out.allowed(), "{:?}", out.response);
    assert!(
        !out.warnings()
            .iter()
            .any(|w| w.contains("driftguard.io~1drift")),
        "{:?}",
        out.warnings()
    );
}

#[test]
fn warn_mode_mutating_patch_records_drift_idempotently() {
    let policy = policy_with("mode: warn\n");
    let old = deployment();
    let new = with(&old, IMAGE, json!("web:2"));
    let out = run_with(
        &policy,
        &Review::update(old.clone(), new.clone()),
        Endpoint::Mutate,
        None,
    );
    assert!(out.allowed());
    assert!(
        out.warnings().is_empty(),
        "the validating webhook owns warnings"
    );
    let (once, patch) = patched(&out, &new);
    let mut twice = once.clone();
    json_patch::patch(&mut twice, &patch).unwrap();
    assert_eq!(once, twice);
    let record: Value = serde_json::from_str(
        once["metadata"]["annotations"]["driftguard.io/drift"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        record,
        json!({"user": "alice", "time": NOW, "paths": ["/spec/template/spec/containers/0/image"]})
    );

    // A second write carrying the annotation is not drift because of it.
    let again = with(&once, "/spec/replicas", json!(3));
    assert!(run(&Policy::embedded(), &Review::update(once.clone(), again)).allowed());

    // Enforce mode: the mutating webhook neither patches nor denies.
    let out = run_with(
        &Policy::embedded(),
        &Review::update(old, new),
        Endpoint::Mutate,
        None,
    );
    assert!(out.allowed());
    assert!(out.response["response"].get("patch").is_none());
}

#[test]
fn denial_lists_five_paths_and_counts_the_rest() {
    let old = configmap();
    let mut new = old.clone();
    for i in 0..8 {
        new["data"][format!("KEY_{i}")] = json!("v");
    }
    let out = run(&Policy::embedded(), &Review::update(old, new));
    assert!(!out.allowed());
    assert!(
        out.message().contains("/data/KEY_4 (and 3 more)"),
        "{}",
        out.message()
    );
    assert!(!out.message().contains("KEY_5"));
}

#[test]
fn flux_managed_objects_name_the_kustomization() {
    let mut old = deployment();
    old["metadata"]["annotations"] = json!({});
    old["metadata"]["labels"] = json!({"kustomize.toolkit.fluxcd.io/name": "myapp", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"});
    let new = with(&old, IMAGE, json!("web:2"));
    let out = run(
        &Policy::embedded(),
        &Review::update(old.clone(), new.clone()),
    );
    assert!(
        out.message()
            .contains("Flux Kustomization flux-system/myapp"),
        "{}",
        out.message()
    );
    let flux = "system:serviceaccount:flux-system:kustomize-controller";
    assert!(run(&Policy::embedded(), &Review::update(old, new).by(flux, &[])).allowed());
}

#[test]
fn application_rules_apply_only_to_the_objects_that_application_tracks() {
    let policy = seed_with_app();
    let mut other = cronjob();
    other["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"] =
        json!("billing:batch/CronJob:production/report");
    let out = run(
        &policy,
        &Review::update(
            other.clone(),
            with(&other, "/spec/schedule", json!("* * * * *")),
        ),
    );
    assert!(
        !out.allowed(),
        "myapp's CronJob rule must not apply to billing's objects"
    );
    assert!(out.message().contains("Argo CD application billing"));

    let mine = cronjob();
    let out = run(
        &policy,
        &Review::update(mine.clone(), with(&mine, "/spec/suspend", json!(true))),
    );
    assert!(
        out.message()
            .contains("https://github.com/myorg/gitops-repo.git, path applications/myapp"),
        "{}",
        out.message()
    );
}

mod base64_decode {
    /// Standard base64, as serde encodes `Vec<u8>` in kube's AdmissionResponse.
    pub fn decode(s: &str) -> Vec<u8> {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = Vec::new();
        let mut buf = 0u32;
        let mut bits = 0;
        for c in s.bytes().filter(|c| *c != b'=') {
            buf = (buf << 6) | ALPHABET.iter().position(|a| *a == c).unwrap() as u32;
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                out.push((buf >> bits) as u8);
                buf &= (1 << bits) - 1;
            }
        }
        out
    }
}

#[test]
fn deleting_the_destination_namespace_of_an_application_is_drift() {
    let ns =
        |name: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    let policy = seed_with_app();
    let out = run(&policy, &Review::delete(ns("production")));
    assert!(!out.allowed());
    assert_eq!(out.decision.finding, Finding::DeleteDestination);
    assert!(
        out.message()
            .contains("Namespace production/production is the destination namespace of Argo CD application myapp"),
        "{}",
        out.message()
    );
    assert!(run(&policy, &Review::delete(ns("production")).by(ARGO, &[])).allowed());
    let out = run(&policy, &Review::delete(ns("plain")));
    assert!(out.allowed());
    assert!(matches!(out.decision.finding, Finding::OutOfScope(_)));
    // Without the Application, production is a namespace like any other.
    assert!(run(&seed_policy(), &Review::delete(ns("production"))).allowed());
    // An Application that deploys to another cluster says nothing of ours.
    let remote = driftguard::policy::argocd::parse(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: remote, namespace: argocd}\n\
         spec: {destination: {server: 'https://10.0.0.1:6443', namespace: production}}\n",
        "remote.yaml",
    )
    .unwrap()
    .applications;
    assert_eq!(remote[0].destination_namespace, None);
    let policy = seed_policy().with_applications(remote);
    assert!(run(&policy, &Review::delete(ns("production"))).allowed());
}

/// A Deployment of Flux Kustomization flux-system/apps, as kustomize-controller
/// v1.9.6 leaves it: its server-side apply entry owns what Git sets
/// (`replicas` only when `owns_replicas`), kube-controller-manager's the status.
fn flux_deployment(owns_replicas: bool) -> Value {
    let mut spec = json!({"f:selector": {}, "f:template": {
        "f:metadata": {"f:labels": {"f:app": {}}},
        "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {}}}}}});
    if owns_replicas {
        spec["f:replicas"] = json!({});
    }
    let mut d = deployment();
    d["metadata"]["annotations"] = json!({});
    d["metadata"]["labels"] = json!({"kustomize.toolkit.fluxcd.io/name": "apps",
                                     "kustomize.toolkit.fluxcd.io/namespace": "flux-system"});
    d["metadata"]["managedFields"] = json!([
        {"manager": "kustomize-controller", "operation": "Apply", "apiVersion": "apps/v1",
         "time": "2026-11-29T09:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {
            "f:metadata": {"f:labels": {"f:kustomize.toolkit.fluxcd.io/name": {},
                                        "f:kustomize.toolkit.fluxcd.io/namespace": {}}},
            "f:spec": spec}},
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "apps/v1",
         "time": "2026-11-29T09:00:01Z", "fieldsType": "FieldsV1", "subresource": "status",
         "fieldsV1": {"f:status": {"f:replicas": {}, "f:readyReplicas": {}}}}
    ]);
    d
}

const IGNORE_REPLICAS: &str =
    "ignoreDifferences:\n  - {group: apps, kind: Deployment, jsonPointers: [/spec/replicas]}\n";

const REAPPLIED: &str = "Flux applies /spec/replicas from Git (kustomize-controller owns it) and would revert this change: an ignore rule does not stop Flux; remove the field from Git to let it change by hand.";

#[test]
fn an_ignore_rule_does_not_hide_what_kustomize_controller_reapplies() {
    let policy = policy_with(IGNORE_REPLICAS);
    let old = flux_deployment(true);
    let new = with(&old, "/spec/replicas", json!(5));
    let out = run(&policy, &Review::update(old.clone(), new.clone()));
    assert!(!out.allowed());
    assert_eq!(out.decision.drifted_paths, ["/spec/replicas"]);
    assert_eq!(out.decision.reapplied, ["/spec/replicas"]);
    assert!(out.message().contains(REAPPLIED), "{}", out.message());

    // kubectl scale writes deployments/scale: judged as the parent's replicas.
    let scale = Review::scale("deployments", "web", 3, 5);
    let out = run_with(&policy, &scale, Endpoint::Validate, Some(&old));
    assert!(!out.allowed());
    assert_eq!(out.decision.reapplied, ["/spec/replicas"]);
    assert!(out.message().contains(REAPPLIED), "{}", out.message());

    // Not in Git, so not owned: Flux leaves it alone and the rule decides.
    let unowned = flux_deployment(false);
    let out = run(
        &policy,
        &Review::update(unowned.clone(), with(&unowned, "/spec/replicas", json!(5))),
    );
    assert!(out.allowed(), "{}", out.message());
    assert_eq!(out.decision.finding, Finding::NoDrift);
    assert!(run_with(&policy, &scale, Endpoint::Validate, Some(&unowned)).allowed());

    // In warn mode the warning says why.
    let warn = policy_with(&format!("mode: warn\n{IGNORE_REPLICAS}"));
    let out = run(&warn, &Review::update(old.clone(), new.clone()));
    assert_eq!(out.decision.verdict, Verdict::Warn);
    assert!(
        out.warnings().contains(&"driftguard: Flux applies /spec/replicas from Git (kustomize-controller owns it) and would revert this change".to_owned()),
        "{:?}",
        out.warnings()
    );

    // Argo CD's ignoreDifferences really stop self-heal: unchanged.
    let mut argo = old.clone();
    argo["metadata"]["labels"] = json!({});
    argo["metadata"]["annotations"] =
        json!({"argocd.argoproj.io/tracking-id": "myapp:apps/Deployment:production/web"});
    argo["metadata"]["managedFields"][0]["manager"] = json!("argocd-controller");
    let out = run(
        &policy,
        &Review::update(argo.clone(), with(&argo, "/spec/replicas", json!(5))),
    );
    assert!(out.allowed(), "{}", out.message());
}

/// Flux v1.9.6 keeps a changed field its Kustomization's `spec.ignore`
/// selects (it adopts the in-cluster value): that rule still allows.
#[test]
fn the_kustomizations_own_ignore_rule_still_allows() {
    use driftguard::sources::{FluxKind, Sources, flux_from_value};
    let kustomization = json!({"metadata": {"name": "apps", "namespace": "flux-system"},
        "spec": {"ignore": [{"paths": ["/spec/replicas"], "target": {"kind": "Deployment"}}]}});
    let sources = Sources {
        flux: vec![std::sync::Arc::new(
            flux_from_value(FluxKind::Kustomization, &kustomization).unwrap(),
        )],
        ..Default::default()
    };
    let old = flux_deployment(true);
    let new = with(&old, "/spec/replicas", json!(5));
    let body = serde_json::to_vec(&Review::update(old, new).body()).unwrap();
    let req = driftguard::request::parse(&body).unwrap();
    let judged = driftguard::judge_request(
        &Policy::embedded(),
        &req,
        Endpoint::Validate,
        None,
        Some(&sources),
        now(),
        &driftguard::deadline::Deadline::none(),
    )
    .unwrap();
    assert_eq!(
        judged.decision.verdict,
        Verdict::Allow,
        "{:?}",
        judged.decision
    );
    assert!(judged.decision.reapplied.is_empty());
}

/// While its Flux is unread (a hub out of reach since the replica started),
/// the Kustomization's rule is absent from the sources the server publishes
/// (src/cluster/watch/snapshot.rs): the replicas change is drift, judged by the
/// object's own claims and the policy alone, and the answer says so.
#[test]
fn a_decision_without_sources_says_so() {
    use driftguard::sources::Sources;
    let sources = Sources {
        unread: vec!["Kustomization", "HelmRelease"],
        ..Default::default()
    };
    let old = flux_deployment(true);
    let new = with(&old, "/spec/replicas", json!(5));
    let body = serde_json::to_vec(&Review::update(old, new).body()).unwrap();
    let req = driftguard::request::parse(&body).unwrap();
    let judged = driftguard::judge_request(
        &Policy::embedded(),
        &req,
        Endpoint::Validate,
        None,
        Some(&sources),
        now(),
        &driftguard::deadline::Deadline::none(),
    )
    .unwrap();
    let d = &judged.decision;
    assert_eq!(d.verdict, Verdict::Deny, "{d:?}");
    assert_eq!(d.sources_unread, ["Kustomization", "HelmRelease"]);
    let response = serde_json::to_value(&judged.response).unwrap()["response"].clone();
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.ends_with(
            "(Argo CD / Flux sources not read: judged by the object's own claims and the policy alone.)"
        ),
        "{message}"
    );
    assert_eq!(
        response["auditAnnotations"]["sources-unread"],
        "Kustomization,HelmRelease"
    );
}

/// Two steps: a write that only removes kustomize-controller's managedFields
/// entry would make the next replicas change look unowned, and so ignored.
#[test]
fn taking_fields_from_kustomize_controller_by_hand_is_drift() {
    let policy = policy_with(IGNORE_REPLICAS);
    let old = flux_deployment(true);
    let mut disowned = old.clone();
    disowned["metadata"]["managedFields"]
        .as_array_mut()
        .unwrap()
        .remove(0);
    let out = run(&policy, &Review::update(old.clone(), disowned.clone()));
    assert!(!out.allowed());
    assert_eq!(out.decision.drifted_paths, ["/metadata/managedFields"]);
    // Had it been allowed, the replicas change would be.
    let scaled = with(&disowned, "/spec/replicas", json!(5));
    assert!(run(&policy, &Review::update(disowned, scaled)).allowed());

    // An honest edit of a field kustomize-controller does not own leaves its
    // entry alone and is judged by the rules as before.
    let paused = with(&old, "/spec/paused", json!(true));
    let rule = policy_with(
        "ignoreDifferences:\n  - {group: apps, kind: Deployment, jsonPointers: [/spec/paused]}\n",
    );
    assert!(run(&rule, &Review::update(old, paused)).allowed());
}

/// Argo CD sync impersonation: the account Argo CD syncs an Application as is
/// a controller for exactly that Application's objects.
#[test]
fn argo_cd_sync_impersonation_trusts_the_account_for_its_application_only() {
    use driftguard::policy::impersonation::AppProject;
    use driftguard::sources::{Sources, applications, sync_accounts};
    const SA: &str = "system:serviceaccount:production:deployer";
    let app = |name: &str, project: &str| {
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
               "metadata": {"name": name, "namespace": "argocd"},
               "spec": {"project": project,
                        "destination": {"server": "https://kubernetes.default.svc", "namespace": "production"}}})
    };
    let (apps, errors) = applications(&[app("myapp", "shop"), app("other", "default")]);
    assert!(errors.is_empty());
    let project = AppProject::from_value(&json!({"metadata": {"name": "shop", "namespace": "argocd"},
        "spec": {"destinationServiceAccounts": [
            {"server": "https://kubernetes.default.svc", "namespace": "production", "defaultServiceAccount": "deployer"}]}}))
    .unwrap();
    let judge = |enabled: bool, old: &Value, user: &str| {
        let sources = Sources::of_argocd(driftguard::drift::ArgoCdSources {
            sync_accounts: sync_accounts(&apps, std::slice::from_ref(&project), enabled, "argocd")
                .into_iter()
                .map(std::sync::Arc::new)
                .collect(),
            ..Default::default()
        });
        let new = with(old, IMAGE, json!("web:2"));
        let review = Review::update(old.clone(), new).by(user, &["system:serviceaccounts"]);
        decided_with(&Policy::embedded(), &review, &sources)
    };
    let mine = deployment();
    let d = judge(true, &mine, SA);
    assert_eq!(
        (d.verdict, d.finding),
        (Verdict::Allow, Finding::Controller)
    );
    // Another Application's object, an unmanaged one, the flag off, another user.
    let mut theirs = deployment();
    theirs["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"] =
        json!("other:apps/Deployment:production/web");
    assert_eq!(judge(true, &theirs, SA).verdict, Verdict::Deny);
    assert_eq!(judge(false, &mine, SA).verdict, Verdict::Deny);
    assert_eq!(
        judge(true, &mine, "system:serviceaccount:production:other").verdict,
        Verdict::Deny
    );
    // An Application elsewhere named alike is another Application.
    let mut namespaced = deployment();
    namespaced["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"] =
        json!("team-a_myapp:apps/Deployment:production/web");
    assert_eq!(judge(true, &namespaced, SA).verdict, Verdict::Deny);
}

/// Argo CD v3.6's per-resource rules: `argocd.argoproj.io/ignore-differences`
/// on the stored object ignores its pointers for that object alone; the
/// annotation itself is a decision input; what Argo CD skips ignores nothing.
#[test]
fn argo_cds_per_resource_annotation_ignores_its_pointers_for_that_object() {
    const ANNOTATION: &str = "/metadata/annotations/argocd.argoproj.io~1ignore-differences";
    let policy = Policy::embedded();
    let plain = deployment();
    let annotated = with(
        &plain,
        ANNOTATION,
        json!("jsonPointers:\n- /spec/replicas\n"),
    );

    let scale = |old: &Value| {
        run(
            &policy,
            &Review::update(old.clone(), with(old, "/spec/replicas", json!(7))),
        )
    };
    assert!(
        scale(&annotated).allowed(),
        "the annotation's pointer is ignored"
    );
    let denied = scale(&plain);
    assert!(!denied.allowed(), "without it, the same edit is drift");
    assert_eq!(denied.decision.drifted_paths, ["/spec/replicas"]);

    // Another field of the annotated object is still drift.
    let image = run(
        &policy,
        &Review::update(annotated.clone(), with(&annotated, IMAGE, json!("web:2"))),
    );
    assert!(!image.allowed());
    assert_eq!(image.decision.drifted_paths, [IMAGE]);

    // Writing the annotation by hand, then the field: the first write is
    // drift, and the new object's annotation never counts.
    let widen = with(&plain, ANNOTATION, json!("jsonPointers: [/spec]"));
    let out = run(&policy, &Review::update(plain.clone(), widen.clone()));
    assert!(!out.allowed());
    assert!(
        out.decision.drifted_paths.contains(&ANNOTATION.to_owned()),
        "{:?}",
        out.decision.drifted_paths
    );
    let both = with(&widen, "/spec/replicas", json!(9));
    assert!(!run(&policy, &Review::update(plain.clone(), both)).allowed());

    // Only Argo CD reads it: on a Flux object it ignores nothing.
    let mut flux = annotated.clone();
    flux["metadata"]["annotations"] =
        json!({"argocd.argoproj.io/ignore-differences": "jsonPointers: [/spec/replicas]"});
    flux["metadata"]["labels"] = json!({"kustomize.toolkit.fluxcd.io/name": "apps",
                                        "kustomize.toolkit.fluxcd.io/namespace": "flux-system"});
    assert!(!scale(&flux).allowed());

    // What Argo CD skips ignores nothing, and the warning says why.
    let broken = with(&plain, ANNOTATION, json!("- /spec/replicas"));
    let out = scale(&broken);
    assert!(!out.allowed());
    assert!(
        out.decision
            .notes
            .iter()
            .any(|n| n.contains("Argo CD skips it too")),
        "{:?}",
        out.decision.notes
    );
}

/// The decision, the record and the sweeper share one predicate for armed
/// (issue 49, item 4): an arming with the other tool's pause marker, or a
/// marker without both annotations, would outlive `maxDuration` (the
/// sweeper could not end it) and is refused; the marker driftguard's plan
/// gives the object's tool is allowed.
#[test]
fn an_arming_its_sweeper_could_not_end_is_refused() {
    let policy = break_glass_policy();
    let base = deployment();
    let expires = "2026-11-29T11:00:00Z";
    let by_sam = |new: Value| {
        run(
            &policy,
            &Review::update(base.clone(), new).by("sam", &["sre-oncall"]),
        )
    };
    let good = paused(&base, expires);
    let out = by_sam(good.clone());
    assert!(out.allowed(), "{}", out.message());
    // Flux's marker and opt-out on an object Argo CD tracks.
    let mut other = good.clone();
    other["metadata"]["annotations"][PAUSED_KEY] = json!(RECONCILE);
    other["metadata"]["annotations"][RECONCILE] = json!("disabled");
    // The marker, but the expiry left out.
    let mut half = good.clone();
    half["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove(EXPIRES_KEY);
    half["metadata"]["annotations"][REASON_KEY] = json!("INC-9");
    for bad in [other, half] {
        let out = by_sam(bad.clone());
        assert!(!out.allowed(), "{bad}");
        assert!(
            out.message().contains("sweeper could not end it") || out.message().contains("expires"),
            "{}",
            out.message()
        );
    }
}
