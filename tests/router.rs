//! The router without sockets (`tower::ServiceExt::oneshot`): every bad-input
//! class, validate/mutate in enforce, warn and audit modes, and the decision
//! deadline.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use driftguard::Policy;
use driftguard::decider::Decider;
use driftguard::metrics::Metrics;
use driftguard::server::app::{App, router};
use driftguard::server::probes::{self, Health};
use driftguard::service::{OnError, PolicyHandle, Reviewer};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

fn app(policy: Policy) -> axum::Router {
    router(Arc::new(app_with(
        policy,
        OnError::Deny,
        Decider::new(2, 16).unwrap(),
    )))
}

fn app_with(policy: Policy, on_error: OnError, decider: Decider) -> App {
    App {
        reviewer: Reviewer {
            policy: PolicyHandle::new(policy),
            sources: None,
            parents: None,
            events: None,
            records: None,
            metrics: Arc::new(Metrics::default()),
            decider,
            on_error,
            decision_timeout: Duration::from_secs(5),
            // The server's default: small reviews are decided here first.
            decide_here_max_bytes: 64 * 1024,
            hub_names: Vec::new(),
        },
        max_body_bytes: 64 * 1024,
        body_timeout: Duration::from_millis(300),
        budget: driftguard::server::budget::MemoryBudget::new(
            64 << 20,
            prometheus_client::metrics::gauge::Gauge::default(),
        ),
    }
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

/// The server's answer equals `judge()`'s, and each is also the right answer
/// on its own, so that a bug the two share still fails: the verdict, the
/// reason code, a fragment of the message or warning, and the review's own
/// uid (a fresh one per case, not the fixtures' common one); an allowed
/// review without drift says nothing.
#[tokio::test]
async fn the_server_answers_like_check() {
    let cases = [
        (
            "deployment-delete.json",
            false,
            "manual-delete",
            Some("only Argo CD may delete (prune) it"),
        ),
        (
            "deployment-update-image.json",
            false,
            "drift",
            Some("drifts from Git at /spec/template/spec/containers/0/image"),
        ),
        (
            "configmap-create.json",
            false,
            "manual-create",
            Some("only Argo CD may create it"),
        ),
        (
            "deployment-update-image-dryrun.json",
            false,
            "drift",
            Some("driftguard: dry run: the real write would be denied (drift)"),
        ),
        (
            "deployment-scale.json",
            true,
            "scale-parent-unknown",
            Some("driftguard: drifted /spec/replicas"),
        ),
        ("deployment-rollout-restart.json", true, "no-drift", None),
    ];
    for (n, (file, allowed, reason, fragment)) in cases.into_iter().enumerate() {
        let uid = format!("parity-{n}");
        let mut review: Value = serde_json::from_slice(&fixture(file)).unwrap();
        review["request"]["uid"] = json!(uid);
        let review = serde_json::to_vec(&review).unwrap();
        let (status, v) = post(app(Policy::embedded()), "/validate", review.clone()).await;
        let judged = driftguard::judge(
            &Policy::embedded(),
            &review,
            driftguard::Endpoint::Validate,
            None,
            jiff::Timestamp::now(),
        )
        .unwrap();
        let expected: Value = serde_json::from_slice(&judged.to_json()).unwrap();
        assert_eq!(v, expected, "{file}");

        assert_eq!(status, StatusCode::OK, "{file}");
        let r = &v["response"];
        assert_eq!(r["uid"], json!(uid), "{file}: {v}");
        assert_eq!(r["allowed"], json!(allowed), "{file}: {v}");
        assert_eq!(
            r["auditAnnotations"]["reason"],
            json!(reason),
            "{file}: {v}"
        );
        if allowed {
            assert!(r["status"].get("code").is_none(), "{file}: {v}");
        } else {
            assert_eq!(r["status"]["code"], json!(403), "{file}: {v}");
        }
        // A drift denial carries its drifted paths whole, for clients
        // (driftguard::response::drifted); the message names at most five.
        if reason == "drift" {
            assert_eq!(
                r["status"]["details"]["causes"],
                json!([{"reason": "FieldValueForbidden", "message": "drifts from Git",
                        "field": "/spec/template/spec/containers/0/image"}]),
                "{file}: {v}"
            );
        }
        let texts: Vec<&str> = std::iter::once(&r["status"]["message"])
            .chain(r["warnings"].as_array().into_iter().flatten())
            .filter_map(Value::as_str)
            .collect();
        match fragment {
            Some(fragment) => assert!(
                texts.iter().any(|t| t.contains(fragment)),
                "{file}: no {fragment:?} in {texts:?}"
            ),
            None => assert!(texts.is_empty(), "{file}: {texts:?}"),
        }
    }
}

#[tokio::test]
async fn every_bad_input_gets_a_json_error_naming_it() {
    let mut beta_with_uid: Value =
        serde_json::from_slice(&fixture("deployment-update-image.json")).unwrap();
    beta_with_uid["apiVersion"] = json!("admission.k8s.io/v1beta1");
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
            serde_json::to_vec(&beta_with_uid).unwrap(),
            StatusCode::BAD_REQUEST,
            "v1beta1",
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

/// The verdict, uid and exact message of an answer given by `--on-error`.
fn assert_on_error(v: &Value, on_error: OnError, uid: &str, why: &str) {
    assert_eq!(v["apiVersion"], json!("admission.k8s.io/v1"), "{v}");
    assert_eq!(v["kind"], json!("AdmissionReview"), "{v}");
    let r = &v["response"];
    assert_eq!(r["uid"], json!(uid), "{v}");
    assert_eq!(
        r["auditAnnotations"]["reason"],
        json!("internal-error"),
        "{v}"
    );
    match on_error {
        OnError::Allow => {
            assert_eq!(r["allowed"], json!(true), "{v}");
            let warning = r["warnings"][0].as_str().unwrap();
            assert!(warning.starts_with(&format!("driftguard: {why}")), "{v}");
            assert!(warning.ends_with("; allowed by --on-error=allow"), "{v}");
        }
        OnError::Deny => {
            assert_eq!(r["allowed"], json!(false), "{v}");
            assert_eq!(r["status"]["code"], json!(500), "{v}");
            let message = r["status"]["message"].as_str().unwrap();
            assert!(message.starts_with(&format!("driftguard: {why}")), "{v}");
            assert!(message.ends_with("; denied by --on-error=deny"), "{v}");
        }
    }
}

#[tokio::test]
async fn a_review_with_a_uid_that_cannot_be_judged_gets_an_on_error_review() {
    const UID: &str = "5b1a7f2e-9f7c-4d8e-8a51-2f4c1d9e0a11";
    let base: Value = serde_json::from_slice(&fixture("deployment-update-image.json")).unwrap();
    let mut no_old = base.clone();
    no_old["request"]["oldObject"] = Value::Null;
    let mut not_an_object = base.clone();
    not_an_object["request"]["object"] = json!("nope");
    let mut no_kind = base.clone();
    no_kind["request"].as_object_mut().unwrap().remove("kind");
    let cases = [
        (
            no_old,
            "cannot judge this request: UPDATE request has no oldObject;",
        ),
        (
            not_an_object,
            "cannot read this request: object is not a JSON object",
        ),
        (no_kind, "cannot read this request: missing field `kind`"),
    ];
    for on_error in [OnError::Allow, OnError::Deny] {
        for (body, why) in &cases {
            let app = Arc::new(app_with(
                Policy::embedded(),
                on_error,
                Decider::new(1, 4).unwrap(),
            ));
            let metrics = app.reviewer.metrics.clone();
            let (status, v) =
                post(router(app), "/validate", serde_json::to_vec(body).unwrap()).await;
            assert_eq!(status, StatusCode::OK, "{why}: {v}");
            assert_on_error(&v, on_error, UID, why);
            assert_eq!(metrics.internal_errors.get(), 1, "{why}");
            assert_eq!(metrics.decision_timeouts.get(), 0, "{why}");
        }
    }
}

/// `"(.,.)|"` doubles the outputs at each step: 30 of them before `select(false)`
/// would run for many minutes, with only constructs a load-time check allows.
fn runaway_policy() -> Policy {
    let expr = "(.,.)|".repeat(30) + "select(false)";
    let yaml = format!(
        "mode: enforce\nignoreDifferences:\n  - group: apps\n    kind: Deployment\n    jqPathExpressions:\n      - {}\n",
        serde_json::to_string(&expr).unwrap()
    );
    Policy::from_yaml(&yaml, "runaway.yaml").expect("the runaway rule compiles")
}

async fn wait_until(what: &str, done: impl Fn() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(10), "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A current-thread runtime: had the decision run on the async worker, the
/// probes below could not answer at all.
#[tokio::test]
async fn a_runaway_rule_is_answered_by_on_error_within_the_deadline() {
    // One thread for all three reviews: each runaway rule must give it back
    // at its deadline (`policy::jq::ticks`).
    let decider = Decider::new(1, 1).unwrap();
    let health = Arc::new(Health::default());
    health
        .policy_loaded
        .store(true, std::sync::atomic::Ordering::SeqCst);
    health
        .tls_bound
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let review = fixture("deployment-update-image.json");
    // Deny runs the rule itself; allow then waits in the queue behind it, which
    // counts against the same deadline.
    for on_error in [OnError::Deny, OnError::Allow] {
        let mut app = app_with(runaway_policy(), on_error, decider.clone());
        app.reviewer.decision_timeout = Duration::from_millis(200);
        let app = Arc::new(app);
        let metrics = app.reviewer.metrics.clone();
        let started = std::time::Instant::now();
        let pending = tokio::spawn(post(router(app), "/validate", review.clone()));
        wait_until("a decision thread is busy", || decider.busy() == 1).await;
        let webhook = tokio::runtime::Handle::current();
        let probes = probes::router(health.clone(), metrics.clone(), webhook);
        for path in ["/healthz", "/readyz"] {
            let response = probes
                .clone()
                .oneshot(Request::get(path).body(Body::empty()).unwrap())
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{path}");
        }
        let (status, v) = pending.await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(status, StatusCode::OK, "{v}");
        assert_on_error(
            &v,
            on_error,
            "5b1a7f2e-9f7c-4d8e-8a51-2f4c1d9e0a11",
            "the decision exceeded its deadline of 200ms",
        );
        assert_eq!(metrics.decision_timeouts.get(), 1);
        assert_eq!(metrics.internal_errors.get(), 1);
        assert!(
            metrics
                .encode()
                .contains("driftguard_decision_timeouts_total 1\n")
        );
    }
    // The rule's checkpoints stopped it at the deadline: the only thread is
    // free, and an ordinary review is decided on it.
    wait_until("the decision thread is freed", || decider.busy() == 0).await;
    let policy = Policy::from_yaml("mode: enforce\n", "plain.yaml").unwrap();
    let app = Arc::new(app_with(policy, OnError::Deny, decider.clone()));
    let metrics = app.reviewer.metrics.clone();
    let (status, v) = post(router(app), "/validate", review).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(metrics.decision_timeouts.get(), 0, "{v}");
    assert_eq!(metrics.internal_errors.get(), 0, "{v}");
}

/// A small review is decided on the thread that read it, but never its jq
/// rules: the runaway rule must end up on the pool, answered at the deadline.
/// The review runs on a runtime of its own thread, so that a rule run there
/// shows as no answer within 30 s rather than as a test that never ends.
#[test]
fn a_jq_rule_never_runs_on_the_thread_that_read_the_review() {
    let (done, answered) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let answer = runtime.block_on(async {
            let mut app = app_with(runaway_policy(), OnError::Deny, Decider::new(1, 1).unwrap());
            app.reviewer.decision_timeout = Duration::from_millis(200);
            let small = fixture("deployment-update-image.json");
            assert!(small.len() <= app.reviewer.decide_here_max_bytes);
            post(router(Arc::new(app)), "/validate", small).await
        });
        let _ = done.send(answer);
    });
    let (status, v) = answered
        .recv_timeout(Duration::from_secs(30))
        .expect("no answer: the jq rule ran on the thread that read the review");
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_on_error(
        &v,
        OnError::Deny,
        "5b1a7f2e-9f7c-4d8e-8a51-2f4c1d9e0a11",
        "the decision exceeded its deadline of 200ms",
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

/// A scale write's parent is read within the review's one deadline: an
/// apiserver that never answers costs `--decision-timeout`, then
/// `--on-error` answers, well inside the webhook's 5 s `timeoutSeconds`.
#[tokio::test]
async fn a_parent_read_that_never_ends_is_cut_at_the_reviews_deadline() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            held.push(stream);
        }
    });
    let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
    let reader = driftguard::cluster::parents::ParentReader::new(
        client,
        Duration::from_secs(10),
        Duration::from_secs(10),
    );
    let mut app = app_with(
        Policy::embedded(),
        OnError::Deny,
        Decider::new(2, 16).unwrap(),
    );
    app.reviewer.parents = Some(Arc::new(reader));
    app.reviewer.decision_timeout = Duration::from_millis(500);
    let started = std::time::Instant::now();
    let (status, v) = post(
        router(Arc::new(app)),
        "/validate",
        fixture("deployment-scale.json"),
    )
    .await;
    let took = started.elapsed();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["response"]["allowed"], json!(false), "{v}");
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    hold.abort();
}
