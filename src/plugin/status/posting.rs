//! Who may post reviews to driftguard's webhook port: only the apiserver
//! when the server requires a client certificate (`--client-ca`, the chart's
//! `clientAuth`), only the peers of a NetworkPolicy (the chart's
//! `networkPolicy`); otherwise any pod that reaches the Service can post
//! reviews of its choosing, and `status` says so with the values that close it.

use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde::Serialize;

use crate::plugin::PluginError;
use crate::plugin::api::{Api, answer};

/// The chart's values that close the port, as NOTES.txt says them too.
const CLOSE_IT: &str = "set the chart's networkPolicy.webhookFrom to the apiserver's addresses \
    (the NetworkPolicy is then rendered), or clientAuth.enabled with clientAuth.ca where the \
    apiserver presents a client certificate (docs/install.md, \"Only the apiserver may ask\")";

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Posting {
    /// Whether the server requires a client certificate; null when its
    /// metrics were not read (or it is older than the metric).
    pub client_auth: Option<bool>,
    /// The chart's NetworkPolicy, `NAMESPACE/NAME`, when it exists.
    pub network_policy: Option<String>,
    /// Any pod that reaches the webhook port may be able to post reviews.
    pub open: bool,
    pub text: String,
}

/// Reads the chart's NetworkPolicy (named like the Service) when client
/// authentication is not known to be on.
pub(super) async fn check(
    api: &Api,
    service: Option<(&str, &str)>,
    client_auth: Option<bool>,
) -> Result<Posting, PluginError> {
    if client_auth == Some(true) {
        return Ok(judge(client_auth, Ok(String::new())));
    }
    let policy = match service {
        None => Err("the webhooks call a URL, so no NetworkPolicy was looked for".to_owned()),
        Some((ns, name)) => {
            let got = api.namespaced::<NetworkPolicy>(ns).get(name).await;
            match answer(got, format_args!("get networkpolicy {ns}/{name}"))? {
                Ok(_) => Ok(format!("{ns}/{name}")),
                Err(r) if r.code == 404 => Err(format!("there is no NetworkPolicy {ns}/{name}")),
                Err(r) => Err(format!(
                    "NetworkPolicy {ns}/{name} not readable: {}",
                    r.message
                )),
            }
        }
    };
    Ok(judge(client_auth, policy))
}

/// The answer from what was read: client authentication, and the
/// NetworkPolicy's name or why there is none.
fn judge(client_auth: Option<bool>, policy: Result<String, String>) -> Posting {
    let auth = match client_auth {
        Some(true) => {
            return Posting {
                client_auth,
                network_policy: None,
                open: false,
                text: "only clients with a certificate from --client-ca (the apiserver)".into(),
            };
        }
        Some(false) => "client authentication is off",
        None => "client authentication is unknown (metrics not read)",
    };
    match policy {
        Ok(name) => Posting {
            client_auth,
            text: format!(
                "{auth}; NetworkPolicy {name} admits only its peers (any pod among them can post reviews)"
            ),
            network_policy: Some(name),
            open: false,
        },
        Err(why) => Posting {
            client_auth,
            network_policy: None,
            open: true,
            text: format!(
                "ANY POD that reaches the webhook port can post reviews: {auth} and {why}. To close it, {CLOSE_IT}"
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_port_is_said_plainly_with_the_values_that_close_it() {
        let open = judge(Some(false), Err("there is no NetworkPolicy dg/dg".into()));
        assert!(open.open);
        assert!(open.text.starts_with("ANY POD"), "{}", open.text);
        assert!(
            open.text.contains("networkPolicy.webhookFrom"),
            "{}",
            open.text
        );
        assert!(open.text.contains("clientAuth.enabled"), "{}", open.text);

        let fenced = judge(Some(false), Ok("dg/dg".into()));
        assert!(!fenced.open, "{}", fenced.text);
        assert_eq!(fenced.network_policy.as_deref(), Some("dg/dg"));
        assert!(!judge(Some(true), Err(String::new())).open);
        assert!(judge(None, Err("x".into())).open, "unknown is not closed");
    }
}
