//! Arbitrary bytes as an AdmissionReview body through `judge`, on both
//! endpoints: it must never panic, and every reply it makes must serialize.
#![no_main]

use std::sync::LazyLock;

use driftguard::policy::DEFAULT_POLICY_YAML;
use driftguard::{Endpoint, Policy, judge};
use jiff::Timestamp;
use libfuzzer_sys::fuzz_target;

/// The embedded default with break-glass on, so that its paths run too, and a
/// few rules of every kind (pointer, jq, managed fields) appended to its list.
static POLICY: LazyLock<Policy> = LazyLock::new(|| {
    let text = DEFAULT_POLICY_YAML.replace("allowedGroups: []", "allowedGroups: [sre]");
    assert_ne!(
        text, DEFAULT_POLICY_YAML,
        "the default policy changed shape"
    );
    let text = format!(
        "{text}{}",
        r#"
  - group: apps
    kind: Deployment
    jsonPointers: [/spec/replicas]
  - group: ""
    kind: Pod
    jqPathExpressions: ['.spec.containers[] | select(.name == "istio-proxy")']
  - group: ""
    kind: ConfigMap
    name: cm
    namespace: "dev-*"
    managedFieldsManagers: [kube-controller-manager]
"#
    );
    Policy::from_yaml(&text, "fuzz-policy.yaml").expect("the fuzz policy loads")
});

fuzz_target!(|data: &[u8]| {
    let now: Timestamp = "2026-11-30T12:00:00Z".parse().unwrap();
    for endpoint in [Endpoint::Validate, Endpoint::Mutate] {
        if let Ok(judged) = judge(&POLICY, data, endpoint, None, now) {
            let bytes = judged.to_json();
            serde_json::from_slice::<serde_json::Value>(&bytes).expect("the reply is JSON");
        }
    }
});
