//! `kubectl driftguard status`: both webhook configurations, their caBundle
//! (and how long its CAs and the serving certificate stay valid),
//! failurePolicy and where they call, whether a Service's endpoints are
//! ready, and the policy in force. `report` and its siblings read the
//! cluster, `render` prints.

mod expiry;
mod metrics;
mod posting;
mod render;
mod report;
mod scan;
mod tls;

use std::process::ExitCode;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::ListParams;

use super::api::{Api, answer};
use super::out::Out;
use super::{Output, PluginError, PolicySource, print_structured};
use report::{PolicyReport, Report};
#[cfg(test)]
pub(crate) use scan::break_glass_entry;

/// A list, or why it could not be read (a string in JSON): what `report` and
/// `scan` both return, so it lives here.
#[derive(Debug, serde::Serialize)]
#[serde(untagged)]
enum Listing<T> {
    NotReadable(String),
    Found(Vec<T>),
}

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

pub async fn run(api: &Api, source: &PolicySource, args: Args) -> Result<ExitCode, PluginError> {
    let name = match &args.name {
        Some(name) => name.clone(),
        None => default_name(api).await?,
    };
    let (healthy, configurations, service_target) = report::configurations(api, &name).await?;
    let metrics = metrics::read(api, args.metrics_url.as_deref(), service_target.as_ref()).await;
    let service = service_target
        .as_ref()
        .map(|(n, s)| (n.as_str(), s.as_str()));
    let client_auth = metrics.counts.as_ref().and_then(|c| c.client_auth_required);
    let who_may_post_reviews = posting::check(api, service, client_auth).await?;
    let loaded = source.load(api).await?;
    let blocked = report::recent_events(api, "DriftBlocked").await?;
    let (break_glass, expired_break_glass, scan) =
        scan::break_glass_scan(api, &loaded.policy).await?;
    // A warning, not a failure: the exit code stays what the webhooks decide.
    let reach = super::trusted_reach::report(api, &loaded.policy, &args.argocd_namespace).await?;
    let registration = report::registration(api, &name, &loaded.policy).await?;
    let unsound = matches!(&registration, Listing::Found(r) if r.iter().any(|r| r.unsound));
    let healthy = healthy && !unsound;
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
        registration,
    };
    let out = &mut Out::stdout();
    if args.output != Output::Text {
        print_structured(out, &report, args.output)?;
    } else {
        render::print_text(out, &report);
    }
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
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
