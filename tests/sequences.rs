//! Sequences of writes: no allowed first write turns a denied second write into
//! an allowed one (see testkit/src/two_step.rs for the invariant and oracle).

use driftguard_testkit::loosening;
use driftguard_testkit::two_step;

use proptest::prelude::*;
use two_step::{Edit, Kind, Manager, Scenario, Second};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn an_allowed_write_never_unlocks_a_denied_one(bytes in prop::collection::vec(any::<u8>(), 0..40)) {
        let scenario = Scenario::from_bytes(&bytes);
        prop_assert!(scenario.check().is_ok(), "{:?}\n{}", scenario, scenario.check().unwrap_err());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    /// No sequence of writes by persons, authorized break-glass included and
    /// ended, judges a later write more loosely; no claim added loosens one.
    #[test]
    fn no_sequence_loosens_a_later_write(bytes in prop::collection::vec(any::<u8>(), 0..80)) {
        let sequence = loosening::Sequence::from_bytes(&bytes);
        prop_assert!(sequence.check().is_ok(), "{:?}\n{}", sequence, sequence.check().unwrap_err());
    }
}

/// What an adversarial review found, spelled out: a break-glass holder drops
/// the pause marker (leaving Flux's opt-out, which then took the object out
/// of scope), arms a pause without the label the sweeper finds it by, or swaps
/// the marker so the sweeper's end is refused.
#[test]
fn break_glass_bookkeeping_is_armed_whole_or_not_at_all() {
    use loosening::{Sequence, Step};
    let plugin_arm = Step::Arm {
        plugin: true,
        edits: vec![Edit::Field("/spec/paused", 1)],
    };
    let marker = "driftguard.io/break-glass-paused";
    let cases = [
        vec![
            plugin_arm.clone(),
            Step::Write {
                sre: true,
                edits: vec![Edit::Annotation(marker, None)],
            },
        ],
        vec![
            plugin_arm.clone(),
            Step::Write {
                sre: true,
                edits: vec![Edit::Label("driftguard.io/break-glass", None)],
            },
        ],
        vec![
            plugin_arm.clone(),
            Step::Write {
                sre: true,
                edits: vec![Edit::Annotation(
                    marker,
                    Some("helm.toolkit.fluxcd.io/driftDetection"),
                )],
            },
        ],
        vec![Step::Arm {
            plugin: false,
            edits: vec![
                Edit::Annotation(marker, Some("kustomize.toolkit.fluxcd.io/reconcile")),
                Edit::Annotation("kustomize.toolkit.fluxcd.io/reconcile", Some("disabled")),
            ],
        }],
        vec![Step::Arm {
            plugin: false,
            edits: vec![Edit::Annotation(
                "kustomize.toolkit.fluxcd.io/reconcile",
                Some("disabled"),
            )],
        }],
    ];
    for steps in cases {
        for mode in ["enforce", "warn"] {
            let sequence = Sequence {
                mode,
                owned_fields: false,
                argocd: true,
                instance_label: true,
                flux: true,
                rules: vec![],
                manager: Manager::FluxKustomization,
                extras: vec![],
                steps: steps.clone(),
            };
            if let Err(e) = sequence.check() {
                panic!("{sequence:?}\n{e}");
            }
        }
    }
}

/// A generated finding, spelled out: in warn mode, with Flux's detector off,
/// an object claimed only by Argo CD's instance label (`other-app`) is
/// deleted and created again by a person with Helm's release annotation (or
/// without the label), which unclaims it. The same change as an UPDATE is an
/// input change, refused in every mode; as a CREATE it is refused because
/// Application `other-app`, which the label names, lists the object in its
/// `status.resources` (Argo CD lists what carries its label, in Git or not).
#[test]
fn re_creating_an_object_by_hand_keeps_the_instance_labels_listing() {
    use loosening::{Extra, Sequence, Step};
    let found = Sequence::from_bytes(&[
        28, 103, 1, 103, 195, 24, 2, 0, 52, 0, 0, 0, 5, 0, 0, 119, 6, 1,
    ]);
    assert_eq!(
        (found.mode, found.argocd, found.flux),
        ("warn", true, false)
    );
    assert!(found.instance_label && found.extras.contains(&Extra::InstanceLabel));
    assert!(matches!(
        &found.steps[..],
        [Step::Recreate { sre: false, .. }]
    ));
    if let Err(e) = found.check() {
        panic!("{found:?}\n{e}");
    }
    let unclaims = [
        Edit::Annotation("meta.helm.sh/release-name", Some("audit")),
        Edit::Label("app.kubernetes.io/instance", None),
        Edit::Label("app.kubernetes.io/instance", Some("other")),
    ];
    for mode in ["enforce", "warn", "audit"] {
        for manager in [
            Manager::ArgoAnnotation,
            Manager::ArgoLabel,
            Manager::FluxKustomization,
            Manager::FluxHelm,
        ] {
            for flux in [false, true] {
                for edit in &unclaims {
                    for sre in [false, true] {
                        let steps = [
                            Step::Recreate {
                                sre,
                                edits: vec![edit.clone()],
                            },
                            Step::Write {
                                sre,
                                edits: vec![edit.clone()],
                            },
                        ];
                        for step in steps {
                            let sequence = Sequence {
                                mode,
                                owned_fields: false,
                                argocd: true,
                                instance_label: true,
                                flux,
                                rules: vec![],
                                manager,
                                extras: vec![Extra::InstanceLabel],
                                steps: vec![step],
                            };
                            if let Err(e) = sequence.check() {
                                panic!("{sequence:?}\n{e}");
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The issue's own example, and one of each class, spelled out: each first
/// write is allowed by some rule, and none may unlock the second.
#[test]
fn known_two_step_bypasses_are_closed() {
    let metadata_rules = vec![
        "{group: '*', kind: '*', jsonPointers: [/metadata]}",
        "{group: '*', kind: '*', managedFieldsManagers: [hpa]}",
    ];
    let firsts = [
        Edit::Annotation("driftguard.io/mode", Some("audit")),
        Edit::Annotation("meta.helm.sh/release-name", Some("other")),
        Edit::Annotation("kustomize.toolkit.fluxcd.io/reconcile", Some("disabled")),
        Edit::Label("kustomize.toolkit.fluxcd.io/reconcile", Some("disabled")),
        Edit::Annotation("helm.toolkit.fluxcd.io/driftDetection", Some("disabled")),
        Edit::Annotation(
            "argocd.argoproj.io/tracking-id",
            Some("other:apps/Deployment:production/other"),
        ),
        Edit::Label("app.kubernetes.io/instance", None),
        Edit::ControllerOwner(true),
        Edit::Claim("hpa", "/spec/paused"),
        Edit::Disown("argocd-controller"),
        Edit::Annotation(
            "kubectl.kubernetes.io/last-applied-configuration",
            Some("{}"),
        ),
    ];
    let mut checked = 0;
    for manager in [
        Manager::ArgoAnnotation,
        Manager::ArgoLabel,
        Manager::FluxKustomization,
        Manager::FluxHelm,
    ] {
        for owned_fields in [false, true] {
            for first in &firsts {
                let seconds = [
                    Second::Field("/spec/paused", 7),
                    Second::Delete,
                    Second::Scale(0),
                ];
                for second in seconds {
                    for honest_second in [false, true] {
                        for first_via_status in [false, true] {
                            let scenario = Scenario {
                                rules: metadata_rules.clone(),
                                owned_fields,
                                kind: Kind::Deployment,
                                manager,
                                first: vec![first.clone()],
                                second: second.clone(),
                                honest_second,
                                paused: false,
                                first_via_status,
                            };
                            if let Err(e) = scenario.check() {
                                panic!("{scenario:?}\n{e}");
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert_eq!(checked, 4 * 2 * 11 * 3 * 2 * 2);
}

/// After a break-glass armed with a pause has expired, anyone may end it
/// (the sweeper does); no partial or whole ending unlocks a later edit, and an
/// edit under the expired break-glass stays denied.
#[test]
fn ending_an_expired_paused_break_glass_unlocks_nothing() {
    let firsts = [
        vec![Edit::EndBreakGlass],
        vec![Edit::Annotation("driftguard.io/break-glass-paused", None)],
        vec![Edit::Label("driftguard.io/break-glass", None)],
        vec![Edit::Annotation(
            "kustomize.toolkit.fluxcd.io/reconcile",
            None,
        )],
        vec![Edit::Annotation(
            "helm.toolkit.fluxcd.io/driftDetection",
            None,
        )],
        vec![
            Edit::EndBreakGlass,
            Edit::Annotation("kustomize.toolkit.fluxcd.io/reconcile", Some("disabled")),
        ],
        vec![
            Edit::EndBreakGlass,
            Edit::Label("kustomize.toolkit.fluxcd.io/reconcile", Some("disabled")),
        ],
        vec![
            Edit::EndBreakGlass,
            Edit::Annotation("driftguard.io/mode", Some("audit")),
        ],
        vec![
            Edit::EndBreakGlass,
            Edit::Annotation("driftguard.io/break-glass-paused", Some("other")),
        ],
    ];
    let mut checked = 0;
    for manager in [
        Manager::ArgoAnnotation,
        Manager::ArgoLabel,
        Manager::FluxKustomization,
        Manager::FluxHelm,
    ] {
        for rules in [
            vec![],
            vec!["{group: '*', kind: '*', jsonPointers: [/metadata]}"],
        ] {
            for first in &firsts {
                for second in [Second::Field("/spec/paused", 7), Second::Delete] {
                    let scenario = Scenario {
                        rules: rules.clone(),
                        owned_fields: false,
                        kind: Kind::Deployment,
                        manager,
                        first: first.clone(),
                        second,
                        honest_second: true,
                        paused: true,
                        first_via_status: false,
                    };
                    // The sweeper's write itself is allowed, so the second write is tested after it.
                    if matches!(first[..], [Edit::EndBreakGlass]) {
                        assert_eq!(scenario.first_allowed(), Ok(true), "{scenario:?}");
                    }
                    if let Err(e) = scenario.check() {
                        panic!("{scenario:?}\n{e}");
                    }
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 4 * 2 * 9 * 2);
}

/// Flux re-applies what kustomize-controller owns (`/spec/paused` in the
/// stored object), whatever the rules say: dropping its managedFields entry
/// by hand must not make a later change to it allowed.
#[test]
fn disowning_kustomize_controller_unlocks_nothing() {
    for owned_fields in [false, true] {
        for honest_second in [false, true] {
            let scenario = Scenario {
                rules: vec![
                    "{group: '*', kind: '*', jsonPointers: [/metadata]}",
                    "{group: '*', kind: '*', jsonPointers: [/spec/paused]}",
                ],
                owned_fields,
                kind: Kind::Deployment,
                manager: Manager::FluxKustomization,
                first: vec![Edit::Disown("kustomize-controller")],
                second: Second::Field("/spec/paused", 7),
                honest_second,
                paused: false,
                first_via_status: false,
            };
            if let Err(e) = scenario.check() {
                panic!("{scenario:?}\n{e}");
            }
        }
    }
}

use driftguard_testkit::common;

use common::{Review, run};
use driftguard::Policy;
use driftguard::drift::inputs::{self, Location};
use serde_json::{Value, json};

/// A policy that ignores all metadata, and so hides nothing but the inputs.
fn ignore_all_metadata() -> Policy {
    Policy::from_yaml(
        "ignoreDifferences:\n  - {group: '*', kind: '*', jsonPointers: [/metadata]}\n",
        "p.yaml",
    )
    .unwrap()
}

fn set_location(obj: &mut Value, at: Location, value: Option<Value>) {
    let meta = &mut obj["metadata"];
    let (section, key) = match at {
        Location::Label(k) => ("labels", k.to_owned()),
        Location::Annotation(k) => ("annotations", k.to_owned()),
        Location::Finalizers => {
            match value {
                Some(v) => meta["finalizers"] = json!([v]),
                None => {
                    meta.as_object_mut().unwrap().remove("finalizers");
                }
            }
            return;
        }
        Location::ControllerOwnerReference | Location::OwnerReferences => {
            let controller = matches!(at, Location::ControllerOwnerReference);
            match value {
                Some(v) => {
                    meta["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "X", "name": v, "uid": "u", "controller": controller}])
                }
                None => {
                    meta.as_object_mut().unwrap().remove("ownerReferences");
                }
            }
            return;
        }
    };
    if meta.get(section).is_none() {
        meta[section] = json!({});
    }
    let map = meta[section].as_object_mut().unwrap();
    match value {
        Some(v) => {
            map.insert(key, v);
        }
        None => {
            map.remove(&key);
        }
    }
}

/// The break-glass keys: a manual writer may remove them only all together
/// and only once the break-glass grants nothing (tested below); removing one
/// from a break-glass in force is drift like any input.
fn is_break_glass_key(input: inputs::Input) -> bool {
    use inputs::Input::*;
    matches!(
        input,
        BreakGlassReason | BreakGlassExpires | BreakGlassPaused | BreakGlassLabel
    )
}

/// A break-glass in force at `common::now()`, armed without a pause.
fn in_force(obj: &Value) -> Value {
    let mut o = obj.clone();
    o["metadata"]["annotations"]["driftguard.io/break-glass"] = json!("INC-1");
    o["metadata"]["annotations"]["driftguard.io/break-glass-expires"] =
        json!("2026-11-29T11:00:00Z");
    o
}

/// Every listed input, added, changed or removed by hand, is drift under a rule
/// that ignores all of metadata, and the denial names it.
#[test]
fn every_decision_input_changed_by_hand_is_drift() {
    let policy = ignore_all_metadata();
    let listed = inputs::locations(&policy);
    assert_eq!(listed.len(), inputs::Input::ALL.len());
    for (input, at) in listed {
        let pointer = at.pointer();
        // Stored with the input set to a value that keeps the object managed
        // and in scope, then each of: change, remove; and add from absent.
        let base = if is_break_glass_key(input) {
            in_force(&common::deployment())
        } else {
            common::deployment()
        };
        let mut with_value = base.clone();
        let keeps_scope = match input {
            inputs::Input::ControllerOwner => None,
            inputs::Input::ArgoTrackingAnnotation => {
                Some(json!("myapp:apps/Deployment:production/web"))
            }
            _ => Some(json!("enforce")),
        };
        if let Some(v) = &keeps_scope {
            set_location(&mut with_value, at, Some(v.clone()));
        }
        let mut cases: Vec<(Value, Value)> = Vec::new();
        if keeps_scope.is_some() {
            let mut changed = with_value.clone();
            set_location(&mut changed, at, Some(json!("disabled")));
            let mut removed = with_value.clone();
            set_location(&mut removed, at, None);
            cases.push((with_value.clone(), changed));
            cases.push((with_value.clone(), removed));
        }
        if input != inputs::Input::ArgoTrackingAnnotation {
            let mut stored = base.clone();
            set_location(&mut stored, at, None);
            let mut added = stored.clone();
            set_location(&mut added, at, Some(json!("disabled")));
            cases.push((stored, added));
        }
        for (old, new) in cases {
            let out = run(&policy, &Review::update(old.clone(), new.clone()));
            assert!(!out.allowed(), "{input:?}: {old} -> {new} must be denied");
            let named = out.decision.drifted_paths.contains(&pointer)
                || matches!(
                    input,
                    inputs::Input::BreakGlassReason | inputs::Input::BreakGlassExpires
                );
            assert!(
                named,
                "{input:?}: {pointer} not in {:?}",
                out.decision.drifted_paths
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The decision reads nothing else: labels and annotations outside the list
    /// never change who manages an object, its scope or its mode.
    #[test]
    fn other_metadata_never_changes_scope_manager_or_mode(
        labels in prop::collection::btree_map("[a-z]{1,8}(/[a-z]{1,8})?", "[a-z]{0,8}", 0..6),
        annotations in prop::collection::btree_map("[a-z.]{1,12}/[a-z-]{1,12}", "[a-z:/]{0,12}", 0..6),
    ) {
        let policy = Policy::embedded();
        let listed: Vec<String> = inputs::locations(&policy).iter().map(|(_, at)| at.pointer()).collect();
        let base = common::deployment();
        let mut noisy = base.clone();
        for (k, v) in &labels {
            if !listed.iter().any(|p| *p == format!("/metadata/labels/{}", k.replace('/', "~1"))) {
                noisy["metadata"]["labels"][k] = json!(v);
            }
        }
        for (k, v) in &annotations {
            if !listed.iter().any(|p| *p == format!("/metadata/annotations/{}", k.replace('/', "~1"))) {
                noisy["metadata"]["annotations"][k] = json!(v);
            }
        }
        let (a, b) = (run(&policy, &Review::delete(base)), run(&policy, &Review::delete(noisy)));
        prop_assert_eq!(a.decision.finding, b.decision.finding);
        prop_assert_eq!(a.decision.manager, b.decision.manager);
        prop_assert_eq!(a.decision.mode, b.decision.mode);
    }
}

/// A Flux ignore rule whose target selects on a label: adding that label by
/// hand (under a rule that ignores labels) would make the next edit ignored.
#[test]
fn labels_a_flux_ignore_target_selects_on_are_decision_inputs() {
    use driftguard::sources::{FluxKind, Sources, flux_from_value};
    let kustomization = json!({"metadata": {"name": "apps", "namespace": "flux-system"},
        "spec": {"path": "./apps", "sourceRef": {"kind": "GitRepository", "name": "repo"},
                 "ignore": [{"paths": ["/spec/replicas"], "target": {"kind": "Deployment", "labelSelector": "scaling=manual"}}]}});
    let sources = Sources {
        flux: vec![std::sync::Arc::new(
            flux_from_value(FluxKind::Kustomization, &kustomization).unwrap(),
        )],
        ..Default::default()
    };
    let policy = Policy::from_yaml(
        "ignoreDifferences:\n  - {group: '*', kind: '*', jsonPointers: [/metadata/labels]}\n",
        "p.yaml",
    )
    .unwrap();
    let mut stored = common::deployment();
    stored["metadata"]["annotations"] = json!({});
    stored["metadata"]["labels"] = json!({"kustomize.toolkit.fluxcd.io/name": "apps",
        "kustomize.toolkit.fluxcd.io/namespace": "flux-system"});
    let decide = |old: &Value, new: &Value| {
        let body = serde_json::to_vec(&Review::update(old.clone(), new.clone()).body()).unwrap();
        let req = driftguard::request::parse(&body).unwrap();
        driftguard::judge_request(
            &policy,
            &req,
            driftguard::Endpoint::Validate,
            None,
            Some(&sources),
            common::now(),
            &driftguard::deadline::Deadline::none(),
        )
        .unwrap()
        .decision
    };
    let mut labelled = stored.clone();
    labelled["metadata"]["labels"]["scaling"] = json!("manual");
    let first = decide(&stored, &labelled);
    assert_eq!(first.verdict, driftguard::drift::Verdict::Deny, "{first:?}");
    assert_eq!(first.drifted_paths, vec!["/metadata/labels/scaling"]);
    // With the label set by Git, the rule applies: replicas may change.
    let mut scaled = labelled.clone();
    scaled["spec"]["replicas"] = json!(9);
    assert_eq!(
        decide(&labelled, &scaled).verdict,
        driftguard::drift::Verdict::Allow
    );
    // And the label removed by hand is drift too.
    assert_eq!(
        decide(&labelled, &stored).verdict,
        driftguard::drift::Verdict::Deny
    );
}
