//! `kubectl driftguard report`: the audit records in the driftguard pods'
//! logs over a window, summarized as `driftguard report` does: what enforce
//! would have denied, by namespace, object, user and drifted path.

use std::process::ExitCode;
use std::time::Duration;

use futures_util::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, LogParams};

use super::PluginError;
use super::api::Api;
use super::out::{Out, outln};
use crate::audit::report::Report;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The window: log lines of the last DURATION (kubectl logs --since).
    #[arg(long, default_value = "24h", value_parser = crate::args::duration)]
    since: Duration,
    /// Rows per table.
    #[arg(long, default_value_t = 10)]
    top: usize,
}

pub async fn run(api: &Api, namespace: &str, args: Args) -> Result<ExitCode, PluginError> {
    let (report, names) = collect(api, namespace, args.since).await?;
    let mut out = Out::stdout();
    out.document(report.render(args.top).trim_end());
    let window = jiff::SignedDuration::try_from(args.since)
        .map_or_else(|_| "?".into(), |d| format!("{d:#}"));
    outln!(
        out,
        "\n(from the logs of pods {} over the last {window}; a restarted container's earlier \
         log is not read: for longer windows, keep the records in your log store and pipe them \
         to `driftguard report -`)",
        names.join(", ")
    );
    Ok(ExitCode::SUCCESS)
}

/// Reads every driftguard pod's log (each replica logs what it decided) a
/// line at a time, so a week of logs is never held.
async fn collect(
    api: &Api,
    namespace: &str,
    since: Duration,
) -> Result<(Report, Vec<String>), PluginError> {
    let pods = api.namespaced::<Pod>(namespace);
    let listed = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=driftguard"))
        .await
        .map_err(|e| api_error(e, &format!("list pods in {namespace}")))?;
    let names: Vec<String> = listed
        .items
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    if names.is_empty() {
        return Err(PluginError::Usage(format!(
            "no pod labelled app.kubernetes.io/name=driftguard in namespace {namespace} \
             (--driftguard-namespace)"
        )));
    }
    let params = LogParams {
        container: Some("driftguard".into()),
        since_seconds: Some(i64::try_from(since.as_secs()).unwrap_or(i64::MAX).max(1)),
        ..LogParams::default()
    };
    let mut report = Report::default();
    for name in &names {
        let stream = pods
            .log_stream(name, &params)
            .await
            .map_err(|e| api_error(e, &format!("read the log of pod {namespace}/{name}")))?;
        let mut lines = stream.lines();
        while let Some(line) = lines
            .try_next()
            .await
            .map_err(|e| PluginError::Access(format!("reading pod {namespace}/{name}: {e}")))?
        {
            report.add_line(&line);
        }
    }
    Ok((report, names))
}

fn api_error(e: kube::Error, doing: &str) -> PluginError {
    match e {
        kube::Error::Api(s) => PluginError::Access(format!("cannot {doing}: {}", s.message)),
        e => PluginError::Access(format!("cannot {doing}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response};
    use kube::client::Body;
    use serde_json::json;

    fn record(user: &str, verdict: &str) -> String {
        json!({"verdict": verdict, "reason": "drift", "user": user, "group": "apps",
            "kind": "Deployment", "namespace": "shop", "name": "web",
            "driftedPaths": ["/spec/replicas"]})
        .to_string()
    }

    /// Two replicas' logs, each read with the window and container asked.
    #[tokio::test]
    async fn every_replicas_log_is_read_over_the_window() {
        let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = asked.clone();
        let service = tower::service_fn(move |request: Request<Body>| {
            let uri = request.uri().to_string();
            seen.lock().unwrap().push(uri.clone());
            let body = if uri.contains("/log?") {
                let user = if uri.contains("/pods/a/") {
                    "alice"
                } else {
                    "bob"
                };
                format!(
                    "{}\nstarting\n{}\n",
                    record(user, "audit"),
                    record(user, "allow")
                )
            } else {
                json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [
                    {"metadata": {"name": "a", "namespace": "driftguard"}},
                    {"metadata": {"name": "b", "namespace": "driftguard"}}]})
                .to_string()
            };
            async move {
                Ok::<_, std::convert::Infallible>(Response::new(Body::from(body.into_bytes())))
            }
        });
        let api = Api::with_client(kube::Client::new(service, "driftguard"), "driftguard");
        let (report, names) = collect(&api, "driftguard", Duration::from_secs(7200))
            .await
            .unwrap();
        assert_eq!(names, ["a", "b"]);
        let text = report.render(10);
        assert!(text.starts_with("4 decisions"), "{text}");
        assert!(
            text.contains("2 writes allowed only by audit or warn mode"),
            "{text}"
        );
        assert!(text.contains("       1  alice\n       1  bob\n"), "{text}");
        let asked = asked.lock().unwrap();
        assert!(
            asked[0].contains("labelSelector=app.kubernetes.io%2Fname%3Ddriftguard"),
            "{asked:?}"
        );
        for pod in ["a", "b"] {
            assert!(
                asked.iter().any(|u| u
                    .starts_with(&format!("/api/v1/namespaces/driftguard/pods/{pod}/log?"))
                    && u.contains("container=driftguard")
                    && u.contains("sinceSeconds=7200")),
                "{asked:?}"
            );
        }
    }
}
