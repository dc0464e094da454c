//! `kubectl driftguard status`: both webhook configurations, their caBundle,
//! failurePolicy and where they call, whether a Service's endpoints are
//! ready, and the policy in force.

mod posting;

use std::process::ExitCode;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, ObjectMeta};
use serde::Serialize;
use serde_json::{Value, json};

use super::api::{Api, Resource, answer};
use super::{Color, Output, PluginError, PolicySource, paint, print_structured};
use crate::drift::breakglass_state;
use crate::text::printable;

/// How long `status` waits for `/metrics` through the apiserver's service proxy.
const PROXY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Name of both webhook configurations (`driftguard register --name`; the
    /// chart's release full name). Default: driftguard, else the one
    /// ValidatingWebhookConfiguration labelled app.kubernetes.io/name=driftguard.
    #[arg(long)]
    name: Option<String>,
    /// Read driftguard's OpenMetrics from this URL (http://HOST:PORT/metrics)
    /// instead of through the apiserver's proxy to the Service's `probes` port.
    #[arg(long)]
    metrics_url: Option<String>,
    /// Output format: text, json or yaml.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    output: Output,
    /// Argo CD's namespace (argocd-cm and the AppProjects), for the service
    /// accounts Argo CD syncs as.
    #[arg(long, default_value = "argocd")]
    argocd_namespace: String,
}

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
struct Report {
    healthy: bool,
    configurations: Vec<Configuration>,
    policy: PolicyReport,
    metrics: MetricsReport,
    recent_drift_blocked: Listing<EventEntry>,
    active_break_glass: Listing<BreakGlassEntry>,
    expired_break_glass: Vec<BreakGlassEntry>,
    break_glass_scan: Scan,
    trusted_identity_reach: super::reach::ReachReport,
    who_may_post_reviews: posting::Posting,
}

/// A list, or why it could not be read (a string in JSON).
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Listing<T> {
    NotReadable(String),
    Found(Vec<T>),
}

/// One webhook configuration.
#[derive(Debug, Serialize)]
struct Configuration {
    kind: &'static str,
    name: String,
    present: bool,
    /// Absent when the configuration is missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    webhooks: Option<Vec<HookReport>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct HookReport {
    name: String,
    failure_policy: Option<String>,
    /// Whether the caBundle is set.
    ca_bundle: bool,
    /// The URL, or `service NS/NAME`.
    calls: String,
    /// A Service's ready endpoints; null for a URL, or when not readable.
    ready_endpoints: Option<u64>,
    /// A URL's TLS check from this machine; null for a Service.
    tls_from_here: Option<TlsCheck>,
    /// A Service's serving certificate against the caBundle; null for a URL.
    serving_certificate: Option<ServingCheck>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct PolicyReport {
    from: String,
    mode: &'static str,
    digest: String,
    break_glass_enabled: bool,
}

/// driftguard's own metrics, or why they could not be read.
#[derive(Debug, Serialize)]
struct MetricsReport {
    /// Where they were read (null: not tried).
    from: Option<String>,
    reachable: bool,
    #[serde(flatten)]
    counts: Option<Counts>,
    /// One line for people.
    text: String,
}

/// What a reachable `/metrics` says.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Counts {
    policy_in_force: Option<PolicyInForce>,
    policy_reloads: Reloads,
    decision_timeouts: u64,
    internal_errors: u64,
    /// Watched sources never listed (`driftguard_sources_unread`): the
    /// server is ready, degraded, judging by the strictest reading.
    sources_unread: Vec<String>,
    /// `driftguard_client_auth_required`; null from an older server.
    client_auth_required: Option<bool>,
}

#[derive(Debug, Serialize)]
struct Reloads {
    success: u64,
    failure: u64,
}

/// The labels of `driftguard_policy_info`: the policy the server has in force.
#[derive(Debug, PartialEq, Eq, Serialize)]
struct PolicyInForce {
    digest: Option<String>,
    source: Option<String>,
    mode: Option<String>,
}

/// One driftguard Event.
#[derive(Debug, Serialize)]
struct EventEntry {
    time: Option<String>,
    /// `KIND NAMESPACE/NAME`.
    object: String,
    regarding: ObjectReference,
    note: Option<String>,
}

/// An object carrying driftguard's break-glass annotations.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BreakGlassEntry {
    /// `KIND NAMESPACE/NAME`.
    pub object: String,
    pub api_version: String,
    pub kind: String,
    /// Null for a cluster-scoped object.
    pub namespace: Option<String>,
    pub name: String,
    pub reason: Option<String>,
    pub expires: Option<String>,
    pub state: &'static str,
    /// Why it grants nothing; null when active.
    pub why: Option<String>,
    /// What `kubectl driftguard break-glass` paused for it, if anything.
    pub paused: Option<String>,
}

/// How far the break-glass search got.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct Scan {
    types_listed: usize,
    /// The fields below are absent when discovery itself failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    types_not_readable: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    not_readable: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failed: Option<Vec<String>>,
}

pub async fn run(api: &Api, source: &PolicySource, args: Args) -> Result<ExitCode, PluginError> {
    let name = match &args.name {
        Some(name) => name.clone(),
        None => default_name(api).await?,
    };
    let mut healthy = true;
    let mut configurations = Vec::new();
    let mut service_target: Option<(String, String)> = None;
    for kind in KINDS {
        let Some(config) = webhooks(api, kind, &name).await? else {
            healthy = false;
            configurations.push(Configuration {
                kind,
                name: name.clone(),
                present: false,
                webhooks: None,
            });
            continue;
        };
        let mut hooks = Vec::new();
        for hook in config {
            let cc = &hook.client;
            let ca_bundle = cc.ca_bundle.as_ref().map(|b| b.0.as_slice());
            let ca = ca_bundle.is_some_and(|b| !b.is_empty());
            healthy &= ca;
            let mut report = HookReport {
                name: hook.name,
                failure_policy: hook.failure_policy,
                ca_bundle: ca,
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
                        service_target = Some((ns.to_owned(), name.to_owned()));
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
            hooks.push(report);
        }
        configurations.push(Configuration {
            kind,
            name: name.clone(),
            present: true,
            webhooks: Some(hooks),
        });
    }
    let metrics = match (&args.metrics_url, &service_target) {
        (Some(url), _) => metrics_report(url, fetch_url(url).await),
        (None, Some((ns, name))) => {
            let path = format!("/api/v1/namespaces/{ns}/services/http:{name}:probes/proxy/metrics");
            // Bounded: an apiserver's service proxy can hold a request to a
            // Service it cannot reach for minutes (seen on v1.37).
            let proxied = tokio::time::timeout(PROXY_TIMEOUT, api.get_text(&path)).await;
            let text = match proxied {
                Err(_) => Err(format!(
                    "no answer within {}s through the apiserver's service proxy",
                    PROXY_TIMEOUT.as_secs()
                )),
                Ok(Ok(Ok(text))) => Ok(text),
                Ok(Ok(Err(r))) if r.code == 403 => Err(format!(
                    "forbidden (needs get on services/proxy in namespace {ns}): {}",
                    r.message
                )),
                Ok(Ok(Err(r))) => Err(r.message),
                Ok(Err(e)) => Err(e.to_string()),
            };
            metrics_report(&format!("service {ns}/{name} port probes"), text)
        }
        (None, None) => MetricsReport {
            from: None,
            reachable: false,
            counts: None,
            text: "not read: the webhooks call a URL; give --metrics-url http://HOST:PROBEPORT/metrics".into(),
        },
    };
    let service = service_target
        .as_ref()
        .map(|(n, s)| (n.as_str(), s.as_str()));
    let client_auth = metrics.counts.as_ref().and_then(|c| c.client_auth_required);
    let who_may_post_reviews = posting::check(api, service, client_auth).await?;
    let loaded = source.load(api).await?;
    let blocked = recent_events(api, "DriftBlocked").await?;
    let (break_glass, expired_break_glass, scan) = break_glass_scan(api, &loaded.policy).await?;
    // A warning, not a failure: the exit code stays what the webhooks decide.
    let reach = super::reach::report(api, &loaded.policy, &args.argocd_namespace).await?;
    let report = Report {
        healthy,
        configurations,
        policy: PolicyReport {
            from: loaded.origin.clone(),
            mode: loaded.policy.mode.as_str(),
            digest: loaded.policy.digest.clone(),
            break_glass_enabled: !loaded.policy.break_glass.allowed.is_empty(),
        },
        metrics,
        recent_drift_blocked: blocked,
        active_break_glass: break_glass,
        expired_break_glass,
        break_glass_scan: scan,
        trusted_identity_reach: reach,
        who_may_post_reviews,
    };
    if args.output != Output::Text {
        print_structured(&report, args.output)?;
    } else {
        print_text(&report);
    }
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_text(report: &Report) {
    let s = |text: &str| printable(text).into_owned();
    for c in &report.configurations {
        let Some(hooks) = &c.webhooks else {
            println!(
                "{} {}: {}",
                c.kind,
                s(&c.name),
                paint("MISSING", Color::Red)
            );
            continue;
        };
        println!("{} {}: present", c.kind, s(&c.name));
        for h in hooks {
            let ready = match (h.ready_endpoints, &h.tls_from_here) {
                (Some(n), _) => format!(", {n} ready endpoint(s)"),
                (None, Some(tls)) => format!(", {}", s(&tls.text)),
                (None, None) => String::new(),
            };
            println!(
                "  {}: failurePolicy {}, caBundle {}, calls {}{ready}",
                s(&h.name),
                s(h.failure_policy.as_deref().unwrap_or_default()),
                if h.ca_bundle { "present" } else { "MISSING" },
                s(&h.calls),
            );
            if let Some(serving) = &h.serving_certificate {
                println!("    {}", s(&serving.text));
            }
        }
    }
    let policy = &report.policy;
    println!(
        "Policy: {} (mode {}, break-glass {})",
        s(&policy.from),
        policy.mode,
        if policy.break_glass_enabled {
            "enabled"
        } else {
            "disabled"
        }
    );
    println!("Metrics: {}", s(&report.metrics.text));
    let server = report
        .metrics
        .counts
        .as_ref()
        .and_then(|c| c.policy_in_force.as_ref());
    if let Some(server) = server {
        let agrees = if server.digest.as_deref() == Some(policy.digest.as_str()) {
            format!("the same as {}", s(&policy.from))
        } else {
            format!(
                "{} {} (a reload is pending or was refused: see the policy reloads above)",
                paint("DIFFERS from", Color::Red),
                s(&policy.from)
            )
        };
        let label = |v: &Option<String>| s(v.as_deref().unwrap_or_default());
        println!(
            "Policy in force (server): {} from {}, mode {}: {agrees}",
            label(&server.digest),
            label(&server.source),
            label(&server.mode),
        );
    }
    if let Some(unread) = report
        .metrics
        .counts
        .as_ref()
        .map(|c| &c.sources_unread)
        .filter(|u| !u.is_empty())
    {
        println!(
            "Sources: {} (ready, judging by the strictest reading until they list): not listed: {}",
            paint("DEGRADED", Color::Red),
            s(&unread.join(", "))
        );
    }
    let posting = &report.who_may_post_reviews;
    let text = s(&posting.text);
    println!(
        "Who may post reviews: {}",
        if posting.open {
            paint(&text, Color::Red)
        } else {
            text
        }
    );
    print_events(report);
    super::reach::print(&report.trusted_identity_reach);
    println!(
        "status: {}",
        if report.healthy {
            paint("ok", Color::Green)
        } else {
            paint("NOT OK", Color::Red)
        }
    );
}

/// `driftguard` when that configuration exists (or cannot be read: the
/// refusal is reported by the caller), else the one the chart labelled.
async fn default_name(api: &Api) -> Result<String, PluginError> {
    const DEFAULT: &str = "driftguard";
    let configs = api.all::<ValidatingWebhookConfiguration>();
    match answer(configs.get_metadata(DEFAULT).await, DEFAULT)? {
        Err(r) if r.code == 404 => {}
        _ => return Ok(DEFAULT.to_owned()),
    }
    let params = ListParams::default().labels("app.kubernetes.io/name=driftguard");
    let Ok(list) = answer(configs.list_metadata(&params).await, "list")? else {
        return Ok(DEFAULT.to_owned());
    };
    let names: Vec<&str> = list
        .items
        .iter()
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    Ok(match names.as_slice() {
        [one] => (*one).to_owned(),
        _ => DEFAULT.to_owned(),
    })
}

/// What a TLS handshake with a webhook URL, from this machine, says.
#[derive(Debug, serde::Serialize)]
struct TlsCheck {
    ok: bool,
    reachable: bool,
    #[serde(rename = "caBundleVerifies")]
    verifies: Option<bool>,
    text: String,
}

/// Connects to a webhook URL (2 s) and verifies its certificate against the
/// configuration's caBundle, as the apiserver will. A hint: the apiserver
/// may see the network differently from this machine.
async fn check_tls(url: &str, ca: &[u8]) -> TlsCheck {
    let fail = |reachable, verifies, text: String| TlsCheck {
        ok: false,
        reachable,
        verifies,
        text,
    };
    let Ok(uri) = url.parse::<http::Uri>() else {
        return fail(false, None, format!("URL {url} does not parse"));
    };
    let Some(host) = uri
        .host()
        .map(|h| h.trim_start_matches('[').trim_end_matches(']').to_owned())
    else {
        return fail(false, None, format!("URL {url} has no host"));
    };
    let port = uri.port_u16().unwrap_or(443);
    let timeout = std::time::Duration::from_secs(2);
    let tcp = match tokio::time::timeout(
        timeout,
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await
    {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(e)) => return fail(false, None, format!("NOT REACHABLE from here: {e}")),
        Err(_) => return fail(false, None, "NOT REACHABLE from here: timed out".into()),
    };
    let mut roots = rustls::RootCertStore::empty();
    use rustls_pki_types::pem::PemObject;
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca).flatten() {
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return fail(
            true,
            Some(false),
            "caBundle holds no usable certificate".into(),
        );
    }
    let config = match rustls::ClientConfig::builder_with_provider(crate::server::tls::provider())
        .with_safe_default_protocol_versions()
    {
        Ok(b) => b.with_root_certificates(roots).with_no_client_auth(),
        Err(e) => return fail(true, None, format!("TLS setup: {e}")),
    };
    let Ok(name) = rustls_pki_types::ServerName::try_from(host.clone()) else {
        return fail(true, None, format!("{host} is not a TLS server name"));
    };
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    match tokio::time::timeout(timeout, connector.connect(name, tcp)).await {
        Ok(Ok(_)) => TlsCheck {
            ok: true,
            reachable: true,
            verifies: Some(true),
            text: "reachable from here, caBundle verifies its certificate".into(),
        },
        Ok(Err(e)) => fail(
            true,
            Some(false),
            format!("caBundle does NOT verify its certificate: {e}"),
        ),
        Err(_) => fail(true, None, "TLS handshake timed out".into()),
    }
}

/// `GET` of an `http://` URL, 2 s, without TLS (driftguard's probe port).
async fn fetch_url(url: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!("{url}: only http:// is supported (the probe port)"));
    }
    let host = uri.host().ok_or_else(|| format!("{url} has no host"))?;
    let port = uri.port_u16().unwrap_or(80);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let fetch = async {
        let mut tcp = tokio::net::TcpStream::connect((host.trim_matches(['[', ']']), port))
            .await
            .map_err(|e| e.to_string())?;
        let request =
            format!("GET {path} HTTP/1.0\r\nHost: {host}:{port}\r\nAccept: text/plain\r\n\r\n");
        tcp.write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut reply = Vec::new();
        tcp.read_to_end(&mut reply)
            .await
            .map_err(|e| e.to_string())?;
        let reply = String::from_utf8_lossy(&reply).into_owned();
        let (head, body) = reply
            .split_once("\r\n\r\n")
            .ok_or("the reply is not HTTP")?;
        let status = head.lines().next().unwrap_or_default();
        if status.split_whitespace().nth(1) != Some("200") {
            return Err(status.to_owned());
        }
        Ok(body.to_owned())
    };
    match tokio::time::timeout(std::time::Duration::from_secs(2), fetch).await {
        Ok(r) => r.map_err(|e: String| format!("{url}: {e}")),
        Err(_) => Err(format!("{url}: timed out")),
    }
}

/// The sum of the samples of `name` whose labels contain `label` (all when empty).
fn sample_sum(text: &str, name: &str, label: &str) -> u64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, labels) = series.split_once('{').unwrap_or((series, ""));
            (metric == name && labels.contains(label)).then(|| value.parse::<f64>().ok())?
        })
        .sum::<f64>() as u64
}

/// The labels of `driftguard_policy_info ... 1`: the policy the server has
/// in force (digest, source file, mode); `None` from a server without it.
fn policy_in_force(text: &str) -> Option<PolicyInForce> {
    let labels = text.lines().find_map(|l| {
        let rest = l.strip_prefix("driftguard_policy_info{")?;
        let (labels, value) = rest.rsplit_once("} ")?;
        (value.trim() == "1").then_some(labels)
    })?;
    let label = |name: &str| {
        let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
        let end = labels[start..].find('"')?;
        Some(labels[start..start + end].to_owned())
    };
    Some(PolicyInForce {
        digest: label("digest"),
        source: label("source"),
        mode: label("mode"),
    })
}

/// The policy reload counters, decision timeouts and internal errors from
/// driftguard's OpenMetrics, or why they could not be read (not a failure).
fn metrics_report(from: &str, text: Result<String, String>) -> MetricsReport {
    let text = match text {
        Ok(text) => text,
        Err(why) => {
            return MetricsReport {
                from: Some(from.to_owned()),
                reachable: false,
                counts: None,
                text: format!("not reachable ({from}): {why}"),
            };
        }
    };
    let ok = sample_sum(
        &text,
        "driftguard_policy_reloads_total",
        "result=\"success\"",
    );
    let failed = sample_sum(
        &text,
        "driftguard_policy_reloads_total",
        "result=\"failure\"",
    );
    let timeouts = sample_sum(&text, "driftguard_decision_timeouts_total", "");
    let errors = sample_sum(&text, "driftguard_internal_errors_total", "");
    let unread: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("driftguard_sources_unread{source=\"")?;
            let (source, value) = rest.split_once("\"} ")?;
            (value.trim() == "1").then(|| source.to_owned())
        })
        .collect();
    let client_auth = text
        .lines()
        .find_map(|l| l.strip_prefix("driftguard_client_auth_required "))
        .map(|v| v.trim() == "1");
    let degraded = if unread.is_empty() {
        String::new()
    } else {
        format!("; DEGRADED, sources not listed: {}", unread.join(", "))
    };
    MetricsReport {
        from: Some(from.to_owned()),
        reachable: true,
        counts: Some(Counts {
            policy_in_force: policy_in_force(&text),
            policy_reloads: Reloads {
                success: ok,
                failure: failed,
            },
            decision_timeouts: timeouts,
            internal_errors: errors,
            sources_unread: unread,
            client_auth_required: client_auth,
        }),
        text: format!(
            "({from}) policy reloads {ok} ok, {failed} failed; decision timeouts {timeouts}; internal errors {errors}{degraded}"
        ),
    }
}

/// What the serving certificate the chart mounts says about a caBundle.
#[derive(Debug, serde::Serialize)]
struct ServingCheck {
    secret: String,
    /// `None`: not checked (the Secret could not be read), not a failure.
    #[serde(rename = "caBundleVerifies")]
    verifies: Option<bool>,
    text: String,
}

/// The chart mounts Secret `<fullname>-tls` (keys tls.crt, tls.key) and names
/// its Service `<fullname>`, both in the release namespace: reads that
/// Secret's tls.crt and verifies that it chains to `ca_bundle` for the
/// Service DNS name `NAME.NAMESPACE.svc`, as the apiserver will.
async fn check_serving_secret(
    api: &Api,
    ns: &str,
    name: &str,
    ca: &[u8],
) -> Result<ServingCheck, PluginError> {
    let secret = format!("{ns}/{name}-tls");
    let not_checked = |text: String| ServingCheck {
        secret: secret.clone(),
        verifies: None,
        text: format!("caBundle not checked: {text}"),
    };
    let got = api
        .namespaced::<Secret>(ns)
        .get(&format!("{name}-tls"))
        .await;
    let object = match answer(got, format_args!("get secret {secret}"))? {
        Ok(o) => o,
        Err(r) if r.code == 403 => {
            return Ok(not_checked(format!(
                "cannot read Secret {secret} (needs get on secrets in namespace {ns}): {}",
                r.message
            )));
        }
        Err(r) if r.code == 404 => {
            return Ok(not_checked(format!(
                "Secret {secret} (the chart's serving certificate) does not exist"
            )));
        }
        Err(r) => return Ok(not_checked(format!("Secret {secret}: {}", r.message))),
    };
    let Some(ByteString(leaf)) = object.data.and_then(|mut d| d.remove("tls.crt")) else {
        return Ok(not_checked(format!("Secret {secret} has no tls.crt")));
    };
    let dns = format!("{name}.{ns}.svc");
    Ok(match verify_chain(&leaf, ca, &dns) {
        Ok(()) => ServingCheck {
            secret: secret.clone(),
            verifies: Some(true),
            text: format!("caBundle verifies tls.crt of Secret {secret} for {dns}"),
        },
        Err(e) => ServingCheck {
            secret: secret.clone(),
            verifies: Some(false),
            text: format!("caBundle does NOT verify tls.crt of Secret {secret} for {dns}: {e}"),
        },
    })
}

/// Verifies PEM `leaf_pem` (end-entity first, then any intermediates) for
/// `dns` against the roots in PEM `ca_pem`, at the current time.
fn verify_chain(leaf_pem: &[u8], ca_pem: &[u8], dns: &str) -> Result<(), String> {
    use rustls::client::danger::ServerCertVerifier;
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem).flatten() {
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return Err("caBundle holds no usable certificate".into());
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(leaf_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("tls.crt: {e}"))?;
    let Some((end_entity, intermediates)) = chain.split_first() else {
        return Err("tls.crt holds no certificate".into());
    };
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        std::sync::Arc::new(roots),
        crate::server::tls::provider(),
    )
    .build()
    .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(dns.to_owned()).map_err(|e| format!("{dns}: {e}"))?;
    verifier
        .verify_server_cert(end_entity, intermediates, &name, &[], UnixTime::now())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn print_events(report: &Report) {
    let s = |text: &str| printable(text).into_owned();
    let o = |text: &Option<String>| s(text.as_deref().unwrap_or_default());
    match &report.recent_drift_blocked {
        Listing::NotReadable(why) => {
            println!("Recent DriftBlocked Events: not readable: {}", s(why))
        }
        Listing::Found(list) if list.is_empty() => println!("Recent DriftBlocked Events: none"),
        Listing::Found(list) => {
            println!("Recent DriftBlocked Events:");
            for e in list {
                println!("  {} {}: {}", o(&e.time), s(&e.object), o(&e.note));
            }
        }
    }
    match &report.active_break_glass {
        Listing::NotReadable(why) => println!("Active break-glass: not readable: {}", s(why)),
        Listing::Found(list) if list.is_empty() => println!("Active break-glass: none"),
        Listing::Found(list) => {
            println!("Active break-glass:");
            for e in list {
                let paused = match &e.paused {
                    Some(p) => format!(" (paused: {})", s(p)),
                    None => " (nothing paused: the GitOps tool may revert it)".to_owned(),
                };
                println!(
                    "  {} until {}: {}{paused}",
                    s(&e.object),
                    o(&e.expires),
                    o(&e.reason)
                );
            }
        }
    }
    if !report.expired_break_glass.is_empty() {
        println!("Break-glass that grants nothing, left on objects (the sweeper removes it):");
        for e in &report.expired_break_glass {
            let why = if e.state == "ended" {
                "ended, driftguard's pause marker left".to_owned()
            } else {
                o(&e.why)
            };
            println!("  {} {why}: {}", s(&e.object), o(&e.reason));
        }
    }
    let scan = &report.break_glass_scan;
    let names = scan.not_readable.as_deref().unwrap_or_default();
    if !names.is_empty() {
        let shown: Vec<String> = names.iter().take(5).map(|n| s(n)).collect();
        let more = if names.len() > 5 { ", ..." } else { "" };
        println!(
            "  ({} types not readable, not searched: {}{more})",
            names.len(),
            shown.join(", ")
        );
    }
    for f in scan.failed.as_deref().unwrap_or_default() {
        println!("  (not listed: {})", s(f));
    }
}

/// The 10 most recent driftguard Events with `reason` in every namespace, or
/// why they cannot be read (a string; not fatal).
async fn recent_events(api: &Api, reason: &str) -> Result<Listing<EventEntry>, PluginError> {
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

/// Every object in the cluster that carries driftguard's break-glass
/// annotations, found by listing each listable resource type (metadata only)
/// in every namespace, not through `BreakGlassUsed` Events (they expire long
/// before a break-glass may): `activeBreakGlass` (expiry in the future),
/// `expiredBreakGlass` (expired or unreadable expiry, annotations left) and
/// `breakGlassScan` (types listed, types not readable). When discovery itself
/// fails, `activeBreakGlass` is why (a string).
async fn break_glass_scan(
    api: &Api,
    policy: &crate::policy::Policy,
) -> Result<(Listing<BreakGlassEntry>, Vec<BreakGlassEntry>, Scan), PluginError> {
    use futures_util::stream::{self, StreamExt};
    let types = match api.listable().await {
        Ok(types) => types,
        Err(PluginError::Access(why)) => {
            return Ok((Listing::NotReadable(why), Vec::new(), Scan::default()));
        }
        Err(e) => return Err(e),
    };
    let lists: Vec<_> = stream::iter(types)
        .map(|r| async move {
            let list = api.list_metadata(&r).await;
            (r, list)
        })
        .buffer_unordered(4)
        .collect()
        .await;
    let now = jiff::Timestamp::now();
    let (mut active, mut expired, mut forbidden, mut failed) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut listed = 0;
    for (resource, list) in lists {
        let name = resource.qualified();
        let items = match list? {
            Ok(items) => items,
            Err(r) if r.code == 403 => {
                forbidden.push(name);
                continue;
            }
            Err(r) => {
                failed.push(format!("{name}: {}", r.message));
                continue;
            }
        };
        listed += 1;
        for item in &items {
            if let Some((state, entry)) = break_glass_entry(&resource, item, policy, now) {
                if state.grants() {
                    active.push(entry);
                } else {
                    expired.push(entry);
                }
            }
        }
    }
    let key = |e: &BreakGlassEntry| e.object.clone();
    active.sort_by_key(key);
    expired.sort_by_key(key);
    forbidden.sort();
    let scan = Scan {
        types_listed: listed,
        types_not_readable: Some(forbidden.len()),
        not_readable: Some(forbidden),
        failed: Some(failed),
    };
    Ok((Listing::Found(active), expired, scan))
}

/// One listed object's break-glass state and its entry, unless it has none.
pub(crate) fn break_glass_entry(
    resource: &Resource,
    meta: &ObjectMeta,
    policy: &crate::policy::Policy,
    now: jiff::Timestamp,
) -> Option<(breakglass_state::State, BreakGlassEntry)> {
    use crate::drift::breakglass_state::{EXPIRES, PAUSED, REASON};
    let object = json!({"kind": resource.kind, "metadata": meta});
    let state = breakglass_state::state(
        &crate::drift::inputs::Inputs::read(&object, policy),
        policy,
        now,
    );
    if state == breakglass_state::State::None {
        return None;
    }
    let name = meta.name.clone().unwrap_or_default();
    let ns = meta.namespace.clone().filter(|ns| !ns.is_empty());
    let shown_ns = ns.as_deref().map(|ns| format!("{ns}/")).unwrap_or_default();
    let annotation = |key: &str| meta.annotations.as_ref().and_then(|a| a.get(key)).cloned();
    let entry = BreakGlassEntry {
        object: format!("{} {shown_ns}{name}", resource.kind),
        api_version: resource.api_version(),
        kind: resource.kind.clone(),
        namespace: ns,
        name,
        reason: annotation(REASON),
        expires: annotation(EXPIRES),
        state: state.name(),
        why: state.why_not(),
        paused: annotation(PAUSED),
    };
    Some((state, entry))
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
            eprintln!(
                "warning: cannot read the endpoints of service {ns}/{name}: {}",
                crate::text::printable(&r.message)
            );
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::api::Resource;
    use serde_json::json;

    #[test]
    fn a_listed_objects_break_glass_is_active_expired_invalid_or_none() {
        let cm = Resource {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
            namespaced: true,
        };
        let now: jiff::Timestamp = "2030-01-01T12:00:00Z".parse().unwrap();
        let policy = crate::policy::Policy::embedded();
        let item = |expires: &str| {
            json!({"metadata": {"name": "settings", "namespace": "production",
                "annotations": {"driftguard.io/break-glass": "INC-1",
                                "driftguard.io/break-glass-expires": expires}}})
        };
        let meta = |v: serde_json::Value| -> ObjectMeta {
            serde_json::from_value(v["metadata"].clone()).unwrap()
        };
        let (state, e) =
            break_glass_entry(&cm, &meta(item("2030-01-01T15:59:00Z")), &policy, now).unwrap();
        assert_eq!(state.name(), "active");
        assert_eq!(e.object, "ConfigMap production/settings");
        assert_eq!(e.api_version, "v1");
        assert_eq!(e.reason.as_deref(), Some("INC-1"));
        assert_eq!(e.expires.as_deref(), Some("2030-01-01T15:59:00Z"));
        assert_eq!(e.paused, None);
        let v = serde_json::to_value(&e).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "apiVersion",
                "expires",
                "kind",
                "name",
                "namespace",
                "object",
                "paused",
                "reason",
                "state",
                "why"
            ]
        );
        let mut paused = item("2030-01-01T15:59:00Z");
        paused["metadata"]["annotations"]["driftguard.io/break-glass-paused"] =
            json!("kustomize.toolkit.fluxcd.io/reconcile");
        let (_, e) = break_glass_entry(&cm, &meta(paused), &policy, now).unwrap();
        assert_eq!(
            e.paused.as_deref(),
            Some("kustomize.toolkit.fluxcd.io/reconcile")
        );
        let (state, _) =
            break_glass_entry(&cm, &meta(item("2030-01-01T11:00:00Z")), &policy, now).unwrap();
        assert_eq!(state.name(), "expired");
        let (state, _) = break_glass_entry(&cm, &meta(item("tomorrow")), &policy, now).unwrap();
        assert_eq!(state.name(), "invalid");
        let plain = json!({"metadata": {"name": "x", "namespace": "production"}});
        assert!(break_glass_entry(&cm, &meta(plain), &policy, now).is_none());

        let ns = Resource {
            group: String::new(),
            version: "v1".into(),
            kind: "Namespace".into(),
            plural: "namespaces".into(),
            namespaced: false,
        };
        let item = json!({"metadata": {"name": "production",
            "annotations": {"driftguard.io/break-glass-expires": "2030-01-01T13:00:00Z"}}});
        let (_, e) = break_glass_entry(&ns, &meta(item), &policy, now).unwrap();
        assert_eq!(e.object, "Namespace production");
        assert_eq!(serde_json::to_value(&e).unwrap()["namespace"], json!(null));
        assert_eq!(ns.qualified(), "namespaces");
    }

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
            calls: "service driftguard/driftguard".into(),
            ready_endpoints: Some(2),
            tls_from_here: None,
            serving_certificate: Some(ServingCheck {
                secret: "driftguard/driftguard-tls".into(),
                verifies: Some(true),
                text: "ok".into(),
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
            trusted_identity_reach: crate::plugin::reach::ReachReport::not_checked(vec![
                "forbidden".into(),
            ]),
            who_may_post_reviews: posting::Posting {
                client_auth: Some(true),
                network_policy: None,
                open: false,
                text: "ok".into(),
            },
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
            ["caBundleVerifies", "secret", "text"]
        );
        assert_eq!(
            keys(&v["policy"]),
            ["breakGlassEnabled", "digest", "from", "mode"]
        );
        assert_eq!(v["recentDriftBlocked"], "forbidden");
        assert_eq!(v["activeBreakGlass"], json!([]));
        assert_eq!(v["breakGlassScan"], json!({"typesListed": 0}));
    }

    #[test]
    fn the_metrics_report_counts_reloads_timeouts_and_errors() {
        let text = "# TYPE driftguard_policy_reloads counter\n\
            driftguard_policy_reloads_total{result=\"success\"} 3\n\
            driftguard_policy_reloads_total{result=\"failure\"} 1\n\
            driftguard_decision_timeouts_total 2\n\
            driftguard_internal_errors_total 0\n\
            driftguard_sources_unread{source=\"Application\"} 1\n\
            driftguard_sources_unread{source=\"Kustomization\"} 0\n\
            driftguard_client_auth_required 0\n\
            driftguard_policy_info{digest=\"sha256:ab\",source=\"/etc/driftguard/policy.yaml\",mode=\"warn\"} 1\n# EOF\n";
        let r = serde_json::to_value(metrics_report("here", Ok(text.into()))).unwrap();
        assert_eq!(
            r["policyInForce"],
            json!({"digest": "sha256:ab", "source": "/etc/driftguard/policy.yaml", "mode": "warn"})
        );
        assert_eq!(r["policyReloads"]["success"], 3);
        assert_eq!(r["policyReloads"]["failure"], 1);
        assert_eq!(r["decisionTimeouts"], 2);
        assert_eq!(r["internalErrors"], 0);
        assert_eq!(r["sourcesUnread"], json!(["Application"]));
        assert_eq!(r["clientAuthRequired"], false);
        let line = r["text"].as_str().unwrap();
        assert!(
            line.ends_with("DEGRADED, sources not listed: Application"),
            "{line}"
        );
        let r =
            serde_json::to_value(metrics_report("here", Err("connection refused".into()))).unwrap();
        assert_eq!(r["reachable"], false);
        assert!(r.get("policyReloads").is_none(), "{r}");
        assert!(r["text"].as_str().unwrap().contains("not reachable"));
    }
    use crate::certs::Authority;

    #[test]
    fn the_serving_certificate_chains_to_the_ca_bundle_or_not() {
        let dns = "driftguard.driftguard.svc";
        let ca = Authority::new("ca").unwrap();
        let (leaf, _) = ca.leaf("driftguard", &[dns.to_owned()], &[]).unwrap();
        assert_eq!(
            verify_chain(leaf.as_bytes(), ca.cert_pem.as_bytes(), dns),
            Ok(())
        );

        let other = Authority::new("another ca").unwrap();
        let (foreign, _) = other.leaf("driftguard", &[dns.to_owned()], &[]).unwrap();
        let e = verify_chain(foreign.as_bytes(), ca.cert_pem.as_bytes(), dns).unwrap_err();
        assert!(e.contains("UnknownIssuer"), "{e}");

        let e = verify_chain(leaf.as_bytes(), ca.cert_pem.as_bytes(), "other.ns.svc").unwrap_err();
        assert!(e.contains("not valid for name"), "{e}");
        assert!(verify_chain(leaf.as_bytes(), b"", dns).is_err());
    }
}
