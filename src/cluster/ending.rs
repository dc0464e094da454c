//! Ending a break-glass on one object, the one way both the expiry sweeper
//! and `kubectl driftguard break-glass --end` do it: the Argo CD
//! Application's pause, if the object's marker records one, is lifted first,
//! then the ending write ([`pause::end_patch`]) removes what arming added,
//! with the object's resourceVersion as precondition. The marker is the
//! record of which Application to resume, so it goes last: a lift that
//! fails leaves the object as it was, to be ended again. The caller reads
//! the object; what it does with the outcome (log and retry at the next
//! sweep, or report to the user) is its own.

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::client::Body;
use serde_json::Value;

use crate::pause::{self, AppChange, AppState, Plan, application_resource};
use crate::policy::Policy;

/// Conflicting writes to one Application before giving up: whoever else
/// writes it (another break-glass, Argo CD itself) settles within a few
/// fresh reads. Shared by arming, which pauses the same Application.
pub const CONFLICT_RETRIES: usize = 5;

/// What ending did.
#[derive(Debug)]
pub enum Ending {
    /// The break-glass is off the object.
    Ended {
        application: Lift,
        /// The apiserver's `Warning:` headers on the ending write.
        warnings: Vec<String>,
    },
    /// The object changed since it was read (409), or is gone (404): read
    /// it again. The Application's pause may already be lifted.
    Changed,
    /// An admission webhook refused the ending write: its message, whole.
    Refused {
        code: u16,
        message: String,
        warnings: Vec<String>,
    },
    /// The Application's pause could not be lifted: the object is untouched.
    Application {
        application: String,
        error: ApplicationError,
    },
    /// The ending write failed otherwise: the apiserver's code and message
    /// (RBAC, validation), or no code when it could not be asked.
    Failed { code: Option<u16>, message: String },
}

/// What happened to the Argo CD Application on the way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lift {
    /// The marker records no Application pause.
    NotPaused,
    /// The marker records one, but the object names no Application any more.
    Unnamed,
    /// The Application `namespace/name` does not exist: nothing to lift.
    Gone(String),
    /// The object's entry is out of Application `namespace/name`'s pause;
    /// where the Application stands now.
    Lifted(String, AppState),
}

/// Why an Application's pause could not be lifted.
#[derive(Debug, thiserror::Error)]
pub enum ApplicationError {
    /// The apiserver refused the read or the write.
    #[error("cannot {verb} it: {message}")]
    Refused {
        verb: &'static str,
        code: u16,
        message: String,
    },
    /// Every try met a newer version.
    #[error("it kept changing ({CONFLICT_RETRIES} conflicting writes)")]
    KeptChanging,
    /// The apiserver could not be asked.
    #[error("{0}")]
    Unreachable(String),
}

/// Ends the break-glass on `object` (as read, with its `kind` and
/// `resourceVersion`), of type `ar`: lifts the Application's pause the
/// marker records, through `argocd` (the cluster holding the Applications:
/// this one, or a hub), then sends the ending write through `client`.
pub async fn end_break_glass(
    client: &kube::Client,
    argocd: &kube::Client,
    ar: &ApiResource,
    object: &Value,
    policy: &Policy,
    argocd_namespace: &str,
) -> Ending {
    let meta = &object["metadata"];
    let annotations = &meta["annotations"];
    let mut application = Lift::NotPaused;
    if pause::paused_application(annotations) {
        application = match pause::plan(object, &ar.group, policy, argocd_namespace) {
            Plan::ArgoCd {
                namespace,
                name,
                entry,
            } => {
                let shown = format!("{namespace}/{name}");
                match lift(argocd, &namespace, &name, &entry).await {
                    Ok(Some(state)) => Lift::Lifted(shown, state),
                    Ok(None) => Lift::Gone(shown),
                    Err(error) => {
                        return Ending::Application {
                            application: shown,
                            error,
                        };
                    }
                }
            }
            _ => Lift::Unnamed,
        };
    }
    let rv = meta["resourceVersion"].as_str().unwrap_or_default();
    let body = pause::end_patch(annotations, rv);
    let (status, warnings, message) = match patch_with_warnings(client, ar, meta, &body).await {
        Ok(reply) => reply,
        Err(message) => {
            return Ending::Failed {
                code: None,
                message,
            };
        }
    };
    match status {
        200..=299 => Ending::Ended {
            application,
            warnings,
        },
        404 | 409 => Ending::Changed,
        code if message.contains("admission webhook") => Ending::Refused {
            code,
            message,
            warnings,
        },
        code => Ending::Failed {
            code: Some(code),
            message,
        },
    }
}

/// Takes `entry` out of Application `namespace/name`'s pause, with the
/// Application's resourceVersion as precondition; `None`: no such
/// Application, nothing to lift.
pub async fn lift(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    entry: &str,
) -> Result<Option<AppState>, ApplicationError> {
    let api =
        Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &application_resource());
    let refused = |verb, e: kube::Error| match e {
        kube::Error::Api(s) => ApplicationError::Refused {
            verb,
            code: s.code,
            message: s.message,
        },
        e => ApplicationError::Unreachable(e.to_string()),
    };
    for _ in 0..CONFLICT_RETRIES {
        let app = match api.get(name).await {
            Ok(app) => serde_json::to_value(app).unwrap_or_default(),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(None),
            Err(e) => return Err(refused("get", e)),
        };
        let (patch, state) = pause::application_update(&app, AppChange::Resume(entry));
        let Some(patch) = patch else {
            return Ok(Some(state));
        };
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(Some(state)),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(refused("patch", e)),
        }
    }
    Err(ApplicationError::KeptChanging)
}

/// A merge patch of the object as a raw request, because kube's typed
/// `Api::patch` drops the `Warning:` headers driftguard answers with: the
/// status, the warnings, and the apiserver's message when refused.
async fn patch_with_warnings(
    client: &kube::Client,
    ar: &ApiResource,
    meta: &Value,
    body: &Value,
) -> Result<(u16, Vec<String>, String), String> {
    let name = meta["name"].as_str().unwrap_or_default();
    let api = match meta["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => Api::<DynamicObject>::namespaced_with(client.clone(), ns, ar),
        _ => Api::<DynamicObject>::all_with(client.clone(), ar),
    };
    let request = kube::core::Request::new(api.resource_url())
        .patch(name, &PatchParams::default(), &Patch::Merge(body))
        .map_err(|e| format!("PATCH {name}: {e}"))?;
    let response = client
        .send(request.map(Body::from))
        .await
        .map_err(|e| format!("PATCH {name}: {e}"))?;
    let status = response.status().as_u16();
    let warnings = warnings(response.headers());
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .map_err(|e| format!("PATCH {name}: reading the reply: {e}"))?
        .to_bytes();
    let message = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(&bytes).trim().to_owned());
    Ok((status, warnings, message))
}

/// The texts of a reply's `Warning:` headers.
pub fn warnings(headers: &http::HeaderMap) -> Vec<String> {
    headers
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(warning_text)
        .collect()
}

/// `299 - "text"` → `text`: the text of one `Warning:` header.
pub fn warning_text(header: &str) -> String {
    let rest = header
        .split_once(' ')
        .and_then(|(_, r)| r.split_once(' '))
        .map_or(header, |(_, r)| r);
    let rest = rest.trim();
    let unquoted = rest
        .strip_prefix('"')
        .and_then(|r| r.strip_suffix('"'))
        .unwrap_or(rest);
    unquoted.replace("\\\"", "\"").replace("\\\\", "\\")
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use http::{Request, Response};
    use http_body_util::BodyExt;
    use serde_json::json;

    use super::*;
    use crate::drift::breakglass::{EXPIRES, LABEL, PAUSED, REASON};
    use crate::pause::{PAUSED_FOR, SKIP_RECONCILE};

    const OBJECT: &str = "/api/v1/namespaces/p/configmaps/x";
    const APP: &str = "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/myapp";

    /// A fake apiserver's answers: for the Application, `None` when it does
    /// not exist, else the status of its PATCH; for the object's PATCH, a
    /// status and body.
    #[derive(Clone)]
    struct Cluster {
        app_patch: Option<u16>,
        object_patch: (u16, Value),
    }

    /// `METHOD path` and the body of every request, in order.
    type Log = Arc<Mutex<Vec<(String, Value)>>>;

    fn client(cluster: Cluster, log: Log) -> kube::Client {
        let service = tower::service_fn(move |request: Request<Body>| {
            let (cluster, log) = (cluster.clone(), log.clone());
            async move {
                let method = request.method().to_string();
                let path = request.uri().path().to_owned();
                let bytes = request.into_body().collect().await.unwrap().to_bytes();
                let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                log.lock().unwrap().push((format!("{method} {path}"), body));
                let app = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                    "metadata": {"name": "myapp", "namespace": "argocd", "resourceVersion": "3",
                        "annotations": {SKIP_RECONCILE: "true", PAUSED_FOR: "/ConfigMap:p/x"}}});
                let status = |code: u16| json!({"kind": "Status", "code": code, "message": "no"});
                let (code, body) = match (method.as_str(), path.as_str(), cluster.app_patch) {
                    (_, APP, None) => (404, status(404)),
                    ("GET", APP, Some(_)) => (200, app),
                    ("PATCH", APP, Some(code)) => {
                        (code, if code == 200 { app } else { status(code) })
                    }
                    ("PATCH", OBJECT, _) => cluster.object_patch.clone(),
                    _ => (404, status(404)),
                };
                let response = Response::builder()
                    .status(code)
                    .header(
                        "warning",
                        r#"299 - "driftguard: break-glass on ConfigMap p/x ended""#,
                    )
                    .body(Body::from(body.to_string().into_bytes()))
                    .unwrap();
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        kube::Client::new(service, "p")
    }

    /// A ConfigMap armed by driftguard, with Argo CD's Application paused for it.
    fn armed() -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": "p", "resourceVersion": "7",
                "labels": {LABEL: "true"},
                "annotations": {"argocd.argoproj.io/tracking-id": "myapp:/ConfigMap:p/x",
                    EXPIRES: "2026-01-01T00:00:00Z", REASON: "INC-1", PAUSED: SKIP_RECONCILE}}})
    }

    async fn end_on(cluster: Cluster) -> (Ending, Vec<(String, Value)>) {
        let log = Log::default();
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let policy = Policy::embedded();
        let client = client(cluster, log.clone());
        let ending = end_break_glass(&client, &client, &ar, &armed(), &policy, "argocd").await;
        let log = log.lock().unwrap().clone();
        (ending, log)
    }

    fn ok() -> (u16, Value) {
        (200, armed())
    }

    #[tokio::test]
    async fn the_application_resumes_first_then_the_object_is_ended_with_preconditions() {
        let (ending, log) = end_on(Cluster {
            app_patch: Some(200),
            object_patch: ok(),
        })
        .await;
        let requests: Vec<&str> = log.iter().map(|(r, _)| r.as_str()).collect();
        assert_eq!(
            requests,
            [
                format!("GET {APP}"),
                format!("PATCH {APP}"),
                format!("PATCH {OBJECT}")
            ]
        );
        assert_eq!(log[1].1["metadata"]["resourceVersion"], "3");
        assert_eq!(
            log[1].1["metadata"]["annotations"][SKIP_RECONCILE],
            Value::Null
        );
        let object = &log[2].1["metadata"];
        assert_eq!(object["resourceVersion"], "7");
        for key in [EXPIRES, REASON, PAUSED] {
            assert!(object["annotations"][key].is_null(), "{key} kept: {object}");
        }
        assert!(object["labels"][LABEL].is_null(), "label kept: {object}");
        match ending {
            Ending::Ended {
                application,
                warnings,
            } => {
                assert_eq!(
                    application,
                    Lift::Lifted("argocd/myapp".into(), AppState::Resumed)
                );
                assert_eq!(warnings, ["driftguard: break-glass on ConfigMap p/x ended"]);
            }
            other => panic!("not ended: {other:?}"),
        }
    }

    #[tokio::test]
    async fn an_application_that_keeps_changing_leaves_the_object_untouched() {
        let (ending, log) = end_on(Cluster {
            app_patch: Some(409),
            object_patch: ok(),
        })
        .await;
        let patches = log.iter().filter(|(r, _)| *r == format!("PATCH {APP}"));
        assert_eq!(patches.count(), CONFLICT_RETRIES);
        assert!(log.iter().all(|(r, _)| !r.contains(OBJECT)), "{log:?}");
        assert!(
            matches!(
                ending,
                Ending::Application {
                    error: ApplicationError::KeptChanging,
                    ..
                }
            ),
            "{ending:?}"
        );
    }

    /// In a spoke the Application is lifted in the hub, the object in the spoke.
    #[tokio::test]
    async fn a_hubs_application_is_lifted_in_the_hub_and_a_refusal_there_leaves_the_object() {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let policy = Policy::embedded();
        for (hub_patch, lifted) in [(200, true), (403, false)] {
            let (spoke_log, hub_log) = (Log::default(), Log::default());
            // The spoke has no such Application: a lift sent there finds none.
            let spoke = client(
                Cluster {
                    app_patch: None,
                    object_patch: ok(),
                },
                spoke_log.clone(),
            );
            let hub = client(
                Cluster {
                    app_patch: Some(hub_patch),
                    object_patch: (404, Value::Null),
                },
                hub_log.clone(),
            );
            let ending = end_break_glass(&spoke, &hub, &ar, &armed(), &policy, "argocd").await;
            let requests = |log: &Log| -> Vec<String> {
                log.lock().unwrap().iter().map(|(r, _)| r.clone()).collect()
            };
            assert_eq!(
                requests(&hub_log),
                [format!("GET {APP}"), format!("PATCH {APP}")]
            );
            if lifted {
                assert_eq!(requests(&spoke_log), [format!("PATCH {OBJECT}")]);
                assert!(
                    matches!(&ending, Ending::Ended { application: Lift::Lifted(app, AppState::Resumed), .. } if app == "argocd/myapp"),
                    "{ending:?}"
                );
            } else {
                // The object keeps its marker, the record of what to lift: retried.
                assert!(requests(&spoke_log).is_empty());
                assert!(
                    matches!(
                        &ending,
                        Ending::Application {
                            error: ApplicationError::Refused {
                                code: 403,
                                verb: "patch",
                                ..
                            },
                            ..
                        }
                    ),
                    "{ending:?}"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_missing_application_has_nothing_to_lift_and_the_object_is_ended() {
        let (ending, log) = end_on(Cluster {
            app_patch: None,
            object_patch: ok(),
        })
        .await;
        assert_eq!(log.last().unwrap().0, format!("PATCH {OBJECT}"));
        assert!(
            matches!(&ending, Ending::Ended { application: Lift::Gone(app), .. } if app == "argocd/myapp"),
            "{ending:?}"
        );
    }

    #[tokio::test]
    async fn the_webhooks_refusal_conflicts_and_other_errors_are_told_apart() {
        let denied = "admission webhook \"validate.driftguard.io\" denied the request: no";
        let cases = [
            (409, "Operation cannot be fulfilled", "changed"),
            (404, "not found", "changed"),
            (403, denied, "refused"),
            (403, "configmaps \"x\" is forbidden", "failed"),
        ];
        for (code, message, want) in cases {
            let status = json!({"kind": "Status", "code": code, "message": message});
            let (ending, _) = end_on(Cluster {
                app_patch: Some(200),
                object_patch: (code, status),
            })
            .await;
            let got = match &ending {
                Ending::Changed => "changed",
                Ending::Refused { message: m, .. } if m == denied => "refused",
                Ending::Failed {
                    code: Some(c),
                    message: m,
                } if *c == code && m == message => "failed",
                _ => "other",
            };
            assert_eq!(got, want, "HTTP {code} {message}: {ending:?}");
        }
    }
}
