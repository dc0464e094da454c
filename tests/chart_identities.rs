//! Values the chart must refuse before anything changes. Unknown keys under
//! `policy` at any level (its schema is the policy's own, generated:
//! tests/one_source.rs). And the chart never renders webhooks that skip the identities driftguard
//! refuses to exempt: for generated `controllers`/`trusted` patterns, either
//! `helm template` fails naming the refusal, or no rendered webhook's
//! conditions skip a write by any user, a service account of a namespace no
//! pattern names, or the unauthenticated user (issue 48, the careless
//! operator's review: the binary refused such a policy and crash-looped while
//! the chart's webhooks skipped everyone).

use driftguard::registration::apiserver::{Attributes, Call, Hook, Namespaces, Skip};
use driftguard_testkit::control_plane::{ROOT, helm};
use proptest::prelude::*;
use serde_json::{Value, json};

const PATTERNS: &[&str] = &[
    "*",
    "system:*",
    "system:serviceaccount*",
    "system:serviceaccount:*",
    "system:serviceaccount:kube-*",
    "system:serviceaccount:kube-system:*",
    "system:anonymous",
    "system:anon*",
    "alice",
    "ci-*",
    "system:node:*",
];
const GROUPS: &[&str] = &[
    "system:authenticated",
    "system:unauthenticated",
    "system:serviceaccounts",
    "system:serviceaccounts:*",
    "system:serviceaccounts:kube-*",
    "system:*",
    "platform",
    "ops-*",
];

/// Writes by the identities no section may exempt.
fn forbidden() -> Vec<(String, Vec<String>)> {
    let authenticated = "system:authenticated".to_owned();
    vec![
        ("driftguard-probe-user".into(), vec![authenticated.clone()]),
        (
            "system:serviceaccount:zq-fresh:probe".into(),
            vec![
                "system:serviceaccounts".into(),
                "system:serviceaccounts:zq-fresh".into(),
                authenticated,
            ],
        ),
        (
            "system:anonymous".into(),
            vec!["system:unauthenticated".into()],
        ),
    ]
}

fn write(user: &str, groups: &[String]) -> Attributes {
    let object = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "production",
                     "annotations": {"argocd.argoproj.io/tracking-id": "web:apps/Deployment:production/web"}},
    });
    Attributes {
        operation: "UPDATE".into(),
        resource: ("apps".into(), "v1".into(), "deployments".into()),
        sub_resource: String::new(),
        kind: ("apps".into(), "v1".into(), "Deployment".into()),
        name: "web".into(),
        namespace: "production".into(),
        username: user.into(),
        groups: groups.to_vec(),
        object: Some(object.clone()),
        old_object: Some(object),
        dry_run: false,
    }
}

fn list(items: &[&str]) -> String {
    format!("{{{}}}", items.join(","))
}

fn template(sets: &[String]) -> std::process::Output {
    let mut cmd = std::process::Command::new(helm());
    cmd.args([
        "template",
        "dg",
        &format!("{ROOT}/charts/driftguard"),
        "-n",
        "driftguard",
    ])
    .args(["--set", "webhook.url=https://127.0.0.1:8443"])
    .args([
        "--set-string",
        "certificates.provided.ca=x",
        "--set-string",
        "certificates.provided.cert=x",
        "--set-string",
        "certificates.provided.key=x",
    ]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    cmd.output().unwrap()
}

/// Every object of a policy file, where a key can be misspelt.
const OBJECTS: &[&str] = &[
    "policy",
    "policy.controllers",
    "policy.trusted",
    "policy.breakGlass",
    "policy.gitops",
    "policy.gitops.argocd",
    "policy.gitops.flux",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn an_unknown_policy_key_at_any_level_fails_the_render(
        object in proptest::sample::select(OBJECTS),
        key in "[a-z]{3,8}x",
    ) {
        let out = template(&[format!("{object}.{key}=false")]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        prop_assert!(!out.status.success() && stderr.contains(&format!("additional properties '{key}' not allowed")), "{object}.{key}: {stderr}");
    }

    #[test]
    fn the_chart_never_renders_a_skip_of_an_identity_no_section_may_exempt(
        users in proptest::sample::subsequence(PATTERNS, 0..=2),
        groups in proptest::sample::subsequence(GROUPS, 0..=2),
    ) {
        let out = template(&[
            format!("policy.trusted.users={}", list(&users)),
            format!("policy.trusted.groups={}", list(&groups)),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            prop_assert!(stderr.contains("driftguard refuses such a policy"), "{users:?} {groups:?}: {stderr}");
            return Ok(());
        }
        let docs: Vec<Value> = serde_saphyr::from_multiple(&String::from_utf8_lossy(&out.stdout)).unwrap();
        let validating = docs.iter().find(|d| d["kind"] == "ValidatingWebhookConfiguration").unwrap();
        let config: k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration =
            serde_json::from_value(validating.clone()).unwrap();
        let namespaces: Namespaces = [("production".to_owned(), [("kubernetes.io/metadata.name".to_owned(), "production".to_owned())].into())].into();
        let main = Hook::validating(&config.webhooks.unwrap()[0]);
        for (user, groups_of) in forbidden() {
            let call = main.decide(&write(&user, &groups_of), &namespaces).call;
            prop_assert!(
                !matches!(&call, Call::Skipped(Skip::MatchCondition(c)) if c == "skip-gitops-and-trusted-identities"),
                "{users:?} {groups:?}: the chart rendered a skip of {user} {groups_of:?}"
            );
        }
    }
}
