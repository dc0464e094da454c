//! The router without sockets (`tower::ServiceExt::oneshot`): every bad-input
//! class, and validate/mutate in enforce, warn and audit modes.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use driftguard::Policy;
use driftguard::server::app::{App, OnError, PolicyHandle, router};
use driftguard::server::metrics::Metrics;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

fn app(policy: Policy) -> axum::Router {
    router(Arc::new(App {
        policy: PolicyHandle::new(policy),
        metrics: Arc::new(Metrics::default()),
        on_error: OnError::Deny,
        max_body_bytes: 64 * 1024,
        body_timeout: Duration::from_millis(300),
        parents: None,
        events: None,
        sources: None,
    }))
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

async fn call(router: axum::Router, method: Method, path: &str, body: Body) -> (StatusCode, Value) {
    let response = router
        .oneshot(
            Request::builder()
                .method(method)
                .uri(path)
                .header("content-type", "application/json")
                .body(body)
                .unwrap(),
        )
        .await
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| panic!("{path}: body is not JSON: {bytes:?}"));
    (status, value)
}

async fn post(router: axum::Router, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
    call(router, Method::POST, path, Body::from(body)).await
}

#[tokio::test]
async fn validate_and_mutate_in_every_mode() {
    let review = fixture("deployment-update-image.json");
    let cases = [
        ("mode: enforce\n", false, false, false),
        ("mode: warn\n", true, true, true),
        ("mode: audit\n", true, false, false),
    ];
    for (yaml, allowed, warns, patches) in cases {
        let policy = || Policy::from_yaml(yaml, "p.yaml").unwrap();
        let (status, v) = post(app(policy()), "/validate", review.clone()).await;
        assert_eq!(status, StatusCode::OK, "{yaml}");
        assert_eq!(v["response"]["allowed"], json!(allowed), "{yaml}");
        assert_eq!(v["response"]["warnings"].is_array(), warns, "{yaml}: {v}");
        assert_eq!(
            v["response"]["uid"],
            json!("5b1a7f2e-9f7c-4d8e-8a51-2f4c1d9e0a11")
        );
        let (status, v) = post(app(policy()), "/mutate", review.clone()).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            v["response"]["allowed"],
            json!(true),
            "{yaml}: the mutating webhook never denies"
        );
        assert_eq!(
            v["response"]["patchType"] == json!("JSONPatch"),
            patches,
            "{yaml}"
        );
    }
}

#[tokio::test]
async fn the_server_answers_like_check() {
    let review = fixture("deployment-delete.json");
    let (_, v) = post(app(Policy::embedded()), "/validate", review.clone()).await;
    let judged = driftguard::judge(
        &Policy::embedded(),
        &review,
        driftguard::Endpoint::Validate,
        None,
        jiff::Timestamp::now(),
    )
    .unwrap();
    let expected: Value = serde_json::from_slice(&judged.to_json()).unwrap();
    assert_eq!(v, expected);
}

#[tokio::test]
async fn every_bad_input_gets_a_json_error_naming_it() {
    let mut no_old: Value =
        serde_json::from_slice(&fixture("deployment-update-image.json")).unwrap();
    no_old["request"]["oldObject"] = Value::Null;
    let mut no_uid: Value = serde_json::from_slice(&fixture("deployment-delete.json")).unwrap();
    no_uid["request"].as_object_mut().unwrap().remove("uid");
    // Nesting deeper than serde_json's recursion limit, inside a real review.
    let mut deep: Value = serde_json::from_slice(&fixture("deployment-update-image.json")).unwrap();
    let mut nested = json!("leaf");
    for _ in 0..200 {
        nested = json!([nested]);
    }
    deep["request"]["object"]["spec"]["deep"] = nested;
    let cases: Vec<(Vec<u8>, StatusCode, &str)> = vec![
        (b"not json".to_vec(), StatusCode::BAD_REQUEST, "not JSON"),
        (
            b"{\"hello\": 1}".to_vec(),
            StatusCode::BAD_REQUEST,
            "apiVersion",
        ),
        (
            br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}"#
                .to_vec(),
            StatusCode::BAD_REQUEST,
            "v1beta1",
        ),
        (
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
            StatusCode::BAD_REQUEST,
            "no request",
        ),
        (
            serde_json::to_vec(&no_uid).unwrap(),
            StatusCode::BAD_REQUEST,
            "no uid",
        ),
        (
            serde_json::to_vec(&no_old).unwrap(),
            StatusCode::BAD_REQUEST,
            "no oldObject",
        ),
        (
            serde_json::to_vec(&deep).unwrap(),
            StatusCode::BAD_REQUEST,
            "recursion limit",
        ),
        (
            vec![b' '; 70 * 1024],
            StatusCode::PAYLOAD_TOO_LARGE,
            "larger than 65536 bytes",
        ),
    ];
    for (body, status, needle) in cases {
        let (got, v) = post(app(Policy::embedded()), "/validate", body).await;
        assert_eq!(got, status, "{needle}: {v}");
        assert_eq!(v["code"], json!(status.as_u16()));
        assert!(
            v["error"].as_str().unwrap().contains(needle),
            "{needle}: {v}"
        );
    }

    let (got, v) = call(
        app(Policy::embedded()),
        Method::GET,
        "/validate",
        Body::empty(),
    )
    .await;
    assert_eq!(
        (got, v["code"].clone()),
        (StatusCode::METHOD_NOT_ALLOWED, json!(405))
    );
    let (got, v) = call(
        app(Policy::embedded()),
        Method::POST,
        "/nope",
        Body::empty(),
    )
    .await;
    assert_eq!(
        (got, v["code"].clone()),
        (StatusCode::NOT_FOUND, json!(404))
    );
}

#[tokio::test]
async fn a_body_that_never_finishes_times_out() {
    let (got, v) = call(
        app(Policy::embedded()),
        Method::POST,
        "/validate",
        Body::new(Stalled::default()),
    )
    .await;
    assert_eq!(got, StatusCode::REQUEST_TIMEOUT, "{v}");
}

/// One chunk of a review, then silence: a slow client.
#[derive(Default)]
struct Stalled {
    sent: bool,
}

impl http_body::Body for Stalled {
    type Data = axum::body::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if self.sent {
            return std::task::Poll::Pending;
        }
        self.sent = true;
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(
            axum::body::Bytes::from_static(b"{\"apiVersion\":"),
        ))))
    }
}
