//! The webhook endpoints, `POST /validate` and `POST /mutate`: a handler reads
//! the body within `--max-body-bytes`, `--body-timeout` and the byte budget
//! (charged as it arrives, then for the decision), hands it to the
//! [`Reviewer`] and wraps its answer; refusals become HTTP in `HttpError`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http_body_util::BodyExt;

use super::budget::{MemoryBudget, OverBudget, Reservation, review_bytes};
use super::errors::HttpError;
use super::probes::Health;
use crate::Endpoint;
use crate::service::Reviewer;

/// What the webhook endpoints share.
pub struct App {
    /// Decides and records; knows nothing of HTTP.
    pub reviewer: Reviewer,
    /// The largest body read (`--max-body-bytes`); larger ones get 413.
    pub max_body_bytes: usize,
    /// Longest a body may take to arrive (`--body-timeout`).
    pub body_timeout: Duration,
    /// Bytes all reviews in flight may hold (`--memory-budget-bytes`).
    pub budget: Arc<MemoryBudget>,
}

/// The webhook's routes: `POST /validate` and `POST /mutate`.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/validate", post(validate))
        .route("/mutate", post(mutate))
        .fallback(|| async { HttpError::NotFound })
        .method_not_allowed_fallback(|| async { HttpError::MethodNotAllowed })
        .with_state(app)
}

/// Once SIGTERM has made driftguard unready, every HTTP/1.1 answer says
/// `Connection: close`: the client's next review then opens a connection
/// that the Service routes to a ready replica, instead of reusing this one
/// as it closes at the end of the delay, where a POST would fail and the
/// apiserver would not retry it. HTTP/2 gets its GOAWAY from the shutdown.
pub(crate) async fn close_when_draining(
    State(health): State<Arc<Health>>,
    request: Request,
    next: Next,
) -> Response {
    let http1 = request.version() < http::Version::HTTP_2;
    let mut response = next.run(request).await;
    if http1 && health.shutting_down.load(Ordering::SeqCst) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

async fn validate(State(app): State<Arc<App>>, request: Request) -> Response {
    handle(&app, Endpoint::Validate, request).await
}

async fn mutate(State(app): State<Arc<App>>, request: Request) -> Response {
    handle(&app, Endpoint::Mutate, request).await
}

async fn handle(app: &App, endpoint: Endpoint, mut request: Request) -> Response {
    // The budget is waited for no longer than a decision may take.
    let deadline = Instant::now() + app.reviewer.decision_timeout;
    let arriving = request.extensions_mut().remove::<Arriving>();
    let mut reservation = app.budget.reservation();
    let mut refused = None;
    let limits = BodyLimits {
        max: app.max_body_bytes,
        timeout: app.body_timeout,
        deadline,
    };
    let read = read_body(request.into_body(), limits, &mut reservation, &mut refused).await;
    drop(arriving);
    let body = match read {
        Ok(body) => body,
        Err(e) => {
            app.reviewer.metrics.reject(e.reason());
            return e.into_response();
        }
    };
    // The decision's working set, reserved before the body is parsed.
    if refused.is_none() {
        let needed = review_bytes(body.len());
        refused = reservation.grow_to(needed, deadline).await.err();
    }
    let answer = match refused {
        Some(why) => {
            app.reviewer.metrics.memory_budget_refused.inc();
            let prefix = &body[..body.len().min(UID_PREFIX_BYTES)];
            match crate::request::uid_in_prefix(prefix) {
                Some(uid) => Ok(app.reviewer.refuse(endpoint, &uid, &why.to_string())),
                None => Err(HttpError::Unavailable(why.to_string())),
            }
        }
        None => app
            .reviewer
            .answer(endpoint, body, Box::new(reservation), deadline)
            .await
            .map_err(HttpError::from),
    };
    match answer {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(e) => {
            if matches!(e, HttpError::Unavailable(_)) {
                app.reviewer.metrics.reject(e.reason());
            }
            e.into_response()
        }
    }
}

/// Marks a request whose body is still arriving (see
/// `connections::Slot::arriving`); the handler drops it once the body is read.
// Never read: held by the request, its drop is the signal.
#[allow(dead_code)]
#[derive(Clone)]
pub(crate) struct Arriving(pub(crate) std::sync::Arc<super::connections::BodyArriving>);

/// What a body may take: bytes, time to arrive, and the review's deadline
/// for growing its memory reservation.
struct BodyLimits {
    max: usize,
    timeout: Duration,
    deadline: Instant,
}

/// How much of a refused review's body is kept, to read its uid from.
const UID_PREFIX_BYTES: usize = 16 * 1024;

/// Reads the whole body within `limits.max` bytes and `limits.timeout`,
/// growing `reservation` to the bytes that have arrived, never to what the
/// client declares. Once the budget is refused (`refused` set), only the
/// first [`UID_PREFIX_BYTES`] are kept and the reservation is given back. A
/// body over the limit is still read and dropped, up to [`DRAIN_FACTOR`]
/// times the limit, before the 413 is sent: closing a socket with unread
/// data makes the kernel reset it, and the client would lose the answer
/// saying why.
async fn read_body(
    body: Body,
    limits: BodyLimits,
    reservation: &mut Reservation,
    refused: &mut Option<OverBudget>,
) -> Result<axum::body::Bytes, HttpError> {
    let limit = limits.max;
    let read = async {
        let mut body = body;
        let mut kept = Vec::new();
        let mut seen = 0usize;
        while let Some(frame) = body.frame().await {
            let frame =
                frame.map_err(|e| HttpError::BadRequest(format!("cannot read the body: {e}")))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            seen = seen.saturating_add(data.len());
            if refused.is_none()
                && seen <= limit
                && let Err(e) = reservation.grow_to(seen, limits.deadline).await
            {
                *refused = Some(e);
                *reservation = reservation.empty();
                kept.truncate(UID_PREFIX_BYTES);
                kept.shrink_to_fit();
            }
            if seen > limit.saturating_mul(DRAIN_FACTOR) {
                return Err(HttpError::TooLarge(limit));
            } else if seen > limit {
                kept = Vec::new();
            } else if refused.is_none() {
                kept.extend_from_slice(&data);
            } else if kept.len() < UID_PREFIX_BYTES {
                let room = UID_PREFIX_BYTES - kept.len();
                kept.extend_from_slice(&data[..room.min(data.len())]);
            }
        }
        if seen > limit {
            Err(HttpError::TooLarge(limit))
        } else {
            Ok(axum::body::Bytes::from(kept))
        }
    };
    tokio::time::timeout(limits.timeout, read)
        .await
        .unwrap_or(Err(HttpError::BodyTimeout(limits.timeout)))
}

/// How far past the limit a body is read (and dropped) so that its 413 arrives.
const DRAIN_FACTOR: usize = 4;
