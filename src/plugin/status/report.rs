//! What `status` reads from the cluster: the webhook configurations and
//! where they call, the Service's endpoints and recent DriftBlocked Events.

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;
use serde::Serialize;
use serde_json::{Value, json};

use super::Listing;
use super::expiry::{self, Expiry};
use super::metrics::MetricsReport;
use super::posting;
use super::scan::{BreakGlassEntry, Scan};
use super::tls::{ServingCheck, TlsCheck, check_serving_secret, check_tls};
use crate::plugin::PluginError;
use crate::plugin::api::{Api, answer};

/// One webhook of either configuration, as `status` reads it.
struct Hook {
    name: String,
    failure_policy: Option<String>,
    client: WebhookClientConfig,
}

/// The webhooks of configuration `kind` named `name`; `None` when it does
/// not exist.
async fn webhooks(api: &Api, kind: &str, name: &str) -> Result<Option<Vec<Hook>>, PluginError> {
    // The two configuration types share these fields but no trait.
    macro_rules! hooks_of {
        ($config:ty) => {{
            let got = api.all::<$config>().get(name).await;
            answer(got, format_args!("get {kind} {name}"))?.map(|c| {
                c.webhooks
                    .into_iter()
                    .flatten()
                    .map(|h| Hook {
                        name: h.name,
                        failure_policy: h.failure_policy,
                        client: h.client_config,
                    })
                    .collect()
            })
        }};
    }
    let got = if kind == "ValidatingWebhookConfiguration" {
        hooks_of!(ValidatingWebhookConfiguration)
    } else {
        hooks_of!(MutatingWebhookConfiguration)
    };
    match got {
        Ok(hooks) => Ok(Some(hooks)),
        Err(r) if r.code == 404 => Ok(None),
        Err(r) => Err(PluginError::from_refusal(r)),
    }
}

const KINDS: [&str; 2] = [
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
];

/// What `status -o json|yaml` prints.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Report {
    pub(super) healthy: bool,
    pub(super) configurations: Vec<Configuration>,
    pub(super) policy: PolicyReport,
    pub(super) metrics: MetricsReport,
    pub(super) recent_drift_blocked: Listing<EventEntry>,
    pub(super) active_break_glass: Listing<BreakGlassEntry>,
    pub(super) expired_break_glass: Vec<BreakGlassEntry>,
    pub(super) break_glass_scan: Scan,
    pub(super) trusted_identity_reach: crate::plugin::trusted_reach::ReachReport,
    pub(super) who_may_post_reviews: posting::Posting,
    pub(super) registration: Listing<RegistrationReport>,
}

/// The webhooks against what the policy needs (`crate::registration`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RegistrationReport {
    /// Each difference, `skips: …`, `sends: …` or `fails: …`.
    pub(super) differences: Vec<String>,
    /// Whether the webhooks skip (or fail) a write the policy judges.
    pub(super) unsound: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) fix: Option<&'static str>,
}

/// Both configurations named `name`, checked against `policy`; `Err` when
/// one cannot be read.
pub(super) async fn registration(
    api: &Api,
    name: &str,
    policy: &crate::policy::Policy,
) -> Result<Listing<RegistrationReport>, PluginError> {
    use crate::registration::{self, Direction};
    let validating = api
        .all::<ValidatingWebhookConfiguration>()
        .get_opt(name)
        .await;
    let mutating = api
        .all::<MutatingWebhookConfiguration>()
        .get_opt(name)
        .await;
    let (validating, mutating) = match (
        answer(
            validating,
            format_args!("get ValidatingWebhookConfiguration {name}"),
        )?,
        answer(
            mutating,
            format_args!("get MutatingWebhookConfiguration {name}"),
        )?,
    ) {
        (Ok(v), Ok(m)) => (v, m),
        (Err(r), _) | (_, Err(r)) => {
            return Ok(Listing::NotReadable(format!("{} {}", r.code, r.message)));
        }
    };
    let differences = registration::check(policy, None, validating.as_ref(), mutating.as_ref());
    let unsound = registration::count(&differences, Direction::Skips)
        + registration::count(&differences, Direction::Fails)
        > 0;
    Ok(Listing::Found(vec![RegistrationReport {
        differences: registration::lines(&differences),
        unsound,
        fix: (!differences.is_empty()).then_some(registration::FIX),
    }]))
}

/// One webhook configuration.
#[derive(Debug, Serialize)]
pub(super) struct Configuration {
    pub(super) kind: &'static str,
    pub(super) name: String,
    pub(super) present: bool,
    /// Absent when the configuration is missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) webhooks: Option<Vec<HookReport>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct HookReport {
    pub(super) name: String,
    pub(super) failure_policy: Option<String>,
    /// Whether the caBundle is set.
    pub(super) ca_bundle: bool,
    /// The dates of each CA in the caBundle.
    pub(super) ca_bundle_expiry: Vec<Expiry>,
    /// The URL, or `service NS/NAME`.
    pub(super) calls: String,
    /// A Service's ready endpoints; null for a URL, or when not readable.
    pub(super) ready_endpoints: Option<u64>,
    /// A URL's TLS check from this machine; null for a Service.
    pub(super) tls_from_here: Option<TlsCheck>,
    /// A Service's serving certificate against the caBundle; null for a URL.
    pub(super) serving_certificate: Option<ServingCheck>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PolicyReport {
    pub(super) from: String,
    pub(super) mode: &'static str,
    pub(super) digest: String,
    pub(super) break_glass_enabled: bool,
}

/// One driftguard Event.
#[derive(Debug, Serialize)]
pub(super) struct EventEntry {
    pub(super) time: Option<String>,
    /// `KIND NAMESPACE/NAME`.
    pub(super) object: String,
    pub(super) regarding: ObjectReference,
    pub(super) note: Option<String>,
}

/// Both configurations named `name`, whether they look healthy, and the
/// first Service they call (namespace, name).
pub(super) async fn configurations(
    api: &Api,
    name: &str,
) -> Result<(bool, Vec<Configuration>, Option<(String, String)>), PluginError> {
    let mut healthy = true;
    let mut configurations = Vec::new();
    let mut service_target: Option<(String, String)> = None;
    for kind in KINDS {
        let Some(config) = webhooks(api, kind, name).await? else {
            healthy = false;
            configurations.push(Configuration {
                kind,
                name: name.to_owned(),
                present: false,
                webhooks: None,
            });
            continue;
        };
        let mut hooks = Vec::new();
        for hook in config {
            let (report, ok) = hook_report(api, hook, &mut service_target).await?;
            healthy &= ok;
            hooks.push(report);
        }
        configurations.push(Configuration {
            kind,
            name: name.to_owned(),
            present: true,
            webhooks: Some(hooks),
        });
    }
    Ok((healthy, configurations, service_target))
}

/// One webhook: its caBundle, and where it calls checked (a URL's TLS, a
/// Service's endpoints and serving certificate); whether it looks healthy.
/// The first Service called is kept in `service_target`.
async fn hook_report(
    api: &Api,
    hook: Hook,
    service_target: &mut Option<(String, String)>,
) -> Result<(HookReport, bool), PluginError> {
    let cc = &hook.client;
    let ca_bundle = cc.ca_bundle.as_ref().map(|b| b.0.as_slice());
    let ca = ca_bundle.is_some_and(|b| !b.is_empty());
    let ca_bundle_expiry =
        expiry::of_pem(ca_bundle.unwrap_or_default(), crate::certs::expiry::now());
    // rustls does not check a CA's own dates; the apiserver does.
    let mut healthy = ca && expiry::some_ca_usable(&ca_bundle_expiry);
    let mut report = HookReport {
        name: hook.name,
        failure_policy: hook.failure_policy,
        ca_bundle: ca,
        ca_bundle_expiry,
        calls: String::new(),
        ready_endpoints: None,
        tls_from_here: None,
        serving_certificate: None,
    };
    match (cc.url.as_deref(), cc.service.as_ref()) {
        (Some(url), _) => {
            let tls = check_tls(url, ca_bundle.unwrap_or_default()).await;
            healthy &= tls.ok;
            report.calls = url.to_owned();
            report.tls_from_here = Some(tls);
        }
        (None, Some(svc)) => {
            let (ns, name) = (svc.namespace.as_str(), svc.name.as_str());
            if service_target.is_none() {
                *service_target = Some((ns.to_owned(), name.to_owned()));
            }
            let ready = ready_endpoints(api, ns, name).await?;
            if ready == Some(0) {
                healthy = false;
            }
            let serving =
                check_serving_secret(api, ns, name, ca_bundle.unwrap_or_default()).await?;
            healthy &= serving.verifies != Some(false);
            report.calls = format!("service {ns}/{name}");
            report.ready_endpoints = ready;
            report.serving_certificate = Some(serving);
        }
        _ => {}
    }
    Ok((report, healthy))
}

/// Ready endpoints of a Service, from its EndpointSlices; `None` when they
/// cannot be read (reported, not fatal).
async fn ready_endpoints(api: &Api, ns: &str, name: &str) -> Result<Option<u64>, PluginError> {
    let params = ListParams::default().labels(&format!("kubernetes.io/service-name={name}"));
    let listed = api.namespaced::<EndpointSlice>(ns).list(&params).await;
    Ok(match answer(listed, "list endpointslices")? {
        Ok(list) => Some(
            list.items
                .iter()
                .flat_map(|s| s.endpoints.iter().flatten())
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
                .count() as u64,
        ),
        Err(r) => {
            crate::plugin::out::errln!(
                "warning: cannot read the endpoints of service {ns}/{name}: {}",
                r.message
            );
            None
        }
    })
}

/// The 10 most recent driftguard Events with `reason` in every namespace, or
/// why they cannot be read (a string; not fatal).
pub(super) async fn recent_events(
    api: &Api,
    reason: &str,
) -> Result<Listing<EventEntry>, PluginError> {
    let params = ListParams::default().fields(&format!("reason={reason}"));
    let list = match answer(api.all::<Event>().list(&params).await, "list events")? {
        Ok(list) => list,
        Err(r) => return Ok(Listing::NotReadable(r.message)),
    };
    let mut events: Vec<EventEntry> = list
        .items
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("driftguard"))
        .map(|e| {
            // As the apiserver writes it (RFC 3339), so that times sort as text.
            let wire = |t: Value| t.as_str().map(str::to_owned);
            let time = e
                .series
                .as_ref()
                .and_then(|s| wire(json!(s.last_observed_time)))
                .or(e.event_time.as_ref().and_then(|t| wire(json!(t))))
                .or(e
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .and_then(|t| wire(json!(t))));
            let r = e.regarding.unwrap_or_default();
            let ns = r
                .namespace
                .as_deref()
                .map(|n| format!("{n}/"))
                .unwrap_or_default();
            EventEntry {
                time,
                object: format!(
                    "{} {ns}{}",
                    r.kind.as_deref().unwrap_or_default(),
                    r.name.as_deref().unwrap_or_default()
                ),
                regarding: r,
                note: e.note,
            }
        })
        .collect();
    events.sort_by(|a, b| b.time.cmp(&a.time));
    events.truncate(10);
    Ok(Listing::Found(events))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::status::metrics::metrics_report;

    fn keys(v: &serde_json::Value) -> Vec<&str> {
        let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        k.sort_unstable();
        k
    }

    #[test]
    fn the_report_keeps_its_json_field_names() {
        let hook = HookReport {
            name: "validate.driftguard.io".into(),
            failure_policy: Some("Fail".into()),
            ca_bundle: true,
            ca_bundle_expiry: vec![],
            calls: "service driftguard/driftguard".into(),
            ready_endpoints: Some(2),
            tls_from_here: None,
            serving_certificate: Some(ServingCheck {
                secret: "driftguard/driftguard-tls".into(),
                verifies: Some(true),
                text: "ok".into(),
                expiry: None,
            }),
        };
        let report = Report {
            healthy: true,
            configurations: vec![
                Configuration {
                    kind: KINDS[0],
                    name: "driftguard".into(),
                    present: true,
                    webhooks: Some(vec![hook]),
                },
                Configuration {
                    kind: KINDS[1],
                    name: "driftguard".into(),
                    present: false,
                    webhooks: None,
                },
            ],
            policy: PolicyReport {
                from: "ConfigMap driftguard/driftguard-policy".into(),
                mode: "enforce",
                digest: "sha256:ab".into(),
                break_glass_enabled: false,
            },
            metrics: metrics_report("here", Err("refused".into())),
            recent_drift_blocked: Listing::NotReadable("forbidden".into()),
            active_break_glass: Listing::Found(vec![]),
            expired_break_glass: vec![],
            break_glass_scan: Scan::default(),
            trusted_identity_reach: crate::plugin::trusted_reach::ReachReport::not_checked(vec![
                "forbidden".into(),
            ]),
            who_may_post_reviews: posting::Posting {
                client_auth: Some(true),
                network_policy: None,
                open: false,
                text: "ok".into(),
            },
            registration: Listing::NotReadable("forbidden".into()),
        };
        let v = serde_json::to_value(&report).unwrap();
        assert_eq!(
            keys(&v),
            [
                "activeBreakGlass",
                "breakGlassScan",
                "configurations",
                "expiredBreakGlass",
                "healthy",
                "metrics",
                "policy",
                "recentDriftBlocked",
                "registration",
                "trustedIdentityReach",
                "whoMayPostReviews"
            ]
        );
        assert_eq!(
            keys(&v["configurations"][0]),
            ["kind", "name", "present", "webhooks"]
        );
        assert_eq!(keys(&v["configurations"][1]), ["kind", "name", "present"]);
        assert_eq!(
            keys(&v["configurations"][0]["webhooks"][0]),
            [
                "caBundle",
                "caBundleExpiry",
                "calls",
                "failurePolicy",
                "name",
                "readyEndpoints",
                "servingCertificate",
                "tlsFromHere"
            ]
        );
        assert_eq!(
            keys(&v["configurations"][0]["webhooks"][0]["servingCertificate"]),
            ["caBundleVerifies", "expiry", "secret", "text"]
        );
        assert_eq!(
            keys(&v["policy"]),
            ["breakGlassEnabled", "digest", "from", "mode"]
        );
        assert_eq!(v["recentDriftBlocked"], "forbidden");
        assert_eq!(v["activeBreakGlass"], json!([]));
        assert_eq!(v["breakGlassScan"], json!({"typesListed": 0}));
    }
}
