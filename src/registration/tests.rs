use super::*;

fn policy(yaml: &str) -> Policy {
    Policy::from_yaml(yaml, "test").expect("a valid policy")
}

fn rendered(policy: &Policy) -> (ValidatingWebhookConfiguration, MutatingWebhookConfiguration) {
    configurations(&options("driftguard".into()), policy)
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
