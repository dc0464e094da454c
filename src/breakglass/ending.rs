//! Ending a break-glass on one object, the one way both the expiry sweeper
//! and `kubectl driftguard break-glass --end` do it: the ending write
//! ([`pause::end_patch`]) removes what arming added, with the object's
//! resourceVersion as precondition, and only then is the Argo CD
//! Application's pause, if the marker records one, lifted. In that order,
//! Argo CD is still paused while the object's keys go, so a self-heal that
//! starts with the lift applies a cached copy with none of them once Argo
//! CD's cache has the ended object (with `RespectIgnoreDifferences=true`
//! and the annotations ignored, a lift first let it write them back
//! without the label, out of the sweeper's sight; a lagging cache still
//! can: docs/break-glass.md, Limits). A lift that fails leaves the pause with no record on the object:
//! the sweeper's pass over pauses no armed object holds
//! ([`application::orphaned`]) lifts it later. The caller reads the object; what
//! it does with the outcome (log and retry, or report to the user) is its own.

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::client::Body;
use serde_json::Value;

use super::application::{self, AppChange, AppState, ApplicationError};
use super::pause::{self, Plan};
use crate::policy::Policy;
use crate::policy::argocd::ThisCluster;

/// What ending did.
#[derive(Debug)]
pub enum Ending {
    /// The break-glass is off the object; what became of the Application's
    /// pause after, a failed lift included ([`Lift::Failed`]).
    Ended {
        application: Lift,
        /// The apiserver's `Warning:` headers on the ending write.
        warnings: Vec<String>,
    },
    /// The object changed since it was read (409), or is gone (404): read
    /// it again. Nothing was written, the Application's pause included.
    Changed,
    /// An admission webhook refused the ending write: its message, whole.
    /// Nothing was written.
    Refused {
        code: u16,
        message: String,
        warnings: Vec<String>,
    },
    /// The ending write failed otherwise: the apiserver's code and message
    /// (RBAC, validation), or no code when it could not be asked. Nothing
    /// was written.
    Failed { code: Option<u16>, message: String },
}

/// What happened to the Argo CD Application once the object was ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lift {
    /// The marker recorded no Application pause.
    NotPaused,
    /// The marker recorded one, but the object names no Application any more.
    Unnamed,
    /// The Application `namespace/name` does not exist: nothing to lift.
    Gone(String),
    /// The object's entry is out of Application `namespace/name`'s pause;
    /// where the Application stands now.
    Lifted(String, AppState),
    /// The pause could not be lifted: Application `namespace/name` stays
    /// paused for `entry`, which nothing on the (ended) object records any
    /// more; the sweeper lifts it as left behind.
    Failed {
        application: String,
        /// Whether the Application is in a hub (`--argocd-kubeconfig`).
        hub: bool,
        entry: String,
        error: ApplicationError,
    },
}

/// One Argo CD installation, as ending looks for an object's Application.
#[derive(Clone, Copy)]
pub struct Installation<'a> {
    /// The cluster holding its Applications: this one, or a hub.
    pub client: &'a kube::Client,
    /// Where its Applications live when a tracking id names no namespace.
    pub namespace: &'a str,
    /// Whether that cluster is a hub (`--argocd-kubeconfig`), for messages.
    pub hub: bool,
    /// What that cluster calls this one: only an Application that deploys
    /// here may hold the object's pause, since the plugin pauses no other
    /// ([`ThisCluster::deploys_elsewhere`] judges both); one of the same
    /// name deploying to another cluster lists that cluster's objects,
    /// whose entries can be the same as ours. `None`: not judged, whichever
    /// Application the object names (the sweeper and the plugin always judge).
    pub deploys_here: Option<&'a ThisCluster>,
}

/// Ends the break-glass on `object` (as read, with its `kind` and
/// `resourceVersion`), of type `ar`: sends the ending write through
/// `client`, then lifts the Application's pause the marker recorded,
/// looking in each of `installations` in turn until one holds it for this
/// object (a hub's and this cluster's own Argo CD can both have an
/// Application of that name). Nothing is lifted unless the write succeeded.
pub async fn end_break_glass(
    client: &kube::Client,
    installations: &[Installation<'_>],
    ar: &ApiResource,
    object: &Value,
    policy: &Policy,
) -> Ending {
    let meta = &object["metadata"];
    let annotations = &meta["annotations"];
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
        200..=299 => {}
        404 | 409 => return Ending::Changed,
        code if message.contains("admission webhook") => {
            return Ending::Refused {
                code,
                message,
                warnings,
            };
        }
        code => {
            return Ending::Failed {
                code: Some(code),
                message,
            };
        }
    }
    let application = if application::paused_application(annotations) {
        lift_named(installations, object, &ar.group, policy).await
    } else {
        Lift::NotPaused
    };
    Ending::Ended {
        application,
        warnings,
    }
}

/// Takes the object out of the pause of the Application it names, in the
/// first installation whose Application lists it. None listing it: the
/// first Application found (not driftguard's pause), else `Gone`. An
/// installation that could not be asked fails the lift unless another one
/// held the pause: that one is lifted, and a stale entry elsewhere is left
/// to [`application::orphaned`]'s sweep, as a failed lift is.
async fn lift_named(
    installations: &[Installation<'_>],
    object: &Value,
    group: &str,
    policy: &Policy,
) -> Lift {
    let (mut found, mut failed) = (None, None);
    for at in installations {
        let Plan::ArgoCd {
            namespace,
            name,
            entry,
        } = pause::plan(object, group, policy, at.namespace)
        else {
            return Lift::Unnamed;
        };
        let app = format!("{namespace}/{name}");
        let shown = match installations.len() {
            1 => app.clone(),
            _ if at.hub => format!("{app} in the hub"),
            _ => format!("{app} in this cluster"),
        };
        let resume = AppChange::Resume(&entry);
        let lifted = application::change(at.client, &namespace, &name, resume, at.deploys_here);
        match lifted.await.map(|changed| changed.map(|c| c.state)) {
            Ok(Some(AppState::NotListed)) => {
                found.get_or_insert(Lift::Lifted(shown, AppState::NotListed));
            }
            Ok(Some(state)) => return Lift::Lifted(shown, state),
            Ok(None) => {
                found.get_or_insert(Lift::Gone(shown));
            }
            Err(error) => {
                failed.get_or_insert(Lift::Failed {
                    application: app,
                    hub: at.hub,
                    entry,
                    error,
                });
            }
        }
    }
    failed.or(found).unwrap_or(Lift::Unnamed)
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
    use crate::breakglass::application::CONFLICT_RETRIES;
    use std::sync::{Arc, Mutex};

    use http::{Request, Response};
    use http_body_util::BodyExt;
    use serde_json::json;

    use super::*;
    use crate::breakglass::application::{PAUSED_FOR, SKIP_RECONCILE};
    use crate::drift::breakglass_state::{EXPIRES, LABEL, PAUSED, REASON};

    const OBJECT: &str = "/api/v1/namespaces/p/configmaps/x";
    const APP: &str = "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/myapp";

    /// A fake apiserver's answers: for the Application, `None` when it does
    /// not exist, else the status of its PATCH; for the object's PATCH, a
    /// status and body. Its Application lists the object unless `unlisted`,
    /// and deploys to `destination` (a server URL; none: unset).
    #[derive(Clone)]
    struct Cluster {
        app_patch: Option<u16>,
        object_patch: (u16, Value),
        unlisted: bool,
        destination: Option<&'static str>,
    }

    impl Cluster {
        fn new(app_patch: Option<u16>, object_patch: (u16, Value)) -> Self {
            Cluster {
                app_patch,
                object_patch,
                unlisted: false,
                destination: None,
            }
        }
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
                let listed = if cluster.unlisted {
                    "apps/Deployment:p/other"
                } else {
                    "/ConfigMap:p/x"
                };
                let mut app = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                    "metadata": {"name": "myapp", "namespace": "argocd", "resourceVersion": "3",
                        "annotations": {SKIP_RECONCILE: "true", PAUSED_FOR: listed}}});
                if let Some(server) = cluster.destination {
                    app["spec"] = json!({"destination": {"server": server, "namespace": "p"}});
                }
                let status = |code: u16| json!({"kind": "Status", "code": code, "message": "no"});
                // Application myapp, in whichever namespace it is asked for.
                let at = if path.starts_with("/apis/argoproj.io/") && path.ends_with("/myapp") {
                    "app"
                } else {
                    path.as_str()
                };
                let (code, body) = match (method.as_str(), at, cluster.app_patch) {
                    (_, "app", None) => (404, status(404)),
                    ("GET", "app", Some(_)) => (200, app),
                    ("PATCH", "app", Some(code)) => {
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
        let ending = end_break_glass(&client, &[here(&client)], &ar, &armed(), &policy).await;
        let log = log.lock().unwrap().clone();
        (ending, log)
    }

    fn ok() -> (u16, Value) {
        (200, armed())
    }

    /// This cluster's Argo CD, as a lone installation.
    fn here(client: &kube::Client) -> Installation<'_> {
        Installation {
            client,
            namespace: "argocd",
            hub: false,
            deploys_here: None,
        }
    }

    /// The object first, while Argo CD is still paused, then the
    /// Application: a self-heal that starts with the lift finds no
    /// break-glass key to write back (the race of lifting first, with
    /// `RespectIgnoreDifferences=true`).
    #[tokio::test]
    async fn the_object_is_ended_with_preconditions_then_the_application_resumes() {
        let (ending, log) = end_on(Cluster::new(Some(200), ok())).await;
        let requests: Vec<&str> = log.iter().map(|(r, _)| r.as_str()).collect();
        assert_eq!(
            requests,
            [
                format!("PATCH {OBJECT}"),
                format!("GET {APP}"),
                format!("PATCH {APP}"),
            ]
        );
        let object = &log[0].1["metadata"];
        assert_eq!(object["resourceVersion"], "7");
        for key in [EXPIRES, REASON, PAUSED] {
            assert!(object["annotations"][key].is_null(), "{key} kept: {object}");
        }
        assert!(object["labels"][LABEL].is_null(), "label kept: {object}");
        assert_eq!(log[2].1["metadata"]["resourceVersion"], "3");
        assert_eq!(
            log[2].1["metadata"]["annotations"][SKIP_RECONCILE],
            Value::Null
        );
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

    /// The lift comes after the ending write: an object that changed, or
    /// whose ending is refused, leaves the Application paused for it.
    #[tokio::test]
    async fn an_ending_write_that_fails_lifts_nothing() {
        let denied = json!({"kind": "Status", "code": 403,
            "message": "admission webhook \"validate.driftguard.io\" denied the request: no"});
        let conflict = json!({"kind": "Status", "code": 409, "message": "changed"});
        for reply in [(409, conflict), (403, denied)] {
            let (ending, log) = end_on(Cluster::new(Some(200), reply)).await;
            let requests: Vec<&str> = log.iter().map(|(r, _)| r.as_str()).collect();
            assert_eq!(requests, [format!("PATCH {OBJECT}")], "{ending:?}");
            assert!(
                matches!(ending, Ending::Changed | Ending::Refused { .. }),
                "{ending:?}"
            );
        }
    }

    /// A lift that fails leaves the object ended and says so: the pause is
    /// left behind, for the sweeper's pass over those.
    #[tokio::test]
    async fn an_application_that_keeps_changing_stays_paused_after_the_object_is_ended() {
        let (ending, log) = end_on(Cluster::new(Some(409), ok())).await;
        assert_eq!(log[0].0, format!("PATCH {OBJECT}"));
        let patches = log.iter().filter(|(r, _)| *r == format!("PATCH {APP}"));
        assert_eq!(patches.count(), CONFLICT_RETRIES);
        assert!(
            matches!(
                &ending,
                Ending::Ended {
                    application: Lift::Failed {
                        application,
                        hub: false,
                        entry,
                        error: ApplicationError::KeptChanging,
                    },
                    ..
                } if application == "argocd/myapp" && entry == "/ConfigMap:p/x"
            ),
            "{ending:?}"
        );
    }

    /// In a spoke the Application is lifted in the hub, the object ended in
    /// the spoke first; a refusal in the hub leaves the object ended.
    #[tokio::test]
    async fn a_hubs_application_is_lifted_in_the_hub_and_a_refusal_there_is_reported() {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let policy = Policy::embedded();
        for (hub_patch, lifted) in [(200, true), (403, false)] {
            let (spoke_log, hub_log) = (Log::default(), Log::default());
            // The spoke has no such Application: a lift sent there finds none.
            let spoke = client(Cluster::new(None, ok()), spoke_log.clone());
            let hub = client(
                Cluster::new(Some(hub_patch), (404, Value::Null)),
                hub_log.clone(),
            );
            let at = Installation {
                hub: true,
                ..here(&hub)
            };
            let ending = end_break_glass(&spoke, &[at], &ar, &armed(), &policy).await;
            let requests = |log: &Log| -> Vec<String> {
                log.lock().unwrap().iter().map(|(r, _)| r.clone()).collect()
            };
            assert_eq!(
                requests(&hub_log),
                [format!("GET {APP}"), format!("PATCH {APP}")]
            );
            assert_eq!(requests(&spoke_log), [format!("PATCH {OBJECT}")]);
            if lifted {
                assert!(
                    matches!(&ending, Ending::Ended { application: Lift::Lifted(app, AppState::Resumed), .. } if app == "argocd/myapp"),
                    "{ending:?}"
                );
            } else {
                assert!(
                    matches!(
                        &ending,
                        Ending::Ended {
                            application: Lift::Failed {
                                hub: true,
                                error: ApplicationError::Refused {
                                    code: 403,
                                    verb: "patch",
                                    ..
                                },
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

    // A hub's Argo CD and this cluster's own (in `gitops`) each have an
    // Application `myapp`: only the one listing the object is lifted.

    #[tokio::test]
    async fn with_two_argo_cds_this_clusters_application_listing_the_object_is_lifted() {
        end_with_two_argo_cds((
            true,
            false,
            SPOKE,
            200,
            &["PATCH object", "GET local", "PATCH local"],
            &[],
            "Lifted(\"gitops/myapp in this cluster\", Resumed)",
        ))
        .await;
    }

    #[tokio::test]
    async fn with_two_argo_cds_the_hubs_application_listing_the_object_is_lifted() {
        end_with_two_argo_cds((
            false,
            true,
            SPOKE,
            200,
            &["PATCH object", "GET local"],
            &["GET hub", "PATCH hub"],
            "Lifted(\"argocd/myapp in the hub\", Resumed)",
        ))
        .await;
    }

    /// The hub's deploys to another cluster, where an object of the same
    /// kind and name holds its pause: not ours to lift.
    #[tokio::test]
    async fn with_two_argo_cds_a_hubs_application_deploying_elsewhere_is_left_paused() {
        end_with_two_argo_cds((
            false,
            true,
            "https://spoke-2.example:6443",
            200,
            &["PATCH object", "GET local"],
            &["GET hub"],
            "Lifted(\"gitops/myapp in this cluster\", NotListed)",
        ))
        .await;
    }

    /// The hub refuses: the object is ended, the pause left behind.
    #[tokio::test]
    async fn with_two_argo_cds_a_hub_refusing_the_lift_leaves_the_object_ended() {
        end_with_two_argo_cds((
            false,
            true,
            SPOKE,
            403,
            &["PATCH object", "GET local"],
            &["GET hub", "PATCH hub"],
            "Failed argocd/myapp hub=true",
        ))
        .await;
    }

    const LOCAL_APP: &str = "/apis/argoproj.io/v1alpha1/namespaces/gitops/applications/myapp";
    const SPOKE: &str = "https://spoke-1.example:6443";

    /// (this cluster's lists it, the hub's lists it, where the hub's deploys,
    /// the hub's PATCH status): the requests each cluster sees, and the outcome.
    type TwoArgoCds = (
        bool,
        bool,
        &'static str,
        u16,
        &'static [&'static str],
        &'static [&'static str],
        &'static str,
    );

    /// Ends the object with a hub's Argo CD and this cluster's own, as `case` says.
    async fn end_with_two_argo_cds(case: TwoArgoCds) {
        let (local_lists, hub_lists, destination, hub_patch, want_local, want_hub, want) = case;
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let policy = Policy::embedded();
        let this = ThisCluster::named(&[SPOKE.to_owned()]);
        let requests = |log: &Log| -> Vec<String> {
            log.lock().unwrap().iter().map(|(r, _)| r.clone()).collect()
        };
        let (spoke_log, hub_log) = (Log::default(), Log::default());
        let spoke = client(
            Cluster {
                unlisted: !local_lists,
                ..Cluster::new(Some(200), ok())
            },
            spoke_log.clone(),
        );
        let hub = client(
            Cluster {
                unlisted: !hub_lists,
                destination: Some(destination),
                ..Cluster::new(Some(hub_patch), (404, Value::Null))
            },
            hub_log.clone(),
        );
        let installations = [
            Installation {
                namespace: "gitops",
                ..here(&spoke)
            },
            Installation {
                hub: true,
                deploys_here: Some(&this),
                ..here(&hub)
            },
        ];
        let ending = end_break_glass(&spoke, &installations, &ar, &armed(), &policy).await;
        let named = |log: &Log| -> Vec<String> {
            requests(log)
                .iter()
                .map(|r| {
                    r.replace(LOCAL_APP, "local")
                        .replace(APP, "hub")
                        .replace(OBJECT, "object")
                })
                .collect()
        };
        let got = match &ending {
            Ending::Ended {
                application:
                    Lift::Failed {
                        application, hub, ..
                    },
                ..
            } => format!("Failed {application} hub={hub}"),
            Ending::Ended { application, .. } => format!("{application:?}"),
            other => format!("{other:?}"),
        };
        let case = format!("local {local_lists}, hub {hub_lists} to {destination}");
        assert_eq!(named(&spoke_log), want_local, "{case}");
        assert_eq!(named(&hub_log), want_hub, "{case}");
        assert_eq!(got, want, "{case}");
    }

    #[tokio::test]
    async fn a_missing_application_has_nothing_to_lift_and_the_object_is_ended() {
        let (ending, log) = end_on(Cluster::new(None, ok())).await;
        assert_eq!(log[0].0, format!("PATCH {OBJECT}"));
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
            let (ending, _) = end_on(Cluster::new(Some(200), (code, status))).await;
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
