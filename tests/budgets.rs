//! Bounded memory and CPU per review, on the real server binary over TLS:
//! the largest reviews the apiserver can send, in parallel, neither kill
//! driftguard (its peak RSS stays under the chart's memory limit) nor keep
//! an ordinary review from its answer, and reviews that would run long end
//! at their deadline and free their decision thread.

use driftguard_testkit::big_reviews as big;
use driftguard_testkit::flood;
use driftguard_testkit::process;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use driftguard::certs::Authority;
use flood::{metric, post_fresh};
use process::*;
use serde_json::{Value, json};

/// The chart's memory limit (charts/driftguard/values.yaml).
const CHART_LIMIT_BYTES: u64 = 256 * 1024 * 1024;
const NORMAL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/deployment-update-image.json"
);
/// The uid of every review here.
const UID: &str = "5b1a7f2e-9f7c-4d8e-8a51-2f4c1d9e0a11";

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("budgets-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn start(dir: &Path, ca: &Authority, extra: &[&str]) -> Served {
    let (cert, key) = ca.leaf("server", &["127.0.0.1".into()], &[]).unwrap();
    std::fs::write(dir.join("tls.crt"), cert).unwrap();
    std::fs::write(dir.join("tls.key"), key).unwrap();
    let args: Vec<String> = [
        format!("--tls-cert={}", dir.join("tls.crt").display()),
        format!("--tls-key={}", dir.join("tls.key").display()),
        "--shutdown-delay=0s".into(),
        "--no-cluster".into(),
    ]
    .into_iter()
    .chain(extra.iter().map(|a| a.to_string()))
    .collect();
    serve_driftguard(Path::new(env!("CARGO_BIN_EXE_driftguard")), 0, &args)
}

fn review(
    kind: &str,
    group: &str,
    resource: &str,
    op: &str,
    obj: Value,
    old: Option<Value>,
) -> Vec<u8> {
    let gvk = json!({"group": group, "version": "v1", "kind": kind});
    let gvr = json!({"group": group, "version": "v1", "resource": resource});
    let mut request = json!({
        "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": obj["metadata"]["name"], "namespace": "production", "operation": op,
        "userInfo": {"username": "alice", "groups": ["developers", "system:authenticated"]},
        "dryRun": false, "object": obj,
    });
    if let Some(old) = old {
        request["oldObject"] = old;
    }
    // As the apiserver writes it: `uid` first in the request (serde_json
    // would sort it after the objects).
    let rest = serde_json::to_string(&request).unwrap();
    format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"{UID}",{}}}"#,
        &rest[1..]
    )
    .into_bytes()
}

/// A CREATE of an Argo CD-tracked Deployment with `n` env vars and the
/// managedFields the apiserver adds (scripts/gen-big-reviews.py
/// deployment-env): 70,000 is just under the 8 MiB body limit.
fn deployment_env(n: usize) -> Vec<u8> {
    let env: Vec<Value> = (0..n)
        .map(|i| json!({"name": format!("VARIABLE_{i:06}"), "value": format!("value-{i:06}")}))
        .collect();
    let mut fields = serde_json::Map::new();
    fields.insert(".".into(), json!({}));
    for i in 0..n {
        fields.insert(
            format!("k:{{\"name\":\"VARIABLE_{i:06}\"}}"),
            json!({".": {}, "f:name": {}, "f:value": {}}),
        );
    }
    let obj = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "big", "namespace": "production",
            "annotations": {"argocd.argoproj.io/tracking-id": "myapp:apps/Deployment:production/big"},
            "managedFields": [{"manager": "kubectl-create", "operation": "Update", "apiVersion": "apps/v1",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"app\"}": {".": {}, "f:env": fields, "f:image": {}, "f:name": {}}}}}}}}]},
        "spec": {"selector": {"matchLabels": {"app": "big"}}, "template": {
            "metadata": {"labels": {"app": "big"}},
            "spec": {"containers": [{"name": "app", "image": "app:1", "env": env}]}}}
    });
    review("Deployment", "apps", "deployments", "CREATE", obj, None)
}

/// The server's peak RSS so far (VmHWM), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

fn post(
    addr: SocketAddr,
    ca: &Authority,
    body: &[u8],
    within: Duration,
) -> Result<(u16, String), String> {
    post_fresh(
        addr,
        &ca.cert_pem,
        "/validate",
        body,
        Duration::ZERO,
        within,
    )
}

/// The ordinary review is judged (denied as drift), not answered by `--on-error`.
fn judged_normally((status, text): &(u16, String)) -> bool {
    *status == 200
        && text.contains(UID)
        && text.contains("\"allowed\":false")
        && !text.contains("--on-error")
}

#[test]
fn ten_maximal_reviews_at_once_stay_under_the_chart_limit_and_a_normal_one_is_judged() {
    let dir = scratch("memory");
    let ca = Authority::new("test CA").unwrap();
    // Debug builds move 80 MB through TLS slowly: time enough for the bodies.
    // A body limit over what the budget fits, so that the budget is what refuses.
    let mut server = start(
        &dir,
        &ca,
        &["--body-timeout=60s", "--max-body-bytes=8388608"],
    );
    let addr: SocketAddr = ([127, 0, 0, 1], server.port).into();
    let pid = server.proc.child.id();
    let big = std::sync::Arc::new(deployment_env(70_000));
    assert!(
        big.len() > 8_000_000 && big.len() <= 8 << 20,
        "{} bytes",
        big.len()
    );
    let senders: Vec<_> = (0..10)
        .map(|_| {
            let (big, ca_pem) = (big.clone(), ca.cert_pem.clone());
            std::thread::spawn(move || {
                post_fresh(
                    addr,
                    &ca_pem,
                    "/validate",
                    &big,
                    Duration::ZERO,
                    Duration::from_secs(120),
                )
            })
        })
        .collect();
    let normal = post(
        addr,
        &ca,
        &std::fs::read(NORMAL).unwrap(),
        Duration::from_secs(60),
    );
    let answers: Vec<_> = senders.into_iter().map(|s| s.join().unwrap()).collect();
    assert!(server.proc.alive(), "{}", server.proc.stderr_tail(20));
    let normal = normal.unwrap();
    assert!(judged_normally(&normal), "{normal:?}");
    for answer in &answers {
        // Each got an AdmissionReview with its uid, by --on-error (deny).
        let (status, text) = answer.as_ref().unwrap();
        assert_eq!(*status, 200, "{text}");
        assert!(
            text.contains(UID) && text.contains("\"allowed\":false"),
            "{text}"
        );
    }
    let peak = peak_rss(pid);
    assert!(
        peak < CHART_LIMIT_BYTES,
        "peak RSS {} MiB over the chart's limit",
        peak >> 20
    );
    assert!(metric(server.probe, "driftguard_memory_budget_refused_total") >= 1.0);
    server.proc.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Four reviews that cost the most decision work, on two decision threads,
/// alongside an ordinary one: the ordinary one is judged within its
/// deadline, and the four end by theirs. Before the reapplied-field check
/// was made O(n log n), each held its thread for tens of seconds and the
/// ordinary review timed out.
#[test]
fn four_abusive_reviews_do_not_starve_a_normal_one() {
    let dir = scratch("cpu");
    let ca = Authority::new("test CA").unwrap();
    let timeout = Duration::from_secs(10);
    // The memory budget is not what is tested here: room for all five.
    let mut server = start(
        &dir,
        &ca,
        &[
            "--decision-threads=2",
            "--decision-timeout=10s",
            "--memory-budget-bytes=2147483648",
        ],
    );
    let addr: SocketAddr = ([127, 0, 0, 1], server.port).into();
    let abusive = std::sync::Arc::new(big::configmap_patch(40_000, true));
    let started = Instant::now();
    let senders: Vec<_> = (0..4)
        .map(|_| {
            let (body, ca_pem) = (abusive.clone(), ca.cert_pem.clone());
            std::thread::spawn(move || {
                let sent = Instant::now();
                let answer = post_fresh(
                    addr,
                    &ca_pem,
                    "/validate",
                    &body,
                    Duration::ZERO,
                    Duration::from_secs(120),
                );
                (answer, sent.elapsed())
            })
        })
        .collect();
    // Sent once the four are queued or deciding.
    std::thread::sleep(Duration::from_millis(300));
    let normal = post(
        addr,
        &ca,
        &std::fs::read(NORMAL).unwrap(),
        Duration::from_secs(60),
    );
    let normal = normal.unwrap();
    assert!(
        judged_normally(&normal),
        "the normal review was not judged ({:?} after the flood started): {normal:?}",
        started.elapsed()
    );
    for sender in senders {
        let (answer, took) = sender.join().unwrap();
        let (status, text) = answer.unwrap();
        assert!(status == 200 && text.contains(UID), "{status} {text}");
        // Denied as drift, or answered by --on-error at the deadline.
        assert!(text.contains("\"allowed\":false"), "{text}");
        assert!(
            took < timeout + Duration::from_secs(5),
            "answered after {took:?}"
        );
    }
    assert!(server.proc.alive());
    server.proc.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Reviews that cannot finish within a short deadline are stopped at it by
/// the decision's own checkpoints: their threads are free again, so an
/// ordinary review sent right after them is judged.
#[test]
fn decisions_past_their_deadline_free_their_threads() {
    let dir = scratch("deadline");
    let ca = Authority::new("test CA").unwrap();
    let mut server = start(
        &dir,
        &ca,
        &[
            "--decision-threads=2",
            "--decision-timeout=3s",
            "--memory-budget-bytes=2147483648",
        ],
    );
    let addr: SocketAddr = ([127, 0, 0, 1], server.port).into();
    // Far more work than 3 s (the body and its parse take part of it too):
    // it ends by the deadline only if stopped.
    let abusive = std::sync::Arc::new(big::configmap_patch(150_000, true));
    let senders: Vec<_> = (0..4)
        .map(|_| {
            let (body, ca_pem) = (abusive.clone(), ca.cert_pem.clone());
            std::thread::spawn(move || {
                post_fresh(
                    addr,
                    &ca_pem,
                    "/validate",
                    &body,
                    Duration::ZERO,
                    Duration::from_secs(120),
                )
            })
        })
        .collect();
    for sender in senders {
        let (status, text) = sender.join().unwrap().unwrap();
        assert!(
            status == 200 && text.contains("exceeded its deadline"),
            "{status} {text}"
        );
    }
    let timeouts = metric(server.probe, "driftguard_decision_timeouts_total");
    assert_eq!(timeouts, 4.0);
    // None ran to its end: each was stopped at a checkpoint (counted when a
    // check finds its deadline passed, which without checkpoints never
    // happens) or, its
    // deadline passed in the queue, never started. The wait covers a loaded
    // machine's scheduling, not the decisions' length.
    let ended = || {
        metric(server.probe, "driftguard_decisions_stopped_total")
            + metric(server.probe, "driftguard_decisions_skipped_total")
    };
    let ended = (0..240).find_map(|_| {
        let n = ended();
        (n >= 4.0).then_some(n).or_else(|| {
            std::thread::sleep(Duration::from_millis(250));
            None
        })
    });
    let stopped = metric(server.probe, "driftguard_decisions_stopped_total");
    assert!(
        ended == Some(4.0) && stopped >= 1.0,
        "the four decisions were neither stopped at a checkpoint nor skipped: {ended:?} ({stopped} stopped)"
    );
    // Their threads are free: an ordinary review is judged.
    let body = std::fs::read(NORMAL).unwrap();
    let judged = (0..20).any(|_| {
        post(addr, &ca, &body, Duration::from_secs(30)).is_ok_and(|a| judged_normally(&a)) || {
            std::thread::sleep(Duration::from_millis(250));
            false
        }
    });
    assert!(
        judged,
        "no decision thread came back after the four were stopped"
    );
    server.proc.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The body limit's default is what the budget fits: a body past it is
/// refused by size (413) before any of it is held, not after.
#[test]
fn the_default_body_limit_is_what_the_budget_fits() {
    let dir = scratch("default-limit");
    let ca = Authority::new("test CA").unwrap();
    let server = start(&dir, &ca, &["--memory-budget-bytes=67108864"]);
    let addr: SocketAddr = ([127, 0, 0, 1], server.port).into();
    // (64 MiB - 2 MiB) / 40 bytes per body byte.
    let fits = (64usize << 20).saturating_sub(2 << 20) / 40;
    let (status, text) = post(addr, &ca, &vec![b' '; fits + 1], Duration::from_secs(60)).unwrap();
    assert_eq!(status, 413, "{text}");
    assert!(
        text.contains(&format!("larger than {fits} bytes")),
        "{text}"
    );
    let normal = post(
        addr,
        &ca,
        &std::fs::read(NORMAL).unwrap(),
        Duration::from_secs(60),
    );
    assert!(judged_normally(&normal.unwrap()));
}
