//! The webhook endpoints, `POST /validate` and `POST /mutate`: a handler reads
//! the body within `--max-body-bytes` and `--body-timeout`, hands it to the
//! [`Reviewer`] and wraps its answer; refusals become HTTP in [`HttpError`].

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http_body_util::BodyExt;

use super::errors::HttpError;
use super::probes::Health;
use crate::Endpoint;
use crate::service::Reviewer;

pub struct App {
    /// Decides and records; knows nothing of HTTP.
    pub reviewer: Reviewer,
    pub max_body_bytes: usize,
    pub body_timeout: Duration,
}

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
pub async fn close_when_draining(
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

async fn handle(app: &App, endpoint: Endpoint, request: Request) -> Response {
    let body = match read_body(request.into_body(), app.max_body_bytes, app.body_timeout).await {
        Ok(body) => body,
        Err(e) => {
            app.reviewer.metrics.reject(e.reason());
            return e.into_response();
        }
    };
    match app.reviewer.answer(endpoint, &body).await {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(e) => HttpError::from(e).into_response(),
    }
}

/// Reads the whole body within `limit` bytes and `timeout`. A body over the
/// limit is still read and dropped, up to [`DRAIN_FACTOR`] times the limit,
/// before the 413 is sent: closing a socket with unread data makes the
/// kernel reset it, and the client would lose the answer saying why.
async fn read_body(
    body: Body,
    limit: usize,
    timeout: Duration,
) -> Result<axum::body::Bytes, HttpError> {
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
            if seen <= limit {
                kept.extend_from_slice(&data);
            } else if seen > limit.saturating_mul(DRAIN_FACTOR) {
                return Err(HttpError::TooLarge(limit));
            } else {
                kept = Vec::new();
            }
        }
        if seen > limit {
            Err(HttpError::TooLarge(limit))
        } else {
            Ok(axum::body::Bytes::from(kept))
        }
    };
    tokio::time::timeout(timeout, read)
        .await
        .unwrap_or(Err(HttpError::BodyTimeout(timeout)))
}

/// How far past the limit a body is read (and dropped) so that its 413 arrives.
const DRAIN_FACTOR: usize = 4;
