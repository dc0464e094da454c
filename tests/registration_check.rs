//! `registration::check` against an oracle: for generated pairs of policies
//! (one in force, one the live registration was rendered from), the check
//! reports a skip exactly when filter soundness fails, that is when some
//! write the registration skips is one the policy in force judges (deny,
//! warn, audit, or a drift-record patch). The oracle's writes are its own:
//! every user, group, tracking key, namespace and operation the generated
//! policies can name, not the check's probes. The chart renders the same
//! text as `register` (tests/chart.rs), so generated chart values are the
//! generated policies here.

use driftguard::cluster::register::{Options, WebhookAddress, configurations};
use driftguard::registration::apiserver::{Attributes, Call, Hook, Namespaces, Skip};
use driftguard::registration::{Direction, check};
use driftguard::{Endpoint, Policy, judge_request};
use proptest::prelude::*;
use serde_json::{Value, json};

const USERS: &[&str] = &[
    "alice",
    "bob",
    "system:serviceaccount:kube-system:*",
    "system:serviceaccount:kube-system:generic-garbage-collector",
    "system:node:*",
    "system:serviceaccount:argocd:argocd-application-controller",
    "system:serviceaccount:flux-system:kustomize-controller",
    "ci-*",
];
/// What `controllers` may name (a node is never a GitOps tool).
const CONTROLLERS: &[&str] = &[
    "alice",
    "system:serviceaccount:argocd:argocd-application-controller",
    "system:serviceaccount:flux-system:kustomize-controller",
    "ci-*",
];
const GROUPS: &[&str] = &["platform", "system:masters", "ops-*"];
const ANNOTATIONS: &[&str] = &["argocd.argoproj.io/tracking-id", "example.com/tracking-id"];
const LABELS: &[&str] = &["", "app.kubernetes.io/instance", "example.com/instance"];
const NAMESPACES: &[&str] = &["dev-*", "team-a", "prod-?"];
const MODES: &[&str] = &["enforce", "warn", "audit"];

/// A policy drawn from the pools above.
fn policy() -> impl Strategy<Value = String> {
    (
        proptest::sample::subsequence(USERS, 0..=4),
        proptest::sample::subsequence(GROUPS, 0..=2),
        proptest::sample::subsequence(CONTROLLERS, 1..=3),
        (0..ANNOTATIONS.len(), 0..LABELS.len(), any::<bool>(), any::<bool>()),
        (0..MODES.len(), proptest::option::of((0..NAMESPACES.len(), 0..MODES.len()))),
        any::<bool>(),
    )
        .prop_map(
            |(trusted, groups, controllers, (a, l, argo, flux), (mode, ns), creates)| {
                let list = |v: &[&str]| format!("[{}]", v.iter().map(|s| format!("'{s}'")).collect::<Vec<_>>().join(", "));
                let namespaces = ns.map_or(String::new(), |(n, m)| {
                    format!("namespaces:\n  - names: ['{}']\n    mode: {}\n", NAMESPACES[n], MODES[m])
                });
                format!(
                    "mode: {}\n{namespaces}controllers:\n  users: {}\ntrusted:\n  users: {}\n  groups: {}\ngitops:\n  argocd:\n    enabled: {argo}\n    trackingAnnotation: {}\n    instanceLabel: '{}'\n  flux:\n    enabled: {flux}\nplannedCreates: {}\n",
                    MODES[mode],
                    list(&controllers),
                    list(&trusted),
                    list(&groups),
                    ANNOTATIONS[a],
                    LABELS[l],
                    if creates { "guard" } else { "ignore" },
                )
            },
        )
}

/// The oracle's writers: each pool name with its globs filled two ways, and
/// a person; as users, and as groups of a person.
fn writers() -> Vec<(String, Vec<String>)> {
    let mut names: Vec<String> = USERS
        .iter()
        .chain(CONTROLLERS)
        .chain(GROUPS)
        .flat_map(|p| [p.replace('*', "x"), p.replace('*', "a:b").replace('?', "1")])
        .collect();
    names.push("carol".into());
    names.sort();
    names.dedup();
    let person = "carol".to_owned();
    let authenticated = "system:authenticated".to_owned();
    names
        .iter()
        .map(|n| (n.clone(), vec![authenticated.clone()]))
        .chain(
            names
                .iter()
                .map(|g| (person.clone(), vec![g.clone(), authenticated.clone()])),
        )
        .collect()
}

/// The oracle's objects' metadata: every pool key as annotation and label, Flux's labels.
fn metadata() -> Vec<Value> {
    let id = "app:apps/Deployment:NS/web";
    let mut all: Vec<Value> = ANNOTATIONS
        .iter()
        .map(|k| json!({"annotations": {*k: id}}))
        .chain(
            LABELS
                .iter()
                .filter(|k| !k.is_empty())
                .map(|k| json!({"labels": {*k: "app"}})),
        )
        .collect();
    for tool in ["kustomize", "helm"] {
        all.push(json!({"labels": {
            format!("{tool}.toolkit.fluxcd.io/name"): "app",
            format!("{tool}.toolkit.fluxcd.io/namespace"): "flux-system",
        }}));
    }
    all
}

fn write(
    operation: &str,
    namespace: &str,
    (user, groups): &(String, Vec<String>),
    meta: &Value,
) -> Attributes {
    let object = |image: &str| {
        let meta = meta.to_string().replace("NS", namespace);
        let mut m: Value = serde_json::from_str(&meta).unwrap();
        m["name"] = json!("web");
        m["namespace"] = json!(namespace);
        m["uid"] = json!("00000000-0000-4000-8000-000000000001");
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": m,
               "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}},
               "spec": {"containers": [{"name": "c", "image": image}]}}}})
    };
    Attributes {
        operation: operation.into(),
        resource: ("apps".into(), "v1".into(), "deployments".into()),
        sub_resource: String::new(),
        kind: ("apps".into(), "v1".into(), "Deployment".into()),
        name: "web".into(),
        namespace: namespace.into(),
        username: user.clone(),
        groups: groups.clone(),
        object: (operation != "DELETE").then(|| object("b")),
        old_object: (operation != "CREATE").then(|| object("a")),
        dry_run: false,
    }
}

fn judged(policy: &Policy, attributes: &Attributes, endpoint: Endpoint) -> bool {
    let body = serde_json::to_vec(&attributes.admission_review()).unwrap();
    let request = driftguard::request::parse(&body).unwrap();
    let now = "2026-12-07T10:00:00Z".parse().unwrap();
    let judged = judge_request(
        policy,
        &request,
        endpoint,
        None,
        None,
        now,
        &driftguard::deadline::Deadline::none(),
    )
    .unwrap();
    match endpoint {
        Endpoint::Mutate => judged.response.response.is_some_and(|r| r.patch.is_some()),
        _ => judged.decision.verdict != driftguard::drift::Verdict::Allow,
    }
}

fn skipped(hooks: &[Hook], attributes: &Attributes, namespaces: &Namespaces) -> bool {
    hooks
        .iter()
        .all(|h| match h.decide(attributes, namespaces).call {
            Call::Called | Call::Rejected(_) => false,
            Call::Skipped(Skip::NamespaceSelector { .. }) => false,
            Call::Skipped(_) => true,
        })
}

/// A write the registration rendered from `rendered` skips and `in_force` judges.
fn unsound(in_force: &Policy, rendered: &Policy) -> Option<String> {
    let (v, m) = configurations(&options(), rendered);
    let validating: Vec<Hook> = v.webhooks.iter().flatten().map(Hook::validating).collect();
    let mutating: Vec<Hook> = m.webhooks.iter().flatten().map(Hook::mutating).collect();
    let names = ["default", "dev-x", "team-a", "prod-1"];
    let namespaces: Namespaces = names
        .iter()
        .map(|n| {
            (
                n.to_string(),
                [("kubernetes.io/metadata.name".to_owned(), n.to_string())].into(),
            )
        })
        .collect();
    for namespace in names {
        for writer in writers() {
            for meta in metadata() {
                for operation in ["UPDATE", "CREATE", "DELETE"] {
                    let w = write(operation, namespace, &writer, &meta);
                    for (hooks, endpoint) in [
                        (&validating, Endpoint::Validate),
                        (&mutating, Endpoint::Mutate),
                    ] {
                        if skipped(hooks, &w, &namespaces) && judged(in_force, &w, endpoint) {
                            return Some(format!(
                                "{operation} by {writer:?} in {namespace} of {meta} ({endpoint:?})"
                            ));
                        }
                    }
                }
            }
        }
    }
    None
}

fn options() -> Options {
    Options {
        name: "driftguard".into(),
        endpoint: WebhookAddress::parse_service("driftguard.driftguard").unwrap(),
        ca_bundle: Vec::new(),
        failure_policy: "Fail".into(),
        timeout_seconds: 5,
        exclude_namespaces: Vec::new(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_check_reports_a_skip_exactly_where_the_registration_is_unsound(in_force in policy(), rendered_from in policy()) {
        let in_force = Policy::from_yaml(&in_force, "in force").unwrap();
        let rendered = Policy::from_yaml(&rendered_from, "rendered").unwrap();
        let (v, m) = configurations(&options(), &rendered);
        let found = check(&in_force, None, Some(&v), Some(&m));
        let skips: Vec<_> = found.iter().filter(|d| d.direction == Direction::Skips).collect();
        let oracle = unsound(&in_force, &rendered);
        prop_assert_eq!(!skips.is_empty(), oracle.is_some(), "check: {:#?}\noracle: {:?}", skips, oracle);
    }
}

#[test]
fn the_same_policy_on_both_sides_is_never_a_difference() {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 16,
        ..ProptestConfig::default()
    });
    runner
        .run(&policy(), |yaml| {
            let p = Policy::from_yaml(&yaml, "p").unwrap();
            let (v, m) = configurations(&options(), &p);
            let found = check(&p, None, Some(&v), Some(&m));
            prop_assert!(found.is_empty(), "{yaml}\n{found:#?}");
            Ok(())
        })
        .unwrap();
}
