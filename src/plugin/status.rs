//! `kubectl driftguard status`: both webhook configurations, their caBundle,
//! failurePolicy and where they call, whether a Service's endpoints are
//! ready, and the policy in force.

use std::process::ExitCode;

use serde_json::{Value, json};

use super::api::Api;
use super::{Output, PluginError, PolicySource, print_structured};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Name of both webhook configurations (`driftguard register --name`; the
    /// chart's release full name).
    #[arg(long, default_value = "driftguard")]
    name: String,
    /// Output format: text, json or yaml.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

const KINDS: [(&str, &str); 2] = [
    (
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
    ),
    (
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
    ),
];

pub async fn run(api: &Api, source: &PolicySource, args: Args) -> Result<ExitCode, PluginError> {
    let mut healthy = true;
    let mut configurations = Vec::new();
    for (kind, plural) in KINDS {
        let path = format!(
            "/apis/admissionregistration.k8s.io/v1/{plural}/{}",
            args.name
        );
        let config = match api.try_get(&path).await? {
            Ok(c) => c,
            Err(r) if r.code == 404 => {
                healthy = false;
                configurations.push(json!({"kind": kind, "name": args.name, "present": false}));
                continue;
            }
            Err(r) => return Err(PluginError::from_refusal(r)),
        };
        let mut hooks = Vec::new();
        for hook in config["webhooks"].as_array().into_iter().flatten() {
            let cc = &hook["clientConfig"];
            let ca = cc["caBundle"].as_str().is_some_and(|s| !s.is_empty());
            healthy &= ca;
            let (target, endpoints, reachable) =
                match (cc["url"].as_str(), cc["service"].as_object()) {
                    (Some(url), _) => {
                        let reachable = reachable(url).await;
                        healthy &= reachable != Some(false);
                        (url.to_owned(), Value::Null, json!(reachable))
                    }
                    (None, Some(svc)) => {
                        let ns = svc
                            .get("namespace")
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        let name = svc.get("name").and_then(Value::as_str).unwrap_or_default();
                        let ready = ready_endpoints(api, ns, name).await?;
                        if ready == Some(0) {
                            healthy = false;
                        }
                        (format!("service {ns}/{name}"), json!(ready), Value::Null)
                    }
                    _ => (String::new(), Value::Null, Value::Null),
                };
            hooks.push(json!({
                "name": hook["name"],
                "failurePolicy": hook["failurePolicy"],
                "caBundle": ca,
                "calls": target,
                "readyEndpoints": endpoints,
                "reachableFromHere": reachable,
            }));
        }
        configurations
            .push(json!({"kind": kind, "name": args.name, "present": true, "webhooks": hooks}));
    }
    let loaded = source.load(api).await?;
    let report = json!({
        "healthy": healthy,
        "configurations": configurations,
        "policy": {"from": loaded.origin, "mode": loaded.policy.mode.as_str(),
                   "breakGlassEnabled": !loaded.policy.break_glass.allowed.is_empty()},
    });
    if args.output != Output::Text {
        print_structured(&report, args.output)?;
    } else {
        for c in &configurations {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            if c["present"] != true {
                println!("{} {}: MISSING", s(&c["kind"]), s(&c["name"]));
                continue;
            }
            println!("{} {}: present", s(&c["kind"]), s(&c["name"]));
            for h in c["webhooks"].as_array().into_iter().flatten() {
                let ready = match (
                    h["readyEndpoints"].as_u64(),
                    h["reachableFromHere"].as_bool(),
                ) {
                    (Some(n), _) => format!(", {n} ready endpoint(s)"),
                    (None, Some(true)) => ", reachable from here".to_owned(),
                    (None, Some(false)) => ", NOT REACHABLE from here".to_owned(),
                    (None, None) => String::new(),
                };
                println!(
                    "  {}: failurePolicy {}, caBundle {}, calls {}{ready}",
                    s(&h["name"]),
                    s(&h["failurePolicy"]),
                    if h["caBundle"] == true {
                        "present"
                    } else {
                        "MISSING"
                    },
                    s(&h["calls"]),
                );
            }
        }
        println!(
            "Policy: {} (mode {}, break-glass {})",
            loaded.origin,
            loaded.policy.mode.as_str(),
            if loaded.policy.break_glass.allowed.is_empty() {
                "disabled"
            } else {
                "enabled"
            }
        );
        println!(
            "{}",
            if healthy {
                "status: ok"
            } else {
                "status: NOT OK"
            }
        );
    }
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Whether a TCP connection to a webhook URL's host and port opens within
/// 2 s from this machine; `None` when the URL cannot be parsed. (The
/// apiserver may see the network differently: this is a hint.)
async fn reachable(url: &str) -> Option<bool> {
    let uri: http::Uri = url.parse().ok()?;
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(443);
    let connect = tokio::net::TcpStream::connect((host, port));
    Some(matches!(
        tokio::time::timeout(std::time::Duration::from_secs(2), connect).await,
        Ok(Ok(_))
    ))
}

/// Ready endpoints of a Service, from its EndpointSlices; `None` when they
/// cannot be read (reported, not fatal).
async fn ready_endpoints(api: &Api, ns: &str, name: &str) -> Result<Option<u64>, PluginError> {
    let path = format!(
        "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3D{name}"
    );
    Ok(match api.try_get(&path).await? {
        Ok(list) => Some(
            list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|s| s["endpoints"].as_array().into_iter().flatten())
                .filter(|e| e["conditions"]["ready"] != false)
                .count() as u64,
        ),
        Err(r) => {
            eprintln!(
                "warning: cannot read the endpoints of service {ns}/{name}: {}",
                r.message
            );
            None
        }
    })
}
