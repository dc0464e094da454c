//! The benchmark's policy, shared by benches/decision.rs and examples/profile_decision.rs.
#![allow(dead_code)]

/// 17 JSON-pointer rules that all match a Deployment, no jq.
pub fn pointer_rules() -> String {
    let mut yaml = String::from("ignoreDifferences:\n");
    for i in 0..17 {
        yaml.push_str(&format!(
            "  - group: apps\n    kind: Deployment\n    jsonPointers: [/spec/template/metadata/annotations/example.com~1rule-{i}]\n"
        ));
    }
    yaml
}

/// 20 rules that all match a Deployment (the worst case): 17 JSON pointers, 3 jq.
pub fn twenty_rules() -> String {
    let mut yaml = pointer_rules();
    for expr in [
        r#".spec.template.spec.containers[] | select(.name == "istio-proxy")"#,
        r#".spec.template.spec.initContainers[]? | select(.name == "linkerd-init")"#,
        r#".metadata.annotations | select(. != null) | .[keys[] | select(startswith("cert-manager.io/"))]"#,
    ] {
        yaml.push_str(&format!(
            "  - group: \"*\"\n    kind: Deployment\n    jqPathExpressions: ['{expr}']\n"
        ));
    }
    yaml
}

pub fn thousand_other_kinds() -> String {
    (0..1000)
        .map(|i| {
            format!("  - group: example.com\n    kind: Widget{i}\n    jsonPointers: [/spec/size]\n")
        })
        .collect()
}
