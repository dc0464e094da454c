use super::*;

const SEED: &[(&str, &str)] = &[
    (
        "audit-policy",
        include_str!("../../../tests/data/seed/audit-policy.yaml"),
    ),
    (
        "flux-kustomization",
        include_str!("../../../tests/data/seed/flux-kustomization.yaml"),
    ),
    (
        "argocd-application",
        include_str!("../../../tests/data/seed/argocd-application.yaml"),
    ),
    (
        "argocd-prune",
        include_str!("../../../tests/data/seed/argocd-prune.yaml"),
    ),
    (
        "ignore-differences",
        include_str!("../../../tests/data/seed/ignore-differences.yaml"),
    ),
];

fn refused(text: &str) -> String {
    Policy::from_any_yaml(text, "p.yaml")
        .unwrap_err()
        .to_string()
}

/// Issue 48: a policy with a top-level `kind:` was taken for another
/// manifest, and the embedded default policy put in force in its place.
#[test]
fn a_policy_with_a_kind_is_refused_not_replaced_by_the_default() {
    let text = "kind: DriftguardPolicy\nmode: enforce\nnamespaces: [{names: [dev-payments], mode: enforce}]\n";
    let err = refused(text);
    assert!(
        err.starts_with(
            "p.yaml: apiVersion ``, kind `DriftguardPolicy` is not a driftguard policy"
        ) && err.contains("mode, namespaces, controllers"),
        "{err}"
    );
    let err = refused("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n");
    assert!(err.contains("kind `ConfigMap`"), "{err}");
}

#[test]
fn unknown_top_level_keys_are_refused_where_they_are() {
    let err = refused("mode: enforce\nnamespace: [{names: [a], mode: warn}]\n");
    assert!(
        err.starts_with("p.yaml:2:1: unknown field `namespace`"),
        "{err}"
    );
}

#[test]
fn a_seed_manifest_carrying_policy_keys_is_refused() {
    let err = refused("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: []\nmode: enforce\n");
    assert!(
        err.contains("audit.k8s.io/v1 Policy also holds driftguard policy keys (mode)"),
        "{err}"
    );
}

#[test]
fn a_policy_beside_applications_is_refused() {
    let app = SEED[2].1;
    let err = refused(&format!("{app}---\nmode: audit\n"));
    assert!(
        err.starts_with("p.yaml: document 2 has no kind") && err.contains("--argocd-application"),
        "{err}"
    );
    // An empty document (a trailing `---`) is no policy.
    assert!(Policy::from_any_yaml(&format!("{app}---\n"), "p.yaml").is_ok());
}

#[test]
fn several_documents_without_an_application_are_refused() {
    let err = refused("mode: audit\n---\nmode: warn\n");
    assert!(err.contains("2 YAML documents"), "{err}");
}

/// Every YAML file of the seed article still loads as policy verbatim.
#[test]
fn every_seed_file_loads_as_policy() {
    for (name, text) in SEED {
        let (policy, notes) = Policy::from_any_yaml(text, name).unwrap();
        match *name {
            "ignore-differences" => assert!(notes.is_empty() && !policy.rules.is_empty()),
            "audit-policy" | "flux-kustomization" => {
                assert!(
                    notes[0].contains("the embedded default policy applies"),
                    "{notes:?}"
                );
                assert!(policy.applications.is_empty());
            }
            _ => assert!(!policy.applications.is_empty(), "{name}"),
        }
    }
}

#[test]
fn the_policy_keys_are_the_schemas() {
    let keys = schema::policy_keys();
    let defaults: Value = serde_saphyr::from_str(super::super::DEFAULT_POLICY_YAML).unwrap();
    for key in defaults.as_object().unwrap().keys() {
        assert!(keys.contains(&key.as_str()), "{key} in {keys:?}");
    }
    assert!(keys.contains(&"ignoreDifferences"));
}
