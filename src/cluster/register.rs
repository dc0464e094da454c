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

use super::rules::{OPERATIONS, RULES};
use crate::policy::Policy;

/// A `--service` that is not `NAME.NAMESPACE[:PORT]`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AddressError {
    #[error("`{0}` is not a port")]
    Port(String),
    #[error("`{0}` is not NAME.NAMESPACE[:PORT]")]
    Service(String),
}

/// Where the apiserver reaches driftguard (not the crate's `Endpoint`, which
/// is the webhook path, validate or mutate).
#[derive(Clone, Debug)]
pub enum WebhookAddress {
    Service {
        name: String,
        namespace: String,
        port: i32,
    },
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

#[derive(Clone, Debug)]
pub struct Options {
    pub name: String,
    pub endpoint: WebhookAddress,
    pub ca_bundle: Vec<u8>,
    pub failure_policy: String,
    pub timeout_seconds: i32,
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
                key: "driftguard.io/ignore".into(),
                operator: "NotIn".into(),
                values: Some(vec!["true".into()]),
            },
        ]),
        match_labels: None,
    }
}

/// CEL that is false for the policy's controller and trusted identities, so the
/// apiserver never calls driftguard for GitOps or system traffic. Exact names
/// and `prefix*` globs are expressed; other globs still work, judged by
/// driftguard itself. Returns the expression and the patterns left out.
pub fn match_condition(policy: &Policy) -> (Option<MatchCondition>, Vec<String>) {
    let mut users = Vec::new();
    let mut groups = Vec::new();
    for identities in [&policy.controllers, &policy.trusted] {
        let (u, g) = identities.patterns();
        users.extend(u.into_iter().map(str::to_owned));
        groups.extend(g.into_iter().map(str::to_owned));
    }
    let mut terms = Vec::new();
    let mut left_out = Vec::new();
    let (exact, prefixes) = split_globs(&users, &mut left_out);
    if !exact.is_empty() {
        terms.push(format!(
            "request.userInfo.username in [{}]",
            cel_list(&exact)
        ));
    }
    terms.extend(
        prefixes
            .iter()
            .map(|p| format!("request.userInfo.username.startsWith({})", cel_string(p))),
    );
    let (exact, prefixes) = split_globs(&groups, &mut left_out);
    if !exact.is_empty() {
        terms.push(format!(
            "request.userInfo.groups.exists(g, g in [{}])",
            cel_list(&exact)
        ));
    }
    terms.extend(prefixes.iter().map(|p| {
        format!(
            "request.userInfo.groups.exists(g, g.startsWith({}))",
            cel_string(p)
        )
    }));
    let condition = (!terms.is_empty()).then(|| MatchCondition {
        name: "skip-gitops-and-trusted-identities".into(),
        expression: format!("!({})", terms.join(" || ")),
    });
    (condition, left_out)
}

fn split_globs(patterns: &[String], left_out: &mut Vec<String>) -> (Vec<String>, Vec<String>) {
    let is_meta = |c: char| matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\');
    let mut exact = Vec::new();
    let mut prefixes = Vec::new();
    for p in patterns {
        match p.strip_suffix('*') {
            _ if !p.contains(is_meta) => exact.push(p.clone()),
            Some(prefix) if !prefix.contains(is_meta) => prefixes.push(prefix.to_owned()),
            _ => left_out.push(p.clone()),
        }
    }
    (exact, prefixes)
}

fn cel_string(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

fn cel_list(items: &[String]) -> String {
    items
        .iter()
        .map(|s| cel_string(s))
        .collect::<Vec<_>>()
        .join(", ")
}

fn rules() -> Vec<RuleWithOperations> {
    RULES
        .iter()
        .map(|r| RuleWithOperations {
            api_groups: Some(r.api_groups.iter().map(|s| s.to_string()).collect()),
            api_versions: Some(vec!["*".into()]),
            operations: Some(OPERATIONS.iter().map(|s| s.to_string()).collect()),
            resources: Some(r.resources.iter().map(|s| s.to_string()).collect()),
            scope: Some("Namespaced".into()),
        })
        .collect()
}

/// Both configurations, fully specified (server-side apply owns every field).
pub fn configurations(
    opts: &Options,
    policy: &Policy,
) -> (ValidatingWebhookConfiguration, MutatingWebhookConfiguration) {
    let (condition, _) = match_condition(policy);
    let conditions = condition.map(|c| vec![c]);
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
        match_conditions: conditions,
        rules: Some(rules()),
    };
    // The mutating webhook takes every setting from the validating one, so the
    // two can never disagree; only its name, path and reinvocation differ.
    let mutating = MutatingWebhook {
        name: format!("mutate.{}.driftguard.io", opts.name),
        client_config: opts.endpoint.client_config("mutate", &opts.ca_bundle),
        admission_review_versions: validating.admission_review_versions.clone(),
        side_effects: validating.side_effects.clone(),
        failure_policy: validating.failure_policy.clone(),
        timeout_seconds: validating.timeout_seconds,
        match_policy: validating.match_policy.clone(),
        namespace_selector: validating.namespace_selector.clone(),
        object_selector: validating.object_selector.clone(),
        match_conditions: validating.match_conditions.clone(),
        rules: validating.rules.clone(),
        reinvocation_policy: Some("Never".into()),
    };
    (
        ValidatingWebhookConfiguration {
            metadata: meta.clone(),
            webhooks: Some(vec![validating]),
        },
        MutatingWebhookConfiguration {
            metadata: meta,
            webhooks: Some(vec![mutating]),
        },
    )
}

/// Both configurations as one YAML stream (for `--dry-run`).
pub fn to_yaml(
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
pub async fn apply(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn match_condition_skips_controllers_and_trusted_identities() {
        let (condition, left_out) = match_condition(&Policy::embedded());
        let expr = condition.unwrap().expression;
        assert!(expr.starts_with("!("), "{expr}");
        assert!(
            expr.contains("'system:serviceaccount:argocd:argocd-application-controller'"),
            "{expr}"
        );
        assert!(
            expr.contains(
                "request.userInfo.username.startsWith('system:serviceaccount:kube-system:')"
            ),
            "{expr}"
        );
        assert!(expr.contains("startsWith('system:node:')"), "{expr}");
        assert!(left_out.is_empty());
        let odd = Policy::from_yaml(
            "trusted: {users: ['ci-*-bot'], groups: [platform]}\n",
            "p.yaml",
        )
        .unwrap();
        let (condition, left_out) = match_condition(&odd);
        assert_eq!(left_out, vec!["ci-*-bot"]);
        assert!(condition.unwrap().expression.contains("g in ['platform']"));
    }

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
