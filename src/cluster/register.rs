//! `driftguard register`: both webhook configurations, written with server-side
//! apply under field manager `driftguard` (idempotent), or printed as YAML.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations,
    ServiceReference, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};

use super::rules::{
    CREATE_RULES, IGNORE_NAMESPACE_LABEL, NAMESPACE_RULES, NOT_NAMESPACES, OPERATIONS, RULES, Rule,
    conditions,
};
use crate::policy::Policy;

/// A `--service` that is not `NAME.NAMESPACE[:PORT]`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AddressError {
    /// What follows the last `:` is not a port number.
    #[error("`{0}` is not a port")]
    Port(String),
    /// No `.` between the Service's name and namespace.
    #[error("`{0}` is not NAME.NAMESPACE[:PORT]")]
    Service(String),
}

/// Where the apiserver reaches driftguard (not the crate's `Endpoint`, which
/// is the webhook path, validate or mutate).
#[derive(Clone, Debug)]
pub enum WebhookAddress {
    /// A Service in the cluster (`--service`).
    Service {
        /// The Service's name.
        name: String,
        /// Its namespace, which is also never sent to driftguard.
        namespace: String,
        /// Its port.
        port: i32,
    },
    /// A URL, for a driftguard out of the cluster (`--url`); the paths are appended.
    Url(String),
}

impl WebhookAddress {
    /// `NAME.NAMESPACE[:PORT]`.
    pub fn parse_service(text: &str) -> Result<Self, AddressError> {
        let (host, port) = match text.rsplit_once(':') {
            Some((h, p)) => (h, p.parse().map_err(|_| AddressError::Port(p.to_owned()))?),
            None => (text, 443),
        };
        let (name, namespace) = host
            .split_once('.')
            .ok_or_else(|| AddressError::Service(text.to_owned()))?;
        Ok(WebhookAddress::Service {
            name: name.into(),
            namespace: namespace.into(),
            port,
        })
    }

    fn client_config(&self, path: &str, ca_bundle: &[u8]) -> WebhookClientConfig {
        let mut config = WebhookClientConfig {
            ca_bundle: Some(ByteString(ca_bundle.to_vec())),
            ..Default::default()
        };
        match self {
            WebhookAddress::Service {
                name,
                namespace,
                port,
            } => {
                config.service = Some(ServiceReference {
                    name: name.clone(),
                    namespace: namespace.clone(),
                    port: Some(*port),
                    path: Some(format!("/{path}")),
                })
            }
            WebhookAddress::Url(url) => {
                config.url = Some(format!("{}/{path}", url.trim_end_matches('/')))
            }
        }
        config
    }

    fn namespace(&self) -> Option<&str> {
        match self {
            WebhookAddress::Service { namespace, .. } => Some(namespace),
            WebhookAddress::Url(_) => None,
        }
    }
}

/// What `driftguard register` was told.
#[derive(Clone, Debug)]
pub struct Options {
    /// The name of both configurations.
    pub name: String,
    /// Where the apiserver reaches driftguard.
    pub endpoint: WebhookAddress,
    /// PEM of the CA that signed driftguard's serving certificate.
    pub ca_bundle: Vec<u8>,
    /// `Fail` or `Ignore`.
    pub failure_policy: String,
    /// Seconds the apiserver waits for an answer.
    pub timeout_seconds: i32,
    /// Namespaces never sent to driftguard, besides kube-system and driftguard's own.
    pub exclude_namespaces: Vec<String>,
}

/// Namespaces never sent to driftguard: kube-system, driftguard's own, the
/// excluded ones, and any labelled `driftguard.io/ignore: "true"`.
fn namespace_selector(opts: &Options) -> LabelSelector {
    let mut excluded = vec!["kube-system".to_owned()];
    excluded.extend(opts.endpoint.namespace().map(str::to_owned));
    excluded.extend(opts.exclude_namespaces.iter().cloned());
    excluded.dedup();
    LabelSelector {
        match_expressions: Some(vec![
            LabelSelectorRequirement {
                key: "kubernetes.io/metadata.name".into(),
                operator: "NotIn".into(),
                values: Some(excluded),
            },
            LabelSelectorRequirement {
                key: IGNORE_NAMESPACE_LABEL.into(),
                operator: "NotIn".into(),
                values: Some(vec!["true".into()]),
            },
        ]),
        match_labels: None,
    }
}

fn rules(rules: &[Rule]) -> Vec<RuleWithOperations> {
    rules_for(rules, OPERATIONS)
}

fn rules_for(rules: &[Rule], operations: &[&str]) -> Vec<RuleWithOperations> {
    rules
        .iter()
        .map(|r| RuleWithOperations {
            api_groups: Some(r.api_groups.iter().map(|s| s.to_string()).collect()),
            api_versions: Some(r.api_versions.iter().map(|s| s.to_string()).collect()),
            operations: Some(operations.iter().map(|s| s.to_string()).collect()),
            resources: Some(r.resources.iter().map(|s| s.to_string()).collect()),
            scope: Some(r.scope.into()),
        })
        .collect()
}

/// Both configurations, fully specified (server-side apply owns every field).
pub fn configurations(
    opts: &Options,
    policy: &Policy,
) -> (ValidatingWebhookConfiguration, MutatingWebhookConfiguration) {
    let conditions = conditions(policy);
    let meta = ObjectMeta {
        name: Some(opts.name.clone()),
        labels: Some(
            [(
                "app.kubernetes.io/managed-by".to_owned(),
                "driftguard".to_owned(),
            )]
            .into(),
        ),
        ..Default::default()
    };
    let not_namespaces = MatchCondition {
        name: "namespaces-have-their-own-webhook".into(),
        expression: NOT_NAMESPACES.into(),
    };
    let with = |mut list: Vec<MatchCondition>, extra: &MatchCondition| {
        list.push(extra.clone());
        list
    };
    let validating = ValidatingWebhook {
        name: format!("validate.{}.driftguard.io", opts.name),
        client_config: opts.endpoint.client_config("validate", &opts.ca_bundle),
        admission_review_versions: vec!["v1".into()],
        side_effects: "NoneOnDryRun".into(),
        failure_policy: Some(opts.failure_policy.clone()),
        timeout_seconds: Some(opts.timeout_seconds),
        match_policy: Some("Equivalent".into()),
        namespace_selector: Some(namespace_selector(opts)),
        object_selector: Some(LabelSelector::default()),
        match_conditions: Some(with(conditions.validating.clone(), &not_namespaces)),
        rules: Some(rules(RULES)),
    };
    // Namespaces: every setting of the first webhook but the selector.
    let validating_namespaces = ValidatingWebhook {
        name: format!("validate-namespaces.{}.driftguard.io", opts.name),
        namespace_selector: Some(LabelSelector::default()),
        match_conditions: Some(conditions.validating.clone()),
        rules: Some(rules(NAMESPACE_RULES)),
        ..validating.clone()
    };
    // Untracked CREATEs, for objects the tools' records list: everywhere,
    // and failing open, so an outage never stops everyone's creates.
    let validating_creates = conditions.creates.map(|creates| ValidatingWebhook {
        name: format!("validate-creates.{}.driftguard.io", opts.name),
        failure_policy: Some("Ignore".into()),
        namespace_selector: Some(LabelSelector::default()),
        match_conditions: Some(creates),
        rules: Some(rules_for(CREATE_RULES, &["CREATE"])),
        ..validating.clone()
    });
    // The mutating webhooks take every setting from the validating ones, so
    // the two can never disagree; only their names, path, reinvocation and
    // one more condition (called only where it may patch) differ.
    let mutating =
        |hook: &ValidatingWebhook, name: &str, conditions: Vec<MatchCondition>| MutatingWebhook {
            name: format!("{name}.{}.driftguard.io", opts.name),
            client_config: opts.endpoint.client_config("mutate", &opts.ca_bundle),
            admission_review_versions: hook.admission_review_versions.clone(),
            side_effects: hook.side_effects.clone(),
            failure_policy: hook.failure_policy.clone(),
            timeout_seconds: hook.timeout_seconds,
            match_policy: hook.match_policy.clone(),
            namespace_selector: hook.namespace_selector.clone(),
            object_selector: hook.object_selector.clone(),
            match_conditions: Some(conditions),
            rules: hook.rules.clone(),
            reinvocation_policy: Some("Never".into()),
        };
    let mutating_hooks = vec![
        mutating(
            &validating,
            "mutate",
            with(conditions.mutating.clone(), &not_namespaces),
        ),
        mutating(
            &validating_namespaces,
            "mutate-namespaces",
            conditions.mutating,
        ),
    ];
    (
        ValidatingWebhookConfiguration {
            metadata: meta.clone(),
            webhooks: Some(
                [validating, validating_namespaces]
                    .into_iter()
                    .chain(validating_creates)
                    .collect(),
            ),
        },
        MutatingWebhookConfiguration {
            metadata: meta,
            webhooks: Some(mutating_hooks),
        },
    )
}

/// Both configurations as one YAML stream (for `--dry-run`).
pub(crate) fn to_yaml(
    validating: &ValidatingWebhookConfiguration,
    mutating: &MutatingWebhookConfiguration,
) -> String {
    // k8s-openapi writes apiVersion and kind for top-level resources.
    format!(
        "---\n{}---\n{}",
        serde_saphyr::to_string(validating).expect("serializes"),
        serde_saphyr::to_string(mutating).expect("serializes")
    )
}

/// Server-side apply of both configurations under field manager `driftguard`.
pub(crate) async fn apply(
    client: kube::Client,
    validating: &ValidatingWebhookConfiguration,
    mutating: &MutatingWebhookConfiguration,
) -> Result<(), kube::Error> {
    use kube::api::{Api, Patch, PatchParams};
    let params = PatchParams::apply("driftguard").force();
    let name = validating.metadata.name.clone().unwrap_or_default();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(&name, &params, &Patch::Apply(validating))
        .await?;
    Api::<MutatingWebhookConfiguration>::all(client)
        .patch(&name, &params, &Patch::Apply(mutating))
        .await?;
    Ok(())
}

/// Both configurations named `name`, `None` where absent.
pub(crate) async fn read(
    client: kube::Client,
    name: &str,
) -> Result<
    (
        Option<ValidatingWebhookConfiguration>,
        Option<MutatingWebhookConfiguration>,
    ),
    kube::Error,
> {
    use kube::api::Api;
    let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get_opt(name)
        .await?;
    let mutating = Api::<MutatingWebhookConfiguration>::all(client)
        .get_opt(name)
        .await?;
    Ok((validating, mutating))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_endpoint_parses_and_excludes_its_namespace() {
        let endpoint = WebhookAddress::parse_service("driftguard.driftguard-system:8443").unwrap();
        let opts = Options {
            name: "driftguard".into(),
            endpoint,
            ca_bundle: b"PEM".to_vec(),
            failure_policy: "Fail".into(),
            timeout_seconds: 5,
            exclude_namespaces: vec!["monitoring".into()],
        };
        let (v, m) = configurations(&opts, &Policy::embedded());
        let hook = &v.webhooks.as_ref().unwrap()[0];
        let svc = hook.client_config.service.as_ref().unwrap();
        assert_eq!(
            (
                svc.name.as_str(),
                svc.namespace.as_str(),
                svc.port,
                svc.path.as_deref()
            ),
            (
                "driftguard",
                "driftguard-system",
                Some(8443),
                Some("/validate")
            )
        );
        let excluded = hook
            .namespace_selector
            .as_ref()
            .unwrap()
            .match_expressions
            .as_ref()
            .unwrap()[0]
            .values
            .clone()
            .unwrap();
        assert_eq!(
            excluded,
            vec!["kube-system", "driftguard-system", "monitoring"]
        );
        assert_eq!(m.webhooks.unwrap()[0].side_effects, "NoneOnDryRun");
        assert!(WebhookAddress::parse_service("nodots").is_err());
    }
}
