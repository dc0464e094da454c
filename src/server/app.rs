//! The webhook endpoints: `POST /validate` and `POST /mutate`. Handlers only
//! read the body and wrap the answer; deciding is `judge_request`, the same
//! function `driftguard check` uses, run on the [`Decider`] pool under
//! `--decision-timeout`.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use jiff::Timestamp;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use kube::core::response::StatusSummary;

use super::errors::HttpError;
use crate::audit::AuditRecord;
use crate::cluster::events::{EventRecorder, Report};
use crate::cluster::parents::ParentReader;
use crate::cluster::watch::SourcesHandle;
pub use crate::decider::guarded;
use crate::decider::{Decider, DeciderError};
use crate::drift::{Finding, Verdict};
use crate::metrics::{Metrics, RequestLabels};
use crate::review::{self, RawObject, ReviewError};
use crate::{Endpoint, Judged, Policy, judge_request};

/// What the webhook answers when deciding fails inside driftguard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OnError {
    Allow,
    Deny,
}

/// The policy in force, replaced whole on reload.
#[derive(Clone)]
pub struct PolicyHandle(Arc<RwLock<Arc<Policy>>>);

impl PolicyHandle {
    pub fn new(policy: Policy) -> Self {
        Self(Arc::new(RwLock::new(Arc::new(policy))))
    }

    pub fn current(&self) -> Arc<Policy> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn replace(&self, policy: Policy) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
    }
}

pub struct App {
    pub policy: PolicyHandle,
    pub metrics: Arc<Metrics>,
    pub on_error: OnError,
    pub max_body_bytes: usize,
    pub body_timeout: Duration,
    /// Reads the parent of a `…/scale` write; `None` without cluster access.
    pub parents: Option<Arc<ParentReader>>,
    /// Writes DriftBlocked and BreakGlassUsed Events; `None` without cluster access.
    pub events: Option<Arc<EventRecorder>>,
    /// What Argo CD and Flux know (`--watch-argocd`, `--watch-flux`).
    pub sources: Option<SourcesHandle>,
    /// The threads that decide; never the async workers.
    pub decider: Decider,
    /// Longest a decision may take, queueing included (`--decision-timeout`).
    pub decision_timeout: Duration,
}

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/validate", post(validate))
        .route("/mutate", post(mutate))
        .fallback(|| async { HttpError::NotFound })
        .method_not_allowed_fallback(|| async { HttpError::MethodNotAllowed })
        .with_state(app)
}

async fn validate(State(app): State<Arc<App>>, request: Request) -> Response {
    review(&app, Endpoint::Validate, request).await
}

async fn mutate(State(app): State<Arc<App>>, request: Request) -> Response {
    review(&app, Endpoint::Mutate, request).await
}

async fn review(app: &App, endpoint: Endpoint, request: Request) -> Response {
    let body = match read_body(request.into_body(), app.max_body_bytes, app.body_timeout).await {
        Ok(body) => body,
        Err(e) => {
            app.metrics.reject(e.reason());
            return e.into_response();
        }
    };
    let started = Instant::now();
    let parsed = match review::parse(&body) {
        Ok(req) => Arc::new(req),
        Err(ReviewError::UnreadableRequest { uid, reason }) => {
            return unreadable(app, endpoint, &uid, &reason, started);
        }
        Err(e) => {
            tracing::warn!(error = %e, "rejected a malformed review");
            app.metrics.reject("malformed");
            return HttpError::BadRequest(e.to_string()).into_response();
        }
    };
    let span = tracing::info_span!(
        "review",
        uid = %parsed.uid,
        kind = %parsed.kind.kind,
        namespace = parsed.namespace.as_deref().unwrap_or_default(),
        name = %parsed.name,
        operation = ?parsed.operation,
    );
    let _entered = span.enter();
    let policy = app.policy.current();
    let parent = scale_parent(app, &policy, &parsed).await.map(Arc::new);
    let sources = app.sources.as_ref().map(|s| s.current());
    let job = {
        let (parsed, parent) = (parsed.clone(), parent.clone());
        move || {
            judge_request(
                &policy,
                &parsed,
                endpoint,
                parent.as_deref(),
                sources.as_deref(),
                Timestamp::now(),
            )
        }
    };
    // Off the async workers, which must keep serving other reviews and the probes.
    let outcome = app.decider.run(app.decision_timeout, job).await;
    let micros = started.elapsed().as_micros() as u64;
    let view = review::view(&parsed);
    let why = match outcome {
        Ok(Ok(judged)) => {
            record(app, endpoint, &parsed, &judged);
            if endpoint == Endpoint::Validate && !parsed.dry_run {
                emit_event(app, &parsed, parent.as_deref(), &judged);
            }
            AuditRecord::decided(
                endpoint_name(endpoint),
                &parsed.uid,
                &parsed.kind.version,
                &view,
                &judged.decision,
                micros,
            )
            .emit();
            app.metrics
                .decision_seconds
                .observe(started.elapsed().as_secs_f64());
            return json_response(judged.to_json());
        }
        // The request parsed but lacks what its operation needs: still a
        // review the apiserver sent, so it gets a readable AdmissionReview.
        Ok(Err(e)) => {
            let why = format!("cannot judge this request: {e}");
            tracing::warn!(error = %why, "answering with --on-error");
            why
        }
        Err(e) => {
            match e {
                DeciderError::TimedOut(_) => {
                    app.metrics.decision_timeouts.inc();
                }
                DeciderError::QueueFull(_) => {
                    app.metrics.decision_queue_full.inc();
                }
                DeciderError::Panicked(_) => {}
            }
            tracing::error!(error = %e, "no decision; answering with --on-error");
            e.to_string()
        }
    };
    app.metrics.internal_errors.inc();
    let (response, verdict) = on_error_response(&parsed, app.on_error, &why);
    AuditRecord::failed(
        endpoint_name(endpoint),
        &parsed.uid,
        &parsed.kind.version,
        &view,
        verdict,
        why,
        micros,
    )
    .emit();
    app.metrics
        .decision_seconds
        .observe(started.elapsed().as_secs_f64());
    json_response(crate::admission::to_bytes(&response.into_review()))
}

/// A v1 review whose uid reads but whose request does not: answered by
/// `--on-error` with that uid, never an HTTP error the apiserver would show
/// only as "failed calling webhook".
fn unreadable(
    app: &App,
    endpoint: Endpoint,
    uid: &str,
    reason: &str,
    started: Instant,
) -> Response {
    let why = format!("cannot read this request: {reason}");
    tracing::warn!(%uid, error = %why, "unreadable request; answering with --on-error");
    app.metrics.internal_errors.inc();
    // kube's constructor for a request it cannot read; the uid goes back in
    // and --on-error decides.
    let mut base = AdmissionResponse::invalid("");
    base.uid = uid.to_owned();
    base.allowed = true;
    base.result = Default::default();
    let (response, verdict) = on_error_answer(base, app.on_error, &why);
    let micros = started.elapsed().as_micros() as u64;
    AuditRecord::unreadable(endpoint_name(endpoint), uid, verdict, why, micros).emit();
    json_response(crate::admission::to_bytes(&response.into_review()))
}

fn json_response(bytes: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

fn record(app: &App, endpoint: Endpoint, parsed: &AdmissionRequest<RawObject>, judged: &Judged) {
    let d = &judged.decision;
    app.metrics
        .requests
        .get_or_create(&RequestLabels {
            endpoint: endpoint_name(endpoint),
            operation: format!("{:?}", parsed.operation).to_uppercase(),
            verdict: d.verdict.as_str(),
        })
        .inc();
    if endpoint == Endpoint::Validate && d.finding == Finding::BreakGlass {
        app.metrics.break_glass.inc();
    }
    if d.verdict == Verdict::Deny {
        tracing::debug!(paths = ?d.drifted_paths, "denied drift");
    }
}

/// An Event on the object for a denial or a break-glass use (never for dry runs).
fn emit_event(
    app: &App,
    req: &AdmissionRequest<RawObject>,
    parent: Option<&serde_json::Value>,
    judged: &Judged,
) {
    let Some(events) = &app.events else { return };
    let d = &judged.decision;
    let (reason, action, note) = match (&d.finding, d.verdict) {
        (_, Verdict::Deny) => {
            let message = judged
                .response
                .response
                .as_ref()
                .map(|r| r.result.message.clone())
                .unwrap_or_default();
            (
                "DriftBlocked",
                "Deny",
                format!(
                    "{} by {}",
                    message,
                    req.user_info.username.as_deref().unwrap_or("?")
                ),
            )
        }
        (Finding::BreakGlass, _) => {
            let Some(bg) = &d.break_glass else { return };
            let paths = if d.drifted_paths.is_empty() {
                "armed".to_owned()
            } else {
                d.drifted_paths.join(", ")
            };
            (
                "BreakGlassUsed",
                "Allow",
                format!(
                    "break-glass by {} until {}: {}; {paths}",
                    bg.user, bg.expires, bg.reason
                ),
            )
        }
        _ => return,
    };
    let stored = parent
        .or(req.old_object.as_ref().map(|o| &o.value))
        .or(req.object.as_ref().map(|o| &o.value));
    let field = |key: &str| {
        stored
            .and_then(|o| o.get(key))
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    let api_version = field("apiVersion").unwrap_or_else(|| match req.kind.group.as_str() {
        "" => req.kind.version.clone(),
        g => format!("{g}/{}", req.kind.version),
    });
    events.report(Report {
        reason,
        action,
        note,
        regarding: k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(api_version),
            kind: field("kind").or_else(|| Some(req.kind.kind.clone())),
            name: Some(req.name.clone()),
            namespace: req.namespace.clone(),
            uid: stored
                .and_then(|o| o.pointer("/metadata/uid"))
                .and_then(|v| v.as_str())
                .map(str::to_owned),
            ..Default::default()
        },
    });
}

/// The parent of a `…/scale` UPDATE, unless the writer is a controller or
/// trusted identity (then the answer does not depend on it) or there is no
/// cluster access. A failed read is logged; the decision then applies
/// `unknownScaleParent` and says so in its warnings and audit record.
async fn scale_parent(
    app: &App,
    policy: &Policy,
    req: &AdmissionRequest<RawObject>,
) -> Option<serde_json::Value> {
    if req.sub_resource.as_deref() != Some("scale")
        || req.operation != kube::core::admission::Operation::Update
    {
        return None;
    }
    let user = req.user_info.username.as_deref().unwrap_or_default();
    let groups = req.user_info.groups.as_deref().unwrap_or_default();
    if policy.controllers.contains(user, groups) || policy.trusted.contains(user, groups) {
        return None;
    }
    let reader = app.parents.as_ref()?;
    let r = &req.resource;
    let namespace = req.namespace.as_deref().unwrap_or_default();
    match reader
        .read(&r.group, &r.version, &r.resource, namespace, &req.name)
        .await
    {
        Ok(parent) => Some(parent),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the scale parent");
            None
        }
    }
}

fn endpoint_name(endpoint: Endpoint) -> &'static str {
    match endpoint {
        Endpoint::Validate => "validate",
        Endpoint::Mutate => "mutate",
    }
}

/// Still an AdmissionReview: allowed or denied by `--on-error`, saying why.
pub fn on_error_response(
    req: &AdmissionRequest<RawObject>,
    on_error: OnError,
    why: &str,
) -> (AdmissionResponse, &'static str) {
    on_error_answer(AdmissionResponse::from(req), on_error, why)
}

fn on_error_answer(
    mut resp: AdmissionResponse,
    on_error: OnError,
    why: &str,
) -> (AdmissionResponse, &'static str) {
    resp.audit_annotations
        .insert("verdict".into(), "error".into());
    resp.audit_annotations
        .insert("reason".into(), "internal-error".into());
    match on_error {
        OnError::Allow => {
            resp.warnings = Some(vec![format!(
                "driftguard: {why}; allowed by --on-error=allow"
            )]);
            (resp, "allow")
        }
        OnError::Deny => {
            let mut resp = resp.deny(format!("driftguard: {why}; denied by --on-error=deny"));
            resp.result.code = 500;
            resp.result.reason = "InternalError".into();
            resp.result.status = Some(StatusSummary::Failure);
            (resp, "deny")
        }
    }
}

/// Reads the whole body within `limit` bytes and `timeout`.
async fn read_body(
    body: Body,
    limit: usize,
    timeout: Duration,
) -> Result<axum::body::Bytes, HttpError> {
    match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Err(_) => Err(HttpError::BodyTimeout(timeout)),
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => {
            let too_large = std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<http_body_util::LengthLimitError>())
                .is_some()
                || e.to_string().contains("length limit");
            if too_large {
                Err(HttpError::TooLarge(limit))
            } else {
                Err(HttpError::BadRequest(format!("cannot read the body: {e}")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_error_answers_with_a_review() {
        let body = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/deployment-delete.json"
        ))
        .unwrap();
        let req = review::parse(&body).unwrap();
        let (deny, verdict) = on_error_response(&req, OnError::Deny, "internal error: boom");
        assert_eq!(verdict, "deny");
        assert!(!deny.allowed);
        assert_eq!(deny.uid, req.uid);
        assert!(deny.result.message.contains("--on-error=deny"));
        let (allow, _) = on_error_response(&req, OnError::Allow, "internal error: boom");
        assert!(allow.allowed);
    }
}
