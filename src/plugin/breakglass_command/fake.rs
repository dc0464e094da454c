//! A fake apiserver holding ConfigMap p/x, tracked by Argo CD
//! Application argocd/myapp, with driftguard's answer to the object's
//! writes given; it records every request in order.

use std::sync::{Arc, Mutex};

use http::{Request, Response};
use http_body_util::BodyExt;
use kube::client::Body;
use serde_json::{Value, json};

/// ConfigMap p/x.
pub const OBJECT: &str = "/api/v1/namespaces/p/configmaps/x";
/// Application argocd/myapp.
pub const APP: &str = "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/myapp";

#[derive(Clone, Copy, Default)]
pub struct Cluster {
    /// driftguard denies writes to the object.
    pub deny: bool,
    /// The Application exists (`myapp`, in any namespace asked).
    pub application: bool,
    /// The object is under break-glass, its Application paused for it.
    pub armed: bool,
    /// The object's `argocd.argoproj.io/installation-id`.
    pub object_id: Option<&'static str>,
    /// argocd-cm (any namespace): `None` forbidden, else its
    /// `installationID`, if any.
    pub argocd_cm: Option<Option<&'static str>>,
    /// Writes to the Application are forbidden (RBAC).
    pub app_read_only: bool,
    /// The Application's `spec.destination.server`, if any.
    pub destination: Option<&'static str>,
    /// A sweeper lifts the Application's pause while the arming write is
    /// on its way: the pause is gone once the write lands.
    pub lifted_while_arming: bool,
    /// What driftguard's answer to a dry run of the object's write says the
    /// hub calls this cluster, if anything.
    pub told: Option<&'static str>,
}

/// `METHOD path?query` and the body of every request, in order.
pub type Log = Arc<Mutex<Vec<(String, Value)>>>;

fn reply(code: u16, body: Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .body(Body::from(body.to_string().into_bytes()))
        .unwrap()
}

/// The Application as written so far: a patch to it lands in `written`;
/// an arming write lands with its pause lifted when the cluster says a
/// sweeper lifts it meanwhile.
fn keep_application(
    cluster: &Cluster,
    written: &Mutex<Option<Value>>,
    (method, uri, body): (&str, &str, &Value),
    app: &mut Value,
) {
    let dry_run = uri.contains("dryRun=All");
    let to = uri.split('?').next().unwrap_or_default();
    if method == "PATCH" && to.ends_with("/myapp") && !cluster.app_read_only {
        let mut merged = app.clone();
        if let Some(annotations) = written.lock().unwrap().clone() {
            merged["metadata"]["annotations"] = annotations;
        }
        json_patch::merge(&mut merged, body);
        *written.lock().unwrap() = Some(merged["metadata"]["annotations"].clone());
    }
    if method == "PATCH" && to == OBJECT && !dry_run && cluster.lifted_while_arming {
        *written.lock().unwrap() = Some(json!({}));
    }
    if let Some(annotations) = written.lock().unwrap().clone() {
        app["metadata"]["annotations"] = annotations;
    }
}

/// The plugin's view of `cluster`, recording into `log`.
pub fn api(cluster: Cluster, log: Log) -> crate::plugin::api::Api {
    // The Application's annotations as written so far (`None`: as `cluster` says).
    let written: Arc<Mutex<Option<Value>>> = Arc::default();
    let service = tower::service_fn(move |request: Request<Body>| {
        let (log, written) = (log.clone(), written.clone());
        async move {
            let method = request.method().to_string();
            // kube's request builder writes `x?` for no query and
            // `x?&dryRun=All` for one: the apiserver reads both as usual.
            let uri = request.uri().to_string().replace("?&", "?");
            let uri = uri.trim_end_matches('?').to_owned();
            let bytes = request
                .into_body()
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            log.lock()
                .unwrap()
                .push((format!("{method} {uri}"), body.clone()));
            let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "x", "namespace": "p", "resourceVersion": "7",
                    "annotations": {"argocd.argoproj.io/tracking-id": "myapp:/ConfigMap:p/x"}}});
            let mut app = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": "myapp", "namespace": "argocd", "resourceVersion": "3"}});
            if cluster.armed {
                use crate::breakglass::application::{PAUSED_FOR, SKIP_RECONCILE};
                use crate::drift::breakglass_state::{EXPIRES, LABEL, PAUSED, REASON};
                let meta = &mut object["metadata"];
                meta["labels"] = json!({LABEL: "true"});
                for (key, value) in [
                    (EXPIRES, "2026-01-01T00:00:00Z"),
                    (REASON, "INC-1"),
                    (PAUSED, SKIP_RECONCILE),
                ] {
                    meta["annotations"][key] = json!(value);
                }
                app["metadata"]["annotations"] =
                    json!({SKIP_RECONCILE: "true", PAUSED_FOR: "/ConfigMap:p/x"});
            }
            keep_application(&cluster, &written, (&method, &uri, &body), &mut app);
            if let Some(server) = cluster.destination {
                app["spec"] = json!({"destination": {"server": server, "namespace": "p"}});
            }
            let denied = json!({"kind": "Status", "code": 403,
                "message": "admission webhook \"validate.driftguard.io\" denied the request: driftguard: bob is not authorized to break glass on ConfigMap p/x"});
            if let Some(id) = cluster.object_id {
                object["metadata"]["annotations"]
                    [crate::drift::ownership::ARGOCD_INSTALLATION_ID] = json!(id);
            }
            let path = uri.split('?').next().unwrap_or_default().to_owned();
            let at = if path.starts_with("/apis/argoproj.io/") && path.ends_with("/myapp") {
                APP
            } else if path.ends_with("/configmaps/argocd-cm") {
                "argocd-cm"
            } else {
                path.as_str()
            };
            let cm = |id: Option<&str>| {
                let data = id.map(|id| json!({"installationID": id}));
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "argocd-cm"}, "data": data.unwrap_or(json!({}))})
            };
            Ok::<_, std::convert::Infallible>(match (method.as_str(), at) {
                ("GET", "argocd-cm") => match cluster.argocd_cm {
                    Some(id) => reply(200, cm(id)),
                    None => reply(
                        403,
                        json!({"kind": "Status", "code": 403, "message": "forbidden"}),
                    ),
                },
                ("GET", OBJECT) => reply(200, object),
                ("PATCH", OBJECT) if cluster.deny => reply(403, denied),
                ("PATCH", OBJECT) => {
                    let mut r = reply(200, object);
                    let names = cluster.told.map(|n| vec![n.to_owned()]);
                    let told = names.and_then(|n| crate::cluster::hub::names_warning(&n));
                    if let Some(text) = told.filter(|_| uri.contains("dryRun=All")) {
                        let quoted = text.replace('\\', "\\\\").replace('"', "\\\"");
                        let header = format!("299 - \"{quoted}\"").parse().unwrap();
                        r.headers_mut().append("warning", header);
                    }
                    r
                }
                (_, APP) if !cluster.application => reply(
                    404,
                    json!({"kind": "Status", "code": 404, "message": "not found"}),
                ),
                ("PATCH", APP) if cluster.app_read_only => reply(
                    403,
                    json!({"kind": "Status", "code": 403, "message": "applications.argoproj.io \"myapp\" is forbidden"}),
                ),
                ("GET", APP) | ("PATCH", APP) => reply(200, app),
                _ => reply(404, json!({"kind": "Status", "code": 404, "message": uri})),
            })
        }
    });
    crate::plugin::api::Api::with_client(kube::Client::new(service, "p"), "p")
}
