//! `driftguard probe`: asks a running webhook, as the apiserver would, to
//! judge a harmless write, verifying its certificate against a CA: what
//! `helm test` runs, and a check from anywhere that the Service, the
//! certificate and the server answer together.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::UserInfo;
use kube::core::admission::AdmissionReview;
use kube::core::{DynamicObject, TypeMeta};
use serde_json::json;

use super::Failure;
use super::check::review_of;

#[derive(Debug, clap::Args)]
pub(super) struct ProbeArgs {
    /// The webhook's base URL, as the apiserver calls it, e.g.
    /// https://driftguard.driftguard.svc:443 (/validate is appended).
    #[arg(long)]
    url: String,
    /// PEM of the CA the webhook's certificate must chain to (the webhooks' caBundle).
    #[arg(long)]
    ca_file: PathBuf,
    /// How long to wait for the answer.
    #[arg(long, default_value = "10s", value_parser = crate::args::duration)]
    timeout: Duration,
}

pub(super) fn probe(args: ProbeArgs) -> Result<ExitCode, Failure> {
    crate::server::tls::install_process_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure(format!("cannot start the runtime: {e}")))?;
    let started = Instant::now();
    let uid = runtime.block_on(ask(&args))?;
    println!(
        "ok: {} judged a write in {} ms (review {uid}), its certificate verified by {}",
        args.url,
        started.elapsed().as_millis(),
        args.ca_file.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// A CREATE of an unmanaged ConfigMap: every mode and policy allows it, so
/// anything but an allowing answer to this very review is a fault.
async fn ask(args: &ProbeArgs) -> Result<String, Failure> {
    let url: http::Uri = args
        .url
        .parse()
        .map_err(|e| Failure(format!("--url {}: {e}", args.url)))?;
    if url.scheme_str() != Some("https") {
        return Err(Failure(format!(
            "--url {}: the apiserver calls webhooks over https only",
            args.url
        )));
    }
    let mut config = kube::Config::new(url);
    config.root_cert_file = Some(args.ca_file.clone());
    config.connect_timeout = Some(args.timeout);
    config.read_timeout = Some(args.timeout);
    let client = kube::Client::try_from(config)
        .map_err(|e| Failure(format!("{}: {e}", args.ca_file.display())))?;
    let types = TypeMeta {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
    };
    let object: DynamicObject = serde_json::from_value(json!({"apiVersion": "v1",
        "kind": "ConfigMap", "metadata": {"name": "driftguard-probe", "namespace": "default"}}))
    .map_err(|e| Failure(e.to_string()))?;
    let who = UserInfo {
        username: Some("driftguard-probe".into()),
        ..UserInfo::default()
    };
    let mut review = review_of(&types, None, Some(object), who, true).map_err(Failure)?;
    let uid = format!("driftguard-probe-{}", std::process::id());
    if let Some(request) = review.request.as_mut() {
        request.uid.clone_from(&uid);
    }
    let body = serde_json::to_vec(&review).map_err(|e| Failure(e.to_string()))?;
    let request = http::Request::post("/validate")
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body)
        .map_err(|e| Failure(e.to_string()))?;
    let text = tokio::time::timeout(args.timeout, client.request_text(request))
        .await
        .map_err(|_| Failure(format!("{}: no answer in {:?}", args.url, args.timeout)))?
        .map_err(|e| Failure(format!("{}: {e}", args.url)))?;
    let answer: AdmissionReview<DynamicObject> = serde_json::from_str(&text)
        .map_err(|e| Failure(format!("{}: not an AdmissionReview: {e}", args.url)))?;
    match answer.response {
        Some(r) if r.uid == uid && r.allowed => Ok(uid),
        Some(r) if r.uid != uid => Err(Failure(format!(
            "{}: answered review {:?}, not {uid:?}",
            args.url, r.uid
        ))),
        Some(r) => Err(Failure(format!(
            "{}: refused a harmless write: {}",
            args.url, r.result.message
        ))),
        None => Err(Failure(format!(
            "{}: an answer without a response",
            args.url
        ))),
    }
}
