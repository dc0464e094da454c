use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

fn policy(yaml: &str) -> Policy {
    Policy::from_yaml(yaml, "test").expect("a valid policy")
}

fn rendered(policy: &Policy) -> (ValidatingWebhookConfiguration, MutatingWebhookConfiguration) {
    configurations(
        &options("driftguard".into(), vec!["monitoring".into()]),
        policy,
    )
}

fn differences(in_force: &Policy, rendered_from: &Policy) -> Vec<Difference> {
    let (v, m) = rendered(rendered_from);
    check(in_force, None, Some(&v), Some(&m))
}

#[test]
fn a_registration_rendered_from_the_policy_in_force_agrees() {
    for yaml in [
        "{}",
        "mode: warn",
        "plannedCreates: guard",
        "trusted:\n  users: [alice]\n",
    ] {
        let p = policy(yaml);
        assert_eq!(differences(&p, &p), vec![], "{yaml}");
    }
}

fn directions(differences: &[Difference]) -> Vec<Direction> {
    let mut d: Vec<_> = differences.iter().map(|d| d.direction).collect();
    d.dedup();
    d
}

#[test]
fn a_trust_the_configmap_dropped_is_a_skip_naming_the_account() {
    let rendered_from =
        policy("trusted:\n  users: ['system:serviceaccount:kube-system:*', alice]\n");
    let in_force = policy("trusted:\n  users: [alice]\n");
    let found = differences(&in_force, &rendered_from);
    assert_eq!(directions(&found), vec![Direction::Skips], "{found:#?}");
    assert!(
        found
            .iter()
            .any(|d| d.text.contains("system:serviceaccount:kube-system:")
                && d.text.contains("skip-gitops-and-trusted-identities")
                && d.text.contains("judges it: deny")),
        "{found:#?}"
    );
    // The other way, the registration calls for writes the policy trusts:
    // judged and allowed, a call too many.
    let found = differences(&rendered_from, &in_force);
    assert_eq!(directions(&found), vec![Direction::Sends], "{found:#?}");
}

#[test]
fn a_detector_key_the_configmap_changed_is_a_skip() {
    let rendered_from = policy("{}");
    let in_force = policy("gitops:\n  argocd:\n    trackingAnnotation: example.com/tracking-id\n");
    let found = differences(&in_force, &rendered_from);
    assert!(
        found.iter().any(|d| d.direction == Direction::Skips
            && d.text.contains("annotated `example.com/tracking-id`")),
        "{found:#?}"
    );
}

#[test]
fn a_missing_configuration_or_webhook_is_reported() {
    let p = policy("{}");
    let (v, m) = rendered(&p);
    assert_eq!(
        directions(&check(&p, None, Some(&v), None)),
        vec![Direction::Skips]
    );
    let mut fewer = v.clone();
    fewer.webhooks.as_mut().unwrap().pop();
    let found = check(&p, None, Some(&fewer), Some(&m));
    assert!(
        found.iter().any(|d| d.text.contains("is missing")),
        "{found:#?}"
    );
}

#[test]
fn a_condition_that_cannot_evaluate_is_reported() {
    let p = policy("{}");
    let (mut v, m) = rendered(&p);
    v.webhooks.as_mut().unwrap()[0]
        .match_conditions
        .as_mut()
        .unwrap()
        .push(
            k8s_openapi::api::admissionregistration::v1::MatchCondition {
                name: "broken".into(),
                expression: "object.metadata.nope.startsWith('x')".into(),
            },
        );
    let found = check(&p, None, Some(&v), Some(&m));
    assert!(
        found
            .iter()
            .any(|d| d.direction == Direction::Fails && d.text.contains("broken")),
        "{found:#?}"
    );
}

/// argocd-cm's label tracking under a key the policy does not name: the
/// decision claims such objects, the rendered webhooks never send them.
#[test]
fn an_instance_label_argocd_cm_tracks_by_is_a_skip_until_the_policy_names_it() {
    let sources = Sources::of_argocd(crate::drift::ArgoCdSources {
        instance_label: Some("team.io/app".into()),
        ..Default::default()
    });
    let p = policy("{}");
    let (v, m) = rendered(&p);
    let found = check(&p, Some(&sources), Some(&v), Some(&m));
    assert!(
        found
            .iter()
            .any(|d| d.direction == Direction::Skips && d.text.contains("labelled `team.io/app`")),
        "{found:#?}"
    );
    let named = policy("gitops:\n  argocd:\n    instanceLabel: team.io/app\n");
    let (v, m) = rendered(&named);
    let found = check(&named, Some(&sources), Some(&v), Some(&m));
    assert_eq!(found, vec![], "{found:#?}");
}

fn skips(found: &[Difference], needle: &str) -> bool {
    found
        .iter()
        .any(|d| d.direction == Direction::Skips && d.text.contains(needle))
}

/// Hand edits the probes alone would not see (the attacker review of issue
/// 48): each is a skip, named by the field it edited.
#[test]
fn a_hand_edit_of_any_field_that_decides_what_is_sent_is_a_skip() {
    let p = policy("{}");
    let (v, m) = rendered(&p);
    type Edit = Box<dyn Fn(&mut ValidatingWebhook)>;
    let edits: Vec<(&str, Edit)> = vec![
        (
            "condition `hotfix`",
            Box::new(|w| {
                w.match_conditions.as_mut().unwrap().push(
                k8s_openapi::api::admissionregistration::v1::MatchCondition {
                    name: "hotfix".into(),
                    expression: "object == null || !has(object.metadata.labels) || !('example.com/hotfix' in object.metadata.labels)".into(),
                },
            )
            }),
        ),
        (
            "no rule sends",
            Box::new(|w| w.rules.as_mut().unwrap()[0].resources = Some(vec!["deployments".into()])),
        ),
        (
            "an objectSelector",
            Box::new(|w| {
                w.object_selector = Some(LabelSelector {
                    match_labels: Some([("team".to_owned(), "a".to_owned())].into()),
                    ..Default::default()
                })
            }),
        ),
        (
            "namespaceSelector",
            Box::new(|w| {
                w.namespace_selector = Some(LabelSelector {
                    match_labels: Some(
                        [("nonexistent.example.com/x".to_owned(), "y".to_owned())].into(),
                    ),
                    ..Default::default()
                })
            }),
        ),
        (
            "matchPolicy",
            Box::new(|w| w.match_policy = Some("Exact".into())),
        ),
        (
            "another path",
            Box::new(|w| w.client_config.url = Some("https://driftguard.invalid/mutate".into())),
        ),
    ];
    for (needle, edit) in edits {
        let mut edited = v.clone();
        edit(&mut edited.webhooks.as_mut().unwrap()[0]);
        let found = check(&p, None, Some(&edited), Some(&m));
        assert!(skips(&found, needle), "{needle}: {found:#?}");
    }
    // Excluding one more namespace by name is the operator's choice.
    let mut excluded = v.clone();
    for w in excluded.webhooks.as_mut().unwrap() {
        if let Some(s) = &mut w.namespace_selector
            && let Some(e) = s.match_expressions.as_mut()
        {
            e[0].values.as_mut().unwrap().push("legacy".into());
        }
    }
    let found = check(&p, None, Some(&excluded), Some(&m));
    assert_eq!(found, vec![], "{found:#?}");
}

/// A warn namespace added to the ConfigMap alone: the mutating webhook
/// skips the drift record's patch there, under the default detectors.
#[test]
fn a_warn_namespace_added_to_the_policy_only_is_a_skip() {
    let rendered_from = policy("mode: enforce\nnamespaces: []\n");
    let in_force = policy("mode: enforce\nnamespaces:\n  - names: [team-a]\n    mode: warn\n");
    let found = differences(&in_force, &rendered_from);
    assert!(
        found.iter().any(|d| d.direction == Direction::Skips
            && d.text.contains("in `team-a`")
            && d.text.contains("mutating")),
        "{found:#?}"
    );
}

/// The careless operator's review of issue 48: `webhook.excludedResources`
/// extended with a kind the policy judges was only `edited`; the probes now
/// write every kind either side names, so it is a skip.
#[test]
fn a_judged_kind_added_to_the_excluded_ones_is_a_skip() {
    let p = policy("{}");
    let (mut v, m) = rendered(&p);
    for w in v.webhooks.as_mut().unwrap() {
        for c in w.match_conditions.as_mut().unwrap() {
            if c.name == "exclude-unmanaged-kinds" {
                c.expression = c.expression.replacen(") in [", ") in ['/configmaps', ", 1);
            }
        }
    }
    let found = check(&p, None, Some(&v), Some(&m));
    assert!(skips(&found, "exclude-unmanaged-kinds"), "{found:#?}");
    assert!(skips(&found, "a /Configmap"), "{found:#?}");
}
