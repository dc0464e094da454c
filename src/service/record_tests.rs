//! Break-glass records written before the answer, and what the answer tells a dry run.

use std::sync::Mutex;

use http::{Request, Response};
use kube::client::Body;

use super::*;

/// An arming whose record cannot be written (here, 403) is refused with
/// a 500 that says why and changes nothing; with the record written,
/// the same arming is allowed.
#[tokio::test]
async fn an_arming_that_cannot_be_recorded_is_refused() {
    for code in [403u16, 200] {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let service = {
            let asked = asked.clone();
            tower::service_fn(move |request: Request<Body>| {
                let asked = asked.clone();
                async move {
                    asked.lock().unwrap().push(request.uri().path().to_owned());
                    let body = match code {
                        200 => {
                            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "r"}})
                        }
                        _ => {
                            serde_json::json!({"kind": "Status", "code": code, "reason": "Forbidden"})
                        }
                    };
                    let response = Response::builder().status(code);
                    Ok::<_, std::convert::Infallible>(
                        response
                            .body(Body::from(body.to_string().into_bytes()))
                            .unwrap(),
                    )
                }
            })
        };
        let client = kube::Client::new(service, "default");
        let policy = Policy::from_yaml(
            "breakGlass:\n  allowedUsers: [sam]\n  maxDuration: 1h\n",
            "p",
        )
        .unwrap();
        let reviewer = Reviewer {
            policy: PolicyHandle::new(policy),
            sources: None,
            parents: None,
            events: None,
            records: Some(Recorder::new(client, "driftguard")),
            metrics: Arc::new(Metrics::default()),
            decider: Decider::new(1, 4).unwrap(),
            on_error: OnError::Deny,
            decision_timeout: Duration::from_secs(5),
            decide_here_max_bytes: 64 * 1024,
            hub_names: Vec::new(),
        };
        let expires = (Timestamp::now() + jiff::SignedDuration::from_mins(30)).to_string();
        let old = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "prod",
                "annotations": {"argocd.argoproj.io/tracking-id": "app:/ConfigMap:prod/cm"}}});
        let mut new = old.clone();
        new["metadata"]["annotations"]["driftguard.io/break-glass"] = "INC-1".into();
        new["metadata"]["annotations"]["driftguard.io/break-glass-expires"] = expires.into();
        let body = serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": "UPDATE", "name": "cm", "namespace": "prod",
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "userInfo": {"username": "sam"}, "object": new, "oldObject": old}});
        let deadline = Instant::now() + Duration::from_secs(5);
        let answer = reviewer
            .answer(
                Endpoint::Validate,
                serde_json::to_vec(&body).unwrap(),
                Box::new(()),
                deadline,
            )
            .await
            .unwrap();
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        let asked = asked.lock().unwrap().clone();
        assert_eq!(asked.len(), 1, "one record write: {asked:?}");
        assert!(asked[0].starts_with("/api/v1/namespaces/driftguard/configmaps/driftguard-armed-"));
        let response = &answer["response"];
        if code == 403 {
            assert_eq!(response["allowed"], false, "{answer}");
            assert_eq!(response["status"]["code"], 500, "{answer}");
            let message = response["status"]["message"].as_str().unwrap();
            assert!(message.contains("nothing was changed"), "{message}");
            assert!(response["warnings"].is_null(), "{answer}");
            assert_eq!(response["auditAnnotations"]["verdict"], "deny", "{answer}");
        } else {
            assert_eq!(response["allowed"], true, "{answer}");
        }
    }
}

/// What the hub calls this cluster is told in the answer to a dry run
/// of a break-glass arming or ending by someone the policy lets break
/// glass, and only there: not to a real write, not to someone else
/// ending one, not without a hub.
#[tokio::test]
async fn hub_names_are_told_only_to_break_glass_dry_runs_of_those_allowed() {
    let policy = || {
        Policy::from_yaml(
            "breakGlass:\n  allowedUsers: [sam]\n  maxDuration: 1h\n",
            "p",
        )
        .unwrap()
    };
    let spoke = "https://spoke-1.example.com:6443".to_owned();
    let reviewer = |hub_names: Vec<String>| Reviewer {
        policy: PolicyHandle::new(policy()),
        sources: None,
        parents: None,
        events: None,
        records: None,
        metrics: Arc::new(Metrics::default()),
        decider: Decider::new(1, 4).unwrap(),
        on_error: OnError::Deny,
        decision_timeout: Duration::from_secs(5),
        decide_here_max_bytes: 64 * 1024,
        hub_names,
    };
    let expires = (Timestamp::now() + jiff::SignedDuration::from_mins(30)).to_string();
    let plain = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": "prod",
            "annotations": {"argocd.argoproj.io/tracking-id": "app:/ConfigMap:prod/cm"}}});
    let mut armed = plain.clone();
    armed["metadata"]["annotations"]["driftguard.io/break-glass"] = "INC-1".into();
    armed["metadata"]["annotations"]["driftguard.io/break-glass-expires"] = expires.into();
    let told = |warnings: &Value| -> Option<Vec<String>> {
        let warnings: Vec<String> = (warnings.as_array().into_iter().flatten())
            .filter_map(|w| w.as_str().map(str::to_owned))
            .collect();
        crate::cluster::hub::names_told(&warnings).unwrap()
    };
    // (user, old, new, dry run, hub names, told)
    // Ended once it has expired: allowed whoever sends it.
    let mut expired = armed.clone();
    expired["metadata"]["annotations"]["driftguard.io/break-glass-expires"] =
        "2020-01-01T00:00:00Z".into();
    let (arm, end, end_expired) = ((&plain, &armed), (&armed, &plain), (&expired, &plain));
    let cases = [
        ("sam", arm, true, true, true),
        ("sam", end, true, true, true),
        ("sam", end_expired, true, true, true),
        ("sam", arm, false, true, false),
        ("sam", arm, true, false, false),
        ("alex", end_expired, true, true, false),
    ];
    for (user, (old, new), dry_run, hub, want) in cases {
        let names = if hub { vec![spoke.clone()] } else { Vec::new() };
        let body = serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": "UPDATE", "name": "cm", "namespace": "prod",
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "userInfo": {"username": user}, "dryRun": dry_run,
                "object": new, "oldObject": old}});
        let deadline = Instant::now() + Duration::from_secs(5);
        let answer = reviewer(names)
            .answer(
                Endpoint::Validate,
                serde_json::to_vec(&body).unwrap(),
                Box::new(()),
                deadline,
            )
            .await
            .unwrap();
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        let case = format!("{user} dry run {dry_run} hub {hub}: {answer}");
        assert_eq!(answer["response"]["allowed"], true, "{case}");
        let got = told(&answer["response"]["warnings"]);
        assert_eq!(got, want.then(|| vec![spoke.clone()]), "{case}");
    }
}
