//! The one place where a refused request becomes an HTTP answer: a status code
//! and a JSON body naming the problem. A v1 review whose uid reads is never
//! answered here; it always gets an AdmissionReview.

use std::time::Duration;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::service::ServiceError;

/// A request refused with an HTTP error instead of an AdmissionReview.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpError {
    /// Not JSON, not an AdmissionReview v1, or missing request/uid.
    #[error("{0}")]
    BadRequest(String),
    /// The body is larger than `--max-body-bytes`.
    #[error("body is larger than {0} bytes")]
    TooLarge(usize),
    /// The client did not send the whole body in time.
    #[error("body not received within {0:?}")]
    BodyTimeout(Duration),
    /// A path other than `/validate` and `/mutate`.
    #[error("no such path; the webhook serves POST /validate and POST /mutate")]
    NotFound,
    /// A method other than POST.
    #[error("method not allowed; use POST")]
    MethodNotAllowed,
    /// Refused before it was read (the memory budget), with no uid to answer to.
    #[error("{0}")]
    Unavailable(String),
}

impl HttpError {
    /// The HTTP status it is answered with.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            HttpError::BadRequest(_) => StatusCode::BAD_REQUEST,
            HttpError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            HttpError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            HttpError::NotFound => StatusCode::NOT_FOUND,
            HttpError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            HttpError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The metric label for a refused request.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            HttpError::BadRequest(_) => "unreadable",
            HttpError::TooLarge(_) => "too-large",
            HttpError::BodyTimeout(_) => "body-timeout",
            HttpError::NotFound => "not-found",
            HttpError::MethodNotAllowed => "method-not-allowed",
            HttpError::Unavailable(_) => "memory-budget",
        }
    }
}

impl From<ServiceError> for HttpError {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::Malformed(e) => HttpError::BadRequest(e.to_string()),
        }
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let status = self.status();
        (
            status,
            Json(json!({"error": self.to_string(), "code": status.as_u16()})),
        )
            .into_response()
    }
}
