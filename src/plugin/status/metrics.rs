//! driftguard's own OpenMetrics, read through the apiserver's service proxy
//! or from `--metrics-url`: reloads, timeouts, errors and the policy in force.

use serde::Serialize;

use crate::plugin::api::Api;

/// How long `status` waits for `/metrics` through the apiserver's service proxy.
const PROXY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// driftguard's own metrics, or why they could not be read.
#[derive(Debug, Serialize)]
pub(super) struct MetricsReport {
    /// Where they were read (null: not tried).
    pub(super) from: Option<String>,
    pub(super) reachable: bool,
    #[serde(flatten)]
    pub(super) counts: Option<Counts>,
    /// One line for people.
    pub(super) text: String,
}

/// What a reachable `/metrics` says.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Counts {
    pub(super) policy_in_force: Option<PolicyInForce>,
    pub(super) policy_reloads: Reloads,
    pub(super) decision_timeouts: u64,
    pub(super) internal_errors: u64,
    /// Watched sources never listed (`driftguard_sources_unread`): the
    /// server is ready, degraded, judging by the strictest reading.
    pub(super) sources_unread: Vec<String>,
    /// `driftguard_client_auth_required`; null from an older server.
    pub(super) client_auth_required: Option<bool>,
}

#[derive(Debug, Serialize)]
pub(super) struct Reloads {
    pub(super) success: u64,
    pub(super) failure: u64,
}

/// The labels of `driftguard_policy_info`: the policy the server has in force.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub(super) struct PolicyInForce {
    pub(super) digest: Option<String>,
    pub(super) source: Option<String>,
    pub(super) mode: Option<String>,
}

/// The metrics read from `url`, else through the proxy to `service`
/// (namespace, name); never an error: why they were not read is the report.
pub(super) async fn read(
    api: &Api,
    url: Option<&str>,
    service: Option<&(String, String)>,
) -> MetricsReport {
    match (url, service) {
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
pub(super) fn metrics_report(from: &str, text: Result<String, String>) -> MetricsReport {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
