//! The webhook endpoints, `POST /validate` and `POST /mutate`: a handler reads
//! the body within `--max-body-bytes` and `--body-timeout`, hands it to the
//! [`Reviewer`] and wraps its answer; refusals become HTTP in [`HttpError`].

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::post;

use super::errors::HttpError;
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
