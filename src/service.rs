//! Reviewing one AdmissionReview for the webhook, without HTTP: gather the
//! inputs (the policy and sources in force, a `…/scale` write's parent), run
//! the decision (`judge_request`, the same function `driftguard check` uses)
//! on the [`Decider`] pool under `--decision-timeout`, and record the outcome
//! (metrics, an Event, the audit record). The server only reads the body and
//! maps [`ServiceError`] to HTTP.

use crate::text::quote;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::core::response::StatusSummary;
use serde_json::Value;

use crate::audit::AuditRecord;
use crate::breakglass::record::{Armed, Recorder};
use crate::cluster::events::{EventRecorder, Report};
use crate::cluster::parents::ParentReader;
use crate::cluster::watch::SourcesHandle;
use crate::deadline::Deadline;
use crate::decider::{Decider, DeciderError};
use crate::drift::{self, DecideError, Finding, Verdict};
use crate::metrics::{Metrics, RequestLabels};
use crate::request::{self, RawObject, ReviewError};
use crate::response::{self, Endpoint};
use crate::{Judged, Policy, judge_request};

/// What the webhook answers when deciding fails inside driftguard
/// (`--on-error`): `allow` lets the write through, `deny` refuses it.
// clap would show variant docs as each value's help: documented here instead.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OnError {
    Allow,
    Deny,
}

/// The policy in force, replaced whole on reload.
#[derive(Clone)]
pub struct PolicyHandle(Arc<RwLock<Arc<Policy>>>);

impl PolicyHandle {
    /// A handle on `policy`.
    pub fn new(policy: Policy) -> Self {
        Self(Arc::new(RwLock::new(Arc::new(policy))))
    }

    /// The policy in force now; a reload does not change the one returned.
    pub(crate) fn current(&self) -> Arc<Policy> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Puts `policy` in force for the reviews that start from now.
    pub(crate) fn replace(&self, policy: Policy) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
    }
}

/// A body that is not a review to answer; every other failure is still
/// answered with an AdmissionReview (by `--on-error`).
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// Not JSON, not an AdmissionReview v1, or without a readable uid: there
    /// is no uid to answer to.
    #[error(transparent)]
    Malformed(ReviewError),
}

/// Everything a review needs besides the body.
pub struct Reviewer {
    /// The policy in force.
    pub policy: PolicyHandle,
    /// What Argo CD and Flux know (`--watch-argocd`, `--watch-flux`).
    pub sources: Option<SourcesHandle>,
    /// Reads the parent of a `…/scale` write; `None` without cluster access.
    pub parents: Option<Arc<ParentReader>>,
    /// Writes DriftBlocked and BreakGlassUsed Events; `None` without cluster access.
    pub events: Option<Arc<EventRecorder>>,
    /// Where armed break-glasses are recorded for the sweeper; `None`
    /// without cluster access or with the sweeper off.
    pub records: Option<Recorder>,
    /// Where the outcome is counted.
    pub metrics: Arc<Metrics>,
    /// The threads that decide; never the async workers.
    pub decider: Decider,
    /// The answer when deciding fails inside driftguard (`--on-error`).
    pub on_error: OnError,
    /// Longest a decision may take, queueing included (`--decision-timeout`).
    pub decision_timeout: Duration,
    /// Bodies up to this size are decided on the async worker that read
    /// them, unless a jq program would run (`--decide-here-max-bytes`).
    pub decide_here_max_bytes: usize,
    /// What the hub calls this cluster (`--cluster-name` with
    /// `--argocd-kubeconfig`; empty without a hub): told to whoever may
    /// break glass in the answer to a dry run of a break-glass write
    /// ([`crate::cluster::hub::names_warning`]).
    pub hub_names: Vec<String>,
}

impl Reviewer {
    /// The AdmissionReview JSON to send back for `body`. A request that
    /// cannot be judged, a deadline or a full queue is still answered, by
    /// `--on-error`; only a body with no uid to answer to is an error.
    ///
    /// The body is dropped once parsed; `hold` (the review's memory
    /// reservation) lives until the decision ends, on its thread too, even
    /// past the deadline.
    pub async fn answer(
        &self,
        endpoint: Endpoint,
        body: impl AsRef<[u8]>,
        hold: Box<dyn std::any::Any + Send + Sync>,
        deadline: Instant,
    ) -> Result<Vec<u8>, ServiceError> {
        let started = Instant::now();
        let here = body.as_ref().len() <= self.decide_here_max_bytes;
        let parsed = request::parse(body.as_ref());
        let parse_micros = started.elapsed().as_micros() as u64;
        drop(body);
        let parsed = match parsed {
            Ok(req) => Arc::new(req),
            Err(ReviewError::UnreadableRequest { uid, reason }) => {
                return Ok(self.unreadable(endpoint, &uid, &reason, started));
            }
            Err(e) => {
                tracing::warn!(error = %e, "rejected a malformed review");
                self.metrics.reject("malformed");
                return Err(ServiceError::Malformed(e));
            }
        };
        Ok(self
            .decide_and_record(
                endpoint,
                parsed,
                here,
                (started, parse_micros, deadline),
                Arc::new(hold),
            )
            .await)
    }

    async fn decide_and_record(
        &self,
        endpoint: Endpoint,
        parsed: Arc<AdmissionRequest<RawObject>>,
        here: bool,
        (started, parse_micros, deadline): (Instant, u64, Instant),
        hold: Arc<Box<dyn std::any::Any + Send + Sync>>,
    ) -> Vec<u8> {
        let policy = self.policy.current();
        let policy_then = policy.clone();
        // The parent's read counts against the review's deadline, like the
        // body, the budget and the decision: one `--decision-timeout` in all.
        let until = tokio::time::Instant::from_std(deadline);
        let read = tokio::time::timeout_at(until, self.scale_parent(&policy, &parsed)).await;
        let parent = read.as_ref().ok().cloned().flatten().map(Arc::new);
        let sources = self.sources.as_ref().map(|s| s.current());
        let job = {
            let (parsed, parent) = (parsed.clone(), parent.clone());
            move |deadline: &Deadline| {
                let _hold = &hold;
                DecideError::split(judge_request(
                    &policy,
                    &parsed,
                    endpoint,
                    parent.as_deref(),
                    sources.as_deref(),
                    Timestamp::now(),
                    deadline,
                ))
            }
        };
        // Here when small, else (and for any jq program) on the pool, off the
        // async workers, which must keep serving other reviews and the probes.
        let kind = here.then(|| format!("{}/{}", parsed.kind.group, parsed.kind.kind));
        let left = deadline.saturating_duration_since(Instant::now());
        let outcome = match read {
            Err(_) => Err(DeciderError::TimedOut(self.decision_timeout)),
            Ok(_) => self
                .decider
                .run_here_first(left, kind.as_deref(), job)
                .await
                .map_err(|e| match e {
                    DeciderError::TimedOut(_) => DeciderError::TimedOut(self.decision_timeout),
                    other => other,
                }),
        };
        let micros = started.elapsed().as_micros() as u64;
        let view = request::view(&parsed);
        let why = match outcome {
            Ok(Ok(mut judged)) => {
                self.tell_hub_names(endpoint, &policy_then, &parsed, &mut judged);
                let armed = (endpoint == Endpoint::Validate && !parsed.dry_run).then_some(&*parsed);
                self.record_arming(&policy_then, armed, &mut judged, deadline)
                    .await;
                self.record(endpoint, &parsed, &judged);
                if endpoint == Endpoint::Validate && !parsed.dry_run {
                    self.emit_event(&parsed, parent.as_deref(), &judged);
                }
                let mut record = AuditRecord::decided(
                    endpoint.as_str(),
                    &parsed.uid,
                    &parsed.kind.version,
                    &view,
                    &judged.decision,
                    micros,
                );
                record.parse_micros = parse_micros;
                record.emit();
                self.observe(started);
                return judged.to_json();
            }
            // The request parsed but lacks what its operation needs: still a
            // review the apiserver sent, so it gets a readable AdmissionReview.
            Ok(Err(e)) => {
                let why = format!("cannot judge this request: {e}");
                span(&parsed)
                    .in_scope(|| tracing::warn!(error = %why, "answering with --on-error"));
                why
            }
            Err(e) => {
                match e {
                    DeciderError::TimedOut(_) => {
                        self.metrics.decision_timeouts.inc();
                    }
                    DeciderError::QueueFull(_) => {
                        self.metrics.decision_queue_full.inc();
                    }
                    DeciderError::Panicked(_) => {}
                }
                span(&parsed).in_scope(
                    || tracing::error!(error = %e, "no decision; answering with --on-error"),
                );
                e.to_string()
            }
        };
        self.metrics.internal_errors.inc();
        let (response, verdict) = on_error_response(&parsed, self.on_error, &why);
        AuditRecord::failed(
            endpoint.as_str(),
            &parsed.uid,
            &parsed.kind.version,
            &view,
            verdict,
            why,
            micros,
        )
        .emit();
        self.observe(started);
        response::to_bytes(&response.into_review())
    }

    /// How long a review took, from `started`, counted.
    fn observe(&self, started: Instant) {
        let seconds = started.elapsed().as_secs_f64();
        self.metrics.decision_seconds.observe(seconds);
    }

    /// On an allowed dry run of a break-glass write (arming or ending) by
    /// someone the policy lets break glass, what the hub calls this cluster,
    /// so that `kubectl driftguard break-glass` in a spoke pauses the hub's
    /// Application that deploys here without `--cluster-name`. Only to them:
    /// a tenant who may not break glass learns nothing of the hub.
    fn tell_hub_names(
        &self,
        endpoint: Endpoint,
        policy: &Policy,
        req: &AdmissionRequest<RawObject>,
        judged: &mut Judged,
    ) {
        let break_glass = matches!(
            judged.decision.finding,
            drift::Finding::BreakGlass | drift::Finding::BreakGlassEnded
        );
        if endpoint != Endpoint::Validate || !req.dry_run || !break_glass {
            return;
        }
        let user = req.user_info.username.as_deref().unwrap_or_default();
        let groups = req.user_info.groups.as_deref().unwrap_or_default();
        if !policy.break_glass.allowed.contains(user, groups) {
            return;
        }
        let Some(warning) = crate::cluster::hub::names_warning(&self.hub_names) else {
            return;
        };
        if let Some(response) = judged.response.response.as_mut().filter(|r| r.allowed) {
            response.warnings.get_or_insert_default().push(warning);
        }
    }

    /// Keeps the armed set true for an allowed write (`req`: validated, not
    /// a dry run) before answering ([`crate::breakglass::record`]). A write
    /// that arms or changes a break-glass and cannot be recorded is refused,
    /// since the sweeper would never end it; a hotfix under one already
    /// recorded is warned.
    async fn record_arming(
        &self,
        policy: &Policy,
        req: Option<&AdmissionRequest<RawObject>>,
        judged: &mut Judged,
        deadline: Instant,
    ) {
        let (Some(records), Some(req)) = (&self.records, req) else {
            return;
        };
        let Some(response) = judged.response.response.as_mut().filter(|r| r.allowed) else {
            return;
        };
        let (view, left) = (
            request::view(req),
            deadline.saturating_duration_since(Instant::now()),
        );
        let break_glass = judged.decision.finding == drift::Finding::BreakGlass;
        // What is left of the decision's deadline, with a floor that stays
        // well within any webhook timeout.
        let timeout = left.max(Duration::from_millis(250));
        let kept = records.keep(&view, policy, break_glass, timeout);
        let Err((object, why)) = kept.await else {
            return;
        };
        let (object, why) = (quote(&object).to_string(), quote(&why).to_string());
        tracing::warn!(object = %object, error = %why, "cannot record an armed break-glass");
        // Refused only where it arms or changes the break-glass: a hotfix
        // under one already recorded is only warned.
        if !Armed::changes_keys(&view) {
            let warning = format!(
                "driftguard: cannot refresh this break-glass's record ({why}); the record written when it was armed still stands"
            );
            response.warnings.get_or_insert_default().push(warning);
            return;
        }
        let message = format!(
            "driftguard: this write arms a break-glass on {object}, but driftguard {why}; without that record its sweeper would never end it, so nothing was changed. Try again; if it keeps failing, driftguard needs create and patch on ConfigMaps in namespace {} (docs/break-glass.md)",
            records.namespace()
        );
        let mut denied = response.clone().deny(message);
        denied.result.code = 500;
        denied.result.reason = "InternalError".into();
        // Nothing was armed: no break-glass warnings, and the apiserver's
        // audit log says what was decided.
        denied.warnings = None;
        let audit = &mut denied.audit_annotations;
        audit.insert("verdict".into(), "deny".into());
        audit.insert("reason".into(), "break-glass-unrecorded".into());
        *response = denied;
        // Refused: no break-glass was used, so no BreakGlassUsed Event.
        judged.decision.verdict = Verdict::Deny;
        judged.decision.break_glass = None;
    }

    /// A v1 review whose uid reads but whose request does not: answered by
    /// `--on-error` with that uid, never an HTTP error the apiserver would show
    /// only as "failed calling webhook".
    fn unreadable(&self, endpoint: Endpoint, uid: &str, reason: &str, started: Instant) -> Vec<u8> {
        let why = format!("cannot read this request: {}", quote(reason));
        tracing::warn!(%uid, error = %why, "unreadable request; answering with --on-error");
        self.answer_on_error(endpoint, uid, why, started)
    }

    /// A review refused before it was parsed (the server's memory budget),
    /// answered by `--on-error` with the uid read from its first bytes.
    pub(crate) fn refuse(&self, endpoint: Endpoint, uid: &str, reason: &str) -> Vec<u8> {
        let why = format!("not judged: {}", quote(reason));
        tracing::warn!(%uid, error = %why, "review refused unread; answering with --on-error");
        self.answer_on_error(endpoint, uid, why, Instant::now())
    }

    fn answer_on_error(
        &self,
        endpoint: Endpoint,
        uid: &str,
        why: String,
        started: Instant,
    ) -> Vec<u8> {
        self.metrics.internal_errors.inc();
        // kube's constructor for a request it cannot read; the uid goes back in
        // and --on-error decides.
        let mut base = AdmissionResponse::invalid("");
        base.uid = uid.to_owned();
        base.allowed = true;
        base.result = Default::default();
        let (response, verdict) = on_error_answer(base, self.on_error, &why);
        let micros = started.elapsed().as_micros() as u64;
        AuditRecord::unreadable(endpoint.as_str(), uid, verdict, why, micros).emit();
        response::to_bytes(&response.into_review())
    }

    fn record(&self, endpoint: Endpoint, parsed: &AdmissionRequest<RawObject>, judged: &Judged) {
        let d = &judged.decision;
        self.metrics
            .requests
            .get_or_create(&RequestLabels {
                endpoint: endpoint.as_str(),
                operation: request::view(parsed).operation.as_str(),
                verdict: d.verdict.as_str(),
            })
            .inc();
        if endpoint == Endpoint::Validate && d.finding == Finding::BreakGlass {
            self.metrics.break_glass.inc();
        }
        if endpoint == Endpoint::Validate && !d.sources_unread.is_empty() {
            self.metrics.decisions_without_sources.inc();
        }
        if d.verdict == Verdict::Deny {
            tracing::debug!(uid = %parsed.uid, paths = ?d.drifted_paths, "denied drift");
        }
    }

    /// An Event on the object for a denial or a break-glass use (never for dry runs).
    fn emit_event(
        &self,
        req: &AdmissionRequest<RawObject>,
        parent: Option<&Value>,
        judged: &Judged,
    ) {
        let Some(events) = &self.events else { return };
        if let Some(report) = event_report(req, parent, judged) {
            events.report(report);
        }
    }

    /// The parent of a `…/scale` UPDATE, or the target of a scaler write
    /// ([`drift::deputy::scaler_target`]), unless the writer is exempt whatever
    /// the parent says (then the answer does not depend on it) or there is no
    /// cluster access. A failed read is logged; the decision then applies
    /// `unknownScaleParent` and says so in its warnings and audit record.
    async fn scale_parent(
        &self,
        policy: &Policy,
        req: &AdmissionRequest<RawObject>,
    ) -> Option<Value> {
        let scale_write =
            req.sub_resource.as_deref() == Some("scale") && req.operation == Operation::Update;
        let target = drift::deputy::scaler_target(&request::view(req));
        if !scale_write && target.is_none() {
            return None;
        }
        let user = req.user_info.username.as_deref().unwrap_or_default();
        let groups = req.user_info.groups.as_deref().unwrap_or_default();
        // The manager is on the parent we have not read yet, so only the
        // controller and trusted identities can be checked here; a Flux
        // tenant's service account is recognised by the decision itself,
        // which runs the same check once the parent names its manager.
        if drift::exemption(
            policy,
            None,
            drift::Installation::Unresolved,
            None,
            user,
            groups,
        )
        .is_some()
        {
            return None;
        }
        let reader = self.parents.as_ref()?;
        let r = &req.resource;
        let namespace = req.namespace.as_deref().unwrap_or_default();
        let read = match &target {
            Some(t) => {
                reader
                    .read_kind(&t.group, &t.kind, namespace, &t.name)
                    .await
            }
            None => {
                reader
                    .read(&r.group, &r.version, &r.resource, namespace, &req.name)
                    .await
            }
        };
        match read {
            Ok(parent) => Some(parent),
            Err(e) => {
                span(req).in_scope(|| tracing::warn!(error = %e, "cannot read the scale parent"));
                None
            }
        }
    }
}

/// The review a log line is about. Made only for a line that is written: a
/// span entered for every review cost as much as a third of deciding one (the
/// JSON log layer formats its fields when it opens).
fn span(req: &AdmissionRequest<RawObject>) -> tracing::Span {
    tracing::info_span!(
        "review",
        uid = %req.uid,
        kind = %req.kind.kind,
        namespace = req.namespace.as_deref().unwrap_or_default(),
        name = %req.name,
        operation = ?req.operation,
    )
}

/// The Event for a denial or a break-glass use, about the stored object (the
/// parent for a scale write); `None` for any other decision.
fn event_report(
    req: &AdmissionRequest<RawObject>,
    parent: Option<&Value>,
    judged: &Judged,
) -> Option<Report> {
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
                    quote(req.user_info.username.as_deref().unwrap_or("?"))
                ),
            )
        }
        (Finding::BreakGlass, _) => {
            let bg = d.break_glass.as_ref()?;
            let paths = if d.drifted_paths.is_empty() {
                "armed".to_owned()
            } else {
                let shown = d.drifted_paths.iter().take(5).map(|p| quote(p).to_string());
                let more = d.drifted_paths.len().saturating_sub(5);
                let mut paths = shown.collect::<Vec<_>>().join(", ");
                if more > 0 {
                    paths.push_str(&format!(" and {more} more"));
                }
                paths
            };
            (
                "BreakGlassUsed",
                "Allow",
                format!(
                    "break-glass by {} until {}: {}; {paths}",
                    quote(&bg.user),
                    quote(&bg.expires),
                    quote(&bg.reason)
                ),
            )
        }
        _ => return None,
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
    Some(Report {
        reason,
        action,
        note,
        regarding: k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(api_version),
            kind: field("kind").or_else(|| Some(req.kind.kind.clone())),
            // A scaler's denial is reported on its target, the object read.
            name: parent
                .and_then(|p| p.pointer("/metadata/name"))
                .and_then(|v| v.as_str())
                .map(str::to_owned)
                .or_else(|| Some(req.name.clone())),
            namespace: req.namespace.clone(),
            uid: stored
                .and_then(|o| o.pointer("/metadata/uid"))
                .and_then(|v| v.as_str())
                .map(str::to_owned),
            ..Default::default()
        },
    })
}

/// Still an AdmissionReview: allowed or denied by `--on-error`, saying why.
fn on_error_response(
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
        let req = request::parse(&body).unwrap();
        let (deny, verdict) = on_error_response(&req, OnError::Deny, "internal error: boom");
        assert_eq!(verdict, "deny");
        assert!(!deny.allowed);
        assert_eq!(deny.uid, req.uid);
        assert!(deny.result.message.contains("--on-error=deny"));
        let (allow, _) = on_error_response(&req, OnError::Allow, "internal error: boom");
        assert!(allow.allowed);
    }

    /// A scaler denied for its target is reported on the target, whole.
    #[test]
    fn a_scaler_denial_is_an_event_on_its_target() {
        let hpa = serde_json::json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "pin", "namespace": "shop"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "minReplicas": 3, "maxReplicas": 3}});
        let body = serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": "CREATE", "name": "pin", "namespace": "shop",
                "kind": {"group": "autoscaling", "version": "v2", "kind": "HorizontalPodAutoscaler"},
                "resource": {"group": "autoscaling", "version": "v2", "resource": "horizontalpodautoscalers"},
                "userInfo": {"username": "alice"}, "object": hpa}});
        let target = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "uid": "uid-web",
                "annotations": {"argocd.argoproj.io/tracking-id": "shop:apps/Deployment:shop/web"}},
            "spec": {"replicas": 1}});
        let body = serde_json::to_vec(&body).unwrap();
        let req = request::parse(&body).unwrap();
        let judged = crate::judge(
            &Policy::embedded(),
            &body,
            Endpoint::Validate,
            Some(&target),
            Timestamp::now(),
        )
        .unwrap();
        assert_eq!(judged.decision.verdict, Verdict::Deny);
        let report = event_report(&req, Some(&target), &judged).unwrap();
        let r = &report.regarding;
        assert_eq!(
            (r.kind.as_deref(), r.name.as_deref(), r.uid.as_deref()),
            (Some("Deployment"), Some("web"), Some("uid-web"))
        );
        assert!(
            report.note.contains("HorizontalPodAutoscaler shop/pin"),
            "{}",
            report.note
        );
    }
}

#[cfg(test)]
mod record_tests;
